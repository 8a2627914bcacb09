"""What one GPU-hour of a pool costs, and the stack's monthly budget as GPU-minutes: one price for `goldenenv cost`
(a job's GPU-seconds × this) and for the cluster-wide GPU-minute limit Slurm enforces (the budget ÷ this).

A node is priced as `plan` prices it (costs.compute_price: the catalog's on-demand price, or its spot snapshot on a
spot pool, or the pool's own pricePerHour), and its GPUs share the node's price equally: nodes are exclusive to
one job, so a job that holds N GPUs of an 8-GPU node holds an eighth of its price per GPU. The local stack's
stand-in GPUs have a notional rate of the local catalog's, never a bill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.spec import ClusterSpec, NodePool


@dataclass(frozen=True)
class GpuPrice:
    pool: str
    instance_type: str
    capacity: str
    gpus_per_node: int
    per_gpu_hour: float
    currency: str
    basis: str
    """Where the price comes from, in words (the catalog row's region, capacity and date, or the stack file's)."""

    @property
    def per_node_hour(self) -> float:
        return self.per_gpu_hour * self.gpus_per_node


def pool_gpu_price(spec: ClusterSpec, pool: NodePool) -> GpuPrice | None:
    """One GPU-hour of the pool, or None where nothing prices it (a type the catalog cannot price in the region and
    no pricePerHour) or its nodes have no GPUs."""
    from goldenenv.costs import _currency, compute_price

    gpus = catalog.node_slots(spec.cloud, pool.instance_type).gpus
    if not gpus:
        return None
    capacity = pool.capacity.value
    if spec.cloud in catalog.container_clouds():
        shape = catalog.local_shapes()[pool.instance_type]
        return GpuPrice(pool.name, pool.instance_type, capacity, gpus, shape.notional_price_per_gpu_hour, "USD",
                        "the local catalog's notional rate for a stand-in GPU (not a bill)")
    if pool.price_per_hour is not None:
        return GpuPrice(pool.name, pool.instance_type, capacity, gpus, pool.price_per_hour / gpus,
                        _currency(spec.cloud), "the stack file's nodes.pricePerHour")
    if spec.run and spec.run.price_per_gpu_hour is not None:
        return GpuPrice(pool.name, pool.instance_type, capacity, gpus, spec.run.price_per_gpu_hour,
                        _currency(spec.cloud), "the stack file's run.pricePerGpuHour")
    price = compute_price(spec.cloud, pool.instance_type, spec.region, capacity)
    if price is None:
        return None
    return GpuPrice(pool.name, pool.instance_type, price.capacity, gpus, price.usd_per_hour / gpus, price.currency,
                    f"catalog {price.capacity} price in {price.region} as of {price.as_of}")


def cluster_gpu_minutes(spec: ClusterSpec) -> int | None:
    """The stack's monthly budget as GPU-minutes at its dearest pool's GPU price (so the limit binds no later than
    the budget would, whichever pool the work runs on); None with no budget, or when a pool cannot be priced in the
    budget's currency (the cloud's bill then stays the only guard)."""
    if spec.budget is None:
        return None
    prices = [pool_gpu_price(spec, pool) for pool in spec.nodes]
    priced = [p for p in prices if p is not None]
    if not priced or len(priced) != sum(1 for pool in spec.nodes
                                        if catalog.node_slots(spec.cloud, pool.instance_type).gpus):
        return None
    if any(p.currency != spec.budget.currency for p in priced):
        return None
    dearest = max(p.per_gpu_hour for p in priced)
    return math.floor(spec.budget.monthly_limit / dearest * 60)
