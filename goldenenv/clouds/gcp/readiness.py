"""Deploy readiness on Google Cloud (`goldenenv plan --strict`; `up` always runs it): what Compute Engine refuses,
or does badly, only at `up`, and Pulumi's mocks let pass.

Under the mock runtime every NIC layout, zone and placement policy is accepted; Compute Engine refuses a ninth NIC
on an A3 Mega, an MRDMA NIC on a regular VPC, a RoCE network used from another zone, a GPU VM that asks to be live
migrated, or a compact policy with more VMs than Google places together - after the networks and the bucket
exist. These rules read the planned resources (guardrails.PlannedResource, engine form) against Google's documented
limits, written below as sourced constants (machine shapes come from the catalog), and are written like the other
clouds' readiness rules: each a guardrails.Rule whose check yields one message per problem, saying what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.base import UserDataLimit, user_data_rule
from goldenenv.guardrails import (
    Context, Finding, PlannedResource, Rule, Severity, _items, _label, _mapping, check_rule,
)

INSTANCE = "gcp:compute/instance:Instance"
INSTANCE_FROM_TEMPLATE = "gcp:compute/instanceFromTemplate:InstanceFromTemplate"
INSTANCES = (INSTANCE, INSTANCE_FROM_TEMPLATE)
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
RESOURCE_POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
LUSTRE = "gcp:lustre/instance:Instance"
USER_DATA = UserDataLimit(
    256 * 1024, {kind: "metadata.user-data" for kind in INSTANCES}, base64=False,
    source="https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations: a metadata "
           "entry's value is limited to 256 KB")
"""Every node and the head take cloud-init's user data as the text of their `user-data` metadata key."""

# ---------------------------------------------------------------- Google's facts, with their sources

GPU_QUOTAS: Mapping[str, str] = {
    "a3-megagpu": "NVIDIA_H100_MEGA_GPUS",
    "a3-highgpu": "NVIDIA_H100_GPUS",
    "a3-ultragpu": "NVIDIA_H200_GPUS",
    "a4-highgpu": "NVIDIA_B200_GPUS",
    "a2-ultragpu": "NVIDIA_A100_80GB_GPUS",
    "a2-highgpu": "NVIDIA_A100_GPUS",
    "a2-megagpu": "NVIDIA_A100_GPUS",
    "g2-standard": "NVIDIA_L4_GPUS",
}
"""Machine family (the machine type less its last part) -> the regional Compute Engine quota its GPUs count
against (`gcloud compute regions describe REGION`, quotas[].metric)."""
ACCELERATOR_QUOTAS: Mapping[str, str] = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-b200": "NVIDIA_B200_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
}
"""Accelerator type (guestAccelerators[].type, last path part) -> its quota, for machine types that attach GPUs."""
SPOT_QUOTA_PREFIX = "PREEMPTIBLE_"
"""Spot, preemptible and flex-start (DWS) VMs count against the PREEMPTIBLE_ form of the quota."""
GLOBAL_GPU_QUOTA = "GPUS_ALL_REGIONS"
"""The project-wide GPU quota every GPU counts against too (SkyPilot's GCP failover handler blocks the whole cloud
on it: RESEARCH-3.md 5.2)."""
QUOTA_SOURCE = ("Compute Engine GPU quotas (https://cloud.google.com/compute/resource-usage#gpu_quota); metric "
                "names as dstack's GCP backend and Google's DWS flex-start guide read them (NVIDIA_H100_MEGA_GPUS, "
                "PREEMPTIBLE_NVIDIA_H200_GPUS, ...: RESEARCH-3.md 1.3)")

COMPACT_PLACEMENT_MAX_VMS = 1500
"""The most instances one compact placement policy places (max distance unset)."""
COMPACT_PLACEMENT_SOURCE = ("https://cloud.google.com/compute/docs/instances/placement-policies-overview "
                            "(compact placement policies: at most 1,500 instances; placement policies are regional)")
COLLOCATED = "COLLOCATED"
VM_COUNT_SOURCE = ("pulumi-gcp 10.2.0 ResourcePolicyGroupPlacementPolicy docstring: with COLLOCATED, exactly "
                   "vm_count instances must be created at the same time with the policy attached")

ROCE_PROFILES = ("-vpc-roce", "-vpc-roce-metal")
"""Network profile names are <zone><suffix>; a network created with one is bound to that zone."""
RDMA_NIC_TYPE = "MRDMA"
ROCE_SOURCE = ("https://docs.cloud.google.com/vpc/docs/rdma-network-profiles (networks with an RDMA profile are "
               "zone-constrained; MRDMA NICs attach to them, other NICs to regular VPCs)")
NIC_SOURCE = ("https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth (physical NICs: A3 High 5, A3 Mega "
              "9, A3 Ultra and A4 10), as catalog instance_types network_cards + rdma_interfaces")

TERMINATE = "TERMINATE"
HOST_MAINTENANCE_SOURCE = ("https://cloud.google.com/compute/docs/instances/host-maintenance-overview (VMs with "
                           "GPUs cannot live migrate: onHostMaintenance TERMINATE)")
RESERVATION_BOUND = "RESERVATION_BOUND"
SPECIFIC_RESERVATION = "SPECIFIC_RESERVATION"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
RESERVATION_SOURCE = ("Compute API scheduling.provisioningModel RESERVATION_BOUND: the instance consumes only the "
                      "reservation it names (reservationAffinity SPECIFIC_RESERVATION, key " + RESERVATION_KEY + ")")
LUSTRE_SOURCE = ("https://docs.cloud.google.com/managed-lustre/docs/create-instance (create the instance in the "
                 "clients' zone)")
SPOT_MODELS = frozenset({"SPOT", "FLEX_START"})


# ---------------------------------------------------------------- reading the plan

def _last(value: Any) -> str:
    """The last path part of a reference or URL ("zones/us-central1-a/machineTypes/a3-megagpu-8g" -> the type)."""
    return str(value).rstrip("/").rsplit("/", 1)[-1] if value is not None else ""


_API = re.compile(r"^https://(www|compute)\.googleapis\.com/compute/(v1|beta|alpha)/")


def _path(value: str) -> str:
    """A reference without the API's URL prefix ("https://www.googleapis.com/compute/v1/projects/..." ->
    "projects/...")."""
    return _API.sub("", value.strip())


def _refers(value: Any, target: PlannedResource) -> bool:
    """Whether a reference (an id, a self link, a partial URL or a bare name) names a planned resource."""
    if not isinstance(value, str) or not value.strip():
        return False
    known = {_path(v) for v in (target.id, target.outputs.get("id"), target.outputs.get("selfLink"),
                                target.props.get("selfLink")) if isinstance(v, str) and v}
    name = target.props.get("name") or target.outputs.get("name")
    return _path(value) in known or (isinstance(name, str) and _last(_path(value)) == name)


def _find(value: Any, ctx: Context, *types: str) -> PlannedResource | None:
    return next((r for r in ctx.of_type(*types) if _refers(value, r)), None)


def _zone(resource: PlannedResource) -> str | None:
    zone = resource.props.get("zone") or resource.props.get("location")
    return _last(zone) if zone else None


def _region(zone: str | None) -> str | None:
    return zone.rsplit("-", 1)[0] if zone and zone.count("-") >= 2 else None


def _machine(instance: PlannedResource) -> str:
    return _last(instance.props.get("machineType"))


def _family(machine: str) -> str:
    return machine.rsplit("-", 1)[0]


def _shape(machine: str) -> catalog.InstanceType | None:
    return catalog.instance_types("gcp").get(machine)


def _scheduling(instance: PlannedResource) -> Mapping[str, Any]:
    return _mapping(instance.props.get("scheduling"))


def gpus(instance: PlannedResource) -> list[tuple[str, int]]:
    """(quota metric, GPUs) an instance counts: its machine type's bundled GPUs (catalog), or its attached
    accelerators; an unknown family or accelerator is named by itself."""
    machine = _machine(instance)
    shape = _shape(machine)
    found = []
    if shape is not None and shape.gpu_count and _family(machine) in GPU_QUOTAS:
        found.append((GPU_QUOTAS[_family(machine)], shape.gpu_count))
    for accelerator in (_mapping(a) for a in _items(instance.props.get("guestAccelerators"))):
        kind = _last(accelerator.get("type"))
        count = accelerator.get("count")
        if kind and isinstance(count, (int, float)) and count > 0:
            found.append((ACCELERATOR_QUOTAS.get(kind, kind.upper().replace("-", "_")), int(count)))
    return found


def has_gpus(instance: PlannedResource) -> bool:
    machine = _machine(instance)
    shape = _shape(machine)
    return bool(gpus(instance)) or bool(shape and shape.gpu_count) or _family(machine) in GPU_QUOTAS


def _interfaces(instance: PlannedResource) -> list[Mapping[str, Any]]:
    return [_mapping(i) for i in _items(instance.props.get("networkInterfaces"))]


def _network_of(interface: Mapping[str, Any], ctx: Context) -> PlannedResource | None:
    """The planned network an interface is on: named directly, or through its planned subnetwork."""
    network = _find(interface.get("network"), ctx, NETWORK)
    if network is None:
        subnet = _find(interface.get("subnetwork"), ctx, SUBNETWORK)
        network = _find(subnet.props.get("network"), ctx, NETWORK) if subnet else None
    return network


def roce_zone(network: PlannedResource) -> str | None:
    """The zone a network's RDMA (RoCE) profile binds it to ("us-central1-a" of ".../us-central1-a-vpc-roce"), or
    None for a regular network."""
    profile = _last(network.props.get("networkProfile"))
    return next((profile[:-len(s)] for s in sorted(ROCE_PROFILES, key=len, reverse=True) if profile.endswith(s)),
                None)


def _nic_name(interface: Mapping[str, Any], index: int) -> str:
    return str(interface.get("name") or f"nic{index}")


# ---------------------------------------------------------------- strict:gcp-host-maintenance

def _check_host_maintenance(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in INSTANCES or not has_gpus(resource):
        return
    found = _scheduling(resource).get("onHostMaintenance")
    if str(found or "").upper() != TERMINATE:
        yield (f"{_label(resource)} has GPUs ({_machine(resource) or 'guestAccelerators'}) but scheduling."
               f"onHostMaintenance is {found or 'unset'}: Compute Engine cannot live-migrate a VM with GPUs "
               f"({HOST_MAINTENANCE_SOURCE}) and refuses it; set scheduling.onHostMaintenance \"TERMINATE\".")


# ---------------------------------------------------------------- strict:gcp-nic-count

def _check_nic_count(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in INSTANCES:
        return
    shape = _shape(_machine(resource))
    if shape is None or not shape.rdma_interfaces:
        return  # only the GPU-NIC shapes are fixed; other types take up to their vNIC limit
    most = shape.network_cards + shape.rdma_interfaces
    count = len(_interfaces(resource))
    if count > most:
        yield (f"{_label(resource)} declares {count} network interfaces, but {shape.name} takes {most} "
               f"({shape.network_cards} host + {shape.rdma_interfaces} GPU NICs: {NIC_SOURCE}); drop "
               f"{count - most} of them.")


# ---------------------------------------------------------------- strict:gcp-mrdma-network, strict:gcp-roce-zone

def _check_mrdma_network(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in INSTANCES:
        return
    for index, interface in enumerate(_interfaces(resource)):
        network = _network_of(interface, ctx)
        if network is None:
            continue  # an existing network: its profile is not in the plan
        nic_type = str(interface.get("nicType") or "").upper()
        roce = roce_zone(network) is not None
        if nic_type == RDMA_NIC_TYPE and not roce:
            yield (f"{_label(resource)} {_nic_name(interface, index)} is an MRDMA NIC on {_label(network)}, which "
                   f"has no RoCE network profile ({ROCE_SOURCE}); put it on a network created with "
                   f"networkProfile <zone>-vpc-roce.")
        elif roce and nic_type != RDMA_NIC_TYPE:
            yield (f"{_label(resource)} {_nic_name(interface, index)} is a {nic_type or 'default'} NIC on the RoCE "
                   f"network {_label(network)}, which takes MRDMA NICs only ({ROCE_SOURCE}); set nicType "
                   f"\"MRDMA\" or move the NIC to a regular network.")


def _check_roce_zone(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """A RoCE network serves its profile's zone: the instances using it sit there, its subnetworks in that zone's
    region."""
    if resource.type in INSTANCES:
        zone = _zone(resource)
        seen: set[str] = set()
        for interface in _interfaces(resource):
            network = _network_of(interface, ctx)
            bound = roce_zone(network) if network else None
            if network is None or bound is None or bound == zone or network.urn in seen:
                continue
            seen.add(network.urn)
            yield (f"{_label(resource)} is in zone {zone or 'unset'} but uses the RoCE network {_label(network)}, "
                   f"whose profile binds it to {bound} ({ROCE_SOURCE}); place the instance in {bound} or create "
                   f"the network with the {zone}-vpc-roce profile.")
    elif resource.type == SUBNETWORK:
        network = _find(resource.props.get("network"), ctx, NETWORK)
        bound = roce_zone(network) if network else None
        region = resource.props.get("region")
        if bound and region and _last(region) != _region(bound):
            yield (f"{_label(resource)} is in region {_last(region)} but belongs to the RoCE network "
                   f"{_label(network)}, bound to zone {bound}; create it in {_region(bound)}.")


# ---------------------------------------------------------------- strict:gcp-compact-placement

def _policy_refs(instance: PlannedResource) -> list[Any]:
    value = instance.props.get("resourcePolicies")
    return [value] if isinstance(value, str) else _items(value)


def _check_compact_placement(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != RESOURCE_POLICY:
        return
    placement = _mapping(resource.props.get("groupPlacementPolicy"))
    if str(placement.get("collocation") or "").upper() != COLLOCATED:
        return
    members = [i for i in ctx.of_type(*INSTANCES) if any(_refers(ref, resource) for ref in _policy_refs(i))]
    vm_count = placement.get("vmCount")
    vm_count = int(vm_count) if isinstance(vm_count, (int, float)) and not isinstance(vm_count, bool) else None
    largest = max(len(members), vm_count or 0)
    if largest > COMPACT_PLACEMENT_MAX_VMS:
        yield (f"{_label(resource)} would place {largest} instances, more than the {COMPACT_PLACEMENT_MAX_VMS} one "
               f"compact placement policy takes ({COMPACT_PLACEMENT_SOURCE}); split the nodes into pools of at most "
               f"{COMPACT_PLACEMENT_MAX_VMS}, each with its own policy.")
    if vm_count is not None and members and len(members) != vm_count:
        yield (f"{_label(resource)} says vmCount {vm_count} but {len(members)} planned instance(s) name it "
               f"({VM_COUNT_SOURCE}); set vmCount to {len(members)}.")
    region = _last(resource.props.get("region")) if resource.props.get("region") else None
    elsewhere = [i for i in members if region and _region(_zone(i)) not in (None, region)]
    if elsewhere:
        yield (f"{_label(resource)} is in region {region} but {', '.join(_label(i) for i in elsewhere[:4])} "
               f"{'is' if len(elsewhere) == 1 else 'are'} not ({COMPACT_PLACEMENT_SOURCE}); create the policy in "
               f"the nodes' region.")


# ---------------------------------------------------------------- strict:gcp-lustre-zone

def _check_lustre_zone(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != LUSTRE:
        return
    zone = _zone(resource)
    away = [i for i in ctx.of_type(*INSTANCES) if has_gpus(i) and _zone(i) and zone and _zone(i) != zone]
    if away:
        zones = sorted({str(_zone(i)) for i in away})
        yield (f"{_label(resource)} is in zone {zone} but {len(away)} GPU node(s) are in {', '.join(zones)} "
               f"({_label(away[0])} first): every read and checkpoint would cross zones, slower and billed as "
               f"inter-zone traffic ({LUSTRE_SOURCE}); create the Lustre instance in the nodes' zone.")


# ---------------------------------------------------------------- strict:gcp-reservation-bound

def _check_reservation_bound(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in INSTANCES:
        return
    if str(_scheduling(resource).get("provisioningModel") or "").upper() != RESERVATION_BOUND:
        return
    affinity = _mapping(resource.props.get("reservationAffinity"))
    specific = _mapping(affinity.get("specificReservation"))
    names = [v for v in _items(specific.get("values")) if isinstance(v, str) and v.strip()]
    if (str(affinity.get("type") or "").upper() != SPECIFIC_RESERVATION or specific.get("key") != RESERVATION_KEY
            or not names):
        yield (f"{_label(resource)} is RESERVATION_BOUND but names no reservation ({RESERVATION_SOURCE}); set "
               f"reservationAffinity {{type: SPECIFIC_RESERVATION, specificReservation: {{key: {RESERVATION_KEY}, "
               f"values: [<reservation name>]}}}} (the pool's capacityReservationId).")


# ---------------------------------------------------------------- strict:gcp-gpu-quota

def _quota_asks(ctx: Context) -> dict[tuple[str | None, str], list[tuple[PlannedResource, int]]]:
    """(region, quota metric) -> the instances counting against it and their GPUs. Reservation-bound instances
    count nothing: their reservation already holds the quota."""
    asks: dict[tuple[str | None, str], list[tuple[PlannedResource, int]]] = {}
    for instance in ctx.of_type(*INSTANCES):
        scheduling = _scheduling(instance)
        model = str(scheduling.get("provisioningModel") or "").upper()
        if model == RESERVATION_BOUND:
            continue
        spot = model in SPOT_MODELS or scheduling.get("preemptible") is True
        for metric, count in gpus(instance):
            key = (_region(_zone(instance)), f"{SPOT_QUOTA_PREFIX}{metric}" if spot else metric)
            asks.setdefault(key, []).append((instance, count))
    return asks


def _check_gpu_quota(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Said once per (region, quota), on its first instance: a new project's GPU quotas are often 0, and the
    first `up` fails at the nodes with QUOTA_EXCEEDED."""
    for (region, metric), asked in _quota_asks(ctx).items():
        if asked[0][0] is not resource:
            continue
        total = sum(count for _, count in asked)
        where = region or "the nodes' region"
        yield (f"{len(asked)} instance(s) ({_label(resource)} first) need {total} GPUs of quota {metric} in "
               f"{where}, and as many of {GLOBAL_GPU_QUOTA} ({QUOTA_SOURCE}); check both with `gcloud compute "
               f"regions describe {where} --format=\"value(quotas)\"` and `gcloud compute project-info describe`, "
               f"and ask for an increase before up if the limit is lower.")


# ---------------------------------------------------------------- the rule set

RULES: tuple[Rule, ...] = (
    Rule("strict:gcp-host-maintenance", "Instances with GPUs set scheduling.onHostMaintenance TERMINATE: Compute "
         "Engine cannot live-migrate them.", Severity.ERROR, _check_host_maintenance),
    Rule("strict:gcp-nic-count", "An instance declares no more network interfaces than its machine type has "
         "(A3 Mega 9, A3 Ultra and A4 10).", Severity.ERROR, _check_nic_count),
    Rule("strict:gcp-mrdma-network", "MRDMA NICs sit on a network created with a RoCE profile, and only MRDMA NICs "
         "do.", Severity.ERROR, _check_mrdma_network),
    Rule("strict:gcp-roce-zone", "A RoCE network is used from its profile's zone only: the instances using it are "
         "in that zone, its subnetworks in that zone's region.", Severity.ERROR, _check_roce_zone),
    Rule("strict:gcp-compact-placement", f"A compact (COLLOCATED) placement policy places at most "
         f"{COMPACT_PLACEMENT_MAX_VMS} instances, all in its region, and exactly its vmCount where one is set "
         "(goldenenv sets none: guardrail teardown-blocked refuses a vmCount, since each node is its own insert).",
         Severity.ERROR,
         _check_compact_placement),
    Rule("strict:gcp-reservation-bound", "A RESERVATION_BOUND instance names the reservation it consumes.",
         Severity.ERROR, _check_reservation_bound),
    Rule("strict:gcp-lustre-zone", "The Managed Lustre instance is in the GPU nodes' zone.", Severity.WARNING,
         _check_lustre_zone),
    Rule("strict:gcp-gpu-quota", "The nodes need that many GPUs of their family's regional quota (PREEMPTIBLE_ for "
         "spot and flex-start) and of GPUS_ALL_REGIONS (often 0 on a new project): said per quota, to check "
         "before up.", Severity.WARNING, _check_gpu_quota),
    user_data_rule(USER_DATA, "gcp-"),
)


def findings(resources: Iterable[PlannedResource], required_tags: Mapping[str, str]) -> list[Finding]:
    """Every deploy-readiness finding, in rule order then resource order."""
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
