"""Huawei Cloud: GPU ECS pools on a private VPC with a NAT gateway, OBS with SFS Turbo HPC linked by its backend
target, SWR, the munge key in DEW/CSMS, and a stop function that is the budget (BSS only bills: it cannot stop).

Outside Pulumi, the cloud's lifecycle hooks: preflight (the caller's Huawei credentials), before_up (whether the
stack's bucket exists, to adopt it), before_destroy (export SFS Turbo's linked folder to the bucket and wait:
obslink.export), purge (refused: the bucket stays, said how to empty it).

The Ascend Lite Server pools (ModelArts CreateDevServer) and the huawei-snt9b-2node stack plug in once the
accelerator seam exists: docs/research/huawei-status.md says how.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import pulumi

with warnings.catch_warnings():
    # pulumi-huaweicloud 0.0.12 imports pkg_resources (setuptools 80.9.0: the huawei extra pins it), which warns
    warnings.simplefilter("ignore")
    import pulumi_huaweicloud as huaweicloud

from goldenenv import catalog
from goldenenv.clouds.base import (
    BuildContext, Capability, DockerReach, HostImageForm, NodeLogin, PulumiCloud, head_shape, host_image_problems,
    mock_address, stable_number, zone_problems,
)
from goldenenv.clouds.huawei import api, headarch, limits, liteservers, obslink, storage, tags
from goldenenv.clouds.huawei.basics import CLOUD, UUID, bucket_name, registry_names, secret_name
from goldenenv.clouds.huawei.nodes import NODE_UPDATES
from goldenenv.clouds.huawei.parts import GpuCluster
from goldenenv.clouds.huawei.registry import api_host, registry_host, repository_url
from goldenenv.spec import Capacity, ClusterSpec, ConfigError, Problem, pool_key

REGION = re.compile(r"^[a-z]{2}-[a-z]+-\d{1,2}$")
"""cn-north-4, cn-east-3, ap-southeast-1, la-south-2 ..."""
HOST_IMAGE_FORM = HostImageForm(UUID, "<image UUID>", "is not a Huawei image ID (a UUID, e.g. the IMS image's ID)",
                                "0d3f3c4e-0a1b-4c2d-8e9f-0123456789ab")
CURRENCIES = {"CNY": "china", "USD": "international"}
"""What Huawei bills in, by site: CNY on the China site (BSS's currency: 'CNY：人民币', huaweicloudsdkbss 3.1.219),
USD on the international site (unverified)."""
SIZE_KEY = "goldenenv:storage.parallelFs.sizeGib"


class StoreError(RuntimeError):
    """A precondition on Huawei Cloud is missing (credentials), or a retained store could not be kept safe."""


def _credentials() -> api.Credentials:
    try:
        return api.credentials_from_env()
    except ConfigError:
        raise StoreError(api.CREDENTIALS_HELP) from None


class HuaweiCloud(PulumiCloud):
    name = CLOUD
    capabilities = frozenset({Capability.RDMA, Capability.PARALLEL_FS, Capability.BUDGET, Capability.HARD_STOP})
    registry_types = ("huaweicloud:Swr/",)
    key_props = {
        "huaweicloud:Vpc/vpc:Vpc": ("cidr",),
        "huaweicloud:Vpc/subnet:Subnet": ("cidr", "availabilityZone"),
        "huaweicloud:Nat/gateway:Gateway": ("spec",),
        limits.INSTANCE: ("flavorId", "imageId", "imageName", "chargingMode"),
        limits.DEVSERVER: ("flavor", "imageId"),
        "huaweicloud:Sfs/turbo:Turbo": ("shareType", "hpcBandwidth", "size"),
        "huaweicloud:Iam/agency:Agency": ("name", "delegatedServiceName"),
        "huaweicloud:Dew/secret:Secret": ("name",),
    }
    data_bearing = {"Instance": "system disk erased", "DevServer": "root volume erased", "Turbo": "SFS Turbo after its export to the bucket"}
    store_kinds = ("Bucket",)
    node_updates = NODE_UPDATES
    ssh_user = "root"
    """Huawei's Linux public images log in as root ("The initial password of user root is used for authentication in
    Linux": https://support.huaweicloud.com/intl/en-us/api-ecs/ecs_02_0101.html); a key pair logs in as the same."""
    head_instance_type = "c6.large.2"
    user_data_limit = limits.USER_DATA
    host_image_form = HOST_IMAGE_FORM

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """SFS Turbo mounts over NFS (templates/node/sfs-turbo-mount.sh.j2), from the distribution's packages."""
        return None

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> NodeLogin:
        return NodeLogin(self.ssh_user, DockerReach.DIRECT, f"ssh as {self.ssh_user} with nodes.sshPublicKey (the "
                         "key pair) from network.adminCidrs")

    def check(self, spec: ClusterSpec) -> list[Problem]:
        problems = []
        if not REGION.fullmatch(spec.region):
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not a Huawei Cloud region name (e.g. "
                                    "cn-north-4, cn-east-3, ap-southeast-1)"))
        problems += zone_problems(CLOUD, spec) + self._currency(spec) + self._storage(spec) + self._lifecycle(spec)
        problems += headarch.problems(spec, self)
        for i, pool in enumerate(spec.nodes):
            at = pool_key(i, len(spec.nodes))
            if catalog.instance_types(CLOUD).get(pool.instance_type) is None:
                continue
            problems += host_image_problems(CLOUD, spec, pool, f"{at}.hostImage", HOST_IMAGE_FORM)
            if liteservers.is_lite_server(pool.instance_type):
                problems += liteservers.pool_problems(spec, pool, at)
                continue
            if pool.rdma:
                problems.append(Problem(f"{at}.{pool.rdma_key}", f"{pool.instance_type} has no RDMA on Huawei's "
                                        "GPU ECS flavors goldenenv knows; set rdma: false (RoCE comes with the "
                                        "Ascend Lite Server flavors: "
                                        f"{', '.join(liteservers.lite_server_types()) or 'none in the catalog'})"))
            if Capacity.SPOT in pool.capacities:
                problems.append(Problem(f"{at}.capacity", "goldenenv offers no spot on Huawei Cloud yet: whether "
                                        "Huawei sells its GPU flavors as spot, and where a spot ECS reads its "
                                        "reclaim notice, are unverified; use capacity: on-demand"))
        written = tags.written(spec.stack_tags)
        if len(written) > tags.MAX_TAGS:
            problems.append(Problem("goldenenv:tags", f"{len(written)} tags; Huawei takes at most {tags.MAX_TAGS} "
                                    f"per resource ({tags.SOURCE})"))
        from goldenenv.clouds import tagrules

        return problems + tagrules.problems(tagrules.rule_of(CLOUD), spec)

    @staticmethod
    def _currency(spec: ClusterSpec) -> list[Problem]:
        if spec.budget and spec.budget.currency not in CURRENCIES:
            return [Problem("goldenenv:budget.currency", f"Huawei Cloud bills in CNY (China site) or USD "
                            f"(international site); got {spec.budget.currency!r}")]
        return []

    @staticmethod
    def _storage(spec: ClusterSpec) -> list[Problem]:
        problems = []
        name = spec.storage.bucket.bucket_name
        if name and not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
            problems.append(Problem(storage.BUCKET_KEY, f"{name!r} is not an OBS bucket name: 3 to 63 lower-case "
                                    "letters, digits, '.' and '-' (pulumi-huaweicloud 0.0.12 obs.Bucket)"))
        fs = spec.storage.parallel_fs
        if fs.enabled:
            problem = limits.turbo_size_problem(fs.size_gib, storage.TURBO_BANDWIDTH)
            if problem:
                problems.append(Problem(SIZE_KEY, f"{fs.size_gib} GiB for SFS Turbo HPC {problem[3:]}"))
        return problems

    @staticmethod
    def _lifecycle(spec: ClusterSpec) -> list[Problem]:
        """The time to live and the idle stop run in the budget's stop function (budget.py, stop.py): a stack with
        no budget has none to run them."""
        if spec.budget:
            lite = [p.name for p in spec.nodes if liteservers.is_lite_server(p.instance_type)]
            if spec.lifecycle.idle_minutes is None or not lite:
                return []
            return [Problem("goldenenv:lifecycle.idleMinutes", f"the idle stop judges a server by Cloud Eye's ECS "
                            f"CPU, and no metric of an Ascend Lite Server (pool {', '.join(lite)}) is read, so it "
                            "would never stop them; drop idleMinutes (ttlHours and the budget stop them)")]
        return [Problem(f"goldenenv:lifecycle.{key}", f"{CLOUD} runs {what} in the budget's stop function, and this "
                        "stack has no budget: add goldenenv:budget (monthlyLimit, currency, emails), or drop "
                        f"{key}")
                for key, what, value in (("ttlHours", "the time-to-live stop", spec.lifecycle.ttl_hours),
                                         ("idleMinutes", "the idle stop", spec.lifecycle.idle_minutes))
                if value is not None]

    def offline_lookup(self, spec: ClusterSpec) -> storage.OfflineLookup:
        return storage.OfflineLookup()

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """What Huawei computes for a new resource (ids, addresses), as stand-ins; values depend on the resource
        alone."""
        if args.typ == "pulumi:providers:huaweicloud":
            return None
        n = stable_number(f"{args.typ}::{args.name}")
        uuid = f"{n:032x}"[-32:]
        uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
        if args.typ == limits.INSTANCE:
            return uuid, {"accessIpV4": mock_address(args.name), "status": "ACTIVE"}
        if args.typ == limits.DEVSERVER:
            return uuid, {**args.inputs, "serverId": uuid, "status": "RUNNING",
                          "privateIp": mock_address(args.name)}
        if args.typ == "pulumi-python:dynamic:Resource":
            return uuid, {"targetId": uuid}
        if args.typ == "huaweicloud:Sfs/turbo:Turbo":
            return uuid, {"exportLocation": f"192.168.0.{10 + n % 200}:/"}
        if args.typ == "huaweicloud:FunctionGraph/function:Function":
            name = args.inputs.get("name", args.name)
            return uuid, {"urn": f"urn:fss:{args.inputs.get('region') or 'cn-north-4'}:0:function:default:{name}"}
        if args.typ in ("huaweicloud:Iam/agency:Agency", "huaweicloud:Iam/role:Role", "huaweicloud:Dew/secret:Secret",
                        "huaweicloud:Swr/organization:Organization", "huaweicloud:Ecs/keypair:Keypair"):
            return args.inputs.get("name", args.name), {}
        if args.typ == "huaweicloud:Obs/bucket:Bucket":
            return args.inputs.get("bucket", args.name), {}
        if args.typ == "huaweicloud:Smn/topic:Topic":
            name = args.inputs.get("name", args.name)
            return uuid, {"topicUrn": f"urn:smn:{args.inputs.get('region') or 'cn-north-4'}:0:{name}"}
        if args.typ == "huaweicloud:Vpc/eip:Eip":
            return uuid, {"address": f"198.51.100.{10 + n % 200}"}
        return uuid, {}

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        notes = ["Huawei Cloud: which zones sell a GPU flavor and its price are known only to an account "
                 "(ECS ListFlavorSellPolicies; the price calculator): the catalog's Huawei prices are placeholders "
                 "(prices.csv, unverified)"]
        notes += liteservers.plan_notes(spec)
        if spec.budget:
            notes.append("Huawei's budgets only alert (BSS has no budget that acts): the stack's stop function reads "
                         f"the month's bill by the tag {tags.STACK_KEY} every hour (BSS resource records, Beijing "
                         "time) and stops the tagged servers at the limit; a bill it cannot read counts as over it")
        if spec.storage.parallel_fs.enabled:
            notes.append("SFS Turbo HPC is linked to the bucket (its backend target exports new and changed files); "
                         "destroy exports it first. Huawei's console guide says an encrypted bucket cannot be "
                         "linked, and the stack's bucket is encrypted: a real account must confirm the link")
        shape = head_shape(spec, self)
        if shape:
            notes.append(f"Slurm: the head ({shape.instance_type}, no public address) writes the munge key as a new "
                         f"version of DEW/CSMS secret {secret_name(spec.tags.project, spec.stack)} on its first boot")
        return notes

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        from goldenenv.clouds.huawei import readiness

        return readiness.findings(resources, required_tags)

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        if not spec.storage.parallel_fs.enabled:
            return []
        return [f"export SFS Turbo's {obslink.LINKED_FOLDER}/ to obs://{outputs.get('bucket') or '<bucket>'}/ (an "
                "export task on its backend target) and wait; a failed export stops destroy before anything is "
                "deleted (--skip-export destroys without it)"]

    def preflight(self, spec: ClusterSpec) -> None:
        _credentials()

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None],
                  lookup: storage.HuaweiLookup | None = None) -> Any:
        """Whether the stack's bucket exists: an existing one is adopted (imported) by the program."""
        lookup = lookup or storage.LiveLookup(spec.region)
        name = spec.storage.bucket.bucket_name or bucket_name(spec.tags.project, spec.stack)
        if lookup.bucket_exists(name):
            log(f"adopting retained bucket {name} (datasets and checkpoints of an earlier up)")
        return name

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None], call: Any = None) -> None:
        share = outputs.get("fileSystemId")
        if not share or not outputs.get("backendTargetId"):
            return
        if skip_export:
            log(f"not exporting SFS Turbo {share} (--skip-export): files not yet in the bucket are lost")
            return
        try:
            obslink.export(spec.region, share, log, call=call)
        except obslink.ExportFailed as e:
            raise StoreError(f"{e}. Nothing was destroyed: fix the export and destroy again, or pass --skip-export "
                             "(files not yet exported are lost)") from None

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None]) -> list[str]:
        bucket = outputs.get("bucket")
        if not bucket:
            return []
        raise StoreError(f"the stack is destroyed, but OBS bucket {bucket} and its data are kept: goldenenv cannot "
                         "delete an OBS bucket yet (the huawei extra carries no OBS client). Empty and delete it in "
                         "the OBS console (or with Huawei's obsutil) if its datasets and checkpoints are to go; the "
                         "next up of this stack would adopt it")

    def registry_url(self, spec: ClusterSpec) -> str:
        return repository_url(spec.region, *registry_names(spec.tags.project, spec.stack))

    def registry_auth(self, spec: ClusterSpec, registry: str, call: Any = None) -> dict:
        """A temporary docker login (SWR CreateSecret) with the caller's credentials."""
        import base64

        call = call or api.client(_credentials())
        answer = call("POST", f"https://{api_host(spec.region)}/v2/manage/utils/secret?projectname={spec.region}",
                      {})
        auths = answer.get("auths") or {}
        if not auths:
            raise StoreError(f"SWR gave no login for {spec.region}: its answer named no registry")
        user, _, password = base64.b64decode(next(iter(auths.values()))["auth"]).decode().partition(":")
        return {"username": user, "password": password, "registry": registry_host(spec.region)}

    def build(self, spec: ClusterSpec, context: BuildContext | None = None) -> dict[str, Any]:
        provider = huaweicloud.Provider(CLOUD, region=spec.region)
        cluster = GpuCluster(spec.stack, spec, context or BuildContext(), pulumi.ResourceOptions(providers=[provider]))
        return cluster.outputs
