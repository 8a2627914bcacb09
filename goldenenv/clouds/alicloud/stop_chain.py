"""Alibaba Cloud's stop chain, as budget-stop-chain follows it over the planned resources.

Alibaba's budgets cannot call a function, so the guard function is the stack's budget (guard.py): it reads the split
bill on a timer. The chain is: its environment names this stack, the stack's limit, currency and a 100 % threshold,
and the hard stop when the stack asks (a dry run or a missing timer is budget-not-planned's) -> its timer trigger is
enabled -> its RAM role's attached policy allows ecs:StopInstances on this stack's instances. A time to live is each
node's own auto release time (set at creation), so with one every node must carry autoReleaseTime.
RAM: https://help.aliyun.com/zh/ram/developer-reference/ram-authorization (ECS actions, acs:ResourceTag
conditions); FC 3.0 timer trigger config (cronExpression, enable):
https://help.aliyun.com/zh/functioncompute/fc-3-0/user-guide/timer-trigger-overview.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.clouds.alicloud import guard
from goldenenv.guardrails import (
    STACK_TAG,
    Context,
    PlannedResource,
    _is_false,
    _is_true,
    _items,
    _mapping,
    amount_gap,
    currency_gap,
    stack_value_gap,
)
from goldenenv.privilege import statements

FUNCTION = "alicloud:fc/v3Function:V3Function"
TRIGGER = "alicloud:fc/v3Trigger:V3Trigger"
ROLE = "alicloud:ram/role:Role"
POLICY = "alicloud:ram/policy:Policy"
ATTACHMENT = "alicloud:ram/rolePolicyAttachment:RolePolicyAttachment"
INSTANCE = "alicloud:ecs/instance:Instance"

STOP_ACTION = "ecs:StopInstances"
STOP_ACTIONS = (STOP_ACTION,)
"""What the chain asks of the stop's identity; privilege.NEEDS["stop"] grants it (a test checks)."""

NO_SUCH_LINK: dict[str, str] = {
    "stop-threshold":
        "the guard is its own budget: it stops at its limit, whatever its alert thresholds",
    "notification-switch":
        "the guard is its own budget: its only switch is its timer trigger's enable",
    "lifecycle-schedule":
        "a time to live is each node's own autoReleaseTime, set by up at creation (judged on the nodes), not "
        "a schedule",
}
"""Links of the chain this cloud does not have, and why (budget-stop-chain has nothing to judge there): the
contract test runs every other link's row on its stacks."""
STOPPING_SYSTEM_POLICIES = frozenset({"AliyunECSFullAccess", "AdministratorAccess"})
"""System policies that allow ecs:StopInstances everywhere; their breadth is the least-privilege rule's question."""


def _allows_stop(statement: Mapping[str, Any], stack: str | None) -> bool:
    if str(statement.get("Effect") or "").lower() != "allow":
        return False
    actions = statement.get("Action")
    patterns = [actions] if isinstance(actions, str) else [a for a in _items(actions) if isinstance(a, str)]
    if not any(fnmatch.fnmatch(STOP_ACTION.lower(), p.lower()) for p in patterns):
        return False
    required = [v for clauses in _mapping(statement.get("Condition")).values()
                for key, value in _mapping(clauses).items() if str(key).lower() == f"acs:resourcetag/{STACK_TAG}"
                for v in ([value] if isinstance(value, str) else _items(value))]
    return not required or stack is None or stack in required


def _role_gap(function: PlannedResource, ctx: Context) -> str | None:
    role = next((r for r in ctx.of_type(ROLE) if function.props.get("role") in
                 {r.outputs.get("arn"), r.props.get("arn")} - {None}), None)
    if role is None:
        return None  # an existing role: nothing of the plan to read
    name = role.props.get("roleName")
    attached = [a for a in ctx.of_type(ATTACHMENT) if a.props.get("roleName") == name]
    if any(a.props.get("policyName") in STOPPING_SYSTEM_POLICIES for a in attached):
        return None
    names = {a.props.get("policyName") for a in attached}
    for policy in ctx.of_type(POLICY):
        if policy.props.get("policyName") in names and any(
                _allows_stop(s, ctx.stack) for s in statements(policy.props.get("policyDocument"))):
            return None
    return (f"runs as RAM role {name}, to which no attached policy allows {STOP_ACTION} on this stack's instances "
            f"(acs:ResourceTag/{STACK_TAG} = {ctx.stack}): its stop would be refused and the nodes keep running; "
            f"allow it there")


def _timer_gaps(function: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    name = function.props.get("functionName")
    for trigger in ctx.of_type(TRIGGER):
        if trigger.props.get("functionName") != name or str(trigger.props.get("triggerType")).lower() != "timer":
            continue
        config = trigger.props.get("triggerConfig")
        try:
            config = json.loads(config) if isinstance(config, str) else _mapping(config)
        except ValueError:
            config = {}
        if _is_false(_mapping(config).get("enable")):
            yield trigger, ("is disabled (triggerConfig enable false): the guard never runs, so it neither alerts "
                            "nor stops; set enable true")


def _guard_links(function: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    env = _mapping(function.props.get("environmentVariables"))
    thresholds = [t.strip() for t in str(env.get(guard.THRESHOLDS_ENV) or "").split(",") if t.strip()]
    gaps = [stack_value_gap(env.get(guard.STACK_ENV), ctx, guard.STACK_ENV),
            amount_gap(env.get(guard.LIMIT_ENV), ctx, guard.LIMIT_ENV),
            currency_gap(env.get(guard.CURRENCY_ENV), ctx, guard.CURRENCY_ENV),
            None if "100" in thresholds else (
                f"sets {guard.THRESHOLDS_ENV} {','.join(thresholds) or 'unset'}, with no 100: no one is told, and "
                f"nothing stops, when the money is spent; add 100"),
            (f"sets {guard.HARD_STOP_ENV} {env.get(guard.HARD_STOP_ENV) or 'unset'}, so it only alerts when the "
             f"budget is spent while the stack asks for a hard stop; set it to true")
            if ctx.hard_stop and not _is_true(env.get(guard.HARD_STOP_ENV)) else None,
            _role_gap(function, ctx) if ctx.hard_stop or _is_true(env.get(guard.HARD_STOP_ENV)) else None]
    for gap in gaps:
        if gap:
            yield function, gap
    yield from _timer_gaps(function, ctx)


def _release_links(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """A time to live on Alibaba is each node's auto release time (set once at creation)."""
    for node in ctx.of_type(INSTANCE):
        in_pool = any(t.endswith(":GpuNodePool") for t in node.urn.split("::")[2].split("$")[:-1]) \
            if node.urn.count("::") >= 2 else False
        if in_pool and not node.props.get("autoReleaseTime"):
            yield node, (f"has no autoReleaseTime while the stack asks for a time to live of {ctx.ttl_hours:g} h: "
                         f"nothing releases it when that ends; set it (up does, from lifecycle.ttlHours)")


def stop_chain(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """Every broken link of each budget guard (see the module's docstring)."""
    for function in ctx.of_type(FUNCTION):
        if guard.LIMIT_ENV in _mapping(function.props.get("environmentVariables")):
            yield from _guard_links(function, ctx)
    if ctx.ttl_hours:
        yield from _release_links(ctx)
