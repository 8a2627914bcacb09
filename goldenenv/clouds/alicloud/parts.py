"""Alibaba Cloud's cluster parts: what the cluster recipe (clouds/recipe.py) builds an Alibaba stack from, and the
stack's GpuCluster component (the recipe run with these parts). The Cloud class (the package) builds a stack with it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pulumi
import pulumi_alicloud as alicloud

from goldenenv import catalog, slurm
from goldenenv.images import host as hostlayer
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.alicloud import storage
from goldenenv.clouds.alicloud.basics import (
    CLOUD, RetainedStores, eri_count, fs_throughput_per_tib, host_image_id, resource_group_name, shared_fs_kind,
)
from goldenenv.clouds.alicloud.budget import BudgetGuard, BudgetGuardArgs
from goldenenv.clouds.alicloud.head import (
    MungeSecret, MungeSecretArgs, SlurmHead, SlurmHeadArgs, head_policy, munge_key, secret_arn,
)
from goldenenv.clouds.alicloud.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.alicloud.nodes import GpuNodePool, GpuNodePoolArgs, auto_release_time, ram_name
from goldenenv.clouds.alicloud.registry import ImageRepository, ImageRepositoryArgs, repository_names
from goldenenv.clouds.base import HeadShape, head_shape


class AlicloudParts(recipe.Parts):
    """Alibaba Cloud's cluster parts: a resource group holds the stack; a VPC with one vSwitch, OSS with CPFS (or
    NAS), a Container Registry repository, the munge key in KMS, the head and the pools in ECS, a budget guard."""

    cloud = recipe.CloudOf(CLOUD)
    registry_login = "acr"
    budget_output = "budgetGuard"
    munge: MungeSecret | None = None

    def retained_stores(self) -> None:
        self.stores = RetainedStores.find(self.spec, self.context.lookup or storage.LiveLookup(self.spec.region))
        ttl = self.spec.lifecycle.ttl_hours
        self.release = auto_release_time(ttl, datetime.now(timezone.utc)) if ttl else None

    def scope(self) -> None:
        spec = self.spec
        self.group = alicloud.resourcemanager.ResourceGroup(
            f"{self.name}-rg", resource_group_name=resource_group_name(spec.tags.project, spec.stack),
            display_name=f"goldenenv {spec.stack}"[:50], tags=spec.stack_tags, opts=self.child,
        )

    def network(self) -> None:
        spec = self.spec
        self.zone = spec.placed_zone or alicloud.get_zones_output(
            available_instance_type=catalog.instance_type(CLOUD, spec.nodes[0].instance_type).name,
            available_resource_creation="Instance", opts=pulumi.InvokeOutputOptions(parent=self.parent),
        ).ids[0]
        self.net = GpuNetwork(self.name, GpuNetworkArgs(
            zone=self.zone, cidr=spec.network.cidr, egress=spec.network.egress,
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs], resource_group_id=self.group.id,
            slurm_head=head_shape(spec, self.cloud) is not None, tags=spec.stack_tags,
        ), self.child)

    def data_store(self) -> recipe.DataStore:
        spec = self.spec
        fs, kind = spec.storage.parallel_fs, shared_fs_kind(spec)
        self.mount_actions = storage.NODE_MOUNT_ACTIONS if kind == storage.CPFS else ()
        data = self.data = storage.DataStore(f"{self.name}-data", storage.DataStoreArgs(
            bucket_name=self.stores.bucket, adopt_bucket=self.stores.adopt_bucket,
            noncurrent_version_days=spec.storage.bucket.noncurrent_version_days,
            parallel_fs=fs.enabled, fs_kind=kind or storage.fs_kind_for(spec.region), fs_size_gib=fs.size_gib,
            fs_throughput_per_tib=fs_throughput_per_tib(spec),
            region=spec.region, zone_id=self.zone, vpc_id=self.net.vpc_id, vswitch_id=self.net.vswitch_id,
            checkpoint_prefix=fs.checkpoint_prefix, resource_group_id=self.group.id, tags=spec.stack_tags,
        ), self.child)
        return recipe.DataStore(data.mount, {
            "bucket": data.bucket_name,
            "sharedFs": data.fs_id if fs.enabled else None,
            # what destroy's export needs (CPFS: the file system, its data flow and the fileset it links)
            "fileSystemId": data.fs_id,
            "dataFlowId": data.data_flow_id,
            "filesetId": data.fileset_id,
            "filesetPath": storage.FILESET_PATH if kind == storage.CPFS else None,
        })

    def repository(self) -> recipe.Repository:
        spec = self.spec
        namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
        return recipe.Repository(ImageRepository(f"{self.name}-images", ImageRepositoryArgs(
            namespace=namespace, repo=repo, tags=spec.stack_tags,
            adopt_namespace=self.stores.adopt_namespace, adopt_repo=self.stores.adopt_repo,
        ), self.child).url)

    def secret_store(self) -> recipe.SecretStore:
        spec = self.spec
        self.secret = ram_name("goldenenv", spec.tags.project, spec.stack, "munge")
        munge = self.munge = MungeSecret(f"{self.name}-munge", MungeSecretArgs(
            secret_name=self.secret, stack=spec.stack, tags=spec.stack_tags), self.child)
        return recipe.SecretStore(lambda reader: pulumi.Output.from_input(munge.secret_name).apply(
            lambda name: munge_key(name, spec.region)))

    def head(self, shape: HeadShape, boot: recipe.Boot) -> recipe.Head:
        spec = self.spec
        head = SlurmHead(f"{self.name}-{slurm.HEAD_HOSTNAME}", SlurmHeadArgs(
            instance_type=shape.instance_type, zone=self.zone,
            image_id=host_image_id(spec, spec.nodes[0], hostlayer.head_layer(spec)),
            vswitch_id=self.net.vswitch_id, security_group_id=self.net.head_security_group_id,
            resource_group_id=self.group.id, system_disk_gib=shape.root_volume_gib, user_data=boot.head(),
            policy=head_policy(secret_arn(spec.region, self.secret), self.mount_actions),
            role_name=ram_name("goldenenv", spec.tags.project, spec.stack, slurm.HEAD_HOSTNAME),
            tags=spec.stack_tags, auto_release_time=self.release,
            rolled=self.context.rolls(slurm.HEAD_HOSTNAME, slurm.HEAD_HOSTNAME), ssh_key=head_key(spec),
        ), self.child)
        return recipe.Head(head.private_ip, head.instance_id)

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        spec = self.spec
        it = catalog.instance_type(CLOUD, pool.instance_type)
        layout = catalog.node_layout(CLOUD, it.name)
        eris = eri_count(pool, it)
        nodes = GpuNodePool(f"{self.name}-{pool.name}", GpuNodePoolArgs(
            instance_type=it.name, count=pool.count, zone=self.zone,
            image_id=host_image_id(spec, pool, hostlayer.layer(spec, pool)),
            vswitch_id=self.net.vswitch_id, security_group_id=self.net.security_group_id,
            resource_group_id=self.group.id, placement=layout.placement if layout else "none",
            network_cards=it.network_cards, eri_count=eris,
            queue_pairs=layout.queue_pairs if layout else 0,
            jumbo_frames=bool(layout and layout.jumbo_frames), capacity=pool.capacity.value,
            system_disk_gib=pool.root_volume_gib,
            user_data=boot.node(pool.name, "erdma" if eris else "none", it.local_nvme_count > 0),
            bucket_arn=self.data.bucket_arn, mount_actions=self.mount_actions,
            role_name=ram_name("goldenenv", spec.tags.project, spec.stack, pool.name), tags=spec.stack_tags,
            auto_release_time=self.release,
            rolled=self.rolled(pool),
            ssh_key=node_key(spec, pool),
            munge_secret=secret_arn(spec.region, self.secret) if self.munge else None,
        ), self.child)
        return recipe.NodePool(pool, it, nodes.private_ips, nodes.instance_ids, nodes)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        """The budget's guard function; the recipe asks only for a stack with a budget (budget_output)."""
        spec = self.spec
        guard = BudgetGuard(f"{self.name}-budget", BudgetGuardArgs(
            project=spec.tags.project, stack=spec.stack, monthly_limit=spec.budget.monthly_limit,
            currency=spec.budget.currency, thresholds=spec.budget.alert_thresholds, emails=spec.budget.emails,
            hard_stop=spec.budget.hard_stop, region=spec.region, resource_group_id=self.group.id,
            tags=spec.stack_tags,
        ), self.child)
        return recipe.BudgetGuard({self.budget_output: guard.function_name})

    def outputs(self, built: recipe.Built) -> dict[str, Any]:
        return {
            "deploymentSets": [p.component.deployment_set for p in built.pools
                               if p.component.deployment_set is not None],
            "resourceGroup": self.group.id,
        }


class GpuCluster(recipe.Cluster):
    """Resource group, network, data store, image repository, head, node pools and budget guard of one stack: the
    cluster recipe (clouds/recipe.py) with Alibaba Cloud's parts."""

    parts = AlicloudParts
