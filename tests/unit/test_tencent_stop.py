"""Tencent Cloud's stop function beyond the budget: the alarm that tells the budget's addresses when it fails, the CAM
receivers that alarm needs (and may hold nothing), and the time to live and idle stop on its hourly timer."""

from __future__ import annotations

import copy
import dataclasses
from datetime import timedelta
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


# ---------------------------------------------------------------- the time to live and the idle stop

def _world(count: int):
    from stopfakes.tencent import TencentAdapter
    from stopfakes.world import Faults, FleetNode

    world = TencentAdapter([FleetNode(f"dev-node-{k}") for k in range(count)], Faults())
    return world, [world.named(f"dev-node-{k}") for k in range(count)]


def _running(world) -> set[str]:
    return {world.named(n) for n in world.running()}


def test_a_node_past_its_time_to_live_is_stopped_and_a_younger_one_kept():
    from stopfakes.tencent import NOW

    world, (old, young) = _world(2)
    world.api.instances[young]["CreatedTime"] = (NOW - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert not world.invoke("ttl").failed
    assert _running(world) == {young}


def test_the_time_to_live_counts_from_creation_in_utc():
    """CreatedTime is UTC (Z): 23 h 59 min after it a 24 h time to live has not run out; 24 h after it has."""
    from stopfakes.tencent import NOW

    world, (edge, past) = _world(2)
    world.api.instances[edge]["CreatedTime"] = (NOW - timedelta(hours=23, minutes=59)).strftime("%Y-%m-%dT%H:%M:%SZ")
    world.api.instances[past]["CreatedTime"] = (NOW - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert not world.invoke("ttl").failed
    assert _running(world) == {edge}


def test_a_ttl_run_with_the_hard_stop_off_reads_no_bill():
    from stopfakes.tencent import ENV, NOW, PATHS

    from goldenenv.clouds.tencent import stop
    from stopfakes import simulated_clock

    world, _ = _world(1)
    actions = []

    def api(service, version, action, params):
        actions.append(action)
        return world.api(service, version, action, params)

    stop.handler({}, None, env={**ENV, **PATHS["ttl"]}, api=api, clock=simulated_clock(570), now=NOW)
    assert "DescribeBillSummaryByTag" not in actions and "StopInstances" in actions


def test_a_node_idle_for_the_whole_window_is_stopped_and_busy_or_unmeasured_ones_are_kept():
    """232 vCPUs: idle is under min(5 %, half a core) = 0.22 %. One core busy (a GPU job's feeder) is 0.43 %: busy.
    Six 5-minute means cover 30 minutes; two points are too few to call a node idle."""
    world, (idle, feeding, sparse, silent) = _world(4)
    world.api.cpu = {idle: [0.1] * 6, feeding: [0.1] * 5 + [0.43], sparse: [0.0] * 2}
    assert not world.invoke("idle").failed
    assert _running(world) == {feeding, sparse, silent}


def test_a_node_younger_than_the_idle_time_is_kept():
    from stopfakes.tencent import NOW

    world, (new,) = _world(1)
    world.api.instances[new]["CreatedTime"] = (NOW - timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    world.api.cpu = {new: [0.0] * 6}
    assert not world.invoke("idle").failed
    assert _running(world) == {new}


def test_a_metric_that_cannot_be_read_fails_the_run_by_name_and_stops_nothing_as_idle():
    world, nodes = _world(2)
    world.api.cpu = {n: [0.0] * 6 for n in nodes}
    world.api.monitor_refuses = True
    outcome = world.invoke("idle")
    assert outcome.failed and all(n in outcome.message for n in nodes), outcome.message
    assert _running(world) == set(nodes)


def test_a_node_whose_creation_cannot_be_read_is_named_and_the_others_still_stopped():
    world, (unreadable, due) = _world(2)
    world.api.instances[unreadable]["CreatedTime"] = "2026-07-19 02:00:00"
    outcome = world.invoke("ttl")
    assert outcome.failed and unreadable in outcome.message and "CreatedTime" in outcome.message, outcome.message
    assert _running(world) == {unreadable}


def test_ttl_and_idle_plan_the_stop_function_without_the_hard_stop(tmp_path):
    found = planned(tmp_path, DEV, budget=budget_of(DEV, hardStop=False),
                    lifecycle={"ttlHours": 12, "idleMinutes": 45})
    (function,) = [r for r in found.resources if r.type == "tencentcloud:Scf/function:Function"]
    env = function.props["environment"]
    assert (env["GOLDENENV_HARD_STOP"], env["GOLDENENV_TTL_HOURS"], env["GOLDENENV_IDLE_MINUTES"]) == (
        "false", "12", "45")
    (policy,) = [r for r in found.resources if r.type == privilege.POLICY and "BudgetGuard" in r.urn]
    assert "name/monitor:GetMonitorData" in policy.props["document"]
    assert not [f for f in found.findings if f.severity.name == "ERROR"], found.findings
    assert alerts.tencent(found.resources), "the time to live's function alerts when it fails too"


def test_only_the_idle_stop_may_read_cloud_monitor(tmp_path):
    found = planned(tmp_path, DEV, lifecycle={"ttlHours": 12})
    (policy,) = [r for r in found.resources if r.type == privilege.POLICY and "BudgetGuard" in r.urn]
    assert "monitor" not in policy.props["document"]


@pytest.mark.parametrize("key,value", [("GOLDENENV_TTL_HOURS", "48"), ("GOLDENENV_IDLE_MINUTES", None)])
def test_a_stop_function_told_another_lifecycle_is_caught(tmp_path, key, value):
    import shipped

    found = planned(tmp_path, DEV, lifecycle={"ttlHours": 12, "idleMinutes": 45})
    function = next(r for r in found.resources if r.type == "tencentcloud:Scf/function:Function")
    env = {k: v for k, v in {**function.props["environment"], key: value}.items() if v is not None}
    changed = [dataclasses.replace(r, props={**r.props, "environment": env}) if r is function else r
               for r in found.resources]
    chain = [f for f in shipped.guardrail_findings(found, changed) if f.rule == guardrails.BUDGET_STOP_CHAIN]
    assert chain and chain[0].urn == function.urn and key in chain[0].message, chain


# ---------------------------------------------------------------- StopInstances is asynchronous

def _hard_stop_world(count: int, refuse=()):
    from stopfakes.tencent import TencentAdapter
    from stopfakes.world import Faults, FleetNode

    world = TencentAdapter([FleetNode(f"dev-node-{k}") for k in range(count)], Faults(refuse=frozenset(refuse)))
    return world, [world.named(f"dev-node-{k}") for k in range(count)]


def test_a_stop_tencent_accepts_and_then_fails_is_named_with_its_message_and_fails_the_run():
    """StopInstances accepts the whole batch; dev-node-1's stop ends FAILED (RUNNING again) on a later look."""
    world, (first, failing, third) = _hard_stop_world(3, refuse={"dev-node-1"})
    outcome = world.invoke("hard-stop")
    assert outcome.failed, "a stop Tencent failed went unnoticed"
    assert failing in outcome.message and "could not be shut down" in outcome.message, outcome.message
    assert first not in outcome.message and third not in outcome.message, outcome.message
    assert _running(world) == {failing}


def test_the_next_run_stops_a_node_whose_stop_failed_once():
    world, (node,) = _hard_stop_world(1, refuse={"dev-node-0"})
    assert world.invoke("hard-stop").failed
    world.api.faults = dataclasses.replace(world.api.faults, refuse=frozenset())
    assert not world.invoke("hard-stop").failed
    assert _running(world) == set()


def test_a_stop_that_takes_several_looks_to_finish_passes():
    world, nodes = _hard_stop_world(2)
    world.api.stop_looks = 4
    outcome = world.invoke("hard-stop")
    assert not outcome.failed, outcome.message
    assert _running(world) == set()


def test_a_stop_not_finished_when_the_time_runs_out_is_named_and_fails_the_run():
    """Tencent still shows the stop OPERATING after all of the invocation's time: unknown is not stopped."""
    world, (slow,) = _hard_stop_world(1)
    world.api.stop_looks = 10_000
    outcome = world.invoke("hard-stop")
    assert outcome.failed and slow in outcome.message and "had not finished" in outcome.message, outcome.message
    assert "OPERATING" in outcome.message, outcome.message


def test_each_accepted_stop_is_looked_at_again_by_id():
    from stopfakes.tencent import ENV, NOW

    from goldenenv.clouds.tencent import stop
    from stopfakes import simulated_clock

    world, nodes = _hard_stop_world(2)
    calls = []

    def api(service, version, action, params):
        calls.append((action, tuple(params.get("InstanceIds") or ())))
        return world.api(service, version, action, params)

    stop.handler({}, None, env=ENV, api=api, clock=simulated_clock(570), now=NOW)
    after = calls[[a for a, _ in calls].index("StopInstances") + 1:]
    assert ("DescribeInstances", tuple(nodes)) in after, calls


@pytest.mark.parametrize("state,code", [("STOPPING", "UnsupportedOperation.InstanceStateStopping"),
                                        ("STOPPED", "UnsupportedOperation.InstanceStateStopped"),
                                        ("PENDING", "UnsupportedOperation.InstanceStatePending")])
def test_the_fake_refuses_at_the_call_what_tencent_refuses_there(state, code):
    """Only a RUNNING instance can be stopped (StopInstances' page); the error codes are the SDK's errorcodes.py."""
    from goldenenv.clouds.tencent import stop

    world, (node,) = _hard_stop_world(1)
    world.api.instances[node]["InstanceState"] = state
    with pytest.raises(stop.ApiError) as refused:
        world.api("cvm", "2017-03-12", "StopInstances", {"InstanceIds": [node], "StoppedMode": "STOP_CHARGING"})
    assert refused.value.code == code
