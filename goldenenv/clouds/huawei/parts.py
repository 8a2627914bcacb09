"""Huawei Cloud's cluster parts: what the cluster recipe (clouds/recipe.py) builds a Huawei stack from, and the
stack's GpuCluster component (the recipe run with these parts). The Cloud class (the package) builds a stack with it.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_huaweicloud as huaweicloud

from goldenenv import catalog, slurm
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.base import HeadShape, head_shape
from goldenenv.clouds.huawei import headarch, privilege, storage, tags
from goldenenv.clouds.huawei.basics import CLOUD, bucket_name, host_image, iam_name, registry_names, secret_name, \
    short_name
from goldenenv.clouds.huawei.budget import BudgetGuard, BudgetGuardArgs
from goldenenv.clouds.huawei.head import MungeSecret, SlurmHead, SlurmHeadArgs, munge_key
from goldenenv.clouds.huawei.liteservers import LITE_ROOT_MIN_GIB, LiteServerPool, LiteServerPoolArgs, \
    is_lite_server, lite_server_image
from goldenenv.clouds.huawei.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.huawei.nodes import GpuNodePool, GpuNodePoolArgs
from goldenenv.clouds.huawei.registry import ImageRepository, ImageRepositoryArgs
from goldenenv.images import host as hostlayer


class HuaweiParts(recipe.Parts):
    """Huawei Cloud's cluster parts: a VPC with a NAT gateway, OBS with SFS Turbo and its backend target, SWR, the
    munge key in DEW/CSMS, the head and the pools on ECS, the stop function that is the budget."""

    cloud = recipe.CloudOf(CLOUD)
    registry_login = "swr"
    budget_output = "budgetGuard"

    def retained_stores(self) -> None:
        lookup = self.context.lookup or storage.LiveLookup(self.spec.region)
        self.bucket = self.spec.storage.bucket.bucket_name or bucket_name(self.spec.tags.project, self.spec.stack)
        self.adopt_bucket = lookup.bucket_exists(self.bucket)
        self.tags = tags.written(self.spec.stack_tags)
        self.secret = secret_name(self.spec.tags.project, self.spec.stack)

    def network(self) -> None:
        spec = self.spec
        self.zone = spec.placed_zone or f"{spec.region}a"
        self.net = GpuNetwork(self.name, GpuNetworkArgs(
            zone=self.zone, cidr=spec.network.cidr, egress=spec.network.egress,
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs],
            slurm_head=head_shape(spec, self.cloud) is not None, tags=self.tags), self.child)

    def data_store(self) -> recipe.DataStore:
        spec = self.spec
        fs = spec.storage.parallel_fs
        data = storage.DataStore(f"{self.name}-data", storage.DataStoreArgs(
            bucket=self.bucket, adopt_bucket=self.adopt_bucket, region=spec.region, zone=self.zone,
            vpc_id=self.net.vpc_id, subnet_id=self.net.subnet_id, security_group_id=self.net.security_group_id,
            parallel_fs=fs.enabled, fs_size_gib=fs.size_gib, tags=self.tags), self.child)
        return recipe.DataStore(data.mount, storage.bucket_outputs(data))

    def repository(self) -> recipe.Repository:
        organization, repository = registry_names(self.spec.tags.project, self.spec.stack)
        return recipe.Repository(ImageRepository(f"{self.name}-images", ImageRepositoryArgs(
            region=self.spec.region, organization=organization, repository=repository), self.child).url)

    def secret_store(self) -> recipe.SecretStore:
        munge = MungeSecret(f"{self.name}-munge", self.secret, self.tags, self.child)
        return recipe.SecretStore(lambda reader: pulumi.Output.from_input(munge.secret_name).apply(munge_key))

    def _key(self, key: Any, label: str) -> pulumi.Output[str] | None:
        if key is None:
            return None
        return huaweicloud.ecs.Keypair(f"{self.name}-{label}-key", name=short_name("ecs", key.name),
                                       public_key=key.public_key, opts=self.child).name

    def head(self, shape: HeadShape, boot: recipe.Boot) -> recipe.Head:
        spec = self.spec
        head = SlurmHead(f"{self.name}-{slurm.HEAD_HOSTNAME}", SlurmHeadArgs(
            flavor=shape.instance_type, zone=self.zone,
            image=headarch.head_image(spec, self.cloud, hostlayer.head_layer(spec)),
            subnet_id=self.net.subnet_id, security_group_id=self.net.head_security_group_id,
            system_disk_gib=shape.root_volume_gib, user_data=boot.head(),
            policy=privilege.node_policy(self.bucket, self.secret, head=True),
            agency_name=iam_name(spec.tags.project, spec.stack, slurm.HEAD_HOSTNAME), region=spec.region,
            key_pair=self._key(head_key(spec), slurm.HEAD_HOSTNAME), tags=self.tags), self.child)
        return recipe.Head(head.private_ip, head.instance_id)

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        spec = self.spec
        it = catalog.instance_type(CLOUD, pool.instance_type)
        if is_lite_server(it.name):
            return self._lite_server_pool(pool, it, boot)
        nodes = GpuNodePool(f"{self.name}-{pool.name}", GpuNodePoolArgs(
            pool=pool.name, flavor=it.name, count=pool.count, zone=self.zone,
            image=host_image(spec, pool, hostlayer.layer(spec, pool)), subnet_id=self.net.subnet_id,
            security_group_id=self.net.security_group_id, system_disk_gib=pool.root_volume_gib,
            user_data=boot.node(pool.name, "none", it.local_nvme_count > 0),
            policy=privilege.node_policy(self.bucket, self.secret),
            agency_name=iam_name(spec.tags.project, spec.stack, pool.name), region=spec.region,
            key_pair=self._key(node_key(spec, pool), pool.name), tags=self.tags, rolled=self.rolled(pool),
        ), self.child)
        return recipe.NodePool(pool, it, nodes.private_ips, nodes.instance_ids, nodes)

    def _lite_server_pool(self, pool: Any, it: Any, boot: recipe.Boot) -> recipe.NodePool:
        """An Ascend pool: ModelArts Lite Servers on the node security group, with the pool's key pair (Cloud.check
        has made sure it has one) and the image the catalog names for Lite Servers unless the pool pins its own."""
        spec = self.spec
        fabric = it.rdma if it.has_rdma and pool.rdma is not False else "none"
        nodes = LiteServerPool(f"{self.name}-{pool.name}", LiteServerPoolArgs(
            stack=spec.stack, pool=pool.name, flavor=it.name, count=pool.count, region=spec.region, zone=self.zone,
            image=lite_server_image(spec, pool), vpc_id=self.net.vpc_id, subnet_id=self.net.subnet_id,
            security_group_id=self.net.security_group_id, key_pair=self._key(node_key(spec, pool), pool.name),
            user_data=boot.node(pool.name, fabric, it.local_nvme_count > 0),
            root_volume_gib=max(pool.root_volume_gib, LITE_ROOT_MIN_GIB),
            policy=privilege.node_policy(self.bucket, self.secret),
            agency_name=iam_name(spec.tags.project, spec.stack, pool.name), rolled=self.rolled(pool)), self.child)
        return recipe.NodePool(pool, it, nodes.private_ips, nodes.instance_ids, nodes)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        spec = self.spec
        guard = BudgetGuard(f"{self.name}-budget", BudgetGuardArgs(
            name=short_name("fgs", "goldenenv", spec.tags.project, spec.stack, "stop"),
            monthly_limit=spec.budget.monthly_limit, currency=spec.budget.currency,
            hard_stop=spec.budget.hard_stop, region=spec.region, tag_key=tags.STACK_KEY, tag_value=spec.stack,
            project_key="project", project_value=spec.tags.project,
            agency_name=iam_name(spec.tags.project, spec.stack, "stop"), tags=self.tags,
            emails=tuple(spec.budget.emails), ttl_hours=spec.lifecycle.ttl_hours,
            idle_minutes=spec.lifecycle.idle_minutes), self.child)
        return recipe.BudgetGuard({"budgetGuard": guard.function_name})


class GpuCluster(recipe.Cluster):
    """Network, data store, image repository, munge secret, head, node pools and stop function of one stack: the
    cluster recipe (clouds/recipe.py) with Huawei Cloud's parts."""

    parts = HuaweiParts
