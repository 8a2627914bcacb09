"""Guardrails: rules over the resources a Pulumi program plans to create.

Rules are plain functions over plain data (``PlannedResource``: type token plus input properties in engine
form, camelCase), so the same rules serve ``goldenenv plan`` (resources recorded under Pulumi's mock runtime)
and Pulumi CLI users (the policy pack in ``policy/``, through ``from_policy_resource``). This is the lowest
layer: it imports nothing from the rest of goldenenv at import time and does no work then.

The rules are cloud-neutral. What they need to know of a provider - its security group types and how to read
an ingress permission, how its disks, buckets and topics say they are encrypted, how a node gets a public IP,
which resources hold data - is that provider's ``ProviderFacts``, written in its own folder
(goldenenv/clouds/<cloud>/guardrail_facts.py) and found there on first use: a new cloud edits no rule.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import ipaddress
import json
import keyword
import os
import pkgutil
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    severity: Severity
    check: Callable[[PlannedResource, Context], Iterable[str]]


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

# ---------------------------------------------------------------- public address space (shared with spec.py)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

WIDEST_PUBLIC_PREFIX = {4: 8, 6: 32}
"""How much public space an admin (SSH) source may admit, counted over the union of every source: at most the
addresses of one IPv4 /8 and of one IPv6 /32 (PUBLIC_ALLOWANCE). IPv4: a /8 is the largest block ever allocated
to one organisation; anything more is a sizeable fraction of the internet, however it is split (two /8s, fifty
alternating /8s). IPv6: a /32 is the usual allocation to a whole ISP or RIR member; a site gets a /48 and an
office a /56 or /64, so a /32 already reaches far past one admin. spec.py's adminCidrs validation and
ssh-open-to-world both judge by this measure, so a valid stack file never fails the rule."""

PUBLIC_ALLOWANCE: Mapping[int, int] = {version: 2 ** ((32 if version == 4 else 128) - prefix)
                                       for version, prefix in WIDEST_PUBLIC_PREFIX.items()}
"""IP version -> the most public addresses a set of admin sources may admit together."""

NOT_PUBLIC: Mapping[int, tuple[Network, ...]] = {
    4: tuple(ipaddress.IPv4Network(n) for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
        "224.0.0.0/4", "240.0.0.0/4")),
    6: tuple(ipaddress.IPv6Network(n) for n in (
        "::/3", "4000::/2", "8000::/1",  # outside 2000::/3, the only IPv6 global unicast space
        "2001:db8::/32")),
}
"""Address space no one on the internet can source traffic from: IANA's special-purpose registries (private,
shared, loopback, link-local, documentation, benchmarking, multicast, reserved)."""

_SHORT_IPV4 = re.compile(r"^(\d{1,3})(\.\d{1,3}){0,2}(/\d{1,2})?$")


def parse_network(value: Any) -> Network | None:
    """A CIDR as the network it admits, or None when it is no network.

    Reads what a provider would: host bits set (10.0.0.1/8 is 10.0.0.0/8), a netmask (0.0.0.0/0.0.0.0), and the
    classful short forms with fewer than four octets, "0/0", "10/8", "172.16/12" (the missing octets are zeros).
    """
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return value
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        pass
    if _SHORT_IPV4.match(text):
        address, _, prefix = text.partition("/")
        octets = address.split(".")
        padded = ".".join(octets + ["0"] * (4 - len(octets)))
        try:
            return ipaddress.ip_network(f"{padded}/{prefix or 8 * len(octets)}", strict=False)
        except ValueError:
            return None
    return None


def cidr_union(cidrs: Iterable[Any]) -> list[Network]:
    """The networks together, collapsed per IP version (IPv4 first); values that are not CIDRs are skipped."""
    networks: dict[int, list[Network]] = {4: [], 6: []}
    for cidr in cidrs:
        net = parse_network(cidr)
        if net is not None:
            networks[net.version].append(net)
    return [n for version in (4, 6) for n in ipaddress.collapse_addresses(networks[version])]


def _minus(blocks: list[Network], excluded: Network) -> list[Network]:
    kept: list[Network] = []
    for block in blocks:
        if not block.overlaps(excluded):
            kept.append(block)
        elif excluded.subnet_of(block):
            kept.extend(block.address_exclude(excluded))
    return kept


def public_space(cidrs: Iterable[Any]) -> list[Network]:
    """The public part of the union of ``cidrs`` (NOT_PUBLIC taken out), collapsed, IPv4 first."""
    union = cidr_union(cidrs)
    public: list[Network] = []
    for version in (4, 6):
        blocks = [n for n in union if n.version == version]
        for excluded in NOT_PUBLIC[version]:
            blocks = _minus(blocks, excluded)
        public += ipaddress.collapse_addresses(blocks)
    return public


def public_addresses(cidrs: Iterable[Any]) -> dict[int, int]:
    """IP version -> how many public addresses the union of ``cidrs`` admits (each address counted once)."""
    counts = {4: 0, 6: 0}
    for block in public_space(cidrs):
        counts[block.version] += block.num_addresses
    return counts


def wide_public_blocks(cidrs: Iterable[Any]) -> list[Network]:
    """The public blocks of each IP version whose union admits more than PUBLIC_ALLOWANCE: empty when the set is
    narrow. The union is what counts, measured in addresses: 0.0.0.0/1 and 128.0.0.0/1 are each "not the world",
    together they are; fifty public /8s, none wider than a /8, admit fifty /8s' worth."""
    public = public_space(cidrs)
    counts = {4: 0, 6: 0}
    for block in public:
        counts[block.version] += block.num_addresses
    return [n for n in public if counts[n.version] > PUBLIC_ALLOWANCE[n.version]]


def _amount(count: int, version: int) -> str:
    """A number of addresses as a share of the internet's space, e.g. "50 /8s (19.5 % of IPv4)"."""
    whole = 2 ** (32 if version == 4 else 128)
    unit = WIDEST_PUBLIC_PREFIX[version]
    share = count / whole * 100
    return f"{count / PUBLIC_ALLOWANCE[version]:g} /{unit}s' worth ({share:.3g} % of IPv{version})"


def describe_wide(cidrs: Iterable[Any]) -> str | None:
    """Why a set of source CIDRs is too public ("together cover 0.0.0.0/0, ..."), or None when it is not."""
    union = cidr_union(cidrs)
    wide = wide_public_blocks(union)
    if not wide:
        return None
    shown = ", ".join(map(str, union[:6])) + (f" and {len(union) - 6} more" if len(union) > 6 else "")
    if any(n.prefixlen == 0 for n in union):
        return f"together cover {shown}: the whole internet"
    counts = public_addresses(union)
    over = "; ".join(f"IPv{v}: {_amount(counts[v], v)}" for v in (4, 6) if counts[v] > PUBLIC_ALLOWANCE[v])
    return (f"together cover {shown}, which admits more public addresses than one /{WIDEST_PUBLIC_PREFIX[4]} "
            f"(IPv4) or one /{WIDEST_PUBLIC_PREFIX[6]} (IPv6) ({over})")


# ---------------------------------------------------------------- plain-data helpers

def _is_true(value: Any) -> bool:
    """True for a bool True or the string "true" (launch templates carry booleans as strings)."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _port(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _protocol(value: Any) -> str:
    """An IP protocol by name: "-1" (every protocol) is "all", IANA numbers name tcp, udp and icmp."""
    text = str(value).strip().lower()
    return {"-1": "all", "6": "tcp", "17": "udp", "1": "icmp"}.get(text, text)


def _sources(*values: Any) -> list[str]:
    """The non-empty CIDR strings among values that are each one CIDR or a list of them."""
    sources = []
    for value in values:
        for cidr in ([value] if isinstance(value, str) else _items(value)):
            if isinstance(cidr, str) and cidr.strip():
                sources.append(cidr.strip())
    return sources


def _label(resource: PlannedResource) -> str:
    """'Kind name' for messages, e.g. "LaunchTemplate 'gpu-nodes'"."""
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _refers_to(resource: PlannedResource, prop: str, value: Any, target: PlannedResource,
               target_values: Iterable[Any]) -> bool:
    """Whether ``value`` (read from ``resource.props[prop]``) points at ``target``, by value or by dependency."""
    if isinstance(value, str) and value in {v for v in target_values if isinstance(v, str)}:
        return True
    return target.urn in resource.property_dependencies.get(prop, ())


# ---------------------------------------------------------------- what each provider tells the rules

@dataclass(frozen=True)
class Ingress:
    """One allowed inbound permission from a CIDR source; ports None = every port."""

    protocol: str
    from_port: int | None
    to_port: int | None
    source: str

    def opens(self, port: int) -> bool:
        if self.protocol == "all":
            return True
        if self.protocol != "tcp" or self.from_port is None or self.to_port is None:
            return False
        return self.from_port <= port <= self.to_port

    def describe(self) -> str:
        if self.protocol == "all":
            return f"all traffic from {self.source}"
        if self.from_port is None or self.to_port is None:
            return f"{self.protocol} from {self.source}"
        return f"{self.protocol} {self.from_port}-{self.to_port} from {self.source}"


Messages = Callable[[PlannedResource, Context], Iterable[str]]
"""A provider's check of one resource for one rule: a message per problem, nothing for types not its own."""


def _no_messages(resource: PlannedResource, ctx: Context) -> Iterable[str]:
    return ()


def _no_ingress(resource: PlannedResource) -> Iterable[Ingress]:
    return ()


def _no_gap(resource: PlannedResource, ctx: Context) -> str | None:
    return None


def _never_private(resource: PlannedResource) -> bool:
    return False


def _always_holds_data(resource: PlannedResource, ctx: Context) -> bool:
    return False


def _no_targets(resource: PlannedResource) -> Iterable[tuple[str, Any]]:
    return ()


def _no_document(resource: PlannedResource) -> Any:
    return None


def _no_acl(resource: PlannedResource) -> Iterable[str]:
    return ()


def _not_a_block(resource: PlannedResource) -> Sequence[str] | None:
    return None


def _covers_nothing(block: PlannedResource, bucket: PlannedResource, ctx: Context) -> bool:
    return False


def _no_boot(resource: PlannedResource) -> str | None:
    return None


def _no_addresses(resource: PlannedResource) -> Iterable[str]:
    return ()


def _pull_unknown(host: PlannedResource, repository: PlannedResource, ctx: Context) -> str | None:
    return ("is booted to pull from it, but its provider's facts say nothing of how a host is granted pull "
            "(ProviderFacts.pull_gap)")


def _service_unknown(service: PlannedResource, ctx: Context) -> str | None:
    return ("reads or writes the stack's bucket, but its provider's facts say nothing of the grant that admits it "
            "(ProviderFacts.bucket_service_gap)")


def _pins_nothing(resource: PlannedResource) -> str | None:
    return None


def _unpack(raw: bytes) -> bytes:
    """base64 (when the whole text is), then gzip (when it starts with gzip's magic), as cloud-init reads them."""
    import base64
    import binascii
    import gzip

    text = raw.strip()
    if text and not text.startswith((b"#", b"Content-Type", b"MIME-Version", b"\x1f\x8b")):
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except OSError:
            return b""
    return raw


def _inner_files(text: str) -> list[str]:
    """The contents of a cloud-config's write_files that are encoded (b64, gzip, gz+b64), decoded."""
    import yaml

    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    files = _mapping(config).get("write_files")
    found = []
    for entry in (_mapping(f) for f in _items(files)):
        if str(entry.get("encoding") or "").lower() not in ("", "text/plain") and isinstance(entry.get("content"), str):
            found.append(_unpack(entry["content"].encode()).decode(errors="replace"))
    return found


def boot_text(value: Any) -> str | None:
    """User data as the host reads it: plain text, or base64 of it, either gzip-compressed; a MIME multi-part
    archive's parts and a cloud-config's encoded write_files decoded after it (cloud-init takes each form); None for
    anything that is no text."""
    import email

    if not isinstance(value, str) or not value.strip():
        return None
    text = _unpack(value.encode()).decode(errors="replace")
    if text.lstrip().startswith(("Content-Type", "MIME-Version")):
        parts = [_unpack(part.get_payload(decode=True) or b"").decode(errors="replace")
                 for part in email.message_from_string(text).walk() if not part.is_multipart()]
        text = "\n".join([text, *parts])
    if "#cloud-config" in text:
        text = "\n".join([text, *_inner_files(text[text.index("#cloud-config"):])])
    return text


@dataclass(frozen=True)
class BudgetWatch:
    """A budget the plan holds, as budget-not-planned reads it."""

    resource: PlannedResource
    stops: bool
    """Whether it says it stops the nodes when spent (its alert routes to a stop, or its guard is told to stop)."""
    gap: str | None = None
    """What of it is missing from the plan for it to act (its stop function, the timer that runs it); None if
    nothing is."""


def _no_budgets(ctx: Context) -> Sequence[BudgetWatch]:
    return ()


def _no_chain(ctx: Context) -> Iterable[tuple[PlannedResource, str]]:
    return ()


@dataclass(frozen=True)
class ProviderFacts:
    """What the cloud-neutral rules need to know of one provider's resources.

    Each cloud writes one, as ``FACTS`` in goldenenv/clouds/<cloud>/guardrail_facts.py. Every hook is asked about
    every planned resource and answers nothing for types that are not its provider's; what is left unset, the
    provider does not have (or no rule reads yet).
    """

    name: str
    security_groups: tuple[str, ...] = ()
    """ssh-open-to-world / ingress-open-to-world: types of the groups whose rules decide who reaches a node."""
    standalone_ingress_rules: tuple[str, ...] = ()
    """Rule types that attach to a group (``group_property`` holds the group's id); a group's inline rules and
    its standalone rules are judged together."""
    group_property: str = "securityGroupId"
    ingress: Callable[[PlannedResource], Iterable[Ingress]] = _no_ingress
    """Every inbound permission a group or rule grants from a CIDR source (not from other groups)."""
    launch_tags: Messages = _no_messages
    """untagged-resource, beyond the resource's own tags: what a launcher (a launch template) fails to tag on
    what it launches. Asked only about taggable custom resources."""
    storage_encryption: Messages = _no_messages
    """unencrypted-storage: disks, file systems and buckets not encrypted at rest."""
    topic_encryption: Messages = _no_messages
    """unencrypted-topic: notification topics not encrypted at rest."""
    metadata: Messages = _no_messages
    """imdsv1-allowed: nodes whose instance metadata service answers without a session token."""
    public_ip: Messages = _no_messages
    """public-ip-on-gpu-node: nodes, or the subnets they launch in, that give them a public address."""
    data_stores: tuple[str, ...] = ()
    """data-store-not-retained: types holding datasets and checkpoints, to be retained (and not forceDestroy)."""
    holds_no_data: Callable[[PlannedResource, Context], bool] = _always_holds_data
    """data-store-not-retained: whether a resource of a data-store type holds none of the user's data, by what the
    plan puts in it (a bucket holding only a planned function's source code)."""
    final_backup_gap: Callable[[PlannedResource, Context], str | None] = _no_gap
    """data-store-not-retained: for a file system `pulumi destroy` deletes without a final backup, what to do
    instead ("link it to ..., set ..."); None for every other resource."""
    public_data: Messages = _no_messages
    """s3-public-access: bucket policies and public access settings that make stored data public."""
    instances: tuple[str, ...] = ()
    """public-ip-on-head: the provider's instance types (a head is one, inside a SlurmHead component)."""
    says_private: Callable[[PlannedResource], bool] = _never_private
    """public-ip-on-head: whether an instance says outright that it takes no public IP (AWS associatePublicIpAddress
    false, Alibaba internetMaxBandwidthOut 0); unset is not enough, it would follow the subnet's default."""
    address_targets: Callable[[PlannedResource], Iterable[tuple[str, Any]]] = _no_targets
    """public-ip-on-gpu-node: for a resource that gives something a public address (an elastic IP, its
    association), each (property, value) naming what gets it; a planned instance named there is public."""
    buckets: tuple[str, ...] = ()
    """s3-public-access: bucket types; each needs a public access block covering it (absent counts as open)."""
    bucket_policy: Callable[[PlannedResource], Any] = _no_document
    """s3-public-access: the policy document (JSON text or mapping) a resource attaches to a bucket, else None."""
    bucket_acl: Callable[[PlannedResource], Iterable[str]] = _no_acl
    """s3-public-access: what a bucket or ACL resource grants, as canned ACL names ("public-read") or grantee
    groups ("AllUsers", "AuthenticatedUsers"); judged against PUBLIC_ACLS."""
    access_block: Callable[[PlannedResource], Sequence[str] | None] = _not_a_block
    """s3-public-access: for a public access block, the settings it leaves off ([] when it blocks everything);
    None for every other resource."""
    block_covers: Callable[[PlannedResource, PlannedResource, Context], bool] = _covers_nothing
    """s3-public-access: whether a public access block (account-wide or by reference) covers a bucket."""
    account_condition_keys: frozenset[str] = frozenset()
    """s3-public-access: policy condition keys (lower case) that, compared for equality to a concrete value, keep
    an Allow to everyone inside the account, its organisation or its network; any other condition counts as
    open."""
    budgets: Callable[[Context], Sequence[BudgetWatch]] = _no_budgets
    """budget-not-planned: the provider's budgets in the plan; its instances need one unless the stack says
    `budget: none`."""
    budget_hint: str = "plan the stack's budget"
    """budget-not-planned: what restores a missing budget, in the provider's words."""
    stop_chain: Callable[[Context], Iterable[tuple[PlannedResource, str]]] = _no_chain
    """budget-stop-chain: each broken link from the stack's budget to its nodes, as (the resource where it breaks,
    what is wrong in words after its label): the budget's filter, amount, currency and thresholds, its route to
    the stop function, the function switched on, its identity's permission to stop this stack's nodes, and the
    schedule that runs the time to live or idle stop (Context carries what the stack asks)."""
    boot_script: Callable[[PlannedResource], str | None] = _no_boot
    """pull-not-granted: the user data a host (an instance, launch template or scale set) boots with, as text
    (``boot_text`` decodes base64 and gzip); None for every other resource."""
    repositories: tuple[str, ...] = ()
    """pull-not-granted: the types of the provider's image repositories."""
    repository_addresses: Callable[[PlannedResource], Iterable[str]] = _no_addresses
    """pull-not-granted: the addresses hosts pull a repository's images by (host/path, as a boot names them)."""
    pull_gap: Callable[[PlannedResource, PlannedResource, Context], str | None] = _pull_unknown
    """pull-not-granted: for a host whose boot pulls from a planned repository, what keeps it from pulling (its
    identity holds no pull grant on that repository), in words after its label; None when it may pull."""
    bucket_services: tuple[str, ...] = ()
    """bucket-service-not-granted: types of the managed services that read or write the stack's bucket in the
    cloud's own name (a file system's import and export, a data flow)."""
    bucket_service_gap: Callable[[PlannedResource, Context], str | None] = _service_unknown
    """bucket-service-not-granted: what of the grant admitting such a service to the bucket the plan lacks (its
    service identity's role on the bucket), in words after its label; None when it is granted."""
    teardown_blocker: Callable[[PlannedResource], str | None] = _pins_nothing
    """teardown-blocked: why a resource would stop `destroy`, or a pool's resize or roll, from completing (a
    peering the network cannot be deleted under, a placement fixed to a number of instances), in words after its
    label; None when it does not."""
    tag_input: str = "tags"
    """untagged-resource: the input holding the key/value tags of the provider's resources; a type is taggable
    when its SDK class takes it (pulumi-gcp: "labels", its `tags` being network tags, a list of strings)."""
    tag_input_by_type: Mapping[str, str] = field(default_factory=dict)
    """untagged-resource: types whose tags live in another input than ``tag_input`` (pulumi-gcp's monitoring
    resources keep theirs in userLabels; a NotificationChannel's `labels` configure the channel)."""
    tag_outputs: tuple[str, ...] = ("tagsAll",)
    """untagged-resource: properties the engine fills with every tag a resource ends up with, the provider's
    default tags included (pulumi-aws tagsAll, pulumi-gcp pulumiLabels); the resource's own win over them."""
    tag_form: Callable[[Mapping[str, str]], Mapping[str, str]] = dict
    """untagged-resource: the stack's required tags as the provider writes them on its resources (pulumi-gcp:
    lowercased labels, goldenenv:stack -> goldenenv_stack)."""
    privilege: Messages = _no_messages
    """grant-broader-than-needed: grants wider than the provider's least-privilege table (clouds/<cloud>/privilege.py
    NEEDS): a wildcard, an action or role it does not list, a wider scope, a broader principal."""
    host_hardening: Messages = _no_messages
    """host-not-hardened: hosts without the boot integrity (Secure Boot, vTPM, Trusted Launch) their type supports,
    or with password login, unless a named reason says why."""
    storage_hardening: Messages = _no_messages
    """storage-not-hardened: storage reachable over plain HTTP or TLS below 1.2, or by shared key without a named
    reason."""
    data_lifecycle: Messages = _no_messages
    """lifecycle-deletes-data: lifecycle rules that delete every object of a data store within a day."""
    not_judged: Mapping[str, str] = field(default_factory=dict)
    """Rule id -> why the rule has nothing to judge on this provider (said as data, never a skipped test)."""


FACTS_PACKAGE = "goldenenv.clouds"
FACTS_MODULE = "guardrail_facts"
"""Each cloud package under FACTS_PACKAGE may hold a FACTS_MODULE defining ``FACTS``, a ProviderFacts."""

PROVIDERS: dict[str, ProviderFacts] = {}
"""Provider name -> its facts: the clouds' own, found on first use, and any given to ``register_facts``."""
_found = False


def register_facts(facts: ProviderFacts) -> None:
    """Apply a provider's facts in every rule (a provider living outside goldenenv/clouds/, or a test's)."""
    PROVIDERS[facts.name] = facts


def provider_facts() -> tuple[ProviderFacts, ...]:
    """Every provider's facts. The first call imports each cloud's FACTS_MODULE (and so its package, with its
    provider SDK), which this module never does at import time; registered facts of the same name win."""
    global _found
    if not _found:
        clouds = importlib.import_module(FACTS_PACKAGE)
        for cloud in pkgutil.iter_modules(clouds.__path__):
            folder = os.path.join(getattr(cloud.module_finder, "path", ""), cloud.name)
            if not cloud.ispkg or FACTS_MODULE not in {m.name for m in pkgutil.iter_modules([folder])}:
                continue
            facts = getattr(importlib.import_module(f"{FACTS_PACKAGE}.{cloud.name}.{FACTS_MODULE}"), "FACTS", None)
            if not isinstance(facts, ProviderFacts):
                raise TypeError(f"{FACTS_PACKAGE}.{cloud.name}.{FACTS_MODULE} must define FACTS, a ProviderFacts")
            PROVIDERS.setdefault(facts.name, facts)
        _found = True
    return tuple(PROVIDERS.values())


# ---------------------------------------------------------------- taggability, from the provider SDK

_TOKEN = re.compile(r"^(?P<pkg>[a-z][a-z0-9-]*):(?P<module>[A-Za-z0-9_/.-]+):(?P<cls>[A-Za-z_][A-Za-z0-9_]*)$")


def _sdk_class(type_token: str) -> type | None:
    """The Python SDK class behind a type token, imported lazily; None when the SDK has no such class."""
    match = _TOKEN.match(type_token)
    if match is None or match["pkg"] == "pulumi":
        return None
    package = "pulumi_" + match["pkg"].replace("-", "_")
    module = match["module"]
    # "ec2/vpc" names module ec2 (the lower-cased class is the file); "apps/v1" style tokens name the full path.
    candidates = [module.rsplit("/", 1)[0], module] if "/" in module else [module]
    for candidate in candidates:
        path = package if candidate == "index" else f"{package}.{candidate.replace('/', '.').replace('-', '_')}"
        path = ".".join(part + "_" if keyword.iskeyword(part) else part for part in path.split("."))  # lambda_
        if not all(part.isidentifier() for part in path.split(".")):
            continue
        try:
            with warnings.catch_warnings():  # SDK modules warn about their deprecated members on import
                warnings.simplefilter("ignore", DeprecationWarning)
                found = getattr(importlib.import_module(path), match["cls"], None)
        except ImportError:
            continue
        if inspect.isclass(found):
            return found
    return None


def _snake(name: str) -> str:
    """An engine (camelCase) input name as the SDK's keyword ("tagsAll" -> "tags_all")."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _package(type_token: str) -> str:
    """The provider package of a type token ("gcp" of "gcp:compute/instance:Instance"): its facts' name."""
    return type_token.split(":", 1)[0]


def facts_of(type_token: str, providers: Iterable[ProviderFacts] | None = None) -> ProviderFacts | None:
    """The facts of the provider whose package issues ``type_token`` (among ``providers``; by default every
    provider's, found on first use), or None."""
    package = _package(type_token)
    return next((f for f in (provider_facts() if providers is None else providers) if f.name == package), None)


def _tag_key(facts: ProviderFacts | None, type_token: str) -> str:
    if facts is None:
        return ProviderFacts.tag_input
    return facts.tag_input_by_type.get(type_token, facts.tag_input)


def tag_input(type_token: str, providers: Iterable[ProviderFacts] | None = None) -> str:
    """The input that holds the key/value tags of resources of this type ("tags"; "labels" on Google Cloud)."""
    if not _TOKEN.match(type_token):
        return ProviderFacts.tag_input
    return _tag_key(facts_of(type_token, providers), type_token)


def is_taggable(type_token: str, input_name: str | None = None) -> bool:
    """Whether resources of this type accept key/value tags, as the provider SDK declares it: its class takes the
    provider's tag input (``tag_input``: "tags", or "labels" for pulumi-gcp, whose `tags` are network tags).

    Provider resources and component resources are never taggable here: their tags are not the cloud's.
    """
    return _takes_input(type_token, _snake(input_name or tag_input(type_token)))


@functools.cache
def _takes_input(type_token: str, name: str) -> bool:
    cls = _sdk_class(type_token)
    if cls is None:
        return False
    import pulumi  # lazily: keeps this module free of work at import time

    if not issubclass(cls, pulumi.CustomResource) or issubclass(cls, pulumi.ProviderResource):
        return False
    for constructor in (getattr(cls, "_internal_init", None), cls.__init__):
        if constructor is None:
            continue
        try:
            if name in inspect.signature(constructor).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False


# ---------------------------------------------------------------- rule: untagged-resource

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


# ---------------------------------------------------------------- rules: ssh-open-to-world, ingress-open-to-world

def _ingress(resource: PlannedResource, ctx: Context) -> list[Ingress]:
    """Every inbound permission a resource grants from a CIDR source (not from other groups)."""
    return [p for facts in ctx.providers for p in facts.ingress(resource)]


def _groups(ctx: Context) -> tuple[str, ...]:
    return tuple(t for facts in ctx.providers for t in facts.security_groups)


def _standalone_rules(ctx: Context) -> tuple[str, ...]:
    return tuple(t for facts in ctx.providers for t in facts.standalone_ingress_rules)


def _group_reference(rule: PlannedResource, ctx: Context) -> tuple[str, Any]:
    """The property of a standalone rule naming its group, and its value."""
    prop = next((f.group_property for f in ctx.providers if rule.type in f.standalone_ingress_rules),
                ProviderFacts.group_property)
    return prop, rule.props.get(prop)


def _group_of(rule: PlannedResource, ctx: Context) -> PlannedResource | None:
    """The planned security group a standalone rule attaches to, by id or by dependency; None if not planned."""
    prop, value = _group_reference(rule, ctx)
    return next((g for g in ctx.of_type(*_groups(ctx))
                 if _refers_to(rule, prop, value, g, (g.id, g.props.get("id")))), None)


def _ssh_members(resource: PlannedResource, ctx: Context) -> list[PlannedResource] | None:
    """The resources whose rules together decide who reaches SSH on ``resource``'s group, ``resource`` first;
    None when another resource speaks for the group (its planned group, or the first rule naming the same id)."""
    rules = _standalone_rules(ctx)
    if resource.type in _groups(ctx):
        return [resource] + [r for r in ctx.of_type(*rules) if _group_of(r, ctx) is resource]
    if resource.type not in rules or _group_of(resource, ctx) is not None:
        return None
    group_id = _group_reference(resource, ctx)[1]
    if not isinstance(group_id, str) or not group_id:
        return [resource]  # its group is unknown: judged alone
    siblings = [r for r in ctx.of_type(*rules)
                if _group_reference(r, ctx)[1] == group_id and _group_of(r, ctx) is None]
    return siblings if siblings[0] is resource else None


_WORLD = ("0.0.0.0/0", "::/0")


def _admitted(source: str) -> list[str]:
    """The networks a source admits, for the union: one that is no network counts as the whole internet (the rule
    cannot tell what it admits, and a provider reading it more loosely than ``parse_network`` would open more)."""
    return [source] if parse_network(source) is not None else list(_WORLD)


def _ssh_openings(members: Iterable[PlannedResource], ctx: Context) -> list[tuple[PlannedResource, Ingress]]:
    return [(member, p) for member in members for p in _ingress(member, ctx) if p.opens(SSH_PORT)]


def _ssh_problem(resource: PlannedResource, opening: list[tuple[PlannedResource, Ingress]]) -> str | None:
    """Why the sources of ``opening`` together admit too much of the internet, naming the rules that do; None if
    they do not."""
    admitted = [cidr for _, p in opening for cidr in _admitted(p.source)]
    why = describe_wide(admitted)
    if why is None:
        return None
    wide = wide_public_blocks(admitted)
    culprits = [(m, p) for m, p in opening
                if parse_network(p.source) is None or any(_overlaps(p.source, w) for w in wide)]
    unreadable = [p.source for _, p in culprits if parse_network(p.source) is None]
    through = "; ".join(dict.fromkeys(
        p.describe() + ("" if m is resource else f" in {_label(m)}") for m, p in culprits[:8]))
    if len(culprits) > 8:
        through += f"; and {len(culprits) - 8} more"
    if unreadable:
        why += f" ({', '.join(map(repr, unreadable))} is no network: counted as the whole internet)"
    return why + f" ({through})"


def _speakers(ctx: Context) -> list[PlannedResource]:
    """The resources that speak for a group's SSH sources (a planned group, or the first rule of an unplanned one)."""
    kinds = (*_groups(ctx), *_standalone_rules(ctx))
    return [r for r in ctx.of_type(*kinds) if _ssh_members(r, ctx)]


def _check_ssh_open(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges the union of every source that opens SSH on one group (rules split into halves are still the world),
    then the union across every group of the plan: nodes in several groups are reached from all of them, so
    groups each narrow enough can together admit a large part of the internet."""
    members = _ssh_members(resource, ctx)
    if not members:
        return
    problem = _ssh_problem(resource, _ssh_openings(members, ctx))
    if problem is not None:
        yield (f"{_label(resource)} allows SSH from sources that {problem}; restrict the sources to your admin "
               f"CIDR or VPN, or reach nodes through SSM Session Manager.")
        return
    speakers = _speakers(ctx)
    if not speakers or speakers[0] is not resource:
        return  # the plan-wide union is reported once, on the first group
    if any(_ssh_problem(s, _ssh_openings(_ssh_members(s, ctx) or [], ctx)) for s in speakers):
        return  # a group is already too open alone: its own finding says so
    everything = _ssh_openings(ctx.of_type(*_groups(ctx), *_standalone_rules(ctx)), ctx)
    problem = _ssh_problem(resource, everything)
    if problem is not None:
        yield (f"The security groups of this plan, together, allow SSH from sources that {problem}; nodes in "
               f"several groups are reached from all of them. Restrict the sources to your admin CIDR or VPN, or "
               f"reach nodes through SSM Session Manager.")


def _overlaps(cidr: str, block: Network) -> bool:
    net = parse_network(cidr)
    return net is not None and net.version == block.version and net.overlaps(block)


def _is_world(source: str) -> bool:
    net = parse_network(source)
    return net is not None and net.prefixlen == 0


def _check_ingress_open(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for permission in _ingress(resource, ctx):
        if not _is_world(permission.source):
            continue
        if not permission.opens(SSH_PORT):  # SSH exposure is reported, as an error, by ssh-open-to-world
            yield (f"{_label(resource)} allows {permission.describe()}; training nodes need no inbound traffic "
                   f"from the internet: narrow the source to a known CIDR or reach the service through a tunnel.")


# ---------------------------------------------------------------- rules: slurmctld-beyond-cluster, public-ip-on-head

def _check_slurmctld_open(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Any address range is beyond the cluster: the head's group takes slurmctld's port from the nodes' group only."""
    for permission in _ingress(resource, ctx):
        if permission.opens(SLURMCTLD_PORT):
            yield (f"{_label(resource)} allows {permission.describe()}, which reaches slurmctld (tcp/{SLURMCTLD_PORT}) "
                   f"on the Slurm head: anyone there could talk to the cluster's controller. Open the port to the "
                   f"nodes' security group only, and submit jobs over ssh or SSM to the head.")


def _in_head(resource: PlannedResource) -> bool:
    """Whether the resource is declared inside a Slurm head component (its URN's type chain names one)."""
    parts = resource.urn.split("::")
    chain = parts[2].split("$")[:-1] if len(parts) > 2 else []
    return any(t.startswith("goldenenv:") and t.endswith(f":{HEAD_COMPONENT_KIND}") for t in chain)


def _check_head_public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for facts in ctx.providers:
        if resource.type in facts.instances and _in_head(resource) and not facts.says_private(resource):
            yield (f"{_label(resource)} is the Slurm head and does not say it takes no public IP (unset follows the "
                   f"subnet's default); the head is reached through the cluster's private network only: set "
                   f"associatePublicIpAddress false (AWS), internetMaxBandwidthOut 0 (Alibaba Cloud), or give its "
                   f"network interfaces no accessConfigs (Google Cloud).")


# ---------------------------------------------------------------- rules each provider judges alone

def _each_provider(hook: str) -> Messages:
    """A rule each provider judges alone: what every provider's ``hook`` (a ProviderFacts field) says of the
    resource, in provider order."""

    def check(resource: PlannedResource, ctx: Context) -> Iterator[str]:
        for facts in ctx.providers:
            yield from getattr(facts, hook)(resource, ctx)

    return check


_check_unencrypted_storage = _each_provider("storage_encryption")
_check_unencrypted_topic = _each_provider("topic_encryption")
_check_imdsv1 = _each_provider("metadata")
_public_ip_by_provider = _each_provider("public_ip")
_public_data_by_provider = _each_provider("public_data")


# ---------------------------------------------------------------- rule: public-ip-on-gpu-node

def _instances(ctx: Context) -> list[PlannedResource]:
    kinds = tuple(t for facts in ctx.providers for t in facts.instances)
    return list(ctx.of_type(*kinds))


def _check_public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """What each provider says of its nodes and subnets, then any address resource (an elastic IP, its
    association) that gives a planned instance a public address."""
    yield from _public_ip_by_provider(resource, ctx)
    targets = [t for facts in ctx.providers for t in facts.address_targets(resource)]
    if not targets:
        return
    for node in _instances(ctx):
        ids = (node.id, node.outputs.get("id"), node.props.get("id"))
        if any(_refers_to(resource, prop, value, node, ids) for prop, value in targets):
            yield (f"{_label(resource)} gives {_label(node)} a public address, reachable from the internet; "
                   f"release it and reach the node through a bastion, SSM or VPN (outbound goes through NAT).")


# ---------------------------------------------------------------- rule: s3-public-access (any provider's buckets)

PUBLIC_ACLS = frozenset({"public-read", "public-read-write", "authenticated-read", "allusers", "authenticatedusers"})
"""Canned ACLs and grantee groups (lower case) that open a bucket to everyone, or to anyone with an account of the
provider (authenticated-read: any account in the world)."""

_RESTRICTING_OPERATORS = frozenset({"stringequals", "stringequalsignorecase", "stringlike", "arnequals", "arnlike"})


def _policy_document(value: Any) -> Mapping[str, Any]:
    """A policy as a mapping: engine inputs carry it as JSON text; unknown or unreadable is empty."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return _mapping(value)


def _is_everyone(principal: Any) -> bool:
    """Principal "*" or any of its forms with a wildcard value ({"AWS": "*"}, {"CanonicalUser": "*"}, in a list):
    anyone, signed or not, from any account."""
    if isinstance(principal, str):
        return principal.strip() == "*"
    if isinstance(principal, Mapping):
        return any(_is_everyone(v) for v in principal.values())
    return any(_is_everyone(p) for p in _items(principal))


def _concrete(value: Any) -> bool:
    """A condition value naming something: not empty, not all wildcards, no wildcard in an ARN's account."""
    if not isinstance(value, str) or not value.strip("*? "):
        return False
    parts = value.split(":")
    return not (len(parts) >= 5 and parts[0] in ("arn", "acs") and any(c in parts[4] for c in "*?"))


def _restricted_to_account(condition: Any, keys: frozenset[str]) -> bool:
    """Whether a statement's Condition keeps it inside the account (its organisation or network): an equality on
    one of ``keys`` against concrete values. "IfExists" does not restrict (an absent key passes), nor does any
    other condition (source IPs, TLS, dates)."""
    for operator, clauses in _mapping(condition).items():
        name = str(operator).split(":")[-1].lower()
        if name not in _RESTRICTING_OPERATORS:
            continue
        for key, value in _mapping(clauses).items():
            values = [value] if isinstance(value, str) else _items(value)
            if str(key).lower() in keys and values and all(_concrete(v) for v in values):
                return True
    return False


def _open_statements(document: Any, keys: frozenset[str]) -> Iterator[tuple[str, str, str]]:
    """(sid, actions, who) of each Allow that reaches beyond the account."""
    statements = _policy_document(document).get("Statement")
    statements = [statements] if isinstance(statements, Mapping) else _items(statements)
    for index, statement in enumerate(_mapping(s) for s in statements):
        if str(statement.get("Effect", "")).strip().lower() != "allow":
            continue
        if "NotPrincipal" in statement:
            who = "NotPrincipal (everyone but the principals it names)"
        elif _is_everyone(statement.get("Principal")):
            who = "Principal \"*\" (anyone on the internet)"
        else:
            continue
        if _restricted_to_account(statement.get("Condition"), keys):
            continue
        action = statement.get("Action") or statement.get("NotAction")
        actions = ", ".join(map(str, _items(action))) if _items(action) else str(action or "actions")
        yield str(statement.get("Sid") or f"#{index}"), actions, who


def _check_s3_public(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A bucket is public by its policy (an Allow to everyone not kept inside the account), its ACL (inline or a
    separate resource), or by having no public access block (absent counts as open); what else a provider says."""
    label = _label(resource)
    for facts in ctx.providers:
        document = facts.bucket_policy(resource)
        if document is not None:
            for sid, actions, who in _open_statements(document, facts.account_condition_keys):
                yield (f"{label} statement {sid} allows {actions} to {who}, with no condition keeping it inside "
                       f"the account; name the roles or accounts that need the data instead.")
        for acl in facts.bucket_acl(resource):
            if str(acl).strip().lower() in PUBLIC_ACLS:
                yield (f"{label} grants the ACL {acl!r}, opening the bucket beyond the account; use the private "
                       f"ACL and grant access by policy to named roles.")
        off = facts.access_block(resource)
        if off:
            yield (f"{label} leaves {', '.join(off)} off (unset is off), so a policy or ACL can make the data "
                   f"public; turn every setting on.")
        if resource.type in facts.buckets and not any(
                facts.access_block(block) is not None and facts.block_covers(block, resource, ctx)
                for block in ctx.resources):
            yield (f"{label} has no public access block (absent counts as open): any policy or ACL may make it "
                   f"public; add one for this bucket with every setting on.")
    yield from _public_data_by_provider(resource, ctx)


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


# ---------------------------------------------------------------- rules: data-store-not-retained, -retention-unverified

def _is_data_store(resource: PlannedResource, ctx: Context) -> bool:
    return any(resource.type in facts.data_stores and not facts.holds_no_data(resource, ctx)
               for facts in ctx.providers)


def _final_backup_gap(resource: PlannedResource, ctx: Context) -> str | None:
    """What to do about a file system deleted without a final backup (from its provider's facts), or None."""
    return next((gap for facts in ctx.providers if (gap := facts.final_backup_gap(resource, ctx))), None)


def _unknown_holds(resource: PlannedResource) -> str:
    """For a store whose HOLDS_TAG names no known kind of content, why that flag exempts nothing ("" otherwise)."""
    for key in ("labels", "tags"):
        value = _mapping(resource.props.get(key)).get(HOLDS_TAG)
        if value is not None and holds_flag(resource.props.get(key)) is None:
            return (f" (its {HOLDS_TAG} {value!r} exempts nothing: only {', '.join(HOLDS_NO_DATA)} say what a store "
                    f"holds instead of data)")
    return ""


def _check_data_retained(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges only what is known: an unknown retainOnDelete (a policy pack) is data-store-retention-unverified's."""
    props, label = resource.props, _label(resource)
    if _is_data_store(resource, ctx):
        flag = _unknown_holds(resource)
        if resource.retain_on_delete is False and resource.protect is not True:
            yield (f"{label} would be deleted, with its data, on `pulumi destroy`{flag}; "
                   f"create it with ResourceOptions(retain_on_delete=True).")
        if _is_true(props.get("forceDestroy")):
            yield (f"{label} sets forceDestroy, so `pulumi destroy` empties it and its data is lost{flag}; "
                   f"remove forceDestroy (and keep retainOnDelete).")
    elif resource.retain_on_delete is False and resource.protect is not True:
        remedy = _final_backup_gap(resource, ctx)
        if remedy:
            yield (f"{label} would be deleted without a final backup on `pulumi destroy`, and its data lost; "
                   f"{remedy}, or create it with ResourceOptions(retain_on_delete=True).")


def _check_retention_unverified(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """The Pulumi policy engine does not pass retainOnDelete to policies (its resource options carry protect, not
    retainOnDelete), so a policy pack cannot tell a retained bucket from one `pulumi destroy` deletes: say so
    instead of passing silently. `goldenenv plan` always knows the option and never reaches this."""
    if resource.retain_on_delete is not None or resource.protect is True:
        return
    if _is_data_store(resource, ctx):
        why = "its data would be deleted with it"
    elif _final_backup_gap(resource, ctx):
        why = "it takes no final backup, so its data would be lost"
    else:
        return
    yield (f"cannot verify that {_label(resource)} survives `pulumi destroy` ({why} unless retainOnDelete is "
           f"set): the policy engine does not report retainOnDelete. Check it with `goldenenv plan`, or also set "
           f"ResourceOptions(protect=True), which policies can see.")


# ---------------------------------------------------------------- rules: pull, bucket services, teardown

def _check_pull_granted(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A host whose boot pulls from a planned repository (its user data names the repository's address) holds a
    pull grant on it, as its provider reads grants: otherwise its golden container never starts."""
    for facts in ctx.providers:
        text = facts.boot_script(resource)
        if not text:
            continue
        for owner in ctx.providers:
            for repository in ctx.of_type(*owner.repositories):
                if not any(a and a in text for a in owner.repository_addresses(repository)):
                    continue
                gap = facts.pull_gap(resource, repository, ctx)
                if gap:
                    yield (f"{_label(resource)} {gap}, so its boot cannot pull the golden image from "
                           f"{_label(repository)}; grant its identity pull on that repository.")


def _check_bucket_services(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Every managed service that reads or writes the stack's bucket has its service identity granted there:
    otherwise imports fail and destroy's export, which saves the file system to the bucket, stops the destroy."""
    for facts in ctx.providers:
        if resource.type in facts.bucket_services:
            gap = facts.bucket_service_gap(resource, ctx)
            if gap:
                yield f"{_label(resource)} {gap}."


def _check_teardown(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for facts in ctx.providers:
        blocker = facts.teardown_blocker(resource)
        if blocker:
            yield f"{_label(resource)} {blocker}."


# ---------------------------------------------------------------- the rule set

UNTAGGED_RESOURCE = "untagged-resource"
BUDGET_NOT_PLANNED = "budget-not-planned"
BUDGET_STOP_CHAIN = "budget-stop-chain"
BUDGET_CHAIN_UNVERIFIED = "budget-stop-chain-unverified"

RULES: tuple[Rule, ...] = (
    Rule(UNTAGGED_RESOURCE, "Taggable resources carry the required tags, and launch templates tag what they "
         "launch, so every dollar is attributed and no forgotten cluster hides on the bill.",
         Severity.ERROR, _check_untagged),
    Rule("ssh-open-to-world", "SSH (tcp/22, or all ports) is reachable from no more than a private range and a "
         "small admin allowance: the public addresses the sources admit, in any form (short forms, any prefix, "
         "IPv4 and IPv6) and summed over the union of every rule of a group and of every group of the plan, are at "
         "most one /8 (IPv4) and one /32 (IPv6), as network.adminCidrs allows; a source that is no network counts "
         "as the whole internet.",
         Severity.ERROR, _check_ssh_open),
    Rule("ingress-open-to-world", "No security group rule allows inbound traffic from 0.0.0.0/0 or ::/0.",
         Severity.WARNING, _check_ingress_open),
    Rule("unencrypted-storage", "Disks, file systems and buckets are encrypted at rest, judged as they will be: "
         "a node's root disk from an image counts as unencrypted unless a block device mapping (AWS) or "
         "systemDiskEncrypted (Alibaba) says otherwise or the account default is planned, and a bucket needs its "
         "server-side encryption (S3, OSS).", Severity.ERROR, _check_unencrypted_storage),
    Rule("unencrypted-topic", "SNS topics (budget and interruption alerts) are encrypted with KMS.",
         Severity.WARNING, _check_unencrypted_topic),
    Rule("imdsv1-allowed", "Instances and launch templates require IMDSv2 (httpTokens \"required\"), judged on "
         "the effective options: an instance's own metadata options over its launch template's.", Severity.ERROR,
         _check_imdsv1),
    Rule("public-ip-on-gpu-node", "Nodes are not reachable from the internet by any path: no public IP on the node "
         "or its subnet (associatePublicIpAddress, mapPublicIpOnLaunch, internetMaxBandwidthOut, accessConfigs), no "
         "elastic IP or EIP association on it, no global IPv6 address (ipv6AddressCount, "
         "assignIpv6AddressOnCreation, ipv6AccessConfigs), and no serial console open to SSH (serial-port-enable).",
         Severity.ERROR, _check_public_ip),
    Rule("data-store-not-retained", "Buckets and file systems holding datasets and checkpoints survive "
         "`pulumi destroy` (retainOnDelete, no forceDestroy; a file system is linked to a retained bucket or "
         f"takes a final backup). A store is exempt only by saying what it holds instead ({HOLDS_TAG}: "
         f"{' or '.join(HOLDS_NO_DATA)}, written by the program on a function's own bucket or account, and named "
         "by `goldenenv plan`), never by being named by a function.", Severity.ERROR,
         _check_data_retained),
    Rule("data-store-retention-unverified", "Where retainOnDelete cannot be read (a policy pack: the engine does "
         "not report it), say that a data store's survival of `pulumi destroy` is unverified.", Severity.WARNING,
         _check_retention_unverified),
    Rule("s3-public-access", "No bucket (S3, OSS, Cloud Storage) is public: no policy Allow to Principal \"*\" "
         "(any form) or with NotPrincipal unless a condition keeps it in the account, no public-read, "
         "public-read-write or authenticated-read ACL (inline or separate), and a public access block with every "
         "setting on (absent counts as open); on Cloud Storage, public access prevention enforced and no IAM or "
         "ACL grant to allUsers or allAuthenticatedUsers.", Severity.ERROR, _check_s3_public),
    Rule("slurmctld-beyond-cluster", f"No security group rule opens slurmctld's port (tcp/{SLURMCTLD_PORT}) to an "
         "address range: only the cluster's own security groups reach the Slurm head.", Severity.ERROR,
         _check_slurmctld_open),
    Rule("public-ip-on-head", "The Slurm head says outright that it takes no public IP.", Severity.ERROR,
         _check_head_public_ip),
    Rule(BUDGET_NOT_PLANNED, "A stack that rents machines plans its budget, and the budget's stop (a hard stop's "
         "function and what runs it), unless the stack says `budget: none`.", Severity.ERROR,
         _check_budget_planned),
    Rule(BUDGET_STOP_CHAIN, "The stack's budget reaches its nodes: it watches this stack (its filter names the "
         "stack's tag, its amount and currency are the stack's, it alerts at 100 % of actual spend and its stop at no "
         "more), its notification reaches the stop function (an enabled topic, action group or timer, a "
         "subscription, a trigger), the function is switched on (hard stop on, not a dry run), its identity may "
         "stop this stack's nodes, and a time to live or idle stop has its schedule planned.", Severity.ERROR,
         _check_stop_chain),
    Rule(BUDGET_CHAIN_UNVERIFIED, "Where the stack's budget values cannot be read (a policy pack given no "
         "monthlyLimit or currency), say that the budget's amount and currency are unverified.", Severity.WARNING,
         _check_chain_unverified),
    Rule("pull-not-granted", "Every host whose boot pulls from a planned image repository (head and nodes) holds a "
         "pull grant for that repository on its identity.", Severity.ERROR, _check_pull_granted),
    Rule("bucket-service-not-granted", "Every managed service that reads or writes the stack's bucket (a parallel "
         "file system's import and export, a data flow) has its service identity granted on the bucket.",
         Severity.ERROR, _check_bucket_services),
    Rule("teardown-blocked", "Nothing planned stops `destroy`, or a pool's resize or roll, from completing: no "
         "private-services peering deleted without removing it from the network, no placement fixed to a number "
         "of instances that are created one at a time.", Severity.ERROR, _check_teardown),
    Rule("grant-broader-than-needed", "Every identity a component creates holds what its cloud's least-privilege "
         "table (clouds/<cloud>/privilege.py) says it needs and no more: no wildcard, no action or role the table "
         "does not list (Owner, Contributor, roles/editor, AdministratorAccess...), no wider scope, no grant to a "
         "principal the stack does not create or to everyone, no host on the default compute service account.",
         Severity.ERROR, _each_provider("privilege")),
    Rule("host-not-hardened", "Hosts boot with the integrity their type supports (Secure Boot, vTPM, integrity "
         "monitoring, Trusted Launch) and take no password login, unless a named reason says why.",
         Severity.ERROR, _each_provider("host_hardening")),
    Rule("storage-not-hardened", "Storage accepts HTTPS only with TLS 1.2 or later, and no shared key unless a named "
         "reason says why.", Severity.ERROR, _each_provider("storage_hardening")),
    Rule("lifecycle-deletes-data", "No lifecycle rule deletes every object of a data store within a day (one "
         "without a prefix or tag filter): it would empty the datasets and checkpoints the stack keeps.",
         Severity.ERROR, _each_provider("data_lifecycle")),
)


def check_rule(rule: Rule, ctx: Context) -> Iterator[Finding]:
    for resource in ctx.resources:
        for message in rule.check(resource, ctx):
            yield Finding(rule.id, rule.severity, resource.urn, message)


def evaluate(resources: Sequence[PlannedResource], required_tags: Mapping[str, str], *,
             budget_opt_out: bool = False, hard_stop: bool | None = None, monthly_limit: float | None = None,
             currency: str | None = None, ttl_hours: float | None = None,
             idle_minutes: int | None = None) -> list[Finding]:
    """Every finding of every rule, in rule order then resource order.

    With no required tags, the tagging rule asks only that taggable resources carry some tags. budget_opt_out: the
    stack says `budget: none` (no budget expected); hard_stop: the stack's budget.hardStop (None: as the planned
    budget says); monthly_limit, currency, ttl_hours, idle_minutes: what the stack asks of its budget and lifecycle,
    which budget-stop-chain holds the plan to (None: not judged). A caller that knows the stack file passes them
    all (see Context).
    """
    ctx = Context(tuple(resources), dict(required_tags), budget_opt_out=budget_opt_out, hard_stop=hard_stop,
                  monthly_limit=monthly_limit, currency=currency, ttl_hours=ttl_hours, idle_minutes=idle_minutes)
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]


# ---------------------------------------------------------------- policy pack adapter (duck-typed, no engine)

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
