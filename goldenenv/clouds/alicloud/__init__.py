"""Alibaba Cloud: eRDMA GPU clusters in a low-latency deployment set, OSS + CPFS (or NAS), a budget guard.

Outside Pulumi, the cloud's lifecycle hooks: preflight (the caller's Alibaba credentials), before_up (find the
retained bucket and image repository and give an adopted bucket the stack's tags), before_destroy (export CPFS to
the bucket through its data flow and wait: dataflow.py), purge (the bucket and the image repository, by name).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_alicloud as alicloud

from goldenenv import catalog
from goldenenv.clouds.alicloud import dataflow, guard, limits, storage
from goldenenv.clouds.alicloud.basics import (
    CLOUD, RetainedStores, eri_count, fs_throughput_per_tib, resource_group_name, shared_fs_kind,
)
from goldenenv.clouds.alicloud.parts import GpuCluster
from goldenenv.clouds.alicloud.erdma import HIGH_PERFORMANCE, MAX_ERIS
from goldenenv.clouds.alicloud.head import MUNGE_STAGE
from goldenenv.clouds.alicloud.nodes import NODE_UPDATES, login_notes, ram_name, ssh_key_problems
from goldenenv.clouds.alicloud.registry import over_vpc, public_url, registry_login, repository_names
from goldenenv.clouds.base import (
    BuildContext, Capability, HostImageForm, PulumiCloud, head_shape, host_image_problems, key_words, mock_address,
    stable_number, zone_problems,
)
from goldenenv.guardrails import Finding, Severity
from goldenenv.spec import Capacity, ClusterSpec, ConfigError, Problem, pool_key

REGION = re.compile(r"^[a-z]{2}-[a-z]+(-\d{1,2})?$")
"""cn-hangzhou, cn-wulanchabu, ap-southeast-1, eu-central-1 ..."""
IMAGE_ID = re.compile(r"^(m-[a-z0-9]{8,40}|[a-z0-9][a-z0-9_.]{2,126}\.vhd)$")
"""A custom image (m-...) or a public image by its ID (ubuntu_22_04_uefi_x64_20G_alibase_20240807.vhd)."""
HOST_IMAGE_FORM = HostImageForm(IMAGE_ID, "m-...", "is not an Alibaba image ID (m-... or a public image's <name>.vhd)",
                                "m-0123456789abcdef0123")
CURRENCIES = ("CNY", "USD")
"""What Alibaba bills in: CNY on the China site (aliyun.com), USD on the international site."""
ZONES_TOKEN = "alicloud:index/getZones:getZones"
TIER_KEY = "goldenenv:storage.parallelFs.throughputPerTib"
CREDENTIALS_HELP = ("no Alibaba Cloud credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET "
                    "(the names the Alibaba Cloud CLI and SDKs read; ALIBABA_CLOUD_SECURITY_TOKEN too for STS "
                    "credentials), or ALICLOUD_ACCESS_KEY and ALICLOUD_SECRET_KEY (the names pulumi-alicloud reads). "
                    "goldenenv's own calls (adoption, export, purge) read only these variables, not an `aliyun "
                    "configure` profile")


class StoreError(RuntimeError):
    """A precondition on Alibaba Cloud is missing (credentials), or a retained store could not be prepared or
    kept safe; the message says what to do."""


class AlicloudCloud(PulumiCloud):
    name = CLOUD
    capabilities = frozenset({Capability.RDMA, Capability.SPOT, Capability.ZONE_FAILOVER, Capability.PARALLEL_FS,
                              Capability.LOCAL_NVME, Capability.BUDGET, Capability.HARD_STOP})
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
        "alicloud:kms/secret:Secret": ("secretName",),
    }
    data_bearing = {"Instance": "system disk erased",
                    "FileSystem": "CPFS after its export to the bucket; NAS extreme with its files"}
    store_kinds = ("Bucket", "Repo")
    """The namespace is kept too but shared by the project's stacks: purge leaves it, so plan does not list it."""
    placeholder_account = storage.PLACEHOLDER_ACCOUNT
    node_updates = NODE_UPDATES
    ssh_user = "root"

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """NFS for both shared file systems: NAS extreme is mounted over NFSv3, and CPFS's NFS protocol service's
        export too (cpfs-mount.sh: the CPFS-NFS client only when the image has it, else the kernel's NFSv3 client,
        which needs nfs-common's mount.nfs). None without a shared file system."""
        return "nfs" if shared_fs_kind(spec) else None

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> Any:
        """root with the pool's key pair (Alibaba's Ubuntu images log in as root): Docker directly."""
        from goldenenv.clouds.base import DockerReach, NodeLogin

        return NodeLogin(self.ssh_user, DockerReach.DIRECT, f"ssh as {self.ssh_user} with nodes.sshPublicKey (the "
                         "key pair) from network.adminCidrs; without a key, Cloud Assistant only")

    def spot_return(self, spec: ClusterSpec, pool: Any) -> Any:
        """Alibaba releases a reclaimed spot instance (SpotAsPriceGo); the next `up` refreshes and creates it again."""
        from goldenenv.clouds.base import SpotBack, SpotReturn

        return SpotReturn((SpotBack.UP_RECREATES,), how="a reclaimed spot node is released; goldenenv up creates it "
                          "again")
    """Alibaba's public Ubuntu images log in as root (key pair only); a custom image may bring its own user."""
    head_instance_type = "ecs.g7.large"
    """A 2-vCPU, 8-GiB x86 general purpose type (catalog head_types.csv; not yet priced: prices.csv has no row)."""
    user_data_limit = limits.USER_DATA
    host_image_form = HOST_IMAGE_FORM

    def check(self, spec: ClusterSpec) -> list[Problem]:
        """Region and zone names, the budget's currency, host images, and Alibaba's limits on placement and ERIs.

        Unknown instance types and RDMA asked of a type without it are stackconfig's (catalog_problems)."""
        problems = []
        if not REGION.fullmatch(spec.region):
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not an Alibaba Cloud region name "
                                    "(e.g. cn-hangzhou, cn-wulanchabu, ap-southeast-1)"))
        problems += zone_problems(CLOUD, spec)
        problems += self._currency(spec) + _lifecycle_problems(spec) + _storage_problems(spec)
        for i, pool in enumerate(spec.nodes):
            at = pool_key(i, len(spec.nodes))
            it = catalog.instance_types(CLOUD).get(pool.instance_type)
            if it is None:
                continue
            problems += host_image_problems(CLOUD, spec, pool, f"{at}.hostImage", HOST_IMAGE_FORM)
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
        from goldenenv.clouds import tagrules

        return problems + ssh_key_problems(spec) + tagrules.problems(tagrules.rule_of(CLOUD), spec)

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
        if kind == "Secret" and args.typ.startswith("alicloud:kms/"):
            return args.inputs.get("secretName", args.name), state
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
        if spec.budget:
            notes.append("Alibaba's billing data lags usage by one to two days (split bills, BSS "
                         "DescribeSplitItemBill): the budget guard acts on spend that old, so the stack can pass its "
                         "limit by up to two days of its cost before alerts or the hard stop; the split bill must be "
                         "enabled once in the Expenses and Costs console, and alerts reach the guard function's log, "
                         "not the emails, until a Direct Mail sender address is verified")
        if spec.placed_zone is None:
            notes.append("no zone set: up takes the first zone the account's getZones returns for the pool's type")
        else:
            types = ", ".join(sorted({pool.instance_type for pool in spec.nodes}))
            where = ", ".join(spec.zones) if spec.zones else spec.placed_zone
            notes.append(f"which zones sell {types} is not known offline (DescribeAvailableResource needs an "
                         f"account): up moves on from a zone that has none ({where}), and stops when none is left")
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
        notes.append(f"the bucket stays in {storage.RETAINED_GROUP}, not in the stack's resource group: destroy "
                     "deletes that group, and Alibaba deletes no resource group that still holds a resource")
        if spec.network.egress == "endpoints":
            notes.append("network.egress endpoints: no NAT gateway; nodes reach OSS and ACR on their VPC-internal "
                         "endpoints, and nothing on the internet")
        kind = shared_fs_kind(spec)
        if kind == storage.NAS:
            notes.append(f"the shared file system is NAS extreme ({spec.region} has no CPFS data flow to OSS): it is "
                         "not linked to the bucket, and destroy deletes it with every file on it; write checkpoints "
                         f"meant to outlive the stack to the bucket ({spec.storage.parallel_fs.checkpoint_prefix})")
        ttl = spec.lifecycle.ttl_hours
        if ttl:
            notes.append(f"lifecycle.ttlHours: Alibaba releases (deletes) each node {ttl:g} h after up creates it "
                         "(auto_release_time, set once when the node is created) - unlike AWS, where the reaper "
                         "stops it - so its system disk goes with it: keep checkpoints in the bucket"
                         + (" or on CPFS (destroy exports it to the bucket)" if kind == storage.CPFS else "")
                         + "; the bucket, shared file system and network keep billing until destroy")
        shape = head_shape(spec, self)
        if shape:
            notes.append(f"Slurm: the head ({shape.instance_type}, pay-as-you-go, no public bandwidth) runs slurmctld "
                         "and queues the jobs; reach it like the nodes, at stack output headPrivateIp. Its first boot "
                         f"writes the stack's munge key as a version of KMS secret {ram_name('goldenenv', spec.tags.project, spec.stack, 'munge')} "
                         f"staged {MUNGE_STAGE}. The secret is created without a KMS instance (dkms_instance_id): an "
                         "account on KMS 3.0, where every new secret belongs to a KMS instance, refuses it at up; "
                         "goldenenv:scheduler: none runs no head")
            if catalog.price(CLOUD, shape.instance_type, spec.region) is None:
                notes.append(f"the head's {shape.instance_type} has no catalog price: its cost is not counted")
        return notes + login_notes(spec, self.ssh_user)

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        """What `goldenenv destroy` does before Pulumi deletes anything, and what NAS extreme takes with it."""
        bucket = f"oss://{outputs.get('bucket') or '<bucket>'}/"
        kind = shared_fs_kind(spec)
        if kind == storage.CPFS:
            return [f"export the CPFS fileset {storage.FILESET_PATH} to {bucket} (NAS data flow task Export, "
                    "MetaAndData, on the stack's data flow) and wait; a failed export stops destroy before anything "
                    "is deleted (--skip-export destroys without it, losing files not yet exported)"]
        if kind == storage.NAS:
            return [f"nothing is exported: NAS extreme is not linked to {bucket}, so destroy deletes it with every "
                    "file on it; checkpoints belong in the bucket"]
        return []

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        """The deploy-readiness rules (`plan --strict`): enum strings the provider does not check, a CPFS data flow
        faster than its file system, auto-release times Alibaba refuses (readiness.py), and a retained store
        inside a resource group destroy deletes (retained_in_deleted_group)."""
        from goldenenv.clouds.alicloud import readiness

        return readiness.findings(resources, required_tags) + retained_in_deleted_group(resources)

    def destroy_hints(self, spec: ClusterSpec, outputs: dict[str, Any], error: str) -> list[str]:
        """What to do when `pulumi destroy` failed on something Alibaba refuses: a resource group that still holds
        a resource, which a bucket made before the bucket left the stack's resource group still does."""
        if RESOURCE_GROUP_CONFLICT not in error:
            return []
        group = outputs.get("resourceGroup") or resource_group_name(spec.tags.project, spec.stack)
        bucket = outputs.get("bucket") or "the stack's bucket"
        return [f"Alibaba refuses to delete resource group {group} while it holds a resource "
                f"({RESOURCE_GROUP_CONFLICT}): a bucket made by an earlier goldenenv ({bucket}) sits in it; goldenenv "
                f"now keeps the bucket in {storage.RETAINED_GROUP}. Move the bucket there (Resource Management "
                "console, as its guide 'Transfer resources across resource groups' says), which loses none of its "
                "data, and destroy again"]

    def preflight(self, spec: ClusterSpec) -> None:
        """Refuse, saying which variables to set, when the caller has no Alibaba Cloud credentials."""
        _credentials()

    def registry_url(self, spec: ClusterSpec) -> str:
        """`registry.<region>.aliyuncs.com/<namespace>/<repository>`: the stack's ACR repository (registry.py's
        names) at the public endpoint the caller's machine pushes to."""
        return public_url(spec.region, *repository_names(spec.tags.project, spec.stack, spec.image.lock))

    def registry_pulled_as(self, spec: ClusterSpec, url: str) -> str:
        """The VPC endpoint: the repository as the nodes pull it (ImageRepository.url)."""
        return over_vpc(url, spec.region)

    def registry_auth(self, spec: ClusterSpec, registry: str, fetch: Any = None) -> dict:
        """A temporary docker login from ACR's GetAuthorizationToken, with the caller's AccessKey."""
        return registry_login(spec.region, _credentials(), registry, fetch)

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None],
                  lookup: storage.AlicloudLookup | None = None,
                  bucket_client: storage.BucketApi | None = None) -> RetainedStores:
        """Find the retained stores this `up` adopts (never another stack's bucket) and give an adopted bucket the
        stack's tags first, so Pulumi's import finds no difference."""
        stores = RetainedStores.find(spec, lookup or storage.LiveLookup(spec.region))
        if stores.adopt_bucket:
            log(f"adopting retained bucket {stores.adopt_bucket} (datasets and checkpoints of an earlier up)")
            wanted = storage.bucket_tags(f"{spec.stack}-data", spec.stack_tags,
                                         data_flow=shared_fs_kind(spec) == storage.CPFS)
            storage.align_bucket_tags(stores.adopt_bucket, wanted, spec.region, client=bucket_client, log=log)
        namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
        if stores.adopt_repo:
            log(f"adopting retained image repository {namespace}/{repo}")
        elif stores.adopt_namespace:
            log(f"adopting the project's image namespace {namespace}")
        return stores

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None], nas: guard.Call | None = None) -> None:
        """Export CPFS to the bucket through the stack's data flow and wait (dataflow.export_fileset); a failed
        export raises StoreError, which stops the destroy before anything is deleted."""
        fs_id, flow_id = outputs.get("fileSystemId"), outputs.get("dataFlowId")
        if not fs_id:
            return
        if not flow_id:
            log(f"{fs_id} is NAS extreme, not linked to the bucket: destroy deletes it with its files; only what was "
                "written to the bucket stays")
            return
        if skip_export:
            log(f"not exporting {fs_id} (--skip-export): files written on CPFS and not yet exported to the bucket "
                "are lost")
            return
        try:
            dataflow.export_fileset(fs_id, flow_id, outputs.get("filesetPath") or storage.FILESET_PATH,
                                    nas or dataflow.nas_client(spec.region, _credentials()), log)
        except dataflow.ExportFailed as e:
            raise StoreError(f"{e}. Nothing was destroyed: fix the export (the data flow must be Running and reach "
                             "the bucket) and destroy again, or pass --skip-export to destroy without it (files not "
                             "yet exported are lost)") from None

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None],
              bucket_client: storage.BucketApi | None = None,
              acr: storage.RepositoryApi | None = None) -> list[str]:
        """Delete the retained stores by name (--purge-data): the bucket with every object version, and the stack's
        image repository with its images (the project's namespace stays). Both SDKs are checked before anything
        is deleted."""
        bucket = outputs.get("bucket")
        namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
        if acr is None or (bucket and bucket_client is None):
            credentials = _credentials()
            acr = acr or storage.AcrApi(spec.region, credentials, "deleting the stack's ACR repository")
            if bucket and bucket_client is None:
                bucket_client = storage.oss_bucket(bucket, spec.region, credentials)
        purged = []
        if bucket:
            storage.purge_bucket(bucket, spec.region, log, client=bucket_client)
            purged.append(bucket)
        if storage.purge_repository(namespace, repo, spec.region, log, client=acr):
            purged.append(f"{namespace}/{repo}")
        return purged

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


def _credentials() -> guard.Credentials:
    try:
        return storage.credentials_from_env()
    except ConfigError:
        raise StoreError(CREDENTIALS_HELP) from None


def _lifecycle_problems(spec: ClusterSpec) -> list[Problem]:
    """ttlHours is Alibaba's auto-release time, which must be well ahead of the nodes' creation; there is no idle
    stop on Alibaba Cloud."""
    problems = []
    ttl = spec.lifecycle.ttl_hours
    if ttl is not None and ttl < limits.TTL_MIN_HOURS:
        problems.append(Problem("goldenenv:lifecycle.ttlHours", f"{ttl:g} h is too soon: Alibaba takes an "
                                f"auto-release time at least {limits.AUTO_RELEASE_MIN_MINUTES.value} min ahead, and "
                                f"the nodes are created minutes into up; set at least {limits.TTL_MIN_HOURS:g}"))
    if spec.lifecycle.idle_minutes is not None:
        problems.append(Problem("goldenenv:lifecycle.idleMinutes", f"{CLOUD} stacks have no idle stop: drop "
                                "idleMinutes and end the run with lifecycle.ttlHours, budget.hardStop or destroy"))
    return problems


def _storage_problems(spec: ClusterSpec) -> list[Problem]:
    """The bucket name OSS and a CPFS data flow take, and the throughput tiers CPFS and NAS extreme offer."""
    problems = []
    name = spec.storage.bucket.bucket_name
    if name and not storage.valid_bucket_name(name):
        problems.append(Problem(storage.BUCKET_KEY, f"{name!r} is not an OSS bucket name: 3 to 63 lowercase letters, "
                                "digits and '-', starting and ending with a letter or digit (no dots)"))
    if not spec.storage.parallel_fs.enabled:
        return problems
    tier = fs_throughput_per_tib(spec)
    if tier not in storage.CPFS_STORAGE_TYPES:
        offered = ", ".join(f"{rate} ({cpfs} on CPFS, {storage.EXTREME_STORAGE_TYPES[rate]} on NAS extreme)"
                            for rate, cpfs in storage.CPFS_STORAGE_TYPES.items())
        problems.append(Problem(TIER_KEY, f"{tier} MB/s per TiB is not a tier Alibaba offers; valid: {offered}"))
    if shared_fs_kind(spec) == storage.CPFS and name and len(name) < storage.DATAFLOW_BUCKET_NAME_MIN:
        problems.append(Problem(storage.BUCKET_KEY, f"a CPFS data flow takes a bucket name of "
                                f"{storage.DATAFLOW_BUCKET_NAME_MIN} characters or more, not {name!r}"))
    return problems


def instance_eris(props: dict[str, Any]) -> list[dict[str, Any]]:
    """A planned instance's ERIs: its primary interface and its inline secondary, where HighPerformance."""
    interfaces = [props] + ([props["networkInterfaces"]] if isinstance(props.get("networkInterfaces"), dict) else [])
    return [{"networkCardIndex": i.get("networkCardIndex"), "queuePairNumber": i.get("queuePairNumber")}
            for i in interfaces if i.get("networkInterfaceTrafficMode") == HIGH_PERFORMANCE]


RESOURCE_GROUP_TYPE = "alicloud:resourcemanager/resourceGroup:ResourceGroup"
RESOURCE_GROUP_CONFLICT = "DeleteConflict.ResourceGroup.Resource"
"""DeleteResourceGroup's error for a group that still holds a resource (terraform-provider-alicloud retries it,
aliyun/terraform-provider-alicloud#6109, then fails the destroy)."""
RETAINED_IN_GROUP = "strict:retained-in-deleted-group"


def retained_in_deleted_group(resources: list) -> list[Finding]:
    """A resource destroy keeps (retain_on_delete) placed in a resource group destroy deletes: Alibaba deletes no
    resource group that still holds a resource, so every destroy of the stack would fail at its end."""
    groups = {r.id: r for r in resources
              if r.type == RESOURCE_GROUP_TYPE and r.custom and not r.retain_on_delete and r.id}
    return [Finding(RETAINED_IN_GROUP, Severity.ERROR, r.urn,
                    f"{r.name} is kept on destroy but sits in resource group "
                    f"{groups[r.props['resourceGroupId']].name}, which destroy deletes: Alibaba refuses to delete a "
                    f"resource group that still holds a resource ({RESOURCE_GROUP_CONFLICT}), so destroy would fail; "
                    f"leave resource_group_id unset on what outlives the stack ({storage.RETAINED_GROUP})")
            for r in resources
            if r.custom and r.retain_on_delete and r.props.get("resourceGroupId") in groups]
