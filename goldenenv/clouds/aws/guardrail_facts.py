"""AWS's guardrail facts: the type tokens the generic rules of goldenenv.guardrails read, and how to read them.

Security groups and their rules (inline, the classic SecurityGroupRule and the newer vpc ingress rules), launch
template tag specifications, EBS / EFS / S3 encryption (a root disk from the AMI counts as unencrypted unless a
block device mapping or the account default says otherwise), SNS topic encryption, IMDSv2 on the effective metadata
options, public reachability (public IPs on interfaces, instances and the subnets nodes launch in, elastic IPs and
their associations, global IPv6 addresses), data stores and FSx for Lustre's final backup, S3 bucket policies, ACLs
and public access blocks, and the budget with its hard stop. Resources are in engine form (camelCase inputs).
"""

from __future__ import annotations

import json

from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.clouds.aws import hardening, privilege
from goldenenv.guardrails import (
    BudgetWatch,
    Context,
    boot_text,
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
from goldenenv.clouds.aws import stop_chain

# Bridged providers name their types "<pkg>:<module>/<lowerClass>:<Class>".
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SECURITY_GROUP_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
S3_BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
S3_BUCKET_ACLS = ("aws:s3/bucketAclV2:BucketAclV2", "aws:s3/bucketAcl:BucketAcl")
EIP = "aws:ec2/eip:Eip"
EIP_ASSOCIATION = "aws:ec2/eipAssociation:EipAssociation"
EBS_ENCRYPTION_BY_DEFAULT = "aws:ebs/encryptionByDefault:EncryptionByDefault"
BUDGET = "aws:budgets/budget:Budget"
SNS_TOPIC_SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"
LAMBDA_FUNCTION = "aws:lambda/function:Function"
ACCOUNT_CONDITION_KEYS = frozenset({
    "aws:principalaccount", "aws:sourceaccount", "aws:principalorgid", "aws:sourceowner", "aws:principalarn",
    "aws:sourcevpce", "aws:sourcevpc",
})
"""Condition keys that keep an Allow to everyone inside the account, its organisation or its VPC (lower case)."""
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


def _encrypted_by_default(ctx: Context) -> bool:
    """The account's EBS encryption by default, stated in the plan (enabled); unstated counts as off."""
    return any(not _is_false(r.props.get("enabled")) for r in ctx.of_type(EBS_ENCRYPTION_BY_DEFAULT))


def storage_encryption(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == LAUNCH_TEMPLATE:
        mappings = [_mapping(m) for m in _items(props.get("blockDeviceMappings"))]
        for index, mapping in enumerate(mappings):
            ebs = mapping.get("ebs")
            if isinstance(ebs, Mapping) and not _is_true(ebs.get("encrypted")):
                device = mapping.get("deviceName") or f"#{index}"
                yield f"{label} block device {device} is not encrypted; set ebs.encrypted to \"true\"."
        if not any(isinstance(m.get("ebs"), Mapping) for m in mappings) and not _encrypted_by_default(ctx):
            yield (f"{label} maps no encrypted EBS volume, so the root disk is the AMI's snapshot as it is "
                   f"(unencrypted unless the account default, unstated here, says otherwise); add a block device "
                   f"mapping for the root device with ebs.encrypted \"true\".")
    elif resource.type in (EBS_VOLUME, EFS_FILE_SYSTEM):
        if not _is_true(props.get("encrypted")):
            yield f"{label} is not encrypted at rest; set encrypted=True."
    elif resource.type == INSTANCE:
        root = props.get("rootBlockDevice")
        if isinstance(root, Mapping) and not _is_true(root.get("encrypted")):
            yield f"{label} root volume is not encrypted; set rootBlockDevice.encrypted=True."
        elif root is None and not props.get("launchTemplate") and not _encrypted_by_default(ctx):
            yield (f"{label} sets no rootBlockDevice, so its root disk is the AMI's snapshot as it is (unencrypted "
                   f"unless the account default, unstated here, says otherwise); set rootBlockDevice.encrypted=True.")
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

METADATA_KEYS = ("httpEndpoint", "httpTokens")


def _template_of(instance: PlannedResource, ctx: Context) -> PlannedResource | None:
    spec = _mapping(instance.props.get("launchTemplate"))
    for template in ctx.of_type(LAUNCH_TEMPLATE):
        if (_refers_to(instance, "launchTemplate", spec.get("id"), template, (template.id,))
                or (spec.get("name") and spec.get("name") == template.props.get("name"))):
            return template
    return None


def metadata(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges the effective options: an instance's own metadataOptions win over its launch template's, key by key;
    an instance that sets none of its own is its template's (judged there)."""
    if resource.type not in (LAUNCH_TEMPLATE, INSTANCE):
        return
    own = {k: v for k, v in _mapping(resource.props.get("metadataOptions")).items()
           if k in METADATA_KEYS and v is not None}
    if resource.type == INSTANCE and resource.props.get("launchTemplate"):
        if not own:
            return  # its launch template's options apply, and the template is checked
        template = _template_of(resource, ctx)
        own = {**_mapping(template.props.get("metadataOptions") if template else None), **own}
    options = own
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


def _ipv6(props: Mapping[str, Any]) -> bool:
    """Whether an instance or interface takes global IPv6 addresses (a count, a list or prefixes)."""
    return ((_port(props.get("ipv6AddressCount")) or 0) > 0 or bool(_items(props.get("ipv6Addresses")))
            or (_port(props.get("ipv6PrefixCount")) or 0) > 0 or bool(_items(props.get("ipv6Prefixes"))))


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == LAUNCH_TEMPLATE:
        for index, interface in enumerate(_items(props.get("networkInterfaces"))):
            device = _mapping(interface).get("deviceIndex", index)
            if _is_true(_mapping(interface).get("associatePublicIpAddress")):
                yield (f"{label} network interface {device} gets a public IP; "
                       f"set associatePublicIpAddress to \"false\" and reach nodes through a bastion, SSM or VPN.")
            if _ipv6(_mapping(interface)):
                yield (f"{label} network interface {device} takes global IPv6 addresses, reachable from the "
                       f"internet; drop ipv6AddressCount / ipv6Addresses.")
    elif resource.type == INSTANCE:
        if _is_true(props.get("associatePublicIpAddress")):
            yield f"{label} gets a public IP; set associatePublicIpAddress=False and place it in a private subnet."
        if _ipv6(props):
            yield (f"{label} takes global IPv6 addresses (ipv6AddressCount / ipv6Addresses), reachable from the "
                   f"internet; drop them.")
    elif resource.type == SUBNET:
        exposures = [what for key, what in (("mapPublicIpOnLaunch", "maps public IPs on launch"),
                                            ("assignIpv6AddressOnCreation", "assigns global IPv6 addresses on launch"))
                     if _is_true(props.get(key))]
        users = _subnet_users(resource, ctx) if exposures else []
        if users:
            yield (f"{label} {' and '.join(exposures)} and nodes launch in it ({', '.join(users)}); "
                   f"set mapPublicIpOnLaunch and assignIpv6AddressOnCreation to False or move the nodes to a "
                   f"private subnet.")


def address_targets(resource: PlannedResource) -> list[tuple[str, Any]]:
    """What an elastic IP (or its association) gives a public address to."""
    if resource.type == EIP:
        keys = ("instance", "networkInterface")
    elif resource.type == EIP_ASSOCIATION:
        keys = ("instanceId", "networkInterfaceId")
    else:
        return []
    return [(key, resource.props.get(key)) for key in keys]


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

def bucket_policy(resource: PlannedResource) -> Any:
    if resource.type == S3_BUCKET_POLICY or (resource.type in S3_BUCKETS and resource.props.get("policy")):
        return resource.props.get("policy")
    return None


def bucket_acl(resource: PlannedResource) -> list[str]:
    """A bucket's inline acl / grants, or an ACL resource's canned acl and grantees (by group URI's last part)."""
    props = resource.props
    if resource.type not in (*S3_BUCKETS, *S3_BUCKET_ACLS):
        return []
    granted = [props["acl"]] if isinstance(props.get("acl"), str) else []
    grants = _items(props.get("grants")) + _items(_mapping(props.get("accessControlPolicy")).get("grants"))
    for grant in map(_mapping, grants):
        grantee = _mapping(grant.get("grantee")) or grant
        uri = grantee.get("uri") or grantee.get("URI")
        if isinstance(uri, str) and uri.strip():
            granted.append(uri.rstrip("/").rsplit("/", 1)[-1])
    return granted


def access_block(resource: PlannedResource) -> list[str] | None:
    if resource.type not in S3_PUBLIC_ACCESS_BLOCKS:
        return None
    return [key for key in PUBLIC_ACCESS_BLOCK_SETTINGS if not _is_true(resource.props.get(key))]


def block_covers(block: PlannedResource, bucket: PlannedResource, ctx: Context) -> bool:
    if block.type == "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock":
        return True
    return _refers_to(block, "bucket", block.props.get("bucket"), bucket,
                      (bucket.id, bucket.props.get("bucket"), bucket.outputs.get("bucket")))


# ---------------------------------------------------------------- budget-not-planned

def _function_arns(ctx: Context) -> set[str]:
    return {v for f in ctx.of_type(LAMBDA_FUNCTION) for v in (f.outputs.get("arn"), f.props.get("arn"))
            if isinstance(v, str)}


def budgets(ctx: Context) -> list[BudgetWatch]:
    """Each AWS budget; it stops the nodes when an alert goes to an SNS topic, whose stop is a Lambda function
    subscribed to that topic (both planned)."""
    watches = []
    functions = _function_arns(ctx)
    for budget in ctx.of_type(BUDGET):
        topics = [t for n in _items(budget.props.get("notifications"))
                  for t in _items(_mapping(n).get("subscriberSnsTopicArns")) if isinstance(t, str)]
        gap = None
        for topic in dict.fromkeys(topics):
            endpoints = [s.props.get("endpoint") for s in ctx.of_type(SNS_TOPIC_SUBSCRIPTION)
                         if s.props.get("topic") == topic and str(s.props.get("protocol")).lower() == "lambda"]
            if not endpoints:
                gap = (f"sends its alert to {topic}, but nothing subscribed to that topic stops the nodes; plan the "
                       f"hard stop's Lambda subscription")
            elif not any(e in functions or e is None for e in endpoints):
                gap = (f"sends its alert to {topic}, whose subscriber {endpoints[0]} is no Lambda function of the "
                       f"plan: the hard stop's function is missing")
        watches.append(BudgetWatch(budget, stops=bool(topics), gap=gap))
    return watches


def says_private(resource: PlannedResource) -> bool:
    """An instance that says it takes no public IP: associatePublicIpAddress false, on the instance itself."""
    return _is_false(resource.props.get("associatePublicIpAddress"))


# ---------------------------------------------------------------- pull-not-granted

ECR_REPOSITORY = "aws:ecr/repository:Repository"
INSTANCE_PROFILE = "aws:iam/instanceProfile:InstanceProfile"
IAM_ROLE = "aws:iam/role:Role"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ECR_PULL_POLICIES = frozenset({
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPowerUser",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryFullAccess",
})
"""AWS managed policies that let a role pull from any repository of the account (ECR's identity-based policies)."""
ECR_PULL_ACTIONS = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
ECR_LOGIN_ACTION = "ecr:GetAuthorizationToken"
"""What `docker pull` from ECR needs: a token (on "*"), then the image's manifest and layers on the repository."""


def boot_script(resource: PlannedResource) -> str | None:
    """An instance's userData (or userDataBase64), a launch template's userData (base64)."""
    if resource.type == INSTANCE:
        return boot_text(resource.props.get("userDataBase64") or resource.props.get("userData"))
    if resource.type == LAUNCH_TEMPLATE:
        return boot_text(resource.props.get("userData"))
    return None


def repository_addresses(repository: PlannedResource) -> list[str]:
    url = repository.outputs.get("repositoryUrl")
    return [url] if isinstance(url, str) and url else []


def _values(resource: PlannedResource, *keys: str) -> set[str]:
    found = {resource.id, resource.props.get("name"), *(resource.outputs.get(k) for k in ("name", "arn", "id", *keys))}
    return {v for v in found if isinstance(v, str) and v}


def _role_of(host: PlannedResource, ctx: Context) -> PlannedResource | None:
    """The planned role behind a host's instance profile (an instance names it, a launch template by arn or name)."""
    ref = host.props.get("iamInstanceProfile")
    refs = {v for v in (ref, *_mapping(ref).values()) if isinstance(v, str) and v}
    profile = next((p for p in ctx.of_type(INSTANCE_PROFILE) if refs & _values(p)), None)
    role = profile.props.get("role") if profile else None
    return next((r for r in ctx.of_type(IAM_ROLE) if isinstance(role, str) and role in _values(r)), None)


def _allows(document: Any, action: str, resource_arn: str | None) -> bool:
    """Whether a policy document has an Allow statement for `action` on `resource_arn` (or "*")."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return False
    for statement in _items(_mapping(document).get("Statement")):
        statement = _mapping(statement)
        if statement.get("Effect") != "Allow":
            continue
        actions = [a for a in ([statement.get("Action")] if isinstance(statement.get("Action"), str)
                               else _items(statement.get("Action"))) if isinstance(a, str)]
        resources = ([statement.get("Resource")] if isinstance(statement.get("Resource"), str)
                     else _items(statement.get("Resource")))
        if any(a in (action, "ecr:*", "*") for a in actions) and any(r in ("*", resource_arn) for r in resources):
            return True
    return False


def pull_gap(host: PlannedResource, repository: PlannedResource, ctx: Context) -> str | None:
    """The host's instance profile role has an ECR pull policy attached, or an inline policy allowing the token and
    the pull actions on the repository."""
    role = _role_of(host, ctx)
    if role is None:
        return "has no planned instance profile role, so it has no credentials for ECR"
    names = _values(role)
    if any(a.props.get("role") in names and a.props.get("policyArn") in ECR_PULL_POLICIES
           for a in ctx.of_type(ROLE_POLICY_ATTACHMENT)):
        return None
    inline = [p.props.get("policy") for p in ctx.of_type(ROLE_POLICY) if p.props.get("role") in names]
    arn = repository.outputs.get("arn")
    if any(_allows(d, ECR_LOGIN_ACTION, None) for d in inline) and all(
            any(_allows(d, action, arn) for d in inline) for action in ECR_PULL_ACTIONS):
        return None
    return (f"runs as role {_label(role)}, which has neither an ECR read-only managed policy nor an inline policy "
            f"allowing {ECR_LOGIN_ACTION} and {', '.join(ECR_PULL_ACTIONS)} on the repository")


# ---------------------------------------------------------------- bucket-service-not-granted

def bucket_service_gap(link: PlannedResource, ctx: Context) -> str | None:
    """A data repository association reads and writes its bucket as FSx's service-linked role
    (AWSServiceRoleForFSxS3Access_<fs id>), which FSx creates with the association: the bucket must be a planned
    one and encrypted with S3's own keys or the AWS managed aws/s3 key, which that role may use; a customer key
    would need the role granted on the key."""
    path = str(link.props.get("dataRepositoryPath") or "")
    name = path.removeprefix("s3://").split("/", 1)[0]
    bucket = next((b for b in ctx.of_type(*S3_BUCKETS) if name and name in _values(b, "bucket")
                   | {b.props.get("bucket")}), None)
    if bucket is None:
        return f"links {path or 'no path'}, which is not the stack's planned bucket"
    for sse in ctx.of_type(*S3_BUCKET_ENCRYPTION):
        if not ({sse.props.get("bucket")} & _values(bucket, "bucket")):
            continue
        for rule in _items(sse.props.get("rules")):
            key = _mapping(_mapping(rule).get("applyServerSideEncryptionByDefault")).get("kmsMasterKeyId")
            if key:
                return (f"links {_label(bucket)}, encrypted with customer key {key}: FSx's service-linked role "
                        f"holds no grant on that key, so imports and exports fail; use the aws/s3 key or grant it")
    return None


FACTS = ProviderFacts(
    privilege=privilege.judge, data_lifecycle=hardening.lifecycle, not_judged=hardening.NOT_JUDGED,
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
    instances=(INSTANCE,),
    says_private=says_private,
    address_targets=address_targets,
    buckets=S3_BUCKETS,
    bucket_policy=bucket_policy,
    bucket_acl=bucket_acl,
    access_block=access_block,
    block_covers=block_covers,
    account_condition_keys=ACCOUNT_CONDITION_KEYS,
    budgets=budgets,
    stop_chain=stop_chain.stop_chain,
    budget_hint="set goldenenv:budget so the stack plans its AWS Budget (and budget.hardStop its stop)",
    boot_script=boot_script,
    repositories=(ECR_REPOSITORY,),
    repository_addresses=repository_addresses,
    pull_gap=pull_gap,
    bucket_services=(DATA_REPOSITORY_ASSOCIATION,),
    bucket_service_gap=bucket_service_gap,
)
