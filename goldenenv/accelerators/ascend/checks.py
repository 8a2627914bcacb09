"""What an Ascend image and node must report, read from the probe's `ascend` facts (goldenenv/checks/probe.py):
each check returns None when the host matches the lock, or one line naming the component, the lock's pin and what
the host has.

Two sets: the image's (CANN in the base is the lock's release), which hold wherever the image runs, and the node's
(the NPU driver the lock names, npu-smi listing healthy NPUs, torch_npu seeing them and the CANN it was built for),
which need the driver's mounts and the NPUs and so only a real Ascend host proves. Health words are npu-smi's five:
OK, Warning, Alarm, Critical, UNKNOWN (Ascend's npu-smi reference, docs/research/huawei.md §4.2); npu-smi's table is
read by the node health judge's reader (health.py beside this file), so the check and the judge read it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from goldenenv.accelerators.ascend.health import parse_npu_smi_info

Probe = dict[str, Any]
Check = tuple[str, Callable[[Probe], str | None]]


def _ascend(probe: Probe) -> dict[str, Any]:
    return probe.get("ascend") or {}


def _cann(lock: Any, install_info: str) -> Callable[[Probe], str | None]:
    def verify(probe: Probe) -> str | None:
        if not _ascend(probe):
            return f"CANN: lock pins {lock.ascend.cann}, host has no /usr/local/Ascend"
        found = (_ascend(probe).get("cann") or {}).get(install_info)
        if found is None:
            listed = ", ".join(_ascend(probe).get("cann") or {}) or "none"
            return f"CANN: lock pins {lock.ascend.cann}, host has no {install_info} (version files: {listed})"
        have = found.get("version")
        return None if have == lock.ascend.cann else f"CANN: lock pins {lock.ascend.cann}, host has {have}"
    return verify


def _driver(lock: Any) -> Callable[[Probe], str | None]:
    def verify(probe: Probe) -> str | None:
        info = _ascend(probe).get("driver")
        if info is None:
            return f"NPU driver: lock pins {lock.ascend.driver}, host has no /usr/local/Ascend/driver/version.info"
        have = info.get("Version")
        return None if have == lock.ascend.driver else f"NPU driver: lock pins {lock.ascend.driver}, host has {have}"
    return verify


def _npu_health(probe: Probe) -> str | None:
    ran = _ascend(probe).get("npu_smi")
    if ran is None:
        return "npu-smi: not on PATH (the driver's npu-smi is mounted into the container on an Ascend node)"
    if ran["rc"] != 0:
        return f"npu-smi info: exit {ran['rc']}: {ran['out'].strip()[-300:]}"
    listed, _ = parse_npu_smi_info(ran["out"])
    if not listed:
        return "npu-smi info: lists no NPU"
    unhealthy = [f"NPU {n.index} ({n.name}) {n.health}" for n in listed if n.health != "OK"]
    return f"npu-smi info: health not OK: {', '.join(unhealthy)}" if unhealthy else None


def _torch_npu(lock: Any) -> Callable[[Probe], str | None]:
    def verify(probe: Probe) -> str | None:
        facts = _ascend(probe).get("torch_npu")
        if facts is None:
            return f"torch_npu: lock pins {lock.ascend.torch_npu}, not installed where the probe ran"
        if "error" in facts:
            return f"torch_npu: does not import: {facts['error'].strip()[-300:]}"
        if not facts.get("available") or not facts.get("count"):
            return f"torch_npu: torch_npu.npu.is_available() is {facts.get('available')}, {facts.get('count')} NPUs"
        have = facts.get("cann")
        return None if have == lock.ascend.cann else \
            f"torch_npu: get_cann_version(module='CANN') is {have!r}, lock pins CANN {lock.ascend.cann}"
    return verify


def image_checks(lock: Any, install_info: str) -> list[Check]:
    """What the image must report wherever it runs: the base's CANN is the lock's."""
    return [("ascend-cann", _cann(lock, install_info))]


def node_checks(lock: Any) -> list[Check]:
    """What only an Ascend node shows: its driver (when the lock names one), npu-smi's NPUs healthy, torch_npu seeing
    them and the CANN it runs on."""
    found: list[Check] = [("ascend-driver", _driver(lock))] if lock.ascend.driver else []
    return found + [("ascend-npu-health", _npu_health), ("torch-npu", _torch_npu(lock))]
