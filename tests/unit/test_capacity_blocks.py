"""EC2 Capacity Blocks for ML as a pool's capacity: launched into by reservation id, never bought by `up`, and
judged before `up` against the block as DescribeCapacityReservations reports it (usable state, type, count, zone,
and an end late enough for goldenenv:run.hours)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.stub import Stubber

from goldenenv import stackconfig
from goldenenv.clouds.aws import capacity_blocks
from goldenenv.plan import plan_config, stack_file
from goldenenv.spec import ConfigError

BLOCK = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def block_config(run_hours: float | None = 48, zone: str = "us-east-1a") -> dict:
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file("aws-p5-2node")))
    config["goldenenv:nodes"].update(capacity="capacity-block", capacityReservationId=BLOCK)
    config["goldenenv:zone"] = zone
    if run_hours is None:
        config.pop("goldenenv:run", None)
    else:
        config["goldenenv:run"] = {"hours": run_hours}
    return config


@pytest.fixture(scope="module")
def planned():
    return plan_config("aws-p5-block", block_config())


def reservation(**changes) -> dict:
    """A Capacity Block as DescribeCapacityReservations returns it (EC2 API reference, CapacityReservation)."""
    block = {"CapacityReservationId": BLOCK, "InstanceType": "p5.48xlarge", "InstancePlatform": "Linux/UNIX",
             "AvailabilityZone": "us-east-1a", "Tenancy": "default", "TotalInstanceCount": 2,
             "AvailableInstanceCount": 2, "State": "active", "ReservationType": "capacity-block",
             "StartDate": NOW - timedelta(hours=2), "EndDate": NOW + timedelta(days=3),
             "EndDateType": "limited", "InstanceMatchCriteria": "targeted"}
    return {**block, **changes}


def test_a_block_pool_launches_into_its_block_without_a_placement_group(planned):
    template = planned.of_type(LT)[0].props
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["capacityReservationSpecification"] == {"capacityReservationTarget": {"capacityReservationId": BLOCK}}
    assert planned.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    kinds = [ni["interfaceType"] for ni in template["networkInterfaces"]]
    assert "efa-only" in kinds  # EFA stays on: only the placement group goes
    assert not planned.failed


def test_plan_says_the_block_is_prepaid_and_checked_before_up(planned):
    notes = [f.message for f in planned.findings if f.rule == "plan-note"]
    assert any(f"Capacity Block {BLOCK}" in n and "never buys one" in n for n in notes)
    (line,) = [line for line in planned.lines if line.name == "compute gpu"]
    assert line.amount == 0 and "prepaid" in line.basis and "Capacity Blocks pricing" in line.source
    assert [c.usd_per_hour for c in planned.costs] == [0.0]


def spec(**overrides):
    return stackconfig.load("aws-p5-block", {k.removeprefix("goldenenv:"): v for k, v in
                                             block_config(**overrides).items() if k.startswith("goldenenv:")})


def test_a_usable_block_that_outlasts_the_run_passes():
    assert capacity_blocks.problems(spec(), lambda _: reservation(), NOW) == []


@pytest.mark.parametrize("changes, words", [
    ({"State": "payment-pending"}, "payment is still being processed"),
    ({"State": "expired"}, "is expired"),
    ({"InstanceType": "p4d.24xlarge"}, "holds p4d.24xlarge"),
    ({"TotalInstanceCount": 1}, "holds 1 instances"),
    ({"AvailabilityZone": "us-east-1d"}, "set goldenenv:zone: us-east-1d"),
    ({"EndDate": NOW + timedelta(hours=30)}, "leaves 29.5 h"),
    ({"EndDate": NOW + timedelta(minutes=20)}, "already terminating"),
])
def test_each_way_a_block_cannot_carry_the_run_is_named(changes, words):
    found = capacity_blocks.problems(spec(), lambda _: reservation(**changes), NOW)
    assert len(found) == 1 and words in found[0], found
    assert found[0].startswith("goldenenv:nodes.capacityReservationId")


def test_without_a_run_the_end_is_only_judged_against_now():
    assert capacity_blocks.problems(spec(run_hours=None), lambda _: reservation(
        EndDate=NOW + timedelta(hours=1)), NOW) == []


def test_the_live_lookup_reads_describe_capacity_reservations_and_an_unknown_id():
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]},
                          {"CapacityReservationIds": [BLOCK]})
        stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound",
                              expected_params={"CapacityReservationIds": [BLOCK]})
        describe = capacity_blocks.live_describe("us-east-1", ec2)
        assert describe(BLOCK)["State"] == "active"
        assert describe(BLOCK) is None
    found = capacity_blocks.problems(spec(), lambda _: None, NOW)
    assert found and "knows no capacity reservation" in found[0]


def test_before_up_refuses_a_block_that_cannot_carry_the_run():
    from goldenenv.clouds.aws import AwsCloud, StoreError

    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations",
                          {"CapacityReservations": [reservation(State="payment-failed")]})
        with pytest.raises(StoreError, match="payment-failed"):
            AwsCloud().before_up(spec(), lambda m: None, clients={"ec2": ec2})


def test_a_block_pool_may_not_list_several_zones():
    config = block_config()
    config["goldenenv:zones"] = ["us-east-1a", "us-east-1b"]
    with pytest.raises(ConfigError) as refused:
        plan_config("aws-p5-block-zones", config)
    assert [p.key for p in refused.value.problems] == ["goldenenv:zones"]
    assert "capacity-block" in refused.value.problems[0].message
