"""One cost model for `plan` and `estimate`: what a stack costs, line by line, from catalog prices.

Compute is hours × price ÷ scaling efficiency; storage (object store by the GB-month, the parallel file system by
size and throughput tier, block volumes), network (NAT gateway hours and data, interface endpoints, internet
egress) and idle development time are lines of their own. Every line says how it was computed and where its price
comes from; a line the catalog cannot price has no amount and says so, rather than counting as zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from goldenenv import catalog
from goldenenv.spec import ClusterSpec

HOURS_PER_MONTH = 730
"""The hours in a billing month as AWS and Alibaba count them (GB-month prices ÷ 730 = per hour)."""

STORAGE = "storage_prices"
NETWORK = "network_prices"

Per = Literal["hour", "month", "run"]


@dataclass(frozen=True)
class Line:
    name: str
    amount: float | None
    """In `currency` per `per`; None when the catalog has no price (the line is then not counted)."""
    currency: str
    per: Per
    basis: str
    """How it was computed, in words: quantities, rates, assumptions."""
    source: str
    """Where the price comes from (the catalog row's source, with its date)."""
    kind: str = "compute"
    """compute | storage | network | idle"""
    verified: bool = True
    """False when the catalog marks the price (unverified) or the spot figure is a snapshot."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "amount": None if self.amount is None else round(self.amount, 4),
                "currency": self.currency, "per": self.per, "kind": self.kind, "basis": self.basis,
                "source": self.source, "verified": self.verified}


def total(lines: Iterable[Line], per: Per) -> float:
    """The sum of the priced lines of one period."""
    return sum(line.amount or 0.0 for line in lines if line.per == per)


def compute_price(cloud: str, instance_type: str, region: str, capacity: str) -> catalog.Price | None:
    """The hourly price of one node in `region`: for `spot`, the catalog's dated spot snapshot there (a Price whose
    capacity is `spot` and whose as_of is the snapshot's date), else the on-demand price there (capacity `on-demand`
    tells the fallback: spot never bills above it); a capacity reservation bills at the on-demand rate. None when
    the catalog has no price in `region`: another region's price is not this one's (catalog.price_elsewhere is a
    hint, never counted)."""
    if capacity == "spot":
        snapshot = catalog.spot_price(cloud, instance_type, region)
        if snapshot is not None:
            return snapshot
    return catalog.price(cloud, instance_type, region)


def run_cost(cloud: str, instance_type: str, region: str, capacity: str, nodes: int, hours: float,
             scaling_efficiency: float = 1.0) -> Line:
    """Compute for `hours` of wall-clock work on `nodes` nodes: hours × nodes × price ÷ scaling efficiency (at 0.9,
    a job that would take 10 h at perfect scaling takes 11.1 h)."""
    if not 0 < scaling_efficiency <= 1:
        raise ValueError(f"scaling efficiency {scaling_efficiency} is outside (0, 1]")
    if hours < 0 or nodes < 0:
        raise ValueError(f"hours ({hours}) and nodes ({nodes}) cannot be negative")
    return _compute_line(f"compute {nodes} × {instance_type}", cloud, instance_type, region, capacity, nodes,
                         hours, scaling_efficiency, "run")


CAPACITY_BLOCK_BILLING = ("EC2 User Guide, Capacity Blocks pricing and billing: the block's price is charged up front "
                          "at purchase; instances running in it are charged only the operating system's fee")


def _compute_line(name: str, cloud: str, instance_type: str, region: str, capacity: str, nodes: int,
                  hours: float, efficiency: float, per: Per) -> Line:
    if capacity == "capacity-block":
        return Line(name, 0.0, _currency(cloud), per, f"{nodes} × {instance_type} in a Capacity Block: prepaid at "
                    "purchase, not charged again here (the purchase is not tagged with the stack, so the budget does "
                    "not see it either)", CAPACITY_BLOCK_BILLING, "compute")
    price = compute_price(cloud, instance_type, region, capacity)
    if price is None:
        return Line(name, None, _currency(cloud), per, unpriced_basis(cloud, instance_type, region, name == HEAD_LINE),
                    "-", verified=False)
    span = f"{hours:g} h × " if per == "run" else ""
    scaling = f" ÷ {efficiency:g} scaling efficiency" if efficiency != 1 else ""
    rate = f"{price.usd_per_hour:g} {price.currency}/h"
    kind = {"spot": f"spot snapshot of {price.as_of}", "on-demand": "on-demand"}.get(price.capacity, price.capacity)
    notes = []
    if capacity == "spot" and price.capacity != "spot":
        notes.append("no spot snapshot in the catalog: the on-demand price, the spot ceiling")
    if capacity == "capacity-reservation":
        notes.append("a capacity reservation bills at the on-demand rate")
    basis = f"{span}{nodes} × {instance_type} × {rate} ({kind}){scaling}" + "".join(f"; {n}" for n in notes)
    verified = price.verified and price.capacity != "spot"
    return Line(name, hours * nodes * price.usd_per_hour / efficiency if per == "run" else nodes * price.usd_per_hour,
                price.currency, per, basis, f"{price.source} ({price.region}, {price.as_of})", "compute", verified)


def unpriced_basis(cloud: str, instance_type: str, region: str, head: bool = False) -> str:
    """Why a compute line has no amount: no price for the type in the region, with another region's price as a
    labelled hint when the catalog has one, and how to give one (a pool's pricePerHour; for the head, a type the
    catalog prices there)."""
    hint = catalog.price_elsewhere(cloud, instance_type, region)
    seen = (f" (it has {hint.usd_per_hour:g} {hint.currency}/h in {hint.region}, a hint only: prices differ by "
            "region)") if hint else ""
    fix = (f"choose a goldenenv:head.instanceType the catalog prices in {region}" if head
           else "give its price as goldenenv:nodes.pricePerHour")
    return f"no catalog price for {instance_type} in {region}{seen}: not counted; {fix}"


HEAD_LINE = "compute head"


def stack_lines(spec: ClusterSpec, resources: Iterable[Any] | None = None, head: Any = None) -> list[Line]:
    """The stack's cost at full use, per hour, line by line; with a `goldenenv:run` that gives idleHours, also the
    idle development time as a line per run.

    resources: the plan's planned resources (guardrails.PlannedResource), to count NAT gateways and interface
    endpoints as the program creates them; without them one NAT gateway is assumed when egress is nat and the
    interface endpoints are not counted. head: the stack's Slurm head (clouds.base.HeadShape: instance_type,
    root_volume_gib), on demand, or None for a stack without one.
    """
    currency = _stack_currency(spec)
    lines = [_pool_line(spec, pool) for pool in spec.nodes]
    if head is not None:
        lines.append(_compute_line(HEAD_LINE, spec.cloud, head.instance_type, spec.region, "on-demand", 1, 1.0,
                                   1.0, "hour"))
    lines += _storage_lines(spec, currency, head)
    lines += _network_lines(spec, currency, list(resources) if resources is not None else None)
    if spec.run and spec.run.idle_hours:
        hourly = total((line for line in lines if line.name != OBJECT_STORE), "hour")
        lines.append(Line("idle development time", hourly * spec.run.idle_hours, currency, "run",
                          f"goldenenv:run.idleHours {spec.run.idle_hours:g} h × the stack at full use "
                          f"({hourly:,.2f} {currency}/h, bucket storage aside)", "the lines above", "idle",
                          all(line.verified for line in lines)))
    return lines


OBJECT_STORE = "object storage"


def run_lines(spec: ClusterSpec, lines: list[Line]) -> list[Line]:
    """The projected cost of the stack's `goldenenv:run`: each hourly line × run.hours, the bucket for a whole
    month (it outlives destroy, and the budget is monthly), and the idle time; [] without a run section."""
    if spec.run is None:
        return []
    run = spec.run
    hours = billed_hours(run.hours, run.scaling_efficiency)
    why = f"goldenenv:run.hours {run.hours:g} h" + (
        f" ÷ scalingEfficiency {run.scaling_efficiency:g} = {hours:g} h" if run.scaling_efficiency != 1 else "")
    projected = []
    for line in lines:
        if line.per == "run":
            projected.append(line)
        elif line.per == "hour" and line.name == OBJECT_STORE:
            projected.append(_scaled(line, HOURS_PER_MONTH, "a month (the bucket outlives destroy)"))
        elif line.per == "hour":
            projected.append(_scaled(line, hours, why))
    if run.egress_gb:
        price = catalog.service_price(NETWORK, spec.cloud, "internet-egress", spec.region)
        projected.append(_gb_line("internet egress (run)", price, run.egress_gb, "GB", "network",
                                  _stack_currency(spec), f"goldenenv:run.egressGb {run.egress_gb:g} GB"))
    return projected


def billed_hours(hours: float, efficiency: float = 1.0) -> float:
    """Wall-clock hours of a run that takes `hours` at perfect scaling and reaches `efficiency` of it: hours ÷
    efficiency, up to the next tenth of an hour (as estimate and plan show it, so the cost re-adds by hand)."""
    return math.ceil(round(hours / efficiency * 10, 6)) / 10


def _pool_line(spec: ClusterSpec, pool: Any) -> Line:
    """A pool's compute per hour: its own nodes.pricePerHour, else goldenenv:run.pricePerGpuHour, else the catalog."""
    name = f"compute {pool.name}"
    if pool.price_per_hour is not None:
        currency = _currency(spec.cloud)
        return Line(name, pool.count * pool.price_per_hour, currency, "hour",
                    f"{pool.count} × {pool.instance_type} × {pool.price_per_hour:g} {currency}/h",
                    "nodes.pricePerHour (your price)", "compute", True)
    if spec.run and spec.run.price_per_gpu_hour is not None:
        return _own_price_line(name, spec, pool.instance_type, pool.count, spec.run.price_per_gpu_hour)
    return _compute_line(name, spec.cloud, pool.instance_type, spec.region, pool.capacity.value, pool.count, 1.0,
                         1.0, "hour")


def _own_price_line(name: str, spec: ClusterSpec, instance_type: str, count: int, price: float) -> Line:
    """A GPU pool at goldenenv:run.pricePerGpuHour, in the cloud's catalog currency."""
    try:
        gpus = catalog.instance_type(spec.cloud, instance_type).gpu_count
    except (KeyError, LookupError, ValueError):
        gpus = 0
    currency = _currency(spec.cloud)
    if not gpus:
        return Line(name, None, currency, "hour", f"{instance_type}: GPUs per node unknown to the catalog, so "
                    "goldenenv:run.pricePerGpuHour cannot price it: not counted", "-", verified=False)
    return Line(name, count * gpus * price, currency, "hour",
                f"{count} × {instance_type} × {gpus} GPUs × {price:g} {currency}/GPU-h",
                "goldenenv:run.pricePerGpuHour (your price)", "compute", True)


def _scaled(line: Line, hours: float, why: str) -> Line:
    amount = None if line.amount is None else line.amount * hours
    return Line(line.name, amount, line.currency, "run", f"{why} × ({line.basis})", line.source, line.kind,
                line.verified)


def _storage_lines(spec: ClusterSpec, currency: str, head: Any = None) -> list[Line]:
    lines = []
    run = spec.run
    stored = (run.dataset_gb + run.checkpoint_gb) if run else 0.0
    assumption = (f"{stored:g} GB (goldenenv:run.datasetGb {run.dataset_gb:g} + checkpointGb {run.checkpoint_gb:g})"
                  if run else "0 GB (assumed: no goldenenv:run.datasetGb / checkpointGb given)")
    lines.append(_per_gb_month(OBJECT_STORE, spec, "object-store", "standard", stored, assumption, currency))
    fs = spec.storage.parallel_fs
    if fs.enabled:
        lines.append(_per_gb_month(
            "parallel file system", spec, "parallel-fs", str(fs.throughput_per_tib), fs.size_gib,
            f"{fs.size_gib} GiB provisioned at {fs.throughput_per_tib} MB/s per TiB",
            currency))
    volumes = sum(pool.count * pool.root_volume_gib for pool in spec.nodes)
    each = [f"{pool.count} × {pool.root_volume_gib} GiB root" for pool in spec.nodes]
    if head is not None:
        volumes += head.root_volume_gib
        each.append(f"1 × {head.root_volume_gib} GiB head root")
    tier = catalog.boot_volume_tier(spec.cloud)
    lines.append(_per_gb_month(
        "block volumes", spec, "block-volume", tier, volumes, " + ".join(each) + (f" ({tier})" if tier else ""),
        currency))
    return lines


def _per_gb_month(name: str, spec: ClusterSpec, item: str, tier: str, gb: float, quantity: str,
                  currency: str) -> Line:
    price = catalog.service_price(STORAGE, spec.cloud, item, spec.region, tier)
    if price is None:
        what = f"{item} {tier}".strip()
        return Line(name, None, currency, "hour", f"{quantity}; no catalog price for {what} on {spec.cloud}: "
                    "not counted", "-", "storage", False)
    where = "" if price.region == spec.region else f"; priced from {price.region}"
    return Line(name, gb * price.price / HOURS_PER_MONTH, price.currency, "hour",
                f"{quantity} × {price.price:g} {price.currency}/GB-month ÷ {HOURS_PER_MONTH} h{where}",
                f"{price.source} ({price.region}, {price.as_of})", "storage", price.verified)


def _network_lines(spec: ClusterSpec, currency: str, resources: list[Any] | None) -> list[Line]:
    lines = []
    if spec.network.egress == "nat":
        gateways = _count(resources, lambda r: r.type.rsplit(":", 1)[-1] == "NatGateway", default=1)
        how = "from the plan" if resources is not None else "one per stack (its zone)"
        lines.append(_network_line("NAT gateway", spec, "nat-gateway", gateways, "hour",
                                   f"{gateways} gateway(s) ({how})", currency))
        lines.append(_network_line(
            "NAT gateway data", spec, "nat-gateway-data", 0, "GB",
            "0 GB/h", currency, "assumed: bucket traffic takes the VPC's storage endpoint, not the gateway; "
            "package and image pulls from the internet add this rate per GB"))
    else:
        endpoints = _count(resources, _is_interface_endpoint, default=None)
        if endpoints is None:
            lines.append(Line("interface endpoints", None, currency, "hour",
                              "egress endpoints: the count comes from the plan's resources; not counted here", "-",
                              "network", False))
        elif endpoints:
            lines.append(_network_line("interface endpoints", spec, "interface-endpoint", endpoints, "hour",
                                       f"{endpoints} interface endpoint(s) × 1 AZ", currency))
    lines.append(_network_line("internet egress", spec, "internet-egress", 0, "GB", "0 GB/h", currency,
                               "assumed: datasets and checkpoints stay in the region"))
    return [line for line in lines if line is not None]


def _network_line(name: str, spec: ClusterSpec, item: str, quantity: float, unit: str, how: str,
                  currency: str, assumption: str = "") -> Line | None:
    price = catalog.service_price(NETWORK, spec.cloud, item, spec.region)
    if price is None:
        if quantity == 0:
            return None  # nothing assumed and nothing priced: no line to show
        return Line(name, None, currency, "hour", f"{how}; no catalog price for {item} on {spec.cloud}: not counted",
                    "-", "network", False)
    where = "" if price.region == spec.region else f"; priced from {price.region}"
    return Line(name, quantity * price.price, price.currency, "hour",
                f"{how} × {price.price:g} {price.currency}/{unit}{where}" + (f"; {assumption}" if assumption else ""),
                f"{price.source} ({price.region}, {price.as_of})", "network", price.verified)


def _count(resources: list[Any] | None, match, default):
    return default if resources is None else sum(1 for r in resources if getattr(r, "custom", True) and match(r))


def _is_interface_endpoint(resource: Any) -> bool:
    return (resource.type.endswith("/vpcEndpoint:VpcEndpoint")
            and str(resource.props.get("vpcEndpointType", "")).lower() == "interface")


def _stack_currency(spec: ClusterSpec) -> str:
    found = {p.currency for pool in spec.nodes
             if (p := compute_price(spec.cloud, pool.instance_type, spec.region, pool.capacity.value))}
    return found.pop() if len(found) == 1 else _currency(spec.cloud)


def _currency(cloud: str) -> str:
    """The currency the catalog prices a cloud in (its first price row), USD when it has none."""
    return next((r["currency"] for r in catalog.rows("prices") if r["cloud"] == cloud), "USD")


def _efficiency_note(hours: float, ideal: float | None, efficiency: float) -> str:
    if ideal is None or efficiency == 1:
        return f"{hours:g} h"
    return f"{hours:g} h ({ideal:,.4g} h at perfect scaling ÷ {efficiency:g} scaling efficiency, in tenths of an hour)"


def catalog_compute_run(cloud: str, instance_type: str, region: str, capacity: str, nodes: int, hours: float,
                        efficiency: float, ideal: float | None = None) -> Line:
    """Compute for `hours` of billed wall-clock time (already divided by the scaling efficiency) on `nodes` nodes at
    the catalog's price."""
    line = _compute_line(f"compute {nodes} × {instance_type}", cloud, instance_type, region, capacity, nodes, hours,
                         1.0, "run")
    if line.amount is None or ideal is None:
        return line
    return Line(line.name, line.amount, line.currency, "run",
                line.basis.replace(f"{hours:g} h × ", _efficiency_note(hours, ideal, efficiency) + " × ", 1),
                line.source, "compute", line.verified)


def user_compute_run(gpus: int, price: float, currency: str, hours: float, ideal: float | None,
                     efficiency: float) -> Line:
    """Compute at the user's own price per GPU-hour (--price, goldenenv:run.pricePerGpuHour)."""
    return Line(f"compute {gpus} GPUs", hours * gpus * price, currency, "run",
                f"{_efficiency_note(hours, ideal, efficiency)} × {gpus} GPUs × {price:g} {currency}/GPU-h",
                "your price (--price)", "compute", True)


def run_parts(compute: Line, cloud: str | None, region: str, *, hours: float, stored_gb: float, egress_gb: float,
              idle_hours: float) -> list[Line]:
    """A run's cost in four parts: compute (given), storage (the run's data in the object store for a month: it
    outlives destroy and the budget is monthly), transfer (internet egress by the GB) and idle development time
    (billed like the compute: its amount ÷ its `hours`, per hour)."""
    lines = [compute]
    if stored_gb:
        price = catalog.service_price(STORAGE, cloud, "object-store", region, "standard") if cloud else None
        lines.append(_gb_line(OBJECT_STORE, price, stored_gb, "GB-month", "storage", compute.currency,
                              f"{stored_gb:g} GB (dataset + checkpoints) for a month"))
    if egress_gb:
        price = catalog.service_price(NETWORK, cloud, "internet-egress", region) if cloud else None
        lines.append(_gb_line("internet egress", price, egress_gb, "GB", "network", compute.currency,
                              f"{egress_gb:g} GB out of the cloud"))
    if idle_hours:
        hourly = compute.amount / hours if compute.amount is not None and hours else None
        lines.append(Line("idle development time", None if hourly is None else hourly * idle_hours,
                          compute.currency, "run", f"{idle_hours:g} h × the fleet's "
                          + (f"{hourly:,.2f} {compute.currency}/h" if hourly is not None else "unpriced rate"),
                          "the compute line", "idle", compute.verified))
    return lines


def _gb_line(name: str, price: Any, gb: float, unit: str, kind: str, currency: str, quantity: str) -> Line:
    if price is None:
        return Line(name, None, currency, "run", f"{quantity}; no catalog price (give --instance-type for its "
                    "cloud's): not counted", "-", kind, False)
    if price.currency != currency:
        return Line(name, None, price.currency, "run", f"{quantity} × {price.price:g} {price.currency}/{unit}: "
                    f"not added to a {currency} total (no FX rate in the catalog)", price.source, kind, False)
    return Line(name, gb * price.price, price.currency, "run", f"{quantity} × {price.price:g} {price.currency}/{unit}",
                f"{price.source} ({price.region}, {price.as_of})", kind, price.verified)
