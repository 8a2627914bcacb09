"""Google Cloud's host-image bake (goldenenv.images.bake): a build instance like the stack's nodes, then an image
of its boot disk in the host lock's image family.

The build instance takes what every node has (nodes.private_instance, access_metadata): the stack's system VPC
layout with Cloud NAT for egress and no external address, SSH from adminCidrs only, shielded VM, OS Login or the
pool's key with project keys blocked, the serial port closed, a service account of its own with no role, the
stack's labels, `onHostMaintenance: TERMINATE`. `gcp.compute.Image` takes its boot disk once the host step passed
and stopped it (an image of a running VM's disk is refused without force); the image is retained when the
build stack is destroyed, the instance, its disk and the network are not.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from goldenenv import catalog
from goldenenv.clouds.access import node_key
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp.network import GpuNetwork, GpuNetworkArgs
from goldenenv.clouds.gcp.nodes import PD_DISK, ROCE_DISK, access_metadata, private_instance
from goldenenv.images.bake import BUILD_INSTANCE, CAPTURE, BakeArgs, HostStep, host_step_targets
from goldenenv.spec import ClusterSpec

INSTANCE = "gcp:compute/instance:Instance"
CAPTURE_TYPE = "gcp:compute/image:Image"
STEPS = {CAPTURE_TYPE: CAPTURE, INSTANCE: BUILD_INSTANCE}
SERVICE_ACCOUNT_ID_MAX = 30
IMAGE_NAME_MAX = 63
SEAL = ("sudo -n cloud-init clean --logs",)
"""A node booted from the image runs cloud-init afresh, with its own user data."""
LOCAL_SEAL = (("gcloud", "compute", "instances", "stop", "{instance}", "--quiet"),)
"""Stopped (gcloud waits until it is TERMINATED) before the capture: an image of an attached running VM's disk is
refused without force, and a stopped disk is consistent."""


class HostImageBuild(pulumi.ComponentResource):
    """The build network, the build instance, the host step and the image."""

    def __init__(self, spec: ClusterSpec, pool: Any, args: BakeArgs, opts: pulumi.ResourceOptions | None = None):
        from goldenenv.clouds.gcp import GcpCloud
        from goldenenv.clouds.gcp.basics import CLOUD, host_image, stack_zone

        name = args.name
        super().__init__("goldenenv:gcp:HostImageBuild", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = gcp_labels.labels(args.tags)
        project = gcp.organizations.get_project_output(opts=pulumi.InvokeOutputOptions(parent=self)).project_id

        def names(*parts: str) -> str:
            return gcp_labels.resource_name(spec.tags.project, name, *parts)

        zone = stack_zone(spec)
        network = GpuNetwork(name, GpuNetworkArgs(
            project=project, region=spec.region, zone=zone, cidr=spec.network.cidr, fabric="none", host_nics=1,
            gpu_nics=0, gpu_mtu=None, egress="nat", admin_cidrs=[str(c) for c in spec.network.admin_cidrs],
            labels=labels, names=names), child)
        account = gcp.serviceaccount.Account(
            f"{name}-sa", account_id=gcp_labels.resource_name(name, "build", limit=SERVICE_ACCOUNT_ID_MAX),
            project=project, display_name=f"goldenenv host-image build {name}"[:100], opts=child)
        node = catalog.instance_type(CLOUD, pool.instance_type)
        disk_type = ROCE_DISK if node.rdma in ("gib", "roce") else PD_DISK
        instance = gcp.compute.Instance(
            f"{name}-instance", name=names("build"), project=project, zone=zone, machine_type=args.instance_type,
            **private_instance(host_image(spec, pool), pool.root_volume_gib, disk_type, account.email, labels,
                               network.tag, secure_boot=False),
            network_interfaces=[{"subnetwork": network.system_subnet, "nic_type": "GVNIC"}],
            scheduling={"on_host_maintenance": "TERMINATE", "automatic_restart": False,
                        "provisioning_model": "STANDARD"},
            metadata={"user-data": args.user_data, **access_metadata(node_key(spec, pool), GcpCloud.ssh_user)},
            opts=child)
        step = HostStep(f"{name}-checks", args.step,
                        host_step_targets(args, instance.name, instance.network_interfaces[0].network_ip),
                        instance.self_link, opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                            depends_on=[instance])))
        image = gcp.compute.Image(
            f"{name}-image", name=image_name(args.image_name), project=project, family=args.family[:IMAGE_NAME_MAX],
            source_disk=instance.boot_disk.source, labels=labels, guest_os_features=[{"type": "GVNIC"},
                                                                                    {"type": "UEFI_COMPATIBLE"}],
            description=f"goldenenv host image: {args.base} with host layer {args.tags['goldenenv-host-layer']}",
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[step],
                                                                            retain_on_delete=True)))
        self.image_id = pulumi.Output.all(image.project, image.name).apply(
            lambda v: f"projects/{v[0]}/global/images/{v[1]}")
        self.instance_id = instance.instance_id
        self.register_outputs({"imageId": self.image_id, "instanceId": self.instance_id})


def image_name(text: str) -> str:
    return gcp_labels.resource_name(text, limit=IMAGE_NAME_MAX)


def program(spec: ClusterSpec, pool: Any, args: BakeArgs) -> dict[str, Any]:
    build = HostImageBuild(spec, pool, args)
    return {"imageId": build.image_id, "instanceId": build.instance_id}
