"""Capacity that fails over: when `goldenenv up` fails because the cloud has no room, move the cluster to the next
allowed zone or capacity type and try again; stop at a quota or a fatal error, saying every attempt and what to do.

Pure code: the deploy step (one `pulumi up` for a placement) is passed in, and what each error code rules out is
catalog data (catalog/data/capacity_errors.csv). The whole cluster moves together: its pools share one subnet, one
placement group and one parallel file system, so a zone move moves every pool; a capacity move follows each pool's
own `capacityFallback`. The region never changes (the retained storage is regional).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from goldenenv import catalog
from goldenenv.catalog.capacity import by_message, capacity_error
from goldenenv.spec import ClusterSpec

FATAL, ALL = "fatal", "all"
"""What an unknown code, or a text without one, is taken for: goldenenv never guesses capacity."""

SCOPE_BREADTH = ("none", "placement", "market", "zone", "region", "all")
"""Scopes from narrowest to broadest: when one failed up reports several errors, the broadest one decides."""

STOPPING_SCOPES = ("region", "all")
RETRY_IN_PLACE = "none"
STACK_TYPE = "pulumi:pulumi:Stack"
"""The stack's own diagnostics ("update failed") name no failed resource."""
FIRST_BACKOFF_S = 5.0
"""Wait before the first retry of a transient error; each further retry waits twice as long."""

# Where a failed up's text names the cloud's error code, one pattern per SDK layout the providers print.
CODE_LAYOUTS = (
    re.compile(r"api error (?P<code>[A-Za-z][\w.]*):"),  # AWS SDK for Go v2 (terraform-provider-aws, pulumi-aws)
    re.compile(r"<Code>(?P<code>[A-Za-z][\w.]*)</Code>"),  # EC2 Query API XML body
    re.compile(r"An error occurred \((?P<code>[A-Za-z][\w.]*)\) when calling"),  # boto3 and the AWS CLI
    re.compile(r"\bErrorCode: (?P<code>[A-Za-z][\w.]*)"),  # alibaba-cloud-sdk-go ServerError
    re.compile(r"(?<![\w-])Code: (?P<code>[A-Za-z][\w.]*)"),  # alibaba-cloud-sdk-go, `Code: ...` form
    re.compile(r'"[Cc]ode"\s*:\s*"(?P<code>[A-Za-z][\w.]*)"'),  # JSON bodies: Alibaba Tea SDK, Compute Engine, ARM
    re.compile(r'\bCode="(?P<code>[A-Za-z][\w.]*)"'),  # Azure go-autorest
    re.compile(r"\bERROR CODE: (?P<code>[A-Za-z][\w.]*)"),  # azure-sdk-for-go (layout unverified)
    re.compile(r"googleapi: Error \d+: .*, (?P<code>[A-Za-z]\w*)\s*$", re.MULTILINE),  # googleapi (unverified)
)
MESSAGE_FIELD = re.compile(r'\b[Mm]essage(?:: (?P<plain>[^\n]+)'  # alibaba-cloud-sdk-go, Tea SDKError
                           r'|"\s*:\s*"(?P<json>(?:[^"\\]|\\.)*)"'  # JSON bodies
                           r'|="(?P<quoted>[^"]*)")')  # go-autorest
"""The provider's message where the layout gives it a field of its own (`Message: ...`, JSON, go-autorest)."""
MESSAGE_FIELD_LINES = 6
RESOURCE_MENTIONS = (
    re.compile(r"[a-z][\w-]*:[\w/.-]*:[A-Z][\w.]* \(?(?P<name>[\w.-]+)\)?"),  # `aws:ec2:Instance (name):`, progress
    re.compile(r"urn:pulumi:\S*::(?P<name>[^\s:]+)"),  # a URN's last part
)
SUMMARY_LINE = re.compile(r"^(?:code: -?\d+|stdout:|stderr:|error: update failed|(?:error|\w+ urn:pulumi:\S+): \d+ "
                          r"errors? occurred:)$")
"""Lines that frame an error without saying it: CommandError's fields, Pulumi's wrappers and its stack summary."""
DIAGNOSTICS_HEADING = re.compile(r"^  \S.*\):\s*$")
"""`  aws:ec2:Instance (name):`, the heading of one resource's diagnostics."""


@dataclass(frozen=True)
class CloudError:
    """A failed up, read: the cloud's error code (empty when the text names none), what the catalog says it is and
    rules out, the provider's message, and the Pulumi resource that failed when the text names one."""

    cloud: str
    code: str
    klass: str
    scope: str
    message: str
    resource: str | None = None

    @property
    def label(self) -> str:
        return f"{self.code or 'no error code'} ({self.klass})"


@dataclass(frozen=True)
class Placement:
    """Where one up puts the cluster: one zone for every pool, and each pool's capacity type."""

    zone: str
    capacity: tuple[tuple[str, str], ...]
    """(pool name, capacity type) per pool, in the stack's pool order."""

    def capacity_of(self, pool: str) -> str | None:
        return dict(self.capacity).get(pool)

    def __str__(self) -> str:
        return f"{self.zone}, " + ", ".join(f"{pool} on {capacity}" for pool, capacity in self.capacity)


@dataclass(frozen=True)
class PoolAsk:
    """What a pool asks the cloud for: its nodes and the capacity types it may use, cheapest first."""

    name: str
    instance_type: str
    count: int
    vcpus: int
    """Per node."""
    capacities: tuple[str, ...]
    """The pool's capacityFallback order, e.g. ("spot", "on-demand"); one type when the pool has no fallback."""


@dataclass(frozen=True)
class Attempt:
    placement: Placement
    error: CloudError | None
    """None: the up succeeded."""


@dataclass(frozen=True)
class Outcome:
    placement: Placement
    attempts: tuple[Attempt, ...]


class FailoverStopped(RuntimeError):
    """The failover gave up: the message lists every attempt, then what to do."""

    def __init__(self, attempts: Sequence[Attempt], advice: str):
        self.attempts = tuple(attempts)
        self.advice = advice
        super().__init__(_report(self.attempts, advice))


def candidates(zones: list[str], pools: list[PoolAsk]) -> list[Placement]:
    """Every placement to try, cheapest first like SkyPilot: every zone with each pool's first capacity type, then
    every zone with the next one (a pool whose list is shorter stays on its last type). Pools move in step, so a
    cluster of two spot-then-on-demand pools tries spot/spot before on-demand/on-demand, never a mix."""
    steps = max((len(p.capacities) for p in pools), default=0)
    ordered: list[Placement] = []
    for step in range(steps):
        for zone in zones:
            placement = Placement(zone, tuple((p.name, p.capacities[min(step, len(p.capacities) - 1)]) for p in pools))
            if placement not in ordered:
                ordered.append(placement)
    return ordered


def stack_pools(spec: ClusterSpec) -> list[PoolAsk]:
    """What each of the stack's pools asks the cloud for (its type's vCPUs from the catalog)."""
    return [PoolAsk(pool.name, pool.instance_type, pool.count,
                    catalog.instance_type(spec.cloud, pool.instance_type).vcpus,
                    tuple(c.value for c in pool.capacities)) for pool in spec.nodes]


def stack_order(spec: ClusterSpec, zone_fixed: bool = False) -> list[Placement]:
    """The placements `up` tries for this stack: the one in use first (its zone and each pool's capacity, as the
    stack file says), then the rest of `candidates`. zone_fixed: the cluster exists, so only its zone is tried
    (a zone move would replace its subnet, nodes, head and parallel file system). A zone of "" lets the cloud
    choose (a stack that names none)."""
    zones = list(spec.zones or [spec.placed_zone or ""])
    if zone_fixed:
        zones = [spec.placed_zone or zones[0]]
    current = Placement(spec.placed_zone or zones[0], tuple((p.name, p.capacity.value) for p in spec.nodes))
    ordered = candidates(zones, stack_pools(spec))
    return [current, *(p for p in ordered if p != current)] if current in ordered else ordered


def describe_order(candidates: Sequence[Placement]) -> list[str]:
    """The order `goldenenv plan` prints: "1. us-east-1a: gpu spot"."""
    return [f"{i}. {p.zone}: " + ", ".join(f"{pool} {capacity}" for pool, capacity in p.capacity)
            for i, p in enumerate(candidates, start=1)]


def classify(cloud: str, text: str) -> CloudError:
    """Read the text of a failed `pulumi up` (the Automation API's CommandError: the engine's stdout and stderr).

    Every error code found in a provider's layout is looked up in the catalog; when one up reports several, the one
    that rules out most decides. Where a provider prints no known code, the words a row lists for it decide
    (Google's provider prints a stockout's message only). Anything else is fatal: the failover never guesses
    capacity."""
    found = list(_codes_in(text))
    known = [(position, code, message) for position, code, message in found if capacity_error(cloud, code)]
    if known:
        position, code, message = max(known, key=lambda k: SCOPE_BREADTH.index(capacity_error(cloud, k[1]).scope))
        row = capacity_error(cloud, code)
        return CloudError(cloud, code, row.klass, row.scope, message, _resource_before(text, position))
    worded = by_message(cloud, text)
    if worded:
        position, row = worded
        line = text[text.rfind("\n", 0, position) + 1:].split("\n", 1)[0]
        return CloudError(cloud, row.code, row.klass, row.scope, line.strip().lstrip("*: ").strip(),
                          _resource_before(text, position))
    code = found[0][1] if found else ""
    resource = _resource_before(text, found[0][0] if found else len(text))
    return CloudError(cloud, code, FATAL, ALL, _last_meaningful_lines(text), resource)


def run(deploy: Callable[[Placement], object], candidates: Sequence[Placement], cloud: str,
        log: Callable[[str], None], sleep: Callable[[float], None] = time.sleep, transient_retries: int = 3, *,
        pools: Sequence[PoolAsk] = (), region: str = "") -> Outcome:
    """Deploy at each candidate in turn until one up succeeds.

    A transient error is retried in place with exponential backoff; a capacity error moves to the next candidate;
    an error scoped to the zone drops the zone's later candidates, one scoped to the market drops the later ones
    where the failing pool keeps that capacity type; a region-wide quota or a fatal error stops at once.
    `pools` (what each pool asks for) and `region` let a quota stop say how many vCPUs to ask for, and where."""
    attempts: list[Attempt] = []
    remaining = list(candidates)
    while remaining:
        placement, *remaining = remaining
        error = _deploy_with_retries(deploy, placement, cloud, log, sleep, transient_retries, attempts)
        if error is None:
            return Outcome(placement, tuple(attempts))
        if error.scope in STOPPING_SCOPES or error.scope == RETRY_IN_PLACE:
            log(f"up in {placement}: {error.label}: stopping")
            raise FailoverStopped(attempts, _stop_advice(error, placement, pools, region, transient_retries))
        remaining, ruled_out = _rule_out(remaining, placement, error)
        if not remaining:
            log(f"up in {placement}: {error.label}: {ruled_out}no allowed placement is left")
            raise FailoverStopped(attempts, _exhausted_advice(candidates, attempts, pools, region))
        log(f"up in {placement}: {error.label}: {ruled_out}trying {remaining[0]}")
    raise FailoverStopped(attempts, _exhausted_advice(candidates, attempts, pools, region))


def _deploy_with_retries(deploy, placement: Placement, cloud: str, log, sleep, transient_retries: int,
                         attempts: list[Attempt]) -> CloudError | None:
    """One placement: up, and up again after a wait while the cloud answers with a transient error."""
    retry = 0
    while True:
        try:
            deploy(placement)
        except Exception as failure:  # noqa: BLE001 - whatever the up raised: its text says what failed
            error = classify(cloud, str(failure))
            attempts.append(Attempt(placement, error))
            if error.scope != RETRY_IN_PLACE or retry >= transient_retries:
                return error
            delay = FIRST_BACKOFF_S * 2 ** retry
            retry += 1
            log(f"up in {placement}: {error.label}: retrying in {delay:g}s ({retry} of {transient_retries})")
            sleep(delay)
        else:
            attempts.append(Attempt(placement, None))
            log(f"up in {placement}: done")
            return None


def _rule_out(remaining: list[Placement], placement: Placement, error: CloudError) -> tuple[list[Placement], str]:
    """The candidates left once the error's scope is applied, and what was ruled out, said for the log."""
    if error.scope == "zone":
        return [c for c in remaining if c.zone != placement.zone], f"{placement.zone} ruled out; "
    if error.scope == "market":
        failing = {(pool, placement.capacity_of(pool)) for pool in _failing_pools(error, placement)}
        kept = [c for c in remaining if not failing & set(c.capacity)]
        said = ", ".join(f"{pool} on {capacity}" for pool, capacity in sorted(failing))
        return kept, f"{said} ruled out; "
    return remaining, ""


def _failing_pools(error: CloudError, placement: Placement) -> list[str]:
    """The pool the failed resource belongs to (its name is `<stack>-<pool>-<n>`), or every pool when the resource
    is not one of a pool's (the head, or none named)."""
    pools = [pool for pool, _ in placement.capacity]
    if error.resource:
        matching = [p for p in pools if _belongs(error.resource, p)]
        if matching:
            return [max(matching, key=len)]
    return pools


def _belongs(resource: str, pool: str) -> bool:
    return resource == pool or resource.endswith(f"-{pool}") or f"-{pool}-" in resource


def _codes_in(text: str) -> Iterator[tuple[int, str, str]]:
    """(position, code, the provider's message) for every code a known layout names, in text order."""
    found = sorted((m.start("code"), m.group("code"), m.end()) for layout in CODE_LAYOUTS
                   for m in layout.finditer(text))
    for position, code, end in found:
        yield position, code, _message_after(text[end:])


def _message_after(rest: str) -> str:
    """The message that goes with a code: its own field within the next lines (Alibaba, JSON bodies, Azure), else
    the rest of the code's line (AWS: `api error CODE: message`)."""
    near = "\n".join(rest.split("\n")[:MESSAGE_FIELD_LINES])
    field = MESSAGE_FIELD.search(near)
    if field:
        return next(text for text in field.groups() if text is not None).strip()
    return rest.split("\n", 1)[0].strip(" \t:\"',")


def _resource_before(text: str, position: int) -> str | None:
    """The last Pulumi resource the text names before the error: a diagnostics heading, a progress line or a URN."""
    mentions = [(m.start(), m.group("name")) for pattern in RESOURCE_MENTIONS
                for m in pattern.finditer(text, 0, position) if not m.group(0).startswith(STACK_TYPE)]
    return max(mentions)[1] if mentions else None


def _last_meaningful_lines(text: str, keep: int = 4) -> str:
    """What a user needs of a failure goldenenv cannot classify: the failed resources' diagnostics when Pulumi
    printed some, else the text's last lines, without the CommandError frame and Pulumi's summary."""
    lines = _diagnostics(text) or text.splitlines()
    meaningful = [line.strip().lstrip("* ").strip() for line in lines]
    meaningful = [line for line in meaningful if line and not SUMMARY_LINE.match(line)]
    return "\n".join(meaningful[-keep:])


def _diagnostics(text: str) -> list[str]:
    """The lines under Pulumi's `Diagnostics:` heading, without the stack's own block ("update failed")."""
    _, heading, rest = text.partition("Diagnostics:")
    if not heading:
        return []
    lines: list[str] = []
    in_stack_block = False
    for line in rest.splitlines():
        if line and not line[0].isspace():
            break
        if DIAGNOSTICS_HEADING.match(line):
            in_stack_block = line.strip().startswith(STACK_TYPE)
            continue
        if not in_stack_block:
            lines.append(line)
    return lines


def _stop_advice(error: CloudError, placement: Placement, pools: Sequence[PoolAsk], region: str,
                 transient_retries: int) -> str:
    """What to do when an error stops the failover at once: a quota, a fatal error, a transient one that lasted."""
    said = [f"{error.code or 'the error'}: {error.message}" if error.message else error.label]
    if error.klass == "quota":
        said += _quota_lines(error, placement, pools, region)
    if error.scope == RETRY_IN_PLACE:
        said.append(f"still failing after {transient_retries} retries in {placement.zone}")
    row = capacity_error(error.cloud, error.code)
    said.append(row.what_to_do if row else "fix the cause above, then run `goldenenv up` again")
    return "\n".join(said)


def _exhausted_advice(candidates: Sequence[Placement], attempts: Sequence[Attempt], pools: Sequence[PoolAsk],
                      region: str) -> str:
    """What to do when every allowed placement was tried or ruled out: the order tried, then each error's advice."""
    said = ["no allowed placement is left; the candidates were, in order:"]
    said += [f"  {line}" for line in describe_order(candidates)]
    seen: list[str] = []
    for attempt in attempts:
        error = attempt.error
        if error is None or error.code in seen:
            continue
        seen.append(error.code)
        if error.klass == "quota":
            said += _quota_lines(error, attempt.placement, pools, region)
        row = capacity_error(error.cloud, error.code)
        if row:
            said.append(f"{error.code}: {row.what_to_do}")
    return "\n".join(said)


def _quota_lines(error: CloudError, placement: Placement, pools: Sequence[PoolAsk], region: str) -> list[str]:
    """How many vCPUs the failing pools ask for, and of which quota where their cloud knows it (Cloud.quota_lines)."""
    from goldenenv import clouds
    from goldenenv.clouds.base import VcpuAsk, vcpu_lines

    asked = {p.name: p for p in pools}
    asks = [VcpuAsk(name, asked[name].instance_type, asked[name].count, asked[name].vcpus,
                    placement.capacity_of(name) or "") for name in _failing_pools(error, placement) if name in asked]
    if not asks:
        return []
    if error.cloud in clouds.names():
        return clouds.get(error.cloud).quota_lines(asks, region)
    return vcpu_lines(asks, region)


def _report(attempts: Sequence[Attempt], advice: str) -> str:
    tried = [f"  {i}. {a.placement} → {a.error.label if a.error else 'done'}" for i, a in enumerate(attempts, 1)]
    return "\n".join([f"goldenenv up stopped after {len(attempts)} attempt(s):", *tried, advice])
