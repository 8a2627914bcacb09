"""Huawei Cloud's guardrail facts: the type tokens the generic rules of goldenenv.guardrails read, and how to read
them - security groups and their rules, public reachability of ECS instances, disk and bucket encryption, OBS
buckets as data stores, the stop function, the registry pull, the SFS Turbo backend target. Resources are in engine
form (camelCase inputs).

Not judged here: imdsv1-allowed (pulumi-huaweicloud 0.0.12 has no metadata option on ecs.Instance, and none is in
terraform-provider-huaweicloud's compute_instance either: the switch is the ECS API's UpdateMetadataOptions, whose
accepted values are unverified: docs/research/huawei.md §2.4), and a system disk's encryption (it needs a DEW key,
system_disk_kms_key_id, which the stack does not make yet); data disks are judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.huawei import hardening, privilege, stop, stop_chain, tags
from goldenenv.clouds.huawei.limits import DEVSERVER, INSTANCE
from goldenenv.guardrails import (
    BudgetWatch, Context, Ingress, PlannedResource, ProviderFacts, _is_true, _items, _label, _mapping, _port,
    _protocol, boot_text,
)

SECURITY_GROUP = "huaweicloud:Vpc/secgroup:Secgroup"
RULE = "huaweicloud:Vpc/secgroupRule:SecgroupRule"
EIP_ASSOCIATE = "huaweicloud:Vpc/eipAssociate:EipAssociate"
BUCKET = "huaweicloud:Obs/bucket:Bucket"
BUCKET_POLICY = "huaweicloud:Obs/bucketPolicy:BucketPolicy"
TURBO = "huaweicloud:Sfs/turbo:Turbo"
SWR_REPOSITORY = "huaweicloud:Swr/repository:Repository"
SWR_LOGIN = "/v2/manage/utils/secret"
"""What a host's boot calls to log in to SWR with its agency (templates/node/registry-login-swr.sh.j2)."""
BACKEND_TARGET = "pulumi-python:dynamic:Resource"
"""The SFS Turbo <-> OBS backend target (obslink.BackendTarget), the one dynamic resource a Huawei stack plans."""


def _ports(rule: dict) -> tuple[int | None, int | None]:
    ports = str(rule.get("ports") or "")
    if ports and "," not in ports:
        first, _, last = ports.partition("-")
        return _port(first), _port(last or first)
    low, high = _port(rule.get("portRangeMin")), _port(rule.get("portRangeMax"))
    return (low, high or low) if low else (None, None)


def ingress(resource: PlannedResource) -> list[Ingress]:
    """An allowing ingress rule from a CIDR: remote_ip_prefix, or none at all and no remote group (Huawei reads an
    empty remote as 0.0.0.0/0: pulumi-huaweicloud 0.0.12 SecgroupRuleInitArgs)."""
    props = resource.props
    if resource.type != RULE or props.get("direction") != "ingress" or str(props.get("action") or "allow") != "allow":
        return []
    source = props.get("remoteIpPrefix")
    if not source:
        if props.get("remoteGroupId") or props.get("remoteAddressGroupId"):
            return []
        source = "::/0" if props.get("ethertype") == "IPv6" else "0.0.0.0/0"
    low, high = _ports(props)
    return [Ingress(_protocol(props.get("protocol") or "all"), low, high, str(source))]


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type == DEVSERVER:
        props = resource.props
        if props.get("eipId") or props.get("eipType") or props.get("bandwidth"):
            yield (f"{_label(resource)} asks for a public IP, which a Lite Server has no input for; egress through the "
                   "NAT gateway instead.")
        if _is_true(props.get("ipv6Enable")):
            yield (f"{_label(resource)} takes an IPv6 address (ServerNetwork ipv6_enable), reachable from the "
                   "internet; drop it.")
    if resource.type != INSTANCE:
        return
    props = resource.props
    if props.get("eipId") or props.get("eipType") or props.get("bandwidth"):
        yield (f"{_label(resource)} gets a public IP (eip_id / eip_type / bandwidth); egress through the NAT "
               "gateway instead.")
    if any(_is_true(_mapping(n).get("ipv6Enable")) for n in _items(props.get("networks"))):
        yield f"{_label(resource)} takes an IPv6 address (networks.ipv6_enable), reachable from the internet; drop it."


def says_private(resource: PlannedResource) -> bool:
    """An ECS instance with no EIP argument gets no public address (there is no other way to give it one); a Lite
    Server has no address argument at all (CreateDevServer's ServerNetwork: vpc, subnet, security group, RoCE)."""
    props = resource.props
    if resource.type == DEVSERVER:
        return not (_is_true(props.get("ipv6Enable")) or props.get("eipId") or props.get("eipType")
                    or props.get("bandwidth"))
    return resource.type == INSTANCE and not (props.get("eipId") or props.get("eipType") or props.get("bandwidth"))


def address_targets(resource: PlannedResource) -> list[tuple[str, Any]]:
    """An EIP bound to an instance's port (eipAssociate port_id, or network_id + fixed_ip)."""
    if resource.type != EIP_ASSOCIATE:
        return []
    return [("portId", resource.props.get("portId")), ("fixedIp", resource.props.get("fixedIp"))]


def storage_encryption(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type == BUCKET and not (_is_true(resource.props.get("encryption"))
                                        and resource.props.get("sseAlgorithm")):
        yield f"{_label(resource)} has no server-side encryption; set encryption=True and sse_algorithm (AES256 or kms)."
    if resource.type in (INSTANCE, DEVSERVER):
        for index, disk in enumerate(_mapping(d) for d in _items(resource.props.get("dataDisks"))):
            if not disk.get("kmsKeyId"):
                yield f"{_label(resource)} data disk {index} is not encrypted; give it a DEW key (kms_key_id)."


def bucket_acl(resource: PlannedResource) -> list[str]:
    acl = resource.props.get("acl") if resource.type == BUCKET else None
    return [acl] if isinstance(acl, str) else []


def bucket_policy(resource: PlannedResource) -> Any:
    return resource.props.get("policy") if resource.type == BUCKET_POLICY else None


def access_block(resource: PlannedResource) -> list[str] | None:
    """OBS has no public access block resource in 0.0.12: a bucket whose own ACL is private is its own block, judged
    with the bucket policies the plan holds; any other ACL, or none, leaves it open."""
    if resource.type != BUCKET:
        return None
    return [] if resource.props.get("acl") == "private" else ["acl"]


def block_covers(block: PlannedResource, bucket: PlannedResource, ctx: Context) -> bool:
    return block.urn == bucket.urn


def budgets(ctx: Context) -> list[BudgetWatch]:
    """Each stop function (the budget on Huawei: budget.py), told the limit, with its timer."""
    watches = []
    for function in stop_chain.stop_functions(ctx):
        env = stop_chain.environment(function)
        gap = None
        if not stop_chain.timers(function, ctx):
            gap = "is never run: no active timer trigger runs it, so it stops nothing; give it its timer trigger"
        elif _is_true(env.get(stop.DRY_RUN_ENV)):
            gap = f"runs dry ({stop.DRY_RUN_ENV} true): it would stop nothing; set it to false"
        watches.append(BudgetWatch(function, stops=_is_true(env.get(stop.HARD_STOP_ENV)), gap=gap))
    return watches


def boot_script(resource: PlannedResource) -> str | None:
    return boot_text(resource.props.get("userData")) if resource.type in (INSTANCE, DEVSERVER) else None


def repository_addresses(repo: PlannedResource) -> list[str]:
    organization, name = repo.props.get("organization"), repo.props.get("name")
    return [f".myhuaweicloud.com/{organization}/{name}"] if organization and name else []


def pull_gap(host: PlannedResource, repo: PlannedResource, ctx: Context) -> str | None:
    """A host logs in to SWR with a temporary login its agency asks for: its boot must make the call, and its
    agency must hold the stack's policy allowing swr::createLoginSecret."""
    if SWR_LOGIN not in (boot_script(host) or ""):
        return "pulls from the stack's SWR organization without logging in (no CreateSecret step in its boot)"
    name = host.props.get("agencyName")
    if not name:
        return "has no agency to ask SWR for a temporary login with (agency_name)"
    held = {r for a in ctx.of_type(privilege.AGENCY) if a.props.get("name") == name
            for p in _items(a.props.get("projectRoles")) for r in _items(_mapping(p).get("roles"))}
    if not any(r.props.get("name") in held and privilege.PULL_ACTIONS[0] in str(r.props.get("policy") or "")
               for r in ctx.of_type(privilege.ROLE)):
        return (f"its agency {name} holds no policy allowing {privilege.PULL_ACTIONS[0]}, so its boot cannot log in "
                "to SWR")
    return None


def bucket_service_gap(link: PlannedResource, ctx: Context) -> str | None:
    """SFS Turbo reaches the bucket in its own name once linked (the link needs OBS Administrator of the caller:
    docs/research/huawei.md §2.2), so what the plan can hold is that it links the stack's planned bucket."""
    if "shareId" not in link.props:
        return None
    name = link.props.get("bucket")
    if not any(name and name in (b.id, b.props.get("bucket")) for b in ctx.of_type(BUCKET)):
        return f"links {name or 'no bucket'}, which is not the stack's planned bucket"
    return None


FACTS = ProviderFacts(
    privilege=privilege.judge, host_hardening=hardening.host, data_lifecycle=hardening.lifecycle,
    not_judged=hardening.NOT_JUDGED,
    name="huaweicloud",
    security_groups=(SECURITY_GROUP,),
    standalone_ingress_rules=(RULE,),
    ingress=ingress,
    storage_encryption=storage_encryption,
    public_ip=public_ip,
    data_stores=(BUCKET,),
    instances=(INSTANCE, DEVSERVER),
    says_private=says_private,
    address_targets=address_targets,
    buckets=(BUCKET,),
    bucket_acl=bucket_acl,
    bucket_policy=bucket_policy,
    access_block=access_block,
    block_covers=block_covers,
    budgets=budgets,
    stop_chain=stop_chain.stop_chain,
    budget_hint="set goldenenv:budget so the stack plans its stop function",
    boot_script=boot_script,
    repositories=(SWR_REPOSITORY,),
    repository_addresses=repository_addresses,
    pull_gap=pull_gap,
    bucket_services=(BACKEND_TARGET,),
    bucket_service_gap=bucket_service_gap,
    tag_form=tags.written,
)
