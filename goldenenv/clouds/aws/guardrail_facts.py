"""AWS's guardrail facts: the type tokens the generic rules of goldenenv.guardrails read, and how to read them.

Security groups and their rules (inline, the classic SecurityGroupRule and the newer vpc ingress rules), launch
template tag specifications, EBS / EFS / S3 encryption, SNS topic encryption, IMDSv2, public IPs (interfaces,
instances, and subnets that map public IPs with nodes in them), data stores and FSx for Lustre's final backup,
and S3 bucket policies and public access blocks. Resources are in engine form (camelCase inputs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.guardrails import (
    Context,
    Ingress,
    PlannedResource,
    ProviderFacts,
    _is_false,
    _is_true,
    _items,
    _label,
    _mapping,
    _port,
    _protocol,
    _refers_to,
    _sources,
    _tag_problem,
)

# Bridged providers name their types "<pkg>:<module>/<lowerClass>:<Class>".
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SECURITY_GROUP_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
S3_BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
S3_PUBLIC_ACCESS_BLOCKS = (
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock",
)
PUBLIC_ACCESS_BLOCK_SETTINGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
EBS_VOLUME = "aws:ebs/volume:Volume"
EFS_FILE_SYSTEM = "aws:efs/fileSystem:FileSystem"
S3_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
S3_BUCKET_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
SNS_TOPIC = "aws:sns/topic:Topic"
LUSTRE_FILE_SYSTEM = "aws:fsx/lustreFileSystem:LustreFileSystem"
DATA_REPOSITORY_ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"

# Launch templates must tag what they launch, or instances, disks and NICs escape cost allocation.
LAUNCH_TEMPLATE_TAGGED_KINDS = ("instance", "volume", "network-interface")


# ---------------------------------------------------------------- untagged-resource: what a launch template tags

def launch_tags(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != LAUNCH_TEMPLATE:
        return
    specs = {_mapping(s).get("resourceType"): _mapping(_mapping(s).get("tags"))
             for s in _items(resource.props.get("tagSpecifications"))}
    for kind in LAUNCH_TEMPLATE_TAGGED_KINDS:
        if kind not in specs:
            yield (f"{_label(resource)} does not tag the {kind}s it launches; add a tagSpecifications entry "
                   f"with resourceType '{kind}' carrying the required tags.")
            continue
        problem = _tag_problem(specs[kind], ctx.required_tags)
        if problem:
            yield f"{_label(resource)} tagSpecifications for '{kind}' {problem}."


# ---------------------------------------------------------------- ssh-open-to-world, ingress-open-to-world

def _permission(rule: Mapping[str, Any], protocol_key: str, *cidr_values: Any) -> list[Ingress]:
    protocol = _protocol(rule.get(protocol_key))
    return [Ingress(protocol, _port(rule.get("fromPort")), _port(rule.get("toPort")), source)
            for source in _sources(*cidr_values)]


def ingress(resource: PlannedResource) -> list[Ingress]:
    props = resource.props
    if resource.type == SECURITY_GROUP:
        return [p for rule in _items(props.get("ingress"))
                for p in _permission(_mapping(rule), "protocol",
                                     _mapping(rule).get("cidrBlocks"), _mapping(rule).get("ipv6CidrBlocks"))]
    if resource.type == SECURITY_GROUP_RULE and props.get("type") == "ingress":
        return _permission(props, "protocol", props.get("cidrBlocks"), props.get("ipv6CidrBlocks"))
    if resource.type == SECURITY_GROUP_INGRESS_RULE:
        return _permission(props, "ipProtocol", props.get("cidrIpv4"), props.get("cidrIpv6"))
    return []


# ---------------------------------------------------------------- unencrypted-storage, unencrypted-topic

def _bucket_is_encrypted(bucket: PlannedResource, ctx: Context) -> bool:
    if _items(_mapping(bucket.props.get("serverSideEncryptionConfiguration")).get("rules")):
        return True
    return any(_refers_to(config, "bucket", config.props.get("bucket"), bucket, (bucket.id, bucket.props.get("bucket")))
               for config in ctx.of_type(*S3_BUCKET_ENCRYPTION))


def storage_encryption(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == LAUNCH_TEMPLATE:
        for index, mapping in enumerate(_items(props.get("blockDeviceMappings"))):
            ebs = _mapping(mapping).get("ebs")
            if isinstance(ebs, Mapping) and not _is_true(ebs.get("encrypted")):
                device = _mapping(mapping).get("deviceName") or f"#{index}"
                yield f"{label} block device {device} is not encrypted; set ebs.encrypted to \"true\"."
    elif resource.type in (EBS_VOLUME, EFS_FILE_SYSTEM):
        if not _is_true(props.get("encrypted")):
            yield f"{label} is not encrypted at rest; set encrypted=True."
    elif resource.type == INSTANCE:
        root = props.get("rootBlockDevice")
        if isinstance(root, Mapping) and not _is_true(root.get("encrypted")):
            yield f"{label} root volume is not encrypted; set rootBlockDevice.encrypted=True."
        for device in _items(props.get("ebsBlockDevices")):
            if not _is_true(_mapping(device).get("encrypted")):
                name = _mapping(device).get("deviceName") or "?"
                yield f"{label} EBS volume {name} is not encrypted; set encrypted=True on it."
    elif resource.type in S3_BUCKETS and not _bucket_is_encrypted(resource, ctx):
        yield (f"{label} has no server-side encryption configuration; add a "
               f"BucketServerSideEncryptionConfiguration whose bucket is this bucket (SSE-KMS or AES256).")


def topic_encryption(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type == SNS_TOPIC and not resource.props.get("kmsMasterKeyId"):
        yield f"{_label(resource)} is not encrypted at rest; set kmsMasterKeyId (e.g. 'alias/aws/sns')."


# ---------------------------------------------------------------- imdsv1-allowed

def metadata(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in (LAUNCH_TEMPLATE, INSTANCE):
        return
    if resource.type == INSTANCE and resource.props.get("launchTemplate"):
        return  # its launch template is checked
    options = _mapping(resource.props.get("metadataOptions"))
    if options.get("httpEndpoint") == "disabled" or options.get("httpTokens") == "required":
        return
    found = options.get("httpTokens") or "unset"
    yield (f"{_label(resource)} allows IMDSv1 (metadataOptions.httpTokens is {found}); set httpTokens to "
           f"\"required\" (and httpPutResponseHopLimit 2 for containers).")


# ---------------------------------------------------------------- public-ip-on-gpu-node

def _subnet_users(subnet: PlannedResource, ctx: Context) -> list[str]:
    users = []
    for template in ctx.of_type(LAUNCH_TEMPLATE):
        interfaces = _items(template.props.get("networkInterfaces"))
        if any(_refers_to(template, "networkInterfaces", _mapping(i).get("subnetId"), subnet, (subnet.id,))
               for i in interfaces):
            users.append(_label(template))
    for instance in ctx.of_type(INSTANCE):
        if _refers_to(instance, "subnetId", instance.props.get("subnetId"), subnet, (subnet.id,)):
            users.append(_label(instance))
    return users


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == LAUNCH_TEMPLATE:
        for index, interface in enumerate(_items(props.get("networkInterfaces"))):
            if _is_true(_mapping(interface).get("associatePublicIpAddress")):
                yield (f"{label} network interface {_mapping(interface).get('deviceIndex', index)} gets a public IP; "
                       f"set associatePublicIpAddress to \"false\" and reach nodes through a bastion, SSM or VPN.")
    elif resource.type == INSTANCE and _is_true(props.get("associatePublicIpAddress")):
        yield f"{label} gets a public IP; set associatePublicIpAddress=False and place it in a private subnet."
    elif resource.type == SUBNET and _is_true(props.get("mapPublicIpOnLaunch")):
        users = _subnet_users(resource, ctx)
        if users:
            yield (f"{label} maps public IPs on launch and nodes launch in it ({', '.join(users)}); "
                   f"set mapPublicIpOnLaunch=False or move the nodes to a private subnet.")


# ---------------------------------------------------------------- data-store-not-retained: FSx for Lustre

def _lustre_skips_final_backup(resource: PlannedResource) -> bool:
    # Scratch file systems never take a final backup; persistent ones skip it unless skipFinalBackup is false.
    props = resource.props
    persistent = str(props.get("deploymentType") or "").upper().startswith("PERSISTENT")
    return persistent and not _is_false(props.get("skipFinalBackup"))


def _linked_to_bucket(fs: PlannedResource, ctx: Context) -> bool:
    """A data repository association links the file system to S3 and exports to it automatically: the bucket,
    retained, is the durable copy (and AWS cannot back up a linked file system anyway)."""
    ids = (fs.id, fs.outputs.get("id"))
    return any(
        str(a.props.get("dataRepositoryPath") or "").startswith("s3://")
        and _refers_to(a, "fileSystemId", a.props.get("fileSystemId"), fs, ids)
        for a in ctx.of_type(DATA_REPOSITORY_ASSOCIATION)
    )


def final_backup_gap(resource: PlannedResource, ctx: Context) -> str | None:
    if (resource.type != LUSTRE_FILE_SYSTEM or not _lustre_skips_final_backup(resource)
            or _linked_to_bucket(resource, ctx)):
        return None
    return "link it to a retained bucket (a data repository association), set skipFinalBackup=False"


# ---------------------------------------------------------------- s3-public-access

def _policy_document(value: Any) -> Mapping[str, Any]:
    """A bucket policy as a mapping: engine inputs carry it as JSON text; unknown or unreadable is empty."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return _mapping(value)


def _is_everyone(principal: Any) -> bool:
    """Principal "*" or {"AWS": "*"} (also in a list): anyone, signed or not, from any account."""
    if isinstance(principal, str):
        return principal.strip() == "*"
    if isinstance(principal, Mapping):
        return any(_is_everyone(p) for p in ([principal.get("AWS")] + _items(principal.get("AWS"))))
    return any(_is_everyone(p) for p in _items(principal))


def public_data(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == S3_BUCKET_POLICY or (resource.type in S3_BUCKETS and props.get("policy")):
        statements = _policy_document(props.get("policy")).get("Statement")
        statements = [statements] if isinstance(statements, Mapping) else _items(statements)
        for index, statement in enumerate(_mapping(s) for s in statements):
            if str(statement.get("Effect", "")).strip() == "Allow" and _is_everyone(statement.get("Principal")):
                sid = statement.get("Sid") or f"#{index}"
                action = statement.get("Action")
                actions = ", ".join(map(str, _items(action))) if _items(action) else str(action or "actions")
                yield (f"{label} statement {sid} allows {actions} to Principal \"*\" "
                       f"(anyone on the internet); name the roles or accounts that need the data instead.")
    elif resource.type in S3_PUBLIC_ACCESS_BLOCKS:
        off = [key for key in PUBLIC_ACCESS_BLOCK_SETTINGS if not _is_true(props.get(key))]
        if off:
            yield (f"{label} leaves {', '.join(off)} off (unset is off), so a policy or ACL can make the data "
                   f"public; set all four of {', '.join(PUBLIC_ACCESS_BLOCK_SETTINGS)} to true.")


def says_private(resource: PlannedResource) -> bool:
    """An instance that says it takes no public IP: associatePublicIpAddress false, on the instance itself."""
    return _is_false(resource.props.get("associatePublicIpAddress"))


FACTS = ProviderFacts(
    name="aws",
    security_groups=(SECURITY_GROUP,),
    standalone_ingress_rules=(SECURITY_GROUP_RULE, SECURITY_GROUP_INGRESS_RULE),
    ingress=ingress,
    launch_tags=launch_tags,
    storage_encryption=storage_encryption,
    topic_encryption=topic_encryption,
    metadata=metadata,
    public_ip=public_ip,
    data_stores=(*S3_BUCKETS, EFS_FILE_SYSTEM),
    final_backup_gap=final_backup_gap,
    public_data=public_data,
    instances=(INSTANCE,),
    says_private=says_private,
)
