"""What a rule is given beside the resource it judges: the whole plan, the stack's values, every provider's facts.

``Context`` is built once per evaluation (``goldenenv plan``) or per policy validation (the policy pack) and
handed to every rule's check; ``_each_provider`` makes a rule that each provider judges alone from one of its
ProviderFacts hooks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goldenenv.guardrails.facts import Messages, ProviderFacts, provider_facts
from goldenenv.guardrails.model import STACK_TAG, PlannedResource


@dataclass(frozen=True)
class Context:
    resources: Sequence[PlannedResource]
    required_tags: Mapping[str, str]
    providers: Sequence[ProviderFacts] = field(default_factory=lambda: provider_facts())
    """Every provider's guardrail facts; by default those of every cloud (``provider_facts``)."""
    budget_opt_out: bool = False
    """budget-not-planned: the stack says `budget: none`, so no budget is expected in the plan. By default a
    budget is expected on every stack that rents machines."""
    hard_stop: bool | None = None
    """budget-not-planned: whether the stack asks its budget to stop the nodes when spent (budget.hardStop);
    None: as the planned budget says (a budget that routes its alert to a stop must have that stop planned)."""
    monthly_limit: float | None = None
    """budget-stop-chain: the stack's budget.monthlyLimit, which the planned budget's amount (and its stop's limit)
    must equal; None: unknown (a policy pack without the stack's config), so the amount is not judged."""
    currency: str | None = None
    """budget-stop-chain: the stack's budget.currency; None: unknown, not judged."""
    ttl_hours: float | None = None
    """budget-stop-chain: the stack's lifecycle.ttlHours; with it, the schedule that runs the stop is planned."""
    idle_minutes: int | None = None
    """budget-stop-chain: the stack's lifecycle.idleMinutes; with it, the schedule that runs the stop is planned."""
    unverified: tuple[str, ...] = ()
    """budget-stop-chain-unverified: the stack values the caller could not give (a policy pack whose config lacks
    monthlyLimit or currency), so the chain judges no amount or currency: said as a warning, never passed silently.
    `goldenenv plan` knows them all and leaves this empty."""
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """What a plan-wide rule computed once for this context (the stop chain's links), reused per resource."""

    @property
    def stack(self) -> str | None:
        """The stack's name, from its required tags (STACK_TAG); None when the caller gave none."""
        value = self.required_tags.get(STACK_TAG)
        return value if isinstance(value, str) and value else None

    @property
    def lifecycle_stop(self) -> bool:
        """Whether the stack asks for a time to live or an idle stop, which a schedule must run."""
        return bool(self.ttl_hours) or bool(self.idle_minutes)

    def of_type(self, *types: str) -> Iterator[PlannedResource]:
        return (r for r in self.resources if r.type in types)


def _each_provider(hook: str) -> Messages:
    """A rule each provider judges alone: what every provider's ``hook`` (a ProviderFacts field) says of the
    resource, in provider order."""

    def check(resource: PlannedResource, ctx: Context) -> Iterator[str]:
        for facts in ctx.providers:
            yield from getattr(facts, hook)(resource, ctx)

    return check
