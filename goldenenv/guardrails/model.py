"""What the rules speak of: a planned resource, a finding, the plan a rule judges, and the names every rule shares.

Plain frozen dataclasses and constants, the bottom of the guardrails package: the rules, the providers' facts and
the policy pack all read these, and this module reads none of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class PlannedResource:
    """One resource the program registers, as the provider would receive it."""

    urn: str
    type: str
    name: str
    props: Mapping[str, Any]
    id: str | None = None
    parent_urn: str | None = None
    custom: bool = True
    retain_on_delete: bool | None = None
    protect: bool | None = None
    # input property -> URNs of the resources its value came from; lets cross-resource rules match
    # references whose values are still unknown (a policy-pack preview). Empty under mocks: ids are known.
    property_dependencies: Mapping[str, Sequence[str]] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    """What the provider (under plan: the mock) returned: ids, computed values such as latestVersion."""
    ignore_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    delete_hooks: tuple[str, ...] = ()
    """Names of the resource hooks the engine runs before deleting it (a persistent spot node cancels its request)."""
    import_id: str | None = None
    """The id of an existing resource this one adopts (Pulumi's import option), e.g. a retained bucket."""


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    urn: str
    message: str


STACK_TAG = "goldenenv:stack"
"""The tag naming a resource's stack (goldenenv.spec.STACK_TAG_KEY, written here too: this module imports nothing
of goldenenv; a test checks the two agree)."""
HOLDS_TAG = "goldenenv-holds"
"""data-store-not-retained: the tag (label, on Google Cloud) a program writes on a bucket or storage account to say
that it holds no datasets or checkpoints, and what it holds instead (HOLDS_NO_DATA). A store is exempt from
retention only by this flag, never by being named by a function."""
HOLDS_NO_DATA: Mapping[str, str] = {
    "function-code": "the stop function's code package",
    "function-state": "a function's runtime state (its host keys, timers' leases)",
}
"""The values of HOLDS_TAG, each a kind of content that is rebuilt by `pulumi up` and may go with `pulumi destroy`."""

WORLD_CIDRS = frozenset({"0.0.0.0/0", "::/0"})
SSH_PORT = 22
SLURMCTLD_PORT = 6817
"""slurmctld's port (goldenenv.slurm.SLURMCTLD_PORT, written here too: this module imports nothing of goldenenv; a
test checks the two agree)."""
HEAD_COMPONENT_KIND = "SlurmHead"
"""The kind of each cloud's Slurm head component (goldenenv:<cloud>:SlurmHead): its instances are the head."""

# The ids of the rules other modules name (the policy pack's config, a rule's message, a caller's filter).
UNTAGGED_RESOURCE = "untagged-resource"
BUDGET_NOT_PLANNED = "budget-not-planned"
BUDGET_STOP_CHAIN = "budget-stop-chain"
BUDGET_CHAIN_UNVERIFIED = "budget-stop-chain-unverified"


@dataclass(frozen=True)
class Plan:
    """What a rule and every provider's facts are given beside the resource they judge: the whole plan and the
    stack's values (Context adds the providers' facts, which only the rules read)."""

    resources: Sequence[PlannedResource]
    required_tags: Mapping[str, str]
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
