"""Deploy readiness on Huawei Cloud (`goldenenv plan --strict`; `up` always runs it): what Huawei refuses only at
`up`, and Pulumi's mocks let pass: each host's user data within 32 KB (limits.USER_DATA), the enum strings
pulumi-huaweicloud 0.0.12 documents for what the stack sends, an SFS Turbo HPC size Huawei takes, and what only the
account can answer before `up` (strict:huawei-capacity, a warning): whether the zone sells the flavor and whether the
account's quota holds the nodes (ECS ListFlavorSellPolicies sell_status available/sellout; the account's ECS quota:
a new account's GPU quota is often nothing, and the first `up` would fail at the nodes (Ecs.0319, Ecs.0001) after
the network and storage are made); the same for a Lite Server flavor (strict:huawei-lite-capacity: ModelArts
ListDevServerFlavors is_sold_out, and the service ticket that enables a flavor).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from goldenenv.clouds.base import user_data_rule
from goldenenv.clouds.huawei import limits
from goldenenv.guardrails import Context, Finding, PlannedResource, Rule, Severity, check_rule

TURBO = "huaweicloud:Sfs/turbo:Turbo"
ENUMS: Mapping[tuple[str, str], frozenset[str]] = {
    (limits.INSTANCE, "chargingMode"): frozenset({"prePaid", "postPaid", "spot"}),
    (limits.INSTANCE, "systemDiskType"): frozenset({"SAS", "SSD", "GPSSD", "ESSD", "GPSSD2", "ESSD2"}),
    (TURBO, "shareType"): frozenset({"STANDARD", "PERFORMANCE", "HPC", "HPC_CACHE"}),
    (TURBO, "hpcBandwidth"): frozenset({"20M", "40M", "125M", "250M", "500M", "1000M"}),
    ("huaweicloud:Vpc/secgroupRule:SecgroupRule", "direction"): frozenset({"ingress", "egress"}),
    ("huaweicloud:Nat/gateway:Gateway", "spec"): frozenset({"1", "2", "3", "4"}),
    ("huaweicloud:Iam/role:Role", "type"): frozenset({"AX", "XA"}),
    ("huaweicloud:FunctionGraph/trigger:Trigger", "type"): frozenset({"TIMER", "OBS", "SMN", "DIS", "KAFKA", "APIG",
                                                                      "LTS", "DEDICATEDGATEWAY"}),
}
"""(type, input) -> the values pulumi-huaweicloud 0.0.12 documents for it (its docstrings; ecs system disk types
from its system_disk_type text, unverified per flavor)."""


def _label(resource: PlannedResource) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} '{resource.name}'"


def _check_enums(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    for (type_token, prop), valid in ENUMS.items():
        value = resource.props.get(prop) if resource.type == type_token else None
        if value is not None and str(value) not in valid:
            yield (f"{_label(resource)} {prop}={value!r} is not a value pulumi-huaweicloud takes "
                   f"({', '.join(sorted(valid))}): the API would refuse it halfway through up.")


def _check_turbo(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != TURBO or resource.props.get("shareType") != "HPC":
        return
    size, bandwidth = resource.props.get("size"), str(resource.props.get("hpcBandwidth") or "")
    problem = limits.turbo_size_problem(int(size or 0), bandwidth)
    if problem:
        yield f"{_label(resource)} {problem}"


def _rented(instance: PlannedResource) -> tuple[str, str, str]:
    props = instance.props
    return (str(props.get("availabilityZone") or "?"), str(props.get("flavorId") or "?"),
            str(props.get("chargingMode") or "postPaid"))


def _check_capacity(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """One line per zone, flavor and charging mode the stack rents, said once (on its first instance)."""
    if resource.type != limits.INSTANCE:
        return
    key = _rented(resource)
    if next(r for r in ctx.of_type(limits.INSTANCE) if _rented(r) == key) is not resource:
        return
    zone, flavor, charge = key
    count = Counter(_rented(r) for r in ctx.of_type(limits.INSTANCE))[key]
    yield (f"{count} x {flavor} as {charge} in {zone}: before up, check that the zone sells it (ECS "
           f"ListFlavorSellPolicies flavor_id {flavor}, availability_zone_id {zone}: sell_status available) and that "
           "the account's ECS quota holds it (Huawei's console: My Quotas)")


def _check_lite_capacity(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A Lite Server flavor is sold per zone and only with a service ticket: said once per zone and flavor, on the
    first server by name (the servers are planned in the order their boot scripts resolve, which varies)."""
    if resource.type != limits.DEVSERVER:
        return
    key = (str(resource.props.get("zone") or "?"), str(resource.props.get("flavor") or "?"))
    servers = sorted((r for r in ctx.of_type(limits.DEVSERVER)
                      if (str(r.props.get("zone") or "?"), str(r.props.get("flavor") or "?")) == key),
                     key=lambda r: r.name)
    if servers[0] is not resource:
        return
    zone, flavor = key
    yield (f"{len(servers)} x Lite Server {flavor} in {zone}: before up, check that ModelArts offers the flavor to "
           f"the account (a service ticket enables it) and that it is not sold out (ListDevServerFlavors "
           "is_sold_out); up checks it first and stops, naming the flavor and zone, before buying anything")


RULES = (
    user_data_rule(limits.USER_DATA),
    Rule("strict:huawei-enum", "Enum strings are values the provider documents.", Severity.ERROR, _check_enums),
    Rule("strict:huawei-sfs-turbo-size", "An SFS Turbo HPC file system's size is one Huawei takes.", Severity.ERROR,
         _check_turbo),
    Rule("strict:huawei-capacity", "The zone sells each flavor and the account's quota holds the nodes: said per "
         "zone, flavor and charging mode, with the calls that read them, to check before up.", Severity.WARNING,
         _check_capacity),
    Rule("strict:huawei-lite-capacity", "ModelArts offers each Lite Server flavor to the account and has it in the "
         "zone: said per zone and flavor, with the call that reads it, to check before up.", Severity.WARNING,
         _check_lite_capacity),
)


def findings(resources: list[PlannedResource], required_tags: dict[str, str]) -> list[Finding]:
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
