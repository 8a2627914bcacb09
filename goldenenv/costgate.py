"""What the cost gate judges: every place and capacity `up` may deploy, not only the first.

`up` walks the stack's failover order (goldenenv.failover.stack_order: each zone, then each pool's
capacityFallback) until the cloud has room, so a stack the budget can pay on spot may be deployed on on-demand.
The gate prices each step of that order; the dearest decides. Prices are regional and the failover never leaves
the stack's region, so two zones on the same capacity types cost the same: each distinct set of capacity types is
priced once and carries the zones it is tried in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from goldenenv import costs, failover
from goldenenv.spec import Capacity, ClusterSpec


@dataclass(frozen=True)
class Step:
    """A set of capacity types `up` may deploy the stack on, the zones it tries them in, and what it costs."""

    capacity: tuple[tuple[str, str], ...]
    """(pool name, capacity type) per pool, in the stack's pool order."""
    zones: tuple[str, ...]
    lines: tuple[costs.Line, ...]
    first: bool
    """The stack file's own capacity types: what `up` tries first."""

    def said(self, spec: ClusterSpec) -> str:
        """"gpu on on-demand in us-east-1a, us-east-1b, the capacityFallback after spot"."""
        before = {pool.name: pool.capacity.value for pool in spec.nodes}
        moved = [(pool, capacity) for pool, capacity in self.capacity if capacity != before.get(pool)]
        shown = moved or list(self.capacity)
        where = ", ".join(zone or f"the zone the cloud picks in {spec.region}" for zone in self.zones)
        what = ", ".join(f"{pool} on {capacity}" for pool, capacity in shown)
        after = ", ".join(dict.fromkeys(before[pool] for pool, _ in moved))
        return f"{what} in {where}" + (f", the capacityFallback after {after}" if moved else "")


def steps(spec: ClusterSpec, resources: Iterable[Any] | None, head: Any, first: list[costs.Line]) -> list[Step]:
    """Every set of capacity types in the stack's failover order, first the stack file's own (priced as `first`,
    the plan's lines), each priced line by line like the plan (costs.stack_lines)."""
    order = failover.stack_order(spec) if spec.nodes else []
    resources = list(resources) if resources is not None else None
    found: dict[tuple[tuple[str, str], ...], list[str]] = {}
    own = tuple((pool.name, pool.capacity.value) for pool in spec.nodes)
    found[own] = []
    for placement in order:
        zones = found.setdefault(placement.capacity, [])
        if placement.zone not in zones:
            zones.append(placement.zone)
    result = []
    for capacity, zones in found.items():
        lines = first if capacity == own else costs.stack_lines(_at(spec, dict(capacity)), resources, head)
        result.append(Step(capacity, tuple(zones or [spec.placed_zone or ""]), tuple(lines), capacity == own))
    return result


def _at(spec: ClusterSpec, capacity: dict[str, str]) -> ClusterSpec:
    """The stack with each pool on the capacity type given for it."""
    nodes = [pool.model_copy(update={"capacity": Capacity(capacity.get(pool.name, pool.capacity.value))})
             for pool in spec.nodes]
    return spec.model_copy(update={"nodes": nodes})
