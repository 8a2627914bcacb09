"""AWS's stop chain, as budget-stop-chain follows it over the planned resources.

AWS Budgets budget (a TagKeyValue cost filter on this stack's tag, the stack's limit and currency, monthly, an alert
at 100 % of actual spend) -> the notification that names an SNS topic (actual spend, at no more than the limit) ->
the topic, whose policy lets budgets.amazonaws.com publish -> a lambda subscription -> the planned function, with a
lambda permission for SNS on that topic, not a dry run -> its role, whose policy allows ec2:StopInstances on this
stack's nodes. With a time to live, the EventBridge Scheduler schedule that runs the reaper function, whose role may
stop this stack's nodes, and each node's goldenenv:ttl-hours tag (the reaper reads it); with an idle stop, each
node's CloudWatch alarm whose action stops it.
Budgets: https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_budgets_Budget.html (CostFilters
TagKeyValue "user:<key>$<value>"); SNS for budgets: https://docs.aws.amazon.com/cost-management/latest/userguide/
budgets-sns-policy.html; Lambda from SNS: https://docs.aws.amazon.com/lambda/latest/dg/with-sns.html.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.guardrails import (
    STACK_TAG,
    Context,
    PlannedResource,
    _is_true,
    _items,
    _mapping,
    amount_gap,
    currency_gap,
    stack_value_gap,
)
from goldenenv.privilege import statements

BUDGET = "aws:budgets/budget:Budget"
TOPIC_POLICY = "aws:sns/topicPolicy:TopicPolicy"
SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"
FUNCTION = "aws:lambda/function:Function"
PERMISSION = "aws:lambda/permission:Permission"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
SCHEDULE = "aws:scheduler/schedule:Schedule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"
INSTANCE = "aws:ec2/instance:Instance"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
TTL_TAG = "goldenenv:ttl-hours"
"""Where the reaper reads a node's time to live (goldenenv.clouds.aws.reaper.TTL_TAG_KEY; a test checks the two
agree)."""

STOP_ACTION = "ec2:StopInstances"
STOP_ACTIONS = (STOP_ACTION,)
"""What the chain asks of the stop's identity; privilege.NEEDS["stop"] grants it (a test checks)."""

NO_SUCH_LINK: dict[str, str] = {
    "notification-switch":
        "an AWS budget notification has no enabled switch: it is planned or not (budget-not-planned judges a "
        "missing one)",
}
"""Links of the chain this cloud does not have, and why (budget-stop-chain has nothing to judge there): the
contract test runs every other link's row on its stacks."""
STOPPING_MANAGED_POLICIES = frozenset({"arn:aws:iam::aws:policy/AmazonEC2FullAccess",
                                       "arn:aws:iam::aws:policy/AdministratorAccess",
                                       "arn:aws:iam::aws:policy/PowerUserAccess"})
"""AWS managed policies that allow ec2:StopInstances on every instance; their breadth is the least-privilege
rule's question."""
DRY_RUN_ENV = "GOLDENENV_DRY_RUN"
LIMIT_ENV = "GOLDENENV_BUDGET_LIMIT"
"""goldenenv.clouds.aws.reaper's environment (its *_ENV names)."""


def _allows(statement: Mapping[str, Any], action: str) -> bool:
    if str(statement.get("Effect") or "").lower() != "allow":
        return False
    actions = statement.get("Action")
    patterns = [actions] if isinstance(actions, str) else [a for a in _items(actions) if isinstance(a, str)]
    return any(fnmatch.fnmatch(action.lower(), p.lower()) for p in patterns)


def _tag_conditions(statement: Mapping[str, Any], key: str) -> list[Any]:
    """The values a statement's Condition requires of the resource tag ``key`` (empty when it requires none)."""
    found = []
    for clauses in _mapping(statement.get("Condition")).values():
        for name, value in _mapping(clauses).items():
            if str(name).lower() == f"aws:resourcetag/{key}".lower():
                found += [value] if isinstance(value, str) else _items(value)
    return found


def _arns(resource: PlannedResource) -> set[str]:
    values = (resource.outputs.get("arn"), resource.props.get("arn"), resource.id, resource.outputs.get("name"),
              resource.props.get("name"))
    return {v for v in values if isinstance(v, str) and v}


def _role_gap(function: PlannedResource, ctx: Context) -> str | None:
    """The function's role allows ec2:StopInstances on this stack's nodes (a condition on the stack tag, if any,
    names this stack)."""
    role = next((r for r in ctx.of_type(ROLE) if function.props.get("role") in _arns(r)), None)
    if role is None:
        return None  # an existing role: nothing of the plan to read
    names = _arns(role)
    for attachment in ctx.of_type(ROLE_ATTACHMENT):
        if attachment.props.get("role") in names and attachment.props.get("policyArn") in STOPPING_MANAGED_POLICIES:
            return None
    for policy in ctx.of_type(ROLE_POLICY):
        if policy.props.get("role") not in names:
            continue
        for statement in statements(policy.props.get("policy")):
            stacks = _tag_conditions(statement, STACK_TAG)
            if _allows(statement, STOP_ACTION) and (not stacks or ctx.stack is None or ctx.stack in stacks):
                return None
    return (f"runs as role {role.name}, which no planned policy allows {STOP_ACTION} on this stack's nodes "
            f"(aws:ResourceTag/{STACK_TAG} = {ctx.stack}): its stop would be refused and the nodes keep running; "
            f"allow it there")


def _function_links(function: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    env = _mapping(_mapping(function.props.get("environment")).get("variables"))
    if _is_true(env.get(DRY_RUN_ENV)):
        yield function, f"runs dry ({DRY_RUN_ENV} true): it would stop nothing; set it to false"
    gap = amount_gap(env.get(LIMIT_ENV), ctx, LIMIT_ENV) if LIMIT_ENV in env else None
    for found in (gap, _role_gap(function, ctx)):
        if found:
            yield function, found


def _filter_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    if ctx.stack is None:
        return
    filters = [_mapping(f) for f in _items(budget.props.get("costFilters"))]
    tag_filters = [f for f in filters if f.get("name") == "TagKeyValue"]
    expected = f"user:{STACK_TAG}${ctx.stack}"
    if not tag_filters:
        yield budget, (f"has no TagKeyValue cost filter: it watches the whole account's spend and would stop this "
                       f"stack for others' cost; filter on {expected}")
    for found in tag_filters:
        gap = stack_value_gap(found.get("values"), ctx, "TagKeyValue", expected)
        if gap:
            yield budget, gap


def _threshold_gap(note: Mapping[str, Any], ctx: Context) -> str | None:
    """A stop notification: on actual spend, at no more than the limit."""
    if str(note.get("notificationType") or "").upper() != "ACTUAL":
        return (f"sends forecasted spend ({note.get('notificationType')}) to its stop: it would stop nodes before "
                f"the money is spent; route only the ACTUAL notification to the topic")
    try:
        threshold = float(note.get("threshold"))
    except (TypeError, ValueError):
        return f"calls its stop at an unreadable threshold {note.get('threshold')!r}; set 100"
    kind = str(note.get("thresholdType") or "PERCENTAGE").upper()
    over = threshold > 100 if kind == "PERCENTAGE" else (ctx.monthly_limit is not None and
                                                         threshold > ctx.monthly_limit + 0.005)
    if over:
        shown = f"{threshold:g} %" if kind == "PERCENTAGE" else f"{threshold:g}"
        return (f"calls its stop at {shown} of the limit: the nodes run on past the stack's monthlyLimit; set the "
                f"threshold to 100 % (or less)")
    return None


def _budget_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    props = budget.props
    for gap in (amount_gap(props.get("limitAmount"), ctx, "limitAmount"),
                currency_gap(props.get("limitUnit"), ctx, "limitUnit")):
        if gap:
            yield budget, gap
    if str(props.get("timeUnit") or "MONTHLY").upper() != "MONTHLY":
        yield budget, f"resets every {props.get('timeUnit')}, not monthly; set timeUnit MONTHLY"
    notes = [_mapping(n) for n in _items(props.get("notifications"))]
    if not any(str(n.get("notificationType") or "").upper() == "ACTUAL" and _float(n.get("threshold")) == 100
               and str(n.get("thresholdType") or "PERCENTAGE").upper() == "PERCENTAGE" for n in notes):
        yield budget, ("has no notification at 100 % of actual spend: no one is told when the money is spent; add "
                       "one (ACTUAL, PERCENTAGE, 100)")
    for note in notes:
        topics = [t for t in _items(note.get("subscriberSnsTopicArns")) if isinstance(t, str)]
        if not topics:
            continue
        gap = _threshold_gap(note, ctx)
        if gap:
            yield budget, gap
            continue
        for topic in topics:
            yield from _topic_links(budget, topic, ctx)


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _topic_links(budget: PlannedResource, topic: str, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    policies = [p for p in ctx.of_type(TOPIC_POLICY) if p.props.get("arn") == topic]
    if policies and not any(_allows(s, "SNS:Publish") and "budgets.amazonaws.com" in json.dumps(s.get("Principal"))
                            for p in policies for s in statements(p.props.get("policy"))):
        yield policies[0], ("does not let budgets.amazonaws.com publish to the topic: the budget's alert never "
                            "reaches the stop; allow SNS:Publish to that service")
    subscribed = [s.props.get("endpoint") for s in ctx.of_type(SUBSCRIPTION)
                  if s.props.get("topic") == topic and str(s.props.get("protocol")).lower() == "lambda"]
    for function in ctx.of_type(FUNCTION):
        if not _arns(function) & {e for e in subscribed if isinstance(e, str)}:
            continue
        if not any((p.props.get("function") in _arns(function))
                   and str(p.props.get("principal")) == "sns.amazonaws.com"
                   and p.props.get("sourceArn") in (None, topic) for p in ctx.of_type(PERMISSION)):
            yield function, ("has no lambda permission for sns.amazonaws.com from the budget's topic: SNS cannot "
                             "invoke it and the stop never runs; add aws.lambda_.Permission for the topic")
        yield from _function_links(function, ctx)


def _schedule_links(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """With a time to live or idle stop, an enabled schedule (EventBridge Scheduler, or an EventBridge rule's
    target) runs a planned function that may stop this stack's nodes."""
    targets = [(s, _mapping(s.props.get("target")).get("arn")) for s in ctx.of_type(SCHEDULE)
               if str(s.props.get("state") or "ENABLED").upper() == "ENABLED"]
    targets += [(t, t.props.get("arn")) for t in ctx.of_type(EVENT_TARGET)]
    run = [f for f in ctx.of_type(FUNCTION) if any(isinstance(a, str) and a in _arns(f) for _, a in targets)]
    asked = (f"a time to live of {ctx.ttl_hours:g} h" if ctx.ttl_hours else
             f"an idle stop after {ctx.idle_minutes} min")
    if not run:
        where = next(iter(ctx.of_type(BUDGET)), None) or next(iter(ctx.of_type(FUNCTION)), None)
        if where is not None:
            yield where, (f"has no enabled schedule running a stop function beside it while the stack asks for "
                          f"{asked}: a forgotten node runs on; plan the reaper and its schedule")
        return
    for function in run:
        yield from _function_links(function, ctx)


def _nodes(ctx: Context) -> list[PlannedResource]:
    """The GPU nodes: instances inside a node pool component."""
    return [r for r in ctx.of_type(INSTANCE) if r.urn.count("::") >= 2
            and any(t.endswith(":GpuNodePool") for t in r.urn.split("::")[2].split("$")[:-1])]


def _ttl_links(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """The reaper reads each node's time to live from its TTL_TAG (goldenenv.clouds.aws.reaper): a node without it,
    or with another value, is never stopped on time."""
    for node in _nodes(ctx):
        value = _mapping(node.props.get("tags")).get(TTL_TAG)
        if _float(value) != ctx.ttl_hours:
            yield node, (f"carries {TTL_TAG} {value or 'unset'}, but the stack's lifecycle.ttlHours is "
                         f"{ctx.ttl_hours:g}: the reaper reads a node's time to live from that tag; set it")


def _idle_links(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """With an idle stop, each node has an enabled CloudWatch alarm on its CPU whose action stops (or terminates)
    it (EC2 alarm actions: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/UsingAlarmActions.html)."""
    alarms = list(ctx.of_type(ALARM))
    for node in _nodes(ctx):
        ids = {v for v in (node.id, node.outputs.get("id")) if isinstance(v, str)}
        mine = [a for a in alarms if _mapping(a.props.get("dimensions")).get("InstanceId") in ids]
        acting = [a for a in mine if a.props.get("actionsEnabled") is not False and any(
            str(x).endswith((":ec2:stop", ":ec2:terminate")) for x in _items(a.props.get("alarmActions")))]
        if not acting:
            yield node, (f"has no enabled CloudWatch alarm that stops it when idle while the stack asks for an idle "
                         f"stop after {ctx.idle_minutes} min: an idle node runs on; plan its idle alarm")


def stop_chain(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """Every broken link from each AWS budget to the nodes (see the module's docstring)."""
    for budget in ctx.of_type(BUDGET):
        yield from _filter_links(budget, ctx)
        yield from _budget_links(budget, ctx)
    if ctx.ttl_hours:
        yield from _schedule_links(ctx)
        yield from _ttl_links(ctx)
    if ctx.idle_minutes:
        yield from _idle_links(ctx)
