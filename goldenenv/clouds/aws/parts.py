"""AWS's cluster parts: what the cluster recipe (clouds/recipe.py) builds an AWS stack from, and the stack's
GpuCluster component (the recipe run with these parts). The Cloud class (the package) builds a stack with it.
"""

from __future__ import annotations

from typing import Any

import pulumi

from goldenenv import catalog, slurm
from goldenenv.images import host as hostlayer
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.aws import retained
from goldenenv.clouds.aws import spot as spot_requests
from goldenenv.clouds.aws.basics import (
    RetainedStores, default_zone, efa_interfaces, host_image_id, lustre_mount, spot_request,
)
from goldenenv.clouds.aws.budget import StackBudget, StackBudgetArgs
from goldenenv.clouds.aws.head import MungeSecret, MungeSecretArgs, SlurmHead, SlurmHeadArgs, munge_key, secret_policy
from goldenenv.clouds.aws.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.aws.nodes import GpuNodePool, GpuNodePoolArgs
from goldenenv.clouds.aws.registry import ImageRepository, ImageRepositoryArgs
from goldenenv.clouds.aws.storage import DataStore, DataStoreArgs
from goldenenv.clouds.aws.teardown import (
    AutoTeardown, AutoTeardownArgs, FunctionAlerts, FunctionAlertsArgs, idle_cpu_threshold, ttl_tags,
)
from goldenenv.clouds.base import HeadShape, head_shape
from goldenenv.spec import STACK_TAG_KEY

CLOUD = "aws"


class AwsParts(recipe.Parts):
    """AWS's cluster parts: a VPC with one subnet in the stack's zone, S3 with FSx for Lustre, an ECR repository,
    the munge key in Secrets Manager, the head and the pools in EC2, AWS Budgets with the reaper."""

    cloud = recipe.CloudOf(CLOUD)
    registry_login = "ecr"
    munge: MungeSecret | None = None

    def retained_stores(self) -> None:
        spec = self.spec
        self.stores = RetainedStores.find(spec, self.context.lookup or retained.LiveLookup(spec.region))
        self.node_tags = {**spec.stack_tags, **ttl_tags(spec.lifecycle.ttl_hours)}

    def network(self) -> None:
        spec = self.spec
        self.zone = spec.placed_zone or default_zone(spec, self.parent)
        self.net = GpuNetwork(self.name, GpuNetworkArgs(
            region=spec.region, zone=self.zone, cidr=spec.network.cidr, egress=spec.network.egress,
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs], tags=spec.stack_tags,
            slurm_head=head_shape(spec, self.cloud) is not None,
        ), self.child)

    def data_store(self) -> recipe.DataStore:
        spec, fs = self.spec, self.spec.storage.parallel_fs
        data = self.data = DataStore(f"{self.name}-data", DataStoreArgs(
            bucket_name=self.stores.bucket, adopt_bucket=self.stores.adopt_bucket,
            noncurrent_version_days=spec.storage.bucket.noncurrent_version_days,
            checkpoint_prefix=fs.checkpoint_prefix,
            parallel_fs=fs.enabled, fs_size_gib=fs.size_gib, fs_throughput_per_tib=fs.throughput_per_tib,
            subnet_id=self.net.subnet_id, security_group_id=self.net.storage_security_group_id, tags=spec.stack_tags,
        ), self.child)
        mount = pulumi.Output.all(dns=data.fs_dns_name, name=data.fs_mount_name).apply(
            lambda fsx: lustre_mount(fsx["dns"], fsx["name"]) if fsx["dns"] else None)
        return recipe.DataStore(mount, {
            "bucket": data.bucket_name,
            "fileSystemId": data.fs_id,
            "fsxMount": pulumi.Output.all(dns=data.fs_dns_name, name=data.fs_mount_name).apply(
                lambda fsx: f"{fsx['dns']}@tcp:/{fsx['name']} on {fs.mount_point}") if fs.enabled else None,
        })

    def repository(self) -> recipe.Repository:
        return recipe.Repository(ImageRepository(f"{self.name}-images", ImageRepositoryArgs(
            name=self.stores.repository, adopt=self.stores.adopt_repository, tags=self.spec.stack_tags,
        ), self.child).url)

    def secret_store(self) -> recipe.SecretStore:
        region = self.spec.region
        munge = self.munge = MungeSecret(f"{self.name}-munge", MungeSecretArgs(
            stack=self.spec.stack, tags=self.spec.stack_tags), self.child)
        return recipe.SecretStore(lambda reader: pulumi.Output.from_input(munge.secret_arn).apply(
            lambda arn: munge_key(arn, region)))

    def _secret_policy(self, head: bool) -> pulumi.Output[str] | None:
        """What a host may do with the munge secret and its key (head.secret_policy)."""
        if self.munge is None:
            return None
        region = self.spec.region
        return pulumi.Output.all(secret=self.munge.secret_arn, key=self.munge.key_arn).apply(
            lambda arns: secret_policy(arns["secret"], arns["key"], region, head=head))

    def head(self, shape: HeadShape, boot: recipe.Boot) -> recipe.Head:
        spec = self.spec
        head = SlurmHead(f"{self.name}-{slurm.HEAD_HOSTNAME}", SlurmHeadArgs(
            instance_type=shape.instance_type, image_id=host_image_id(spec, spec.nodes[0], self.parent,
                                                                   hostlayer.head_layer(spec)),
            subnet_id=self.net.subnet_id, security_group_id=self.net.head_security_group_id,
            root_volume_gib=shape.root_volume_gib, user_data=boot.head(),
            secret_policy=self._secret_policy(head=True),
            tags=self.node_tags, rolled=self.context.rolls(slurm.HEAD_HOSTNAME, slurm.HEAD_HOSTNAME),
            ssh_key=head_key(spec),
        ), self.child)
        return recipe.Head(head.private_ip, head.instance_id, {"headSsmConnect": head.instance_id.apply(
            lambda i: f"aws ssm start-session --region {spec.region} --target {i}")})

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        spec = self.spec
        it = catalog.instance_type("aws", pool.instance_type)
        efa = efa_interfaces(pool)
        nodes = GpuNodePool(f"{self.name}-{pool.name}", GpuNodePoolArgs(
            instance_type=it.name, count=pool.count, image_id=host_image_id(spec, pool, self.parent,
                                                                       hostlayer.layer(spec, pool)),
            network_cards=it.network_cards,
            efa_interfaces=efa, capacity=pool.capacity.value,
            capacity_reservation_id=pool.capacity_reservation_id, zone=self.zone,
            subnet_id=self.net.subnet_id, security_group_ids=[self.net.node_security_group_id],
            root_volume_gib=pool.root_volume_gib,
            user_data=boot.node(pool.name, "efa" if efa else "none", it.local_nvme_count > 0),
            bucket_arn=self.data.bucket_arn, tags=self.node_tags,
            rolled=self.rolled(pool),
            ssh_key=node_key(spec, pool), secret_policy=self._secret_policy(head=False),
        ), self.child)
        return recipe.NodePool(pool, it, nodes.private_ips, nodes.instance_ids, nodes)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        """AWS Budgets, and the reaper (time to live, idleness, a hard stop repeated)."""
        spec, name, tags = self.spec, self.name, self.spec.stack_tags
        # the reaper's schedule exists for a time to live or a hard stop (it repeats a recorded hard stop); each
        # function's Errors alarm emails the budget's addresses through a topic of its own
        hard_stop = bool(spec.budget and spec.budget.hard_stop)
        alerts = FunctionAlerts(f"{name}-alerts", FunctionAlertsArgs(
            stack=spec.stack, project=spec.tags.project, emails=spec.budget.emails if spec.budget else [], tags=tags,
        ), self.child) if spec.lifecycle.ttl_hours or hard_stop else None

        budget_name = None
        if spec.budget:
            budget = StackBudget(f"{name}-budget", StackBudgetArgs(
                budget_name=f"goldenenv-{spec.stack}", monthly_limit_usd=spec.budget.monthly_limit,
                thresholds=spec.budget.alert_thresholds, forecast_thresholds=spec.budget.forecast_thresholds,
                emails=spec.budget.emails,
                tag_key=STACK_TAG_KEY, tag_value=spec.stack, hard_stop=spec.budget.hard_stop,
                alarm_topic=alerts.topic_arn if alerts else None,
                project=spec.tags.project, tags=tags,
            ), self.child)
            budget_name = budget.budget_name

        reaper_function, idle_alarms = None, None
        if spec.lifecycle.ttl_hours or spec.lifecycle.idle_minutes or hard_stop:
            nodes = {f"{p.pool.name}-{i}": (p.component.instance_ids.apply(lambda ids, i=i: ids[i]),
                                            spot_request(p.pool))
                     for p in pools for i in range(p.pool.count)}
            teardown = AutoTeardown(f"{name}-teardown", AutoTeardownArgs(
                stack=spec.stack, project=spec.tags.project, region=spec.region, ttl_hours=spec.lifecycle.ttl_hours,
                idle_minutes=spec.lifecycle.idle_minutes,
                instance_ids={node: instance_id for node, (instance_id, _) in nodes.items()},
                one_time_spot_nodes=frozenset(node for node, (_, request) in nodes.items()
                                              if request == spot_requests.ONE_TIME),
                idle_cpu_percent=idle_cpu_threshold(min(p.instance_type.vcpus for p in pools)),
                hard_stop=hard_stop, alarm_topic=alerts.topic_arn if alerts else None,
                budget_limit=spec.budget.monthly_limit if hard_stop else None, tags=tags,
            ), self.child)
            reaper_function, idle_alarms = teardown.reaper_function, teardown.idle_alarms or None
        return recipe.BudgetGuard({"budgetName": budget_name, "reaperFunction": reaper_function,
                                   "idleAlarms": idle_alarms})

    def outputs(self, built: recipe.Built) -> dict[str, Any]:
        region = self.spec.region
        return {
            "ssmConnect": pulumi.Output.from_input(built.instance_ids).apply(
                lambda ids: [f"aws ssm start-session --region {region} --target {i}" for i in ids]),
            "placementGroups": [p.component.placement_group for p in built.pools
                                if p.component.placement_group is not None],
        }


class GpuCluster(recipe.Cluster):
    """Network, data store, image repository, head, node pools, budget and auto-teardown of one stack: the cluster
    recipe (clouds/recipe.py) with AWS's parts."""

    parts = AwsParts
