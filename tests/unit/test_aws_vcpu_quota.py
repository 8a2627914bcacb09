"""`plan --strict` says, per pool, how many vCPUs of which EC2 quota its nodes need.

EC2 limits running On-Demand and requested Spot capacity in vCPUs per family group and region, and a new account's
GPU quotas are often 0: 2 x p5.48xlarge need 384 vCPU of "Running On-Demand P instances" before the first `up`.
The note is what to check, not a failure: the plan cannot read the account's quota. Literal anchors from AWS's quota
tables catch a wrong catalog row that a test reading the same CSV would not.
"""

from __future__ import annotations

import pytest

from goldenenv import catalog
from goldenenv.clouds.aws.readiness import findings as readiness_findings
from goldenenv.guardrails import PlannedResource, Severity
from goldenenv.plan import plan

RULE = "strict:vcpu-quota"
STACK = "demo"
POOL = "goldenenv:aws:GpuNodePool"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"


def notes(result) -> list[str]:
    return [f.message for f in result.findings if f.rule == RULE]


def test_two_p5_nodes_need_384_vcpu_of_the_on_demand_p_quota():
    result = plan("aws-p5-2node", strict=True)
    (note,) = notes(result)
    assert note.startswith("gpu: 2 x p5.48xlarge needs 384 vCPU of Running On-Demand P instances (L-417A185B)")
    assert ("`aws service-quotas get-service-quota --service-code ec2 --quota-code L-417A185B --region us-east-1`"
            in note)
    assert {f.severity for f in result.findings if f.rule == RULE} == {Severity.WARNING}
    assert not result.failed


def test_spot_nodes_count_against_the_spot_quota():
    (note,) = notes(plan("aws-p4d-4node-spot", strict=True))
    assert note.startswith("gpu: 4 x p4d.24xlarge needs 384 vCPU of All P Spot Instance Requests (L-7212CCBC")


def test_only_plan_strict_says_it():
    assert notes(plan("aws-p5-2node")) == []


def pool(name: str, instance_type: str, count: int, spot: bool = False) -> list[PlannedResource]:
    """A node pool as the plan records it: the component, its launch template and its nodes."""
    urn = f"urn:pulumi:{STACK}::goldenenv::{POOL}::{STACK}-{name}"
    template = {"instanceType": instance_type}
    if spot:
        template["instanceMarketOptions"] = {"marketType": "spot"}
    children = [PlannedResource(urn=f"{urn}-template", type=LAUNCH_TEMPLATE, name=f"{STACK}-{name}-template",
                                props=template, parent_urn=urn)]
    children += [PlannedResource(urn=f"{urn}-{i}", type=INSTANCE, name=f"{STACK}-{name}-{i}", props={},
                                 parent_urn=urn) for i in range(count)]
    return [PlannedResource(urn=urn, type=POOL, name=f"{STACK}-{name}", props={}, custom=False), *children]


def test_each_pool_is_said_apart():
    pools = pool("train", "g6e.48xlarge", 3, spot=True) + pool("eval", "g5.xlarge", 2)
    found = [f.message for f in readiness_findings(pools, {"goldenenv:stack": STACK}) if f.rule == RULE]
    assert found == [
        "train: 3 x g6e.48xlarge needs 576 vCPU of All G and VT Spot Instance Requests (L-3819A6DF); check with "
        "`aws service-quotas get-service-quota --service-code ec2 --quota-code L-3819A6DF`",
        "eval: 2 x g5.xlarge needs 8 vCPU of Running On-Demand G and VT instances (L-DB2E81BA); check with "
        "`aws service-quotas get-service-quota --service-code ec2 --quota-code L-DB2E81BA`",
    ]


def test_a_type_whose_family_has_no_quota_row_says_so():
    (message,) = [f.message for f in readiness_findings(pool("cpu", "c7i.48xlarge", 1), {"goldenenv:stack": STACK})
                  if f.rule == RULE]
    assert message.startswith("cpu: the catalog has no on-demand vCPU quota for c7i.48xlarge")


@pytest.mark.parametrize(("instance_type", "market", "name", "code"), [
    ("p5.48xlarge", "on-demand", "Running On-Demand P instances", "L-417A185B"),
    ("p6-b200.48xlarge", "on-demand", "Running On-Demand P instances", "L-417A185B"),
    ("g5.xlarge", "on-demand", "Running On-Demand G and VT instances", "L-DB2E81BA"),
    ("vt1.3xlarge", "on-demand", "Running On-Demand G and VT instances", "L-DB2E81BA"),
    ("g6e.48xlarge", "spot", "All G and VT Spot Instance Requests", "L-3819A6DF"),
    ("p4d.24xlarge", "spot", "All P Spot Instance Requests", "L-7212CCBC"),
])
def test_quota_codes_match_awss_quota_tables(instance_type, market, name, code):
    quota = catalog.vcpu_quota(instance_type, market)
    assert (quota.name, quota.code) == (name, code)


def test_every_aws_type_in_the_catalog_has_both_quotas():
    for name in catalog.instance_types("aws"):
        for market in ("on-demand", "spot"):
            assert catalog.vcpu_quota(name, market) is not None, (name, market)


def test_vcpus_the_quota_counts_are_the_catalogs():
    assert catalog.instance_type("aws", "p5.48xlarge").vcpus == 192  # AWS's P5 page: 192 vCPUs
