"""Alibaba Cloud's guardrail facts: the type tokens the generic rules of goldenenv.guardrails read, and how to
read them - ECS security groups and their rules, public reachability of ECS instances (internet bandwidth, EIP
associations, IPv6 addresses), IMDSv2 (httpTokens), disk, NAS and OSS encryption, OSS buckets as data stores and
their exposure (bucket policy, ACL, public access block), and the budget guard (a Function Compute timer function,
Alibaba having no budget resource). Resources are in engine form (camelCase inputs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.clouds.alicloud import guard, stop_chain
from goldenenv.clouds.alicloud import hardening, privilege
from goldenenv.guardrails import (
    BudgetWatch,
    Context,
    boot_text,
    Ingress,
    PlannedResource,
    ProviderFacts,
    _is_true,
    _items,
    _label,
    _mapping,
    _port,
    _protocol,
    _refers_to,
    _sources,
)

SECURITY_GROUP = "alicloud:ecs/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "alicloud:ecs/securityGroupRule:SecurityGroupRule"
INSTANCE = "alicloud:ecs/instance:Instance"
EIP_ASSOCIATION = "alicloud:ecs/eipAssociation:EipAssociation"
DISKS = ("alicloud:ecs/ecsDisk:EcsDisk", "alicloud:ecs/disk:Disk")
NAS_FILE_SYSTEM = "alicloud:nas/fileSystem:FileSystem"
OSS_BUCKET = "alicloud:oss/bucket:Bucket"
OSS_BUCKET_ACL = "alicloud:oss/bucketAcl:BucketAcl"
OSS_BUCKET_POLICY = "alicloud:oss/bucketPolicy:BucketPolicy"
OSS_BUCKET_SSE = "alicloud:oss/bucketServerSideEncryption:BucketServerSideEncryption"
OSS_BUCKET_BLOCK = "alicloud:oss/bucketPublicAccessBlock:BucketPublicAccessBlock"
OSS_ACCOUNT_BLOCK = "alicloud:oss/accountPublicAccessBlock:AccountPublicAccessBlock"
FC_FUNCTION = "alicloud:fc/v3Function:V3Function"
FC_TRIGGER = "alicloud:fc/v3Trigger:V3Trigger"
CPFS = "cpfs"
"""NAS file system type with no encryption setting (encryptType is for standard and extreme NAS)."""
ACCOUNT_CONDITION_KEYS = frozenset({"acs:sourcevpc", "acs:accessid"})
"""OSS policy condition keys that keep an Allow to everyone inside the account's VPC or access keys (lower case)."""


def ingress(resource: PlannedResource) -> list[Ingress]:
    """A rule's inbound permissions: portRange "-1/-1" is every port, policy "drop" allows nothing."""
    props = resource.props
    if resource.type != SECURITY_GROUP_RULE or props.get("type") != "ingress":
        return []
    if str(props.get("policy") or "accept").lower() == "drop":
        return []
    low, _, high = str(props.get("portRange") or "-1/-1").partition("/")
    from_port, to_port = _port(low), _port(high)
    protocol = _protocol(props.get("ipProtocol"))
    if from_port == -1:
        from_port = to_port = None
        protocol = "all" if protocol in ("all", "tcp") else protocol
    return [Ingress(protocol, from_port, to_port, source)
            for source in _sources(props.get("cidrIp"), props.get("ipv6CidrIp"))]


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != INSTANCE:
        return
    props = resource.props
    if (_port(props.get("internetMaxBandwidthOut")) or 0) > 0:
        yield (f"{_label(resource)} gets a public IP (internetMaxBandwidthOut > 0); set it to 0 and egress through "
               f"a NAT gateway.")
    if (_port(props.get("ipv6AddressCount")) or 0) > 0 or _items(props.get("ipv6Addresses")):
        yield (f"{_label(resource)} takes IPv6 addresses (ipv6AddressCount / ipv6Addresses), global and reachable "
               f"once the VPC's IPv6 gateway opens them; drop them.")


def address_targets(resource: PlannedResource) -> list[tuple[str, Any]]:
    """An EIP association names what it binds the address to (an instance, NAT gateway, ENI ...)."""
    return [("instanceId", resource.props.get("instanceId"))] if resource.type == EIP_ASSOCIATION else []


def metadata(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != INSTANCE:
        return
    props = resource.props
    tokens, endpoint = props.get("httpTokens"), props.get("httpEndpoint")
    if tokens is None and endpoint is None and props.get("launchTemplateId"):
        return  # its launch template's options apply
    if endpoint == "disabled" or tokens == "required":
        return
    yield (f"{_label(resource)} allows IMDSv1 (httpTokens is {tokens or 'unset'}); set httpTokens to \"required\".")


def _bucket_names(bucket: PlannedResource) -> tuple[Any, ...]:
    return (bucket.id, bucket.props.get("bucket"), bucket.outputs.get("bucket"))


def _bucket_is_encrypted(bucket: PlannedResource, ctx: Context) -> bool:
    if _mapping(bucket.props.get("serverSideEncryptionRule")).get("sseAlgorithm"):
        return True
    return any(config.props.get("sseAlgorithm") is not None
               and _refers_to(config, "bucket", config.props.get("bucket"), bucket, _bucket_names(bucket))
               for config in ctx.of_type(OSS_BUCKET_SSE))


def storage_encryption(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == INSTANCE:
        templated = props.get("launchTemplateId") and props.get("systemDiskEncrypted") is None
        if not templated and not _is_true(props.get("systemDiskEncrypted")):
            yield (f"{label} system disk is not encrypted (systemDiskEncrypted is "
                   f"{props.get('systemDiskEncrypted')!r}; unset is the image's, unencrypted); set "
                   f"systemDiskEncrypted=True.")
        for index, disk in enumerate(_mapping(d) for d in _items(props.get("dataDisks"))):
            if not _is_true(disk.get("encrypted")):
                yield f"{label} data disk {disk.get('name') or index} is not encrypted; set encrypted=True on it."
    elif resource.type in DISKS and not _is_true(props.get("encrypted")):
        yield f"{label} is not encrypted at rest; set encrypted=True."
    elif resource.type == NAS_FILE_SYSTEM and str(props.get("fileSystemType") or "standard").lower() != CPFS:
        if (_port(props.get("encryptType")) or 0) == 0:
            yield f"{label} is not encrypted at rest (encryptType 0 or unset); set encryptType 1 (NAS key) or 2 (KMS)."
    elif resource.type == OSS_BUCKET and not _bucket_is_encrypted(resource, ctx):
        yield (f"{label} has no server-side encryption; add a BucketServerSideEncryption whose bucket is this "
               f"bucket (AES256 or KMS).")


def bucket_policy(resource: PlannedResource) -> Any:
    if resource.type == OSS_BUCKET_POLICY or (resource.type == OSS_BUCKET and resource.props.get("policy")):
        return resource.props.get("policy")
    return None


def bucket_acl(resource: PlannedResource) -> list[str]:
    acl = resource.props.get("acl") if resource.type in (OSS_BUCKET, OSS_BUCKET_ACL) else None
    return [acl] if isinstance(acl, str) else []


def access_block(resource: PlannedResource) -> list[str] | None:
    if resource.type not in (OSS_BUCKET_BLOCK, OSS_ACCOUNT_BLOCK):
        return None
    return [] if _is_true(resource.props.get("blockPublicAccess")) else ["blockPublicAccess"]


def block_covers(block: PlannedResource, bucket: PlannedResource, ctx: Context) -> bool:
    if block.type == OSS_ACCOUNT_BLOCK:
        return True
    return _refers_to(block, "bucket", block.props.get("bucket"), bucket, _bucket_names(bucket))


def budgets(ctx: Context) -> list[BudgetWatch]:
    """Each budget guard: a function told the monthly limit (guard.LIMIT_ENV), run by a timer trigger; it stops the
    nodes when told to (guard.HARD_STOP_ENV "true")."""
    watches = []
    for function in ctx.of_type(FC_FUNCTION):
        env = _mapping(function.props.get("environmentVariables"))
        if guard.LIMIT_ENV not in env:
            continue
        name = function.props.get("functionName")
        timers = [t for t in ctx.of_type(FC_TRIGGER) if str(t.props.get("triggerType")).lower() == "timer"
                  and _refers_to(t, "functionName", t.props.get("functionName"), function, (name, function.id))]
        gap = None
        if not timers:
            gap = "is never run: no timer trigger runs it, so it neither alerts nor stops; plan its timer trigger"
        elif _is_true(env.get(guard.DRY_RUN_ENV)):
            gap = f"runs dry ({guard.DRY_RUN_ENV} true): it would stop nothing; set it to false"
        watches.append(BudgetWatch(function, stops=_is_true(env.get(guard.HARD_STOP_ENV)), gap=gap))
    return watches


def says_private(resource: PlannedResource) -> bool:
    """An instance that says it takes no public IP: internetMaxBandwidthOut 0, set on the instance."""
    value = resource.props.get("internetMaxBandwidthOut")
    return value is not None and _port(value) == 0


# ---------------------------------------------------------------- pull-not-granted, bucket-service-not-granted

ACR_REPO = "alicloud:cr/repo:Repo"
OSS_BUCKET = "alicloud:oss/bucket:Bucket"
DATA_FLOW = "alicloud:nas/dataFlow:DataFlow"
ACR_LOGIN_FILE = "/etc/goldenenv/acr-login"
"""Where a host's boot reads the account's registry login (templates/node/registry-login-acr.sh.j2)."""
DATAFLOW_TAG = ("cpfs-dataflow", "true")
"""A CPFS data flow reads and writes only an OSS bucket tagged so (CPFS "Manage dataflows", prerequisites)."""


def boot_script(resource: PlannedResource) -> str | None:
    return boot_text(resource.props.get("userData")) if resource.type == INSTANCE else None


def repository_addresses(repo: PlannedResource) -> list[str]:
    """`/<namespace>/<repository>` after the registry's domain (registry[-vpc].<region>.aliyuncs.com)."""
    namespace, name = repo.props.get("namespace"), repo.props.get("name")
    return [f".aliyuncs.com/{namespace}/{name}"] if namespace and name else []


def pull_gap(host: PlannedResource, repo: PlannedResource, ctx: Context) -> str | None:
    """A personal edition repository takes no RAM role (its temporary-token call takes an Enterprise Edition
    instance): a host pulls with the account's registry login, which its boot reads from ACR_LOGIN_FILE, put there
    by the operator. The plan can hold no more of the grant than that login step."""
    if ACR_LOGIN_FILE in (boot_script(host) or ""):
        return None
    return f"pulls from the personal edition repository without logging in (no {ACR_LOGIN_FILE} step in its boot)"


def bucket_service_gap(flow: PlannedResource, ctx: Context) -> str | None:
    source = str(flow.props.get("sourceStorage") or "").removeprefix("oss://").split("/", 1)[0]
    bucket = next((b for b in ctx.of_type(OSS_BUCKET) if source and source in {b.id, b.props.get("bucket")}), None)
    if bucket is None:
        return f"reads {flow.props.get('sourceStorage') or 'no source'}, which is not the stack's planned bucket"
    key, value = DATAFLOW_TAG
    if str(_mapping(bucket.props.get("tags")).get(key)) != value:
        return (f"links {_label(bucket)}, which lacks the tag {key}={value} that admits CPFS's data flow service "
                f"role to a bucket")
    return None


FACTS = ProviderFacts(
    privilege=privilege.judge, host_hardening=hardening.host, data_lifecycle=hardening.lifecycle,
    not_judged=hardening.NOT_JUDGED,
    name="alicloud",
    security_groups=(SECURITY_GROUP,),
    standalone_ingress_rules=(SECURITY_GROUP_RULE,),
    ingress=ingress,
    storage_encryption=storage_encryption,
    metadata=metadata,
    public_ip=public_ip,
    data_stores=(OSS_BUCKET,),
    instances=(INSTANCE,),
    says_private=says_private,
    address_targets=address_targets,
    buckets=(OSS_BUCKET,),
    bucket_policy=bucket_policy,
    bucket_acl=bucket_acl,
    access_block=access_block,
    block_covers=block_covers,
    account_condition_keys=ACCOUNT_CONDITION_KEYS,
    budgets=budgets,
    stop_chain=stop_chain.stop_chain,
    budget_hint="set goldenenv:budget so the stack plans its budget guard (a Function Compute timer function)",
    boot_script=boot_script,
    repositories=(ACR_REPO,),
    repository_addresses=repository_addresses,
    pull_gap=pull_gap,
    bucket_services=(DATA_FLOW,),
    bucket_service_gap=bucket_service_gap,
)
