"""Google Cloud: A3 Mega / A3 Ultra / A4 GPU clusters on their GPU networks, Cloud Storage + Managed Lustre, labels,
and a budget whose function stops the stack's nodes.

The GPU network is the catalog's, per machine type (network.py): GPUDirect-TCPXO on 8 GPU VPCs (A3 Mega), TCPX on
4 (A3 High), gIB on a RoCE network of 8 subnets with MRDMA NICs (A3 Ultra, A4). Nodes sit in a COLLOCATED compact
placement policy, have no external address, and boot into the golden container with cloud-init (nodes.py).
Outside Pulumi, the cloud's lifecycle hooks: before_up (find the retained bucket, never another stack's),
before_destroy (export Managed Lustre to the bucket and wait), purge (the bucket, by name).

The project is the Google provider's own: `gcp:project` in the stack file (Pulumi's default provider reads it), or
GOOGLE_CLOUD_PROJECT; the program reads it back, with its number and billing account, from getProject.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from goldenenv import catalog, slurm
from goldenenv.images import host as hostlayer
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.base import (
    BuildContext, Capability, HeadShape, HostImageForm, PulumiCloud, host_image_problems, key_words, mock_address,
    pinned_host_image, sold_problems, stable_number, zone_problems,
)
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import privilege
from goldenenv.clouds.gcp.readiness import USER_DATA
from goldenenv.clouds.gcp.head import (
    HEAD_SECRET_ROLES, NODE_SECRET_ROLE, MungeSecret, MungeSecretArgs, SlurmHead, SlurmHeadArgs, munge_key,
)
from goldenenv.clouds.gcp.network import GpuNetwork, GpuNetworkArgs, gpu_nic_layout, subnet_count, subnets
from goldenenv.clouds.gcp.nodes import PD_DISK, ROCE_DISK, GpuNodePool, GpuNodePoolArgs, access_metadata
from goldenenv.spec import STACK_TAG_KEY, Capacity, ClusterSpec, ConfigError, Problem, pool_key

CLOUD = "gcp"
REGION = re.compile(r"^[a-z]+-[a-z]+\d{1,2}$")
"""us-central1, europe-west4, asia-southeast1 ..."""
ZONE = re.compile(r"^[a-z]+-[a-z]+\d{1,2}-[a-z]$")
IMAGE = re.compile(r"^projects/[a-z][-a-z0-9.:]{4,61}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A pinned image by its full path (never a family, which moves)."""
HOST_IMAGE_FORM = HostImageForm(IMAGE, "projects/<project>/global/images/<name>",
                                "is not a pinned Compute Engine image: write projects/<project>/global/images/<name> "
                                "(a family would move under the lock)")
CURRENCY = "USD"
OS_LOGIN_USER = ("gcloud", "compute", "os-login", "describe-profile", "--format=value(posixAccounts[0].username)")
"""The caller's OS Login POSIX user (`gcloud compute os-login describe-profile`: the profile's POSIX accounts; e.g.
user_example_com for user@example.com)."""
OS_LOGIN_HOW = ("OS Login as your own POSIX user (gcloud compute os-login describe-profile) with your key added by "
                "`gcloud compute os-login ssh-keys add --key-file ~/.ssh/id_ed25519.pub`; Docker needs sudo, which "
                "roles/compute.osAdminLogin grants (roles/compute.osLogin does not); from network.adminCidrs, or "
                "through IAP with `ProxyCommand gcloud compute start-iap-tunnel %h 22 --listen-on-stdin --zone "
                "<zone>` in the ssh config and roles/iap.tunnelResourceAccessor")
GET_PROJECT = "gcp:organizations/getProject:getProject"
PLACEHOLDER_PROJECT = "goldenenv-plan-000000"
PLACEHOLDER_NUMBER = "000000000000"
PLACEHOLDER_BILLING = "000000-000000-000000"
REGISTRY = "{region}-docker.pkg.dev/{project}/{repository}/{image}"
"""An image in an Artifact Registry Docker repository (Artifact Registry: "Push and pull images"); the stack's image
is named for its lock."""
REGISTRY_USER = "oauth2accesstoken"
"""Artifact Registry's docker login with an access token ("Configure authentication to Artifact Registry for
Docker": username oauth2accesstoken, the token as the password)."""
REPOSITORY_READER = privilege.REPOSITORY_READER
"""What a host needs to pull from the stack's repository: the least-privilege table's (gcp/privilege.py)."""
SERVICE_ACCOUNT_ID_MAX = 30
LUSTRE_IMPORT_PERMISSIONS = privilege.LUSTRE_IMPORT_PERMISSIONS
"""What the head's import (templates/node/lustre-import-gcp.sh.j2) calls: the least-privilege table's."""
LUSTRE_PORT = "988"
"""Lustre's LNet TCP port (Managed Lustre's VPC guide: allow TCP 988 from the instance's range)."""


def fabric_of(pool: Any, it: catalog.InstanceType) -> str:
    """The pool's GPU network: the type's fabric (catalog instance_types.rdma) unless the pool turns RDMA off."""
    return it.rdma if pool.rdma is not False and it.rdma not in ("", "none") else "none"


@dataclass(frozen=True)
class StackNics:
    """What the stack's networks are built for: one GPU fabric, and the most host and GPU NICs a pool's type has."""

    fabric: str
    host: int
    gpu: int


def stack_nics(spec: ClusterSpec) -> StackNics:
    """The pools' one fabric (check() refuses two) and NIC counts: a pool without the fabric (a G2 beside A3 Megas)
    takes the host NICs its type has and no GPU network."""
    pools = [(pool, catalog.instance_type(CLOUD, pool.instance_type)) for pool in spec.nodes]
    fabrics = {fabric_of(pool, it) for pool, it in pools} - {"none"}
    fabric = fabrics.pop() if len(fabrics) == 1 else "none"
    return StackNics(fabric, max(max(1, it.network_cards) for _, it in pools),
                     max((it.rdma_interfaces for pool, it in pools if fabric_of(pool, it) == fabric), default=0)
                     if fabric != "none" else 0)


def stack_zone(spec: ClusterSpec) -> str | None:
    """The zone to build in: the stack's, else the first the catalog says sells the first pool's type there."""
    if spec.placed_zone:
        return spec.placed_zone
    zones = catalog.type_zones(CLOUD, spec.nodes[0].instance_type).get(spec.region, ())
    return zones[0] if zones else None


def host_image(spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    return pinned_host_image(CLOUD, spec, pool, baked_for)


def unreadable_host_images(spec: ClusterSpec, lookup: Any) -> list[Problem]:
    """Each pool's pinned host image (the head boots the first pool's) that the project cannot read: an image of the
    user's own not built yet (the A3 Mega stack's, made with Cluster Toolkit's blueprint), a typo, another project's
    private image. Refused before anything is created, as Compute Engine would refuse the insert after the
    networks, the bucket and Lustre were made."""
    problems = []
    for i, pool in enumerate(spec.nodes):
        image = host_image(spec, pool, hostlayer.layer(spec, pool))
        if not lookup.image_readable(image):
            at = f"{pool_key(i, len(spec.nodes))}.hostImage"
            at += ".id" if pool.host_image is not None and not isinstance(pool.host_image, str) else ""
            problems.append(Problem(at, f"{image} is not an image this project can read (Compute Engine answers "
                                    "404 or 403): build it first (the stack file says how), or write an image "
                                    "that exists: projects/<project>/global/images/<name>"))
    return problems


def boot_disk_type(it: catalog.InstanceType) -> str:
    """Hyperdisk for the A3/A4 families (A3 Ultra and A4 take no Persistent Disk), pd-balanced otherwise."""
    return ROCE_DISK if it.name.startswith(("a3-", "a4-")) else PD_DISK


class GcpCloud(PulumiCloud):
    name = CLOUD
    capabilities = frozenset({Capability.RDMA, Capability.SPOT, Capability.CAPACITY_RESERVATION,
                              Capability.PARALLEL_FS, Capability.LOCAL_NVME, Capability.BUDGET,
                              Capability.HARD_STOP})
    registry_types = ("gcp:artifactregistry/",)
    key_props = {
        "gcp:compute/network:Network": ("mtu", "networkProfile"),
        "gcp:compute/subnetwork:Subnetwork": ("ipCidrRange",),
        "gcp:compute/firewall:Firewall": ("direction", "sourceRanges"),
        "gcp:compute/resourcePolicy:ResourcePolicy": ("groupPlacementPolicy.collocation",
                                                      "groupPlacementPolicy.vmCount"),
        "gcp:compute/instance:Instance": ("machineType", "zone", "scheduling.provisioningModel"),
        "gcp:storage/bucket:Bucket": ("name", "publicAccessPrevention"),
        "gcp:lustre/instance:Instance": ("capacityGib", "perUnitStorageThroughput"),
    }
    data_bearing = {"Instance": "boot disk and Local SSD scratch erased; a Lustre instance after its export to "
                                "the bucket"}
    store_kinds = ("Bucket", "Repository")
    placeholder_account = PLACEHOLDER_PROJECT
    ssh_user = "ubuntu"
    """Google's Ubuntu images: OS Login maps the caller's account, a metadata key logs in as the user it names."""

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """Google Cloud Managed Lustre's client (Google's Lustre client modules) when the stack has Managed Lustre."""
        return "gcp-lustre" if spec.storage.parallel_fs.enabled else None

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> Any:
        """A pool with nodes.sshPublicKey: its metadata key's user (Google's guest agent makes it a sudoer). Without
        one (the head: when no pool has a key): OS Login, where the login is the caller's own POSIX user
        (user_example_com) and sudo, which Docker needs, comes with roles/compute.osAdminLogin only."""
        from goldenenv.clouds.base import DockerReach, NodeLogin

        keyed = pool.ssh_key is not None if pool is not None else head_key(spec) is not None
        if keyed:
            return NodeLogin(self.ssh_user, DockerReach.SUDO, f"ssh as {self.ssh_user} with nodes.sshPublicKey (the "
                             "instance's ssh-keys metadata; project keys blocked)")
        return NodeLogin(None, DockerReach.SUDO, OS_LOGIN_HOW, caller=OS_LOGIN_USER,
                         caller_setup="run `gcloud auth login` (gcloud CLI: https://cloud.google.com/sdk/docs/install)")

    head_instance_type = "n2-standard-2"
    """A 2-vCPU, 8-GiB x86 general purpose type (catalog head_types.csv)."""
    user_data_limit = USER_DATA
    zone_form = "{region}-a"

    def check(self, spec: ClusterSpec) -> list[Problem]:
        problems = []
        if not REGION.fullmatch(spec.region):
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not a Google Cloud region name "
                                    "(e.g. us-central1, europe-west4)"))
        problems += zone_problems(CLOUD, spec)
        if spec.zones:
            problems.append(Problem("goldenenv:zones", "gcp stacks build in one zone (their RoCE and placement "
                                    "are zonal): set goldenenv:zone instead"))
        if spec.budget and spec.budget.currency != CURRENCY:
            problems.append(Problem("goldenenv:budget.currency", f"the catalog prices Google Cloud in {CURRENCY}; "
                                    f"a {spec.budget.currency} budget cannot be compared with the stack's cost: set "
                                    f"currency: {CURRENCY} (a billing account in another currency takes the budget "
                                    "in its own)"))
        from goldenenv.clouds import tagrules

        problems += tagrules.problems(tagrules.rule_of(CLOUD), spec)
        problems += [Problem("goldenenv:tags", p) for p in gcp_labels.problems(spec.stack_tags)]
        fabrics, zone = set(), stack_zone(spec)
        for i, pool in enumerate(spec.nodes):
            at = pool_key(i, len(spec.nodes))
            it = catalog.instance_types(CLOUD).get(pool.instance_type)
            if it is None:
                continue
            fabrics.add(fabric_of(pool, it))
            problems += host_image_problems(CLOUD, spec, pool, f"{at}.hostImage", HOST_IMAGE_FORM)
            if Capacity.CAPACITY_BLOCK in pool.capacities:
                problems.append(Problem(f"{at}.capacity", "capacity-block is EC2's; on Google Cloud use "
                                        "capacity-reservation with the reservation's name in capacityReservationId"))
            problems += sold_problems(CLOUD, spec, it.name, zone)
            if zone is None:
                problems.append(Problem("goldenenv:zone", f"the catalog knows no zone of {spec.region} selling "
                                        f"{it.name}: set goldenenv:zone"))
        if len(fabrics - {"none"}) > 1:
            problems.append(Problem("goldenenv:nodes", "the pools need different GPU networks ("
                                    f"{', '.join(sorted(fabrics - {'none'}))}): a gcp stack builds one; split the "
                                    "stack"))
        elif not problems:
            nics = stack_nics(spec)
            try:
                subnets(spec.network.cidr, subnet_count(nics.fabric, nics.host, nics.gpu))
            except ValueError as e:
                problems.append(Problem("goldenenv:network.cidr", str(e).removeprefix("goldenenv:network.cidr ")))
        problems += self._storage_problems(spec)
        return problems

    @staticmethod
    def _storage_problems(spec: ClusterSpec) -> list[Problem]:
        from goldenenv.clouds.gcp import storage

        found = getattr(storage, "spec_problems", None)
        return found(spec) if found else []

    def offline_lookup(self, spec: ClusterSpec) -> Any:
        from goldenenv.clouds.gcp import storage

        return storage.OfflineLookup()

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """What Google computes for a new resource (self links, addresses, emails), as stand-ins; the storage
        and budget components' own first."""
        from goldenenv.clouds.gcp import budget, storage

        for component in (storage, budget):
            found = component.plan_mock(args)
            if found is not None:
                return found
        kind = args.typ.rsplit(":", 1)[-1]
        inputs = args.inputs
        project = inputs.get("project") or PLACEHOLDER_PROJECT
        name = inputs.get("name") or args.name
        if args.typ == "gcp:compute/instance:Instance":
            interfaces = [{**nic, "networkIp": mock_address(args.name) if i == 0 else
                           f"10.{100 + i}.{stable_number(args.name) % 200}.{10 + stable_number(args.name) % 200}"}
                          for i, nic in enumerate(inputs.get("networkInterfaces") or [])]
            link = f"projects/{project}/zones/{inputs.get('zone')}/instances/{name}"
            return link, {"networkInterfaces": interfaces, "name": name, "instanceId": str(stable_number(link)),
                          "selfLink": f"https://www.googleapis.com/compute/v1/{link}", "currentStatus": "RUNNING"}
        if args.typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs.get('accountId')}@{project}.iam.gserviceaccount.com"
            return f"projects/{project}/serviceAccounts/{email}", {"email": email, "member": f"serviceAccount:{email}",
                                                                   "name": email}
        scopes = {"Network": "global/networks", "Subnetwork": f"regions/{inputs.get('region')}/subnetworks",
                  "Firewall": "global/firewalls", "Router": f"regions/{inputs.get('region')}/routers",
                  "ResourcePolicy": f"regions/{inputs.get('region')}/resourcePolicies",
                  "GlobalAddress": "global/addresses"}
        if args.typ.startswith("gcp:compute/") and kind in scopes:
            link = f"projects/{project}/{scopes[kind]}/{name}"
            return link, {"selfLink": f"https://www.googleapis.com/compute/v1/{link}", "name": name}
        if args.typ == "gcp:artifactregistry/repository:Repository":
            repo = inputs.get("repositoryId")
            return (f"projects/{project}/locations/{inputs.get('location')}/repositories/{repo}",
                    {"name": repo})
        return None

    def plan_call(self, args: Any) -> dict[str, Any] | None:
        """getProject: a placeholder project, its number and billing account, never a live answer."""
        if args.token == GET_PROJECT:
            return {"projectId": PLACEHOLDER_PROJECT, "number": PLACEHOLDER_NUMBER, "name": PLACEHOLDER_PROJECT,
                    "billingAccount": PLACEHOLDER_BILLING, "id": f"projects/{PLACEHOLDER_PROJECT}"}
        return None

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        notes = []
        zone = stack_zone(spec)
        for pool in spec.nodes:
            it = catalog.instance_type(CLOUD, pool.instance_type)
            fabric = fabric_of(pool, it)
            if fabric != "none":
                notes.append(f"{pool.name}: {it.rdma_interfaces} GPU NICs per node on {fabric} "
                             f"({'one RoCE network of ' if fabric == 'gib' else ''}{it.rdma_interfaces} "
                             f"{'subnets' if fabric == 'gib' else 'GPU VPCs'}); Google sells {it.name} mostly "
                             "through reservations, DWS or spot: an on-demand request can fail for capacity "
                             f"(ZONE_RESOURCE_POOL_EXHAUSTED) in {zone}")
            if pool.capacity is Capacity.SPOT:
                notes.append(f"{pool.name}: spot nodes are stopped when Google preempts them (about 30 s notice, "
                             "instanceTerminationAction STOP): their boot disks stay, their Local SSD scratch does "
                             "not; keep checkpoints in the bucket or on Lustre")
            if pool.capacity is Capacity.CAPACITY_RESERVATION:
                notes.append(f"{pool.name}: nodes consume reservation {pool.capacity_reservation_id} "
                             "(RESERVATION_BOUND); Google places reserved capacity itself, so the pool has no "
                             "placement policy of its own")
        rewritten = gcp_labels.rewrites(spec.stack_tags, expected=frozenset({STACK_TAG_KEY}))
        if rewritten:
            notes.append("tags become Google Cloud labels (lower-case letters of any alphabet, digits, '_' and '-', 63 "
                         "characters at most), so some are written differently on every resource: "
                         + "; ".join(rewritten))
        if spec.budget:
            notes.append("Cloud Billing budgets lag usage by hours and alert rather than cap: the stack's function "
                         "stops its instances when a notification reports the spend at or above the limit; disks, "
                         "Lustre and the bucket keep billing until destroy. The budget is created on the project's "
                         "billing account, which needs Billing Account Administrator (or Costs Manager) for the "
                         "caller of up")
        if spec.network.egress == "endpoints":
            notes.append("network.egress endpoints: no Cloud NAT; nodes reach Google APIs (Cloud Storage, Artifact "
                         "Registry) by Private Google Access and nothing on the internet")
        return notes + [
            "The nodes have no external address: reach them at their private IPs from network.adminCidrs (a VPN, "
            "or IAP TCP forwarding: `gcloud compute ssh --tunnel-through-iap`), with OS Login unless the pool sets "
            "sshPublicKey: as your own POSIX user, with roles/compute.osAdminLogin for the sudo goldenenv reaches "
            "Docker through",
        ]

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        if not spec.storage.parallel_fs.enabled:
            return []
        bucket = outputs.get("bucket") or "<bucket>"
        return [f"export Managed Lustre to gs://{bucket}/ (exportData) and wait; a failed export stops destroy "
                "before anything is deleted (--skip-export destroys without it, losing files not yet exported)"]

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        from goldenenv.clouds.gcp import readiness

        return readiness.findings(resources, required_tags)

    def describe(self, resource: Any) -> list[str]:
        words = []
        if resource.type == "gcp:compute/instance:Instance":
            nics = resource.props.get("networkInterfaces") or []
            kinds = [str(n.get("nicType", "")) for n in nics if isinstance(n, dict)]
            words.append(f"nics={len(kinds)} ({', '.join(f'{kinds.count(k)} {k}' for k in dict.fromkeys(kinds))})")
        return words + key_words(resource, self.key_props)

    def registry_url(self, spec: ClusterSpec) -> str:
        """`<region>-docker.pkg.dev/<project>/<repository>/<lock>`: the stack's image in its Artifact Registry
        repository, in the caller's project (GOOGLE_CLOUD_PROJECT, else gcloud's), the address nodes pull."""
        project = _project_from_env()
        if not project:
            raise ConfigError([Problem("goldenenv:region", "no Google Cloud project: set GOOGLE_CLOUD_PROJECT, or run "
                                       "`gcloud config set project PROJECT_ID`")])
        return REGISTRY.format(region=spec.region, project=project, image=spec.image.lock,
                               repository=gcp_labels.resource_name(spec.tags.project, spec.stack, "images"))

    def registry_auth(self, spec: ClusterSpec, registry: str) -> dict:
        """Docker credentials for Artifact Registry: REGISTRY_USER and the caller's gcloud access token."""
        from goldenenv.clouds.gcp import storage

        return {"username": REGISTRY_USER, "password": storage.access_token(), "registry": registry}

    def preflight(self, spec: ClusterSpec) -> None:
        """Refuse, saying what to set, when the caller has no Google credentials: Application Default Credentials
        (the file GOOGLE_APPLICATION_CREDENTIALS names, or gcloud's), or an access token."""
        import os
        import shutil

        if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN"):
            return
        if shutil.which("gcloud"):
            return
        raise RuntimeError("no Google Cloud credentials: run `gcloud auth application-default login` (and `gcloud "
                           "auth login` for goldenenv's own calls: adoption, export, purge), or set "
                           "GOOGLE_APPLICATION_CREDENTIALS to a service account key file")

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None], lookup: Any = None,
                  nodes: Any = None) -> Any:
        """Find the retained stores to adopt, and start the stack's stopped nodes (a spot node Google preempted, a
        node the budget, TTL or idle rule stopped): `nodes` answers, the live ones when no lookup is given."""
        from goldenenv.clouds.base import start_stopped
        from goldenenv.clouds.gcp import storage

        live = lookup is None
        if lookup is None:
            project = _project_from_env()
            if not project:
                raise RuntimeError("no Google Cloud project: set GOOGLE_CLOUD_PROJECT (or `gcloud config set project "
                                   "PROJECT`); the stack's gcp:project is read by the program, not by goldenenv")
            lookup = storage.LiveLookup(project, spec.region)
        missing = unreadable_host_images(spec, lookup)
        if missing:
            raise ConfigError(missing)
        stores = RetainedStores.find(spec, lookup)
        if stores.adopt_bucket:
            log(f"adopting retained bucket {stores.adopt_bucket} (datasets and checkpoints of an earlier up)")
        start_stopped(nodes if nodes is not None or not live else self.stopped_nodes(spec), log)
        return stores

    def spot_return(self, spec: ClusterSpec, pool: Any) -> Any:
        """Google stops a preempted spot node (instanceTerminationAction STOP: name, boot disk and place in Slurm
        kept) and never starts it again itself; `up` starts it."""
        from goldenenv.clouds.base import SpotBack, SpotReturn

        return SpotReturn((SpotBack.UP_STARTS,), how="a preempted spot node is stopped in place; goldenenv up "
                          "starts it")

    def stopped_nodes(self, spec: ClusterSpec) -> Any:
        from goldenenv.clouds.gcp.stopped import LiveStoppedNodes

        project = _project_from_env()
        if not project:
            raise RuntimeError("no Google Cloud project: set GOOGLE_CLOUD_PROJECT (or `gcloud config set project "
                               "PROJECT`)")
        return LiveStoppedNodes(project, spec.tags.project, spec.stack)

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None], token: Callable[[], str] | None = None) -> None:
        from goldenenv.clouds.gcp import storage

        fs = outputs.get("lustreInstance")
        if not fs:
            return
        if skip_export:
            log(f"not exporting {fs} (--skip-export): files written on Lustre and not yet exported to the bucket "
                "are lost")
            return
        storage.transfer("export", outputs.get("gcpProject"), outputs.get("zone"), fs, outputs.get("bucket"), "",
                         token or storage.access_token, log)

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None]) -> list[str]:
        from goldenenv.clouds.gcp import storage

        bucket = outputs.get("bucket")
        if not bucket:
            return []
        storage.purge(bucket, log=log)
        return [bucket]

    def build(self, spec: ClusterSpec, context: BuildContext | None = None) -> dict[str, Any]:
        return GpuCluster(spec.stack, spec, context or BuildContext()).outputs


def _project_from_env() -> str | None:
    """The Google project the caller's tools name: GOOGLE_CLOUD_PROJECT (or the provider's other variables), else
    gcloud's configured project; None when neither says."""
    import os
    import shutil
    import subprocess

    found = next((os.environ[k] for k in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_PROJECT", "CLOUDSDK_CORE_PROJECT")
                  if os.environ.get(k)), None)
    if found or not shutil.which("gcloud"):
        return found
    done = subprocess.run(["gcloud", "config", "get-value", "project"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or None if done.returncode == 0 else None


def _live_project() -> str:
    """Inside the program: the caller's project, else the provider's own (`gcp:project` in the stack file)."""
    return _project_from_env() or gcp.organizations.get_project().project_id


@dataclass(frozen=True)
class RetainedStores:
    bucket: str
    adopt_bucket: str | None

    @classmethod
    def find(cls, spec: ClusterSpec, lookup: Any) -> RetainedStores:
        """A bucket labelled for another project or stack under the derived name is refused (storage.adoptable)."""
        from goldenenv.clouds.gcp import storage

        bucket = spec.storage.bucket.bucket_name or storage.bucket_name(
            spec.tags.project, spec.stack, lookup.project_id(), spec.region)
        return cls(bucket, storage.adoptable(lookup.bucket(bucket), spec.tags.project, spec.stack))


class GcpParts(recipe.Parts):
    """Google Cloud's cluster parts: the project (read back from getProject), a system VPC and the GPU networks,
    Cloud Storage with Managed Lustre, an Artifact Registry repository, the munge key in Secret Manager, the head
    and the pools in Compute Engine (each host reads what it needs through its own service account), a budget
    whose function stops the stack's nodes."""

    cloud = GcpCloud
    registry_login = "gar"
    munge: MungeSecret | None = None

    def check(self) -> None:
        from goldenenv.clouds.gcp import storage

        self.lookup = self.context.lookup or storage.LiveLookup(_live_project(), self.spec.region)
        missing = unreadable_host_images(self.spec, self.lookup)
        if missing:
            raise ConfigError(missing)  # before any resource: Compute Engine would refuse the inserts last

    def retained_stores(self) -> None:
        self.stores = RetainedStores.find(self.spec, self.lookup)
        self.labels = gcp_labels.labels(self.spec.stack_tags)

    def names(self, *parts: str) -> str:
        return gcp_labels.resource_name(self.spec.tags.project, self.spec.stack, *parts)

    def scope(self) -> None:
        self.project = gcp.organizations.get_project_output(opts=pulumi.InvokeOutputOptions(parent=self.parent))
        self.project_id = self.project.project_id

    def network(self) -> None:
        spec = self.spec
        self.zone = stack_zone(spec)
        nics = stack_nics(spec)
        mtu = None
        if nics.fabric != "none":
            from goldenenv import fabrics

            fabric_pool = next(p for p in spec.nodes
                               if fabric_of(p, catalog.instance_type(CLOUD, p.instance_type)) == nics.fabric)
            found = fabrics.get(nics.fabric).mtu(CLOUD, fabric_pool.instance_type)
            mtu = found.mtu if found else None
        self.net = GpuNetwork(self.name, GpuNetworkArgs(
            project=self.project_id, region=spec.region, zone=self.zone, cidr=spec.network.cidr, fabric=nics.fabric,
            host_nics=nics.host, gpu_nics=nics.gpu, gpu_mtu=mtu,
            egress=spec.network.egress, admin_cidrs=[str(c) for c in spec.network.admin_cidrs],
            labels=self.labels, names=self.names), self.child)

    def data_store(self) -> recipe.DataStore:
        from goldenenv.clouds.gcp import storage

        spec, fs = self.spec, self.spec.storage.parallel_fs
        data = self.data = storage.DataStore(f"{self.name}-data", storage.DataStoreArgs(
            bucket_name=self.stores.bucket, adopt_bucket=self.stores.adopt_bucket,
            noncurrent_version_days=spec.storage.bucket.noncurrent_version_days,
            parallel_fs=fs.enabled, fs_size_gib=fs.size_gib, fs_throughput_per_tib=fs.throughput_per_tib,
            region=spec.region, zone=self.zone, network_id=self.net.system_network,
            network_name=self.net.system_network_name, gcp_project=self.project_id,
            checkpoint_prefix=fs.checkpoint_prefix, labels=self.labels), self.child)
        if data.lustre_range is not None:
            gcp.compute.Firewall(
                f"{self.name}-lustre", name=self.names("lustre"), project=self.project_id,
                network=self.net.system_network, direction="INGRESS", priority=1000,
                source_ranges=[data.lustre_range], target_tags=[self.net.tag],
                allows=[{"protocol": "tcp", "ports": [LUSTRE_PORT]}],
                description="goldenenv: Managed Lustre's servers (its private services range) reach the clients",
                opts=self.child)
        return recipe.DataStore(data.mount, {
            "bucket": data.bucket_name,
            "sharedFs": data.fs_id if fs.enabled else None,
            "lustreInstance": data.fs_id if fs.enabled else None,
        })

    def repository(self) -> recipe.Repository:
        spec = self.spec
        self.repo = gcp.artifactregistry.Repository(
            f"{self.name}-images", repository_id=self.names("images"), project=self.project_id, location=spec.region,
            format="DOCKER", description=f"goldenenv {spec.stack}: golden images", labels=self.labels,
            opts=pulumi.ResourceOptions.merge(self.child, pulumi.ResourceOptions(retain_on_delete=True)))
        return recipe.Repository(pulumi.Output.all(project=self.project_id, repository=self.repo.repository_id).apply(
            lambda at: REGISTRY.format(region=spec.region, image=spec.image.lock, **at)))

    def _pull(self, host: str, member: pulumi.Input[str]) -> None:
        """Every host whose boot pulls the golden image (head and nodes) reads the stack's repository."""
        gcp.artifactregistry.RepositoryIamMember(
            f"{self.name}-{host}-pull", project=self.project_id, location=self.spec.region,
            repository=self.repo.repository_id, role=REPOSITORY_READER, member=member, opts=self.child)

    def secret_store(self) -> recipe.SecretStore:
        munge = self.munge = MungeSecret(f"{self.name}-munge", MungeSecretArgs(
            project=self.project_id, secret_id=self.names("munge"), region=self.spec.region, labels=self.labels),
            self.child)
        return recipe.SecretStore(lambda reader: pulumi.Output.all(project=self.project_id, secret_id=munge.secret_id)
                                  .apply(lambda at: munge_key(**at)))

    def head(self, shape: HeadShape, boot: recipe.Boot) -> recipe.Head:
        spec, name, fs, zone = self.spec, self.name, self.spec.storage.parallel_fs, self.zone
        assert self.munge is not None
        mount = pulumi.Output.all(mount=self.data.mount, project=self.project_id, fs_id=self.data.fs_id,
                                  bucket=self.data.bucket_name).apply(
            lambda v: seeded(v["mount"], v["project"], zone, v["fs_id"], v["bucket"], fs.mount_point))
        head = SlurmHead(f"{name}-{slurm.HEAD_HOSTNAME}", SlurmHeadArgs(
            project=self.project_id, machine_type=shape.instance_type, zone=zone,
            image=host_image(spec, spec.nodes[0], hostlayer.head_layer(spec)), boot_disk_gib=shape.root_volume_gib,
            subnet=self.net.system_subnet, user_data=boot.head(mount=mount),
            service_account_id=gcp_labels.resource_name("ge", spec.stack, slurm.HEAD_HOSTNAME,
                                                        limit=SERVICE_ACCOUNT_ID_MAX),
            instance_name=self.names(slurm.HEAD_HOSTNAME), labels=self.labels,
            metadata=access_metadata(head_key(spec), GcpCloud.ssh_user), network_tag=self.net.tag), self.child)
        self.munge.grant(f"{name}-{slurm.HEAD_HOSTNAME}-munge", head.member, HEAD_SECRET_ROLES)
        self._pull(slurm.HEAD_HOSTNAME, head.member)
        if fs.enabled:
            importer = gcp.projects.IAMCustomRole(
                f"{name}-lustre-import", project=self.project_id,
                role_id=gcp_labels.resource_name("goldenenv", spec.stack, "lustre-import").replace("-", "_"),
                title=f"goldenenv {spec.stack}: import the bucket into Managed Lustre",
                permissions=list(LUSTRE_IMPORT_PERMISSIONS), opts=self.child)
            gcp.projects.IAMMember(f"{name}-lustre-import", project=self.project_id, role=importer.name,
                                   member=head.member, opts=self.child)
        return recipe.Head(head.private_ip, head.instance_name)

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        spec, name = self.spec, self.name
        it = catalog.instance_type(CLOUD, pool.instance_type)
        pool_fabric = fabric_of(pool, it)
        layout = catalog.node_layout(CLOUD, it.name)
        nodes = GpuNodePool(f"{name}-{pool.name}", GpuNodePoolArgs(
            project=self.project_id, machine_type=it.name, count=pool.count, zone=self.zone, region=spec.region,
            image=host_image(spec, pool, hostlayer.layer(spec, pool)), boot_disk_type=boot_disk_type(it),
            boot_disk_gib=pool.root_volume_gib,
            host_subnets=self.net.host_subnets[:max(1, it.network_cards)], gpu_subnets=self.net.gpu_subnets,
            gpu_nics=gpu_nic_layout(pool_fabric, it.rdma_interfaces) if pool_fabric != "none" else [],
            placement=layout.placement if layout else "none", capacity=pool.capacity.value,
            reservation=pool.capacity_reservation_id,
            user_data=boot.node(pool.name, pool_fabric, it.local_nvme_count > 0),
            service_account_id=gcp_labels.resource_name("ge", spec.stack, pool.name, limit=SERVICE_ACCOUNT_ID_MAX),
            labels=self.labels, names=lambda *parts: self.names(pool.name, *parts),
            ssh_key=node_key(spec, pool), network_tag=self.net.tag,
            rolled=self.rolled(pool),
        ), self.child)
        member = nodes.service_account_email.apply(lambda e: f"serviceAccount:{e}")
        if self.munge:
            self.munge.grant(f"{name}-{pool.name}-munge", member, (NODE_SECRET_ROLE,))
        gcp.storage.BucketIAMMember(f"{name}-{pool.name}-bucket", bucket=self.data.bucket_name,
                                    role=privilege.BUCKET_ROLE, member=member, opts=self.child)
        self._pull(pool.name, member)
        return recipe.NodePool(pool, it, nodes.private_ips, nodes.instance_names, nodes)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        spec = self.spec
        if not spec.budget:
            return recipe.BudgetGuard({"budgetFunction": None})
        from goldenenv.clouds.gcp.budget import BudgetStop, BudgetStopArgs

        stop = BudgetStop(f"{self.name}-budget", BudgetStopArgs(
            project=spec.tags.project, stack=spec.stack, gcp_project=self.project_id,
            billing_account=self.project.billing_account, project_number=self.project.number,
            monthly_limit=spec.budget.monthly_limit, currency=spec.budget.currency,
            thresholds=spec.budget.alert_thresholds, emails=spec.budget.emails, hard_stop=spec.budget.hard_stop,
            region=spec.region, labels=self.labels, ttl_hours=spec.lifecycle.ttl_hours,
            idle_minutes=spec.lifecycle.idle_minutes), self.child)
        return recipe.BudgetGuard({"budgetFunction": stop.function_name})

    def outputs(self, built: recipe.Built) -> dict[str, Any]:
        return {
            "gcpProject": self.project_id,
            "zone": self.zone,
            "placementPolicies": [p.component.placement_policy for p in built.pools
                                  if p.component.placement_policy is not None],
        }


class GpuCluster(recipe.Cluster):
    """Network, data store, image repository, head, node pools and budget of one stack: the cluster recipe
    (clouds/recipe.py) with Google Cloud's parts."""

    parts = GcpParts


def seeded(mount: Any, project: str, zone: str, fs_id: str | None, bucket: str, mount_point: str) -> Any:
    """The head's Lustre mount with its one-time import of the bucket (Managed Lustre keeps no standing link)."""
    from goldenenv.clouds.gcp import storage

    if mount is None or not fs_id:
        return mount
    return dataclasses.replace(mount, seed=(storage.IMPORT_SCRIPT, storage.import_values(
        project, zone, fs_id, bucket, mount_point)))
