"""What each cloud does when the Slurm head is lost is data in its folder (HEAD_RECOVERY, with its source), the README
says it (its "What survives what" row is made from that data), and every shipped stack's planned head is held to
it: a head planned so that its cloud would not bring it back (recovery turned off, a spot head) is caught."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from goldenenv import clouds, slurm
from goldenenv.clouds import headrecovery
from shipped import plan_of, pulumi_stacks

README = Path(__file__).resolve().parents[2] / "README.md"


def planned_head(stack: str):
    """The stack's head machine as `goldenenv plan` plans it (its name ends with the head's host name)."""
    planned = plan_of(stack)
    wanted = headrecovery.of(planned.spec.cloud).head_type
    heads = [r for r in planned.resources if r.type == wanted and r.name.endswith(f"-{slurm.HEAD_HOSTNAME}")]
    assert len(heads) == 1, f"{stack}: one {wanted} named *-{slurm.HEAD_HOSTNAME}, found {[r.name for r in heads]}"
    return heads[0]


@pytest.mark.parametrize("cloud", clouds.names())
def test_every_cloud_says_what_brings_its_head_back_and_where_that_is_written(cloud):
    claim = headrecovery.of(cloud)
    assert claim.by_itself and claim.otherwise and claim.queue, cloud
    assert claim.source.startswith("https://"), f"{cloud}: a claim about the cloud needs its public page"
    if clouds.get(cloud).uses_pulumi:
        assert claim.head_type and claim.planned, f"{cloud}: the planned head's type and what it must ask for"


def test_the_readme_table_for_a_lost_head_is_every_clouds_claim():
    table = headrecovery.readme_table(clouds.names())
    text = "\n".join(table)
    assert text in README.read_text(), (
        "README's table for a lost head (under \"What survives what\") differs from the clouds' HEAD_RECOVERY: paste "
        f"goldenenv.clouds.headrecovery.readme_table(clouds.names()):\n{text}")
    for cloud in clouds.names():
        assert any(line.startswith(f"| {headrecovery.of(cloud).cloud} |") for line in table), cloud


@pytest.mark.parametrize(("cloud", "stack"), pulumi_stacks())
def test_every_shipped_head_is_planned_so_its_cloud_brings_it_back(cloud, stack):
    if plan_of(stack).spec.scheduler != "slurm":
        pytest.skip(f"{stack} runs no Slurm head")
    head = planned_head(stack)
    assert headrecovery.of(cloud).problems(head.props) == [], head.name


BAD_HEADS = [
    ("aws", "maintenanceOptions", {"autoRecovery": "disabled"}),
    ("aws", "instanceMarketOptions", {"marketType": "spot"}),
    ("alicloud", "maintenanceAction", "Stop"),
    ("alicloud", "spotStrategy", "SpotAsPriceGo"),
    ("gcp", "scheduling", {"automaticRestart": False, "onHostMaintenance": "MIGRATE", "provisioningModel": "STANDARD"}),
    ("gcp", "scheduling", {"automaticRestart": True, "onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT"}),
    ("azure", "priority", "Spot"),
    ("tencent", "instanceChargeType", "SPOTPAID"),
]
"""Inputs that take a head out of its cloud's recovery, as each provider's SDK spells them (pulumi_aws
maintenance_options.auto_recovery and instance_market_options; pulumi_alicloud maintenance_action and spot_strategy;
pulumi_gcp scheduling; pulumi_azure_native priority; tencentcloud-iac-pulumi instance_charge_type)."""


@pytest.mark.parametrize(("cloud", "key", "value"), BAD_HEADS)
def test_a_head_its_cloud_would_not_bring_back_is_caught_by_name(cloud, key, value):
    stack = next(s for c, s in pulumi_stacks() if c == cloud)
    props = copy.deepcopy(dict(planned_head(stack).props))
    props[key] = value
    found = headrecovery.of(cloud).problems(props)
    assert found and all(line.startswith(key) for line in found), found
    assert headrecovery.of(cloud).source in found[0]
