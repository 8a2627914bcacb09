"""Huawei Cloud's stop chain, as budget-stop-chain follows it over the planned resources.

There is no budget resource on Huawei (budget.py): the chain is the stop function (its environment names this
stack's tag, the limit, the currency, the hard stop, the SMN topic it tells at the limit, the Lite Servers' name
prefix and the stack's time to live and idle time) -> its timer trigger (ACTIVE) -> its agency, delegated to
FunctionGraph and holding the stack's stop policy, which allows ecs:cloudServers:stop and modelarts:devserver:stop.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator

from goldenenv.clouds.huawei import privilege, stop, stop_lite
from goldenenv.guardrails import Context, PlannedResource, _is_true, _items, _mapping, amount_gap, currency_gap, \
    stack_value_gap

FUNCTION = "huaweicloud:FunctionGraph/function:Function"
TRIGGER = "huaweicloud:FunctionGraph/trigger:Trigger"
STOP_ACTION = "ecs:cloudServers:stop"
LITE_STOP_ACTION = "modelarts:devserver:stop"
STOP_ACTIONS = (STOP_ACTION, LITE_STOP_ACTION)

NO_SUCH_LINK: dict[str, str] = {
    "stop-threshold": "there is no budget resource: the stop function is the budget, and stops at the limit",
    "notification-switch": "there is no budget resource with a switch; the stop function's only trigger is its timer",
    "lifecycle-schedule": "the time to live and idle stop run on the stop function's own hourly timer, the link "
                          "route-disabled breaks: there is no schedule apart from it",
}


def environment(function: PlannedResource) -> dict:
    """The function's environment: its user_data, a JSON object of names and values."""
    try:
        found = json.loads(function.props.get("userData") or "{}")
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def stop_functions(ctx: Context) -> list[PlannedResource]:
    return [f for f in ctx.of_type(FUNCTION) if stop.LIMIT_ENV in environment(f)]


def timers(function: PlannedResource, ctx: Context) -> list[PlannedResource]:
    """The function's active timer triggers (function_urn is the function's urn output, unknown in a preview: a
    trigger whose urn is not another function's counts)."""
    others = {f.outputs.get("urn") for f in ctx.of_type(FUNCTION) if f is not function} - {None}
    return [t for t in ctx.of_type(TRIGGER) if str(t.props.get("type")).upper() == "TIMER"
            and str(t.props.get("status") or "ACTIVE").upper() == "ACTIVE"
            and t.props.get("functionUrn") not in others]


def _allowed(function: PlannedResource, ctx: Context) -> set[str]:
    """Which of STOP_ACTIONS a policy held by the function's agency allows."""
    name = function.props.get("agency")
    agencies = [a for a in ctx.of_type(privilege.AGENCY) if a.props.get("name") == name]
    held = {r for a in agencies for p in _items(a.props.get("projectRoles")) for r in _items(_mapping(p).get("roles"))}
    allowed = set()
    for role in ctx.of_type(privilege.ROLE):
        if role.props.get("name") not in held:
            continue
        for statement in _items(privilege.document_of(role)):
            actions = [a for a in _items(_mapping(statement).get("Action")) if isinstance(a, str)]
            if str(_mapping(statement).get("Effect", "")).lower() == "allow":
                allowed |= {n for n in STOP_ACTIONS if any(fnmatch.fnmatch(n.lower(), a.lower()) for a in actions)}
    return allowed


def _agency_gap(function: PlannedResource, ctx: Context) -> str | None:
    missing = [n for n in STOP_ACTIONS if n not in _allowed(function, ctx)]
    if not missing:
        return None
    return (f"runs as agency {function.props.get('agency')}, which holds no policy allowing {' or '.join(missing)} "
            "on the stack's servers: its stop would be refused and the nodes keep running; allow it there")


def _lifecycle_gaps(env: dict, ctx: Context) -> list[str | None]:
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


def _prefix_gap(env: dict) -> str | None:
    """The Lite Servers are found by name alone: a prefix that is not this stack's finds none, or another's."""
    wanted = stop_lite.prefix(str(env.get(stop.TAG_VALUE_ENV)))
    found = env.get(stop.DEVSERVER_PREFIX_ENV)
    if found == wanted:
        return None
    return (f"sets {stop.DEVSERVER_PREFIX_ENV} {found or 'unset'}, so it finds none of the stack's Lite Servers "
            f"(named {wanted}<pool>-<n>) and stops another's; set it to {wanted}")


def _function_links(function: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    env = environment(function)
    gaps = [stack_value_gap(env.get(stop.TAG_VALUE_ENV), ctx, stop.TAG_VALUE_ENV),
            amount_gap(env.get(stop.LIMIT_ENV), ctx, stop.LIMIT_ENV),
            currency_gap(env.get(stop.CURRENCY_ENV), ctx, stop.CURRENCY_ENV),
            (f"sets {stop.HARD_STOP_ENV} {env.get(stop.HARD_STOP_ENV) or 'unset'}, so it stops nothing while the "
             "stack asks for a hard stop; set it to true") if ctx.hard_stop and not _is_true(
                env.get(stop.HARD_STOP_ENV)) else None,
            None if env.get(stop.ALERT_TOPIC_ENV) else (f"sets no {stop.ALERT_TOPIC_ENV}: no one is told when the "
                                                        "month's spend reaches the limit; give it the budget's SMN "
                                                        "topic"),
            None if timers(function, ctx) else "has no active timer trigger: it never runs, so nothing stops; give "
                                                "it its hourly timer",
            _agency_gap(function, ctx), _prefix_gap(env), *_lifecycle_gaps(env, ctx)]
    for gap in gaps:
        if gap:
            yield function, gap


def stop_chain(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    for function in stop_functions(ctx):
        yield from _function_links(function, ctx)
