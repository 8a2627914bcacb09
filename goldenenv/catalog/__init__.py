"""Facts as data: typed, lazily loaded views of the catalog's CSV files.

A table's rows are read from data/<table>.csv (rows of no cloud or fabric) and from each cloud's and fabric's
folder, with `cloud` or `fabric` filled in (goldenenv.catalog.files). Every row carries a source. Code asks the
catalog; no GPU count, price or driver minimum is written anywhere else. Files are read on first use and cached
for the process.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from goldenenv.catalog import files

rows, tables, cloud_folders, fabric_folders, _read = (files.rows, files.tables, files.cloud_folders,
                                                     files.fabric_folders, files._read)
"""The reader's functions under the names callers use (catalog.rows, catalog.tables)."""

UNVERIFIED = "(unverified)"


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str
    memory_gib: int
    source: str


@dataclass(frozen=True)
class InstanceType:
    cloud: str
    name: str
    gpu: Gpu
    gpu_count: int
    vcpus: int
    memory_gib: float
    network_cards: int
    rdma: str
    """efa | erdma | none"""
    rdma_interfaces: int
    local_nvme_count: int
    local_nvme_gib: int
    network_gbps: float
    source: str

    @property
    def has_rdma(self) -> bool:
        return self.rdma != "none" and self.rdma_interfaces > 0


@dataclass(frozen=True)
class Price:
    cloud: str
    instance_type: str
    region: str
    capacity: str
    usd_per_hour: float
    """The hourly price in `currency` (the column's name predates prices in other currencies than USD)."""
    as_of: str
    source: str
    currency: str = "USD"
    """ISO 4217: USD, or CNY for Alibaba's China site."""

    @property
    def verified(self) -> bool:
        return UNVERIFIED not in self.source


@dataclass(frozen=True)
class EnvSetting:
    fabric: str
    variable: str
    value: str
    condition: str
    source: str


@dataclass(frozen=True)
class BusbwReference:
    instance_type: str
    nodes: int
    message_bytes: int
    busbw_gbytes_per_s: float
    kind: str
    """reference (a measured figure to compare with) | floor (a minimum that must be met)"""
    source: str


@functools.cache
def gpus() -> dict[str, Gpu]:
    return {
        r["gpu"]: Gpu(r["gpu"], r["arch"], int(r["memory_gib"]), r["source"])
        for r in _read("gpus")
    }


@functools.cache
def _instance_types() -> dict[tuple[str, str], InstanceType]:
    table = gpus()
    return {
        (r["cloud"], r["instance_type"]): InstanceType(
            cloud=r["cloud"],
            name=r["instance_type"],
            gpu=table[r["gpu"]],
            gpu_count=int(r["gpu_count"]),
            vcpus=int(r["vcpus"]),
            memory_gib=float(r["memory_gib"]),
            network_cards=int(r["network_cards"]),
            rdma=r["rdma"],
            rdma_interfaces=int(r["rdma_interfaces"]),
            local_nvme_count=int(r["local_nvme_count"]),
            local_nvme_gib=int(r["local_nvme_gib"]),
            network_gbps=float(r["network_gbps"]),
            source=r["source"],
        )
        for r in _read("instance_types")
    }


def instance_types(cloud: str) -> dict[str, InstanceType]:
    return {name: it for (c, name), it in _instance_types().items() if c == cloud}


def instance_type(cloud: str, name: str) -> InstanceType:
    """The catalog's entry; KeyError when the cloud does not list it.

    Names are the ones the cloud's API takes (Alibaba's carry the `ecs.` prefix: ecs.ebmgn8v.48xlarge); a name
    written without its cloud's prefix (type_prefixes.csv) resolves to the same entry, whose `name` is the API's.
    """
    found = _instance_types().get((cloud, name))
    for prefix in type_prefixes().get(cloud, ()):
        if found is None and not name.startswith(prefix):
            found = _instance_types().get((cloud, f"{prefix}{name}"))
    if found is None:
        raise KeyError((cloud, name))
    return found


@functools.cache
def type_prefixes() -> dict[str, tuple[str, ...]]:
    """Cloud -> the prefixes its API's instance type names carry and users may leave out (type_prefixes.csv in the
    cloud's catalog folder: Alibaba's `ecs.`)."""
    found: dict[str, tuple[str, ...]] = {}
    for r in _read("type_prefixes"):
        found[r["cloud"]] = (*found.get(r["cloud"], ()), r["prefix"])
    return found


@dataclass(frozen=True)
class FabricRate:
    """What NCCL's network transport has between nodes of a type (each cloud's fabric_rates.csv): the RDMA fabric's
    ports (instance_types.csv rdma_interfaces) times each port's rate. The Ethernet front-end NIC that the type's
    network_gbps also counts (Azure's ND sizes, Google's host gVNICs) carries no NCCL traffic and is left out."""

    cloud: str
    instance_type: str
    ports: int
    port_gbps: float
    link: str
    """The port's kind as people name it: NDR InfiniBand, EFAv2, eRDMA, GPUDirect-TCPXO gVNIC."""
    nccl_gbps: float
    """ports × port_gbps, written out in the file so that a reader sees the figure the estimator uses."""
    source: str

    def describe(self) -> str:
        return f"{self.ports} × {self.port_gbps:g} Gb/s {self.link} = {self.nccl_gbps:g} Gb/s"


@functools.cache
def _fabric_rates() -> dict[tuple[str, str], FabricRate]:
    types = _instance_types()
    return {
        (r["cloud"], r["instance_type"]): FabricRate(
            r["cloud"], r["instance_type"], types[(r["cloud"], r["instance_type"])].rdma_interfaces,
            float(r["port_gbps"]), r["link"], float(r["nccl_gbps"]), r["source"])
        for r in _read("fabric_rates")
    }


def fabric_rate(cloud: str, instance_type_name: str) -> FabricRate | None:
    """The type's RDMA fabric rate as NCCL uses it; None for a type without a fabric (or without a row yet: the
    catalog test requires one for every type with a fabric)."""
    return _fabric_rates().get((cloud, instance_type(cloud, instance_type_name).name))


@dataclass(frozen=True)
class HeadType:
    """A CPU instance type the Slurm head runs on (data/head_types.csv): small, on demand, no GPU."""

    cloud: str
    name: str
    vcpus: int
    memory_gib: float
    arch: str
    source: str


@functools.cache
def _head_types() -> dict[tuple[str, str], HeadType]:
    return {(r["cloud"], r["instance_type"]): HeadType(r["cloud"], r["instance_type"], int(r["vcpus"]),
                                                       float(r["memory_gib"]), r["arch"], r["source"])
            for r in _read("head_types")}


def head_type(cloud: str, name: str) -> HeadType | None:
    """The catalog's row for a head instance type, or None when it lists none (the head is then not priced)."""
    return _head_types().get((cloud, name))


@functools.cache
def _prices() -> tuple[Price, ...]:
    return tuple(
        Price(
            r["cloud"], r["instance_type"], r["region"], r["capacity"],
            float(r["usd_per_hour"]), r["as_of"], r["source"], r["currency"],
        )
        for r in _read("prices")
    )


def price(cloud: str, instance_type: str, region: str, capacity: str = "on-demand") -> Price | None:
    """The type's price in this region; None when the catalog has none there. Prices differ by region (AWS's
    p5.48xlarge, for one), so another region's row is never taken for this one: see price_elsewhere for a hint."""
    return next((p for p in _prices() if (p.cloud, p.instance_type, p.region, p.capacity)
                 == (cloud, instance_type, region, capacity)), None)


def price_elsewhere(cloud: str, instance_type: str, region: str, capacity: str = "on-demand") -> Price | None:
    """The type's first price row in a region other than `region`: a hint to show beside a missing price (the
    estimate, a refusal's message), never a price to count."""
    return next((p for p in _prices() if (p.cloud, p.instance_type, p.capacity) == (cloud, instance_type, capacity)
                 and p.region != region), None)


def fabric_env(fabric: str, versions: dict[str, str] | None = None) -> dict[str, str]:
    """NCCL environment for a fabric; rows with a version condition apply only when the versions say so."""
    env: dict[str, str] = {}
    for r in _read("fabric_env"):
        if r["fabric"] == fabric and condition_holds(r["condition"], versions or {}):
            env[r["variable"]] = r["value"]
    return env


_CLAUSE = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|<|>)\s*([0-9][0-9.]*)\s*$")


def condition_holds(condition: str, versions: dict[str, str]) -> bool:
    """`always`, or clauses like `aws_ofi_nccl<=1.5.0` joined by ` or `; unknown versions never match."""
    if condition.strip() == "always":
        return True
    for clause in condition.split(" or "):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"unreadable condition clause {clause!r} in catalog fabric_env.csv")
        component, op, wanted = m.groups()
        have = versions.get(component)
        if have is None:
            continue
        a, b = version_tuple(have), version_tuple(wanted)
        if {"<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op]:
            return True
    return False


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


@dataclass(frozen=True)
class HostImage:
    """A pinned machine image for GPU nodes and what it carries (driver first: the lock is checked against it)."""

    cloud: str
    name: str
    ami_name: str
    """Exact public image name (looked up by name and owner when no id is listed for the region)."""
    owner: str
    region: str
    """`*` when the image is found by name in every region."""
    image_id: str
    released: str
    os: str
    kernel: str
    nvidia_driver: str
    cuda: str
    efa_installer: str
    lustre_client: str
    container_toolkit: str
    docker: str
    instance_store_unit: str
    """The host image's own service that claims the instance-store disks at boot (the DLAMI's dlami-nvme.service);
    empty: the disks are left bare and goldenenv stripes them itself."""
    instance_store_mount: str
    """Where that service mounts the instance store (/opt/dlami/nvme); empty with no such service."""
    source: str
    kernel_modules: str
    """The kernel modules a fabric declares (goldenenv.fabrics kernel_modules) that the image carries, as lsmod names
    them, space-separated; a module not listed is one the image lacks, and a pool of that fabric is refused on it."""
    npu_driver: str = ""
    """The Ascend NPU driver the image carries (Huawei's Snt9B images: 23.0.6); empty: none, or the catalog does not
    say. A column only Huawei's host_images.csv has: the other clouds' files read it as empty."""

    @property
    def modules(self) -> frozenset[str]:
        return frozenset(self.kernel_modules.split())


@functools.cache
def _host_images() -> tuple[HostImage, ...]:
    return tuple(HostImage(**{k: r[k] for k in HostImage.__dataclass_fields__}) for r in _read("host_images"))


def host_images(cloud: str) -> dict[str, HostImage]:
    """Every pinned host image of a cloud, newest release first."""
    listed = sorted((h for h in _host_images() if h.cloud == cloud), key=lambda h: h.released, reverse=True)
    return {h.name: h for h in listed}


def host_image(cloud: str, region: str, name: str | None = None) -> HostImage | None:
    """The named host image, or the cloud's newest one usable in this region; None when the catalog has none."""
    usable = [h for h in host_images(cloud).values() if h.region in ("*", region)]
    if name is not None:
        usable = [h for h in usable if h.name == name]
    return usable[0] if usable else None


@dataclass(frozen=True)
class NodeLayout:
    """How a cloud places a type's nodes together and sizes their RDMA interfaces (data/node_layout.csv)."""

    cloud: str
    instance_type: str
    placement: str
    """low-latency-set (Alibaba deployment set, LowLatency) | hpc-cluster (E-HPC, SCC types) | compact (a Google
    COLLOCATED placement policy) | scale-set (one Azure scale set's single placement group: its InfiniBand fabric)
    | none (zone only)"""
    queue_pairs: int
    """Queue pairs asked for on each RDMA interface (0: the type has none)."""
    jumbo_frames: bool
    source: str


@functools.cache
def _node_layouts() -> dict[tuple[str, str], NodeLayout]:
    return {
        (r["cloud"], r["instance_type"]): NodeLayout(
            r["cloud"], r["instance_type"], r["placement"], int(r["queue_pairs"]), r["jumbo_frames"] == "yes",
            r["source"],
        )
        for r in _read("node_layout")
    }


def node_layout(cloud: str, instance_type: str) -> NodeLayout | None:
    """The type's placement and RDMA interface sizing, or None when the catalog has no row for it."""
    return _node_layouts().get((cloud, instance_type))


@dataclass(frozen=True)
class RegionZones:
    cloud: str
    region: str
    zones: tuple[str, ...]
    complete: bool
    """True: the region has no other zones (an unlisted zone is wrong); False: the list is what is known."""
    source: str


def zones(cloud: str, region: str) -> RegionZones | None:
    """The zones the catalog knows in a region (data/zones.csv), or None when it lists none."""
    for r in _read("zones"):
        if (r["cloud"], r["region"]) == (cloud, region):
            return RegionZones(cloud, region, tuple(r["zones"].split()), r["complete"] == "yes", r["source"])
    return None


def zone_form(cloud: str) -> str:
    """How a cloud writes a zone of a region, as a format of {region} (zone_forms.csv: AWS "{region}a", Google
    "{region}-a"); "" for a cloud whose folder says none (a cloud without zones, or one goldenenv does not know)."""
    return next((r["form"] for r in _read("zone_forms") if r["cloud"] == cloud), "")


def zone_example(cloud: str, region: str) -> str | None:
    """A zone of `region` as `cloud` writes it, for messages: the catalog's first of the region (zones.csv), else
    the cloud's form (zone_forms.csv); None where the catalog knows neither."""
    known = zones(cloud, region)
    if known and known.zones:
        return known.zones[0]
    form = zone_form(cloud)
    return form.format(region=region) if form else None


def type_zones(cloud: str, instance_type: str) -> dict[str, tuple[str, ...]]:
    """The zones that sell an instance type, by region (data/type_zones.csv); {} when the catalog lists none.

    A subset of the region's zones (data/zones.csv): GPU types sell in a few zones of a region only.
    """
    return {r["region"]: tuple(r["zones"].split()) for r in _read("type_zones")
            if (r["cloud"], r["instance_type"]) == (cloud, instance_type)}


@dataclass(frozen=True)
class FabricMtu:
    """The interface MTU a fabric runs at, with or without jumbo frames, and the NCCL protocols that MTU carries."""

    fabric: str
    jumbo_frames: bool
    mtu: int
    nccl_proto: str
    """NCCL_PROTO to set ("" leaves NCCL's own choice)."""
    source: str


def fabric_mtu(fabric: str, jumbo_frames: bool) -> FabricMtu | None:
    """The fabric's fabric_mtu row (goldenenv/fabrics/<fabric>/catalog/), or None when the fabric sets no MTU."""
    for r in _read("fabric_mtu"):
        if r["fabric"] == fabric and (r["jumbo_frames"] == "yes") == jumbo_frames:
            return FabricMtu(fabric, jumbo_frames, int(r["mtu"]), r["nccl_proto"], r["source"])
    return None


@dataclass(frozen=True)
class ColdStartTerm:
    cloud: str
    term: str
    value: float
    unit: str
    source: str


@functools.cache
def cold_start_terms(cloud: str) -> dict[str, ColdStartTerm]:
    """Figures for the boot-to-torchrun model (boot time, pull rate, target), by term."""
    return {
        r["term"]: ColdStartTerm(r["cloud"], r["term"], float(r["value"]), r["unit"], r["source"])
        for r in _read("cold_start") if r["cloud"] in (cloud, "*")
    }


@functools.cache
def busbw_references() -> tuple[BusbwReference, ...]:
    return tuple(
        BusbwReference(
            r["instance_type"], int(r["nodes"]), int(r["message_bytes"]),
            float(r["busbw_gbytes_per_s"]), r["kind"], r["source"],
        )
        for r in _read("busbw_refs")
    )


@dataclass(frozen=True)
class LocalNvmeDevice:
    """How a node tells its local NVMe disks from its OS and data disks (data/local_nvme_devices.csv): the
    model lsblk reports for them, and the /dev/disk/by-id names the cloud's udev rules give them."""

    cloud: str
    instance_types: str
    """A glob of the instance types the row covers (`*`: every type of the cloud)."""
    lsblk_model: str
    """An extended regular expression the whole model (trailing blanks dropped) must match; empty: none known."""
    by_id_glob: str
    """A glob of names under /dev/disk/by-id, each a link to one local disk; empty: none known."""
    source: str

    @property
    def known(self) -> bool:
        return bool(self.lsblk_model or self.by_id_glob)


def local_nvme_device(cloud: str, instance_type: str) -> LocalNvmeDevice | None:
    """The local NVMe identity of an instance type: its own row if one names it, else its cloud's `*` row; None when
    the catalog has neither."""
    import fnmatch

    rows = [LocalNvmeDevice(r["cloud"], r["instance_types"], r["lsblk_model"], r["by_id_glob"], r["source"])
            for r in _read("local_nvme_devices") if r["cloud"] == cloud]
    matching = [r for r in rows if fnmatch.fnmatchcase(instance_type, r.instance_types)]
    return min(matching, key=lambda r: r.instance_types == "*", default=None)


@dataclass(frozen=True)
class LocalShape:
    """A node of the local cluster: a container with these limits running this many ranks."""

    name: str
    cpus: float
    memory_gib: float
    processes_per_node: int
    standin_gpus: int
    """GPUs the node offers Slurm: stand-ins (/dev/null at /dev/nvidia<n>) that compute nothing, so the scheduler's
    GPU accounting, GPU-minute limits and job costs run on the local stack as they do on a cloud."""
    notional_price_per_gpu_hour: float
    """A made-up USD rate per stand-in GPU-hour, for showing what jobs cost (`goldenenv cost`); never a bill."""
    source: str


@functools.cache
def local_shapes() -> dict[str, LocalShape]:
    return {
        r["shape"]: LocalShape(r["shape"], float(r["cpus"]), float(r["memory_gib"]),
                               int(r["processes_per_node"]), int(r["standin_gpus"]),
                               float(r["notional_usd_per_gpu_hour"]), r["source"])
        for r in _read("local_shapes")
    }


def container_clouds() -> frozenset[str]:
    """The clouds whose nodes are containers on this machine, with no GPU: those whose catalog folder lists their
    shapes (local_shapes.csv)."""
    return frozenset(r["cloud"] for r in _read("local_shapes"))


@dataclass(frozen=True)
class NodeSlots:
    """What one node of a pool offers a job: its GPUs, and the ranks a job starts on it when it says none."""

    gpus: int
    processes: int


def node_slots(cloud: str, name: str) -> NodeSlots:
    """A container shape's own ranks (processes_per_node) and its stand-in GPUs (they compute nothing: the ranks are
    the shape's); else the instance type's GPUs, one rank per GPU (one on a node without). KeyError when the catalog
    lists neither."""
    if cloud in container_clouds():
        shape = local_shapes()[name]
        return NodeSlots(shape.standin_gpus, shape.processes_per_node)
    gpus = instance_type(cloud, name).gpu_count
    return NodeSlots(gpus, gpus or 1)


@dataclass(frozen=True)
class ServicePrice:
    """A storage or network price (data/storage_prices.csv, data/network_prices.csv): `price` in `currency` per
    `unit` (GB-month, hour, GB) of `item` at `tier` (a throughput in MB/s per TiB, a volume type, a class)."""

    cloud: str
    region: str
    item: str
    tier: str
    unit: str
    price: float
    currency: str
    as_of: str
    source: str

    @property
    def verified(self) -> bool:
        return UNVERIFIED not in self.source


@functools.cache
def _service_prices(table: str) -> tuple[ServicePrice, ...]:
    return tuple(
        ServicePrice(r["cloud"], r["region"], r["item"], r["tier"], r["unit"], float(r["price"]), r["currency"],
                     r["as_of"], r["source"])
        for r in _read(table)
    )


def service_price(table: str, cloud: str, item: str, region: str, tier: str = "") -> ServicePrice | None:
    """The item's price in this region if the table has it, else the same item's price in another region."""
    candidates = [p for p in _service_prices(table) if (p.cloud, p.item, p.tier) == (cloud, item, tier)]
    exact = [p for p in candidates if p.region == region]
    return (exact or candidates or [None])[0]


def boot_volume_tier(cloud: str) -> str:
    """The block-volume tier a cloud's nodes and head boot from, as storage_prices.csv names it (the cloud's
    boot_volumes.csv: AWS's gp3); "" when the cloud lists none, whose block-volume row without a tier is then the
    price of its boot disks."""
    return next((r["tier"] for r in _read("boot_volumes") if r["cloud"] == cloud), "")


def spot_price(cloud: str, instance_type: str, region: str) -> Price | None:
    """A dated spot snapshot (data/spot_prices.csv) as a Price with capacity `spot` and `as_of` the snapshot's date;
    None when the table has none for the type in this region (another region's snapshot is not this region's price).
    Spot prices move by the hour: the row is a snapshot, not a quote."""
    return next((Price(r["cloud"], r["instance_type"], r["region"], "spot", float(r["usd_per_hour"]), r["snapshot"],
                       r["source"], r["currency"])
                 for r in _read("spot_prices") if (r["cloud"], r["instance_type"], r["region"])
                 == (cloud, instance_type, region)), None)


@dataclass(frozen=True)
class GpuPeak:
    """A GPU's peak dense BF16 tensor throughput, the denominator of model FLOPs utilisation (MFU)."""

    gpu: str
    bf16_dense_tflops: float
    source: str


@functools.cache
def gpu_peak_tflops() -> dict[str, GpuPeak]:
    """data/gpu_peak_tflops.csv by catalog GPU name."""
    return {r["gpu"]: GpuPeak(r["gpu"], float(r["bf16_dense_tflops"]), r["source"]) for r in _read("gpu_peak_tflops")}


@dataclass(frozen=True)
class DeepspeedOp:
    op: str
    build_var: str
    """setup.py pre-compiles the op when this variable is 1 (DS_BUILD_FUSED_ADAM ...)."""
    kind: str
    """cuda (nvcc, for the lock's archs) | cpu (the host C++ compiler, for the lock's cpuArch)"""
    module: str
    """The compiled extension DeepSpeed imports when the op was pre-built."""
    source: str


@functools.cache
def deepspeed_ops() -> dict[str, DeepspeedOp]:
    """DeepSpeed's ops that an image can pre-build, by the name ds_report shows."""
    return {r["op"]: DeepspeedOp(**r) for r in _read("deepspeed_ops")}


@dataclass(frozen=True)
class VcpuQuota:
    """The EC2 Service Quotas quota an instance family's vCPUs count against (AWS's aws_vcpu_quotas.csv): EC2
    limits running On-Demand and requested Spot capacity in vCPUs per family group, per region."""

    family: str
    """The instance type's family letters: p for p5.48xlarge, g for g6e.48xlarge, vt for vt1.3xlarge."""
    market: str
    """on-demand | spot"""
    name: str
    code: str
    """The Service Quotas quota code (service code ec2), e.g. L-417A185B."""
    source: str

    @property
    def verified(self) -> bool:
        return UNVERIFIED not in self.source


def instance_family(instance_type: str) -> str:
    """The family letters EC2's vCPU quotas group by: `p` for p5.48xlarge and p6-b200.48xlarge, `vt` for vt1."""
    match = re.match(r"[a-z]+", instance_type.lower())
    return match.group(0) if match else ""


@functools.cache
def _vcpu_quotas() -> dict[tuple[str, str], VcpuQuota]:
    return {(r["family"], r["market"]): VcpuQuota(r["family"], r["market"], r["quota_name"], r["quota_code"],
                                                  r["source"])
            for r in _read("aws_vcpu_quotas")}


def vcpu_quota(instance_type: str, market: str) -> VcpuQuota | None:
    """The vCPU quota an EC2 instance type counts against when run `market` (on-demand, spot); None when the
    catalog has no row for its family."""
    return _vcpu_quotas().get((instance_family(instance_type), market))


@dataclass(frozen=True)
class SlurmFeature:
    """A Slurm feature goldenenv's clusters rely on, and the first Slurm release that has it
    (data/slurm_features.csv): a lock that pins an older Slurm cannot run the stack's scheduler."""

    feature: str
    min_slurm: str
    """Slurm's release series (22.05), compared with the upstream part of the lock's slurm.version."""
    used_for: str
    doc: str
    """SchedMD's page for the feature."""
    source: str


@functools.cache
def slurm_features() -> tuple[SlurmFeature, ...]:
    return tuple(SlurmFeature(**r) for r in _read("slurm_features"))


@dataclass(frozen=True)
class DeepspeedEstimator:
    """One row of DeepSpeed's model-state memory estimators (data/deepspeed_estimators.csv), in the form
    gpu = P·gpu_per_param + int(P·gpu_per_param_sharded / gpus) + L·gpu_per_largest_layer_param and
    host per node = buffer × (max(P·a·gpus_per_node, P·b·gpus, P·c / nodes, P·floor) + L·d·gpus_per_node)
    (P parameters, L the largest layer's). Stage 0 and fp32 rows are the ZeRO paper's, not DeepSpeed's."""

    stage: int
    precision: str
    """mixed (bf16/fp16 with fp32 master weights) | fp32"""
    offload_optimizer: bool
    offload_params: bool
    zero_init: bool
    since: tuple[int, ...]
    """The first DeepSpeed release computing this row; the newest row at or below the version in use applies."""
    gpu_per_param: float
    gpu_per_param_sharded: float
    gpu_per_largest_layer_param: float
    cpu_per_param_per_node_gpu: float
    cpu_per_param_per_gpu: float
    cpu_per_param_per_node_share: float
    cpu_per_param_floor: float
    cpu_per_largest_layer_param_per_node_gpu: float
    buffer_factor: float
    source: str


@functools.cache
def deepspeed_estimators() -> tuple[DeepspeedEstimator, ...]:
    yes = {"yes": True, "no": False}
    found = []
    for r in _read("deepspeed_estimators"):
        numbers = {k: float(v) for k, v in r.items() if k.startswith(("gpu_", "cpu_")) or k == "buffer_factor"}
        found.append(DeepspeedEstimator(
            int(r["stage"]), r["precision"], yes[r["offload_optimizer"]], yes[r["offload_params"]],
            yes[r["zero_init"]], version_tuple(r["since"]), source=r["source"], **numbers))
    return tuple(found)


@functools.cache
def gpu_usable_mib() -> dict[str, tuple[int, str]]:
    """data/gpu_usable_memory.csv: (MiB as nvidia-smi reports the GPU's total memory, source) by GPU name."""
    return {r["gpu"]: (int(r["usable_mib"]), r["source"]) for r in _read("gpu_usable_memory")}


@dataclass(frozen=True)
class GpuBandwidth:
    gpu: str
    nvlink_gbytes_per_s_per_link: float
    """Per link and direction; 0 for a GPU without NVLink."""
    pcie_generation: int
    pcie_gbytes_per_s: float
    """x16, per direction."""
    source: str


@functools.cache
def gpu_bandwidth() -> dict[str, GpuBandwidth]:
    """data/gpu_bandwidth.csv by GPU name."""
    return {r["gpu"]: GpuBandwidth(r["gpu"], float(r["nvlink_gbytes_per_s_per_link"]), int(r["pcie_generation"]),
                                   float(r["pcie_gbytes_per_s"]), r["source"]) for r in _read("gpu_bandwidth")}


@dataclass(frozen=True)
class ModelShape:
    """A model's architecture as its Hugging Face config.json states it (data/models.csv)."""

    model: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    mlp: str
    """swiglu (gated: gate, up and down matrices) | gelu (two matrices)"""
    tied_embeddings: bool
    dropout: bool
    params: float
    source: str


@functools.cache
def models() -> dict[str, ModelShape]:
    yes = {"yes": True, "no": False}
    return {r["model"]: ModelShape(r["model"], int(r["layers"]), int(r["hidden"]), int(r["heads"]), int(r["kv_heads"]),
                                   int(r["intermediate"]), int(r["vocab"]), r["mlp"], yes[r["tied_embeddings"]],
                                   yes[r["dropout"]], float(r["params"]), r["source"])
            for r in _read("models")}
