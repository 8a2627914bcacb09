"""Alibaba Cloud: eRDMA GPU clusters in a low-latency deployment set, OSS + CPFS (or NAS), a budget guard."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_alicloud as alicloud

from goldenenv import catalog, compat
from goldenenv.clouds.alicloud import limits, storage
from goldenenv.clouds.alicloud.budget import BudgetGuard, BudgetGuardArgs
from goldenenv.clouds.alicloud.erdma import HIGH_PERFORMANCE, MAX_ERIS
from goldenenv.clouds.alicloud.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.alicloud.nodes import GpuNodePool, GpuNodePoolArgs, ram_name
from goldenenv.clouds.alicloud.registry import ImageRepository, ImageRepositoryArgs, repository_names
from goldenenv.clouds.base import BuildContext, Capability, PulumiCloud, key_words, mock_address, stable_number
from goldenenv.images import lock as image_lock
from goldenenv.images import publish
from goldenenv.nodeboot import NodeBoot, launch_outputs
from goldenenv.spec import Capacity, ClusterSpec, Problem, pool_key

CLOUD = "alicloud"
REGION = re.compile(r"^[a-z]{2}-[a-z]+(-\d{1,2})?$")
"""cn-hangzhou, cn-wulanchabu, ap-southeast-1, eu-central-1 ..."""
IMAGE_ID = re.compile(r"^(m-[a-z0-9]{8,40}|[a-z0-9][a-z0-9_.]{2,126}\.vhd)$")
"""A custom image (m-...) or a public image by its ID (ubuntu_22_04_uefi_x64_20G_alibase_20240807.vhd)."""
CURRENCIES = ("CNY", "USD")
"""What Alibaba bills in: CNY on the China site (aliyun.com), USD on the international site."""
ZONES_TOKEN = "alicloud:index/getZones:getZones"
RESOURCE_GROUP_NAME_MAX = 50


class AlicloudCloud(PulumiCloud):
    name = CLOUD
    capabilities = frozenset({Capability.RDMA, Capability.SPOT, Capability.PARALLEL_FS, Capability.LOCAL_NVME,
                              Capability.BUDGET, Capability.HARD_STOP})
    registry_types = ("alicloud:cr/",)
    """Type prefixes of the stack's image registry resources (what `image push -s` creates first)."""
    key_props = {
        "alicloud:vpc/network:Network": ("cidrBlock",),
        "alicloud:vpc/switch:Switch": ("cidrBlock", "zoneId"),
        "alicloud:vpc/natGateway:NatGateway": ("natType", "networkType"),
        "alicloud:ecs/securityGroup:SecurityGroup": ("innerAccessPolicy",),
        "alicloud:ecs/securityGroupRule:SecurityGroupRule": ("type", "ipProtocol", "portRange", "cidrIp"),
        "alicloud:ecs/ecsDeploymentSet:EcsDeploymentSet": ("strategy",),
        "alicloud:ecs/instance:Instance": ("instanceType", "imageId", "instanceChargeType", "spotStrategy",
                                           "httpTokens"),
        "alicloud:ram/policy:Policy": ("policyName",),
    }
    data_bearing = {"Instance": "system disk erased", "FileSystem": "files its data flow has not written to OSS"}
    store_kinds = ("Bucket", "Namespace", "Repo")
    placeholder_account = storage.PLACEHOLDER_ACCOUNT

    def check(self, spec: ClusterSpec) -> list[Problem]:
        """Region and zone names, the budget's currency, host images, and Alibaba's limits on placement and ERIs.

        Unknown instance types and RDMA asked of a type without it are stackconfig's (catalog_problems)."""
        problems = []
        if not REGION.fullmatch(spec.region):
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not an Alibaba Cloud region name "
                                    "(e.g. cn-hangzhou, cn-wulanchabu, ap-southeast-1)"))
        known = catalog.zones(CLOUD, spec.region)
        if spec.zone and known and known.complete and spec.zone not in known.zones:
            problems.append(Problem("goldenenv:zone", f"'{spec.zone}' is not a zone of {spec.region}; valid: "
                                    f"{', '.join(known.zones)} (catalog zones.csv)"))
        problems += self._currency(spec)
        for key in ("ttl_hours", "idle_minutes"):
            if getattr(spec.lifecycle, key) is not None:
                alias = type(spec.lifecycle).model_fields[key].alias
                problems.append(Problem(f"goldenenv:lifecycle.{alias}", f"{CLOUD} stacks have no {alias} yet: drop "
                                        "it and end the run with destroy or budget.hardStop"))
        for i, pool in enumerate(spec.nodes):
            at = pool_key(i, len(spec.nodes))
            it = catalog.instance_types(CLOUD).get(pool.instance_type)
            if it is None:
                continue
            problems += _host_image_problems(spec, pool, f"{at}.hostImage")
            layout = catalog.node_layout(CLOUD, it.name)
            eris = eri_count(pool, it)
            if eris > MAX_ERIS:
                problems.append(Problem(f"{at}.{pool.rdma_key}", f"{it.name} has {eris} ERIs; goldenenv gives "
                                        f"queue pairs to at most {MAX_ERIS} per node: set {pool.rdma_key}: false"))
            if eris and layout is None:
                problems.append(Problem(f"{at}.instanceType", f"catalog node_layout.csv has no row for {it.name}: "
                                        "its ERIs' queue pairs are unknown"))
            limit = limits.LOW_LATENCY_SET_INSTANCES
            if layout and layout.placement == "low-latency-set" and pool.count > limit.value:
                problems.append(Problem(f"{at}.count", f"{pool.count} nodes of {it.name} in one LowLatency deployment "
                                        f"set; at most {limit.value} ({limit.source})"))
        return problems

    @staticmethod
    def _currency(spec: ClusterSpec) -> list[Problem]:
        if not spec.budget:
            return []
        at, currency = "goldenenv:budget.currency", spec.budget.currency
        if currency not in CURRENCIES:
            return [Problem(at, f"Alibaba Cloud bills in CNY (China site) or USD (international site); got "
                            f"{currency!r}: set the currency your account is billed in")]
        for pool in spec.nodes:
            price = catalog.price(CLOUD, pool.instance_type, spec.region)
            if price and price.currency != currency:
                return [Problem(at, f"the catalog prices {price.instance_type} in {price.currency}, so a {currency} "
                                "budget cannot be compared with the stack's cost: set currency: "
                                f"{price.currency}, or add {currency} prices to catalog prices.csv")]
        return []

    def offline_lookup(self, spec: ClusterSpec) -> storage.OfflineLookup:
        """What the offline plan knows of the account: nothing exists, the account is a placeholder."""
        return storage.OfflineLookup()

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """What Alibaba computes for a new resource (ids, addresses, table ids), as stand-ins marked mock; the
        storage component's resources first (storage.plan_mock)."""
        if args.typ == "pulumi:providers:alicloud":
            self._mock_region = args.inputs.get("region") or "mock"
            return None
        found = storage.plan_mock(args) if hasattr(storage, "plan_mock") else None
        if found is not None:
            return found
        n = stable_number(f"{args.typ}::{args.name}")
        kind = args.typ.rsplit(":", 1)[-1]
        hexid = f"{n:017x}"
        if args.typ == "alicloud:cr/repo:Repo":
            region = getattr(self, "_mock_region", "mock")
            return f"{args.inputs.get('namespace')}/{args.inputs.get('name')}", {"domainLists": [{
                "vpc": f"registry-vpc.{region}.aliyuncs.com", "internal": f"registry-internal.{region}.aliyuncs.com",
                "public": f"registry.{region}.aliyuncs.com"}]}
        if kind == "Instance" and args.typ.startswith("alicloud:ecs/"):
            state: dict[str, Any] = {"privateIp": mock_address(args.name), "networkInterfaceId": f"eni-{hexid}",
                                     "status": "Running"}
            secondary = args.inputs.get("networkInterfaces")
            if isinstance(secondary, dict):
                state["networkInterfaces"] = {**secondary,
                                              "networkInterfaceId": f"eni-{stable_number(args.name + '/1'):017x}"}
            return f"i-{hexid}", state
        prefixes = {"Network": "vpc", "Switch": "vsw", "SecurityGroup": "sg", "NatGateway": "ngw",
                    "EipAddress": "eip", "EcsDeploymentSet": "ds", "HpcCluster": "hpc", "ResourceGroup": "rg",
                    "SnatEntry": "snat"}
        state = {}
        if kind == "NatGateway":
            state.update(snatTableIds=f"stb-{hexid}", forwardTableIds=f"ftb-{hexid}")
        if kind == "EipAddress":
            state["ipAddress"] = f"198.51.100.{10 + n % 200}"
        if kind == "Network":
            state.update(routeTableId=f"vtb-{hexid}", routerId=f"vrt-{hexid}")
        if kind == "Role" and args.typ.startswith("alicloud:ram/"):
            role = args.inputs.get("roleName", args.name)
            state["arn"] = f"acs:ram::{storage.PLACEHOLDER_ACCOUNT}:role/{role.lower()}"
        if kind in prefixes:
            return f"{prefixes[kind]}-{hexid}", state
        return None, state

    def plan_call(self, args: Any) -> dict[str, Any] | None:
        """The zones data source: the catalog's zones (any zone offline), never a live answer."""
        if args.token == ZONES_TOKEN:
            return {"ids": ["mock-zone-a", "mock-zone-b"]}
        return None

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        """Billing lag and currency, spot behaviour, what the catalog cannot tell offline, and host image gaps."""
        notes = []
        currencies = {c.price.currency for c in costs if c.price}
        if currencies - {"USD"}:
            notes.append(f"catalog prices for this stack are in {', '.join(sorted(currencies))}: the plan's cost and "
                         "budget figures are in that currency, whatever sign they are printed with")
        if spec.budget:
            notes.append("Alibaba's billing data lags usage by one to two days (split bills, BSS "
                         "DescribeSplitItemBill): the budget guard acts on spend that old, so the stack can pass its "
                         "limit by up to two days of its cost before alerts or the hard stop; the split bill must be "
                         "enabled once in the Expenses and Costs console, and alerts reach the guard function's log, "
                         "not the emails, until a Direct Mail sender address is verified")
        if spec.zone is None:
            notes.append("no zone set: up takes the first zone the account's getZones returns for the pool's type")
        else:
            types = ", ".join(sorted({pool.instance_type for pool in spec.nodes}))
            notes.append(f"which zones sell {types} is not known offline (DescribeAvailableResource needs an "
                         f"account): up fails at the nodes if {spec.zone} has none")
        for pool in spec.nodes:
            it = catalog.instance_types(CLOUD).get(pool.instance_type)
            layout = catalog.node_layout(CLOUD, pool.instance_type)
            if pool.capacity is Capacity.SPOT:
                notes.append(f"{pool.name}: spot nodes bid up to the pay-as-you-go price (spot_strategy SpotAsPriceGo) "
                             "and are released when Alibaba reclaims them (spot_interruption_behavior Terminate): "
                             "their system disks go with them; keep checkpoints in the bucket or the shared file system")
            if it and layout and eri_count(pool, it):
                notes.append(f"{pool.name}: {eri_count(pool, it)} ERI(s) per node with {layout.queue_pairs} queue "
                             "pairs each (catalog node_layout.csv, unverified): up fails if that is above the type's "
                             "QueuePairNumber (DescribeInstanceTypes)")
                if layout.placement == "none":
                    notes.append(f"{pool.name}: Alibaba's low-latency deployment sets do not take {it.name}, so its "
                                 "nodes are placed by the zone alone")
            host = compat.node_host(CLOUD, spec.region, pool.host_image)
            if host.image is not None and not host.image.nvidia_driver:
                notes.append(f"{pool.name}: host image {host.image.name} carries no NVIDIA driver, eRDMA driver or "
                             "Docker (catalog host_images.csv): the golden container and the eRDMA check fail on "
                             "its nodes until hostImage names an image with them ({id: m-..., driver: ...})")
        if spec.network.egress == "endpoints":
            notes.append("network.egress endpoints: no NAT gateway; nodes reach OSS and ACR on their VPC-internal "
                         "endpoints, and nothing on the internet")
        return notes

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        """Nothing runs before the delete on Alibaba Cloud: say what the shared file system takes with it."""
        if not spec.storage.parallel_fs.enabled:
            return []
        return [f"nothing is exported: the shared file system is deleted with the stack, and only what its OSS "
                f"data flow has already written to oss://{outputs.get('bucket', '<bucket>')}/ stays"]

    def describe(self, resource: Any) -> list[str]:
        """Key properties, and a node's ERIs: how many, their queue pairs and network cards."""
        words = []
        if resource.type == "alicloud:ecs/instance:Instance":
            eris = instance_eris(resource.props)
            if eris:
                words.append(f"eri={len(eris)} qp={'/'.join(str(int(e['queuePairNumber'])) for e in eris)} "
                             f"cards={','.join(str(int(e['networkCardIndex'])) for e in eris)}")
        return words + key_words(resource, self.key_props)

    def build(self, spec: ClusterSpec, context: BuildContext | None = None) -> dict[str, Any]:
        provider = alicloud.Provider(CLOUD, region=spec.region)
        cluster = GpuCluster(spec.stack, spec, context or BuildContext(), pulumi.ResourceOptions(providers=[provider]))
        return cluster.outputs


class GpuCluster(pulumi.ComponentResource):
    """Resource group, network, data store, image repository, node pools and budget guard of one stack."""

    outputs: dict[str, Any]

    def __init__(self, name: str, spec: ClusterSpec, context: BuildContext,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:alicloud:GpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = spec.stack_tags
        group = alicloud.resourcemanager.ResourceGroup(
            f"{name}-rg", resource_group_name=resource_group_name(spec.tags.project, spec.stack),
            display_name=f"goldenenv {spec.stack}"[:50], tags=tags, opts=child,
        )
        zone = spec.zone or alicloud.get_zones_output(
            available_instance_type=catalog.instance_type(CLOUD, spec.nodes[0].instance_type).name,
            available_resource_creation="Instance", opts=pulumi.InvokeOutputOptions(parent=self),
        ).ids[0]
        network = GpuNetwork(name, GpuNetworkArgs(
            zone=zone, cidr=spec.network.cidr, egress=spec.network.egress,
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs], resource_group_id=group.id, tags=tags,
        ), child)

        fs = spec.storage.parallel_fs
        stores = RetainedStores.find(spec, context.lookup or storage.LiveLookup(spec.region))
        data = storage.DataStore(f"{name}-data", storage.DataStoreArgs(
            bucket_name=stores.bucket, adopt_bucket=stores.adopt_bucket,
            noncurrent_version_days=spec.storage.bucket.noncurrent_version_days,
            parallel_fs=fs.enabled, fs_kind=storage.fs_kind_for(spec.region), fs_size_gib=fs.size_gib,
            region=spec.region, zone_id=zone, vpc_id=network.vpc_id, vswitch_id=network.vswitch_id,
            checkpoint_prefix=fs.checkpoint_prefix, resource_group_id=group.id, tags=tags,
        ), child)
        namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
        repository = ImageRepository(f"{name}-images", ImageRepositoryArgs(
            namespace=namespace, repo=repo, tags=tags,
            adopt_namespace=stores.adopt_namespace, adopt_repo=stores.adopt_repo,
        ), child)
        image_ref = golden_image_ref(spec, repository.url)

        pools = []
        for pool in spec.nodes:
            it = catalog.instance_type(CLOUD, pool.instance_type)
            layout = catalog.node_layout(CLOUD, it.name)
            eris = eri_count(pool, it)
            user_data = pulumi.Output.all(data.mount, image_ref).apply(
                lambda v, pool=pool, eris=eris, it=it: NodeBoot(
                    spec, pool.name, fabric="erdma" if eris else "none", local_nvme=it.local_nvme_count > 0,
                    image_ref=v[1], registry_login="acr",
                ).cloud_config(v[0])
            )
            pools.append((it, pool, GpuNodePool(f"{name}-{pool.name}", GpuNodePoolArgs(
                instance_type=it.name, count=pool.count, image_id=host_image_id(spec, pool), zone=zone,
                vswitch_id=network.vswitch_id, security_group_id=network.security_group_id,
                resource_group_id=group.id, placement=layout.placement if layout else "none",
                network_cards=it.network_cards, eri_count=eris,
                queue_pairs=layout.queue_pairs if layout else 0,
                jumbo_frames=bool(layout and layout.jumbo_frames), capacity=pool.capacity.value,
                system_disk_gib=pool.root_volume_gib, user_data=user_data, bucket_arn=data.bucket_arn,
                mount_actions=storage.NODE_MOUNT_ACTIONS if fs.enabled else (),
                role_name=ram_name("goldenenv", spec.tags.project, spec.stack, pool.name), tags=tags,
            ), child)))

        all_ips = pulumi.Output.all(*[p.private_ips for *_, p in pools]).apply(lambda lists: sum(lists, []))
        all_ids = pulumi.Output.all(*[p.instance_ids for *_, p in pools]).apply(lambda lists: sum(lists, []))
        slots = [it.gpu_count for it, pool, _ in pools for _ in range(pool.count)]

        guard_name = None
        if spec.budget:
            guard = BudgetGuard(f"{name}-budget", BudgetGuardArgs(
                project=spec.tags.project, stack=spec.stack, monthly_limit=spec.budget.monthly_limit,
                currency=spec.budget.currency, thresholds=spec.budget.alert_thresholds, emails=spec.budget.emails,
                hard_stop=spec.budget.hard_stop, region=spec.region, resource_group_id=group.id, tags=tags,
            ), child)
            guard_name = guard.function_name

        self.outputs = {
            **launch_outputs(all_ips, slots),
            "instanceIds": all_ids,
            "deploymentSets": [p.deployment_set for *_, p in pools if p.deployment_set is not None],
            "resourceGroup": group.id,
            "bucket": data.bucket_name,
            "sharedFs": data.fs_id if fs.enabled else None,
            "budgetGuard": guard_name,
            "imageRepository": repository.url,
            "imageRef": image_ref,
        }
        self.register_outputs(self.outputs)


@dataclass(frozen=True)
class RetainedStores:
    """The names of what outlives the stack, and which of them already exist to be adopted."""

    bucket: str
    adopt_bucket: str | None
    adopt_namespace: bool
    adopt_repo: bool

    @classmethod
    def find(cls, spec: ClusterSpec, lookup: storage.AlicloudLookup) -> RetainedStores:
        """A bucket of another project or stack under the derived name is refused (storage.adoptable)."""
        project = spec.tags.project
        bucket = spec.storage.bucket.bucket_name or storage.bucket_name(
            project, spec.stack, lookup.account_id(), spec.region)
        namespace, repo = repository_names(project, spec.stack, spec.image.lock)
        return cls(bucket, storage.adoptable(lookup.bucket(bucket), project, spec.stack),
                   lookup.namespace_exists(namespace), lookup.repository_exists(namespace, repo))


def eri_count(pool: Any, it: catalog.InstanceType) -> int:
    """The ERIs each node of the pool gets: the type's eRDMA interfaces unless the pool turns RDMA off."""
    return it.rdma_interfaces if (pool.rdma is not False and it.rdma == "erdma") else 0


def instance_eris(props: dict[str, Any]) -> list[dict[str, Any]]:
    """A planned instance's ERIs: its primary interface and its inline secondary, where HighPerformance."""
    interfaces = [props] + ([props["networkInterfaces"]] if isinstance(props.get("networkInterfaces"), dict) else [])
    return [{"networkCardIndex": i.get("networkCardIndex"), "queuePairNumber": i.get("queuePairNumber")}
            for i in interfaces if i.get("networkInterfaceTrafficMode") == HIGH_PERFORMANCE]


def resource_group_name(project: str, stack: str) -> str:
    """3 to 50 letters, digits and `-`, starting with a letter; shortened with a hash so two stacks never share."""
    text = re.sub(r"[^A-Za-z0-9-]+", "-", f"goldenenv-{project}-{stack}").strip("-")
    if len(text) <= RESOURCE_GROUP_NAME_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:RESOURCE_GROUP_NAME_MAX - 9].rstrip('-')}-{digest}"


def golden_image_ref(spec: ClusterSpec, repository_url: pulumi.Output[str]) -> pulumi.Output[str | None]:
    """What nodes pull, always by digest: the stack's image.ref, else the digest `image push` recorded for the
    stack's repository and this exact lock; None until the image is pushed (plan warns, up refuses)."""
    if spec.image.ref:
        return pulumi.Output.from_input(spec.image.ref)
    lock = image_lock.load(spec.image.lock)

    def pushed(url: str) -> str | None:
        entry = publish.latest(lock, url)
        return entry.ref if entry else None

    return repository_url.apply(pushed)


def host_image_id(spec: ClusterSpec, pool: Any) -> str:
    """The pool's pinned image: the stack's own id, else the catalog's (public image IDs are the same everywhere)."""
    host = compat.node_host(CLOUD, spec.region, pool.host_image)
    if host.override_id:
        return host.override_id
    if host.image is None or not host.image.image_id:
        raise ValueError(f"no host image for {CLOUD} in {spec.region}: set hostImage")
    return host.image.image_id


def _host_image_problems(spec: ClusterSpec, pool: Any, at: str) -> list[Problem]:
    usable = [n for n, h in catalog.host_images(CLOUD).items() if h.region in ("*", spec.region)]
    if isinstance(pool.host_image, str) and pool.host_image not in usable:
        return [Problem(at, f"{pool.host_image!r} is not a host image in the catalog for {spec.region}; valid: "
                        f"{', '.join(usable) or 'none'}, or {{id, driver}}")]
    if pool.host_image is None and not usable:
        return [Problem(at, f"the catalog pins no host image for {spec.region}: set hostImage to {{id: m-..., "
                        "driver: <its NVIDIA driver>}")]
    if pool.host_image is not None and not isinstance(pool.host_image, str) \
            and not IMAGE_ID.fullmatch(pool.host_image.id):
        return [Problem(f"{at}.id", f"{pool.host_image.id!r} is not an Alibaba image ID (m-... or a public "
                        "image's <name>.vhd)")]
    return []
