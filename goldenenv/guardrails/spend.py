"""The rules on what the stack spends: every taggable resource tagged to its stack, a budget planned, and the
budget's stop chain reaching the nodes at the stack's own amount and currency.

``amount_gap``, ``currency_gap``, ``stack_value_gap`` and ``holds_flag`` are shared with each cloud's stop-chain
facts (goldenenv/clouds/<cloud>/stop_chain.py), so every cloud words a gap the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.guardrails.context import Context
from goldenenv.guardrails.facts import ProviderFacts
from goldenenv.guardrails.model import BUDGET_STOP_CHAIN, HOLDS_NO_DATA, HOLDS_TAG, PlannedResource
from goldenenv.guardrails.plain import _items, _label, _mapping
from goldenenv.guardrails.tagging import _tag_key, facts_of, is_taggable


def _missing_tags(tags: Mapping[str, Any], required: Mapping[str, str]) -> list[str]:
    """Required keys absent or carrying another value ("key=expected"); an unknown (None) value passes."""
    missing = []
    for key, expected in required.items():
        if key not in tags:
            missing.append(key)
        elif tags[key] is not None and tags[key] != expected:
            missing.append(f"{key}={expected} (found {tags[key]!r})")
    return missing


def _tag_problem(tags: Mapping[str, Any], required: Mapping[str, str], noun: str = "tags") -> str | None:
    if not required:
        return None if tags else f"has no {noun}"
    missing = _missing_tags(tags, required)
    return f"is missing required {noun}: {', '.join(missing)}" if missing else None


def _check_untagged(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Reads the tags where the resource's provider keeps them (ProviderFacts.tag_input: "tags", or "labels" on
    Google Cloud) against the required tags as that provider writes them (ProviderFacts.tag_form)."""
    if not resource.custom:
        return
    facts = facts_of(resource.type, ctx.providers)
    tags_key = _tag_key(facts, resource.type)
    if not is_taggable(resource.type, tags_key):
        return
    # tagsAll / pulumiLabels (engine outputs) include the provider's default tags; plans see only the resource's own.
    totals = facts.tag_outputs if facts else ProviderFacts.tag_outputs
    tags = {k: v for key in (*totals, tags_key) for k, v in _mapping(resource.props.get(key)).items()}
    required = facts.tag_form(ctx.required_tags) if facts else ctx.required_tags
    problem = _tag_problem(tags, required, tags_key)
    if problem:
        yield f"{_label(resource)} {problem}; set them in its {tags_key}."
    for provider in ctx.providers:
        yield from provider.launch_tags(resource, ctx)


# ---------------------------------------------------------------- rule: budget-not-planned

def _check_budget_planned(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A stack that rents machines plans its budget, and the budget's stop when it has one (or the stack asks for
    one): reported once per provider, on its first instance. `budget: none` (ctx.budget_opt_out) exempts it."""
    if ctx.budget_opt_out:
        return
    for facts in ctx.providers:
        nodes = [r for r in ctx.resources if r.type in facts.instances]
        if not nodes or nodes[0] is not resource:
            continue
        watches = list(facts.budgets(ctx))
        if not watches:
            yield (f"The plan rents {len(nodes)} {facts.name} instance(s) ({_label(resource)} first) but holds no "
                   f"budget, so nothing alerts or stops when the money runs out; {facts.budget_hint}, or write "
                   f"`goldenenv:budget: none` to run without one on purpose.")
            continue
        if ctx.hard_stop and not any(w.stops for w in watches):
            yield (f"The stack asks for a hard stop (budget.hardStop) but no planned {facts.name} budget stops the "
                   f"nodes ({', '.join(_label(w.resource) for w in watches)}); plan the budget's stop.")
        for watch in watches:
            if watch.gap:
                yield f"{_label(watch.resource)} {watch.gap}."


# ---------------------------------------------------------------- rule: budget-stop-chain

def _number(value: Any) -> float | None:
    try:
        number = float(str(value).strip().replace(",", ""))
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN is no amount


def amount_gap(found: Any, ctx: Context, what: str = "its amount") -> str | None:
    """Why an amount the chain reads (a budget's, a stop function's limit) is not the stack's monthlyLimit, in
    words after a label; None when it is (to the cent) or the limit is unknown."""
    if ctx.monthly_limit is None:
        return None
    number = _number(found)
    if number is not None and abs(number - ctx.monthly_limit) < 0.005:
        return None
    return (f"sets {what} to {found if found is not None else 'nothing'}, but the stack's budget.monthlyLimit is "
            f"{ctx.monthly_limit:.2f}: the stop would act at another amount than the one the stack asks; set it to "
            f"{ctx.monthly_limit:.2f}")


def currency_gap(found: Any, ctx: Context, what: str = "its currency") -> str | None:
    """Why a currency the chain reads is not the stack's budget.currency; None when it is or is unknown."""
    if ctx.currency is None or str(found or "").strip().upper() == ctx.currency.upper():
        return None
    return (f"sets {what} to {found or 'nothing'}, but the stack's budget.currency is {ctx.currency}: the amount "
            f"would be read in another currency; set it to {ctx.currency}")


def stack_value_gap(values: Any, ctx: Context, key: str, expected: str | None = None) -> str | None:
    """Why a budget's filter on ``key`` does not watch this stack alone (its values are not exactly the stack's
    value); None when it does, or the stack is unknown."""
    expected = expected if expected is not None else ctx.stack
    if expected is None:
        return None
    found = [values] if isinstance(values, str) else [v for v in _items(values)]
    if found == [expected]:
        return None
    shown = ", ".join(map(str, found)) or "nothing"
    return (f"filters on {key} = {shown}, not on this stack's {expected!r} alone: it would watch other spend than "
            f"this stack's and stop this stack for it, or miss this stack's spend; filter on {key} = {expected}")


def holds_flag(tags: Any) -> str | None:
    """The kind of content a store says it holds instead of data (its HOLDS_TAG, one of HOLDS_NO_DATA), or None."""
    value = _mapping(tags).get(HOLDS_TAG)
    return value if isinstance(value, str) and value in HOLDS_NO_DATA else None


def _chain_links(ctx: Context) -> list[tuple[PlannedResource, str]]:
    if "budget-stop-chain" not in ctx.memo:
        links = {(where.urn, message): (where, message) for facts in ctx.providers
                 for where, message in facts.stop_chain(ctx)}
        ctx.memo["budget-stop-chain"] = list(links.values())  # a link two routes share is reported once
    return ctx.memo["budget-stop-chain"]


def _check_chain_unverified(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Reported once, on the plan's first budget, when the stack's values were not given (a policy pack)."""
    if ctx.budget_opt_out or not ctx.unverified:
        return
    budgets = [w.resource for facts in ctx.providers for w in facts.budgets(ctx)]
    if budgets and budgets[0].urn == resource.urn:
        yield (f"cannot verify that {_label(resource)} watches the stack's own {' and '.join(ctx.unverified)}: "
               f"the policy was given none, so budget-stop-chain judged the rest of the chain only. Give "
               f"{', '.join(ctx.unverified)} in the policy pack config of {BUDGET_STOP_CHAIN} and of this policy "
               f"(the stack file's goldenenv:budget values), or check with `goldenenv plan`.")


def _check_stop_chain(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Each provider answers the chain as a reachability question over the plan, once; each broken link is
    reported on the resource where it breaks. `budget: none` exempts the stack."""
    if ctx.budget_opt_out:
        return
    for where, message in _chain_links(ctx):
        if where.urn == resource.urn:
            yield f"{_label(resource)} {message}."
