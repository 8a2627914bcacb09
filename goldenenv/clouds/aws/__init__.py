"""AWS: EFA GPU clusters in a cluster placement group, S3 + FSx for Lustre, AWS Budgets."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_aws as aws

from goldenenv import catalog
from goldenenv.clouds.aws.basics import RetainedStores, pool_types, spot_request
from goldenenv.clouds.aws.parts import GpuCluster
from goldenenv.clouds.aws.nodes import NODE_UPDATES, login_notes, ssh_key_problems
from goldenenv.clouds.aws import capacity_blocks, limits, retained
from goldenenv.clouds.aws import spot as spot_requests
from goldenenv.clouds.aws.registry import repository_name
from goldenenv.clouds.aws.storage import bucket_tags
from goldenenv.clouds.aws.teardown import idle_cpu_threshold
from goldenenv.clouds.base import (
    BuildContext, Capability, HostImageForm, PulumiCloud, head_shape, key_words, mock_address, stable_number,
)
from goldenenv.images import publish
from goldenenv.spec import STACK_TAG_KEY, Capacity, ClusterSpec, Problem, pool_key

REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d$")
AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
HOST_IMAGE_FORM = HostImageForm(AMI, "ami-...", "is not an AMI id (ami-0123456789abcdef0)", "ami-0123456789abcdef0")


class StoreError(RuntimeError):
    """A precondition on AWS is missing (credentials), or a retained store could not be prepared or kept safe;
    the message says what to do."""


RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
"""An EC2 Capacity Reservation (or Capacity Block) id."""


def _asked(what: str, call: Callable[[], Any]) -> Any:
    """An AWS call the caller's login answers: its refusal (expired or missing credentials, no permission) is said
    as a RuntimeError naming what was asked, which the command prints, never a botocore traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return call()
    except (BotoCoreError, ClientError) as e:
        raise RuntimeError(f"AWS did not give {what}: {e}; check the login with `aws sts get-caller-identity`") \
            from None


class AwsCloud(PulumiCloud):
    name = "aws"
    capabilities = frozenset(Capability)
    registry_types = ("aws:ecr/",)
    """Type prefixes of the stack's image registry resources (what `image push -s` creates first)."""
    key_props = {
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("cidrBlock", "availabilityZone", "mapPublicIpOnLaunch"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("serviceName", "vpcEndpointType"),
    "aws:ec2/placementGroup:PlacementGroup": ("strategy",),
    "aws:ec2/launchTemplate:LaunchTemplate": ("instanceType", "imageId", "metadataOptions.httpTokens"),
    "aws:ec2/instance:Instance": ("tags.Name", "instanceType", "associatePublicIpAddress", "metadataOptions.httpTokens",
                                  "rootBlockDevice.encrypted"),
    "aws:s3/bucket:Bucket": ("forceDestroy",),
    "aws:s3/bucketVersioning:BucketVersioning": ("versioningConfiguration.status",),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("deploymentType", "storageCapacity", "perUnitStorageThroughput"),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": ("dataRepositoryPath", "fileSystemPath"),
    "aws:budgets/budget:Budget": ("limitAmount", "limitUnit", "costFilters"),
    "aws:sns/topicSubscription:TopicSubscription": ("protocol",),
    "aws:ecr/repository:Repository": ("name", "imageTagMutability"),
    "aws:secretsmanager/secret:Secret": ("kmsKeyId",),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ("description",),
    }
    data_bearing = {"Instance": "root volume and local NVMe scratch erased", "LustreFileSystem": "after the export"}
    store_kinds = ("Bucket", "Repository")
    """Kinds of the retained stores plan names (their settings, also kept, are not listed)."""
    placeholder_account = retained.PLACEHOLDER_ACCOUNT
    node_updates = NODE_UPDATES
    destroy_runs_program = True
    """Persistent spot nodes cancel their request in a delete hook (spot.cancel_request_hook)."""
    user_data_limit = limits.USER_DATA
    host_image_form = HOST_IMAGE_FORM
    head_instance_type = "m7i.large"

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """FSx for Lustre's client (the Lustre client modules for the node's kernel) when the stack has FSx."""
        return "fsx-lustre" if spec.storage.parallel_fs.enabled else None

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> Any:
        """ubuntu (the Ubuntu Deep Learning AMI's cloud-init user, with passwordless sudo) with nodes.sshPublicKey,
        through SSM or from adminCidrs. No AWS page we read says the DLAMI puts ubuntu in the docker group, so Docker
        is reached through sudo."""
        from goldenenv.clouds.base import DockerReach, NodeLogin

        return NodeLogin(self.ssh_user, DockerReach.SUDO, f"ssh as {self.ssh_user} with nodes.sshPublicKey, through "
                         "SSM (--hosts-by instance-id, the ssh config plan prints) or from network.adminCidrs")

    def spot_return(self, spec: ClusterSpec, pool: Any) -> Any:
        """Outside a placement group EC2 restarts a reclaimed node itself (a persistent request, interruption
        behaviour stop); in one (EFA pools) the node is terminated and the next `up` creates it again."""
        from goldenenv.clouds.base import SpotBack, SpotReturn

        if spot_request(pool) == spot_requests.PERSISTENT:
            return SpotReturn((SpotBack.CLOUD,), ("aws:ec2/launchTemplate:LaunchTemplate",
                                                  "instanceMarketOptions.spotOptions.instanceInterruptionBehavior",
                                                  "stop"), spot_note(pool))
        return SpotReturn((SpotBack.UP_RECREATES,), how=spot_note(pool))
    """A 2-vCPU, 8-GiB on-demand Intel (x86_64, like the golden image) general purpose type: slurmctld for a few
    hundred nodes needs little; catalog head_types.csv and prices.csv."""

    def preflight(self, spec: ClusterSpec) -> None:
        import boto3

        if boto3.Session().get_credentials() is None:
            raise StoreError("no AWS credentials: run `aws configure` or `aws sso login`, or set AWS_PROFILE / "
                             "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")

    def registry_url(self, spec: ClusterSpec, sts=None) -> str:
        """`<account>.dkr.ecr.<region>.amazonaws.com/<name>`: the URL ECR gives the stack's repository."""
        import boto3

        account = _asked("the caller's account (sts get-caller-identity)", lambda: (
            sts or boto3.client("sts", region_name=spec.region)).get_caller_identity()["Account"])
        name = repository_name(spec.tags.project, spec.stack, spec.image.lock)
        return f"{account}.dkr.ecr.{spec.region}.amazonaws.com/{name}"

    def registry_auth(self, spec: ClusterSpec, registry: str, ecr=None) -> dict:
        """Docker credentials for an ECR registry, from the caller's AWS credentials."""
        import base64

        import boto3

        token = _asked("an ECR login (ecr get-authorization-token)", lambda: (
            ecr or boto3.client("ecr", region_name=spec.region)).get_authorization_token()["authorizationData"][0])
        user, _, password = base64.b64decode(token["authorizationToken"]).decode().partition(":")
        return {"username": user, "password": password, "registry": registry.split("/", 1)[0]}

    def check(self, spec: ClusterSpec) -> list[Problem]:
        problems = []
        if not REGION.fullmatch(spec.region):  # fullmatch: `$` in `match` also accepts "us-east-1\n"
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not an AWS region name (e.g. us-east-1)"))
        for i, pool in enumerate(spec.nodes):
            if pool.capacity_reservation_id and not RESERVATION_ID.fullmatch(pool.capacity_reservation_id):
                problems.append(Problem(f"{pool_key(i, len(spec.nodes))}.capacityReservationId",
                                        f"'{pool.capacity_reservation_id}' is not an EC2 reservation id (cr- and "
                                        "8 to 17 hex digits)"))
        if spec.budget and spec.budget.currency != "USD":
            problems.append(Problem(
                "goldenenv:budget.currency",
                f"AWS Budgets count in USD only; got {spec.budget.currency!r}, set currency: USD",
            ))
        known = catalog.host_images(self.name)
        for i, pool in enumerate(spec.nodes):
            at = f"{pool_key(i, len(spec.nodes))}.hostImage"
            usable = [n for n, h in known.items() if h.region in ("*", spec.region)]
            if isinstance(pool.host_image, str) and pool.host_image not in usable:
                problems.append(Problem(at, f"{pool.host_image!r} is not a host image in the catalog for "
                                        f"{spec.region}; valid: {', '.join(usable) or 'none'}, or {{id, driver}}"))
            elif pool.host_image is None and not usable:
                problems.append(Problem(at, f"the catalog pins no host image for {spec.region}: set hostImage "
                                        "to {id: ami-..., driver: <its NVIDIA driver>}"))
            elif pool.host_image is not None and not isinstance(pool.host_image, str) \
                    and not AMI.fullmatch(pool.host_image.id):
                problems.append(Problem(f"{at}.id", f"{pool.host_image.id!r} is not an AMI id (ami-0123456789abcdef0)"))
        for i, pool in enumerate(spec.nodes):
            reserved = [c.value for c in pool.capacities if c.reserved]
            if reserved and spec.zones and len(spec.zones) > 1:
                problems.append(Problem("goldenenv:zones", f"{pool_key(i, len(spec.nodes))} runs on a "
                                        f"{reserved[0]}, which holds capacity in one zone: set goldenenv:zone to "
                                        "its zone instead of a list"))
        from goldenenv.clouds import tagrules

        return (problems + lustre_problems(spec) + limits.check_spec(spec) + ssh_key_problems(spec)
                + tagrules.problems(tagrules.rule_of(self.name), spec))

    def offline_lookup(self, spec: ClusterSpec) -> retained.OfflineLookup:
        """What the offline plan knows of the account: nothing exists, the account is a placeholder."""
        return retained.OfflineLookup()

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """What AWS computes for a new resource, as stand-ins marked mock (ids, addresses, DNS, URLs)."""
        n = stable_number(f"{args.typ}::{args.name}")
        state: dict[str, Any] = {"arn": f"arn:aws:mock::000000000000:{args.name}"}
        kind = args.typ.rsplit(":", 1)[-1]
        if kind == "Instance":
            state["privateIp"] = mock_address(args.name)
            return f"i-{n:017x}", state
        if kind == "LaunchTemplate":
            state["latestVersion"] = 1
        if kind == "LustreFileSystem":
            state.update(dnsName=f"fs-{n:017x}.fsx.mock.amazonaws.com", mountName=f"{n % 16**8:08x}")
        if kind == "Repository" and args.typ.startswith("aws:ecr/"):
            state["repositoryUrl"] = _ecr_url(args.inputs.get("name", args.name))
        if kind == "Bucket" and not args.inputs.get("bucket"):
            state["bucket"] = f"{args.name}-{n:07x}"
        return None, state

    def plan_call(self, args: Any) -> dict[str, Any] | None:
        if args.token == ZONES_TOKEN:
            return {"names": list(MOCK_ZONES), "zoneIds": [f"mock-az{i}" for i in range(1, len(MOCK_ZONES) + 1)]}
        if args.token == OFFERINGS_TOKEN:
            # which zones sell a type is the account's answer: offline, every mock zone sells every type asked for
            types = [v for f in args.args.get("filters", []) if f.get("name") == "instance-type"
                     for v in f.get("values", [])]
            sold = [(t, zone) for zone in MOCK_ZONES for t in types]
            return {"instanceTypes": [t for t, _ in sold], "locations": [z for _, z in sold],
                    "locationTypes": ["availability-zone"] * len(sold)}
        if args.token == "aws:ec2/getAmi:getAmi":
            names = [v for f in args.args.get("filters", []) if f.get("name") == "name" for v in f.get("values", [])]
            return {"id": MOCK_AMI, "name": names[0] if names else "", "owners": args.args.get("owners", [])}
        return None

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        """What the hard stop, the time to live and idleness do to each pool on EC2, and the account step the
        budget's tag filter needs."""
        notes: list[str] = []
        if spec.placed_zone is None:
            notes.append(f"no zone set: up takes the first zone of {spec.region}, in name order, where EC2 sells "
                         f"{', '.join(pool_types(spec))} (DescribeInstanceTypeOfferings, the account's answer); the "
                         "plan shows a mock zone. Set goldenenv:zone to choose it")
        spot = [pool for pool in spec.nodes if spot_request(pool) == spot_requests.ONE_TIME]
        notes += [spot_note(pool) for pool in spec.nodes if spot_request(pool)]
        if spec.budget and spec.budget.hard_stop:
            for pool in spot:
                notes.append(f"budget.hardStop terminates the {pool.count} one-time spot node(s) of {pool.name} when actual "
                             "spend passes 100 % (EC2 cannot stop one-time spot): their root volumes and instance-store "
                             "(local NVMe) data are lost; keep checkpoints in the bucket or the parallel file system")
            for pool in spec.nodes:
                it = catalog.instance_type(spec.cloud, pool.instance_type)
                if pool not in spot and it.local_nvme_count:
                    notes.append(f"budget.hardStop stops {pool.name}: stopping a {it.name} erases its "
                                 f"{it.local_nvme_count} instance-store (local NVMe) volume(s); EBS volumes are kept")
        if spec.budget:
            notes.append(
                f"the budget counts spend tagged {STACK_TAG_KEY}={spec.stack}, which AWS counts only once "
                f"{STACK_TAG_KEY} is an active cost allocation tag. That is an account-level step, done once by the "
                "management (payer) account - linked (member) accounts cannot activate it - in the Billing console "
                "(Cost allocation tags) or with `aws ce update-cost-allocation-tags-status --cost-allocation-tags-status "
                f"TagKey={STACK_TAG_KEY},Status=Active`. AWS lists a tag only about 24 h after it is first used, so do it "
                "a day after the first up; until then the budget sees no spend"
                + ("; budget.activateCostAllocationTag no longer creates anything: it is accepted, and this step is "
                   "still yours" if spec.budget.activate_cost_allocation_tag else ""))
        hard_stop = bool(spec.budget and spec.budget.hard_stop)
        if hard_stop:
            notes.append("budget.hardStop is repeated: the reaper runs every 15 minutes and, for the rest of the month "
                         "of a hard stop, stops any node started again"
                         + ("" if spec.lifecycle.ttl_hours else " (the stack has no lifecycle.ttlHours: the reaper's "
                            "runs do nothing else)"))
        if spec.lifecycle.ttl_hours or hard_stop:
            emails = spec.budget.emails if spec.budget else []
            notes.append("a failing reaper or hard-stop function sets off its CloudWatch Errors alarm, which emails "
                         + (f"{', '.join(emails)} through the stack's alert topic once each confirms AWS's "
                            "subscription email" if emails else
                            "nobody: the stack has no budget emails; subscribe to the stack's alert topic"))
        if spec.lifecycle.ttl_hours:
            notes.append(f"lifecycle.ttlHours: nodes are stopped {spec.lifecycle.ttl_hours:g} h after they start"
                         + (" (one-time spot nodes are terminated: EC2 cannot stop them)" if spot else "")
                         + "; storage and network keep billing until destroy")
        if spec.lifecycle.idle_minutes:
            for pool in spec.nodes:
                it = catalog.instance_type(spec.cloud, pool.instance_type)
                notes.append(f"lifecycle.idleMinutes judges {pool.name} idle by CPU, not GPU: below "
                             f"{idle_cpu_threshold(it.vcpus):.2g} % (half a core of {it.vcpus}); one busy core per GPU "
                             f"is {100 * it.gpu_count / it.vcpus:.1f} %")
        notes += [recovery_note(pool) for pool in spec.nodes if pool.capacity.value != "spot"]
        notes += [f"{pool.name}: Capacity Block {pool.capacity_reservation_id}, bought outside goldenenv (a purchase "
                  "cannot be cancelled, so up never buys one): up first checks it is scheduled or active, holds "
                  f"{pool.count} x {pool.instance_type} in the stack's zone, and outlasts goldenenv:run.hours from now "
                  "(EC2 terminates its instances from 30 minutes before its end); no placement group, EC2 places "
                  "a block's instances together" for pool in spec.nodes if pool.capacity is Capacity.CAPACITY_BLOCK]
        shape = head_shape(spec, self)
        if shape:
            notes.append(f"Slurm: the head ({shape.instance_type}, on demand, no public address) runs slurmctld and "
                         "queues the jobs; reach it like the nodes, at stack output headPrivateIp or by instance id "
                         f"(headInstanceId; `aws ssm start-session --region {spec.region} --target <id>`); EBS only, so "
                         "EC2 recovers it if its host fails. Its first boot writes the stack's munge key to Secrets Manager; goldenenv:scheduler: none runs no "
                         "head")
        return notes + login_notes(spec, self.ssh_user)

    def describe(self, resource: Any) -> list[str]:
        """Key properties, and a launch template's interfaces: EFA-only ones and ENA ones."""
        words = key_words(resource, self.key_props)
        if resource.type == "aws:ec2/launchTemplate:LaunchTemplate":
            kinds = [ni.get("interfaceType") for ni in resource.props.get("networkInterfaces", [])]
            words.append(f"efa={kinds.count('efa-only')} ena={kinds.count('interface')}")
        return words

    def quota_lines(self, asks, region: str) -> list[str]:
        """Which EC2 vCPU quota each pool counts against, with the vCPUs it needs (limits.vcpu_quota_lines)."""
        return limits.vcpu_quota_lines(asks, region)

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        """The deploy-readiness rules (`plan --strict`): AWS limits and behaviour the mock runtime cannot see."""
        from goldenenv.clouds.aws import readiness

        return readiness.findings(resources, required_tags)

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        """What `goldenenv destroy` does before Pulumi deletes anything."""
        if not spec.storage.parallel_fs.enabled:
            return []
        return [f"export the parallel file system to s3://{outputs.get('bucket', '<bucket>')}/ (FSx data repository "
                "task EXPORT_TO_REPOSITORY) and wait; a failed export stops destroy before anything is deleted "
                "(--skip-export destroys without it, losing files not yet exported). No final backup: AWS backs "
                "up no file system linked to S3"]

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None]) -> None:
        """Export the parallel file system to the bucket and wait (retained.export_file_system)."""
        fs_id = outputs.get("fileSystemId")
        if not fs_id:
            return
        if skip_export:
            log(f"not exporting {fs_id} (--skip-export): files written since the last automatic export are lost")
            return
        try:
            retained.export_file_system(fs_id, spec.region, log)
        except retained.ExportFailed as e:
            raise StoreError(f"{e}. Nothing was destroyed: fix the export (the bucket, the file system's data "
                             "repository association) and destroy again, or pass --skip-export to destroy without "
                             "it (files not yet exported are lost)") from None

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None], lookup: retained.AwsLookup | None = None,
                  clients: dict[str, Any] | None = None) -> RetainedStores:
        """Check the Capacity Blocks the pools launch into; find the retained stores this `up` adopts and give them
        the stack's tags, so the import matches."""
        clients = clients or {}
        if any(pool.capacity is Capacity.CAPACITY_BLOCK for pool in spec.nodes):
            found = capacity_blocks.problems(spec, capacity_blocks.live_describe(spec.region, clients.get("ec2")))
            if found:
                raise StoreError("refused before anything is created:\n  " + "\n  ".join(found))
        stores = RetainedStores.find(spec, lookup or retained.LiveLookup(spec.region))
        if stores.adopt_bucket:
            log(f"adopting retained bucket {stores.adopt_bucket} (datasets and checkpoints of an earlier up)")
            retained.align_tags(stores.adopt_bucket, bucket_tags(f"{spec.stack}-data", spec.stack_tags), spec.region,
                                client=clients.get("s3"), log=log)
        if stores.adopt_repository:
            log(f"adopting retained image repository {stores.adopt_repository}")
            retained.align_repository_tags(stores.adopt_repository, spec.stack_tags, spec.region,
                                           client=clients.get("ecr"), log=log)
            retained.align_repository_settings(stores.adopt_repository, spec.region, client=clients.get("ecr"),
                                               log=log)
        return stores

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None]) -> list[str]:
        """Delete the retained stores by name (asked for with --purge-data): the bucket and the image repository."""
        purged = []
        bucket = outputs.get("bucket")
        if bucket:
            retained.purge_bucket(bucket, spec.region, log)
            purged.append(bucket)
        repository = repository_name(spec.tags.project, spec.stack, spec.image.lock)
        if retained.purge_repository(repository, spec.region, log):
            purged.append(repository)
        return purged

    def build(self, spec: ClusterSpec, context: BuildContext | None = None) -> dict[str, Any]:
        provider = aws.Provider("aws", region=spec.region, default_tags={"tags": spec.stack_tags})
        cluster = GpuCluster(spec.stack, spec, context or BuildContext(), pulumi.ResourceOptions(providers=[provider]))
        return cluster.outputs


LUSTRE_THROUGHPUTS = (125, 250, 500, 1000)
"""PERSISTENT_2 per-unit storage throughput, MB/s per TiB (FSx for Lustre CreateFileSystem API reference)."""
LUSTRE_SIZE_STEP_GIB = 2400
"""PERSISTENT_2 SSD storage capacity: 1200 GiB or a multiple of 2400 GiB (same reference)."""


def lustre_problems(spec: ClusterSpec) -> list[Problem]:
    """The parallel file system's size and throughput as FSx for Lustre PERSISTENT_2 offers them."""
    fs = spec.storage.parallel_fs
    if not fs.enabled:
        return []
    problems = []
    if fs.size_gib != 1200 and fs.size_gib % LUSTRE_SIZE_STEP_GIB:
        problems.append(Problem("goldenenv:storage.parallelFs.sizeGib", f"{fs.size_gib} GiB is not a valid Lustre "
                                "size; use 1200 or a multiple of 2400 (2400, 4800, ...)"))
    if fs.throughput_per_tib not in LUSTRE_THROUGHPUTS:
        problems.append(Problem("goldenenv:storage.parallelFs.throughputPerTib", f"{fs.throughput_per_tib} is not "
                                f"offered; use one of {', '.join(map(str, LUSTRE_THROUGHPUTS))} MB/s per TiB"))
    return problems


ZONES_TOKEN = "aws:index/getAvailabilityZones:getAvailabilityZones"
OFFERINGS_TOKEN = "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"
MOCK_ZONES = ("mock-az-a", "mock-az-b")
"""The zones the offline plan answers with: the real ones are the account's, read at `up`."""


def spot_note(pool) -> str:
    """What happens to a spot pool's node when EC2 reclaims it, and what brings it back."""
    if spot_request(pool) == spot_requests.PERSISTENT:
        return (f"{pool.name}: persistent spot requests with interruption behaviour stop: a reclaimed node is "
                "stopped (EBS root volume, private address and instance id kept; instance-store scratch erased) and "
                "EC2 starts the same node again when capacity returns, which boots back into slurmd by itself; "
                "deleting a node (destroy, --roll-nodes) cancels its request first, so EC2 does not launch it again "
                "(`pulumi destroy` needs --run-program for that: goldenenv destroy passes it)")
    return (f"{pool.name}: one-time spot requests (a reclaimed node is terminated): EC2 restarts interrupted spot "
            "nodes only outside a placement group, and EFA pools sit in a cluster placement group; the next "
            "`goldenenv up` (it refreshes first) creates the node again and Slurm requeues its job meanwhile")


def recovery_note(pool) -> str:
    """Whether EC2's simplified automatic recovery moves a failed node to healthy hardware by itself: not for types
    with instance-store volumes ("an unsupported configuration for automatic instance recovery", EC2 User Guide)."""
    it = catalog.instance_type("aws", pool.instance_type)
    if not it.local_nvme_count:
        return (f"{pool.name}: EC2 recovers a {it.name} whose host fails (simplified automatic recovery, on by "
                "default) and it boots back into slurmd by itself")
    return (f"{pool.name}: EC2's automatic recovery does not cover {it.name} (instance-store volumes): a node whose "
            "host fails is DOWN in Slurm within SlurmdTimeout and its job is requeued onto the other nodes; stop and "
            "start it (or `goldenenv up --roll-nodes`) to move it to healthy hardware")


MOCK_AMI = "ami-00000000000000000"
"""What plan shows for an AMI found by name: the real id is looked up at `up`, in the stack's region."""


def _ecr_url(name: str) -> str:
    """The repository URL a push recorded for this repository name (the account is unknown offline), else a mock."""
    suffix = f".amazonaws.com/{name}"
    for published in publish.all_records():
        if published.repository.endswith(suffix) and ".dkr.ecr." in published.repository:
            return published.repository
    return f"000000000000.dkr.ecr.mock.amazonaws.com/{name}"
