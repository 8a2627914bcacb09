"""Tencent Cloud: HCC GPU clusters with RDMA (an HPC cluster per pool, rdma-agent's bonds on the hosts), COS with
CFS Turbo linked by a data flow, TCR, the munge key in SSM, a budget that alerts and a stop function that stops the
nodes for the rest of the month.

Outside Pulumi, the cloud's lifecycle hooks: preflight (the caller's Tencent credentials), before_up (the caller's
app id and whether the stack's bucket exists, to adopt it), before_destroy (export CFS Turbo to the bucket through
its data flow and wait: dataflow.run_task), purge (the bucket with every object version, by name: purge.py).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv import catalog
from goldenenv.clouds.base import (
    BuildContext, Capability, DockerReach, HostImageForm, NodeLogin, PulumiCloud, SpotBack, SpotReturn, head_shape,
    host_image_problems, mock_address, stable_number, zone_problems,
)
from goldenenv.clouds.tencent import api, dataflow, limits, purge, storage, tags
from goldenenv.clouds.tencent.basics import CLOUD, bucket_name, is_hcc, registry_names, secret_name
from goldenenv.clouds.tencent.nodes import NODE_UPDATES
from goldenenv.clouds.tencent.parts import GpuCluster
from goldenenv.clouds.tencent.registry import TCR_VERSION, registry_host, repository_url
from goldenenv.spec import Capacity, ClusterSpec, ConfigError, Problem, pool_key

REGION = re.compile(r"^[a-z]{2}-[a-z]+(-\d{1,2})?$")
"""ap-guangzhou, ap-beijing, ap-shanghai, na-siliconvalley, eu-frankfurt ..."""
IMAGE_ID = re.compile(r"^img-[a-z0-9]{8}$")
HOST_IMAGE_FORM = HostImageForm(IMAGE_ID, "img-...", "is not a Tencent Cloud image ID (img- and 8 letters or digits)",
                                "img-ge0host0")
CURRENCIES = {"CNY": "china", "USD": "international"}
"""What Tencent bills in, by site: CNY on the China site (cloud.tencent.com, the SDK's billing text), USD on the
international site (unverified)."""
SIZE_KEY = "goldenenv:storage.parallelFs.sizeGib"


class StoreError(RuntimeError):
    """A precondition on Tencent Cloud is missing (credentials), or a retained store could not be kept safe."""


def _credentials() -> api.Credentials:
    try:
        return api.credentials_from_env()
    except ConfigError:
        raise StoreError(api.CREDENTIALS_HELP) from None


class TencentCloud(PulumiCloud):
    name = CLOUD
    capabilities = frozenset({Capability.RDMA, Capability.SPOT, Capability.PARALLEL_FS, Capability.BUDGET,
                              Capability.HARD_STOP})
    registry_types = ("tencentcloud:Tcr/",)
    key_props = {
        "tencentcloud:Vpc/instance:Instance": ("cidrBlock",),
        "tencentcloud:Subnet/instance:Instance": ("cidrBlock", "availabilityZone"),
        "tencentcloud:Nat/gateway:Gateway": ("natProductVersion",),
        "tencentcloud:Cvm/hpcCluster:HpcCluster": ("zone",),
        limits.INSTANCE: ("instanceType", "imageId", "instanceChargeType", "hpcClusterId"),
        "tencentcloud:Cfs/fileSystem:FileSystem": ("storageType", "protocol", "capacity"),
        "tencentcloud:Cam/role:Role": ("name",),
        "tencentcloud:Ssm/secret:Secret": ("secretName",),
    }
    data_bearing = {"Instance": "system disk erased", "FileSystem": "CFS Turbo after its export to the bucket"}
    store_kinds = ("Bucket",)
    placeholder_account = storage.PLACEHOLDER_APPID
    node_updates = NODE_UPDATES
    ssh_user = "ubuntu"
    """Tencent's public Ubuntu images log in as ubuntu, not root (https://www.tencentcloud.com/document/product/213/5436)."""
    head_instance_type = "S5.LARGE8"
    user_data_limit = limits.USER_DATA
    host_image_form = HOST_IMAGE_FORM

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """CFS Turbo's private-protocol client (templates/node/cfs-turbo-mount.sh.j2); None without it."""
        return "cfs-turbo" if spec.storage.parallel_fs.enabled else None

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> NodeLogin:
        return NodeLogin(self.ssh_user, DockerReach.SUDO, f"ssh as {self.ssh_user} with nodes.sshPublicKey (the key "
                         "pair) from network.adminCidrs")

    def spot_return(self, spec: ClusterSpec, pool: Any) -> SpotReturn:
        """Tencent terminates a reclaimed spot instance; the next `up` refreshes and creates it again."""
        return SpotReturn((SpotBack.UP_RECREATES,), how="a reclaimed spot node is terminated; goldenenv up creates "
                          "it again")

    def check(self, spec: ClusterSpec) -> list[Problem]:
        problems = []
        if not REGION.fullmatch(spec.region):
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not a Tencent Cloud region name (e.g. "
                                    "ap-guangzhou, ap-shanghai, ap-beijing)"))
        problems += zone_problems(CLOUD, spec) + self._currency(spec) + self._storage(spec) + self._lifecycle(spec)
        site = CURRENCIES.get(spec.budget.currency) if spec.budget else None
        for i, pool in enumerate(spec.nodes):
            at = pool_key(i, len(spec.nodes))
            it = catalog.instance_types(CLOUD).get(pool.instance_type)
            if it is None:
                continue
            problems += host_image_problems(CLOUD, spec, pool, f"{at}.hostImage", HOST_IMAGE_FORM)
            if pool.rdma and not is_hcc(it.name):
                problems.append(Problem(f"{at}.{pool.rdma_key}", f"{it.name} is not an HCC type: only HCC types join "
                                        "an HPC cluster and its RDMA network (InvalidParameterValue."
                                        "InstanceTypeNotSupportHpcCluster); pick an HCC type or set rdma: false"))
            if is_hcc(it.name) and pool.count > limits.HPC_CLUSTER_INSTANCES.value:
                problems.append(Problem(f"{at}.count", f"{pool.count} nodes in one HPC cluster; at most "
                                        f"{limits.HPC_CLUSTER_INSTANCES.value} ({limits.HPC_CLUSTER_INSTANCES.source})"))
            if Capacity.SPOT in pool.capacities:
                if site == "international":
                    problems.append(Problem(f"{at}.capacity", "Tencent Cloud International sells only "
                                            "POSTPAID_BY_HOUR and CDHPAID, no spot (tencentcloud-iac-pulumi 0.2.3 "
                                            "instance.instance_charge_type); use capacity: on-demand"))
                elif catalog.price(CLOUD, it.name, spec.region) is None:
                    problems.append(Problem(f"{at}.capacity", f"a spot node bids a max price, and the catalog has no "
                                            f"price for {it.name} in {spec.region} (prices.csv) to bid: use "
                                            "capacity: on-demand, or add the price"))
        written = tags.written(spec.stack_tags)
        if len(written) > tags.MAX_TAGS:
            problems.append(Problem("goldenenv:tags", f"{len(written)} tags; Tencent takes at most {tags.MAX_TAGS} "
                                    f"per resource ({tags.SOURCE})"))
        from goldenenv.clouds import tagrules

        keys = tagrules.tag_keys(spec)
        problems += [Problem(keys[k], f"Tencent Cloud refuses a tag whose {what} begins or ends with a space")
                     for k, what in tags.edge_space_problems(spec.stack_tags)]
        return problems + tagrules.problems(tagrules.rule_of(CLOUD), spec)

    @staticmethod
    def _currency(spec: ClusterSpec) -> list[Problem]:
        if spec.budget and spec.budget.currency not in CURRENCIES:
            return [Problem("goldenenv:budget.currency", f"Tencent Cloud bills in CNY (China site) or USD "
                            f"(international site); got {spec.budget.currency!r}")]
        return []

    @staticmethod
    def _storage(spec: ClusterSpec) -> list[Problem]:
        fs = spec.storage.parallel_fs
        problems = []
        name = spec.storage.bucket.bucket_name
        if name and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,48}[a-z0-9]", name):
            problems.append(Problem(storage.BUCKET_KEY, f"{name!r} is not a COS bucket name: lower-case letters, "
                                    "digits and '-', at most 50 before Tencent's -<appid>"))
        if ipaddress.ip_network(spec.network.cidr).overlaps(storage.TURBO_CIDR):
            problems.append(Problem("goldenenv:network.cidr", f"{spec.network.cidr} overlaps {storage.TURBO_CIDR}, "
                                    "the range CFS Turbo takes on its CCN: pick another VPC range"))
        if not fs.enabled:
            return problems
        minimum = limits.TURBO_MIN_GIB[storage.TURBO_STORAGE_TYPE]
        if fs.size_gib < minimum.value:
            problems.append(Problem(SIZE_KEY, f"{fs.size_gib} GiB is below CFS Turbo's minimum of {minimum.value:,} "
                                    f"GiB ({minimum.source})"))
        elif fs.size_gib % limits.TURBO_STEP_GIB_TP:
            problems.append(Problem(SIZE_KEY, f"{fs.size_gib} GiB is not a multiple of CFS Turbo's "
                                    f"{limits.TURBO_STEP_GIB_TP:,} GiB step ({limits.TURBO_STEP_GIB.source})"))
        return problems

    @staticmethod
    def _lifecycle(spec: ClusterSpec) -> list[Problem]:
        """The time to live and the idle stop run in the budget's stop function (budget.py): a stack with no budget
        has none to run them."""
        if spec.budget:
            return []
        return [Problem(f"goldenenv:lifecycle.{key}", f"{CLOUD} runs {what} in the budget's stop function, and this "
                        "stack has no budget: add goldenenv:budget (monthlyLimit, currency, emails), or drop "
                        f"{key}")
                for key, what, value in (("ttlHours", "the time-to-live stop", spec.lifecycle.ttl_hours),
                                         ("idleMinutes", "the idle stop", spec.lifecycle.idle_minutes))
                if value is not None]

    def offline_lookup(self, spec: ClusterSpec) -> storage.OfflineLookup:
        return storage.OfflineLookup()

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """What Tencent computes for a new resource (ids, addresses), as stand-ins; values depend on the resource
        alone."""
        if args.typ == "pulumi:providers:tencentcloud":
            return None
        n = stable_number(f"{args.typ}::{args.name}")
        short = f"{n:x}"[:8]
        kind = args.typ.rsplit(":", 1)[-1]
        module = args.typ.split(":")[1].split("/")[0] if args.typ.startswith("tencentcloud:") else ""
        if args.typ == limits.INSTANCE:
            return f"ins-{short}", {"privateIp": mock_address(args.name), "instanceStatus": "RUNNING"}
        if args.typ == "pulumi-python:dynamic:Resource":
            return f"df-{short}", {"dataFlowId": f"df-{short}"}
        if kind == "FileSystem":
            return f"cfs-{short}", {"fsId": f"cfs-{short}", "mountIp": f"172.31.254.{10 + n % 200}"}
        if kind == "Instance" and module == "Eip":
            return f"eip-{short}", {"publicIp": f"198.51.100.{10 + n % 200}"}
        if kind == "Secret":
            return args.inputs.get("secretName", args.name), {}
        if kind in ("Role", "Function"):
            return args.inputs.get("name", args.name), {}
        if args.typ == "tencentcloud:Cam/user:User":
            return f"user-{short}", {"uid": 100000000 + n % 900000000}
        if kind == "Bucket":
            return args.inputs.get("bucket", args.name), {}
        prefixes = {"Vpc": "vpc", "Subnet": "subnet", "Security": "sg", "Nat": "nat", "Route": "rtb", "Ccn": "ccn",
                    "Cfs": "pgroup", "Tcr": "tcr", "Cam": "policy", "Key": "skey", "Cvm": "hpc"}
        if module in prefixes:
            return f"{prefixes[module]}-{short}", {}
        return None, {}

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        types = sorted({pool.instance_type for pool in spec.nodes} | {self.head_instance_type})
        placeholders = [t for t in types if (p := catalog.price(CLOUD, t, spec.region)) and "unverified" in p.source]
        notes = [f"Tencent Cloud: the catalog's price for {', '.join(placeholders)} in {spec.region} is unverified "
                 "(a placeholder or a currency conversion: the source column of clouds/tencent/catalog/prices.csv "
                 "says which; InquiryPriceRunInstances with an account gives the real one), so the cost lines are "
                 "estimates"] if placeholders else []
        if spec.budget:
            notes.append("budget alerts go to the account's own billing notification recipients (Tencent's budget "
                         "takes no address: goldenenv:budget.emails is not where they go)")
            if spec.budget.emails and (spec.budget.hard_stop or spec.lifecycle.ttl_hours
                                       or spec.lifecycle.idle_minutes):
                notes.append("a failing stop function alerts goldenenv:budget.emails through a Cloud Monitor alarm, "
                             "whose notices reach CAM users, not addresses: up creates one CAM user per address (no "
                             "login, no key, no policy), and Tencent mails each address a '[Tencent Cloud] Email "
                             "Receipt Verification': until its owner clicks 'Confirm to receive' no alarm reaches it. "
                             "Addresses: " + ", ".join(spec.budget.emails))
            notes.append("the budget alerts through Tencent's billing budget; the stop function reads the month's "
                         "bill by the stack's cost-allocation tag (DescribeBillSummaryByTag), which counts only once "
                         "the tag is a cost-allocation tag (the stack makes it one) and while the bill is Ready: an "
                         "unready bill is treated as over the limit")
        for pool in spec.nodes:
            if is_hcc(pool.instance_type):
                notes.append(f"{pool.name}: HCC nodes join the pool's HPC cluster in {spec.placed_zone or 'the zone'}; "
                             "their RDMA bonds come up by Tencent's rdma-agent, which the host image must carry "
                             "(a public image supporting RDMA installs it at startup)")
        if spec.storage.parallel_fs.enabled:
            notes.append("CFS Turbo is mounted with Tencent's Turbo client, which the host image must carry "
                         "(templates/node/cfs-turbo-mount.sh.j2); destroy exports it to the bucket first")
        shape = head_shape(spec, self)
        if shape:
            notes.append(f"Slurm: the head ({shape.instance_type}, no public address) writes the munge key as "
                         f"version munge of SSM secret {secret_name(spec.tags.project, spec.stack)} on its first boot")
        return notes

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        from goldenenv.clouds.tencent import readiness

        return readiness.findings(resources, required_tags)

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        if not spec.storage.parallel_fs.enabled:
            return []
        return [f"export CFS Turbo to cos://{outputs.get('bucket') or '<bucket>'}/ (a lifecycle task, archive, on "
                "the stack's data flow) and wait; a failed export stops destroy before anything is deleted "
                "(--skip-export destroys without it)"]

    def preflight(self, spec: ClusterSpec) -> None:
        _credentials()

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None],
                  lookup: storage.TencentLookup | None = None) -> Any:
        """The caller's app id and the stack's bucket: an existing one is adopted (imported) by the program."""
        lookup = lookup or storage.LiveLookup(spec.region)
        name = storage.bucket_full_name(spec.storage.bucket.bucket_name or bucket_name(spec.tags.project,
                                                                                        spec.stack), lookup.appid())
        if lookup.bucket_exists(name):
            log(f"adopting retained bucket {name} (datasets and checkpoints of an earlier up)")
        return name

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None], call: Any = None) -> None:
        fs_id, flow_id = outputs.get("fileSystemId"), outputs.get("dataFlowId")
        if not fs_id or not flow_id:
            return
        if skip_export:
            log(f"not exporting {fs_id} (--skip-export): files not yet in the bucket are lost")
            return
        try:
            dataflow.run_task(spec.region, fs_id, flow_id, dataflow.ARCHIVE, "/", log, call=call)
        except dataflow.ExportFailed as e:
            raise StoreError(f"{e}. Nothing was destroyed: fix the export and destroy again, or pass --skip-export "
                             "(files not yet exported are lost)") from None

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None],
              client: Any = None) -> list[str]:
        """Delete the stack's COS bucket by name (--purge-data): every object version, delete marker and unfinished
        upload, then the bucket (purge.py). CFS Turbo is no retained store: `pulumi destroy` deletes it with the
        stack, and so is the image registry (TCR), which no retained store holds."""
        bucket = outputs.get("bucket")
        if not bucket:
            return []
        try:
            client = client or purge.cos_client(spec.region, _credentials())
            return [bucket] if purge.purge_bucket(bucket, client, log) else []
        except (purge.PurgeFailed, StoreError) as e:
            raise StoreError(f"{e}. Fix the cause, then empty and delete bucket {bucket} in the COS console (a "
                             "destroyed stack no longer names it to destroy again)") from None

    def registry_url(self, spec: ClusterSpec) -> str:
        return repository_url(*registry_names(spec.tags.project, spec.stack))

    def registry_auth(self, spec: ClusterSpec, registry: str, call: Any = None) -> dict:
        """A one-hour docker login (tcr CreateInstanceToken, temp) with the caller's credentials."""
        call = call or api.client(_credentials(), spec.region)
        instance = registry.split(".", 1)[0]
        found = call("tcr", TCR_VERSION, "DescribeInstances",
                     {"Filters": [{"Name": "RegistryName", "Values": [instance]}]}).get("Registries") or []
        if not found:
            raise StoreError(f"no TCR instance {instance} in {spec.region}: run goldenenv up first")
        token = call("tcr", TCR_VERSION, "CreateInstanceToken", {"RegistryId": found[0]["RegistryId"],
                                                                 "TokenType": "temp"})
        return {"username": token["Username"], "password": token["Token"], "registry": registry_host(instance)}

    def build(self, spec: ClusterSpec, context: BuildContext | None = None) -> dict[str, Any]:
        provider = tencentcloud.Provider(CLOUD, region=spec.region)
        cluster = GpuCluster(spec.stack, spec, context or BuildContext(), pulumi.ResourceOptions(providers=[provider]))
        return cluster.outputs
