"""Azure's host-image bake (goldenenv.images.bake): a build VM like the stack's head and nodes, then a version of a
Compute Gallery image.

The build VM takes what every goldenenv VM has (nodes.linux_login, os_disk, image_reference): the stack's VNet
layout, compute subnet and NSG (no public IP, SSH from adminCidrs only) with a NAT gateway for egress, the
application security group the NSG admits, the pool's key as azureuser (or Entra ID login), passwords off, the
Premium SSD OS disk deleted with the VM (encrypted at rest by the platform), the stack's tags. Once the host step
passed, the VM is deprovisioned (waagent), deallocated and marked generalized (the Azure CLI, LOCAL_SEAL), and
`GalleryImageVersion` captures it under a generalized image definition named after the host lock's family, so
nodes booted from it take their own customData. The gallery's resource group, the gallery, the definition and the
version are retained when the build stack is destroyed (and adopted by the next bake); the VM, its NIC and disk,
the build resource group and the network are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_azure_native as azure

from goldenenv.clouds.azure.network import Network, NetworkArgs
from goldenenv.clouds.azure.nodes import (
    ADMIN_USER, ENTRA_LOGIN, custom_data, host_security, host_security_tags, image_reference, linux_login, os_disk,
)
from goldenenv.clouds.access import node_key
from goldenenv.images.bake import BUILD_INSTANCE, CAPTURE, BakeArgs, HostStep, host_step_targets
from goldenenv.spec import ClusterSpec

INSTANCE = "azure-native:compute:VirtualMachine"
CAPTURE_TYPE = "azure-native:compute:GalleryImageVersion"
STEPS = {CAPTURE_TYPE: CAPTURE, "azure-native:compute:GalleryImage": CAPTURE, INSTANCE: BUILD_INSTANCE}
SEAL = ("sudo -n cloud-init clean --logs", "sudo -n waagent -deprovision+user -force")
"""Deprovisioned as Azure's generalization asks (learn.microsoft.com virtual-machines/generalize: `sudo waagent
-deprovision+user`), so a VM from the image is provisioned afresh with its own user, key and customData."""
LOCAL_SEAL = (("az", "vm", "deallocate", "--ids", "{instance}"), ("az", "vm", "generalize", "--ids", "{instance}"))
"""A gallery image version of a generalized definition is taken from a VM marked generalized (deallocated first)."""
GALLERY_API = "2023-07-03"
PLACEHOLDER_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"


@dataclass
class OfflineGalleries:
    """Under mocks: nothing of the gallery exists unless a test says so (ARM ids)."""

    existing: set[str] = field(default_factory=set)
    subscription: str = PLACEHOLDER_SUBSCRIPTION

    def subscription_id(self) -> str:
        return self.subscription

    def exists(self, arm_id: str) -> bool:
        return arm_id in self.existing


class LiveGalleries:
    """The same question asked of Azure Resource Manager with the caller's tokens (storage.LiveLookup's)."""

    def __init__(self) -> None:
        from goldenenv.clouds.azure.basics import _subscription_from_env
        from goldenenv.clouds.azure.storage import LiveLookup

        self.live = LiveLookup(_subscription_from_env())

    def subscription_id(self) -> str:
        return self.live.subscription_id()

    def exists(self, arm_id: str) -> bool:
        api = "2021-04-01" if "/providers/" not in arm_id else GALLERY_API
        return self.live._get(arm_id, api) is not None  # noqa: SLF001 - the same ARM GET the stores' lookups make


def gallery_name(project: str, host_lock: str) -> str:
    """Gallery names: letters, digits, `_` and `.`, at most 80."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", f"goldenenv_{project}_{host_lock}")[:80]


def version_name(built) -> str:
    """Major.Minor.Patch, each a 32-bit integer: 1.<date>.<time of day in seconds>."""
    return f"1.{built:%Y%m%d}.{built.hour * 3600 + built.minute * 60 + built.second}"


class HostImageBuild(pulumi.ComponentResource):
    """The build group and network, the build VM, the host step, and the retained gallery's image version."""

    def __init__(self, spec: ClusterSpec, pool: Any, args: BakeArgs, opts: pulumi.ResourceOptions | None = None):
        from goldenenv.clouds.azure.basics import host_image, logical_zone
        from goldenenv.clouds.azure.naming import resource_name

        name = args.name
        super().__init__("goldenenv:azure:HostImageBuild", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        lookup = args.lookup or LiveGalleries()
        location, zone, project = spec.region, logical_zone(spec), spec.tags.project

        def names(*parts: str) -> str:
            return resource_name(project, name, *parts)

        group = azure.resources.ResourceGroup(f"{name}-rg", resource_group_name=resource_name("rg", project, name),
                                              location=location, tags=args.tags, opts=child)
        network = Network(f"{name}-network", NetworkArgs(
            resource_group=group.name, location=location, cidr=spec.network.cidr, lustre_prefix=None, egress="nat",
            admin_cidrs=[str(c) for c in spec.network.admin_cidrs], tags=args.tags, names=names, zone=zone), child)
        nic = azure.network.NetworkInterface(
            f"{name}-nic", network_interface_name=names("nic"), resource_group_name=group.name, location=location,
            enable_accelerated_networking=True, tags=args.tags,
            ip_configurations=[{"name": "ipv4", "primary": True, "private_ip_allocation_method": "Dynamic",
                                "subnet": {"id": network.compute_subnet_id},
                                "application_security_groups": [{"id": network.cluster_group_id}]}], opts=child)
        key = node_key(spec, pool)
        vm = azure.compute.VirtualMachine(
            f"{name}-instance", vm_name=names("build"), resource_group_name=group.name, location=location,
            zones=[zone] if zone else None, hardware_profile={"vm_size": args.instance_type},
            os_profile={"computer_name": "hostimage", "admin_username": ADMIN_USER,
                        "custom_data": custom_data(args.user_data), "linux_configuration": linux_login(key)},
            storage_profile={"image_reference": image_reference(host_image(spec, pool)),
                             "os_disk": {**os_disk(pool.root_volume_gib), "delete_option": "Delete"}},
            network_profile={"network_interfaces": [{"id": nic.id, "primary": True, "delete_option": "Delete"}]},
            **host_security(args.instance_type),
            tags={**args.tags, **host_security_tags(args.instance_type)}, opts=child)
        if key is None:
            azure.compute.VirtualMachineExtension(
                f"{name}-entra-login", vm_name=vm.name, resource_group_name=group.name, location=location,
                vm_extension_name=ENTRA_LOGIN["name"], publisher=ENTRA_LOGIN["publisher"], type=ENTRA_LOGIN["type"],
                type_handler_version=ENTRA_LOGIN["type_handler_version"], auto_upgrade_minor_version=True,
                tags=args.tags, opts=child)
        address = nic.ip_configurations.apply(lambda configs: configs[0].private_ip_address)
        step = HostStep(f"{name}-checks", args.step, host_step_targets(args, vm.name, address), vm.id,
                        opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[vm])))

        subscription = lookup.subscription_id()
        images_group = resource_name("rg", project, "host-images", limit=90)
        gallery = gallery_name(project, args.tags["goldenenv-host-lock"].rsplit("-", 1)[0])
        group_id = f"/subscriptions/{subscription}/resourceGroups/{images_group}"
        gallery_id = f"{group_id}/providers/Microsoft.Compute/galleries/{gallery}"
        definition_id = f"{gallery_id}/images/{args.family}"

        def kept(arm_id: str) -> pulumi.ResourceOptions:
            """Retained, and adopted when an earlier bake made it."""
            return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                retain_on_delete=True, import_=arm_id if lookup.exists(arm_id) else None))

        kept_group = azure.resources.ResourceGroup(
            f"{name}-images-rg", resource_group_name=images_group, location=location, tags=args.tags,
            opts=kept(group_id))
        kept_gallery = azure.compute.Gallery(
            f"{name}-gallery", gallery_name=gallery, resource_group_name=kept_group.name, location=location,
            description="goldenenv host images: host layers baked by `goldenenv host-image build`",
            tags=args.tags, opts=kept(gallery_id))
        definition = azure.compute.GalleryImage(
            f"{name}-definition", gallery_image_name=args.family, gallery_name=kept_gallery.name,
            resource_group_name=kept_group.name, location=location, os_type="Linux", os_state="Generalized",
            hyper_v_generation="V2", architecture="x64",
            # nodes boot it with Trusted Launch (nodes.host_security): the definition says it supports it, and may be
            # updated to say so (learn.microsoft.com/azure/virtual-machines/trusted-launch-portal, "Trusted Launch
            # supported images": SecurityType TrustedLaunchSupported)
            features=[{"name": "SecurityType", "value": "TrustedLaunchSupported"}], allow_update_image=True,
            identifier={"publisher": "goldenenv", "offer": gallery, "sku": args.family},
            tags=args.tags, opts=kept(definition_id))
        version = azure.compute.GalleryImageVersion(
            f"{name}-image", gallery_image_version_name=version_name(args.built), gallery_image_name=definition.name,
            gallery_name=kept_gallery.name, resource_group_name=kept_group.name, location=location,
            storage_profile={"source": {"virtual_machine_id": vm.id}},
            publishing_profile={"target_regions": [{"name": location, "regional_replica_count": 1}]},
            tags={**args.tags, "goldenenv-image-name": args.image_name},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[step],
                                                                            retain_on_delete=True)))
        self.image_id = version.id
        self.instance_id = vm.id
        self.register_outputs({"imageId": self.image_id, "instanceId": self.instance_id})


def program(spec: ClusterSpec, pool: Any, args: BakeArgs) -> dict[str, Any]:
    build = HostImageBuild(spec, pool, args)
    return {"imageId": build.image_id, "instanceId": build.instance_id}
