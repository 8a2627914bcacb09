"""The rules as a Pulumi policy pack sees them (duck-typed, no engine): resources read from pulumi_policy's
``PolicyResource``, the config each rule takes, and a stack validation per rule (used by policy/__main__.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from goldenenv.guardrails.context import Context, Rule
from goldenenv.guardrails.plain import _mapping
from goldenenv.guardrails.model import (BUDGET_CHAIN_UNVERIFIED, BUDGET_NOT_PLANNED, BUDGET_STOP_CHAIN,
                                        UNTAGGED_RESOURCE, PlannedResource)
from goldenenv.guardrails.rules import check_rule


# pulumi_policy's placeholders for values unknown during preview (the engine's wire protocol).
_UNKNOWN_SENTINELS = frozenset({
    "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7", "3eeb2bf0-c639-47a8-9e75-3b44932eb421",
    "04da6b54-80e4-46f7-96ec-b56ff0331ba9", "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",
    "030794c1-ac77-496b-92df-f27374a8bd58", "e48ece36-62e2-4504-bad9-02848725956a",
    "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",
})

_CHAIN_CONFIG: Mapping[str, Mapping[str, Any]] = {
    "requiredTags": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "The stack's tags, goldenenv:stack included: the budget's filter must name this stack.",
    },
    "budgetNone": {"type": "boolean", "description": "The stack says `budget: none`: no chain to judge."},
    "hardStop": {"type": "boolean", "description": "The stack's budget.hardStop."},
    "monthlyLimit": {"type": "number", "description": "The stack's budget.monthlyLimit. Unset: not judged."},
    "currency": {"type": "string", "description": "The stack's budget.currency. Unset: not judged."},
    "ttlHours": {"type": "number", "description": "The stack's lifecycle.ttlHours: its schedule is planned."},
    "idleMinutes": {"type": "number", "description": "The stack's lifecycle.idleMinutes: its schedule too."},
}
"""What budget-stop-chain reads from its policy config: the stack file's values (goldenenv plan passes them)."""

POLICY_CONFIG_SCHEMAS: Mapping[str, Mapping[str, Any]] = {
    UNTAGGED_RESOURCE: {
        "requiredTags": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Tag key -> value every taggable resource must carry. Empty: any non-empty tags.",
        },
    },
    BUDGET_NOT_PLANNED: {
        "budgetNone": {
            "type": "boolean",
            "description": "The stack says `budget: none`: no budget is expected in the plan.",
        },
        "hardStop": {
            "type": "boolean",
            "description": "The stack's budget.hardStop: its budget must plan a stop. Unset: as the budget says.",
        },
    },
    BUDGET_STOP_CHAIN: _CHAIN_CONFIG,
    BUDGET_CHAIN_UNVERIFIED: {key: _CHAIN_CONFIG[key] for key in ("budgetNone", "monthlyLimit", "currency")},
}


def _read(container: Any, key: Any) -> Any:
    """container[key], with pulumi_policy's unknown values (raised or sentinel) read as None."""
    try:
        value = container[key]
    except Exception as error:  # pulumi_policy raises UnknownValueError; this module cannot import it
        if type(error).__name__ == "UnknownValueError":
            return None
        raise
    return _plain(value)


def _plain(value: Any) -> Any:
    """Policy-SDK proxies to plain dicts and lists; unknowns to None."""
    if isinstance(value, str):
        return None if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, Mapping):
        return {key: _read(value, key) for key in list(iter(value))}
    if isinstance(value, Sequence):
        return [_read(value, index) for index in range(len(value))]
    return value


def from_policy_resource(resource: Any) -> PlannedResource:
    """A pulumi_policy ``PolicyResource`` (read by attribute only) as a ``PlannedResource``.

    The policy SDK does not expose retainOnDelete (pulumi-policy's PolicyResourceOptions, like the analyzer
    protocol's AnalyzerResourceOptions, carries protect but not retainOnDelete), so it is None (unknown) unless a
    later SDK adds ``opts.retain_on_delete``; data-store-retention-unverified reports that. custom is inferred from
    the provider reference every custom resource carries, or from a bridged ``module/lowerClass`` token.
    """
    type_token = resource.resource_type
    props = _plain(resource.props) or {}
    opts = getattr(resource, "opts", None)
    parent = getattr(resource, "parent", None)
    parent_urn = getattr(opts, "parent", None) or getattr(parent, "urn", None)
    is_provider = type_token.startswith("pulumi:providers:")
    bridged_token = "/" in type_token.split(":")[1] if type_token.count(":") == 2 else False
    custom = not is_provider and (getattr(resource, "provider", None) is not None or bridged_token)
    dependencies = {key: tuple(getattr(d, "urn", d) for d in deps)
                    for key, deps in (getattr(resource, "property_dependencies", None) or {}).items()}
    resource_id = props.get("id")
    return PlannedResource(
        urn=resource.urn, type=type_token, name=resource.name, props=props,
        id=resource_id if isinstance(resource_id, str) else None, parent_urn=parent_urn, custom=custom,
        retain_on_delete=getattr(opts, "retain_on_delete", None), protect=getattr(opts, "protect", None),
        property_dependencies=dependencies,
    )


def _config_number(value: Any) -> float | None:
    """A number from a policy's config; None when absent or not a number (the check it feeds is then skipped)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def stack_validation(rule: Rule) -> Callable[[Any, Callable[..., None]], None]:
    """A pulumi_policy stack validation running ``rule``: reports each message against its resource's URN."""

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        get_config = getattr(args, "get_config", None)
        config = (get_config() if get_config else None) or {}
        required_tags = {str(k): str(v) for k, v in _mapping(config.get("requiredTags")).items()}
        hard_stop = config.get("hardStop")
        ctx = Context(tuple(from_policy_resource(r) for r in args.resources), required_tags,
                      budget_opt_out=config.get("budgetNone") is True,
                      hard_stop=hard_stop if isinstance(hard_stop, bool) else None,
                      monthly_limit=_config_number(config.get("monthlyLimit")),
                      currency=config["currency"] if isinstance(config.get("currency"), str) else None,
                      ttl_hours=_config_number(config.get("ttlHours")),
                      idle_minutes=int(_config_number(config.get("idleMinutes")) or 0) or None,
                      unverified=tuple(k for k, ok in (("monthlyLimit", _config_number(config.get("monthlyLimit"))),
                                                       ("currency", isinstance(config.get("currency"), str)))
                                       if not ok))
        for finding in check_rule(rule, ctx):
            report_violation(finding.message, finding.urn)

    return validate
