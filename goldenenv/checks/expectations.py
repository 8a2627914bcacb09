"""What a host built from a lock must report: one expectation per pinned component.

Each expectation reads the probe's JSON (checks/probe.py) and returns None when the host matches
the lock, or one line naming the component, the lock's pin and what the host has. Expected
values come from the lock (and the catalog through it), never from a test file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from goldenenv import accelerators, catalog, fabrics
from goldenenv.checks.gpu import has_kernels
from goldenenv.images import dockerfile
from goldenenv.images.lock import Lock

Probe = dict[str, Any]


@dataclass(frozen=True)
class Expectation:
    id: str
    verify: Callable[[Probe], str | None]


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _equal(what: str, pinned: str, found: Any) -> str | None:
    return None if found == pinned else f"{what}: lock pins {pinned}, host has {found}"


def expectations(lock: Lock) -> list[Expectation]:
    found: list[Expectation] = []

    def expect(ident: str, verify: Callable[[Probe], str | None]) -> None:
        found.append(Expectation(ident, verify))

    if lock.base.bootstrap:
        distro, release = lock.base.bootstrap.distro, lock.base.bootstrap.release
        expect("os-release", lambda p: _equal(
            "OS", f"{distro} {release}",
            f"{p['os_release'].get('ID')} {p['os_release'].get('VERSION_CODENAME')}"))
    expect("python", lambda p: _equal("Python", lock.python, _major_minor(p["python"])))
    expect("non-root-user", lambda p: None if p["user"]["uid"] != 0 and p["user"]["name"] == lock.user
           else f"user: lock says {lock.user} (non-root), host runs as {p['user']['name']} (uid {p['user']['uid']})")
    expect("pip-check", lambda p: None if p["pip_check"]["rc"] == 0 else f"pip check: {p['pip_check']['out'].strip()}")
    expect("no-unlocked-packages", lambda p: _unlocked(lock, p))
    for name, pin in lock.packages.items():
        expect(f"package-{name}", lambda p, name=name, pin=pin: _equal(
            f"package {name}", pin.version, p["packages"].get(name, "not installed")))

    if lock.torch:
        # torch.__version__ carries the CUDA variant (2.7.0+cu126) even where the wheel's metadata says 2.7.0
        runtime = lock.torch if "+" in lock.torch else f"{lock.torch}+{lock.torch_cuda}"
        expect("torch", lambda p: _equal("torch", runtime, (p["torch"] or {}).get("version", "not importable")))
        cuda = _major_minor(lock.cuda) if lock.cuda and lock.torch_cuda != "cpu" else None
        expect("torch-cuda", lambda p: _equal("torch.version.cuda", cuda, (p["torch"] or {}).get("cuda")))
        if lock.nccl and cuda:
            expect("torch-nccl", lambda p: _equal("NCCL loaded by torch", lock.nccl, (p["torch"] or {}).get("nccl")))
        if lock.cudnn and cuda:
            expect("torch-cudnn", lambda p: _equal(
                "cuDNN loaded by torch", ".".join(lock.cudnn.split(".")[:3]), (p["torch"] or {}).get("cudnn")))
        if cuda and lock.gpu_archs:
            expect("torch-archs", lambda p: _archs(lock, p))
    if lock.cuda:
        expect("cuda-runtime", lambda p: _equal("CUDA runtime", _major_minor(lock.cuda), p["cuda_runtime"]))
    if lock.nccl:
        expect("nccl", lambda p: _equal("NCCL", lock.nccl, p["nccl"]))
    if lock.cudnn:
        expect("cudnn", lambda p: _equal("cuDNN", ".".join(lock.cudnn.split(".")[:3]), p["cudnn"]))
    for library, pinned in (("libnccl", lock.nccl), ("libcudart", lock.cuda), ("libcudnn", lock.cudnn),
                            ("libcublas", lock.torch_cuda not in (None, "cpu"))):
        if pinned:  # one copy of CUDA: the libraries torch loads, never a second toolkit's
            expect(f"one-{library}", lambda p, library=library: _one_copy(library, p))
    if lock.cuda:
        expect("no-cuda-compiler", _no_cuda_compiler)
    if lock.deepspeed_ops:
        expect("no-builder-compiler", lambda p: _no_builder_packages(lock, p))
        ops = catalog.deepspeed_ops()
        for op in lock.deepspeed_ops.prebuilt:
            expect(f"deepspeed-op-{op}", lambda p, op=op: _ds_report_op(op, p))
            expect(f"deepspeed-op-{op}-imports", lambda p, op=op: _op_imports(op, ops[op].module, p))
    if lock.efa:
        efa = lock.efa
        expect("efa-installer", lambda p: None if p["efa_installed"] and efa.installer in p["efa_installed"]
               else f"EFA installer: lock pins {efa.installer}, host has {p['efa_installed'] or 'none'}")
        expect("aws-ofi-nccl", lambda p: None if p["ofi_plugin"] and p["efa_installed"]
               and efa.aws_ofi_nccl in p["efa_installed"]
               else f"aws-ofi-nccl: lock pins {efa.aws_ofi_nccl}, host has {p['ofi_plugin'] or 'no plugin'}")
        expect("libfabric", lambda p: None if p["libfabric"] and p["libfabric"]["rc"] == 0
               else "libfabric: fi_info is missing or fails in /opt/amazon/efa")
    if lock.erdma:
        expect("erdma-provider", lambda p: None if p["erdma_provider"]
               else "eRDMA: no erdma verbs provider (liberdma) under /usr/lib/*/libibverbs")
    if lock.ib:
        expect("ib-provider", lambda p: None if p.get("mlx5_provider")
               else "InfiniBand: no mlx5 verbs provider (libmlx5) under /usr/lib/*/libibverbs")
        for package in lock.ib.packages:  # ibstat and ib_write_bw among them: the node health judge runs them
            name, _, version = package.partition("=")
            expect(f"ib-deb-{name}", lambda p, name=name, version=version: _deb_installed(name, version, p))
    fabric = fabrics.get(lock.fabric)
    if fabric and fabric.plugin_library and getattr(lock, fabric.lock_section) is not None:
        expect("fabric-plugin", lambda p: _plugin_library(fabric, p))
    for family in accelerators.used_by(lock):  # the family's own (Ascend: the base's CANN is the lock's)
        for ident, verify in family.image_checks(lock):
            expect(ident, verify)
    expect("spotwatch", _spotwatch)
    if lock.slurm:
        _expect_slurm(lock, expect)
    for name, value in dockerfile.env(lock).items():
        expect(f"env-{name}", lambda p, name=name, value=value: _equal(f"environment {name}", value, p["env"].get(name)))
    return found


def _expect_slurm(lock: Lock, expect) -> None:
    """Every Slurm, munge and MariaDB package at the lock's pin, and the daemons report that release. (That the image holds no
    munge key is the build test's to prove: the probe runs as the image's user, who cannot look in /etc/munge.)"""
    from goldenenv.images.lock import MARIADB_PACKAGES, MUNGE_PACKAGES, SLURM_PACKAGES

    slurm = lock.slurm
    for name, pinned in ([(n, slurm.version) for n in SLURM_PACKAGES] + [(n, slurm.munge) for n in MUNGE_PACKAGES]
                         + [(n, slurm.mariadb) for n in MARIADB_PACKAGES]):
        expect(f"deb-{name}", lambda p, name=name, pinned=pinned: _equal(
            f"OS package {name}", pinned, p["os_packages"].get(name, "not installed")))
    # slurmdbd is proven by its package pin: it reads slurmdbd.conf even for -V, which only a head has at run time
    for daemon in ("slurmd", "slurmctld"):  # Debian's build says "slurm-wlm 22.05.8", upstream's "slurm 22.05.8"
        expect(f"{daemon}-version", lambda p, daemon=daemon: _reports(
            daemon, slurm.upstream, rf"slurm(-wlm)? {re.escape(slurm.upstream)}\b", p.get("scheduler", {}).get(daemon)))
    munge_upstream = slurm.munge.split(":")[-1].split("-")[0]
    expect("munged-version", lambda p: _reports("munged", munge_upstream, rf"munge-{re.escape(munge_upstream)}\b",
                                                p.get("scheduler", {}).get("munged")))


def _deb_installed(name: str, version: str, probe: Probe) -> str | None:
    """An OS package the lock names is installed, at its version when the lock pins one."""
    found = probe["os_packages"].get(name)
    if found is None:
        return f"OS package {name}: not installed (the lock's fabric section names it)"
    return _equal(f"OS package {name}", version, found) if version else None


def _reports(what: str, pinned: str, pattern: str, found: dict | None) -> str | None:
    """A daemon's version line (`slurmd -V`) names the pinned release."""
    if not found:
        return f"{what}: not on PATH"
    first = found["out"].strip().splitlines()[0] if found["out"].strip() else ""
    if found["rc"] != 0 or not re.match(pattern, first):
        return f"{what}: lock pins {pinned}, it reports {first or 'nothing'} (rc {found['rc']})"
    return None


def _plugin_library(fabric: fabrics.Fabric, probe: Probe) -> str | None:
    """The fabric's NCCL plugin where its image layer puts it (the probe reports every libnccl-net* by its real
    path, so a symlink there to a library beside it counts)."""
    folder = os.path.dirname(fabric.plugin_library)
    found = probe["library_files"].get("libnccl-net", [])
    if any(os.path.dirname(path) == folder for path in found):
        return None
    return (f"{fabric.label} NCCL plugin: expected {fabric.plugin_library} (the {fabric.lock_section} layer), "
            f"found {', '.join(found) or 'no libnccl-net*'}")


def _spotwatch(probe: Probe) -> str | None:
    """The spot-notice watcher is installed where nodes call it, and starts."""
    found = probe.get("spotwatch")
    if not found:
        return f"spot watcher: {dockerfile.SPOTWATCH} is not on PATH"
    if found["path"] != dockerfile.SPOTWATCH:
        return f"spot watcher: expected {dockerfile.SPOTWATCH}, PATH finds {found['path']}"
    if found["rc"] != 0 or "usage: goldenenv-spotwatch" not in found["out"]:
        return f"spot watcher: {found['path']} --help fails (rc {found['rc']}): {found['out'].strip()[-300:]}"
    return None


def _unlocked(lock: Lock, probe: Probe) -> str | None:
    extra = sorted(set(probe["packages"]) - set(lock.packages))
    return f"packages not in the lock: {', '.join(extra)}" if extra else None


def _archs(lock: Lock, probe: Probe) -> str | None:
    """torch carries kernels for every arch of the lock (read from its build, so no GPU is needed)."""
    flags = (probe["torch"] or {}).get("arch_flags") or []
    missing = [a for a in lock.gpu_archs if not has_kernels(flags, a)]
    return (f"torch archs: lock's gpuArchs {', '.join(missing)} not among torch's ({' '.join(flags) or 'none'})"
            if missing else None)


def _one_copy(library: str, probe: Probe) -> str | None:
    files = probe["library_files"][f"{library}.so"]
    return None if len(files) == 1 else \
        f"{library}: exactly one copy must be in the image, found {len(files)}: {', '.join(files) or 'none'}"


def _no_cuda_compiler(probe: Probe) -> str | None:
    """The CUDA compiler and toolkits stay out of the image: no nvcc file anywhere, no /usr/local/cuda*."""
    found = probe["compilers"]["nvcc"] + probe["cuda_toolkits"]
    return f"CUDA compiler in the image (it belongs to the builder stage): {', '.join(found)}" if found else None


def _no_builder_packages(lock: Lock, probe: Probe) -> str | None:
    """The builder's toolkit and compiler packages stay out of the image, unless the lock's base asks for them."""
    base = set(lock.base.bootstrap.packages if lock.base.bootstrap else lock.base.os_packages)
    leaked = [p for p in lock.deepspeed_ops.compiler_packages if p in probe["os_packages"] and p not in base]
    return f"builder compiler packages in the image: {', '.join(leaked)}" if leaked else None


ANSI = re.compile(r"\x1b\[[0-9;]*m")
DS_REPORT_OP = re.compile(r"^(?P<op>[a-z][a-z0-9_]*) \.+ \[(?P<installed>[A-Z]+)\] \.+ \[(?P<compatible>[A-Z]+)\]")


def ds_report_ops(output: str) -> dict[str, tuple[str, str]]:
    """op → (installed, compatible) as `ds_report` prints them: `fused_adam ..... [YES] ...... [OKAY]`."""
    found = {}
    for line in ANSI.sub("", output).splitlines():
        match = DS_REPORT_OP.match(line.strip())
        if match:
            found[match["op"]] = (match["installed"], match["compatible"])
    return found


def _ds_report_op(op: str, probe: Probe) -> str | None:
    report = (probe.get("deepspeed") or {}).get("report")
    if not report:
        return f"DeepSpeed op {op}: no ds_report in the image (is deepspeed installed?)"
    if report["rc"] != 0:
        return f"DeepSpeed op {op}: ds_report fails (rc {report['rc']}): {report['out'].strip()[-300:]}"
    installed, compatible = ds_report_ops(report["out"]).get(op, ("not listed", "not listed"))
    if (installed, compatible) != ("YES", "OKAY"):
        return f"DeepSpeed op {op}: lock prebuilds it, ds_report says installed {installed}, compatible {compatible}"
    return None


def _op_imports(op: str, module: str, probe: Probe) -> str | None:
    done = ((probe.get("deepspeed") or {}).get("imports") or {}).get(module)
    if done is None:
        return f"DeepSpeed op {op}: {module} was not tried"
    return None if done["rc"] == 0 else f"DeepSpeed op {op}: import {module} fails: {done['out'].strip()[-300:]}"


def probe_arguments(lock: Lock) -> list[str]:
    """What the probe is asked to import: the compiled module of every op the lock prebuilds."""
    ops = catalog.deepspeed_ops()
    return [ops[op].module for op in lock.deepspeed_ops.prebuilt] if lock.deepspeed_ops else []
