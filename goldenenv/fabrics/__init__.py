"""RDMA and GPU-direct fabrics by name: what each one is, wherever goldenenv needs to know.

A fabric (EFA on AWS, eRDMA on Alibaba Cloud, GPUDirect-TCPX/TCPXO and gIB on Google Cloud, InfiniBand on Azure) is
one folder here, goldenenv/fabrics/<name>/, found without a list to edit, and names no cloud's module (how its
interfaces sit on a node's network cards is the cloud folder's business). It brings: the layer a golden image adds for
it (a template under its templates/image/ and the lock section that pins it, with the section's model), the
environment NCCL needs on a node (catalog fabric_env, any env files of the fabric's own, and any host files the golden
container reads), what its host must run and expose (kernel modules, sidecar daemons, device nodes: goldenenv.nodeboot
turns that declaration into the boot units, the boot check's expectations and the golden container's run, and compat
refuses a host image without the modules), the rules a lock must meet (catalog fabric_min_nccl and fabric_min_cuda,
plus any fabric-specific check in compat), and, in its health.py, how the node health judge counts its devices
(goldenenv.health.judge finds it there) by the rules of its catalog/health_thresholds.csv. Code asks this registry,
never `if fabric ==`.

A fabric folder's __init__.py defines FABRIC (a goldenenv.fabrics.model.Fabric whose name is the folder's), ORDER
(where it is listed: the order the fabrics were added, so a new one goes last and no lock's sections move), and
__all__, the names this package offers for it (its lock section's model, its facts).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from goldenenv.fabrics.model import (DebianPackage, EnvFile, Fabric, PackageVersion, Plugin, RdmaPackages,
                                     ReleaseTag, Sha256, Sidecar, Version)
from goldenenv.fabrics.gpudirect import GPUDIRECT_REGISTRY, GpuDirectTcp


def _fabric_module(name: str) -> ModuleType:
    module = importlib.import_module(f"{__name__}.{name}")
    fabric, order = getattr(module, "FABRIC", None), getattr(module, "ORDER", None)
    if not isinstance(fabric, Fabric) or fabric.name != name or not isinstance(order, int):
        raise RuntimeError(f"goldenenv/fabrics/{name} must define FABRIC, a Fabric named {name!r}, and ORDER, a "
                           "whole number (where it is listed)")
    return module


def discover(path: list[str] | None = None) -> dict[str, ModuleType]:
    """Every fabric folder's module by fabric name, in ORDER: the packages under goldenenv/fabrics (or `path`)."""
    found = [_fabric_module(info.name) for info in pkgutil.iter_modules(path or __path__) if info.ispkg]
    return {module.FABRIC.name: module for module in sorted(found, key=lambda m: (m.ORDER, m.FABRIC.name))}


def offered(modules: dict[str, ModuleType]) -> dict[str, object]:
    """The names the fabric folders offer through this package (each folder's __all__); two offering one name is
    an error, so that no folder's name hides another's."""
    names: dict[str, tuple[str, object]] = {}
    for fabric, module in modules.items():
        for name in module.__all__:
            if name in names or name in globals():
                where = f"goldenenv/fabrics/{names[name][0]}" if name in names else "goldenenv.fabrics"
                raise RuntimeError(f"goldenenv/fabrics/{fabric} offers {name}, which {where} offers too: "
                                   "give it a name of its own")
            names[name] = (fabric, getattr(module, name))
    return {name: value for name, (_, value) in names.items()}


_MODULES = discover()
FABRICS: dict[str, Fabric] = {name: module.FABRIC for name, module in _MODULES.items()}
globals().update(offered(_MODULES))


def get(name: str) -> Fabric | None:
    """The fabric of that name; None for `none` (no RDMA)."""
    return FABRICS.get(name)


def label(name: str) -> str:
    fabric = FABRICS.get(name)
    return fabric.label if fabric else name


def sections() -> tuple[str, ...]:
    """Every fabric's lock section, in the registry's order."""
    return tuple(dict.fromkeys(f.lock_section for f in FABRICS.values()))


__all__ = ["FABRICS", "GPUDIRECT_REGISTRY", "DebianPackage", "EnvFile", "Fabric", "GpuDirectTcp", "PackageVersion",
           "Plugin", "RdmaPackages", "ReleaseTag", "Sha256", "Sidecar", "Version", "discover", "get", "label",
           "sections", *(name for module in _MODULES.values() for name in module.__all__)]
