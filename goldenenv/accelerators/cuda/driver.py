"""CUDA's driver floors: which NVIDIA driver a CUDA toolkit release needs, from this family's catalog tables
(cuda_min_driver: full support per release; minor_compat: the minor-version-compatibility floor per major).

Below the lock model and the solver (goldenenv.compat re-exports these names), so that the image's labels and the
family's record can name the driver floor without importing the solver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.catalog import version_tuple


@dataclass(frozen=True)
class DriverSupport:
    level: str
    """full | minor-version | unsupported"""
    full_minimum: str
    """Driver needed for full support of this CUDA release (catalog cuda_min_driver)."""
    compat_minimum: str
    """Minor-version-compatibility floor for the CUDA major (catalog minor_compat)."""


def at_least(have: str, want: str) -> bool:
    """Version comparison that treats missing components as 0 (12.8 == 12.8.0)."""
    a, b = version_tuple(have), version_tuple(want)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def release_of(cuda: str) -> tuple[str, str]:
    """12.6.3 → ('12.6', 'U3'); 12.8.0 → ('12.8', 'GA')."""
    major, minor, *patch = (cuda.split(".") + ["0"])[:3]
    n = int(re.sub(r"\D", "", patch[0]) or 0)
    return f"{major}.{minor}", "GA" if n == 0 else f"U{n}"


def update_number(release: str) -> int:
    return 0 if release == "GA" else int(release.removeprefix("U"))


def min_driver(cuda: str) -> str:
    """Full-support minimum driver for a toolkit version (12.6.3 → 12.6 U3's minimum).

    An update newer than the table's last one for that minor takes the last listed minimum.
    """
    minor, release = release_of(cuda)
    listed = {update_number(r["release"]): r["min_driver"]
              for r in catalog.rows("cuda_min_driver") if r["cuda"] == minor}
    if not listed:
        known = ", ".join(dict.fromkeys(r["cuda"] for r in catalog.rows("cuda_min_driver")))
        raise KeyError(f"CUDA {cuda}: catalog cuda_min_driver lists no {minor} release; it knows {known}")
    wanted = update_number(release)
    at_or_below = [n for n in listed if n <= wanted]
    if not at_or_below:
        raise KeyError(f"CUDA {cuda}: catalog cuda_min_driver has no {minor} GA row")
    return listed[max(at_or_below)]


def compat_minimum(cuda: str, full_minimum: str) -> str:
    """The minor-version floor of the CUDA major; without a catalog row, no minor-version support."""
    major = cuda.split(".")[0]
    for r in catalog.rows("minor_compat"):
        if r["cuda_major"] == major:
            return r["min_driver"]
    return full_minimum


def driver_support(cuda: str, driver: str) -> DriverSupport:
    """How well a node's driver runs code built with this toolkit."""
    full = min_driver(cuda)
    compat = compat_minimum(cuda, full)
    if at_least(driver, full):
        level = "full"
    elif at_least(driver, compat):
        level = "minor-version"
    else:
        level = "unsupported"
    return DriverSupport(level, full, compat)
