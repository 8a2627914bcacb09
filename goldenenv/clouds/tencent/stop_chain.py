"""Tencent Cloud's stop chain, as budget-stop-chain follows it over the planned resources.

Tencent's budget only alerts (billing.Budget has no action), so the stop function reads the bill itself: the chain
is the budget (its tag filter names this stack, its quota is the stack's limit, one of its warnings is 100 %
ACTUAL) and, with the hard stop, the stop function (its environment names this stack's tag, the limit, the currency
and the hard stop) -> its timer trigger -> its CAM role's attached policy allows name/cvm:StopInstances on the
stack's tagged instances. CAM tag condition: https://tencentcloud.com/document/product/598/40493.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.tencent import privilege, stop
from goldenenv.guardrails import Context, PlannedResource, _is_true, _items, _mapping, amount_gap, currency_gap, \
    stack_value_gap
from goldenenv.spec import STACK_TAG_KEY

BUDGET = "tencentcloud:Billing/budget:Budget"
FUNCTION = "tencentcloud:Scf/function:Function"
STOP_ACTION = "name/cvm:StopInstances"
STOP_ACTIONS = (STOP_ACTION,)

NO_SUCH_LINK: dict[str, str] = {
    "stop-threshold": "the stop function is its own stop: it stops at the limit whatever the budget's warnings",
    "notification-switch": "the billing budget has no switch; the stop function's only trigger is its timer",
    "lifecycle-schedule": "the time to live and idle stop run on the stop function's own hourly timer, the link "
                          "route-disabled breaks: there is no schedule apart from it",
}


def _budget_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    props = budget.props
    tags = [_mapping(t) for t in _items(_mapping(props.get("dimensionsRange")).get("tags"))]
    values = [v for t in tags if t.get("tagKey") == STACK_TAG_KEY for v in _items(t.get("tagValues"))]
    warnings = [_mapping(w) for w in _items(props.get("warnJsons"))]
    for gap in (stack_value_gap(values, ctx, f"its dimensions_range tag {STACK_TAG_KEY}"),
                amount_gap(props.get("budgetQuota"), ctx, "its budget_quota"),
                None if any(str(w.get("thresholdValue")) in ("100", "100.0") and w.get("warnType") == "ACTUAL"
                            for w in warnings) else
                "warns at no 100 % ACTUAL: no one is told when the money is spent; add that warning"):
        if gap:
            yield budget, gap


def _statements(document: Any) -> list[dict[str, Any]]:
    return privilege.as_iam(document)["Statement"]


def _role_gap(function: PlannedResource, ctx: Context) -> str | None:
    role = function.props.get("role")
    policies = [p for p in ctx.of_type(privilege.POLICY) if p.props.get("name") == role]
    attached = {a.props.get("policyId") for a in ctx.of_type(privilege.ATTACHMENT)}
    for policy in policies:
        if policy.id not in attached and policy.props.get("name") not in attached:
            continue
        for statement in _statements(policy.props.get("document")):
            actions = [a for a in _items(statement.get("Action")) if isinstance(a, str)]
            if str(statement.get("Effect", "")).lower() == "allow" and \
                    any(fnmatch.fnmatch(STOP_ACTION.lower(), a.lower()) for a in actions):
                return None
    return (f"runs as CAM role {role}, to which no attached policy allows {STOP_ACTION} on the stack's instances: "
            "its stop would be refused and the nodes keep running; allow it there")


def _lifecycle_gaps(env: dict[str, Any], ctx: Context) -> list[str | None]:
    """With a time to live or idle stop, the function is told the stack's values (it runs them on its timer)."""
    gaps: list[str | None] = []
    for asked, key, name in ((ctx.ttl_hours, stop.TTL_HOURS_ENV, "lifecycle.ttlHours"),
                             (ctx.idle_minutes, stop.IDLE_MINUTES_ENV, "lifecycle.idleMinutes")):
        try:
            told = float(env.get(key) or "nan")
        except (TypeError, ValueError):
            told = float("nan")
        if asked and not told == float(asked):
            gaps.append(f"sets {key} {env.get(key) or 'unset'}, but the stack's {name} is {asked:g}: the node runs "
                        f"on past it; set it to {asked:g}")
    return gaps


def _function_links(function: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    env = _mapping(function.props.get("environment"))
    timers = [t for t in _items(function.props.get("triggers")) if _mapping(t).get("type") == "timer"]
    gaps = [stack_value_gap(env.get(stop.TAG_VALUE_ENV), ctx, stop.TAG_VALUE_ENV),
            amount_gap(env.get(stop.LIMIT_ENV), ctx, stop.LIMIT_ENV),
            currency_gap(env.get(stop.CURRENCY_ENV), ctx, stop.CURRENCY_ENV),
            (f"sets {stop.HARD_STOP_ENV} {env.get(stop.HARD_STOP_ENV) or 'unset'}, so it stops nothing while the "
             "stack asks for a hard stop; set it to true") if ctx.hard_stop and not _is_true(
                env.get(stop.HARD_STOP_ENV)) else None,
            None if timers else "has no timer trigger: it never runs, so nothing stops; give it its hourly timer",
            _role_gap(function, ctx), *_lifecycle_gaps(env, ctx)]
    for gap in gaps:
        if gap:
            yield function, gap


def stop_chain(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    for budget in ctx.of_type(BUDGET):
        yield from _budget_links(budget, ctx)
    functions = [f for f in ctx.of_type(FUNCTION) if stop.LIMIT_ENV in _mapping(f.props.get("environment"))]
    for function in functions:
        yield from _function_links(function, ctx)
    budgets = list(ctx.of_type(BUDGET))
    if ctx.lifecycle_stop and not functions and budgets:
        yield budgets[0], ("has no stop function beside it while the stack asks for a time to live or an idle stop: "
                           "nothing stops a forgotten node; plan the stop function")
