"""Google Cloud's stop chain, as budget-stop-chain follows it over the planned resources.

Budget -> its Pub/Sub topic (allUpdatesRule.pubsubTopic: Cloud Billing publishes every update, and the function
compares the cost with its own limit) -> the function that topic triggers (its GOLDENENV_HARD_STOP on, its limit and
currency the stack's) -> the function's service account -> a role bound to it on the project that holds
compute.instances.stop; with a time to live or idle stop, the Cloud Scheduler job that publishes to the same topic
with the reaper attribute. Google's "cap costs" pattern: https://cloud.google.com/billing/docs/how-to/notify.
The budget watches this stack: its filter names the stack's label and the function's own project (by number,
https://cloud.google.com/billing/docs/reference/budget/rest/v1/billingAccounts.budgets#filter), its amount and
currency are the stack's, and it alerts at 100 % of actual spend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.gcp import labels as gcp_labels
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

BUDGET = "gcp:billing/budget:Budget"
TOPIC = "gcp:pubsub/topic:Topic"
FUNCTION = "gcp:cloudfunctionsv2/function:Function"
CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
PROJECT_GRANTS = ("gcp:projects/iAMMember:IAMMember", "gcp:projects/iAMBinding:IAMBinding")
INSTANCE_GRANTS = ("gcp:compute/instanceIAMMember:InstanceIAMMember",
                   "gcp:compute/instanceIAMBinding:InstanceIAMBinding")
INVOKER_GRANTS = ("gcp:cloudrunv2/serviceIamMember:ServiceIamMember",
                  "gcp:cloudrunv2/serviceIamBinding:ServiceIamBinding")
SCHEDULER_JOB = "gcp:cloudscheduler/job:Job"

STOP_PERMISSION = "compute.instances.stop"
STOP_ACTIONS = (STOP_PERMISSION,)
"""What the chain asks of the stop's identity; privilege.NEEDS["stop"] grants it (a test checks)."""

NO_SUCH_LINK: dict[str, str] = {
    "stop-threshold":
        "Cloud Billing publishes every update to the topic whatever the thresholds; the function compares the "
        "cost with its own limit (GOLDENENV_BUDGET_LIMIT), which the amount links judge",
    "notification-switch":
        "a budget's Pub/Sub route has no enabled switch: its topic is set or not",
}
"""Links of the chain this cloud does not have, and why (budget-stop-chain has nothing to judge there): the
contract test runs every other link's row on its stacks."""
STOP_ROLES = frozenset({"roles/compute.instanceAdmin.v1", "roles/compute.instanceAdmin", "roles/compute.admin",
                        "roles/editor", "roles/owner"})
"""Predefined roles that include compute.instances.stop (https://cloud.google.com/compute/docs/access/iam); how
broad a grant may be is the least-privilege rule's question, not this one's."""
INVOKER_ROLES = frozenset({"roles/run.invoker", "roles/run.admin", "roles/editor", "roles/owner"})
"""An Eventarc trigger's service account needs run.routes.invoke on the function's service
(https://cloud.google.com/functions/docs/calling/eventarc#trigger-identity)."""

HARD_STOP_ENV = "GOLDENENV_HARD_STOP"
LIMIT_ENV = "GOLDENENV_BUDGET_LIMIT"
CURRENCY_ENV = "GOLDENENV_CURRENCY"
GCP_PROJECT_ENV = "GOLDENENV_GCP_PROJECT"
PROJECT_NUMBER_ENV = "GOLDENENV_GCP_PROJECT_NUMBER"
TTL_ENV = "GOLDENENV_TTL_HOURS"
IDLE_ENV = "GOLDENENV_IDLE_MINUTES"
MODE_ATTRIBUTE, REAPER_MODE = "goldenenv_mode", "reaper"
"""stopfn/main.py's environment and the attribute that makes a delivery the schedule's (its *_ENV names)."""


def _same_topic(a: Any, b: Any) -> bool:
    """Two topic references name one topic: equal, or equal names ("projects/P/topics/T" and "T")."""
    return isinstance(a, str) and isinstance(b, str) and bool(a) and (a == b or a.rsplit("/", 1)[-1] ==
                                                                      b.rsplit("/", 1)[-1])


def _env(function: PlannedResource) -> dict[str, Any]:
    return dict(_mapping(_mapping(function.props.get("serviceConfig")).get("environmentVariables")))


def _members(grant: PlannedResource) -> list[str]:
    props = grant.props
    return ([props["member"]] if isinstance(props.get("member"), str) else []) + [
        m for m in _items(props.get("members")) if isinstance(m, str)]


def _role_permissions(role: Any, ctx: Context) -> set[str] | None:
    """The permissions of a planned custom role named by ``role`` (its id, name or roleId); None if not planned."""
    for custom in ctx.of_type(CUSTOM_ROLE):
        names = {custom.id, custom.outputs.get("name"), custom.outputs.get("id"), custom.props.get("roleId")}
        if isinstance(role, str) and (role in names or role.rsplit("/", 1)[-1] == custom.props.get("roleId")):
            return {p for p in _items(custom.props.get("permissions")) if isinstance(p, str)}
    return None


def _may_stop(role: Any, ctx: Context) -> bool:
    if role in STOP_ROLES:
        return True
    permissions = _role_permissions(role, ctx)
    return permissions is not None and STOP_PERMISSION in permissions


def _identity_gap(function: PlannedResource, ctx: Context) -> str | None:
    """The function's service account holds compute.instances.stop on the project (or on the nodes)."""
    email = _mapping(function.props.get("serviceConfig")).get("serviceAccountEmail")
    if not isinstance(email, str) or not email:
        return ("runs as the default compute service account (no serviceConfig.serviceAccountEmail), which the plan "
                "grants nothing: it cannot be shown to hold compute.instances.stop; run it as its own service "
                "account with a role holding that permission")
    member, project = f"serviceAccount:{email}", function.props.get("project")
    for grant in ctx.of_type(*PROJECT_GRANTS, *INSTANCE_GRANTS):
        same_place = grant.type in INSTANCE_GRANTS or project is None or grant.props.get("project") == project
        if member in _members(grant) and same_place and _may_stop(grant.props.get("role"), ctx):
            return None
    return (f"runs as {email}, which no planned grant gives {STOP_PERMISSION} on project {project} or on the "
            f"nodes: its stop would be refused (403) and the nodes keep running; bind it a role holding "
            f"{STOP_PERMISSION}")


def _invoker_gap(function: PlannedResource, ctx: Context) -> str | None:
    """Eventarc delivers the topic's messages as the trigger's service account, which must invoke the function."""
    trigger = _mapping(function.props.get("eventTrigger"))
    email = trigger.get("serviceAccountEmail")
    if not isinstance(email, str) or not email:
        return None  # delivered as the default compute service account; nothing of the plan to check
    name = function.props.get("name")
    for grant in ctx.of_type(*INVOKER_GRANTS):
        if (f"serviceAccount:{email}" in _members(grant) and grant.props.get("role") in INVOKER_ROLES
                and (name is None or grant.props.get("name") in (name, None))):
            return None
    return (f"is triggered as {email}, which holds no roles/run.invoker on the function's service: Eventarc's "
            f"deliveries are refused and the stop never runs; grant it roles/run.invoker on the function")


def _functions_on(topic: Any, ctx: Context) -> list[PlannedResource]:
    return [f for f in ctx.of_type(FUNCTION)
            if _same_topic(_mapping(f.props.get("eventTrigger")).get("pubsubTopic"), topic)]


def _function_links(function: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    env = _env(function)
    if ctx.hard_stop and not _is_true(env.get(HARD_STOP_ENV)):
        yield function, (f"sets {HARD_STOP_ENV} {env.get(HARD_STOP_ENV) or 'unset'}, so it only reports when the "
                         f"budget is spent while the stack asks for a hard stop; set it to true")
    for gap in (amount_gap(env.get(LIMIT_ENV), ctx, LIMIT_ENV) if LIMIT_ENV in env else None,
                currency_gap(env.get(CURRENCY_ENV), ctx, CURRENCY_ENV) if CURRENCY_ENV in env else None,
                _identity_gap(function, ctx), _invoker_gap(function, ctx)):
        if gap:
            yield function, gap


def _filter_links(budget: PlannedResource, functions: list[PlannedResource],
                  ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    bfilter = _mapping(budget.props.get("budgetFilter"))
    key = gcp_labels.label_key(STACK_TAG)
    expected = gcp_labels.labels({STACK_TAG: ctx.stack}).get(key) if ctx.stack else None
    gap = stack_value_gap(_mapping(bfilter.get("labels")).get(key), ctx, f"label {key}", expected)
    if gap:
        yield budget, gap
    numbers = {str(_env(f).get(PROJECT_NUMBER_ENV)) for f in functions if _env(f).get(PROJECT_NUMBER_ENV)}
    projects = [p for p in _items(bfilter.get("projects")) if isinstance(p, str)]
    if numbers and sorted(projects) != sorted(f"projects/{n}" for n in numbers):
        yield budget, (f"filters on projects {', '.join(projects) or 'none (the whole billing account)'}, not on "
                       f"the project its stop acts in (projects/{', '.join(sorted(numbers))}): it watches another "
                       f"project's spend; filter on the stop function's project")


def _amount_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    amount = _mapping(budget.props.get("amount"))
    if _is_true(amount.get("lastPeriodAmount")):
        yield budget, ("takes last period's spend as its amount (lastPeriodAmount), not the stack's monthlyLimit; "
                       "set amount.specifiedAmount")
        return
    specified = _mapping(amount.get("specifiedAmount"))
    units = specified.get("units")
    value = None
    if units is not None:
        try:
            value = float(units) + float(specified.get("nanos") or 0) / 1e9
        except (TypeError, ValueError):
            value = units
    for gap in (amount_gap(value, ctx, "amount.specifiedAmount"),
                currency_gap(specified.get("currencyCode"), ctx, "amount.specifiedAmount.currencyCode")):
        if gap:
            yield budget, gap
    rules = [_mapping(r) for r in _items(budget.props.get("thresholdRules"))]
    if not any(abs(float(r.get("thresholdPercent") or 0) - 1.0) < 1e-9
               and str(r.get("spendBasis") or "CURRENT_SPEND") == "CURRENT_SPEND" for r in rules):
        yield budget, ("has no threshold rule at 100 % of actual spend (thresholdPercent 1.0, CURRENT_SPEND): no "
                       "one is told when the money is spent; add it")


def stop_chain(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """Every broken link from each Cloud Billing budget to the nodes (see the module's docstring)."""
    for budget in ctx.of_type(BUDGET):
        rule = _mapping(budget.props.get("allUpdatesRule"))
        topic = rule.get("pubsubTopic")
        functions = _functions_on(topic, ctx) if topic else []
        yield from _filter_links(budget, functions, ctx)
        yield from _amount_links(budget, ctx)
        if ctx.hard_stop and not topic:
            yield budget, ("publishes to no Pub/Sub topic (allUpdatesRule.pubsubTopic), so no function hears that "
                           "the money is spent while the stack asks for a hard stop; publish to the stop's topic")
        for function in functions:
            yield from _function_links(function, ctx)
    if ctx.lifecycle_stop:
        yield from _schedule_links(ctx)


def _schedule_links(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """With a time to live or idle stop, a Cloud Scheduler job publishes the reaper's message to the topic of a
    planned stop function, and that function is told the stack's time to live / idle window."""
    functions = [f for f in ctx.of_type(FUNCTION) if _env(f).get(GCP_PROJECT_ENV)]
    asked = (f"a time to live of {ctx.ttl_hours:g} h" if ctx.ttl_hours else
             f"an idle stop after {ctx.idle_minutes} min")
    where = functions[0] if functions else next(iter(ctx.of_type(BUDGET)), None)
    if where is None:
        return
    jobs = [j for j in ctx.of_type(SCHEDULER_JOB)
            if not _is_true(j.props.get("paused"))
            and _mapping(_mapping(j.props.get("pubsubTarget")).get("attributes")).get(MODE_ATTRIBUTE) == REAPER_MODE
            and any(_same_topic(_mapping(j.props.get("pubsubTarget")).get("topicName"),
                                _mapping(f.props.get("eventTrigger")).get("pubsubTopic")) for f in functions)]
    if not jobs:
        yield where, (f"is never run on a schedule while the stack asks for {asked}: no unpaused Cloud Scheduler "
                      f"job publishes to its topic with {MODE_ATTRIBUTE}={REAPER_MODE}, so a forgotten node runs "
                      f"on; plan the reaper's schedule")
    for function in functions:
        env = _env(function)
        if ctx.ttl_hours and not _hours_equal(env.get(TTL_ENV), ctx.ttl_hours):
            yield function, (f"sets {TTL_ENV} {env.get(TTL_ENV) or 'unset'}, but the stack's lifecycle.ttlHours is "
                             f"{ctx.ttl_hours:g}; set it to {ctx.ttl_hours:g}")
        if ctx.idle_minutes and not _hours_equal(env.get(IDLE_ENV), ctx.idle_minutes):
            yield function, (f"sets {IDLE_ENV} {env.get(IDLE_ENV) or 'unset'}, but the stack's "
                             f"lifecycle.idleMinutes is {ctx.idle_minutes}; set it to {ctx.idle_minutes}")


def _hours_equal(found: Any, expected: float) -> bool:
    try:
        return abs(float(found) - float(expected)) < 1e-6
    except (TypeError, ValueError):
        return False
