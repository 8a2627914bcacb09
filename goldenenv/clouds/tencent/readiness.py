"""Deploy readiness on Tencent Cloud (`goldenenv plan --strict`; `up` always runs it): what Tencent refuses only at
`up`, and Pulumi's mocks let pass: each host's user data within 16 KB after base64 (limits.USER_DATA), the enum
strings the provider documents for what the stack sends (tencentcloud-iac-pulumi 0.2.3 docstrings), an HCC node
without its HPC cluster (InvalidParameterValue.InstanceTypeRequiredHpcCluster), and what only the account can answer
before `up` (strict:tencent-quota, a warning): whether the zone sells the type to this account and whether the account's
quota in the zone holds the nodes. CVM answers both per zone (DescribeZoneInstanceConfigInfos' Status SELL or
SOLD_OUT per type and charge type; DescribeAccountQuota's PostPaidQuotaSet and SpotPaidQuotaSet, the spot one in vCPU
cores: tencentcloud-sdk-python-cvm 3.1.178 models.py), and a new account's GPU quota is often nothing: the first `up`
would fail at the nodes, after the network and storage are made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from goldenenv import catalog
from goldenenv.clouds.base import user_data_rule
from goldenenv.clouds.tencent import limits
from goldenenv.clouds.tencent.basics import CLOUD, is_hcc
from goldenenv.guardrails import Context, Finding, PlannedResource, Rule, Severity, check_rule

ENUMS: Mapping[tuple[str, str], frozenset[str]] = {
    (limits.INSTANCE, "instanceChargeType"): frozenset({"PREPAID", "POSTPAID_BY_HOUR", "SPOTPAID", "CDHPAID",
                                                        "CDCPAID"}),
    (limits.INSTANCE, "spotInstanceType"): frozenset({"ONE-TIME"}),
    (limits.INSTANCE, "stoppedMode"): frozenset({"KEEP_CHARGING", "STOP_CHARGING"}),
    (limits.INSTANCE, "systemDiskType"): frozenset({"LOCAL_BASIC", "LOCAL_SSD", "CLOUD_BASIC", "CLOUD_SSD",
                                                    "CLOUD_PREMIUM", "CLOUD_BSSD", "CLOUD_HSSD", "CLOUD_TSSD"}),
    ("tencentcloud:Cfs/fileSystem:FileSystem", "storageType"): frozenset({"SD", "HP", "TB", "TP"}),
    ("tencentcloud:Cfs/fileSystem:FileSystem", "protocol"): frozenset({"NFS", "CIFS", "TURBO"}),
    ("tencentcloud:Cfs/fileSystem:FileSystem", "netInterface"): frozenset({"VPC", "CCN"}),
    ("tencentcloud:Tcr/instance:Instance", "instanceType"): frozenset({"basic", "standard", "premium"}),
    ("tencentcloud:Billing/budget:Budget", "cycleType"): frozenset({"DAY", "MONTH", "QUARTER", "YEAR"}),
}
"""(type, input) -> the values tencentcloud-iac-pulumi 0.2.3 documents for it."""


def _label(resource: PlannedResource) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _check_enums(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for (type_token, prop), valid in ENUMS.items():
        value = resource.props.get(prop) if resource.type == type_token else None
        if value is not None and str(value) not in valid:
            yield (f"{_label(resource)} {prop}={value!r} is not a value tencentcloud-iac-pulumi takes "
                   f"({', '.join(sorted(valid))}): the API would refuse it halfway through up.")


def _check_hpc(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != limits.INSTANCE:
        return
    hcc, cluster = is_hcc(str(resource.props.get("instanceType") or "")), resource.props.get("hpcClusterId")
    if hcc and not cluster:
        yield (f"{_label(resource)} is an HCC type without an HPC cluster: Tencent refuses it "
               "(InvalidParameterValue.InstanceTypeRequiredHpcCluster)")
    if cluster and not hcc:
        yield (f"{_label(resource)} names an HPC cluster but is not an HCC type: Tencent refuses it "
               "(InvalidParameterValue.InstanceTypeNotSupportHpcCluster)")


def _check_quota(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """One line per zone, instance type and charge type the stack rents, said once (on its first instance)."""
    if resource.type != limits.INSTANCE:
        return
    key = _rented(resource)
    asks = Counter(_rented(r) for r in ctx.of_type(limits.INSTANCE))
    if next(r for r in ctx.of_type(limits.INSTANCE) if _rented(r) == key) is not resource:
        return
    zone, instance_type, charge = key
    count = asks[key]
    it = catalog.instance_types(CLOUD).get(instance_type)
    cores = f" ({count * it.vcpus} vCPU cores)" if it else ""
    quota = ("SpotPaidQuotaSet, counted in vCPU cores" if charge == "SPOTPAID" else "PostPaidQuotaSet")
    yield (f"{count} x {instance_type}{cores} as {charge} in {zone}: before up, check that the zone sells it to "
           f"this account (CVM DescribeZoneInstanceConfigInfos filtered by zone, instance-type and "
           f"instance-charge-type: Status SELL) and that the account's quota there holds it (CVM "
           f"DescribeAccountQuota filtered by zone: {quota}, RemainingQuota)")


def _rented(instance: PlannedResource) -> tuple[str, str, str]:
    props = instance.props
    return (str(props.get("availabilityZone") or "?"), str(props.get("instanceType") or "?"),
            str(props.get("instanceChargeType") or "POSTPAID_BY_HOUR"))


RULES = (
    user_data_rule(limits.USER_DATA),
    Rule("strict:tencent-enum", "Enum strings are values the provider documents.", Severity.ERROR, _check_enums),
    Rule("strict:tencent-hpc-cluster", "HCC instances, and only they, join an HPC cluster.", Severity.ERROR,
         _check_hpc),
    Rule("strict:tencent-quota", "The zone sells each instance type to the account and its quota there holds the "
         "nodes: said per zone, type and charge type, with the calls that read them, to check before up.",
         Severity.WARNING, _check_quota),
)


def findings(resources: list[PlannedResource], required_tags: dict[str, str]) -> list[Finding]:
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
