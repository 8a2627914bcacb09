"""Why the cloud's bill for a period differs from what the jobs cost: the lines between the two.

The jobs' total prices only the GPU-seconds Slurm allocated to jobs. The bill also carries the nodes' time with
no job on them (Slurm's idle and down GPU-seconds, from sreport, at the same GPU-hour price), the head node, storage
and network (plan's own cost lines, costs.stack_lines, for the hours of the period). Each line is an estimate from
the catalog, said as such; the bill itself is the cloud's figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from goldenenv import costs
from goldenenv.gpuprice import pool_gpu_price
from goldenenv.jobcost import Utilization, Window
from goldenenv.spec import ClusterSpec


@dataclass(frozen=True)
class GapLine:
    name: str
    amount: float | None
    """In the jobs' currency for the period; None where it cannot be priced (said in `basis`)."""
    basis: str


def hours(window: Window, now: datetime) -> float:
    """The period's hours so far: a month not yet over counts until now, as its bill does."""
    return max(0.0, (min(window.until, now) - window.since).total_seconds() / 3600)


def idle_line(spec: ClusterSpec, used: Utilization | str | None) -> GapLine:
    """The cluster's GPU-seconds with no job (idle, down) at the GPU-hour price, where every pool has one price.
    `used`: sreport's figures, or why sreport gave none."""
    if used is None:
        return GapLine("idle and down GPU time", None, "Slurm's sreport has no GPU utilization for the period")
    if isinstance(used, str):
        return GapLine("idle and down GPU time", None, used)
    prices = {p.per_gpu_hour for p in (pool_gpu_price(spec, pool) for pool in spec.nodes) if p is not None}
    gpu_hours = (used.idle + used.planned + used.down) / 3600
    words = (f"sreport cluster utilization: {(used.idle + used.planned) / 3600:,.2f} GPU-h idle + "
             f"{used.down / 3600:,.2f} GPU-h down")
    if len(prices) != 1:
        return GapLine("idle and down GPU time", None, f"{words}; the pools' GPU-hours have different prices, so "
                       "the idle time is not priced")
    price = prices.pop()
    return GapLine("idle and down GPU time", gpu_hours * price, f"{words} × {price:,.4f} per GPU-hour")


def stack_lines(spec: ClusterSpec, window: Window, now: datetime, head) -> list[GapLine]:
    """The head, storage and network for the period: plan's hourly lines × its hours so far, monthly lines by the
    share of a month (costs.HOURS_PER_MONTH) it is; an upper bound where the stack was down part of the period
    (the bucket alone outlives destroy). `head`: the stack's HeadShape, or None."""
    period = hours(window, now)
    found = []
    for line in costs.stack_lines(spec, None, head):
        if line.kind == "compute" and line.name != costs.HEAD_LINE or line.per == "run":
            continue
        scale = period if line.per == "hour" else period / costs.HOURS_PER_MONTH
        amount = None if line.amount is None else line.amount * scale
        found.append(GapLine(line.name, amount, f"{line.basis}; for {period:,.1f} h, if up the whole period "
                             f"(plan's estimate, {line.source})"))
    return found


def unexplained(bill: float | None, jobs_total: float | None, lines: list[GapLine]) -> float | None:
    """What the bill holds beyond the jobs and the lines (discounts and credits make it negative; taxes, support,
    usage no line counts make it positive); None without a bill, a jobs' total or a priced line."""
    if bill is None or jobs_total is None:
        return None
    return bill - jobs_total - sum(line.amount for line in lines if line.amount is not None)
