"""Cluster-wide checks over per-node reports: version drift and all-reduce bandwidth."""

from __future__ import annotations

import json
from collections import Counter

from goldenenv import catalog

DRIFT_KEYS = ("python", "torch", "nccl", "cuda_runtime", "cudnn", "packages", "efa_installed")


def drift(reports: dict[str, dict]) -> list[str]:
    """Every node must report the same versions; each difference names the odd node(s) and both values."""
    problems = []
    for key in DRIFT_KEYS:
        values = {node: json.dumps(report.get(key), sort_keys=True) for node, report in reports.items()}
        common, _ = Counter(values.values()).most_common(1)[0]
        odd = sorted(node for node, value in values.items() if value != common)
        if odd and key == "packages":
            problems += _package_drift(reports, odd, json.loads(common))
        elif odd:
            problems.append(f"{key} differs on {', '.join(odd)}: {values[odd[0]]} (others: {common})")
    return problems


def _package_drift(reports: dict[str, dict], odd: list[str], common: dict) -> list[str]:
    found = []
    for node in odd:
        mine = reports[node].get("packages") or {}
        for name in sorted(set(mine) | set(common)):
            if mine.get(name) != common.get(name):
                found.append(f"package {name} differs on {node}: {mine.get(name, 'absent')} "
                             f"(others: {common.get(name, 'absent')})")
    return found


def parse_allreduce_line(output: str) -> dict | None:
    for line in reversed(output.splitlines()):
        start = line.find('{"event": "allreduce"')
        if start >= 0:
            return json.loads(line[start:])
    return None


def busbw_verdict(instance_type: str, nodes: int, busbw_gbytes: float, min_fraction: float, *,
                  message_bytes: int) -> tuple[bool, str]:
    """Compare a measured all_reduce busbw with the catalog's figure at the size that was measured.

    busbw grows with message size, so a reference at the same size is the fair bar and one at a smaller
    size is a sound lower bar; a larger-size reference would fail a healthy run at a small size, so it is
    never used. A floor (a minimum at some size) follows the same rule.
    """
    measured = f"busbw {busbw_gbytes:.1f} GB/s at {_size(message_bytes)}"
    refs = [r for r in catalog.busbw_references() if r.kind == "reference" and r.instance_type == instance_type
            and r.nodes == nodes]
    usable = [r for r in refs if r.message_bytes <= message_bytes]
    if usable:
        ref = max(usable, key=lambda r: r.message_bytes)
        wanted = ref.busbw_gbytes_per_s * min_fraction
        ok = busbw_gbytes >= wanted
        verdict = (f"{measured} {'>=' if ok else '<'} {min_fraction:.0%} of the catalog's {ref.busbw_gbytes_per_s:g} "
                   f"GB/s for {nodes} x {instance_type} at {_size(ref.message_bytes)} (needs {wanted:.1f} GB/s)")
        if ref.message_bytes != message_bytes:
            verdict += (f"; the catalog has no reference at {_size(message_bytes)}, so the nearest smaller size "
                        "is the bar (busbw grows with size)")
        return ok, verdict
    floors = [r for r in catalog.busbw_references() if r.kind == "floor" and r.instance_type in ("*", instance_type)
              and r.message_bytes <= message_bytes]
    smallest = min((r.message_bytes for r in refs), default=None)
    larger_only = f"; its references for {nodes} x {instance_type} start at {_size(smallest)}" if smallest else ""
    if floors:
        floor = max(floors, key=lambda r: r.busbw_gbytes_per_s)
        ok = busbw_gbytes >= floor.busbw_gbytes_per_s
        return ok, (f"{measured} {'>=' if ok else '<'} the catalog's floor of {floor.busbw_gbytes_per_s:g} GB/s at "
                    f"{_size(floor.message_bytes)} (no reference for {nodes} x {instance_type} at or below "
                    f"{_size(message_bytes)}{larger_only})")
    return True, (f"{measured} not judged: the catalog has no reference or floor for {nodes} x {instance_type} "
                  f"at or below {_size(message_bytes)}{larger_only}")


def _size(nbytes: int) -> str:
    """64 MiB rather than 67108864 B, as nccl-tests users read sizes."""
    for unit, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"
