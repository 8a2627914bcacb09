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

    def of_type(self, *types: str) -> Iterator[PlannedResource]:
        return (r for r in self.resources if r.type in types)


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    severity: Severity
    check: Callable[[PlannedResource, Context], Iterable[str]]


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
"""The widest public block an admin (SSH) source may cover. IPv4: a /8, the largest block ever allocated to one
organisation; anything wider is a sizeable fraction of the internet. IPv6: a /32, the usual allocation to a whole
ISP or RIR member; a site gets a /48 and an office a /56 or /64, so a /32 already reaches far past one admin."""

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


def cidr_union(cidrs: Iterable[Any]) -> list[Network]:
    """The networks together, collapsed per IP version (IPv4 first); values that are not CIDRs are skipped."""
    networks: dict[int, list[Network]] = {4: [], 6: []}
    for cidr in cidrs:
        if isinstance(cidr, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            networks[cidr.version].append(cidr)
            continue
        try:
            net = ipaddress.ip_network(str(cidr).strip(), strict=False) if isinstance(cidr, str) else None
        except ValueError:
            net = None
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


def wide_public_blocks(cidrs: Iterable[Any]) -> list[Network]:
    """Public blocks wider than WIDEST_PUBLIC_PREFIX inside the union of ``cidrs``: empty when the set is narrow.

    The union is what counts: 0.0.0.0/1 and 128.0.0.0/1 are each "not the world", together they are.
    """
    wide = []
    for version in (4, 6):
        public = [n for n in cidr_union(cidrs) if n.version == version]
        for excluded in NOT_PUBLIC[version]:
            public = _minus(public, excluded)
        wide += [n for n in ipaddress.collapse_addresses(public) if n.prefixlen < WIDEST_PUBLIC_PREFIX[version]]
    return wide


def describe_wide(cidrs: Iterable[Any]) -> str | None:
    """Why a set of source CIDRs is too public ("together cover 0.0.0.0/0, ..."), or None when it is not."""
    union = cidr_union(cidrs)
    wide = wide_public_blocks(union)
    if not wide:
        return None
    together = ", ".join(map(str, union))
    if any(n.prefixlen == 0 for n in union):
        return f"together cover {together}: the whole internet"
    widest = sorted(wide, key=lambda n: (n.prefixlen, n.version))
    shown = ", ".join(map(str, widest[:3])) + (f" and {len(widest) - 3} more" if len(widest) > 3 else "")
    return (f"together cover {together}, which holds public space wider than /{WIDEST_PUBLIC_PREFIX[4]} (IPv4) "
            f"or /{WIDEST_PUBLIC_PREFIX[6]} (IPv6): {shown}")


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


@functools.cache
def is_taggable(type_token: str) -> bool:
    """Whether resources of this type accept ``tags``, as the provider SDK declares it.

    Provider resources and component resources are never taggable here: their tags are not the cloud's.
    """
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
            if "tags" in inspect.signature(constructor).parameters:
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


def _tag_problem(tags: Mapping[str, Any], required: Mapping[str, str]) -> str | None:
    if not required:
        return None if tags else "has no tags"
    missing = _missing_tags(tags, required)
    return f"is missing required tags: {', '.join(missing)}" if missing else None


def _check_untagged(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if not resource.custom or not is_taggable(resource.type):
        return
    # tagsAll (engine outputs) includes the provider's defaultTags; plans see only per-resource tags.
    tags = {**_mapping(resource.props.get("tagsAll")), **_mapping(resource.props.get("tags"))}
    problem = _tag_problem(tags, ctx.required_tags)
    if problem:
        yield f"{_label(resource)} {problem}; set them in its tags."
    for facts in ctx.providers:
        yield from facts.launch_tags(resource, ctx)


# ---------------------------------------------------------------- rules: ssh-open-to-world, ingress-open-to-world

def _ingress(resource: PlannedResource, ctx: Context) -> list[Ingress]:
    """Every inbound permission a resource grants from a CIDR source (not from other groups)."""
    return [p for facts in ctx.providers for p in facts.ingress(resource)]


def _world_ingress(resource: PlannedResource, ctx: Context) -> list[Ingress]:
    return [p for p in _ingress(resource, ctx) if p.source in WORLD_CIDRS]


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


def _check_ssh_open(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges the union of every source that opens SSH on one group: rules split into halves are still the world."""
    members = _ssh_members(resource, ctx)
    if not members:
        return
    opening = [(member, p) for member in members for p in _ingress(member, ctx) if p.opens(SSH_PORT)]
    why = describe_wide(p.source for _, p in opening)
    if why is None:
        return
    wide = wide_public_blocks(p.source for _, p in opening)
    culprits = [(m, p) for m, p in opening if any(_overlaps(p.source, w) for w in wide)]
    through = "; ".join(dict.fromkeys(
        p.describe() + ("" if m is resource else f" in {_label(m)}") for m, p in culprits))
    yield (f"{_label(resource)} allows SSH from sources that {why} ({through}); restrict the sources to your "
           f"admin CIDR or VPN, or reach nodes through SSM Session Manager.")


def _overlaps(cidr: str, block: Network) -> bool:
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return net.version == block.version and net.overlaps(block)


def _check_ingress_open(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for permission in _world_ingress(resource, ctx):
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
                   f"associatePublicIpAddress false (AWS) or internetMaxBandwidthOut 0 (Alibaba Cloud).")


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
_check_public_ip = _each_provider("public_ip")
_check_s3_public = _each_provider("public_data")


# ---------------------------------------------------------------- rules: data-store-not-retained, -retention-unverified

def _is_data_store(resource: PlannedResource, ctx: Context) -> bool:
    return any(resource.type in facts.data_stores for facts in ctx.providers)


def _final_backup_gap(resource: PlannedResource, ctx: Context) -> str | None:
    """What to do about a file system deleted without a final backup (from its provider's facts), or None."""
    return next((gap for facts in ctx.providers if (gap := facts.final_backup_gap(resource, ctx))), None)


def _check_data_retained(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges only what is known: an unknown retainOnDelete (a policy pack) is data-store-retention-unverified's."""
    props, label = resource.props, _label(resource)
    if _is_data_store(resource, ctx):
        if resource.retain_on_delete is False and resource.protect is not True:
            yield (f"{label} would be deleted, with its data, on `pulumi destroy`; "
                   f"create it with ResourceOptions(retain_on_delete=True).")
        if _is_true(props.get("forceDestroy")):
            yield (f"{label} sets forceDestroy, so `pulumi destroy` empties it and its data is lost; "
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


# ---------------------------------------------------------------- the rule set

UNTAGGED_RESOURCE = "untagged-resource"

RULES: tuple[Rule, ...] = (
    Rule(UNTAGGED_RESOURCE, "Taggable resources carry the required tags, and launch templates tag what they "
         "launch, so every dollar is attributed and no forgotten cluster hides on the bill.",
         Severity.ERROR, _check_untagged),
    Rule("ssh-open-to-world", "No security group opens SSH (tcp/22) to the internet: the union of the CIDRs its "
         "rules open port 22 to (or all ports) covers no public block wider than /8 (IPv4) or /32 (IPv6).",
         Severity.ERROR, _check_ssh_open),
    Rule("ingress-open-to-world", "No security group rule allows inbound traffic from 0.0.0.0/0 or ::/0.",
         Severity.WARNING, _check_ingress_open),
    Rule("unencrypted-storage", "EBS volumes, launch template disks, EFS file systems and S3 buckets are "
         "encrypted at rest.", Severity.ERROR, _check_unencrypted_storage),
    Rule("unencrypted-topic", "SNS topics (budget and interruption alerts) are encrypted with KMS.",
         Severity.WARNING, _check_unencrypted_topic),
    Rule("imdsv1-allowed", "Instances and launch templates require IMDSv2 (metadataOptions.httpTokens "
         "\"required\").", Severity.ERROR, _check_imdsv1),
    Rule("public-ip-on-gpu-node", "Nodes get no public IP: no associatePublicIpAddress, and no "
         "mapPublicIpOnLaunch on the subnets they launch in.", Severity.ERROR, _check_public_ip),
    Rule("data-store-not-retained", "Buckets and file systems holding datasets and checkpoints survive "
         "`pulumi destroy` (retainOnDelete, no forceDestroy; a file system is linked to a retained bucket or "
         "takes a final backup).", Severity.ERROR,
         _check_data_retained),
    Rule("data-store-retention-unverified", "Where retainOnDelete cannot be read (a policy pack: the engine does "
         "not report it), say that a data store's survival of `pulumi destroy` is unverified.", Severity.WARNING,
         _check_retention_unverified),
    Rule("s3-public-access", "No bucket policy allows Principal \"*\", and public access blocks keep all four "
         "settings on.", Severity.ERROR, _check_s3_public),
    Rule("slurmctld-beyond-cluster", f"No security group rule opens slurmctld's port (tcp/{SLURMCTLD_PORT}) to an "
         "address range: only the cluster's own security groups reach the Slurm head.", Severity.ERROR,
         _check_slurmctld_open),
    Rule("public-ip-on-head", "The Slurm head says outright that it takes no public IP.", Severity.ERROR,
         _check_head_public_ip),
)


def check_rule(rule: Rule, ctx: Context) -> Iterator[Finding]:
    for resource in ctx.resources:
        for message in rule.check(resource, ctx):
            yield Finding(rule.id, rule.severity, resource.urn, message)


def evaluate(resources: Sequence[PlannedResource], required_tags: Mapping[str, str]) -> list[Finding]:
    """Every finding of every rule, in rule order then resource order.

    With no required tags, the tagging rule asks only that taggable resources carry some tags.
    """
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]


# ---------------------------------------------------------------- policy pack adapter (duck-typed, no engine)

# pulumi_policy's placeholders for values unknown during preview (the engine's wire protocol).
_UNKNOWN_SENTINELS = frozenset({
    "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7", "3eeb2bf0-c639-47a8-9e75-3b44932eb421",
    "04da6b54-80e4-46f7-96ec-b56ff0331ba9", "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",
    "030794c1-ac77-496b-92df-f27374a8bd58", "e48ece36-62e2-4504-bad9-02848725956a",
    "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",
})

POLICY_CONFIG_SCHEMAS: Mapping[str, Mapping[str, Any]] = {
    UNTAGGED_RESOURCE: {
        "requiredTags": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Tag key -> value every taggable resource must carry. Empty: any non-empty tags.",
        },
    },
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


def stack_validation(rule: Rule) -> Callable[[Any, Callable[..., None]], None]:
    """A pulumi_policy stack validation running ``rule``: reports each message against its resource's URN."""

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        get_config = getattr(args, "get_config", None)
        config = (get_config() if get_config else None) or {}
        required_tags = {str(k): str(v) for k, v in _mapping(config.get("requiredTags")).items()}
        ctx = Context(tuple(from_policy_resource(r) for r in args.resources), required_tags)
        for finding in check_rule(rule, ctx):
            report_violation(finding.message, finding.urn)

    return validate
