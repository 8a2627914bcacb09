"""EC2 Capacity Blocks for ML: capacity the user bought for a span of days, judged before `up` launches into it.

A block is bought outside goldenenv (PurchaseCapacityBlock; a purchase cannot be cancelled, so `up` never buys
one). It is a targeted capacity reservation in one Availability Zone with an end time, and EC2 begins to terminate
the instances still running in it thirty minutes before that end ("Work with Capacity Blocks", EC2 User Guide);
its state goes payment-pending, scheduled, active, then expired (or payment-failed). Before `up`, each pool on a
block is checked against the block as DescribeCapacityReservations reports it: usable, the pool's type, enough
instances, the stack's zone, and an end late enough for `goldenenv:run.hours` of training from now.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from goldenenv.spec import Capacity, ClusterSpec, pool_key

TERMINATION_LEAD = timedelta(minutes=30)
"""EC2 begins to terminate a block's instances this long before the block ends."""
USABLE = ("active", "scheduled")
"""Block states instances can launch into now (active) or once the block starts (scheduled)."""


def problems(spec: ClusterSpec, describe: Callable[[str], dict[str, Any] | None],
             now: datetime | None = None) -> list[str]:
    """One line per way a pool's block cannot carry the run; `describe(id)` is the reservation as
    DescribeCapacityReservations returns it (None when EC2 does not know the id)."""
    now = now or datetime.now(timezone.utc)
    found = []
    for i, pool in enumerate(spec.nodes):
        if pool.capacity is not Capacity.CAPACITY_BLOCK:
            continue
        at = f"{pool_key(i, len(spec.nodes))}.capacityReservationId"
        block_id = pool.capacity_reservation_id
        block = describe(block_id)
        if block is None:
            found.append(f"{at}: EC2 knows no capacity reservation {block_id} in {spec.region}")
            continue
        state = block.get("State")
        if state not in USABLE:
            found.append(f"{at}: Capacity Block {block_id} is {state}; instances launch only into a scheduled or "
                         "active block" + (" (its payment is still being processed: try again in a few minutes)"
                                           if state == "payment-pending" else ""))
        if block.get("InstanceType") != pool.instance_type:
            found.append(f"{at}: Capacity Block {block_id} holds {block.get('InstanceType')}, the pool asks for "
                         f"{pool.instance_type}")
        if (block.get("TotalInstanceCount") or 0) < pool.count:
            found.append(f"{at}: Capacity Block {block_id} holds {block.get('TotalInstanceCount')} instances, the "
                         f"pool asks for {pool.count}")
        zone = block.get("AvailabilityZone")
        if spec.placed_zone != zone:
            found.append(f"{at}: Capacity Block {block_id} is in {zone}; instances cannot launch into it from "
                         f"another zone: set goldenenv:zone: {zone}")
        found += _end_problems(spec, at, block_id, block.get("EndDate"), now)
    return found


def _end_problems(spec: ClusterSpec, at: str, block_id: str, end: Any, now: datetime) -> list[str]:
    if not isinstance(end, datetime):
        return [f"{at}: Capacity Block {block_id} reports no end time"]
    last = end.astimezone(timezone.utc) - TERMINATION_LEAD
    left = (last - now).total_seconds() / 3600
    if left <= 0:
        return [f"{at}: Capacity Block {block_id} ends at {end.isoformat()}: EC2 is already terminating its "
                "instances (from 30 minutes before the end)"]
    if spec.run and spec.run.hours > left:
        return [f"{at}: Capacity Block {block_id} leaves {left:.1f} h before EC2 terminates its instances (30 "
                f"minutes before its end, {end.isoformat()}); goldenenv:run.hours asks {spec.run.hours:g} h: buy a "
                "longer block, or lower run.hours"]
    return []


def live_describe(region: str, ec2: Any = None) -> Callable[[str], dict[str, Any] | None]:
    """DescribeCapacityReservations for one id, with the caller's credentials."""
    import boto3

    client = ec2 or boto3.client("ec2", region_name=region)

    def describe(block_id: str) -> dict[str, Any] | None:
        try:
            found = client.describe_capacity_reservations(CapacityReservationIds=[block_id])
        except Exception as error:  # botocore's ClientError, read by its code
            if getattr(error, "response", {}).get("Error", {}).get("Code") == "InvalidCapacityReservationId.NotFound":
                return None
            raise
        reservations = found.get("CapacityReservations") or []
        return reservations[0] if reservations else None

    return describe
