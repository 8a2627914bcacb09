"""Rules between an image lock, the catalog and a node's driver and GPU.

Every fact (driver minimums, torch builds and their NCCL, plugin and fabric minimums, instance
GPUs) is read from the catalog; this module only compares. A conflict names the pins that
disagree and what to change, so `plan` can refuse a lock before a node is rented.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from goldenenv import accelerators, catalog, fabrics
from goldenenv.accelerators.cuda.driver import DriverSupport, driver_support, min_driver  # noqa: F401
from goldenenv.accelerators.cuda.driver import at_least as _at_least
from goldenenv.catalog import version_tuple
from goldenenv.images import host as host_layer
from goldenenv.images.lock import Lock
from goldenenv.nodehost import NodeHost, node_host

ERROR = "error"
WARNING = "warning"
_NCCL_REQUIREMENT = re.compile(r"^nvidia[-_.]nccl[-_.]cu\d+\s*==\s*([0-9][0-9.]*)", re.IGNORECASE)


@dataclass(frozen=True)
class Conflict:
    rule: str
    pins: tuple[str, ...]
    """The conflicting pins, as "field=value"."""
    message: str
    severity: str = ERROR


def _same_version(a: str, b: str) -> bool:
    return _at_least(a, b) and _at_least(b, a)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _torch_row(torch: str) -> dict[str, str] | None:
    minor = _major_minor(torch.split("+", 1)[0])
    return next((r for r in catalog.rows("torch_builds") if r["torch"] == minor), None)


def _torch_wheels(lock: Lock, wheelhouse: Path) -> list[Path]:
    spellings = {lock.torch, lock.torch.replace("+", "%2B")}
    wheels = sorted(p for p in wheelhouse.glob("torch-*.whl")
                    if any(fnmatch.fnmatchcase(p.name, f"torch-{s}-*.whl") for s in spellings))
    python_tag = "cp" + lock.python.replace(".", "")
    return sorted(wheels, key=lambda p: f"-{python_tag}-" not in p.name)


def _wheel_nccl(wheel: Path) -> str | None:
    """The nvidia-nccl-cuXX version a wheel's METADATA requires, or None when it requires none."""
    with zipfile.ZipFile(wheel) as whl:
        metadata = next((n for n in whl.namelist() if n.endswith(".dist-info/METADATA")), None)
        if metadata is None:
            raise ValueError(f"{wheel.name} has no *.dist-info/METADATA")
        text = whl.read(metadata).decode("utf-8", errors="replace")
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            m = _NCCL_REQUIREMENT.match(line.removeprefix("Requires-Dist:").strip())
            if m:
                return m.group(1)
    return None


def torch_nccl(lock: Lock, wheelhouse: Path | None = None) -> tuple[str | None, str]:
    """The NCCL version the lock's torch wheel loads, and where that answer came from.

    The wheel's METADATA is authoritative; the catalog's torch_builds row is the fallback.
    """
    if lock.torch is None:
        return None, "the lock pins no torch"
    if lock.torch_cuda == "cpu":
        return None, "cpu build has no NCCL"
    if wheelhouse is not None:
        wheels = _torch_wheels(lock, wheelhouse)
        if wheels:
            version = _wheel_nccl(wheels[0])
            if version is None:
                return None, f"{wheels[0].name} METADATA requires no nvidia-nccl package"
            return version, f"Requires-Dist of {wheels[0].name}"
    row = _torch_row(lock.torch)
    if row is None:
        return None, f"catalog torch_builds has no row for torch {_major_minor(lock.torch_version)}"
    return row["nccl"], f"catalog torch_builds row {row['torch']}"


def _effective_nccl(lock: Lock, wheelhouse: Path | None) -> str | None:
    """The NCCL training runs with: the lock's pin, else the one torch brings."""
    return lock.nccl or torch_nccl(lock, wheelhouse)[0]


def _variant_cuda(variant: str) -> str:
    """cu126 → 12.6, cu118 → 11.8, cu130 → 13.0."""
    digits = variant.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def _check_torch_cuda(lock: Lock) -> list[Conflict]:
    if lock.torch is None or lock.torch_cuda is None:
        return []
    torch_pin = f"torch={lock.torch}"
    variant_pin = f"torchCuda={lock.torch_cuda}"
    found = []
    _, _, local = lock.torch.partition("+")
    if local and local != lock.torch_cuda:
        found.append(Conflict("torch-cuda", (torch_pin, variant_pin),
                              f"{torch_pin} is a {local} build but {variant_pin}: make them name the same variant"))
    row = _torch_row(lock.torch)
    if row is None:
        known = ", ".join(r["torch"] for r in catalog.rows("torch_builds"))
        cpu = lock.torch_cuda == "cpu"  # a cpu build needs nothing from the row: no CUDA variant, no NCCL
        found.append(Conflict("unknown-pin", (torch_pin,),
                              f"{torch_pin}: catalog torch_builds knows torch {known}; pin one of those "
                              "or add a row with its source", WARNING if cpu else ERROR))
        return found
    if lock.torch_cuda == "cpu":
        return found
    variants = row["cuda_variants"].split()
    if lock.torch_cuda not in variants:
        found.append(Conflict("torch-cuda", (torch_pin, variant_pin),
                              f"{torch_pin} has no {lock.torch_cuda} build ({variant_pin}); torch {row['torch']} "
                              f"is built for {', '.join(variants)}: change torchCuda or torch"))
    if lock.cuda and _major_minor(lock.cuda) != _variant_cuda(lock.torch_cuda):
        want = _variant_cuda(lock.torch_cuda)
        found.append(Conflict("torch-cuda", (variant_pin, f"cuda={lock.cuda}"),
                              f"{variant_pin} ({torch_pin}) is built for CUDA {want} but cuda={lock.cuda}: "
                              f"set cuda to a {want}.x release or torchCuda to cu{lock.cuda.split('.')[0]}"
                              f"{lock.cuda.split('.')[1]}"))
    return found


def _check_torch_nccl(lock: Lock, wheelhouse: Path | None) -> list[Conflict]:
    if not lock.nccl or lock.torch_cuda in (None, "cpu"):
        return []
    bundled, source = torch_nccl(lock, wheelhouse)
    pins = (f"nccl={lock.nccl}", f"torch={lock.torch}")
    if bundled is None:
        return [Conflict("torch-nccl", pins,
                         f"cannot tell which NCCL torch={lock.torch} loads ({source}), so nccl={lock.nccl} "
                         "is unchecked: add the torch wheel to the wheelhouse", WARNING)]
    if _same_version(bundled, lock.nccl):
        return []
    return [Conflict("torch-nccl", pins,
                     f"torch={lock.torch} loads its own NCCL {bundled} ({source}) but nccl={lock.nccl}: "
                     f"set nccl (and packages.nvidia-nccl-cu12) to {bundled}, or two NCCLs end up in the image")]


def _check_cuda_known(lock: Lock) -> list[Conflict]:
    if not lock.cuda:
        return []
    try:
        min_driver(lock.cuda)
    except KeyError as e:
        return [Conflict("cuda-driver", (f"cuda={lock.cuda}",),
                         f"{e.args[0]}: no minimum driver can be derived; pin a listed release "
                         "or add its row to cuda_min_driver.csv")]
    return []


def _arch_min_cuda(arch: str) -> str | None:
    return next((r["min_cuda"] for r in catalog.rows("arch_min_cuda") if r["arch"] == arch), None)


def _check_arch(lock: Lock, arch: str) -> list[Conflict]:
    minimum = _arch_min_cuda(arch)
    if minimum is None:
        known = ", ".join(r["arch"] for r in catalog.rows("arch_min_cuda"))
        return [Conflict("unknown-pin", (f"gpuArchs={arch}",),
                         f"gpuArchs={arch}: catalog arch_min_cuda knows {known}; fix the arch or add its row")]
    if lock.cuda and not _at_least(lock.cuda, minimum):
        return [Conflict("arch-cuda", (f"gpuArchs={arch}", f"cuda={lock.cuda}"),
                         f"{arch} needs CUDA >= {minimum} but cuda={lock.cuda}: raise cuda (and torchCuda) "
                         f"or drop {arch} from gpuArchs")]
    return []


def _ofi_row(plugin: str) -> dict[str, str] | None:
    """The most specific aws_ofi_nccl row: the exact version, else its major.minor series."""
    table = catalog.rows("aws_ofi_nccl")
    exact = next((r for r in table if _same_version(r["aws_ofi_nccl"], plugin)
                  and r["aws_ofi_nccl"].count(".") >= 2), None)
    return exact or next((r for r in table if r["aws_ofi_nccl"] == _major_minor(plugin)), None)


def _check_efa(lock: Lock, nccl: str | None) -> list[Conflict]:
    """EFA's own rules: its installer bundles one aws-ofi-nccl (catalog efa_installer), whose NCCL range is known."""
    if lock.efa is None:
        return []
    efa = lock.efa
    installer_pin, plugin_pin = f"efa.installer={efa.installer}", f"efa.awsOfiNccl={efa.aws_ofi_nccl}"
    found = []
    if not getattr(efa, "installer_sha256", None):
        found.append(Conflict("efa-installer-unverified", (installer_pin,),
                              f"{installer_pin} has no efa.installerSha256: add the tarball's sha256 "
                              "(the build refuses an unverified installer)", WARNING))
    installers = catalog.rows("efa_installer")
    row = next((r for r in installers if _same_version(r["efa_installer"], efa.installer)), None)
    if row is None:
        known = ", ".join(r["efa_installer"] for r in installers)
        found.append(Conflict("unknown-pin", (installer_pin,),
                              f"{installer_pin}: catalog efa_installer knows {known}; its bundled aws-ofi-nccl "
                              "is unchecked", WARNING))
    elif not _same_version(row["aws_ofi_nccl"], efa.aws_ofi_nccl):
        others = [r["efa_installer"] for r in installers if _same_version(r["aws_ofi_nccl"], efa.aws_ofi_nccl)]
        alternative = f" or efa.installer to {others[-1]}" if others else ""
        found.append(Conflict("efa-installer", (installer_pin, plugin_pin),
                              f"EFA installer {efa.installer} bundles aws-ofi-nccl {row['aws_ofi_nccl']} but "
                              f"{plugin_pin}: set efa.awsOfiNccl to {row['aws_ofi_nccl']}{alternative}"))
    ofi = _ofi_row(efa.aws_ofi_nccl)
    if ofi is None:
        found.append(Conflict("ofi-nccl", (plugin_pin,),
                              f"{plugin_pin}: catalog aws_ofi_nccl has no row for it or its series, so its "
                              "NCCL range is unchecked", WARNING))
    elif not ofi["min_nccl"]:
        found.append(Conflict("ofi-nccl", (plugin_pin,),
                              f"{plugin_pin}: catalog aws_ofi_nccl row {ofi['aws_ofi_nccl']} gives no minimum "
                              "NCCL, so the NCCL pin is unchecked", WARNING))
    elif nccl and not _at_least(nccl, ofi["min_nccl"]):
        found.append(Conflict("ofi-nccl", (plugin_pin, f"nccl={nccl}"),
                              f"aws-ofi-nccl {efa.aws_ofi_nccl} needs NCCL >= {ofi['min_nccl']} but nccl={nccl}: "
                              f"raise nccl (targets {ofi['target_nccl']}) or pin an older plugin"))
    return found


def _fabric_nccl(lock: Lock, rows: list[dict[str, str]], nccl: str | None, where: str) -> list[Conflict]:
    """The catalog's NCCL and plugin floors (fabric_min_nccl) against the lock's NCCL and its fabric section's plugin:
    each refusal names the lock key and the version it needs."""
    fabric = fabrics.get(lock.fabric)
    plugin = fabric.plugin_pin(getattr(lock, fabric.lock_section)) if fabric else None
    found = []
    for r in rows:
        label = fabrics.label(r["fabric"])
        if nccl and r["min_nccl"] and not _at_least(nccl, r["min_nccl"]):
            found.append(Conflict("fabric-nccl", (f"fabric={lock.fabric}", f"nccl={nccl}"),
                                  f"{label}{where} needs NCCL >= {r['min_nccl']} but nccl={nccl}: raise nccl "
                                  f"(and the nvidia-nccl-cu12 torch loads) to >= {r['min_nccl']}"))
        if r["min_plugin"] and plugin and not _at_least(plugin[1], r["min_plugin"]):
            key, version, name = plugin
            found.append(Conflict("fabric-nccl", (f"fabric={lock.fabric}", f"{key}={version}"),
                                  f"{label}{where} needs {name} >= {r['min_plugin']} but {key}={version}: "
                                  f"set {key} to {r['min_plugin']} or newer (with what it comes with)"))
    return found


def _fabric_rows(fabric: str, instance_type: str) -> list[dict[str, str]]:
    found = fabrics.get(fabric)
    return found.min_nccl(instance_type) if found else []


def check_lock(lock: Lock, wheelhouse: Path | None = None) -> list[Conflict]:
    """Everything wrong with a lock on its own, before any node is chosen."""
    nccl = _effective_nccl(lock, wheelhouse)
    own_torch = any(family.owns_torch for family in accelerators.used_by(lock))
    found = [] if own_torch else _check_torch_cuda(lock)
    found += _check_torch_nccl(lock, wheelhouse)
    found += _check_cuda_known(lock)
    for arch in lock.gpu_archs:
        found += _check_arch(lock, arch)
    found += _check_efa(lock, nccl)
    found += _fabric_nccl(lock, _fabric_rows(lock.fabric, "*"), nccl, "")
    found += _fabric_cuda(lock)
    found += _check_deepspeed_ops(lock)
    for family in accelerators.used_by(lock):  # each family's own rules (Ascend: torch_npu, CANN, wheels)
        found += [Conflict(*refusal) for refusal in family.rules(lock)]
    return found


def _check_deepspeed_ops(lock: Lock) -> list[Conflict]:
    """DeepSpeed on a CUDA torch prebuilds its ops (deepspeedOps), or every node compiles them: a warning."""
    if not lock.deepspeed or lock.torch_cuda in (None, "cpu"):
        return []
    if not lock.deepspeed_ops:
        return [Conflict("deepspeed-jit", (f"deepspeed={lock.deepspeed}",),
                         f"deepspeed={lock.deepspeed} without deepspeedOps: every node compiles DeepSpeed's ops just "
                         "in time, which needs nvcc (not in the image) and minutes per cold start; list the ops in "
                         "deepspeedOps.prebuilt", WARNING)]
    return []


def _fabric_cuda(lock: Lock) -> list[Conflict]:
    """The fabric's CUDA floor (catalog fabric_min_cuda: eRDMA needs CUDA >= 12.1)."""
    fabric = fabrics.get(lock.fabric)
    minimum = fabric.min_cuda() if fabric else None
    if not minimum or not lock.cuda or _at_least(lock.cuda, minimum):
        return []
    return [Conflict("fabric-cuda", (f"fabric={lock.fabric}", f"cuda={lock.cuda}"),
                     f"{fabric.label} needs CUDA >= {minimum} but cuda={lock.cuda}: raise cuda (and torchCuda) "
                     f"to >= {minimum}")]


def _check_fabric_match(lock: Lock, node: catalog.InstanceType) -> list[Conflict]:
    pins = (f"fabric={lock.fabric}", f"instance={node.name}")
    rdma = node.rdma if node.has_rdma else "none"
    if rdma == lock.fabric:
        return []
    if lock.fabric == "none":
        return [Conflict("fabric-mismatch", pins,
                         f"{node.name} has {rdma} but fabric=none: {rdma} stays unused and NCCL falls back to "
                         f"sockets; set fabric to {rdma} with its section", WARNING)]
    if rdma == "none":
        return [Conflict("fabric-mismatch", pins,
                         f"fabric={lock.fabric} but {node.name} has no RDMA interface: NCCL falls back to sockets; "
                         "pick an instance type with it or set fabric to none", WARNING)]
    return [Conflict("fabric-mismatch", pins,
                     f"fabric={lock.fabric} but {node.name} has {rdma}: build an image with fabric {rdma} "
                     f"or pick an instance type with {lock.fabric}")]


def _check_gpu(lock: Lock, node: catalog.InstanceType) -> list[Conflict]:
    gpu = node.gpu
    archs = ",".join(lock.gpu_archs) or "none"
    if not (lock.cuda or lock.gpu_archs or lock.torch_cuda not in (None, "cpu")):
        variant = f"torchCuda={lock.torch_cuda}" if lock.torch_cuda else "torch=none"
        return [Conflict("gpu-arch-missing", (variant, f"instance={node.name}"),
                         f"{variant} and no cuda on {node.name}: its {node.gpu_count} x {gpu.name} GPUs stay "
                         "unused; use a CUDA build of torch or a CPU instance type", WARNING)]
    found = []
    if gpu.arch not in lock.gpu_archs:
        found.append(Conflict("gpu-arch-missing", (f"gpuArchs={archs}", f"instance={node.name}"),
                              f"{node.name} has {gpu.name} ({gpu.arch}) but gpuArchs={archs}: add {gpu.arch} "
                              "(with a torch build for it), or kernels fail with 'no kernel image is available "
                              "for execution on the device'"))
    return found + _check_arch(lock, gpu.arch)


def _check_driver(lock: Lock, node: catalog.InstanceType, driver: str) -> list[Conflict]:
    if not lock.cuda:
        return []
    try:
        support = driver_support(lock.cuda, driver)
    except KeyError:
        return []  # check_lock already names the unknown CUDA release
    pins = (f"cuda={lock.cuda}", f"driver={driver}")
    minor = _major_minor(lock.cuda)
    if support.level == "unsupported":
        return [Conflict("cuda-driver", pins,
                         f"cuda={lock.cuda} needs driver >= {support.full_minimum} (>= {support.compat_minimum} "
                         f"for minor-version compatibility) but driver={driver}: upgrade the driver to "
                         f">= {support.full_minimum} or lower cuda")]
    if support.level == "full":
        return []
    arch_cuda = _arch_min_cuda(node.gpu.arch)
    try:
        gpu_driver = min_driver(arch_cuda) if arch_cuda else None
    except KeyError:
        gpu_driver = None  # an arch older than the driver table: every listed driver knows it
    if gpu_driver and not _at_least(driver, gpu_driver):
        return [Conflict("cuda-driver", pins,
                         f"cuda={lock.cuda} (CUDA {minor}) needs driver >= {support.full_minimum} and "
                         f"driver={driver} predates {node.gpu.name} ({node.gpu.arch}, first in CUDA {arch_cuda}, "
                         f"driver >= {gpu_driver}): upgrade the driver to >= {support.full_minimum}")]
    return [Conflict("cuda-driver", pins,
                     f"cuda={lock.cuda} needs driver >= {support.full_minimum} for full support; driver={driver} "
                     f"is only minor-version compatible (PTX JIT of newer code fails with "
                     f"cudaErrorUnsupportedPtxVersion): upgrade the driver to >= {support.full_minimum} "
                     f"or lower cuda")]


def _unknown_instance(cloud: str, instance_type: str) -> Conflict:
    listed = catalog.instance_types(cloud)
    if not listed:
        clouds = sorted({r["cloud"] for r in catalog.rows("instance_types")})
        hint = f"catalog instance_types lists no cloud {cloud!r}; it knows {', '.join(clouds)}"
    else:
        close = difflib.get_close_matches(instance_type, listed, n=1)
        hint = f"did you mean {close[0]}?" if close else f"{cloud} types: {', '.join(sorted(listed))}"
    return Conflict("unknown-pin", (f"instance={instance_type}",),
                    f"instance type {instance_type!r} is not in the {cloud} catalog: {hint}")


def can_run(lock: Lock, cloud: str, instance_type: str, driver: str | None = None, *,
            wheelhouse: Path | None = None) -> list[Conflict]:
    """Whether an image built from this lock runs on this instance type (and driver, when known)."""
    found = check_lock(lock, wheelhouse)
    try:
        node = catalog.instance_type(cloud, instance_type)
    except KeyError:
        return found + [_unknown_instance(cloud, instance_type)]
    mismatch = _check_family(lock, node)
    found += mismatch or (_check_gpu(lock, node) if _node_family(node) in (None, "cuda") else [])
    found += _check_fabric_match(lock, node)
    found += _fabric_nccl(lock, _fabric_rows(lock.fabric, node.name), _effective_nccl(lock, wheelhouse),
                          f" on {node.name}")
    if driver is not None and not mismatch:
        found += _check_driver(lock, node, driver)
        for family in accelerators.used_by(lock):
            found += [Conflict(*refusal) for refusal in family.driver_rules(lock, driver)]
    return list(dict.fromkeys(found))


def _node_family(node: catalog.InstanceType) -> str | None:
    family = accelerators.of_device(node.gpu.name)
    return family.name if family else None


def _check_family(lock: Lock, node: catalog.InstanceType) -> list[Conflict]:
    """An image of one accelerator family on a node of another (a CUDA image on an NPU pool, or the reverse), or a
    CPU image on a node whose accelerators it cannot use: named with both sides."""
    built, node_family = accelerators.of_lock(lock), accelerators.of_device(node.gpu.name)
    if node_family is None or built is node_family:
        return []
    devices = f"{node.gpu_count} x {node.gpu.name} ({node_family.label} {node_family.device_word}s)"
    if built is None:
        if node_family.name == "cuda":
            return []  # the GPU rules say it, as before the families
        return [Conflict("accelerator-mismatch", (f"image={lock.name} (CPU)", f"instance={node.name}"),
                         f"{lock.name} is a CPU image but {node.name} has {devices}: they stay unused; build an "
                         f"image with an {node_family.lock_section or node_family.name} section", WARNING)]
    return [Conflict("accelerator-mismatch", (f"image={lock.name} ({built.label})", f"instance={node.name}"),
                     f"{lock.name} is built for {built.label} but {node.name} has {devices}: its "
                     f"{built.device_word}s are not there, so nothing in the image can use the node's; use an image "
                     f"built for {node_family.label} on this pool, or a pool with {built.label} "
                     f"{built.device_word}s")]


HOST_LAYER = "host-layer"
"""The rule: a need of a pool's hosts (goldenenv.images.host: the engine; on GPU nodes the driver and the toolkit; the
fabric's kernel modules; the stack's file-system client) that neither its host image is known to carry nor the host
lock's install step provides. plan shows it (a warning: the stack plans, priced, with the need, what the catalog says
and what to write); `up` refuses the pool before anything is rented (automation.guard). An image whose contents the
catalog does not state is never assumed to carry a need."""
HOST_LAYER_COMPAT = "host-layer-compat"
"""The rule: a host-layer component's requirement (catalog host_layer_compat.csv: a driver or kernel range) that the
node's driver or its host image's kernel is outside of. An error: the component would not work on the node."""
HOST_KERNEL_UNKNOWN = "host-kernel-unknown"
"""A component requires a kernel range and the catalog does not state the host image's kernel: a warning, not a
pass."""
HOST_LOCKS = "images/hosts"


def _missing_conflict(found, need, key: str, host: NodeHost, lock: Lock, fabric) -> Conflict:
    """What the pool lacks, what the catalog says of it, and the two ways out: a host lock component for the image's
    OS family, or a host image of the stack's own that has it (with `os` so the install step provides the rest).
    Module names are quoted: a bare [name] reads as console markup."""
    image = (f"hostImage {host.override_id}" if host.override_id
             else f"host image {host.image.name}" if host.image else "the pool's host image")
    said = "as the stack declares it" if host.override_id else "catalog host_images.csv"
    if found.host_lock is None:
        nobody = f"lock {lock.name} names no host lock (host: <name> of {HOST_LOCKS}/<name>.yaml)"
    elif found.family is None:
        nobody = (f"the OS family of {image} is unknown, so host lock {found.host_lock} cannot install on it "
                  f"(write its os)")
    else:
        nobody = f"host lock {found.host_lock} has no component that provides {need.need} for {found.family}"
    family = found.family or "<its OS family: ubuntu-22.04>"
    component = (f"add a component providing {need.need} for {family} to {HOST_LOCKS}/{found.host_lock}.yaml"
                 if found.host_lock else f"name a host lock in lock {lock.name}")
    quoted = [f'"{p.need.split(":", 1)[1]}"' for p in found.provided if p.need.startswith("module:")]
    own = (f"{{id: <image id>, driver: <its NVIDIA driver>, os: {family}"
           + (f", kernelModules: [{', '.join(quoted)}]" if quoted else "") + "}")
    hint = f" ({fabric.host_image_hint})" if fabric and need.need.startswith("module:") and fabric.host_image_hint \
        else ""
    missing = ", ".join(p.need for p in found.missing)
    return Conflict(HOST_LAYER, (f"hostImage={host.override_id or (host.image.name if host.image else '')}",
                                 f"need={need.need}"),
                    f"{key}.hostImage: {image} lacks {need.need} ({need.why}, {said}) and {nobody}: the node's boot "
                    f"units cannot run, so up refuses the pool (missing: {missing}); valid: {component}, or set "
                    f"{key}.hostImage to an image of yours that has it{hint}: {own}", WARNING)


def _requirements() -> list[dict[str, str]]:
    """catalog host_layer_compat.csv (component, version, requires, minimum, maximum, source); none before it
    exists."""
    try:
        return catalog.rows("host_layer_compat")
    except FileNotFoundError:
        return []


def _within(have: str, minimum: str, maximum: str) -> bool:
    """minimum <= have, and have at most maximum in maximum's precision (a kernel 6.8.0-1024-aws is within 6.8)."""
    if minimum and not _at_least(have, minimum):
        return False
    if maximum:
        top = version_tuple(maximum)
        return version_tuple(have)[:len(top)] <= top
    return True


def _range(row: dict[str, str]) -> str:
    return " and ".join(x for x in (f">= {row['minimum']}" if row["minimum"] else "",
                                    f"<= {row['maximum']}" if row["maximum"] else "") if x)


def _check_requirements(found, host: NodeHost, driver: str | None, key: str) -> list[Conflict]:
    """Each component the node runs from the host lock against its catalog requirements: the driver the node runs
    and the host image's kernel."""
    kernel = host.image.kernel if host.image and not host.override_id else ""
    running = {(p.component, p.version) for p in found.provided
               if p.component and p.version and p.by != host_layer.MISSING}
    conflicts = []
    for component, version in sorted(running):
        for row in _requirements():
            if row["component"] != component or row["version"] not in ("*", version):
                continue
            pin = f"{component}={version}"
            where = f"catalog host_layer_compat.csv: {row['source']}" if row.get("source") else \
                "catalog host_layer_compat.csv"
            if row["requires"] == "driver" and driver and not _within(driver, row["minimum"], row["maximum"]):
                conflicts.append(Conflict(HOST_LAYER_COMPAT, (pin, f"driver={driver}"),
                                          f"{key}: {component} {version} (host lock {found.host_lock}) needs driver "
                                          f"{_range(row)} ({where}) but the node runs driver {driver}: pin a "
                                          f"{component} that supports it, or a driver {_range(row)}"))
            elif row["requires"] == "kernel" and not kernel:
                conflicts.append(Conflict(HOST_KERNEL_UNKNOWN, (pin, "kernel=unknown"),
                                          f"{key}: {component} {version} needs kernel {_range(row)} ({where}) and "
                                          f"the catalog does not state the kernel of {host.label}: unchecked, not "
                                          "passed", WARNING))
            elif row["requires"] == "kernel" and not _within(kernel, row["minimum"], row["maximum"]):
                conflicts.append(Conflict(HOST_LAYER_COMPAT, (pin, f"kernel={kernel}"),
                                          f"{key}: {component} {version} (host lock {found.host_lock}) needs kernel "
                                          f"{_range(row)} ({where}) but {host.label} runs kernel {kernel}: pin a "
                                          f"{component} built for it, or another host image"))
    return conflicts


def node_driver(found) -> str | None:
    """The driver a pool's nodes will run for their devices (NVIDIA's, Ascend's NPU driver): the image's, or the
    host lock's when its layer installs or bakes it; None when no one provides one."""
    return next((p.version for p in found.provided if host_layer.is_driver(p.need) and p.by != host_layer.MISSING),
                None)


@dataclass(frozen=True)
class PoolCompat:
    """The lock checked against one pool's instance type, host image and host layer."""

    pool_key: str
    pool: str
    instance_type: str
    host: NodeHost
    lock: str
    conflicts: tuple[Conflict, ...]
    driver_level: str | None
    """full | minor-version | unsupported; None when the driver or the lock's CUDA is unknown."""
    layer: host_layer.HostLayer | None = None
    """Who provides each of the pool's host needs (goldenenv.images.host.layer)."""
    driver: str | None = None
    """The NVIDIA driver the nodes run: the image's, or the host lock's when the install step provides it."""

    @property
    def ok(self) -> bool:
        return not any(c.severity == ERROR for c in self.conflicts)


def check_pools(spec, lock: Lock, pools: list, pool_keys: list[str],
                wheelhouse: Path | None = None) -> list[PoolCompat]:
    """can_run for every pool of a stack with the driver its nodes will run, and its host layer: a need no one
    provides, a component's driver or kernel requirement."""
    checked = []
    for key, pool in zip(pool_keys, pools, strict=True):
        host = node_host(spec.cloud, spec.region, pool.host_image, accelerators.of_instance(spec.cloud,
                                                                                              pool.instance_type))
        found = host_layer.layer(spec, pool, lock)
        driver = node_driver(found)
        conflicts = can_run(lock, spec.cloud, pool.instance_type, driver, wheelhouse=wheelhouse)
        node = catalog.instance_types(spec.cloud).get(pool.instance_type)
        fabric = fabrics.get(node.rdma) if node and node.has_rdma and pool.rdma is not False else None
        conflicts += [_missing_conflict(found, need, key, host, lock, fabric) for need in found.missing]
        conflicts += _check_requirements(found, host, driver, key)
        gpu = bool(node and node.gpu_count)
        if gpu and driver is None and not found.missing:
            conflicts.append(Conflict("host-driver-unknown", (f"instance={pool.instance_type}",),
                                      f"{host.label}: the node's driver is unknown, so cuda={lock.cuda} is unchecked "
                                      "against it; pin a catalog host image or set hostImage {id, driver}", WARNING))
        level = None
        if driver and lock.cuda:
            try:
                level = driver_support(lock.cuda, driver).level
            except KeyError:
                level = None
        checked.append(PoolCompat(key, pool.name, pool.instance_type, host, lock.name, tuple(conflicts), level,
                                  found, driver))
    return checked


def check_stack(spec) -> list[PoolCompat]:
    """The stack's lock against each of its pools; nothing for a cloud without catalog GPU types (local)."""
    from goldenenv.images.lock import load
    from goldenenv.spec import pool_key

    if not catalog.instance_types(spec.cloud):
        return []
    keys = [pool_key(i, len(spec.nodes)) for i in range(len(spec.nodes))]
    return check_pools(spec, load(spec.image.lock), spec.nodes, keys)


SCHEDULER = "scheduler"
"""The rule: a stack with the scheduler (goldenenv:scheduler slurm, the default) needs a lock that pins Slurm at a
release with every feature the cluster uses (catalog slurm_features.csv). One stack-wide error, not one per pool:
every pool runs the same image."""
SCHEDULER_KEY = "goldenenv:scheduler"


def check_scheduler(scheduler: str, lock: Lock, lock_file: str) -> list[Conflict]:
    """The head's slurmctld and every node's slurmd are the golden image's own: without Slurm in the lock, or with a
    Slurm older than a feature the nodes use (dynamic nodes: slurmd -Z), the cluster never gets a queue."""
    if scheduler != "slurm":
        return []
    features = catalog.slurm_features()
    floor = max((f.min_slurm for f in features), key=version_tuple, default="")
    at_least = f" >= {floor}" if floor else ""
    pins = (f"{SCHEDULER_KEY}=slurm", f"lock={lock.name}")
    if lock.slurm is None:
        return [Conflict(SCHEDULER, pins, f"{SCHEDULER_KEY} is slurm (the default when the stack does not set it) "
                         f"but {lock_file} pins no Slurm (no `slurm:` section): the head's slurmctld and the nodes' "
                         f"slurmd run from the golden image, which would have neither; valid: add `slurm:` (version, "
                         f"munge) to {lock_file} with its base distribution's package versions, if that is Slurm"
                         f"{at_least}; or {_elsewhere(floor, lock.name)}")]
    too_old = [f for f in features if not _at_least(lock.slurm.upstream, f.min_slurm)]
    if not too_old:
        return []
    needs = "; ".join(f"{f.feature} need Slurm >= {f.min_slurm}: {f.used_for} ({f.doc})" for f in too_old)
    return [Conflict(SCHEDULER, pins + (f"slurm.version={lock.slurm.version}",),
                     f"{SCHEDULER_KEY} is slurm but {lock_file} pins Slurm {lock.slurm.upstream} (slurm.version "
                     f"{lock.slurm.version}), too old for the cluster: {needs}, catalog slurm_features.csv; "
                     f"valid: a slurm.version{at_least} from the base's distribution, if it ships one; or "
                     f"{_elsewhere(floor, lock.name)}")]


def _elsewhere(floor: str, lock: str) -> str:
    """What a stack can do instead of fixing its lock: another image (the locks here that qualify), or no queue."""
    ready = _locks_with_slurm(floor, lock)
    return (f"set goldenenv:image.lock to an image whose base ships Slurm{f' >= {floor}' if floor else ''}"
            + (f" ({', '.join(ready)} here)" if ready else "")
            + f"; or set {SCHEDULER_KEY}: none (no queue: `goldenenv run` over ssh only)")


def _locks_with_slurm(floor: str, but: str) -> list[str]:
    """The locks in the image folders that pin a Slurm at or above the floor: what goldenenv:image.lock may name."""
    from goldenenv.images.lock import load, names
    from goldenenv.spec import ConfigError

    found = []
    for name in names():
        try:
            other = load(name)
        except ConfigError:
            continue
        if name != but and other.slurm and (not floor or _at_least(other.slurm.upstream, floor)):
            found.append(name)
    return found


def scheduler_conflicts(spec) -> list[Conflict]:
    """check_scheduler for a stack: its scheduler against the lock it names (every cloud, local included)."""
    from goldenenv.images.lock import lock_path, load

    if spec.scheduler != "slurm":
        return []
    return check_scheduler(spec.scheduler, load(spec.image.lock), _shown(lock_path(spec.image.lock)))


def _shown(path: Path) -> str:
    """A lock file as the user would type it: relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
