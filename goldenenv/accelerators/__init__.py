"""Accelerator families by name: NVIDIA CUDA and Huawei Ascend, wherever goldenenv needs to know.

A family is one folder here, goldenenv/accelerators/<name>/, found without a list to edit, like the fabrics. Its
__init__.py defines ACCELERATOR (a goldenenv.accelerators.model.Accelerator whose name is the folder's), ORDER (where
it is listed: the order the families were added, so a new one goes last) and __all__ (the names it offers through
this package: its lock section's model). Its catalog/ holds its compatibility tables (read by goldenenv.catalog like
a cloud's or fabric's rows) and its templates/ its image layer. Code asks this registry, never `if cuda`.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any

from goldenenv import catalog
from goldenenv.accelerators.model import Accelerator, Collective, Refusal


def _module(name: str) -> ModuleType:
    module = importlib.import_module(f"{__name__}.{name}")
    accelerator, order = getattr(module, "ACCELERATOR", None), getattr(module, "ORDER", None)
    if not isinstance(accelerator, Accelerator) or accelerator.name != name or not isinstance(order, int):
        raise RuntimeError(f"goldenenv/accelerators/{name} must define ACCELERATOR, an Accelerator named {name!r}, "
                           "and ORDER, a whole number (where it is listed)")
    return module


def discover(path: list[str] | None = None) -> dict[str, ModuleType]:
    """Every family folder's module by name, in ORDER: the packages under goldenenv/accelerators (or `path`)."""
    found = [_module(info.name) for info in pkgutil.iter_modules(path or __path__) if info.ispkg]
    return {module.ACCELERATOR.name: module for module in sorted(found, key=lambda m: (m.ORDER, m.ACCELERATOR.name))}


_MODULES = discover()
ACCELERATORS: dict[str, Accelerator] = {name: module.ACCELERATOR for name, module in _MODULES.items()}
globals().update({name: getattr(module, name) for module in _MODULES.values() for name in module.__all__})


def get(name: str) -> Accelerator | None:
    return ACCELERATORS.get(name)


def sections() -> tuple[str, ...]:
    """Every family's lock section (the families whose pins are a section of their own), in the registry's order."""
    return tuple(a.lock_section for a in ACCELERATORS.values() if a.lock_section)


def used_by(lock: Any) -> list[Accelerator]:
    """The families whose pins the lock sets: none for a CPU image, one for an accelerator image."""
    return [a for a in ACCELERATORS.values() if a.uses(lock)]


def of_lock(lock: Any) -> Accelerator | None:
    """The family a lock is built for; None for a CPU image (the lock's validator refuses two)."""
    found = used_by(lock)
    return found[0] if found else None


def of_device(device: str) -> Accelerator | None:
    """The family of a device as catalog gpus.csv names it (H100-80GB, 910B3); None for one the catalog lacks or
    whose vendor no family has."""
    vendor = next((r["vendor"] for r in catalog.rows("gpus") if r["gpu"] == device), None)
    return of_vendor(vendor) if vendor else None


def of_instance(cloud: str, instance_type: str) -> Accelerator | None:
    """The family of a catalog instance type's devices; None for a CPU type or one the catalog lacks."""
    node = catalog.instance_types(cloud).get(instance_type)
    return of_device(node.gpu.name) if node and node.gpu else None


def of_vendor(vendor: str) -> Accelerator | None:
    """The family whose devices have this vendor (catalog gpus.csv's vendor column); None when no family has it."""
    return next((a for a in ACCELERATORS.values() if a.vendor == vendor), None)


__all__ = ["ACCELERATORS", "Accelerator", "Collective", "Refusal", "discover", "get", "of_device", "of_instance",
           "of_lock", "of_vendor", "sections", "used_by",
           *(name for module in _MODULES.values() for name in module.__all__)]
