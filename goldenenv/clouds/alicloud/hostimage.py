"""Alibaba Cloud's host-image bake (goldenenv.images.bake): a build instance like the stack's nodes, then a custom
image of it.

The build instance is what every goldenenv ECS instance is (nodes.private_instance): pay-as-you-go in the stack's
private vSwitch layout and node security group (SSH from adminCidrs only) with an Enhanced NAT gateway for egress,
no public bandwidth, an encrypted ESSD system disk, hardened-mode metadata (tokens required), the stack's tags, the
pool's key pair; it takes no RAM role (the install reads only the vendors' repositories). `alicloud.ecs.Image`
captures it once the host step passed, in the host lock's image family; the image is retained when the build
stack is destroyed, the instance, its disk and the network are not.
"""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pulumi
import pulumi_alicloud as alicloud

from goldenenv import catalog
from goldenenv.clouds.access import node_key
from goldenenv.clouds.alicloud.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.alicloud.nodes import private_instance
from goldenenv.images.bake import BUILD_INSTANCE, CAPTURE, BakeArgs, HostStep, host_step_targets
from goldenenv.spec import ClusterSpec

INSTANCE = "alicloud:ecs/instance:Instance"
CAPTURE_TYPE = "alicloud:ecs/image:Image"
STEPS = {CAPTURE_TYPE: CAPTURE, INSTANCE: BUILD_INSTANCE}
SEAL = ("sudo -n cloud-init clean --logs",)
"""A node booted from the image runs cloud-init afresh, with its own user data."""
LOCAL_SEAL: tuple[tuple[str, ...], ...] = ()


class HostImageBuild(pulumi.ComponentResource):
    """The build network, the build instance, the host step and the custom image."""

    def __init__(self, spec: ClusterSpec, pool: Any, args: BakeArgs, opts: pulumi.ResourceOptions | None = None):
        from goldenenv.clouds.alicloud.basics import CLOUD, host_image_id

        name = args.name
        super().__init__("goldenenv:alicloud:HostImageBuild", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        node = catalog.instance_type(CLOUD, pool.instance_type)
        zone = spec.placed_zone or alicloud.get_zones_output(
            available_instance_type=node.name, available_resource_creation="Instance",
            opts=pulumi.InvokeOutputOptions(parent=self)).ids[0]
        network = GpuNetwork(name, GpuNetworkArgs(
            zone=zone, cidr=spec.network.cidr, egress="nat", admin_cidrs=[str(c) for c in spec.network.admin_cidrs],
            resource_group_id=None, tags=args.tags), child)
        key = node_key(spec, pool)
        key_pair = alicloud.ecs.EcsKeyPair(f"{name}-key", key_pair_name=f"{name}-build", public_key=key.public_key,
                                           tags=args.tags, opts=child) if key else None
        shape = SimpleNamespace(instance_type=args.instance_type, image_id=host_image_id(spec, pool), zone=zone,
                                vswitch_id=network.vswitch_id, security_group_id=network.security_group_id,
                                resource_group_id=None, system_disk_gib=pool.root_volume_gib)
        instance = alicloud.ecs.Instance(
            f"{name}-instance", instance_name=f"{name}-build", **private_instance(shape),
            user_data=base64.b64encode(args.user_data.encode()).decode(),
            key_name=key_pair.key_pair_name if key_pair else None,
            tags={**args.tags, "Name": f"{name}-build"}, volume_tags=args.tags, opts=child)
        step = HostStep(f"{name}-checks", args.step, host_step_targets(args, instance.id, instance.private_ip),
                        instance.id, opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                            depends_on=[instance])))
        image = alicloud.ecs.Image(
            f"{name}-image", image_name=args.image_name, image_family=args.family, instance_id=instance.id,
            description=f"goldenenv host image: {args.base} with host layer {args.tags['goldenenv-host-layer']}",
            tags=args.tags, opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                depends_on=[step], retain_on_delete=True)))
        self.image_id = image.id
        self.instance_id = instance.id
        self.register_outputs({"imageId": self.image_id, "instanceId": self.instance_id})


def program(spec: ClusterSpec, pool: Any, args: BakeArgs) -> dict[str, Any]:
    """The build stack's program, under a provider of the stack's region."""
    provider = alicloud.Provider(f"{args.name}-alicloud", region=spec.region)
    build = HostImageBuild(spec, pool, args, pulumi.ResourceOptions(providers=[provider]))
    return {"imageId": build.image_id, "instanceId": build.instance_id}
