"""What a rule is given beside the resource it judges: the whole plan, the stack's values, every provider's facts.

``Context`` is built once per evaluation (``goldenenv plan``) or per policy validation (the policy pack) and
handed to every rule's check; ``_each_provider`` makes a rule that each provider judges alone from one of its
ProviderFacts hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from goldenenv.guardrails.facts import Messages, ProviderFacts, provider_facts
from goldenenv.guardrails.model import Plan, PlannedResource, Severity


@dataclass(frozen=True)
class Context(Plan):
    """A Plan with every provider's facts, which the rules read (a provider's own facts are given the Plan)."""

    providers: Sequence[ProviderFacts] = ()
    """Every provider's guardrail facts; by default those of every cloud, for a provider several clouds build on
    the planned cloud's (``provider_facts`` of the resources)."""

    def __post_init__(self) -> None:
        if not self.providers:
            object.__setattr__(self, "providers", provider_facts(self.resources))


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    severity: Severity
    check: Callable[[PlannedResource, Context], Iterable[str]]


def _each_provider(hook: str) -> Messages:
    """A rule each provider judges alone: what every provider's ``hook`` (a ProviderFacts field) says of the
    resource, in provider order."""

    def check(resource: PlannedResource, ctx: Context) -> Iterator[str]:
        for facts in ctx.providers:
            yield from getattr(facts, hook)(resource, ctx)

    return check
