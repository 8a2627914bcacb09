"""Ascend's compatibility rules: a lock's torch_npu, torch, CANN, Python, NPU driver and wheels against the
family's tables (catalog ascend_torch_npu, ascend_driver, ascend_wheels), each refusal naming both sides.

Below the solver (goldenenv.compat asks the registry for these), so they read only the catalog and the lock.
"""

from __future__ import annotations

from typing import Any

from goldenenv import catalog
from goldenenv.accelerators.model import ERROR, WARNING, Refusal
from goldenenv.catalog import version_tuple

CUDA_DISTRIBUTIONS = ("nvidia-", "cuda-", "triton")
"""Name prefixes of NVIDIA's CUDA libraries and the compilers built on them, as PyPI names them: torch's Linux wheels
from 2.11 require them on aarch64 too, so a torch from PyPI brings them into an NPU image unless its CPU build is
used."""


def _pins(section: Any) -> tuple[str, str]:
    return f"ascend.torchNpu={section.torch_npu}", f"ascend.cann={section.cann}"


def _listed(rows: list[dict[str, str]]) -> str:
    return ", ".join(f"torch_npu {r['torch_npu']} (torch {r['torch']})" for r in rows) or "none"


def torch_npu_row(torch_npu: str) -> dict[str, str] | None:
    return next((r for r in catalog.rows("ascend_torch_npu") if r["torch_npu"] == torch_npu), None)


def check_table(lock: Any) -> list[Refusal]:
    """torch_npu in Ascend's table, built for the lock's CANN and torch, on a Python its torch supports."""
    section = lock.ascend
    row = torch_npu_row(section.torch_npu)
    for_cann = [r for r in catalog.rows("ascend_torch_npu") if r["cann"] == section.cann]
    if row is None:
        return [Refusal("ascend-torch-npu", _pins(section),
                        f"torch_npu {section.torch_npu} is in no row of Ascend's table (catalog ascend_torch_npu), so "
                        f"no CANN is known to run it; for CANN {section.cann} the table lists {_listed(for_cann)}")]
    found = []
    if row["cann"] != section.cann:
        found.append(Refusal("ascend-cann", _pins(section),
                             f"torch_npu {section.torch_npu} is built for CANN {row['cann']} but ascend.cann is "
                             f"{section.cann}: set cann to {row['cann']}, or for CANN {section.cann} pin one of "
                             f"{_listed(for_cann)}"))
    if lock.torch_version != row["torch"]:
        found.append(Refusal("ascend-torch", (f"ascend.torchNpu={section.torch_npu}", f"torch={lock.torch}"),
                             f"torch_npu {section.torch_npu} requires torch {row['torch']} but the lock pins torch "
                             f"{lock.torch}: set torch to {row['torch']}"))
    low, high = version_tuple(row["python_min"]), version_tuple(row["python_max"])
    if not low <= version_tuple(lock.python) <= high:
        found.append(Refusal("ascend-python", (f"ascend.torchNpu={section.torch_npu}", f"python={lock.python}"),
                             f"torch {row['torch']} (for torch_npu {section.torch_npu}) supports Python "
                             f"{row['python_min']} to {row['python_max']} but python is {lock.python}"))
    return found


def check_driver(lock: Any, driver: str | None = None) -> list[Refusal]:
    """The NPU driver (the lock's, or a node's when given) against the pairs a vendor's table gives the lock's CANN."""
    section = lock.ascend
    driver = driver or section.driver
    if driver is None:
        return []
    pairs = [r for r in catalog.rows("ascend_driver") if r["cann"] == section.cann]
    if not pairs:
        # The driver table holds the pairs one vendor table gives (ModelArts'), not Ascend's whole matrix: a CANN it
        # has no row for is one nobody here has paired, not one refused, so the pair is said unproven, not refused.
        return [Refusal("ascend-driver", (f"ascend.cann={section.cann}", f"driver={driver}"),
                        f"no table the catalog holds (ascend_driver) pairs CANN {section.cann} with an NPU driver, so "
                        f"driver {driver} is unproven for it: check Ascend's compatibility page for CANN "
                        f"{section.cann} and `npu-smi info` on a node, or lock a CANN the table pairs with driver "
                        f"{driver}", WARNING)]
    if any(r["driver"] == driver and (section.firmware in (None, r["firmware"])) for r in pairs):
        return []
    known = "; ".join(f"driver {r['driver']} with firmware {r['firmware']} ({r['product']})" for r in pairs)
    firmware = f" with firmware {section.firmware}" if section.firmware else ""
    return [Refusal("ascend-driver", (f"ascend.cann={section.cann}", f"driver={driver}{firmware}"),
                    f"CANN {section.cann} is paired with " + (known or "no NPU driver in catalog ascend_driver")
                    + f", not driver {driver}{firmware}: use the pair the table gives, or the CANN its table pairs "
                      f"with driver {driver}")]


def check_node_driver(lock: Any, driver: str) -> list[Refusal]:
    """A node's NPU driver (its host image's, catalog host_images npu_driver, or the one `check-lock --driver`
    names) against the lock: below the lock's ascend.driver it is refused naming both, as a CUDA lock's driver floor
    is; otherwise against the pairs the vendor's table gives the lock's CANN (check_driver)."""
    section = lock.ascend
    if section.driver and version_tuple(driver) < version_tuple(section.driver):
        return [Refusal("ascend-driver", (f"ascend.driver={section.driver}", f"driver={driver}"),
                        f"the lock pins NPU driver {section.driver} (ascend.driver, paired with CANN {section.cann}) "
                        f"but the node's driver is {driver}, below it: boot a host image with driver "
                        f"{section.driver} (catalog host_images npu_driver, or hostImage {{id, driver}}), or lock a "
                        f"CANN that catalog ascend_driver pairs with driver {driver}")]
    return check_driver(lock, driver)


def check_wheels(lock: Any) -> list[Refusal]:
    """Every pinned wheel the family's table knows is for the lock's platform, and no CUDA library is pinned."""
    section = lock.ascend
    by_hash = {r["sha256"]: r for r in catalog.rows("ascend_wheels")}
    found = []
    for name, pin in sorted(lock.packages.items()):
        for digest in pin.sha256:
            row = by_hash.get(digest)
            if row and row["platform"] != section.platform:
                found.append(Refusal("ascend-wheel-platform",
                                     (f"packages.{name}={pin.version}", f"ascend.platform={section.platform}"),
                                     f"packages.{name} {pin.version} pins {row['file']}, a {row['platform']} wheel, "
                                     f"but the image is {section.platform}: pin the {section.platform} wheel's "
                                     "hash (goldenenv image pin for that platform)"))
    cuda = [name for name in sorted(lock.packages) if name.startswith(CUDA_DISTRIBUTIONS)]
    if cuda:
        found.append(Refusal("ascend-cuda-packages", (f"ascend.torchNpu={section.torch_npu}", f"packages={cuda[0]}"),
                             f"an Ascend image pins CUDA libraries ({', '.join(cuda)}): they run on no NPU and only "
                             f"make the image larger; torch {lock.torch} from PyPI requires them on Linux, so use "
                             "torch's CPU build for it (the torch_npu README installs it from "
                             "download.pytorch.org/whl/cpu), or a torch whose arm64 wheel requires none", ERROR))
    return found


def rules(lock: Any) -> list[Refusal]:
    return check_table(lock) + check_driver(lock) + check_wheels(lock)
