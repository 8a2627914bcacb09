"""Tencent Cloud's stop function beyond the budget: the alarm that tells the budget's addresses when it fails, the CAM
receivers that alarm needs (and may hold nothing), and the time to live and idle stop on its hourly timer."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import test_contract_stop_alerts as alerts
import yaml

from goldenenv import guardrails, plan
from goldenenv.clouds.tencent import privilege

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STACKS = Path(__file__).resolve().parents[2] / "stacks"
HCC, DEV = "tencent-hccpnv5-2node", "tencent-gn7-dev"
USER = "tencentcloud:Cam/user:User"


def planned(tmp_path: Path, stack: str, **config) -> plan.Plan:
    """The shipped stack with ``config`` (goldenenv:<key> -> value) changed, planned as `goldenenv plan` does."""
    document = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    document = copy.deepcopy(document)
    for key, value in config.items():
        document["config"][f"goldenenv:{key}"] = value
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document))
    return plan.plan(stack, tmp_path)


def budget_of(stack: str, **changes) -> dict:
    budget = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]["goldenenv:budget"]
    return {**budget, **changes}


# ---------------------------------------------------------------- the failure alarm

def test_every_budget_address_is_reached_by_the_stop_functions_failure_alarm(tmp_path):
    found = planned(tmp_path, HCC, budget=budget_of(HCC, emails=["ops@example.com", "lead@example.org"]))
    reached = alerts.tencent(found.resources)
    assert list(reached.values()) == [{"ops@example.com", "lead@example.org"}]


def test_each_address_gets_a_receiver_that_can_sign_in_nowhere(tmp_path):
    found = planned(tmp_path, HCC, budget=budget_of(HCC, emails=["ops@example.com", "lead@example.org"]))
    users = [r for r in found.resources if r.type == USER]
    assert sorted(u.props["email"] for u in users) == ["lead@example.org", "ops@example.com"]
    assert all(u.props["consoleLogin"] is False and u.props["useApi"] is False for u in users)
    assert not [r for r in found.resources if r.type in (privilege.USER_ATTACHMENT, privilege.GROUP_MEMBERSHIP)]


def test_plan_tells_each_address_to_confirm_it_before_alarms_reach_it():
    notes = " ".join(f.message for f in plan.plan(HCC, STACKS).findings if f.rule == "plan-note")
    assert "Confirm to receive" in notes and "ml-infra@example.com" in notes


def test_a_stack_without_a_stop_function_plans_no_receiver(tmp_path):
    found = planned(tmp_path, HCC, budget=budget_of(HCC, hardStop=False))
    assert not [r for r in found.resources if r.type == USER]
    assert alerts.tencent(found.resources) == {}


def _judged(resources) -> list[str]:
    ctx = SimpleNamespace(resources=list(resources))
    return [m for r in resources for m in privilege.judge(r, ctx)]


@pytest.mark.parametrize("prop", ["consoleLogin", "useApi"])
def test_a_receiver_that_can_sign_in_is_caught(prop):
    resources = plan.plan(HCC, STACKS).resources
    user = next(r for r in resources if r.type == USER)
    widened = [dataclasses.replace(r, props={**r.props, prop: True}) if r is user else r for r in resources]
    found = _judged(widened)
    assert len(found) == 1 and user.name in found[0] and "receiver" in found[0], found


@pytest.mark.parametrize("kind,props", [
    (privilege.USER_ATTACHMENT, lambda user: {"userName": user.props["name"], "policyId": "1"}),
    (privilege.GROUP_MEMBERSHIP, lambda user: {"groupId": "g-1", "userNames": [user.props["name"]]}),
])
def test_a_receiver_given_a_policy_or_a_group_is_caught(kind, props):
    resources = list(plan.plan(HCC, STACKS).resources)
    user = next(r for r in resources if r.type == USER)
    assert _judged(resources) == []
    extra = guardrails.PlannedResource(urn=f"urn:pulumi:s::p::{kind}::widened", type=kind, name="widened",
                                       props=props(user))
    found = _judged(resources + [extra])
    assert len(found) == 1 and "widened" in found[0] and "holds nothing" in found[0], found
