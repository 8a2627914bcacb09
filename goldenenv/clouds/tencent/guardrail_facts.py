"""Tencent Cloud's guardrail facts: the type tokens the generic rules of goldenenv.guardrails read, and how to read
them - security groups and their rule sets, public reachability of CVM instances, disk and bucket encryption, COS
buckets as data stores, the budget and its stop function, the registry pull. Resources are in engine form (camelCase
inputs).

Not judged here: imdsv1-allowed (CVM's metadata service answers plain GETs, with no session-token mode on any page
read, so there is no setting to judge), and the system disk's encryption (tencentcloud-iac-pulumi 0.2.3's Instance
takes `encrypt` on data disks only)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.tencent import hardening, privilege, stop, stop_chain
from goldenenv.clouds.tencent.limits import INSTANCE
from goldenenv.guardrails import (
    BudgetWatch, Context, Ingress, PlannedResource, ProviderFacts, _is_true, _items, _label, _mapping, _port,
    _protocol, _sources, boot_text,
)

SECURITY_GROUP = "tencentcloud:Security/group:Group"
RULE_SET = "tencentcloud:Security/groupRuleSet:GroupRuleSet"
EIP_ASSOCIATION = "tencentcloud:Eip/association:Association"
COS_BUCKET = "tencentcloud:Cos/bucket:Bucket"
SCF_FUNCTION = "tencentcloud:Scf/function:Function"
TCR_REPOSITORY = "tencentcloud:Tcr/repository:Repository"
TCR_LOGIN = "CreateInstanceToken"
"""What a host's boot calls to log in to TCR with its CAM role (templates/node/registry-login-tcr.sh.j2)."""


def ingress(resource: PlannedResource) -> list[Ingress]:
    """A rule set's ACCEPT ingresses from a CIDR (a rule naming a security group is not a CIDR source)."""
    if resource.type != RULE_SET:
        return []
    found = []
    for rule in _items(resource.props.get("ingresses")):
        rule = _mapping(rule)
        if str(rule.get("action") or "").upper() != "ACCEPT":
            continue
        port = str(rule.get("port") or "ALL")
        if port.upper() == "ALL":
            low = high = None
        else:
            first, _, last = port.partition("-")
            low, high = _port(first), _port(last or first)
        protocol = _protocol(rule.get("protocol"))
        found += [Ingress(protocol, low, high, source)
                  for source in _sources(rule.get("cidrBlock"), rule.get("ipv6CidrBlock"))]
    return found


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != INSTANCE:
        return
    props = resource.props
    if _is_true(props.get("allocatePublicIp")) or (_port(props.get("internetMaxBandwidthOut")) or 0) > 0:
        yield (f"{_label(resource)} gets a public IP (allocatePublicIp / internetMaxBandwidthOut > 0); egress "
               "through the NAT gateway instead.")
    if (_port(props.get("ipv6AddressCount")) or 0) > 0:
        yield f"{_label(resource)} takes IPv6 addresses (ipv6AddressCount), reachable from the internet; drop them."


def says_private(resource: PlannedResource) -> bool:
    return resource.props.get("allocatePublicIp") is False


def address_targets(resource: PlannedResource) -> list[tuple[str, Any]]:
    return [("instanceId", resource.props.get("instanceId"))] if resource.type == EIP_ASSOCIATION else []


def storage_encryption(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type == COS_BUCKET and not resource.props.get("encryptionAlgorithm"):
        yield f"{_label(resource)} has no server-side encryption; set encryption_algorithm AES256 (or KMS)."
    if resource.type == INSTANCE:
        for index, disk in enumerate(_mapping(d) for d in _items(resource.props.get("dataDisks"))):
            if not _is_true(disk.get("encrypt")):
                yield f"{_label(resource)} data disk {index} is not encrypted; set encrypt=True on it."


EVERYONE = "qcs::cam::anyone:anyone"
"""COS's principal for anyone (a bucket policy's Principal {"qcs": [...]})."""


def public_data(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A COS bucket policy granting Tencent's `anyone` principal, which the generic reader does not know."""
    if resource.type != "tencentcloud:Cos/bucketPolicy:BucketPolicy":
        return
    if EVERYONE in str(resource.props.get("policy") or ""):
        yield (f"{_label(resource)} grants {EVERYONE} (anyone on the internet); name the CAM roles that need the "
               "data instead.")


def bucket_acl(resource: PlannedResource) -> list[str]:
    acl = resource.props.get("acl") if resource.type == COS_BUCKET else None
    return [acl] if isinstance(acl, str) else []


BUDGET = "tencentcloud:Billing/budget:Budget"


COS_BUCKET_POLICY = "tencentcloud:Cos/bucketPolicy:BucketPolicy"


def bucket_policy(resource: PlannedResource) -> Any:
    return resource.props.get("policy") if resource.type == COS_BUCKET_POLICY else None


def access_block(resource: PlannedResource) -> list[str] | None:
    """COS has no public access block (no such resource in tencentcloud-iac-pulumi 0.2.3): a bucket whose own ACL is
    private is its own block, judged with the bucket policies the plan holds; any other ACL leaves it open."""
    if resource.type != COS_BUCKET:
        return None
    return [] if resource.props.get("acl") == "private" else ["acl"]


def block_covers(block: PlannedResource, bucket: PlannedResource, ctx: Context) -> bool:
    return block.urn == bucket.urn


def budgets(ctx: Context) -> list[BudgetWatch]:
    """Each billing budget (alerts only: it stops nothing) and each stop function, an SCF function told the limit
    (stop.LIMIT_ENV) with a timer trigger."""
    watches = [BudgetWatch(budget, stops=False) for budget in ctx.of_type(BUDGET)]
    for function in ctx.of_type(SCF_FUNCTION):
        env = _mapping(function.props.get("environment"))
        if stop.LIMIT_ENV not in env:
            continue
        timers = [t for t in _items(function.props.get("triggers")) if _mapping(t).get("type") == "timer"]
        gap = None
        if not timers:
            gap = "is never run: no timer trigger runs it, so it stops nothing; give it its timer trigger"
        elif _is_true(env.get(stop.DRY_RUN_ENV)):
            gap = f"runs dry ({stop.DRY_RUN_ENV} true): it would stop nothing; set it to false"
        watches.append(BudgetWatch(function, stops=_is_true(env.get(stop.HARD_STOP_ENV)), gap=gap))
    return watches


def boot_script(resource: PlannedResource) -> str | None:
    return boot_text(resource.props.get("userData")) if resource.type == INSTANCE else None


def repository_addresses(repo: PlannedResource) -> list[str]:
    namespace, name = repo.props.get("namespaceName"), repo.props.get("name")
    return [f".tencentcloudcr.com/{namespace}/{name}"] if namespace and name else []


def pull_gap(host: PlannedResource, repo: PlannedResource, ctx: Context) -> str | None:
    """A host logs in to TCR with a token its CAM role asks for: its boot must make the call, and the role's policy
    (the stack names a role's policy as the role) must allow name/tcr:CreateInstanceToken, and pulling from the
    repository (privilege.PULL_ACTIONS: the token's pulls are checked against the role's CAM policy)."""
    if TCR_LOGIN not in (boot_script(host) or ""):
        return "pulls from the stack's TCR registry without logging in (no CreateInstanceToken step in its boot)"
    role = host.props.get("camRoleName")
    if not role:
        return "has no CAM role to ask TCR for a login token with (cam_role_name)"
    granted = [p for p in ctx.of_type(privilege.POLICY) if p.props.get("name") == role
               and "name/tcr:" + TCR_LOGIN in str(p.props.get("document") or "")]
    if not granted:
        return f"its CAM role {role} holds no policy allowing name/tcr:{TCR_LOGIN}, so its boot cannot log in to TCR"
    if not any(privilege.grants_pull(p.props.get("document"), repo) for p in granted):
        return (f"its CAM role {role} holds no policy allowing {privilege.PULL_ACTION} on the stack's repository, so "
                "TCR refuses its pull")
    return None


DATA_FLOW = "pulumi-python:dynamic:Resource"
"""The CFS Turbo <-> COS data flow (dataflow.DataFlow), the one dynamic resource a Tencent stack plans."""


def bucket_service_gap(flow: PlannedResource, ctx: Context) -> str | None:
    """A data flow reaches the bucket with the key pair it was created with (CreateDataFlow SecretId/SecretKey: the
    caller's, never in the plan), so what the plan can hold is that it links the stack's planned bucket."""
    if "fileSystemId" not in flow.props:
        return None
    address = str(flow.props.get("bucketAddress") or "")
    buckets = [b for b in ctx.of_type(COS_BUCKET)
               if any(name and f"//{name}." in address for name in (b.id, b.props.get("bucket")))]
    if not buckets:
        return f"links {address or 'no bucket'}, which is not the stack's planned bucket"
    return None


FACTS = ProviderFacts(
    privilege=privilege.judge, host_hardening=hardening.host, data_lifecycle=hardening.lifecycle,
    not_judged=hardening.NOT_JUDGED,
    name="tencentcloud",
    security_groups=(SECURITY_GROUP,),
    standalone_ingress_rules=(RULE_SET,),
    ingress=ingress,
    storage_encryption=storage_encryption,
    public_data=public_data,
    public_ip=public_ip,
    data_stores=(COS_BUCKET,),
    instances=(INSTANCE,),
    says_private=says_private,
    address_targets=address_targets,
    buckets=(COS_BUCKET,),
    bucket_acl=bucket_acl,
    bucket_policy=bucket_policy,
    access_block=access_block,
    block_covers=block_covers,
    budgets=budgets,
    stop_chain=stop_chain.stop_chain,
    budget_hint="set goldenenv:budget so the stack plans its budget and stop function",
    boot_script=boot_script,
    repositories=(TCR_REPOSITORY,),
    repository_addresses=repository_addresses,
    pull_gap=pull_gap,
    bucket_services=(DATA_FLOW,),
    bucket_service_gap=bucket_service_gap,
)
