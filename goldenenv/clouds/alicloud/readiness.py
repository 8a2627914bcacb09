"""Deploy readiness on Alibaba Cloud (`goldenenv plan --strict`; `up` always runs it): what Alibaba refuses only at
`up`, halfway through, and Pulumi's mocks let pass.

pulumi-alicloud checks no enum string client-side (FACTS.md): a misspelt `HighPerformance` or `advance_100` is
refused by the API after the network and the bucket exist. So the strings the stack sends are checked here
against the values the provider documents (pulumi-alicloud 4.0.0 docstrings, written out as data below), and so
are the two limits between resources that the API enforces: a CPFS data flow slower than its file system, and an
auto-release time Alibaba can accept. Each rule is a guardrails.Rule whose check yields one message per problem,
naming what is wrong, what is valid, and the stack key to change.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from goldenenv.clouds.alicloud import limits
from goldenenv.clouds.base import user_data_rule
from goldenenv.guardrails import Context, Finding, PlannedResource, Rule, Severity, check_rule

INSTANCE = "alicloud:ecs/instance:Instance"
FILE_SYSTEM = "alicloud:nas/fileSystem:FileSystem"
DATA_FLOW = "alicloud:nas/dataFlow:DataFlow"
PROVIDER_DOCS = "pulumi-alicloud 4.0.0 docstrings"

ENUMS: Mapping[tuple[str, str], frozenset[str]] = {
    (INSTANCE, "instanceChargeType"): frozenset({"PrePaid", "PostPaid"}),
    (INSTANCE, "spotStrategy"): frozenset({"NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"}),
    (INSTANCE, "spotInterruptionBehavior"): frozenset({"Terminate", "Stop"}),
    (INSTANCE, "networkInterfaceTrafficMode"): frozenset({"Standard", "HighPerformance"}),
    (INSTANCE, "networkInterfaces.networkInterfaceTrafficMode"): frozenset({"Standard", "HighPerformance"}),
    (INSTANCE, "httpTokens"): frozenset({"optional", "required"}),
    (INSTANCE, "httpEndpoint"): frozenset({"enabled", "disabled"}),
    (INSTANCE, "systemDiskCategory"): frozenset({"ephemeral_ssd", "cloud_efficiency", "cloud_ssd", "cloud_essd",
                                                 "cloud", "cloud_auto", "cloud_essd_entry"}),
    ("alicloud:ecs/ecsDeploymentSet:EcsDeploymentSet", "strategy"): frozenset({"Availability", "AvailabilityGroup",
                                                                                "LowLatency"}),
    ("alicloud:ecs/securityGroup:SecurityGroup", "innerAccessPolicy"): frozenset({"Accept", "Drop"}),
    ("alicloud:ecs/securityGroupRule:SecurityGroupRule", "type"): frozenset({"ingress", "egress"}),
    ("alicloud:ecs/securityGroupRule:SecurityGroupRule", "ipProtocol"): frozenset({"tcp", "udp", "icmp", "icmpv6",
                                                                                    "gre", "all"}),
    ("alicloud:ecs/securityGroupRule:SecurityGroupRule", "nicType"): frozenset({"internet", "intranet"}),
    ("alicloud:ecs/securityGroupRule:SecurityGroupRule", "policy"): frozenset({"accept", "drop"}),
    ("alicloud:vpc/natGateway:NatGateway", "natType"): frozenset({"Enhanced"}),
    ("alicloud:vpc/natGateway:NatGateway", "networkType"): frozenset({"internet", "intranet"}),
    ("alicloud:vpc/natGateway:NatGateway", "paymentType"): frozenset({"PayAsYouGo"}),
    ("alicloud:ecs/eipAddress:EipAddress", "paymentType"): frozenset({"Subscription", "PayAsYouGo"}),
    ("alicloud:ecs/eipAddress:EipAddress", "internetChargeType"): frozenset({"PayByBandwidth", "PayByTraffic"}),
    ("alicloud:ecs/eipAssociation:EipAssociation", "instanceType"): frozenset({"Nat", "SlbInstance", "EcsInstance",
                                                                                "NetworkInterface", "HaVip",
                                                                                "IpAddress"}),
    ("alicloud:ram/rolePolicyAttachment:RolePolicyAttachment", "policyType"): frozenset({"System", "Custom"}),
    (FILE_SYSTEM, "fileSystemType"): frozenset({"standard", "extreme", "cpfs", "cpfsse"}),
    (DATA_FLOW, "throughput"): frozenset({"600", "1200", "1500"}),
    ("alicloud:nas/protocolService:ProtocolService", "protocolType"): frozenset({"NFS"}),
    ("alicloud:nas/protocolService:ProtocolService", "protocolSpec"): frozenset({"General", "CL1", "CL2"}),
    ("alicloud:oss/bucket:Bucket", "storageClass"): frozenset({"Standard", "IA", "Archive", "ColdArchive",
                                                               "DeepColdArchive"}),
    ("alicloud:oss/bucket:Bucket", "redundancyType"): frozenset({"LRS", "ZRS"}),
    ("alicloud:oss/bucketAcl:BucketAcl", "acl"): frozenset({"private", "public-read", "public-read-write"}),
    ("alicloud:oss/bucketVersioning:BucketVersioning", "status"): frozenset({"Enabled", "Suspended"}),
    ("alicloud:oss/bucketServerSideEncryption:BucketServerSideEncryption", "sseAlgorithm"): frozenset({"KMS",
                                                                                                     "AES256"}),
    ("alicloud:cr/namespace:Namespace", "defaultVisibility"): frozenset({"PUBLIC", "PRIVATE"}),
    ("alicloud:cr/repo:Repo", "repoType"): frozenset({"PUBLIC", "PRIVATE"}),
    ("alicloud:fc/v3Trigger:V3Trigger", "triggerType"): frozenset({"oss", "log", "http", "timer", "tablestore",
                                                                   "cdn_events", "mns_topic", "eventbridge"}),
}
"""(type, input path) -> the values the provider documents for it (PROVIDER_DOCS)."""

FILE_SYSTEM_KINDS: Mapping[str, Mapping[str, frozenset[str]]] = {
    "standard": {"protocolType": frozenset({"NFS", "SMB"}),
                 "storageType": frozenset({"Performance", "Capacity", "Premium", "Agentic"})},
    "extreme": {"protocolType": frozenset({"NFS"}), "storageType": frozenset({"standard", "advance"})},
    "cpfs": {"protocolType": frozenset({"cpfs"}), "storageType": frozenset({"advance_100", "advance_200"})},
}
"""nas.FileSystem protocol_type and storage_type, by file_system_type (PROVIDER_DOCS)."""

CPFS_BASELINE_PER_TIB = {"advance_100": 100, "advance_200": 200}
"""MB/s of baseline throughput per TiB of a CPFS storage type (PROVIDER_DOCS: "advance_100(100MB/s/TiB
baseline)"); goldenenv:storage.parallelFs.throughputPerTib is that rate."""
SIZE_KEY = "goldenenv:storage.parallelFs.sizeGib"
TIER_KEY = "goldenenv:storage.parallelFs.throughputPerTib"
AUTO_RELEASE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
TTL_KEY = "goldenenv:lifecycle.ttlHours"


def _label(resource: PlannedResource) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _at(props: Mapping[str, Any], path: str) -> Any:
    value: Any = props
    for step in path.split("."):
        value = value.get(step) if isinstance(value, Mapping) else None
    return value


def _text(value: Any) -> str:
    """Engine inputs carry numbers as floats (600.0): compared as the integer the API takes."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# ---------------------------------------------------------------- strict:alicloud-enum

def _check_enums(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for (type_token, path), valid in ENUMS.items():
        if resource.type != type_token:
            continue
        value = _at(resource.props, path)
        if value is not None and _text(value) not in valid:
            yield (f"{_label(resource)} {path}={_text(value)!r} is not a value pulumi-alicloud takes "
                   f"({', '.join(sorted(valid))}): the provider does not check it, so the API would refuse it "
                   "halfway through up.")


# ---------------------------------------------------------------- strict:nas-file-system-kind

def _check_file_system_kind(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != FILE_SYSTEM:
        return
    kind = resource.props.get("fileSystemType")
    for prop, valid in FILE_SYSTEM_KINDS.get(str(kind), {}).items():
        value = resource.props.get(prop)
        if value is not None and value not in valid:
            yield (f"{_label(resource)} {prop}={value!r} is not one a {kind} file system takes "
                   f"({', '.join(sorted(valid))}).")


# ---------------------------------------------------------------- strict:cpfs-data-flow-throughput

def baseline_mb_s(storage_type: str, capacity_gib: float) -> float | None:
    """A CPFS file system's baseline throughput in MB/s (per-TiB rate x capacity); None for an unknown type."""
    per_tib = CPFS_BASELINE_PER_TIB.get(storage_type)
    return None if per_tib is None else per_tib * capacity_gib / 1024


def _check_data_flow_throughput(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != DATA_FLOW:
        return
    fs = next((r for r in ctx.of_type(FILE_SYSTEM) if r.id and r.id == resource.props.get("fileSystemId")), None)
    throughput = resource.props.get("throughput")
    if fs is None or not isinstance(throughput, (int, float)):
        return
    storage_type, capacity = str(fs.props.get("storageType")), fs.props.get("capacity")
    baseline = baseline_mb_s(storage_type, capacity) if isinstance(capacity, (int, float)) else None
    if baseline is None or throughput < baseline:
        return
    smallest = min(int(t) for t in ENUMS[(DATA_FLOW, "throughput")])
    above = {tier: smallest * 1024 / rate for tier, rate in CPFS_BASELINE_PER_TIB.items()}
    yield (f"{_label(resource)} moves {_text(throughput)} MB/s, but its file system {fs.name} ({storage_type}, "
           f"{_text(capacity)} GiB) gives only {baseline:.0f} MB/s, and a data flow must stay below that "
           f"({limits.DATAFLOW_BELOW_FILE_SYSTEM}); {smallest} MB/s is the slowest flow the API takes: raise "
           f"{SIZE_KEY} above {above['advance_100']:g} GiB, or set {TIER_KEY}: {CPFS_BASELINE_PER_TIB['advance_200']} "
           f"(advance_200) with {SIZE_KEY} above {above['advance_200']:g} GiB.")


# ---------------------------------------------------------------- strict:auto-release-time

def _check_auto_release(resource: PlannedResource, ctx: Context, now: datetime | None = None) -> Iterator[str]:
    if resource.type != INSTANCE or resource.props.get("autoReleaseTime") in (None, ""):
        return
    value = str(resource.props["autoReleaseTime"])
    if not AUTO_RELEASE.fullmatch(value):
        yield f"{_label(resource)} autoReleaseTime={value!r} is not yyyy-MM-ddTHH:mm:ssZ (ISO 8601, UTC)."
        return
    if resource.props.get("instanceChargeType") != "PostPaid":
        yield (f"{_label(resource)} has an autoReleaseTime but is {resource.props.get('instanceChargeType')!r}: "
               "Alibaba releases only pay-as-you-go (PostPaid) instances on time.")
    at = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    lead = (at - (now or datetime.now(timezone.utc))).total_seconds() / 60
    least, most = limits.AUTO_RELEASE_MIN_MINUTES, limits.AUTO_RELEASE_MAX_DAYS
    if lead < least.value:
        yield (f"{_label(resource)} would be released at {value}, {max(lead, 0):.0f} min from now; Alibaba takes "
               f"an auto-release time at least {least.value} min ahead ({least.source}): raise {TTL_KEY}.")
    elif lead > most.value * 24 * 60:
        yield (f"{_label(resource)} would be released at {value}, more than {most.value} days from now "
               f"({most.source}): lower {TTL_KEY}.")


# ---------------------------------------------------------------- the rule set

RULES: tuple[Rule, ...] = (
    Rule("strict:alicloud-enum", f"Enum strings are values pulumi-alicloud documents ({PROVIDER_DOCS}); the "
         "provider checks none client-side.", Severity.ERROR, _check_enums),
    Rule("strict:nas-file-system-kind", "A NAS file system's protocol and storage type are ones its kind "
         "(standard, extreme, cpfs) takes.", Severity.ERROR, _check_file_system_kind),
    Rule("strict:cpfs-data-flow-throughput", "A CPFS data flow moves less than its file system's baseline "
         "throughput (storage type per TiB x capacity).", Severity.ERROR, _check_data_flow_throughput),
    Rule("strict:auto-release-time", "A node's auto-release time is ISO 8601 UTC, on a PostPaid node, between "
         f"{limits.AUTO_RELEASE_MIN_MINUTES.value} min and {limits.AUTO_RELEASE_MAX_DAYS.value} days ahead.",
         Severity.ERROR, _check_auto_release),
    user_data_rule(limits.USER_DATA),
)


def findings(resources: Sequence[PlannedResource], required_tags: Mapping[str, str]) -> list[Finding]:
    """Every deploy-readiness finding, in rule order then resource order."""
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
