"""What a host built from a lock must report: one expectation per pinned component.

Each expectation reads the probe's JSON (checks/probe.py) and returns None when the host matches
the lock, or one line naming the component, the lock's pin and what the host has. Expected
values come from the lock (and the catalog through it), never from a test file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
        expect("torch", lambda p: _equal("torch", lock.torch, (p["torch"] or {}).get("version", "not importable")))
        cuda = _major_minor(lock.cuda) if lock.cuda and lock.torch_cuda != "cpu" else None
        expect("torch-cuda", lambda p: _equal("torch.version.cuda", cuda, (p["torch"] or {}).get("cuda")))
        if lock.nccl and cuda:
            expect("torch-nccl", lambda p: _equal("NCCL loaded by torch", lock.nccl, (p["torch"] or {}).get("nccl")))
        if lock.cudnn and cuda:
            expect("torch-cudnn", lambda p: _equal(
                "cuDNN loaded by torch", ".".join(lock.cudnn.split(".")[:3]), (p["torch"] or {}).get("cudnn")))
    if lock.cuda:
        expect("cuda-runtime", lambda p: _equal("CUDA runtime", _major_minor(lock.cuda), p["cuda_runtime"]))
    if lock.nccl:
        expect("nccl", lambda p: _equal("NCCL", lock.nccl, p["nccl"]))
        expect("one-libnccl", lambda p: None if len(p["libnccl_files"]) == 1
               else f"NCCL: exactly one libnccl must be visible, found {len(p['libnccl_files'])}: "
                    + (", ".join(p["libnccl_files"]) or "none"))
    if lock.cudnn:
        expect("cudnn", lambda p: _equal("cuDNN", ".".join(lock.cudnn.split(".")[:3]), p["cudnn"]))
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
    expect("spotwatch", _spotwatch)
    for name, value in dockerfile.env(lock).items():
        expect(f"env-{name}", lambda p, name=name, value=value: _equal(f"environment {name}", value, p["env"].get(name)))
    return found


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
