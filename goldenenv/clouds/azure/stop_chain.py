"""Azure's stop chain, as budget-stop-chain follows it over the planned resources.

Cost Management budget (its filter names this stack's tags, its amount is the stack's limit, monthly) -> an enabled
notification at no more than 100 % of actual spend naming an action group (contactGroups) -> that action group,
enabled, with an azureFunctionReceiver -> a planned function app (not disabled, GOLDENENV_HARD_STOP true, the stack's
limit and currency) -> the app's managed identity -> a role assignment at the nodes' resource group (or above) whose
role holds the deallocate action for the stack's kind of node. The time to live and idle stop are timer triggers in
the app's code: they need the app planned and told the stack's window.
Budgets: https://learn.microsoft.com/en-us/rest/api/consumption/budgets/create-or-update (notifications: enabled,
threshold 0-1000, thresholdType Actual|Forecasted, contactGroups); action groups:
https://learn.microsoft.com/en-us/rest/api/monitor/action-groups/create-or-update (enabled). A Cost Management
budget has no currency of its own (it is the billing account's): the currency is judged on the function's setting.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.guardrails import (
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

BUDGET = "azure-native:consumption:Budget"
ACTION_GROUPS = ("azure-native:monitor:ActionGroup", "azure-native:insights:ActionGroup")
WEB_APP = "azure-native:web:WebApp"
ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
VIRTUAL_MACHINE = "azure-native:compute:VirtualMachine"

DEALLOCATE = {SCALE_SET: "Microsoft.Compute/virtualMachineScaleSets/deallocate/action",
              VIRTUAL_MACHINE: "Microsoft.Compute/virtualMachines/deallocate/action"}
"""The action that deallocates each kind of node (Azure resource provider operations, Microsoft.Compute:
https://learn.microsoft.com/en-us/azure/role-based-access-control/permissions/compute)."""
STOP_ACTIONS = tuple(DEALLOCATE.values())
"""What the chain asks of the stop's identity; privilege.NEEDS["stop"] grants it (a test checks)."""

NO_SUCH_LINK: dict[str, str] = {}
"""Links of the chain this cloud does not have, and why (budget-stop-chain has nothing to judge there): the
contract test runs every other link's row on its stacks."""
DEALLOCATING_BUILT_INS = frozenset({
    "b24988ac-6180-42a0-ab88-20f7382dd24c",  # Contributor
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635",  # Owner
    "9980e02c-c2be-4d73-94e8-173b1dc7cf3c",  # Virtual Machine Contributor
})
"""Built-in roles whose actions include both deallocate actions (Azure built-in roles:
https://learn.microsoft.com/en-us/azure/role-based-access-control/built-in-roles); how broad a grant may be is the
least-privilege rule's question, not this one's."""

HARD_STOP_ENV = "GOLDENENV_HARD_STOP"
LIMIT_ENV = "GOLDENENV_BUDGET_LIMIT"
CURRENCY_ENV = "GOLDENENV_CURRENCY"
STACK_ENV = "GOLDENENV_STACK"
TTL_ENV = "GOLDENENV_TTL_HOURS"
IDLE_ENV = "GOLDENENV_IDLE_MINUTES"
"""stopfn/function_app.py's settings (its *_ENV names)."""


def _settings(app: PlannedResource) -> dict[str, Any]:
    pairs = _items(_mapping(app.props.get("siteConfig")).get("appSettings"))
    return {str(_mapping(p).get("name")): _mapping(p).get("value") for p in pairs}


def _ids(resource: PlannedResource) -> set[str]:
    values = (resource.id, resource.outputs.get("id"))
    return {v.lower() for v in values if isinstance(v, str) and v}


def _tag_filters(expression: Any) -> Iterator[Mapping[str, Any]]:
    """Every tag expression of a budget filter (filter.tags, filter.and[].tags), at any depth."""
    expression = _mapping(expression)
    if _mapping(expression.get("tags")):
        yield _mapping(expression.get("tags"))
    for part in _items(expression.get("and")):
        yield from _tag_filters(part)


def _filter_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    tags = list(_tag_filters(budget.props.get("filter")))
    if ctx.stack and not any(t.get("name") == "goldenenv:stack" for t in tags):
        yield budget, ("has no filter on the goldenenv:stack tag: it watches the whole subscription's spend and "
                       "would stop this stack for others' cost; filter on goldenenv:stack = " + ctx.stack)
    for tag in tags:
        name = tag.get("name")
        expected = ctx.required_tags.get(name) if isinstance(name, str) else None
        if expected is None:
            continue
        gap = stack_value_gap(tag.get("values"), ctx, f"tag {name}", expected)
        if gap is None and str(tag.get("operator") or "In") != "In":
            gap = f"filters on tag {name} with operator {tag.get('operator')}, not In; use In"
        if gap:
            yield budget, gap


def _notifications(budget: PlannedResource) -> list[tuple[str, Any]]:
    return [(str(k), _mapping(v)) for k, v in _mapping(budget.props.get("notifications")).items()]


def _percent(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _is_actual(note: Any) -> bool:
    return str(note.get("thresholdType") or "Actual").lower() == "actual"


def _amount_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    gap = amount_gap(budget.props.get("amount"), ctx, "amount")
    if gap:
        yield budget, gap
    grain = budget.props.get("timeGrain")
    if grain is not None and str(grain).lower() != "monthly":
        yield budget, (f"resets every {grain}, not monthly, while the stack's limit is a month's; set timeGrain "
                       f"Monthly")
    if not any(_is_true(n.get("enabled")) and _is_actual(n) and _percent(n.get("threshold")) == 100
               for _, n in _notifications(budget)):
        yield budget, ("has no enabled notification at 100 % of actual spend: no one is told, and nothing stops, "
                       "when the money is spent; add one (enabled, thresholdType Actual, threshold 100)")


def _group(value: Any, ctx: Context) -> PlannedResource | None:
    if not isinstance(value, str):
        return None
    return next((g for g in ctx.of_type(*ACTION_GROUPS) if value.lower() in _ids(g)
                 or value.rsplit("/", 1)[-1] == g.props.get("actionGroupName")), None)


def _apps_of(group: PlannedResource, ctx: Context) -> list[PlannedResource]:
    wanted = {str(_mapping(r).get("functionAppResourceId") or "").lower()
              for r in _items(group.props.get("azureFunctionReceivers"))}
    return [a for a in ctx.of_type(WEB_APP) if _ids(a) & wanted]


def _route_links(budget: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """The notifications that name an action group running a function: enabled, on actual spend, at no more than
    100 %; their group enabled; then the function apps so reached (a missing group or app is budget-not-planned's)."""
    reached: list[PlannedResource] = []
    routes = [(key, note, _group(g, ctx)) for key, note in _notifications(budget)
              for g in _items(note.get("contactGroups"))]
    stops = [(key, note, group) for key, note, group in routes if group is not None and _apps_of(group, ctx)]
    for key, note, group in stops:
        threshold = _percent(note.get("threshold"))
        if not _is_true(note.get("enabled")):
            yield budget, (f"notification {key} routes to the stop's action group but is not enabled: the budget "
                           f"never calls the stop; set enabled true")
        elif not _is_actual(note):
            yield budget, (f"notification {key} routes to the stop on forecasted spend, not actual: it would stop "
                           f"nodes before the money is spent; set thresholdType Actual")
        elif threshold is None or threshold > 100:
            yield budget, (f"notification {key} calls the stop at {note.get('threshold')} % of the limit: the "
                           f"nodes run on past the stack's monthlyLimit; set threshold 100 (or less)")
        elif _is_false(group.props.get("enabled")):
            yield group, ("is disabled (enabled false): the budget's alert reaches no function and nothing stops "
                          "the nodes; set enabled true")
        else:
            reached += _apps_of(group, ctx)
    for app in {a.urn: a for a in reached}.values():
        yield from _app_links(app, ctx)


def _app_links(app: PlannedResource, ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    settings = _settings(app)
    if _is_false(app.props.get("enabled")):
        yield app, "is disabled (enabled false): nothing it is asked to do runs; set enabled true"
    if ctx.hard_stop and not _is_true(settings.get(HARD_STOP_ENV)):
        yield app, (f"sets {HARD_STOP_ENV} {settings.get(HARD_STOP_ENV) or 'unset'}, so it only reports when the "
                    f"budget is spent while the stack asks for a hard stop; set it to true")
    for gap in (amount_gap(settings.get(LIMIT_ENV), ctx, LIMIT_ENV) if LIMIT_ENV in settings else None,
                currency_gap(settings.get(CURRENCY_ENV), ctx, CURRENCY_ENV) if CURRENCY_ENV in settings else None,
                _identity_gap(app, ctx)):
        if gap:
            yield app, gap


def _role_actions(guid: str, ctx: Context) -> tuple[list[str], list[str]] | None:
    for role in ctx.of_type(ROLE_DEFINITION):
        names = {str(v).rsplit("/", 1)[-1].lower() for v in (role.id, role.props.get("roleDefinitionId"),
                                                             role.outputs.get("name")) if v}
        if guid in names:
            permissions = [_mapping(p) for p in _items(role.props.get("permissions"))]
            return ([a for p in permissions for a in _items(p.get("actions")) if isinstance(a, str)],
                    [a for p in permissions for a in _items(p.get("notActions")) if isinstance(a, str)])
    return None


def _allows(action: str, actions: list[str], not_actions: list[str]) -> bool:
    def matches(patterns: list[str]) -> bool:
        return any(fnmatch.fnmatch(action.lower(), p.lower()) for p in patterns)
    return matches(actions) and not matches(not_actions)


def _covers(scope: Any, group: str) -> bool:
    """A role assignment's scope covers a resource group: the group itself or its subscription."""
    if not isinstance(scope, str):
        return False
    parts = scope.strip("/").lower().split("/")
    return (len(parts) == 2 and parts[0] == "subscriptions") or (
        len(parts) == 4 and parts[2] == "resourcegroups" and parts[3] == group.lower())


def _identity_gap(app: PlannedResource, ctx: Context) -> str | None:
    """The app's system-assigned identity holds, at each node's resource group, a role allowing its deallocate."""
    principal = _mapping(app.outputs.get("identity")).get("principalId")
    if not isinstance(principal, str) or not principal:
        return ("has no system-assigned managed identity, so it has no token to deallocate the nodes with; set "
                "identity.type SystemAssigned and grant it a role holding the deallocate action")
    assignments = [a for a in ctx.of_type(ROLE_ASSIGNMENT) if a.props.get("principalId") == principal]
    for node in ctx.of_type(*DEALLOCATE):
        group, action = str(node.props.get("resourceGroupName") or ""), DEALLOCATE[node.type]
        held = False
        for assignment in assignments:
            guid = str(assignment.props.get("roleDefinitionId") or "").rstrip("/").rsplit("/", 1)[-1].lower()
            actions = _role_actions(guid, ctx)
            allowed = guid in DEALLOCATING_BUILT_INS or (actions is not None and _allows(action, *actions))
            if allowed and _covers(assignment.props.get("scope"), group):
                held = True
                break
        if not held:
            return (f"runs as an identity that holds no role allowing {action} at resource group {group} (where "
                    f"{node.name} is): its deallocate would be refused (403) and the nodes keep billing; assign it "
                    f"a role with that action there")
    return None


def _schedule_links(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """The time to live and idle stop are timer triggers in the stop app's code: the app is planned and told the
    stack's window."""
    apps = [a for a in ctx.of_type(WEB_APP) if STACK_ENV in _settings(a)]
    asked = (f"a time to live of {ctx.ttl_hours:g} h" if ctx.ttl_hours else
             f"an idle stop after {ctx.idle_minutes} min")
    if not apps:
        where = next(iter(ctx.of_type(BUDGET)), None)
        if where is not None:
            yield where, (f"has no stop function app planned beside it while the stack asks for {asked}: the timer "
                          f"that runs it lives in that app; plan it")
        return
    for app in apps:
        settings = _settings(app)
        for key, expected in ((TTL_ENV, ctx.ttl_hours), (IDLE_ENV, ctx.idle_minutes)):
            if expected and _percent(settings.get(key)) != float(expected):
                yield app, (f"sets {key} {settings.get(key) or 'unset'}, but the stack asks for {asked}: its timer "
                            f"would not stop the nodes on time; set it to {expected:g}")
        if _is_false(app.props.get("enabled")):
            yield app, f"is disabled (enabled false): its timer never runs {asked}; set enabled true"


def stop_chain(ctx: Context) -> Iterator[tuple[PlannedResource, str]]:
    """Every broken link from each Cost Management budget to the nodes (see the module's docstring)."""
    for budget in ctx.of_type(BUDGET):
        yield from _filter_links(budget, ctx)
        yield from _amount_links(budget, ctx)
        yield from _route_links(budget, ctx)
    if ctx.lifecycle_stop:
        yield from _schedule_links(ctx)
