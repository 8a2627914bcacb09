"""Deploy readiness on Azure (`goldenenv plan --strict`; `up` always runs it): what Azure refuses, or does badly,
only at `up`, and Pulumi's mocks let pass.

Under the mock runtime every scale set, image reference, Lustre size and tag set is accepted; Azure refuses a
single-placement-group scale set of 101 VMs, a Managed Lustre of 10 TiB or a subnet too small for it, a 51st tag,
an ND size in a zone that does not sell it - after the network and the storage account exist - or, worse, accepts an
InfiniBand pool spread over placement groups whose VMs cannot reach each other over the fabric. These rules read the
planned resources (guardrails.PlannedResource, engine form) against Azure's documented limits, written below as
sourced constants (sizes come from the catalog), and are written like the other clouds' readiness rules: each a
guardrails.Rule whose check yields one message per problem, saying what to do.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.base import UserDataLimit, user_data_rule
from goldenenv.clouds.azure import tags as azure_tags
from goldenenv.guardrails import (
    Context, Finding, PlannedResource, Rule, Severity, _items, _label, _mapping, check_rule,
)

CLOUD = "azure"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
VIRTUAL_MACHINE = "azure-native:compute:VirtualMachine"
RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
SUBNET = "azure-native:network:Subnet"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
LUSTRE = "azure-native:storagecache:AmlFilesystem"
BUDGET = "azure-native:consumption:Budget"
USER_DATA = UserDataLimit(
    65535, {SCALE_SET: "virtualMachineProfile.osProfile.customData", VIRTUAL_MACHINE: "osProfile.customData"},
    base64=True, source="https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/create-or-update "
                        "(OSProfile.customData): \"The maximum length of the binary array is 65535 bytes\"")
"""The pools' scale sets and the head VM carry cloud-init's user data as customData, base64-encoded."""

# ---------------------------------------------------------------- Azure's facts, with their sources

MAX_PLACEMENT_GROUP = 100
PLACEMENT_GROUP_SOURCE = ("pulumi-azure-native 3.x VirtualMachineScaleSet single_placement_group: \"When true this "
                          "limits the scale set to a single placement group, of max size 100 virtual machines\"; "
                          "learn.microsoft.com virtual-machine-scale-sets-placement-groups: singlePlacementGroup=False "
                          "makes a scale set of several placement groups")
IB_SOURCE = ("ND H100 v5 docs: InfiniBand \"connections are automatically configured between VMs occupying the same "
             "virtual machine scale set\"; one fabric per placement group, as CycleCloud's slurm.hpc places an IB "
             "nodearray (Azure/cyclecloud-slurm README; RESEARCH-3 2.2); Uniform, platformFaultDomainCount 1, "
             "overprovision false: jingchaozhang.github.io VMSS-Uniform-Settings-for-GPU-HPC, an Azure HPC "
             "engineer's blog, not an official page")
IB_NAMING_SOURCE = ("learn.microsoft.com vm-naming-conventions: additive feature \"r = includes RDMA (InfiniBand) "
                    "secondary network\"")
OVERPROVISION_SOURCE = ("learn.microsoft.com virtual-machine-scale-sets-design-overview: with overprovisioning on, "
                        "\"the scale set actually spins up more VMs than you asked for, then deletes the extra VMs\" "
                        "(Uniform orchestration only; on by default)")
IB_SETTINGS: Mapping[str, Any] = {"orchestrationMode": "Uniform", "singlePlacementGroup": True,
                                  "platformFaultDomainCount": 1, "overprovision": False}
"""What an InfiniBand scale set says outright (IB_SOURCE); unset follows API defaults that differ between versions."""

IMAGE_SOURCE = ("pulumi-azure-native 3.x ImageReference.version: \"Specify 'latest' to use the latest version of an "
                "image available at deploy time\"; a gallery image `id` without /versions/ is its latest version")

SPOT_PRIORITIES = frozenset({"spot", "low"})
SPOT_EVICTION = "Deallocate"
"""The eviction goldenenv's pools use (nodes.py): an evicted VM stops deallocated and keeps its disks and its place in
the scale set (and its placement group), so it restarts there; Delete removes it and its disks from the pool."""
SPOT_MAX_PRICE = -1
SPOT_SOURCE = ("learn.microsoft.com spot-vms: eviction policy Deallocate (default) or Delete; pulumi-azure-native "
               "3.x BillingProfile.max_price: \"-1 ... should not be evicted for price reasons. Also, the default "
               "max price is -1 if it is not provided\"; RESEARCH-3 2.8")


@dataclass(frozen=True)
class LustreSku:
    minimum_tib: int
    increment_tib: int


LUSTRE_SKUS: Mapping[str, LustreSku] = {
    "AMLFS-Durable-Premium-40": LustreSku(48, 48),
    "AMLFS-Durable-Premium-125": LustreSku(16, 16),
    "AMLFS-Durable-Premium-250": LustreSku(8, 8),
    "AMLFS-Durable-Premium-500": LustreSku(4, 4),
}
LUSTRE_SOURCE = ("learn.microsoft.com azure-managed-lustre create-file-system-resource-manager (ms.date 2024-08-16): "
                 "SKU, storage minimum and increment 48/16/8/4 TB; zones \"should only contain a single element\"; "
                 "maintenanceWindow required, timeOfDayUTC like 22:30; loggingContainer \"must be a separate "
                 "container in the same storage account\"; importPrefix and importPrefixesInitial together fail the "
                 "deployment. Maxima are not checked: the sources disagree (768/128/128/128 there, 1536/512/256/128 "
                 "elsewhere) and support can raise them")
LUSTRE_SUBNETS: tuple[tuple[int, int], ...] = ((16, 27), (40, 26), (92, 25), (196, 24), (400, 23))
"""(largest capacity in TiB, the widest prefix that holds it): learn.microsoft.com azure-managed-lustre
amlfs-prerequisites, "Network size requirements": 4-16 TiB /27, 20-40 /26, 44-92 /25, 96-196 /24, 200-400 /23. Beyond
400 TiB the page gives none: /23 is required and may not suffice (unverified)."""
SUBNET_SOURCE = "learn.microsoft.com azure-managed-lustre amlfs-prerequisites (Network size requirements)"
TIME_OF_DAY = re.compile(r"^([0-9]|0[0-9]|1[0-9]|2[0-3]):[0-5][0-9]$")

BUDGET_SCOPE = re.compile(r"^/subscriptions/[^/]+(/resourceGroups/[^/]+)?/?$", re.IGNORECASE)
BUDGET_SCOPE_SOURCE = ("pulumi-azure-native 3.x consumption Notification.contact_groups: \"Action groups to send the "
                       "budget notification to ... Only supported at Subscription or Resource Group scopes\"")


@dataclass(frozen=True)
class QuotaFamily:
    family: str
    """The family as `az vm list-skus` reports it (the quota's name.value)."""
    quota: str
    """The quota as the portal and `az vm list-usage` show it (name.localizedValue)."""
    verified: bool


QUOTA_FAMILIES: tuple[tuple[re.Pattern[str], QuotaFamily], ...] = (
    (re.compile(r"^Standard_ND\d+isr_H100_v5$"), QuotaFamily("standardNDSH100v5Family",
                                                             "Standard NDSH100v5 Family vCPUs", True)),
    (re.compile(r"^Standard_ND\d+isr_H200_v5$"), QuotaFamily("standardNDISRH200V5Family",
                                                             "Standard NDISRH200V5 Family vCPUs", False)),
    (re.compile(r"^Standard_ND\d+amsr_A100_v4$"), QuotaFamily("standardNDAMSv4_A100Family",
                                                              "Standard NDAMSv4_A100Family vCPUs", False)),
    (re.compile(r"^Standard_ND\d+asr_v4$"), QuotaFamily("Standard NDASv4_A100 Family",
                                                        "Standard NDASv4_A100 Family vCPUs", True)),
    (re.compile(r"^Standard_NC\d+ads_A100_v4$"), QuotaFamily("StandardNCADSA100v4Family",
                                                             "Standard NCADS_A100_v4 Family vCPUs", True)),
    (re.compile(r"^Standard_NC\d+ads_H100_v5$"), QuotaFamily("StandardNCadsH100v5Family",
                                                             "Standard NCadsH100v5 Family vCPUs", True)),
    (re.compile(r"^Standard_NC\d+as_T4_v3$"), QuotaFamily("Standard NCASv3_T4 Family",
                                                          "Standard NCASv3_T4 Family vCPUs", True)),
    (re.compile(r"^Standard_NV\d+ads_A10_v5$"), QuotaFamily("StandardNVADSA10v5Family",
                                                            "Standard NVADSA10v5 Family vCPUs", True)),
)
"""Size -> its vCPU quota family. Family names: Red Hat OpenShift's Azure install docs, "GPU Accelerated" table
(ND-H100-v5 standardNDSH100v5Family, ND-H200-v5 standardNDISRH200V5Family, NCasT4_v3 'Standard NCASv3_T4 Family',
...); quota display names: dstack's docs on Azure service quotas ("Standard NDSH100v5 Family vCPUs", "Standard
NCASv3_T4 Family vCPUs", "Standard NDAMSv4_A100Family vCPUs", ...). verified False: one of the two names was not read
(H200's display name, NDm A100's family value)."""
REGIONAL_QUOTA = "Total Regional vCPUs"
SPOT_QUOTA = "Total Regional Spot vCPUs"
QUOTA_SOURCE = ("Azure vCPU quotas are per region at two tiers, Total Regional vCPUs and the VM family's vCPUs "
                "(learn.microsoft.com resource-manager-core-quotas-request); Spot VMs count against the Spot vCPU "
                "quota, across all families (learn.microsoft.com azure-supportability spot-quota; its name as "
                "dstack's docs give it)")


# ---------------------------------------------------------------- reading the plan

def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    number = _number(value)
    return f"{number:g}" if number is not None else repr(value) if value is not None else "unset"


def _profile(scale_set: PlannedResource) -> Mapping[str, Any]:
    return _mapping(scale_set.props.get("virtualMachineProfile"))


def size(resource: PlannedResource) -> str | None:
    """The VM size of a scale set (sku.name) or VM (hardwareProfile.vmSize)."""
    value = (_mapping(resource.props.get("sku")).get("name") if resource.type == SCALE_SET
             else _mapping(resource.props.get("hardwareProfile")).get("vmSize"))
    return value if isinstance(value, str) and value else None


def capacity(scale_set: PlannedResource) -> int | None:
    number = _number(_mapping(scale_set.props.get("sku")).get("capacity"))
    return int(number) if number is not None else None


def is_infiniband(vm_size: str | None) -> bool:
    """Whether a size has an InfiniBand network: the catalog's rdma column (ib), or for a size the catalog does not
    list, the `r` among its additive features (IB_NAMING_SOURCE)."""
    if not vm_size:
        return False
    shape = catalog.instance_types(CLOUD).get(vm_size)
    if shape is not None:
        return shape.rdma == "ib"
    return bool(re.match(r"^Standard_[A-Z]+\d+(-\d+)?[a-z]*r[a-z]*(_|$)", vm_size))


def _names(resource: PlannedResource, *props: str) -> set[str]:
    values = (resource.id, resource.outputs.get("id"), resource.outputs.get("name"),
              *(resource.props.get(p) for p in props))
    return {v for v in values if isinstance(v, str) and v}


def location(resource: PlannedResource, ctx: Context) -> str | None:
    """The resource's region: its own location, else its planned resource group's."""
    own = resource.props.get("location")
    if isinstance(own, str) and own:
        return own.replace(" ", "").lower()
    group = resource.props.get("resourceGroupName")
    for rg in ctx.of_type(RESOURCE_GROUP):
        if isinstance(group, str) and group in _names(rg, "resourceGroupName"):
            found = rg.props.get("location")
            return found.replace(" ", "").lower() if isinstance(found, str) and found else None
    return None


def zones(resource: PlannedResource) -> list[str]:
    return [str(z) for z in _items(resource.props.get("zones"))]


def _catalog_zone(zone: str, region: str) -> str:
    """A catalog zone as Azure's logical zone number ("eastus-1" and "1" are both "1")."""
    return zone[len(region) + 1:] if zone.startswith(f"{region}-") else zone


# ---------------------------------------------------------------- strict:azure-placement-group

def _check_placement_group(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != SCALE_SET:
        return
    count = capacity(resource)
    single = resource.props.get("singlePlacementGroup")
    if count is not None and count > MAX_PLACEMENT_GROUP and single is not False:
        yield (f"{_label(resource)} asks for {count} VMs in a single placement group (singlePlacementGroup "
               f"{_shown(single)}), which holds at most {MAX_PLACEMENT_GROUP} ({PLACEMENT_GROUP_SOURCE}); Azure "
               f"refuses it. Split the pool into pools of at most {MAX_PLACEMENT_GROUP} nodes (goldenenv:nodes).")


# ---------------------------------------------------------------- strict:azure-infiniband-scale-set

def _says(value: Any, want: Any) -> bool:
    """Whether a property says ``want`` outright (unset says nothing)."""
    if isinstance(want, bool):
        return value is want or (isinstance(value, str) and value.strip().lower() == str(want).lower())
    if isinstance(want, int):
        return _number(value) == want
    return isinstance(value, str) and value.strip().lower() == str(want).lower()


def _check_infiniband(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != SCALE_SET or not is_infiniband(size(resource)):
        return
    wrong = [f"{key} {_shown(resource.props.get(key))} (want {_shown(want)})" for key, want in IB_SETTINGS.items()
             if not _says(resource.props.get(key), want)]
    if wrong:
        count = capacity(resource)
        split = (f", and split its {count} nodes into pools of at most {MAX_PLACEMENT_GROUP} (goldenenv:nodes)"
                 if count is not None and count > MAX_PLACEMENT_GROUP else "")
        yield (f"{_label(resource)} is an InfiniBand scale set ({size(resource)}) but sets {'; '.join(wrong)}. "
               f"Its VMs share one InfiniBand fabric only inside one placement group of one Uniform scale set, on "
               f"one fault domain, with no extra VMs launched beside them and deleted; set them as wanted{split} "
               f"({IB_SOURCE}; {OVERPROVISION_SOURCE}).")


# ---------------------------------------------------------------- strict:azure-image-version

def _image_reference(resource: PlannedResource) -> Mapping[str, Any]:
    profile = _profile(resource) if resource.type == SCALE_SET else resource.props
    return _mapping(_mapping(profile.get("storageProfile")).get("imageReference"))


def image_problem(reference: Mapping[str, Any]) -> str | None:
    """Why an image reference is not pinned to one version, or None when it is (or names no image)."""
    for key in ("id", "sharedGalleryImageId", "communityGalleryImageId"):
        value = reference.get(key)
        if isinstance(value, str) and value:
            parts = value.rstrip("/").split("/")
            if "versions" not in [p.lower() for p in parts[:-1]]:
                return f"its {key} names the gallery image, not one of its versions, so it takes the latest"
            if parts[-1].lower() == "latest":
                return f"its {key} asks for version latest"
            return None
    if not any(reference.get(k) for k in ("publisher", "offer", "sku")):
        return None
    version = reference.get("version")
    if not isinstance(version, str) or not version.strip():
        return "it names no version"
    if version.strip().lower() == "latest":
        return "its version is latest"
    return None


def _check_image_version(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != SCALE_SET:
        return
    problem = image_problem(_image_reference(resource))
    if problem:
        yield (f"{_label(resource)} boots an image that is not pinned: {problem} ({IMAGE_SOURCE}). Each VM the scale "
               f"set creates later (a scale-out, a reimage, a spot VM restored) would boot a newer image than the "
               f"others, with another driver and NCCL than the lock was checked against; pin the version "
               f"(publisher:offer:sku:version, or a gallery image's /versions/<version> id).")


# ---------------------------------------------------------------- strict:azure-spot

def _check_spot(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != SCALE_SET:
        return
    profile = _profile(resource)
    if str(profile.get("priority") or "").lower() not in SPOT_PRIORITIES:
        return
    eviction = profile.get("evictionPolicy")
    if eviction is not None and str(eviction).lower() != SPOT_EVICTION.lower():
        yield (f"{_label(resource)} evicts its spot VMs with policy {eviction}: an evicted VM is deleted with its "
               f"disks and leaves the scale set, so the pool shrinks until the next up ({SPOT_SOURCE}); set "
               f"evictionPolicy {SPOT_EVICTION}, which stops it deallocated, in place, to restart.")
    price = _number(_mapping(profile.get("billingProfile")).get("maxPrice"))
    if price is not None and price != SPOT_MAX_PRICE:
        yield (f"{_label(resource)} caps the spot price at {price:g} USD/hour: Azure evicts the VMs whenever the "
               f"spot price rises above it, and refuses to create them while it is above ({SPOT_SOURCE}); set "
               f"billingProfile.maxPrice {SPOT_MAX_PRICE} (pay up to the on-demand price, evicted only for "
               f"capacity).")


# ---------------------------------------------------------------- strict:azure-lustre

def _account(resource_id: Any) -> str | None:
    match = re.search(r"/storageAccounts/([^/]+)/", str(resource_id or ""), re.IGNORECASE)
    return match.group(1).lower() if match else None


def lustre_problems(props: Mapping[str, Any]) -> list[str]:
    """Why Azure would refuse a Managed Lustre file system's settings (engine form); empty when it takes them."""
    found = []
    sku = _mapping(props.get("sku")).get("name")
    tib = _number(props.get("storageCapacityTiB"))
    spec = LUSTRE_SKUS.get(sku) if isinstance(sku, str) else None
    if spec is None:
        found.append(f"sku {sku!r} is none of {', '.join(LUSTRE_SKUS)}")
    elif tib is not None and (tib < spec.minimum_tib or tib % spec.increment_tib):
        low = max(spec.minimum_tib, int(tib // spec.increment_tib) * spec.increment_tib)
        found.append(f"storageCapacityTiB {tib:g} is not a multiple of {spec.increment_tib} TiB from "
                     f"{spec.minimum_tib} TiB, as {sku} takes (e.g. {low} or {low + spec.increment_tib})")
    if len(zones_of := [str(z) for z in _items(props.get("zones"))]) != 1:
        found.append(f"zones {zones_of or 'unset'} must name exactly one zone")
    window = _mapping(props.get("maintenanceWindow"))
    if not window.get("dayOfWeek"):
        found.append("maintenanceWindow.dayOfWeek is unset (Sunday ... Saturday)")
    time = window.get("timeOfDayUTC")
    if not isinstance(time, str) or not TIME_OF_DAY.match(time):
        found.append(f"maintenanceWindow.timeOfDayUTC {time!r} is not a 24-hour HH:MM time (e.g. \"22:30\")")
    settings = _mapping(_mapping(props.get("hsm")).get("settings"))
    container, logging = settings.get("container"), settings.get("loggingContainer")
    if container and not logging:
        found.append("hsm.settings names a container but no loggingContainer")
    if container and logging and str(container).lower() == str(logging).lower():
        found.append("hsm.settings.loggingContainer is the data container itself; it must be another container")
    elif _account(container) and _account(logging) and _account(container) != _account(logging):
        found.append(f"hsm.settings.loggingContainer is in storage account {_account(logging)}, the data container "
                     f"in {_account(container)}; both must be in the same account")
    if settings.get("importPrefix") and settings.get("importPrefixesInitial"):
        found.append("hsm.settings sets both importPrefix and importPrefixesInitial; keep one")
    return found


def subnet_prefix_needed(capacity_tib: float) -> int:
    """The widest subnet prefix length that holds a Managed Lustre file system of this capacity (LUSTRE_SUBNETS)."""
    return next((prefix for largest, prefix in LUSTRE_SUBNETS if capacity_tib <= largest), LUSTRE_SUBNETS[-1][1])


def _subnet_of(lustre: PlannedResource, ctx: Context) -> PlannedResource | None:
    value = lustre.props.get("filesystemSubnet")
    return next((s for s in ctx.of_type(SUBNET) if isinstance(value, str) and value in _names(s)), None)


def _prefix_lengths(subnet: PlannedResource) -> list[int]:
    found = []
    for text in [subnet.props.get("addressPrefix"), *_items(subnet.props.get("addressPrefixes"))]:
        try:
            found.append(ipaddress.ip_network(str(text), strict=False).prefixlen)
        except ValueError:
            continue
    return found


def _check_lustre(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != LUSTRE:
        return
    problems = lustre_problems(resource.props)
    if problems:
        yield f"{_label(resource)}: {'; '.join(problems)} ({LUSTRE_SOURCE})."
    tib = _number(resource.props.get("storageCapacityTiB"))
    subnet = _subnet_of(resource, ctx)
    lengths = _prefix_lengths(subnet) if subnet is not None else []
    if tib is not None and lengths and min(lengths) > subnet_prefix_needed(tib):
        need = subnet_prefix_needed(tib)
        yield (f"{_label(resource)} of {tib:g} TiB needs a /{need} subnet or larger ({SUBNET_SOURCE}), but its "
               f"subnet {_label(subnet)} is a /{min(lengths)}, and the file system cannot move to another subnet "
               f"later; widen goldenenv:network.cidr (the Lustre subnet is sized from it) or shrink "
               f"goldenenv:storage.parallelFs.")


def _check_lustre_zone(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != LUSTRE or len(zones(resource)) != 1:
        return
    zone = zones(resource)[0]
    away = [s for s in ctx.of_type(SCALE_SET) if zones(s) and zone not in zones(s)]
    if away:
        yield (f"{_label(resource)} is in zone {zone} but {len(away)} scale set(s) are in zone(s) "
               f"{', '.join(sorted({z for s in away for z in zones(s)}))} ({_label(away[0])} first): every read and "
               f"checkpoint would cross zones, slower and billed; create the file system in the nodes' zone.")


# ---------------------------------------------------------------- strict:azure-tag-limits

def _check_tag_limits(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if not resource.custom or not resource.type.startswith("azure-native:"):
        return
    tag_set = resource.props.get("tags")
    if not isinstance(tag_set, Mapping):
        return
    problems = azure_tags.problems(tag_set, storage_account=resource.type == STORAGE_ACCOUNT)
    if problems:
        yield f"{_label(resource)} tags: {'; '.join(problems)} ({azure_tags.LIMITS_SOURCE})."


# ---------------------------------------------------------------- strict:azure-size-zone

def _check_size_zone(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type not in (SCALE_SET, VIRTUAL_MACHINE):
        return
    vm_size, region = size(resource), location(resource, ctx)
    sold = catalog.type_zones(CLOUD, vm_size) if vm_size else {}
    if not sold or not region:
        return  # the catalog knows nothing of the size, or the region is unknown until deployment
    if region not in sold:
        yield (f"{_label(resource)} asks for {vm_size} in {region}, which does not sell it (catalog "
               f"type_zones.csv); regions that do: {', '.join(sorted(sold))}. Change goldenenv:region.")
        return
    offered = {_catalog_zone(z, region) for z in sold[region]}
    missing = [z for z in zones(resource) if z not in offered]
    if missing:
        yield (f"{_label(resource)} asks for {vm_size} in zone(s) {', '.join(missing)} of {region}, which do not "
               f"sell it (catalog type_zones.csv); zones that do: {', '.join(sorted(offered))}. Change "
               f"goldenenv:zone.")


# ---------------------------------------------------------------- strict:azure-budget-scope

def _check_budget_scope(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    if resource.type != BUDGET:
        return
    scope = resource.props.get("scope")
    notes = _mapping(resource.props.get("notifications")).values()
    if isinstance(scope, str) and scope and any(_items(_mapping(n).get("contactGroups")) for n in notes) \
            and not BUDGET_SCOPE.match(scope):
        yield (f"{_label(resource)} routes its alerts to action groups but its scope is {scope!r} "
               f"({BUDGET_SCOPE_SOURCE}); scope it to the subscription or the stack's resource group.")


# ---------------------------------------------------------------- strict:azure-gpu-quota

def quota_family(vm_size: str) -> QuotaFamily | None:
    return next((family for pattern, family in QUOTA_FAMILIES if pattern.match(vm_size)), None)


def _quota_asks(ctx: Context) -> dict[tuple[str | None, str], list[tuple[PlannedResource, int, str]]]:
    """(region, quota) -> the scale sets counting against it, with their VM counts and sizes."""
    asks: dict[tuple[str | None, str], list[tuple[PlannedResource, int, str]]] = {}
    for scale_set in ctx.of_type(SCALE_SET):
        vm_size, count = size(scale_set), capacity(scale_set)
        if not vm_size or not count:
            continue
        spot = str(_profile(scale_set).get("priority") or "").lower() in SPOT_PRIORITIES
        family = quota_family(vm_size)
        quota = SPOT_QUOTA if spot else family.quota if family else f"the {vm_size} family's vCPUs"
        asks.setdefault((location(scale_set, ctx), quota), []).append((scale_set, count, vm_size))
    return asks


def _vcpus(vm_size: str) -> int | None:
    shape = catalog.instance_types(CLOUD).get(vm_size)
    return shape.vcpus if shape is not None else None


def _check_gpu_quota(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    """Said once per (region, quota), on its first scale set: a new subscription's GPU family quotas are often 0,
    and the first `up` fails at the nodes with a quota error."""
    for (region, quota), asked in _quota_asks(ctx).items():
        if asked[0][0] is not resource:
            continue
        where = region or "the nodes' region"
        per = [(_vcpus(s), n, s) for _, n, s in asked]
        known = [v * n for v, n, _ in per if v is not None]
        sizes = ", ".join(f"{n} x {s}" for _, n, s in per)
        amount = (f"{sum(known)} vCPUs" if len(known) == len(per)
                  else f"{sum(n for _, n, _ in per)} VMs ({sizes}; vCPUs not in the catalog)")
        spot = quota == SPOT_QUOTA
        families = {quota_family(s) for _, _, s in asked} - {None}
        named = "; ".join(f"family {f.family}" + ("" if f.verified else " (name unverified)")
                          for f in families if isinstance(f, QuotaFamily))
        unknown = [s for _, _, s in asked if quota_family(s) is None]
        hint = (f"; the family of {', '.join(unknown)} is unverified: `az vm list-skus --size {unknown[0]} --query "
                f"\"[].family\"` names it" if unknown else "")
        also = "" if spot else f", and as many of {REGIONAL_QUOTA}"
        yield (f"{len(asked)} scale set(s) ({_label(resource)} first: {sizes}) need {amount} of quota "
               f"\"{quota}\" in {where}{also}{f' ({named})' if named and not spot else ''} ({QUOTA_SOURCE}){hint}. "
               f"Check with `az vm list-usage --location {where} -o table` and ask for an increase before up if "
               f"the limit is lower.")


# ---------------------------------------------------------------- the rule set

RULES: tuple[Rule, ...] = (
    Rule("strict:azure-placement-group", f"A scale set in a single placement group holds at most "
         f"{MAX_PLACEMENT_GROUP} VMs.", Severity.ERROR, _check_placement_group),
    Rule("strict:azure-infiniband-scale-set", "An InfiniBand scale set is Uniform, in one placement group, one "
         "fault domain, without overprovisioning: its VMs share one fabric.", Severity.ERROR, _check_infiniband),
    Rule("strict:azure-image-version", "A scale set's image reference is pinned to one version (not latest).",
         Severity.ERROR, _check_image_version),
    Rule("strict:azure-spot", "Spot scale sets evict to Deallocate and pay up to the on-demand price "
         "(billingProfile.maxPrice -1).", Severity.ERROR, _check_spot),
    Rule("strict:azure-lustre", "Managed Lustre has one of the four SKUs, a capacity its SKU takes, one zone, a "
         "maintenance window, a valid Blob link, and a subnet large enough for its capacity.", Severity.ERROR,
         _check_lustre),
    Rule("strict:azure-lustre-zone", "Managed Lustre is in the GPU nodes' zone.", Severity.WARNING,
         _check_lustre_zone),
    Rule("strict:azure-tag-limits", f"A resource carries at most {azure_tags.MAX_TAGS} tags, with names and values "
         f"Azure takes.", Severity.ERROR, _check_tag_limits),
    Rule("strict:azure-size-zone", "The nodes' size is sold in their region and zone (catalog type_zones.csv).",
         Severity.ERROR, _check_size_zone),
    Rule("strict:azure-budget-scope", "A budget that alerts action groups is scoped to a subscription or resource "
         "group.", Severity.ERROR, _check_budget_scope),
    Rule("strict:azure-gpu-quota", "The nodes need that many vCPUs of their family's regional quota (or of the "
         "regional Spot quota) and of Total Regional vCPUs, often 0 on a new subscription: said per quota, to check "
         "before up.", Severity.WARNING, _check_gpu_quota),
    user_data_rule(USER_DATA, "azure-"),
)


def findings(resources: Iterable[PlannedResource], required_tags: Mapping[str, str]) -> list[Finding]:
    """Every deploy-readiness finding, in rule order then resource order."""
    ctx = Context(tuple(resources), dict(required_tags))
    return [finding for rule in RULES for finding in check_rule(rule, ctx)]
