"""Tencent Cloud's cluster parts: what the cluster recipe (clouds/recipe.py) builds a Tencent stack from, and the
stack's GpuCluster component (the recipe run with these parts). The Cloud class (the package) builds a stack with it.
"""

from __future__ import annotations

from typing import Any

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv import catalog, slurm
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.base import HeadShape, head_shape
from goldenenv.clouds.tencent import privilege, storage, tags
from goldenenv.clouds.tencent.basics import (
    CLOUD, FABRIC, bucket_name, hcc_pool, host_image_id, registry_names, role_name, secret_name, short_name,
)
from goldenenv.clouds.tencent.budget import BudgetGuard, BudgetGuardArgs
from goldenenv.clouds.tencent.head import MungeSecret, SlurmHead, SlurmHeadArgs, munge_key
from goldenenv.clouds.tencent.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.tencent.nodes import GpuNodePool, GpuNodePoolArgs
from goldenenv.clouds.tencent.registry import ImageRepository, ImageRepositoryArgs
from goldenenv.images import host as hostlayer
from goldenenv.spec import STACK_TAG_KEY


def spot_price(pool: Any, region: str) -> str | None:
    """A spot pool's max price: the catalog's on-demand price for the region (None: on demand, or unpriced, which
    Cloud.check refuses for spot)."""
    if pool.capacity.value != "spot":
        return None
    price = catalog.price(CLOUD, pool.instance_type, region)
    return f"{price.usd_per_hour:.2f}" if price else None


class TencentParts(recipe.Parts):
    """Tencent Cloud's cluster parts: a VPC with a NAT gateway, COS with CFS Turbo and its data flow, TCR, the munge
    key in SSM, the head and the pools in CVM (HCC pools in an HPC cluster), a budget with its stop function."""

    cloud = recipe.CloudOf(CLOUD)
    registry_login = "tcr"
    munge: MungeSecret | None = None

    def retained_stores(self) -> None:
        lookup = self.context.lookup or storage.LiveLookup(self.spec.region)
        self.appid = lookup.appid()
        name = self.spec.storage.bucket.bucket_name or bucket_name(self.spec.tags.project, self.spec.stack)
        self.bucket = storage.bucket_full_name(name, self.appid)
        self.adopt_bucket = lookup.bucket_exists(self.bucket)
        self.tags = tags.written(self.spec.stack_tags)

    def network(self) -> None:
        spec = self.spec
        self.zone = spec.placed_zone or f"{spec.region}-3"
        self.net = GpuNetwork(self.name, GpuNetworkArgs(
            zone=self.zone, cidr=spec.network.cidr, egress=spec.network.egress,
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs],
            slurm_head=head_shape(spec, self.cloud) is not None, tags=self.tags), self.child)

    def data_store(self) -> recipe.DataStore:
        spec = self.spec
        fs = spec.storage.parallel_fs
        data = self.data = storage.DataStore(f"{self.name}-data", storage.DataStoreArgs(
            bucket=self.bucket, adopt_bucket=self.adopt_bucket, region=spec.region, zone=self.zone,
            vpc_id=self.net.vpc_id, vpc_cidr=str(spec.network.cidr), parallel_fs=fs.enabled,
            fs_size_gib=fs.size_gib, tags=self.tags), self.child)
        return recipe.DataStore(data.mount, {"bucket": data.bucket_name, "sharedFs": data.fs_id,
                                             "fileSystemId": data.fs_id, "dataFlowId": data.data_flow_id})

    def repository(self) -> recipe.Repository:
        instance, namespace, repo = registry_names(self.spec.tags.project, self.spec.stack)
        images = ImageRepository(f"{self.name}-images", ImageRepositoryArgs(
            instance=instance, namespace=namespace, repository=repo, vpc_id=self.net.vpc_id,
            subnet_id=self.net.subnet_id, tags=self.tags), self.child)
        self.registry = (images.registry_id, namespace, repo)
        return recipe.Repository(images.url)

    def _policy(self, secret: str, head: bool = False) -> pulumi.Output[str]:
        """A host's CAM policy (privilege.node_document); its pull grant names the stack's repository under the TCR
        instance's id, known once TCR has made the instance."""
        registry_id, namespace, repo = self.registry
        region, appid, bucket = self.spec.region, self.appid, self.bucket
        return pulumi.Output.from_input(registry_id).apply(lambda found: privilege.node_document(
            region, appid, bucket, secret, head=head, registry=(found, namespace, repo)))

    def secret_store(self) -> recipe.SecretStore:
        self.secret = secret_name(self.spec.tags.project, self.spec.stack)
        munge = self.munge = MungeSecret(f"{self.name}-munge", self.secret, self.tags, self.child)
        return recipe.SecretStore(lambda reader: pulumi.Output.from_input(munge.secret_name).apply(munge_key))

    def _key(self, key: Any, label: str) -> pulumi.Output[str] | None:
        if key is None:
            return None
        return tencentcloud.key.Pair(f"{self.name}-{label}-key", key_name=short_name("key", key.name),
                                     public_key=key.public_key, tags=self.tags, opts=self.child).id

    def head(self, shape: HeadShape, boot: recipe.Boot) -> recipe.Head:
        spec = self.spec
        head = SlurmHead(f"{self.name}-{slurm.HEAD_HOSTNAME}", SlurmHeadArgs(
            instance_type=shape.instance_type, zone=self.zone,
            image_id=host_image_id(spec, spec.nodes[0], hostlayer.head_layer(spec)),
            vpc_id=self.net.vpc_id, subnet_id=self.net.subnet_id,
            security_group_id=self.net.head_security_group_id, system_disk_gib=shape.root_volume_gib,
            user_data=boot.head(), policy=self._policy(self.secret, head=True),
            role_name=role_name(spec.tags.project, spec.stack, slurm.HEAD_HOSTNAME),
            key_id=self._key(head_key(spec), slurm.HEAD_HOSTNAME), tags=self.tags), self.child)
        return recipe.Head(head.private_ip, head.instance_id)

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        spec = self.spec
        it = catalog.instance_type(CLOUD, pool.instance_type)
        rdma = hcc_pool(pool, it) and pool.rdma is not False
        nodes = GpuNodePool(f"{self.name}-{pool.name}", GpuNodePoolArgs(
            pool=pool.name, instance_type=it.name, count=pool.count, zone=self.zone,
            image_id=host_image_id(spec, pool, hostlayer.layer(spec, pool)), vpc_id=self.net.vpc_id,
            subnet_id=self.net.subnet_id, security_group_id=self.net.security_group_id,
            hpc_cluster=hcc_pool(pool, it), spot_max_price=spot_price(pool, spec.region),
            system_disk_gib=pool.root_volume_gib,
            user_data=boot.node(pool.name, FABRIC if rdma else "none", it.local_nvme_count > 0),
            policy=self._policy(getattr(self, "secret", "") or secret_name(spec.tags.project, spec.stack)),
            role_name=role_name(spec.tags.project, spec.stack, pool.name),
            key_id=self._key(node_key(spec, pool), pool.name), tags=self.tags, rolled=self.rolled(pool),
        ), self.child)
        return recipe.NodePool(pool, it, nodes.private_ips, nodes.instance_ids, nodes)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        spec = self.spec
        if not spec.budget:
            return recipe.BudgetGuard({"budgetGuard": None})
        guard = BudgetGuard(f"{self.name}-budget", BudgetGuardArgs(
            name=short_name("cam", "goldenenv", spec.tags.project, spec.stack, "budget")[:60],
            monthly_limit=spec.budget.monthly_limit, currency=spec.budget.currency,
            thresholds=spec.budget.alert_thresholds, hard_stop=spec.budget.hard_stop, region=spec.region,
            tag_key=STACK_TAG_KEY, tag_value=spec.stack, project_key=tags.PROJECT_KEY,
            project_value=spec.tags.project, role_name=role_name(spec.tags.project, spec.stack, "stop"),
            tags=self.tags, emails=tuple(spec.budget.emails), ttl_hours=spec.lifecycle.ttl_hours,
            idle_minutes=spec.lifecycle.idle_minutes), self.child)
        return recipe.BudgetGuard({"budgetGuard": guard.function_name})

    def outputs(self, built: recipe.Built) -> dict[str, Any]:
        return {"hpcClusters": [p.component.hpc_cluster_id for p in built.pools
                                if p.component.hpc_cluster_id is not None]}


class GpuCluster(recipe.Cluster):
    """Network, data store, image repository, munge secret, head, node pools and budget of one stack: the cluster
    recipe (clouds/recipe.py) with Tencent Cloud's parts."""

    parts = TencentParts
