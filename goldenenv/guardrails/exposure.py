"""The rules on who can reach what: SSH, any ingress and slurmctld from address ranges, public IPs on the head
and the nodes, public buckets; and the rules each provider judges alone (encryption, instance metadata).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from goldenenv.guardrails.context import Context, _each_provider
from goldenenv.guardrails.facts import Ingress, ProviderFacts
from goldenenv.guardrails.model import HEAD_COMPONENT_KIND, SLURMCTLD_PORT, SSH_PORT, PlannedResource
from goldenenv.guardrails.plain import _items, _label, _mapping, _refers_to
from goldenenv.netmath import Network, describe_wide, parse_network, wide_public_blocks


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
