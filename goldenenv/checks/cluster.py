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


def busbw_verdict(instance_type: str, nodes: int, busbw_gbytes: float, min_fraction: float) -> tuple[bool, str]:
    """Compare a measured all_reduce busbw with the catalog's reference for this type and node count."""
    refs = [r for r in catalog.busbw_references() if r.kind == "reference" and r.instance_type == instance_type
            and r.nodes == nodes]
    floors = [r for r in catalog.busbw_references() if r.kind == "floor" and r.instance_type in ("*", instance_type)]
    if refs:
        best = max(refs, key=lambda r: r.busbw_gbytes_per_s)
        wanted = best.busbw_gbytes_per_s * min_fraction
        ok = busbw_gbytes >= wanted
        return ok, (f"busbw {busbw_gbytes:.1f} GB/s {'>=' if ok else '<'} {min_fraction:.0%} of the catalog's "
                    f"{best.busbw_gbytes_per_s:g} GB/s for {nodes} x {instance_type} at {best.message_bytes} B")
    if floors:
        floor = max(r.busbw_gbytes_per_s for r in floors)
        ok = busbw_gbytes >= floor
        return ok, f"busbw {busbw_gbytes:.1f} GB/s {'>=' if ok else '<'} the catalog's floor of {floor:g} GB/s"
    return True, f"busbw {busbw_gbytes:.2f} GB/s (no catalog reference for {nodes} x {instance_type})"
