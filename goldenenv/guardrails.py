"""Guardrails: rules over the resources a Pulumi program plans to create.

Rules are plain functions over plain data (``PlannedResource``: type token plus input properties in engine
form, camelCase), so the same rules serve ``goldenenv plan`` (resources recorded under Pulumi's mock runtime)
and Pulumi CLI users (the policy pack in ``policy/``, through ``from_policy_resource``). This is the lowest
layer: it imports nothing from the rest of goldenenv and does no work at import time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import ipaddress
import json
import keyword
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

    def of_type(self, *types: str) -> Iterator[PlannedResource]:
        return (r for r in self.resources if r.type in types)


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    severity: Severity
    check: Callable[[PlannedResource, Context], Iterable[str]]


# Type tokens the rules read. Bridged providers name them "<pkg>:<module>/<lowerClass>:<Class>".
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
ALICLOUD_SECURITY_GROUP = "alicloud:ecs/securityGroup:SecurityGroup"
ALICLOUD_SECURITY_GROUP_RULE = "alicloud:ecs/securityGroupRule:SecurityGroupRule"
ALICLOUD_INSTANCE = "alicloud:ecs/instance:Instance"
ALICLOUD_OSS_BUCKET = "alicloud:oss/bucket:Bucket"

# Launch templates must tag what they launch, or instances, disks and NICs escape cost allocation.
LAUNCH_TEMPLATE_TAGGED_KINDS = ("instance", "volume", "network-interface")
WORLD_CIDRS = frozenset({"0.0.0.0/0", "::/0"})
SSH_PORT = 22

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


def _label(resource: PlannedResource) -> str:
    """'Kind name' for messages, e.g. "LaunchTemplate 'gpu-nodes'"."""
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _refers_to(resource: PlannedResource, prop: str, value: Any, target: PlannedResource,
               target_values: Iterable[Any]) -> bool:
    """Whether ``value`` (read from ``resource.props[prop]``) points at ``target``, by value or by dependency."""
    if isinstance(value, str) and value in {v for v in target_values if isinstance(v, str)}:
        return True
    return target.urn in resource.property_dependencies.get(prop, ())


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


# ---------------------------------------------------------------- rules: ssh-open-to-world, ingress-open-to-world

@dataclass(frozen=True)
class _Ingress:
    """One allowed inbound permission from the whole internet; ports None = every port."""

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


def _protocol(value: Any) -> str:
    text = str(value).strip().lower()
    return {"-1": "all", "6": "tcp", "17": "udp", "1": "icmp"}.get(text, text)


def _sources(*values: Any) -> list[str]:
    sources = []
    for value in values:
        for cidr in ([value] if isinstance(value, str) else _items(value)):
            if isinstance(cidr, str) and cidr.strip():
                sources.append(cidr.strip())
    return sources


def _aws_permission(rule: Mapping[str, Any], protocol_key: str, *cidr_values: Any) -> list[_Ingress]:
    protocol = _protocol(rule.get(protocol_key))
    return [_Ingress(protocol, _port(rule.get("fromPort")), _port(rule.get("toPort")), source)
            for source in _sources(*cidr_values)]


def _alicloud_permission(props: Mapping[str, Any]) -> list[_Ingress]:
    if str(props.get("policy") or "accept").lower() == "drop":
        return []
    low, _, high = str(props.get("portRange") or "-1/-1").partition("/")
    from_port, to_port = _port(low), _port(high)
    protocol = _protocol(props.get("ipProtocol"))
    if from_port == -1:
        from_port = to_port = None
        protocol = "all" if protocol in ("all", "tcp") else protocol
    return [_Ingress(protocol, from_port, to_port, source)
            for source in _sources(props.get("cidrIp"), props.get("ipv6CidrIp"))]


def _ingress(resource: PlannedResource) -> list[_Ingress]:
    """Every inbound permission a resource grants from a CIDR source (not from other groups)."""
    props = resource.props
    if resource.type == SECURITY_GROUP:
        return [p for rule in _items(props.get("ingress"))
                for p in _aws_permission(_mapping(rule), "protocol",
                                         _mapping(rule).get("cidrBlocks"), _mapping(rule).get("ipv6CidrBlocks"))]
    if resource.type == SECURITY_GROUP_RULE and props.get("type") == "ingress":
        return _aws_permission(props, "protocol", props.get("cidrBlocks"), props.get("ipv6CidrBlocks"))
    if resource.type == SECURITY_GROUP_INGRESS_RULE:
        return _aws_permission(props, "ipProtocol", props.get("cidrIpv4"), props.get("cidrIpv6"))
    if resource.type == ALICLOUD_SECURITY_GROUP_RULE and props.get("type") == "ingress":
        return _alicloud_permission(props)
    return []


def _world_ingress(resource: PlannedResource) -> list[_Ingress]:
    return [p for p in _ingress(resource) if p.source in WORLD_CIDRS]


_GROUPS = (SECURITY_GROUP, ALICLOUD_SECURITY_GROUP)
_STANDALONE_RULES = (SECURITY_GROUP_RULE, SECURITY_GROUP_INGRESS_RULE, ALICLOUD_SECURITY_GROUP_RULE)


def _group_of(rule: PlannedResource, ctx: Context) -> PlannedResource | None:
    """The planned security group a standalone rule attaches to, by id or by dependency; None if not planned."""
    value = rule.props.get("securityGroupId")
    return next((g for g in ctx.of_type(*_GROUPS)
                 if _refers_to(rule, "securityGroupId", value, g, (g.id, g.props.get("id")))), None)


def _ssh_members(resource: PlannedResource, ctx: Context) -> list[PlannedResource] | None:
    """The resources whose rules together decide who reaches SSH on ``resource``'s group, ``resource`` first;
    None when another resource speaks for the group (its planned group, or the first rule naming the same id)."""
    if resource.type in _GROUPS:
        return [resource] + [r for r in ctx.of_type(*_STANDALONE_RULES) if _group_of(r, ctx) is resource]
    if resource.type not in _STANDALONE_RULES or _group_of(resource, ctx) is not None:
        return None
    group_id = resource.props.get("securityGroupId")
    if not isinstance(group_id, str) or not group_id:
        return [resource]  # its group is unknown: judged alone
    siblings = [r for r in ctx.of_type(*_STANDALONE_RULES)
                if r.props.get("securityGroupId") == group_id and _group_of(r, ctx) is None]
    return siblings if siblings[0] is resource else None


def _check_ssh_open(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges the union of every source that opens SSH on one group: rules split into halves are still the world."""
    members = _ssh_members(resource, ctx)
    if not members:
        return
    opening = [(member, p) for member in members for p in _ingress(member) if p.opens(SSH_PORT)]
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
    for permission in _world_ingress(resource):
        if not permission.opens(SSH_PORT):  # SSH exposure is reported, as an error, by ssh-open-to-world
            yield (f"{_label(resource)} allows {permission.describe()}; training nodes need no inbound traffic "
                   f"from the internet: narrow the source to a known CIDR or reach the service through a tunnel.")


# ---------------------------------------------------------------- rules: unencrypted-storage, unencrypted-topic

def _bucket_is_encrypted(bucket: PlannedResource, ctx: Context) -> bool:
    if _items(_mapping(bucket.props.get("serverSideEncryptionConfiguration")).get("rules")):
        return True
    return any(_refers_to(config, "bucket", config.props.get("bucket"), bucket, (bucket.id, bucket.props.get("bucket")))
               for config in ctx.of_type(*S3_BUCKET_ENCRYPTION))


def _check_unencrypted_storage(resource: PlannedResource, ctx: Context) -> Iterator[str]:
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


def _check_unencrypted_topic(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type == SNS_TOPIC and not resource.props.get("kmsMasterKeyId"):
        yield f"{_label(resource)} is not encrypted at rest; set kmsMasterKeyId (e.g. 'alias/aws/sns')."


# ---------------------------------------------------------------- rule: imdsv1-allowed

def _check_imdsv1(resource: PlannedResource, ctx: Context) -> Iterator[str]:
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


# ---------------------------------------------------------------- rule: public-ip-on-gpu-node

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


def _check_public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == LAUNCH_TEMPLATE:
        for index, interface in enumerate(_items(props.get("networkInterfaces"))):
            if _is_true(_mapping(interface).get("associatePublicIpAddress")):
                yield (f"{label} network interface {_mapping(interface).get('deviceIndex', index)} gets a public IP; "
                       f"set associatePublicIpAddress to \"false\" and reach nodes through a bastion, SSM or VPN.")
    elif resource.type == INSTANCE and _is_true(props.get("associatePublicIpAddress")):
        yield f"{label} gets a public IP; set associatePublicIpAddress=False and place it in a private subnet."
    elif resource.type == ALICLOUD_INSTANCE and (_port(props.get("internetMaxBandwidthOut")) or 0) > 0:
        yield f"{label} gets a public IP (internetMaxBandwidthOut > 0); set it to 0 and egress through a NAT gateway."
    elif resource.type == SUBNET and _is_true(props.get("mapPublicIpOnLaunch")):
        users = _subnet_users(resource, ctx)
        if users:
            yield (f"{label} maps public IPs on launch and nodes launch in it ({', '.join(users)}); "
                   f"set mapPublicIpOnLaunch=False or move the nodes to a private subnet.")


# ---------------------------------------------------------------- rule: data-store-not-retained

_DATA_STORES = (*S3_BUCKETS, ALICLOUD_OSS_BUCKET, EFS_FILE_SYSTEM)


def _is_kept(resource: PlannedResource) -> bool:
    return resource.retain_on_delete is True or resource.protect is True


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


def _check_data_retained(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Judges only what is known: an unknown retainOnDelete (a policy pack) is data-store-retention-unverified's."""
    props, label = resource.props, _label(resource)
    if resource.type in _DATA_STORES:
        if resource.retain_on_delete is False and resource.protect is not True:
            yield (f"{label} would be deleted, with its data, on `pulumi destroy`; "
                   f"create it with ResourceOptions(retain_on_delete=True).")
        if _is_true(props.get("forceDestroy")):
            yield (f"{label} sets forceDestroy, so `pulumi destroy` empties it and its data is lost; "
                   f"remove forceDestroy (and keep retainOnDelete).")
    elif resource.type == LUSTRE_FILE_SYSTEM:
        if (_lustre_skips_final_backup(resource) and resource.retain_on_delete is False
                and resource.protect is not True and not _linked_to_bucket(resource, ctx)):
            yield (f"{label} would be deleted without a final backup on `pulumi destroy`, and its data lost; "
                   f"link it to a retained bucket (a data repository association), set skipFinalBackup=False, "
                   f"or create it with ResourceOptions(retain_on_delete=True).")


def _check_retention_unverified(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """The Pulumi policy engine does not pass retainOnDelete to policies (its resource options carry protect, not
    retainOnDelete), so a policy pack cannot tell a retained bucket from one `pulumi destroy` deletes: say so
    instead of passing silently. `goldenenv plan` always knows the option and never reaches this."""
    if resource.retain_on_delete is not None or resource.protect is True:
        return
    if resource.type in _DATA_STORES:
        why = "its data would be deleted with it"
    elif (resource.type == LUSTRE_FILE_SYSTEM and _lustre_skips_final_backup(resource)
          and not _linked_to_bucket(resource, ctx)):
        why = "it takes no final backup, so its data would be lost"
    else:
        return
    yield (f"cannot verify that {_label(resource)} survives `pulumi destroy` ({why} unless retainOnDelete is "
           f"set): the policy engine does not report retainOnDelete. Check it with `goldenenv plan`, or also set "
           f"ResourceOptions(protect=True), which policies can see.")


# ---------------------------------------------------------------- rule: s3-public-access

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


def _check_s3_public(resource: PlannedResource, ctx: Context) -> Iterator[str]:
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
