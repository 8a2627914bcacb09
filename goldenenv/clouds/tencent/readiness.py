"""Deploy readiness on Tencent Cloud (`goldenenv plan --strict`; `up` always runs it): what Tencent refuses only at
`up`, and Pulumi's mocks let pass: each host's user data within 16 KB after base64 (limits.USER_DATA), the enum
strings the provider documents for what the stack sends (tencentcloud-iac-pulumi 0.2.3 docstrings), and an HCC node
without its HPC cluster (InvalidParameterValue.InstanceTypeRequiredHpcCluster).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from goldenenv.clouds.base import user_data_rule
from goldenenv.clouds.tencent import limits
from goldenenv.clouds.tencent.basics import is_hcc
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


RULES = (
    user_data_rule(limits.USER_DATA),
    Rule("strict:tencent-enum", "Enum strings are values the provider documents.", Severity.ERROR, _check_enums),
    Rule("strict:tencent-hpc-cluster", "HCC instances, and only they, join an HPC cluster.", Severity.ERROR,
         _check_hpc),
)


def findings(resources: list[PlannedResource], required_tags: dict[str, str]) -> list[Finding]:
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
