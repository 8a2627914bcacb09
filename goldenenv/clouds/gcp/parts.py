"""Google Cloud's cluster parts: what the cluster recipe (clouds/recipe.py) builds a Google Cloud stack from, and the
stack's GpuCluster component (the recipe run with these parts). The Cloud class (the package) builds a stack with it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import pulumi_gcp as gcp

from goldenenv import catalog, slurm
from goldenenv.images import host as hostlayer
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.base import HeadShape
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import privilege
from goldenenv.clouds.gcp.basics import (
    CLOUD, REGISTRY, RetainedStores, _live_project, boot_disk_type, fabric_of, host_image, stack_nics, stack_zone,
    unreadable_host_images,
)
from goldenenv.clouds.gcp.head import (
    HEAD_SECRET_ROLES, NODE_SECRET_ROLE, MungeSecret, MungeSecretArgs, SlurmHead, SlurmHeadArgs, munge_key,
)
from goldenenv.clouds.gcp.network import GpuNetwork, GpuNetworkArgs, gpu_nic_layout
from goldenenv.clouds.gcp.nodes import GpuNodePool, GpuNodePoolArgs, access_metadata
from goldenenv.spec import ConfigError

REPOSITORY_READER = privilege.REPOSITORY_READER
"""What a host needs to pull from the stack's repository: the least-privilege table's (gcp/privilege.py)."""
SERVICE_ACCOUNT_ID_MAX = 30
LUSTRE_IMPORT_PERMISSIONS = privilege.LUSTRE_IMPORT_PERMISSIONS
"""What the head's import (templates/node/lustre-import-gcp.sh.j2) calls: the least-privilege table's."""
LUSTRE_PORT = "988"
"""Lustre's LNet TCP port (Managed Lustre's VPC guide: allow TCP 988 from the instance's range)."""


class GcpParts(recipe.Parts):
    """Google Cloud's cluster parts: the project (read back from getProject), a system VPC and the GPU networks,
    Cloud Storage with Managed Lustre, an Artifact Registry repository, the munge key in Secret Manager, the head
    and the pools in Compute Engine (each host reads what it needs through its own service account), a budget
    whose function stops the stack's nodes."""

    cloud = recipe.CloudOf(CLOUD)
    registry_login = "gar"
    budget_output = "budgetFunction"
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
            metadata=access_metadata(head_key(spec), self.cloud.ssh_user), network_tag=self.net.tag), self.child)
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
        """The budget and its stop function; the recipe asks only for a stack with a budget (budget_output)."""
        from goldenenv.clouds.gcp.budget import BudgetStop, BudgetStopArgs

        spec = self.spec
        stop = BudgetStop(f"{self.name}-budget", BudgetStopArgs(
            project=spec.tags.project, stack=spec.stack, gcp_project=self.project_id,
            billing_account=self.project.billing_account, project_number=self.project.number,
            monthly_limit=spec.budget.monthly_limit, currency=spec.budget.currency,
            thresholds=spec.budget.alert_thresholds, emails=spec.budget.emails, hard_stop=spec.budget.hard_stop,
            region=spec.region, labels=self.labels, ttl_hours=spec.lifecycle.ttl_hours,
            idle_minutes=spec.lifecycle.idle_minutes), self.child)
        return recipe.BudgetGuard({self.budget_output: stop.function_name})

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
