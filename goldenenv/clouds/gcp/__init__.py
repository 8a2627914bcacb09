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

import re
from collections.abc import Callable
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.access import head_key
from goldenenv.clouds.base import (
    BuildContext, Capability, HostImageForm, PulumiCloud, host_image_problems, key_words, mock_address, sold_problems,
    stable_number, zone_problems,
)
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp.readiness import USER_DATA
from goldenenv.clouds.gcp.basics import (
    CLOUD, REGISTRY, RetainedStores, _project_from_env, fabric_of, stack_nics, stack_zone, unreadable_host_images,
)
from goldenenv.clouds.gcp.parts import GpuCluster
from goldenenv.clouds.gcp.network import subnet_count, subnets
from goldenenv.spec import STACK_TAG_KEY, Capacity, ClusterSpec, ConfigError, Problem, pool_key

REGION = re.compile(r"^[a-z]+-[a-z]+\d{1,2}$")
"""us-central1, europe-west4, asia-southeast1 ..."""
ZONE = re.compile(r"^[a-z]+-[a-z]+\d{1,2}-[a-z]$")
IMAGE = re.compile(r"^projects/[a-z][-a-z0-9.:]{4,61}[a-z0-9]/global/images/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A pinned image by its full path (never a family, which moves)."""
HOST_IMAGE_FORM = HostImageForm(IMAGE, "projects/<project>/global/images/<name>",
                                "is not a pinned Compute Engine image: write projects/<project>/global/images/<name> "
                                "(a family would move under the lock)", "projects/my-project/global/images/my-image")
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
REGISTRY_USER = "oauth2accesstoken"
"""Artifact Registry's docker login with an access token ("Configure authentication to Artifact Registry for
Docker": username oauth2accesstoken, the token as the password)."""
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
    host_image_form = HOST_IMAGE_FORM

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
