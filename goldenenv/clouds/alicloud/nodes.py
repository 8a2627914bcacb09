"""A pool of identical GPU nodes on Alibaba Cloud: placement, RAM role, instances with their ERIs.

Placement comes from the catalog (node_layout.csv): a LowLatency deployment set for the families Alibaba places
that way (at most 20 nodes, one zone), an E-HPC cluster for SCC types, nothing else for the rest. eRDMA needs no
HPC cluster. Each node is pay-as-you-go (PostPaid), optionally spot at the pay-as-you-go ceiling, released when
Alibaba reclaims it; its disks are encrypted and its metadata needs tokens.

A time to live (lifecycle.ttlHours) is Alibaba's own: the instance's auto_release_time, fixed when the node is
created (the node ignores later changes to it, so each `up` does not push the release back). Alibaba releases,
that is deletes, the node then, with its system disk.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pulumi
import pulumi_alicloud as alicloud

from goldenenv.clouds.alicloud.erdma import HIGH_PERFORMANCE, eri_layout

POST_PAID = "PostPaid"
SPOT_STRATEGY = "SpotAsPriceGo"
"""Spot at the market price, never above the pay-as-you-go price."""
SPOT_INTERRUPTION = "Terminate"
"""A reclaimed spot node is released (Alibaba's default): its system disk goes with it."""
LOW_LATENCY = "LowLatency"
SYSTEM_DISK = "cloud_essd"
HTTP_TOKENS = "required"
ECS_PRINCIPAL = "ecs.aliyuncs.com"
RAM_NAME_MAX = 64
AUTO_RELEASE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""ISO 8601 in UTC, yyyy-MM-ddTHH:mm:ssZ (pulumi-alicloud ecs.Instance auto_release_time)."""
AUTO_RELEASE_INPUT = "autoReleaseTime"


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    instance_type: str
    count: int
    image_id: pulumi.Input[str]
    """A pinned public image ID or the stack's own: never a floating alias."""
    zone: pulumi.Input[str]
    vswitch_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]
    placement: str
    """low-latency-set | hpc-cluster | none (catalog node_layout.csv)"""
    network_cards: int
    eri_count: int
    """0 for a pool without eRDMA."""
    queue_pairs: int
    jumbo_frames: bool
    capacity: str
    """on-demand | spot"""
    system_disk_gib: int
    user_data: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    """acs:oss:*:*:<bucket>: the only bucket the nodes' role reaches."""
    mount_actions: tuple[str, ...] = ()
    """Read-only NAS actions the shared file system's mount script calls at boot (storage.NODE_MOUNT_ACTIONS)."""
    role_name: str
    tags: dict[str, str]
    auto_release_time: str | None = None
    """When Alibaba releases (deletes) each node (auto_release_time, PostPaid only); None: never."""


class GpuNodePool(pulumi.ComponentResource):
    """The pool's placement, its RAM role, and its nodes, each with the role attached."""

    instance_ids: pulumi.Output[list[str]]
    private_ips: pulumi.Output[list[str]]
    deployment_set: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:alicloud:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        placement: dict[str, pulumi.Input[str]] = {}
        deployment_set = None
        if args.placement == "low-latency-set":
            deployment_set = alicloud.ecs.EcsDeploymentSet(
                f"{name}-set", deployment_set_name=f"{name}", strategy=LOW_LATENCY,
                description=f"goldenenv {name}: {args.count} x {args.instance_type}, low latency", opts=child,
            )
            placement["deployment_set_id"] = deployment_set.id
        elif args.placement == "hpc-cluster":
            cluster = alicloud.ecs.HpcCluster(
                f"{name}-hpc", name=f"{name}", description=f"goldenenv {name}: {args.instance_type}", opts=child,
            )
            placement["hpc_cluster_id"] = cluster.id

        role = self._role(name, args, child)
        slots = eri_layout(args.network_cards, args.eri_count, args.queue_pairs)
        primary = [s for s in slots if s.primary]
        secondary = [s for s in slots if not s.primary]
        user_data = pulumi.Output.from_input(args.user_data).apply(lambda text: base64.b64encode(text.encode()).decode())
        nodes = []
        for i in range(args.count):
            node = alicloud.ecs.Instance(
                f"{name}-{i}",
                instance_name=f"{name}-{i}",
                instance_type=args.instance_type,
                image_id=args.image_id,
                availability_zone=args.zone,
                vswitch_id=args.vswitch_id,
                security_groups=[args.security_group_id],
                resource_group_id=args.resource_group_id,
                instance_charge_type=POST_PAID,
                **_market(args.capacity),
                internet_max_bandwidth_out=0,
                system_disk_category=SYSTEM_DISK,
                system_disk_size=args.system_disk_gib,
                system_disk_encrypted=True,
                http_endpoint="enabled",
                http_tokens=HTTP_TOKENS,
                enable_jumbo_frame=args.jumbo_frames if args.eri_count else None,
                **({"network_interface_traffic_mode": HIGH_PERFORMANCE,
                    "network_card_index": primary[0].network_card_index,
                    "queue_pair_number": primary[0].queue_pairs} if primary else {}),
                network_interfaces={
                    "network_interface_traffic_mode": HIGH_PERFORMANCE,
                    "network_card_index": secondary[0].network_card_index,
                    "queue_pair_number": secondary[0].queue_pairs,
                    "vswitch_id": args.vswitch_id,
                    "security_group_ids": [args.security_group_id],
                } if secondary else None,
                user_data=user_data,
                tags={**args.tags, "Name": f"{name}-{i}"},
                volume_tags=args.tags,
                auto_release_time=args.auto_release_time,
                # the release time is set when the node is created: a later up computes a later one, ignored
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                    delete_before_replace=True,
                    ignore_changes=[AUTO_RELEASE_INPUT] if args.auto_release_time else None)),
                **placement,
            )
            alicloud.ecs.RamRoleAttachment(
                f"{name}-{i}-role", instance_id=node.id, ram_role_name=role.role_name, opts=child,
            )
            nodes.append(node)

        self.instance_ids = pulumi.Output.all(*[n.id for n in nodes])
        self.private_ips = pulumi.Output.all(*[n.private_ip for n in nodes])
        self.deployment_set = deployment_set.id if deployment_set else None
        self.register_outputs({
            "instance_ids": self.instance_ids, "private_ips": self.private_ips,
            "deployment_set": self.deployment_set,
        })

    @staticmethod
    def _role(name: str, args: GpuNodePoolArgs, child: pulumi.ResourceOptions) -> alicloud.ram.Role:
        """Assumed by ECS; reaches the stack's bucket and reads what its shared file system's mount needs, nothing
        else (nodes log in to ACR with a password file the operator provisions: registry-login-acr.sh.j2)."""
        role = alicloud.ram.Role(
            f"{name}-role", role_name=args.role_name,
            assume_role_policy_document=json.dumps({
                "Version": "1",
                "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                               "Principal": {"Service": [ECS_PRINCIPAL]}}],
            }),
            description=f"goldenenv {name} nodes: the stack's bucket", tags=args.tags, opts=child,
        )
        policy = alicloud.ram.Policy(
            f"{name}-access", policy_name=args.role_name,
            policy_document=pulumi.Output.from_input(args.bucket_arn).apply(
                lambda arn: node_policy(arn, args.mount_actions)),
            description=f"goldenenv {name} nodes: the stack's bucket only",
            tags=args.tags, opts=child,
        )
        alicloud.ram.RolePolicyAttachment(
            f"{name}-access-attachment", role_name=role.role_name, policy_name=policy.policy_name, policy_type="Custom",
            opts=child,
        )
        return role


def node_policy(bucket_arn: str, mount_actions: tuple[str, ...] = ()) -> str:
    """RAM policy: the stack's bucket and its objects, and the read-only calls of the shared file system's mount."""
    return json.dumps({
        "Version": "1",
        "Statement": [
            {"Effect": "Allow", "Action": ["oss:ListObjects", "oss:GetBucketInfo"], "Resource": [bucket_arn]},
            {"Effect": "Allow",
             "Action": ["oss:GetObject", "oss:PutObject", "oss:DeleteObject", "oss:AbortMultipartUpload",
                        "oss:ListParts"],
             "Resource": [f"{bucket_arn}/*"]},
        ] + ([{"Effect": "Allow", "Action": list(mount_actions), "Resource": ["*"]}] if mount_actions else []),
    })


def auto_release_time(ttl_hours: float, now: datetime) -> str:
    """`now` (aware) + ttl_hours in UTC in Alibaba's format, rounded up to the whole minute (Alibaba drops the
    seconds)."""
    at = (now + timedelta(hours=ttl_hours)).astimezone(timezone.utc)
    if at.second or at.microsecond:
        at = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return at.strftime(AUTO_RELEASE_FORMAT)


def _market(capacity: str) -> dict[str, str]:
    if capacity != "spot":
        return {}
    return {"spot_strategy": SPOT_STRATEGY, "spot_interruption_behavior": SPOT_INTERRUPTION}


def ram_name(*parts: str) -> str:
    """A RAM role or policy name (letters, digits and `-`, at most 64): the parts joined, shortened with a
    hash when too long, so two stacks never share one."""
    text = re.sub(r"[^A-Za-z0-9-]+", "-", "-".join(parts)).strip("-")
    if len(text) <= RAM_NAME_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:RAM_NAME_MAX - 9].rstrip('-')}-{digest}"
