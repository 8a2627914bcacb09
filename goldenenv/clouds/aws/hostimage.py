"""AWS's host-image bake (goldenenv.images.bake): a build instance like the stack's nodes, then an AMI of it.

The build instance takes what every node has: the stack's private subnet layout and node security group (no
public address, SSH only from adminCidrs), IMDSv2 (tokens required), an encrypted gp3 root, the stack's tags, an
instance role with SSM (reached by instance id through Session Manager, as `validate --hosts-by instance-id`),
the pool's ssh key. `aws.ec2.AmiFromInstance` captures it once the host step passed; the AMI is retained when
the build stack is destroyed, the instance, its volume and the network are not.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from goldenenv.clouds.access import node_key
from goldenenv.clouds.aws.iam import assumed_by
from goldenenv.clouds.aws.network import GpuNetwork, GpuNetworkArgs
from goldenenv.images.bake import BUILD_INSTANCE, CAPTURE, BakeArgs, HostStep, host_step_targets
from goldenenv.spec import ClusterSpec

INSTANCE = "aws:ec2/instance:Instance"
CAPTURE_TYPE = "aws:ec2/amiFromInstance:AmiFromInstance"
STEPS = {CAPTURE_TYPE: CAPTURE, INSTANCE: BUILD_INSTANCE}
"""Which bake step a failing resource type is (bake.failed_step)."""
SSM_POLICY = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
SEAL = ("sudo -n cloud-init clean --logs",)
"""A node booted from the AMI runs cloud-init afresh, with its own user data."""
LOCAL_SEAL: tuple[tuple[str, ...], ...] = ()
"""AmiFromInstance stops the instance for a consistent snapshot itself (snapshotWithoutReboot false)."""


class HostImageBuild(pulumi.ComponentResource):
    """The build network, the build instance, the host step and the AMI."""

    def __init__(self, spec: ClusterSpec, pool: Any, args: BakeArgs, opts: pulumi.ResourceOptions | None = None):
        from goldenenv.clouds.aws.basics import default_zone, host_image_id

        name = args.name
        super().__init__("goldenenv:aws:HostImageBuild", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        zone = spec.placed_zone or default_zone(spec, self)
        network = GpuNetwork(name, GpuNetworkArgs(
            region=spec.region, zone=zone, cidr=spec.network.cidr, egress="nat",
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs], tags=args.tags), child)
        role = aws.iam.Role(f"{name}-role", assume_role_policy=assumed_by("ec2.amazonaws.com"), tags=args.tags,
                            opts=child)
        aws.iam.RolePolicyAttachment(f"{name}-ssm", role=role.name, policy_arn=SSM_POLICY, opts=child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=args.tags, opts=child)
        key = node_key(spec, pool)
        key_pair = aws.ec2.KeyPair(f"{name}-key", key_name=f"{name}-build", public_key=key.public_key,
                                   tags=args.tags, opts=child) if key else None
        instance = aws.ec2.Instance(
            f"{name}-instance", ami=host_image_id(spec, pool, self), instance_type=args.instance_type,
            availability_zone=zone, subnet_id=network.subnet_id,
            vpc_security_group_ids=[network.node_security_group_id], associate_public_ip_address=False,
            iam_instance_profile=profile.name, key_name=key_pair.key_name if key_pair else None,
            metadata_options={"http_endpoint": "enabled", "http_tokens": "required",
                              "http_put_response_hop_limit": 2},
            root_block_device={"volume_size": pool.root_volume_gib, "volume_type": "gp3", "encrypted": True,
                               "delete_on_termination": True, "tags": args.tags},
            user_data=args.user_data, user_data_replace_on_change=True,
            tags={**args.tags, "Name": f"{name}-build"}, opts=child)
        step = HostStep(f"{name}-checks", args.step, host_step_targets(args, instance.id, instance.private_ip),
                        instance.id, opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                            depends_on=[instance])))
        image = aws.ec2.AmiFromInstance(
            f"{name}-image", name=args.image_name, source_instance_id=instance.id,
            description=f"goldenenv host image: {args.base} with host layer {args.tags['goldenenv-host-layer']}",
            tags={**args.tags, "Name": args.image_name},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[step],
                                                                            retain_on_delete=True)))
        self.image_id = image.id
        self.instance_id = instance.id
        self.register_outputs({"imageId": self.image_id, "instanceId": self.instance_id})


def program(spec: ClusterSpec, pool: Any, args: BakeArgs) -> dict[str, Any]:
    """The build stack's program: everything under a provider of the stack's region with its tags as defaults."""
    provider = aws.Provider(f"{args.name}-aws", region=spec.region, default_tags={"tags": args.tags})
    build = HostImageBuild(spec, pool, args, pulumi.ResourceOptions(providers=[provider]))
    return {"imageId": build.image_id, "instanceId": build.instance_id}
