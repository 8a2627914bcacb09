"""Alibaba Cloud's guardrail facts: the type tokens the generic rules of goldenenv.guardrails read, and how to
read them - ECS security groups and their rules, public IPs on ECS instances, and OSS buckets as data stores.
Resources are in engine form (camelCase inputs)."""

from __future__ import annotations

from collections.abc import Iterator

from goldenenv.guardrails import Context, Ingress, PlannedResource, ProviderFacts, _label, _port, _protocol, _sources

SECURITY_GROUP = "alicloud:ecs/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "alicloud:ecs/securityGroupRule:SecurityGroupRule"
INSTANCE = "alicloud:ecs/instance:Instance"
OSS_BUCKET = "alicloud:oss/bucket:Bucket"


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
    if resource.type == INSTANCE and (_port(resource.props.get("internetMaxBandwidthOut")) or 0) > 0:
        yield (f"{_label(resource)} gets a public IP (internetMaxBandwidthOut > 0); set it to 0 and egress through "
               f"a NAT gateway.")


def says_private(resource: PlannedResource) -> bool:
    """An instance that says it takes no public IP: internetMaxBandwidthOut 0, set on the instance."""
    value = resource.props.get("internetMaxBandwidthOut")
    return value is not None and _port(value) == 0


FACTS = ProviderFacts(
    name="alicloud",
    security_groups=(SECURITY_GROUP,),
    standalone_ingress_rules=(SECURITY_GROUP_RULE,),
    ingress=ingress,
    public_ip=public_ip,
    data_stores=(OSS_BUCKET,),
    instances=(INSTANCE,),
    says_private=says_private,
)
