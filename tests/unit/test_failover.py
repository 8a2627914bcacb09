"""`goldenenv up` fails over when the cloud has no capacity: next zone, next capacity type, never another region.

A deployer fails the way each cloud's recorded errors say (tests/unit/captures/failover, in the layout of the
Automation API's CommandError). Expected classes and scopes come from the catalog table; a few literal anchors from
AWS's public error table catch a wrong row that reading the same table would not. Nothing sleeps for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from goldenenv import catalog, clouds
from goldenenv.catalog.capacity import CLASSES, SCOPES, capacity_error, capacity_errors
from goldenenv.failover import (Attempt, FailoverStopped, Placement, PoolAsk, candidates, classify, describe_order,
                                run)

CAPTURES = Path(__file__).parent / "captures" / "failover"
US_EAST = ["us-east-1a", "us-east-1b"]
WULANCHABU = ["cn-wulanchabu-a", "cn-wulanchabu-b", "cn-wulanchabu-c"]
SPOT_THEN_ON_DEMAND = ("spot", "on-demand")


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


class UpFailed(Exception):
    """What the Automation API raises: its str() is the failed up's text."""


class FlakyCloud:
    """Deploys by (zone, capacity of the pool "gpu"): a capture's name fails that way, None succeeds; a list is
    played one entry per up at that placement."""

    def __init__(self, outcomes: dict[tuple[str, str], str | list[str | None] | None], text=capture):
        self.outcomes = {key: list(value) if isinstance(value, list) else [value] for key, value in outcomes.items()}
        self.text = text
        self.ups: list[Placement] = []

    def __call__(self, placement: Placement) -> None:
        self.ups.append(placement)
        key = (placement.zone, placement.capacity_of("gpu"))
        planned = self.outcomes.get(key, [None])
        outcome = planned.pop(0) if len(planned) > 1 else planned[0]
        if outcome is not None:
            raise UpFailed(self.text(outcome))


def p5(capacities: tuple[str, ...] = ("on-demand",), count: int = 2) -> PoolAsk:
    return PoolAsk("gpu", "p5.48xlarge", count, catalog.instance_type("aws", "p5.48xlarge").vcpus, capacities)


def ebmgn8v(capacities: tuple[str, ...] = ("on-demand",)) -> PoolAsk:
    it = catalog.instance_type("alicloud", "ecs.ebmgn8v.48xlarge")
    return PoolAsk("gpu", it.name, 2, it.vcpus, capacities)


def at(zone: str, capacity: str) -> Placement:
    return Placement(zone, (("gpu", capacity),))


def failover(cloud: FlakyCloud, pools: list[PoolAsk], zones: list[str], provider: str = "aws", region: str = ""):
    """Run the loop with a recorded log and sleep; what it returned (or raised), the log and the sleeps."""
    lines: list[str] = []
    sleeps: list[float] = []
    try:
        result = run(cloud, candidates(zones, pools), provider, lines.append, sleep=sleeps.append, pools=pools,
                     region=region)
    except FailoverStopped as stopped:
        result = stopped
    return result, lines, sleeps


def codes(attempts: tuple[Attempt, ...]) -> list[tuple[str, str, str | None]]:
    return [(a.placement.zone, a.placement.capacity_of("gpu"), a.error.code if a.error else None) for a in attempts]


def klass(cloud: str, code: str) -> str:
    return capacity_error(cloud, code).klass


# ---------------------------------------------------------------- the catalog table

def test_the_table_speaks_the_failover_vocabulary_and_each_class_rules_out_what_it_should():
    allowed = {"capacity": {"placement"}, "unsupported": {"zone"}, "price": {"market"}, "transient": {"none"},
               "fatal": {"all"}, "quota": {"market", "zone", "region"}}
    for row in catalog.rows("capacity_errors"):
        assert row["cloud"] in clouds.names(), row
        assert row["class"] in CLASSES and row["scope"] in SCOPES, row
        assert row["scope"] in allowed[row["class"]], row
        assert row["meaning"].strip() and row["what_to_do"].strip(), row
    keys = [(r["cloud"], r["code"]) for r in catalog.rows("capacity_errors")]
    assert len(keys) == len(set(keys)), "a code is listed twice for one cloud"


def test_every_code_the_research_lists_has_a_row():
    researched = {
        "aws": {"InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity",
                "InsufficientCapacity", "UnfulfillableCapacity", "InstanceLimitExceeded", "VcpuLimitExceeded",
                "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "Unsupported", "RequestLimitExceeded",
                "ServiceUnavailable", "InternalError", "Unavailable", "InvalidParameterValue",
                "InvalidParameterCombination", "UnauthorizedOperation"},
        "alicloud": {"OperationDenied.NoStock", "Zone.NotOnSale", "QuotaExceed.ElasticQuota",
                     "QuotaExceed.DiskCapacity", "OperationDenied.ZoneNotAllowed",
                     "OperationDenied.ZoneSystemCategoryNotMatch", "OperationDenied.CloudSSDNotSupported",
                     "Invalid.PrivatePoolOptions.NoStock", "LackResource", "Throttling", "ServiceUnavailable",
                     "InvalidParameter", "Forbidden.RAM"},
        "gcp": {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "UNSUPPORTED_OPERATION",
                "insufficientCapacity", "RESOURCE_NOT_READY", "RESOURCE_OPERATION_RATE_EXCEEDED",
                "RESOURCE_NOT_FOUND", "QUOTA_EXCEEDED", "quotaExceeded", "VPC_NOT_FOUND", "SUBNET_NOT_FOUND_FOR_VPC",
                "IAM_PERMISSION_DENIED"},
        "azure": {"AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest", "SkuNotAvailable",
                  "OperationNotAllowed", "ReadOnlyDisabledSubscription"},
    }
    for cloud, wanted in researched.items():
        assert wanted <= set(capacity_errors(cloud)), (cloud, wanted - set(capacity_errors(cloud)))


def test_literal_anchors_from_the_ec2_error_table():
    # AWS EC2 API error codes: ICE is a capacity shortage, VcpuLimitExceeded an account quota, RequestLimitExceeded
    # throttling, Unsupported a zone that does not offer the type
    assert klass("aws", "InsufficientInstanceCapacity") == "capacity"
    assert klass("aws", "VcpuLimitExceeded") == "quota"
    assert klass("aws", "RequestLimitExceeded") == "transient"
    assert capacity_error("aws", "Unsupported").scope == "zone"


# ---------------------------------------------------------------- reading a failed up

@pytest.mark.parametrize("cloud, name, code, resource, says", [
    ("aws", "aws_InsufficientInstanceCapacity_on-demand_us-east-1a.txt", "InsufficientInstanceCapacity",
     "aws-p5-2node-gpu-0", "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone"),
    ("aws", "aws_InsufficientInstanceCapacity_spot.txt", "InsufficientInstanceCapacity", "aws-p5-2node-gpu-0",
     "There is no Spot capacity available that matches your request."),
    ("aws", "aws_Unsupported_us-east-1a.txt", "Unsupported", "aws-p5-2node-gpu-0",
     "is not supported in your requested Availability Zone (us-east-1a)"),
    ("aws", "aws_SpotMaxPriceTooLow.txt", "SpotMaxPriceTooLow", "aws-p5-2node-gpu-0",
     "lower than the minimum required Spot request fulfillment price"),
    ("aws", "aws_RequestLimitExceeded.txt", "RequestLimitExceeded", "aws-p5-2node-gpu-0", "Request limit exceeded."),
    ("aws", "aws_InstanceLimitExceeded.txt", "InstanceLimitExceeded", "aws-p5-2node-gpu-0",
     "Your quota allows for 0 more running instance(s)."),
    ("aws", "aws_VcpuLimitExceeded.txt", "VcpuLimitExceeded", "aws-p5-2node-gpu-0",
     "You have requested more vCPU capacity than your current vCPU limit of 0"),
    ("aws", "aws_MaxSpotInstanceCountExceeded.txt", "MaxSpotInstanceCountExceeded", "aws-p5-2node-gpu-0",
     "Max spot instance count exceeded"),
    ("aws", "aws_InvalidParameterValue.txt", "InvalidParameterValue", "aws-p5-2node-gpu-0",
     "The architecture 'arm64' of the specified instance type does not match"),
    ("alicloud", "alicloud_OperationDenied.NoStock.txt", "OperationDenied.NoStock", "alicloud-ebmgn8v-2node-gpu-0",
     "The resource is out of stock in the specified zone."),
    ("alicloud", "alicloud_OperationDenied.NoStock_tea.txt", "OperationDenied.NoStock",
     "alicloud-ebmgn8v-2node-gpu-0", "The resource is out of stock in the specified zone."),
    ("alicloud", "alicloud_Zone.NotOnSale.txt", "Zone.NotOnSale", "alicloud-ebmgn8v-2node-gpu-0",
     "The resource in the specified zone is no longer available for sale."),
    ("alicloud", "alicloud_QuotaExceed.ElasticQuota.txt", "QuotaExceed.ElasticQuota", "alicloud-ebmgn8v-2node-gpu-0",
     "The number of vCPUs assigned to the ECS instances has exceeded the quota"),
    ("alicloud", "alicloud_InvalidParameter.txt", "InvalidParameter", "alicloud-ebmgn8v-2node-gpu-0",
     'The specified parameter "SystemDisk.Category" is not valid.'),
])
def test_a_recorded_error_is_read_as_the_catalog_says(cloud, name, code, resource, says):
    error = classify(cloud, capture(name))
    row = capacity_error(cloud, code)
    assert (error.cloud, error.code, error.klass, error.scope) == (cloud, code, row.klass, row.scope)
    assert error.resource == resource
    assert says in error.message
    assert "RequestID" not in error.message and "ErrorCode" not in error.message  # the provider's words only


def test_a_text_without_an_error_code_is_fatal_and_says_its_last_meaningful_lines():
    error = classify("aws", capture("aws_no_code_timeout.txt"))
    assert (error.code, error.klass, error.scope) == ("", "fatal", "all")
    assert error.message == ("waiting for EC2 Instance (i-032319ee5436b513c) create: timeout while waiting for "
                             "state to become 'running' (last state: 'pending', timeout: 10m0s)")
    assert error.resource == "aws-p5-2node-gpu-0"


def test_an_unknown_code_is_fatal_never_a_guessed_capacity_error():
    text = capture("aws_InsufficientInstanceCapacity_spot.txt").replace("InsufficientInstanceCapacity",
                                                                        "InsufficientUnicornCapacity")
    error = classify("aws", text)
    assert (error.code, error.klass, error.scope) == ("InsufficientUnicornCapacity", "fatal", "all")
    assert "There is no Spot capacity available" in error.message
    # another cloud's code is not this cloud's
    assert classify("alicloud", capture("aws_Unsupported_us-east-1a.txt")).klass == "fatal"


def test_when_one_up_reports_several_errors_the_broadest_decides():
    capacity = capture("aws_InsufficientInstanceCapacity_on-demand_us-east-1a.txt")
    quota = capture("aws_VcpuLimitExceeded.txt")
    error = classify("aws", capacity + quota)
    assert error.code == "VcpuLimitExceeded"


# ---------------------------------------------------------------- the order of candidates

def test_candidates_are_every_zone_on_the_cheapest_type_then_every_zone_on_the_next():
    order = candidates(US_EAST, [p5(SPOT_THEN_ON_DEMAND)])
    assert order == [at("us-east-1a", "spot"), at("us-east-1b", "spot"),
                     at("us-east-1a", "on-demand"), at("us-east-1b", "on-demand")]
    assert describe_order(order) == ["1. us-east-1a: gpu spot", "2. us-east-1b: gpu spot",
                                     "3. us-east-1a: gpu on-demand", "4. us-east-1b: gpu on-demand"]


def test_pools_share_the_zone_and_a_pool_without_fallback_keeps_its_one_type():
    train = p5(SPOT_THEN_ON_DEMAND)
    serve = PoolAsk("serve", "g6e.48xlarge", 1, catalog.instance_type("aws", "g6e.48xlarge").vcpus, ("on-demand",))
    order = candidates(["us-east-1a"], [train, serve])
    assert order == [Placement("us-east-1a", (("gpu", "spot"), ("serve", "on-demand"))),
                     Placement("us-east-1a", (("gpu", "on-demand"), ("serve", "on-demand")))]
    assert describe_order(order)[0] == "1. us-east-1a: gpu spot, serve on-demand"
    assert candidates(US_EAST, [p5()]) == [at("us-east-1a", "on-demand"), at("us-east-1b", "on-demand")]


# ---------------------------------------------------------------- AWS

def test_no_capacity_in_the_first_zone_moves_the_cluster_to_the_next():
    cloud = FlakyCloud({("us-east-1a", "on-demand"): "aws_InsufficientInstanceCapacity_on-demand_us-east-1a.txt"})
    outcome, lines, _ = failover(cloud, [p5()], US_EAST)
    assert outcome.placement == at("us-east-1b", "on-demand")
    assert codes(outcome.attempts) == [("us-east-1a", "on-demand", "InsufficientInstanceCapacity"),
                                       ("us-east-1b", "on-demand", None)]
    assert lines == ["up in us-east-1a, gpu on on-demand: InsufficientInstanceCapacity (capacity): "
                     "trying us-east-1b, gpu on on-demand",
                     "up in us-east-1b, gpu on on-demand: done"]


def test_spot_that_no_zone_has_falls_back_to_on_demand():
    spot_ice = "aws_InsufficientInstanceCapacity_spot.txt"
    cloud = FlakyCloud({("us-east-1a", "spot"): spot_ice, ("us-east-1b", "spot"): spot_ice})
    outcome, lines, _ = failover(cloud, [p5(SPOT_THEN_ON_DEMAND)], US_EAST)
    assert outcome.placement == at("us-east-1a", "on-demand")
    assert codes(outcome.attempts) == [("us-east-1a", "spot", "InsufficientInstanceCapacity"),
                                       ("us-east-1b", "spot", "InsufficientInstanceCapacity"),
                                       ("us-east-1a", "on-demand", None)]
    assert lines[1] == ("up in us-east-1b, gpu on spot: InsufficientInstanceCapacity (capacity): "
                        "trying us-east-1a, gpu on on-demand")


def test_a_zone_that_does_not_sell_the_type_is_dropped_for_on_demand_too():
    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_Unsupported_us-east-1a.txt",
                        ("us-east-1b", "spot"): "aws_InsufficientInstanceCapacity_spot.txt"})
    outcome, lines, _ = failover(cloud, [p5(SPOT_THEN_ON_DEMAND)], US_EAST)
    assert outcome.placement == at("us-east-1b", "on-demand")
    assert at("us-east-1a", "on-demand") not in cloud.ups
    assert codes(outcome.attempts) == [("us-east-1a", "spot", "Unsupported"),
                                       ("us-east-1b", "spot", "InsufficientInstanceCapacity"),
                                       ("us-east-1b", "on-demand", None)]
    assert lines[0] == (f"up in us-east-1a, gpu on spot: Unsupported ({klass('aws', 'Unsupported')}): "
                        "us-east-1a ruled out; trying us-east-1b, gpu on spot")


def test_a_spot_price_below_the_market_drops_spot_in_every_zone():
    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_SpotMaxPriceTooLow.txt"})
    outcome, lines, _ = failover(cloud, [p5(SPOT_THEN_ON_DEMAND)], US_EAST)
    assert at("us-east-1b", "spot") not in cloud.ups
    assert codes(outcome.attempts) == [("us-east-1a", "spot", "SpotMaxPriceTooLow"),
                                       ("us-east-1a", "on-demand", None)]
    assert lines[0] == (f"up in us-east-1a, gpu on spot: SpotMaxPriceTooLow ({klass('aws', 'SpotMaxPriceTooLow')}): "
                        "gpu on spot ruled out; trying us-east-1a, gpu on on-demand")


def test_a_spot_quota_drops_spot_and_with_spot_alone_stops_with_the_spot_quota():
    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_MaxSpotInstanceCountExceeded.txt"})
    outcome, _, _ = failover(cloud, [p5(SPOT_THEN_ON_DEMAND)], US_EAST)
    assert codes(outcome.attempts)[-1] == ("us-east-1a", "on-demand", None)

    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_MaxSpotInstanceCountExceeded.txt"})
    stopped, _, _ = failover(cloud, [p5(("spot",))], US_EAST, region="us-east-1")
    assert isinstance(stopped, FailoverStopped)
    assert cloud.ups == [at("us-east-1a", "spot")]
    quota = catalog.vcpu_quota("p5.48xlarge", "spot")
    message = str(stopped)
    assert "no allowed placement is left" in message
    assert f"needs {2 * catalog.instance_type('aws', 'p5.48xlarge').vcpus} vCPU of {quota.name}" in message
    assert f"--quota-code {quota.code} --region us-east-1" in message


def test_throttling_is_retried_in_place_with_backoff_then_succeeds():
    throttled = "aws_RequestLimitExceeded.txt"
    cloud = FlakyCloud({("us-east-1a", "on-demand"): [throttled, throttled, None]})
    outcome, lines, sleeps = failover(cloud, [p5()], US_EAST)
    assert outcome.placement == at("us-east-1a", "on-demand")
    assert cloud.ups == [at("us-east-1a", "on-demand")] * 3
    assert sleeps == [5, 10]
    assert lines[0] == ("up in us-east-1a, gpu on on-demand: RequestLimitExceeded (transient): "
                        "retrying in 5s (1 of 3)")


def test_throttling_that_lasts_stops_after_the_retries():
    cloud = FlakyCloud({("us-east-1a", "on-demand"): "aws_RequestLimitExceeded.txt"})
    stopped, _, sleeps = failover(cloud, [p5()], US_EAST)
    assert isinstance(stopped, FailoverStopped)
    assert sleeps == [5, 10, 20] and len(cloud.ups) == 4
    assert at("us-east-1b", "on-demand") not in cloud.ups
    assert "still failing after 3 retries in us-east-1a" in str(stopped)


@pytest.mark.parametrize("recorded, code", [("aws_InstanceLimitExceeded.txt", "InstanceLimitExceeded"),
                                            ("aws_VcpuLimitExceeded.txt", "VcpuLimitExceeded")])
def test_an_on_demand_quota_stops_at_once_with_the_quota_and_the_vcpus_to_ask_for(recorded, code):
    cloud = FlakyCloud({("us-east-1a", "on-demand"): recorded})
    stopped, lines, _ = failover(cloud, [p5()], US_EAST, region="us-east-1")
    assert isinstance(stopped, FailoverStopped)
    assert cloud.ups == [at("us-east-1a", "on-demand")]
    quota = catalog.vcpu_quota("p5.48xlarge", "on-demand")
    vcpus = 2 * catalog.instance_type("aws", "p5.48xlarge").vcpus
    message = str(stopped)
    assert message.splitlines()[:2] == ["goldenenv up stopped after 1 attempt(s):",
                                        f"  1. us-east-1a, gpu on on-demand → {code} (quota)"]
    assert (f"gpu: 2 x p5.48xlarge needs {vcpus} vCPU of {quota.name} ({quota.code}); check with "
            f"`aws service-quotas get-service-quota --service-code ec2 --quota-code {quota.code} --region us-east-1`"
            ) in message
    assert capacity_error("aws", code).what_to_do in message
    assert lines == [f"up in us-east-1a, gpu on on-demand: {code} (quota): stopping"]
    # literal anchor: AWS's quota table, "Running On-Demand P instances", and 2 x 192 vCPUs
    assert (quota.code, vcpus) == ("L-417A185B", 384)


def test_a_quota_after_a_capacity_error_reports_both_attempts():
    cloud = FlakyCloud({("us-east-1a", "on-demand"): "aws_InsufficientInstanceCapacity_on-demand_us-east-1a.txt",
                        ("us-east-1b", "on-demand"): "aws_VcpuLimitExceeded.txt"})
    stopped, _, _ = failover(cloud, [p5()], US_EAST)
    assert [a.error.code for a in stopped.attempts] == ["InsufficientInstanceCapacity", "VcpuLimitExceeded"]
    assert str(stopped).splitlines()[1:3] == [
        "  1. us-east-1a, gpu on on-demand → InsufficientInstanceCapacity (capacity)",
        "  2. us-east-1b, gpu on on-demand → VcpuLimitExceeded (quota)"]


def test_an_invalid_parameter_stops_at_once_after_one_attempt_and_says_the_error():
    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_InvalidParameterValue.txt"})
    stopped, _, sleeps = failover(cloud, [p5(SPOT_THEN_ON_DEMAND)], US_EAST)
    assert isinstance(stopped, FailoverStopped)
    assert cloud.ups == [at("us-east-1a", "spot")] and sleeps == []
    assert klass("aws", "InvalidParameterValue") == "fatal"
    assert ("InvalidParameterValue: The architecture 'arm64' of the specified instance type does not match the "
            "architecture 'x86_64' of the specified AMI.") in str(stopped)


def test_an_error_without_a_code_stops_and_shows_what_pulumi_said():
    cloud = FlakyCloud({("us-east-1a", "on-demand"): "aws_no_code_timeout.txt"})
    stopped, _, _ = failover(cloud, [p5()], US_EAST)
    assert cloud.ups == [at("us-east-1a", "on-demand")]
    assert "→ no error code (fatal)" in str(stopped)
    assert "timeout while waiting for state to become 'running'" in str(stopped)


def test_no_capacity_anywhere_says_so_and_lists_the_candidates():
    ice = "aws_InsufficientInstanceCapacity_on-demand_us-east-1a.txt"
    cloud = FlakyCloud({("us-east-1a", "on-demand"): ice, ("us-east-1b", "on-demand"): ice})
    stopped, lines, _ = failover(cloud, [p5()], US_EAST)
    assert isinstance(stopped, FailoverStopped)
    message = str(stopped)
    assert "no allowed placement is left; the candidates were, in order:" in message
    assert "  1. us-east-1a: gpu on-demand\n  2. us-east-1b: gpu on-demand" in message
    assert capacity_error("aws", "InsufficientInstanceCapacity").what_to_do in message
    assert lines[-1] == ("up in us-east-1b, gpu on on-demand: InsufficientInstanceCapacity (capacity): "
                         "no allowed placement is left")


def test_a_price_error_rules_out_only_the_pool_that_failed():
    train = p5(SPOT_THEN_ON_DEMAND)
    serve = PoolAsk("serve", "g6e.48xlarge", 1, catalog.instance_type("aws", "g6e.48xlarge").vcpus,
                    ("spot", "spot", "on-demand"))
    first = Placement("us-east-1a", (("gpu", "spot"), ("serve", "spot")))
    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_SpotMaxPriceTooLow.txt"})
    outcome, _, _ = failover(cloud, [train, serve], ["us-east-1a"])
    # gpu's spot is out (the error names aws-p5-2node-gpu-0); serve may stay on spot
    assert cloud.ups == [first, Placement("us-east-1a", (("gpu", "on-demand"), ("serve", "spot")))]
    assert outcome.placement.capacity_of("serve") == "spot"


def test_a_price_error_tied_to_no_pool_rules_out_every_pools_type():
    cloud = FlakyCloud({("us-east-1a", "spot"): "aws_SpotMaxPriceTooLow.txt"},
                       text=lambda name: capture(name).replace("aws-p5-2node-gpu-", "aws-p5-2node-head-"))
    serve = PoolAsk("serve", "g6e.48xlarge", 1, catalog.instance_type("aws", "g6e.48xlarge").vcpus,
                    ("on-demand",))
    stopped, _, _ = failover(cloud, [p5(SPOT_THEN_ON_DEMAND), serve], ["us-east-1a"])
    # serve stays on-demand in every candidate: with every pool's type ruled out, nothing is left
    assert isinstance(stopped, FailoverStopped) and len(cloud.ups) == 1


# ---------------------------------------------------------------- Alibaba Cloud

def test_alibaba_no_stock_moves_to_the_next_zone():
    cloud = FlakyCloud({("cn-wulanchabu-a", "on-demand"): "alicloud_OperationDenied.NoStock.txt"})
    outcome, lines, _ = failover(cloud, [ebmgn8v()], WULANCHABU, provider="alicloud")
    assert codes(outcome.attempts) == [("cn-wulanchabu-a", "on-demand", "OperationDenied.NoStock"),
                                       ("cn-wulanchabu-b", "on-demand", None)]
    assert lines[0] == (f"up in cn-wulanchabu-a, gpu on on-demand: OperationDenied.NoStock "
                        f"({klass('alicloud', 'OperationDenied.NoStock')}): trying cn-wulanchabu-b, gpu on on-demand")


def test_alibaba_zone_not_on_sale_is_dropped_for_every_capacity_type():
    cloud = FlakyCloud({("cn-wulanchabu-a", "spot"): "alicloud_Zone.NotOnSale.txt",
                        ("cn-wulanchabu-b", "spot"): "alicloud_OperationDenied.NoStock_tea.txt",
                        ("cn-wulanchabu-c", "spot"): "alicloud_OperationDenied.NoStock.txt"})
    outcome, _, _ = failover(cloud, [ebmgn8v(SPOT_THEN_ON_DEMAND)], WULANCHABU, provider="alicloud")
    assert codes(outcome.attempts) == [("cn-wulanchabu-a", "spot", "Zone.NotOnSale"),
                                       ("cn-wulanchabu-b", "spot", "OperationDenied.NoStock"),
                                       ("cn-wulanchabu-c", "spot", "OperationDenied.NoStock"),
                                       ("cn-wulanchabu-b", "on-demand", None)]


def test_alibaba_vcpu_quota_stops_with_the_vcpus_and_the_quota_center():
    cloud = FlakyCloud({("cn-wulanchabu-a", "on-demand"): "alicloud_QuotaExceed.ElasticQuota.txt"})
    stopped, _, _ = failover(cloud, [ebmgn8v()], WULANCHABU, provider="alicloud", region="cn-wulanchabu")
    assert isinstance(stopped, FailoverStopped) and len(cloud.ups) == 1
    it = catalog.instance_type("alicloud", "ecs.ebmgn8v.48xlarge")
    message = str(stopped)
    assert f"the cluster asks for {2 * it.vcpus} vCPU in cn-wulanchabu: gpu: 2 x {it.name}" in message
    assert capacity_error("alicloud", "QuotaExceed.ElasticQuota").what_to_do in message
    assert "Quota Center" in message


def test_alibaba_invalid_parameter_stops_at_once():
    cloud = FlakyCloud({("cn-wulanchabu-a", "on-demand"): "alicloud_InvalidParameter.txt"})
    stopped, _, _ = failover(cloud, [ebmgn8v()], WULANCHABU, provider="alicloud")
    assert isinstance(stopped, FailoverStopped) and len(stopped.attempts) == 1
    assert 'InvalidParameter: The specified parameter "SystemDisk.Category" is not valid.' in str(stopped)
