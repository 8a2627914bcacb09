"""A pool of identical GPU nodes on Azure: one virtual machine scale set, in one InfiniBand fabric.

Azure connects the InfiniBand ports of the VMs that share a scale set's placement group by itself (ND H100 v5 docs:
"connections are automatically configured between VMs occupying the same virtual machine scale set"); no interface
is declared for it. So each pool is one `VirtualMachineScaleSet` (RESEARCH-3 §2.2, §2.10):
- Uniform orchestration, singlePlacementGroup true (one placement group: at most 100 VMs, which check() enforces on
  nodes.count), one platform fault domain, no overprovisioning (an extra VM would join the fabric and bill), a
  manual upgrade policy (a model change reaches running nodes only when the user rolls them);
- the Ubuntu HPC image pinned by version (never `latest`): the catalog's, with the driver it carries;
- one NIC with accelerated networking on the private compute subnet, no public IP configuration;
- the pool's user-assigned managed identity, which the program grants only what the nodes use (the blob account,
  the registry's pull, the munge key's read);
- login with the pool's sshPublicKey as `azureuser`, passwords off; without a key, Microsoft Entra ID login (the
  AADSSHLoginForLinux extension: `az ssh vm`, granted by the Virtual Machine (Administrator) User Login role), and
  the administrator key ARM requires is LOCKED_ADMIN_KEY, a key nobody holds;
- spot: priority Spot, eviction Deallocate (the VM, its disks and its place in the scale set stay; a stopped but
  allocated VM would keep billing), maxPrice -1 (never evicted for price, only for capacity), and Try & restore
  (spotRestorePolicy) for SPOT_RESTORE_TIMEOUT: Azure starts an evicted VM again when capacity returns; after that
  `up` starts what is still deallocated (stopped.py);
- booted by cloud-init from customData (base64), which the HPC image's cloud-init reads from the Azure datasource.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure

from goldenenv.clouds import access
from goldenenv.clouds.azure import hardening
from goldenenv.hardening import EXCEPTION_KEY

SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
NODE_POOL = "goldenenv:azure:GpuNodePool"
ADMIN_USER = "azureuser"
MAX_PLACEMENT_GROUP = 100
"""singlePlacementGroup: "When true this limits the scale set to a single placement group, of max size 100 virtual
machines" (azure-mgmt-compute VirtualMachineScaleSetProperties; learn.microsoft.com virtual-machine-scale-sets-
placement-groups)."""
PRIORITY = {"on-demand": "Regular", "spot": "Spot"}
SPOT_EVICTION = "Deallocate"
SPOT_MAX_PRICE = -1
"""billingProfile.maxPrice -1: pay up to the on-demand price, never evicted for price (RESEARCH-3 §2.8)."""
SPOT_RESTORE_TIMEOUT = "PT2H"
"""How long Azure tries to restore an evicted spot VM (the scale set's spotRestorePolicy.restoreTimeout, ISO 8601):
the longest it takes. learn.microsoft.com virtual-machine-scale-sets/use-spot, "Try & restore": "automatically try
to restore evicted Azure Spot Virtual Machine instances inside a scale set to maintain the target instance count"
(`az vmss create ... --enable-spot-restore True --spot-restore-timeout PT1H`); the azurerm provider's spot_restore
timeout: "between 15 minutes and 120 minutes (inclusive) ... Defaults to PT1H". Try & restore is off in scale sets
that use Autoscale; goldenenv's use none."""
OS_DISK = "Premium_LRS"
LOCKED_ADMIN_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOoKCxMuEfR9KlZ9jxG+qsOXghwGoGRyadeQ0D2aU+sq "
                    "goldenenv-locked-admin")
"""An Ed25519 public key whose private half was deleted the moment it was made (`ssh-keygen`, then `shred`): the
administrator key ARM requires of a Linux VM without a password, for pools that log in with Entra ID instead."""
ENTRA_LOGIN = {"name": "AADSSHLoginForLinux", "publisher": "Microsoft.Azure.ActiveDirectory",
               "type": "AADSSHLoginForLinux", "type_handler_version": "1.0", "auto_upgrade_minor_version": True}
"""Microsoft Entra ID login for Linux (learn.microsoft.com entra/identity/devices/howto-vm-sign-in-azure-ad-linux:
`az vm extension set --publisher Microsoft.Azure.ActiveDirectory --name AADSSHLoginForLinux`)."""


def image_reference(urn: str) -> dict[str, str]:
    """publisher:offer:sku:version as ARM's imageReference; a gallery image version's id as its `id`."""
    if urn.startswith("/subscriptions/"):
        return {"id": urn}
    publisher, offer, sku, version = urn.split(":")
    return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}


def custom_data(cloud_config: str) -> str:
    return base64.b64encode(cloud_config.encode()).decode()


def os_disk(gib: int) -> dict[str, Any]:
    """The OS disk every goldenenv host boots from: the image's, on Premium SSD (encrypted at rest by the platform)."""
    return {"create_option": "FromImage", "caching": "ReadWrite", "disk_size_gb": gib,
            "managed_disk": {"storage_account_type": OS_DISK}}


def host_security(vm_size: str) -> dict[str, Any]:
    """Trusted Launch where the size supports it: vTPM on, Secure Boot off by its named reason (the image's DKMS
    kernel modules are unsigned; host_security_tags names it)."""
    if not hardening.supports_trusted_launch(vm_size):
        return {}
    return {"security_profile": hardening.trusted_launch(secure_boot=False)}


def host_security_tags(vm_size: str) -> dict[str, str]:
    """The named reason Secure Boot is off on a Trusted Launch host (hardening.REASONS)."""
    if not hardening.supports_trusted_launch(vm_size):
        return {}
    return {EXCEPTION_KEY: hardening.UNSIGNED_KERNEL_MODULES}


def linux_login(ssh_key: access.NodeKey | None) -> dict[str, Any]:
    """The admin user with the pool's key (or the locked one), passwords off."""
    key = ssh_key.public_key if ssh_key else LOCKED_ADMIN_KEY
    return {"disable_password_authentication": True, "provision_vm_agent": True,
            "ssh": {"public_keys": [{"path": f"/home/{ADMIN_USER}/.ssh/authorized_keys", "key_data": key}]}}


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    resource_group: pulumi.Input[str]
    location: str
    zone: str | None
    """Azure's logical zone ("1"), or None: regional."""
    vm_size: str
    count: int
    image: str
    """The pinned image: publisher:offer:sku:version, or a gallery image version id."""
    os_disk_gib: int
    subnet_id: pulumi.Input[str]
    cluster_group_id: pulumi.Input[str]
    """The cluster's application security group: the compute NSG admits its members only."""
    capacity: str
    """on-demand | spot"""
    user_data: pulumi.Input[str]
    ssh_key: access.NodeKey | None
    tags: dict[str, str]
    hostname_prefix: str
    """The VMs' host names: the prefix and the scale set's instance number in base 36 (gpu000000, gpu000001)."""
    names: Any
    """(*parts) -> the resource name Azure shows."""


class GpuNodePool(pulumi.ComponentResource):
    """The pool's scale set, running as the pool's identity (made before it: the boot script names it)."""

    scale_set_name: pulumi.Output[str]
    scale_set_id: pulumi.Output[str]
    """Unknown until the scale set exists (a preview never has it): what its VMs' addresses wait for."""

    def __init__(self, name: str, args: GpuNodePoolArgs, identity: azure.managedidentity.UserAssignedIdentity,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(NODE_POOL, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spot = args.capacity == "spot"
        scale_set = azure.compute.VirtualMachineScaleSet(
            name, vm_scale_set_name=args.names(), resource_group_name=args.resource_group, location=args.location,
            sku={"name": args.vm_size, "tier": "Standard", "capacity": args.count},
            orchestration_mode="Uniform", single_placement_group=True, platform_fault_domain_count=1,
            overprovision=False, upgrade_policy={"mode": "Manual"},
            zones=[args.zone] if args.zone else None,
            identity={"type": "UserAssigned", "user_assigned_identities": [identity.id]},
            spot_restore_policy={"enabled": True, "restore_timeout": SPOT_RESTORE_TIMEOUT} if spot else None,
            virtual_machine_profile={
                "priority": PRIORITY[args.capacity],
                **({"eviction_policy": SPOT_EVICTION, "billing_profile": {"max_price": SPOT_MAX_PRICE}}
                   if spot else {}),
                "os_profile": {"computer_name_prefix": args.hostname_prefix,
                               "admin_username": ADMIN_USER,
                               "custom_data": pulumi.Output.from_input(args.user_data).apply(custom_data),
                               "linux_configuration": linux_login(args.ssh_key)},
                "storage_profile": {
                    "image_reference": image_reference(args.image),
                    "os_disk": os_disk(args.os_disk_gib)},
                **host_security(args.vm_size),
                "network_profile": {"network_interface_configurations": [{
                    "name": "eth0", "primary": True, "enable_accelerated_networking": True,
                    "ip_configurations": [{"name": "ipv4", "primary": True, "subnet": {"id": args.subnet_id},
                                           "application_security_groups": [{"id": args.cluster_group_id}]}]}]},
                **({} if args.ssh_key else {"extension_profile": {"extensions": [ENTRA_LOGIN]}}),
            },
            tags={**args.tags, **host_security_tags(args.vm_size)},
            # customData reaches a VM only when it is created: the scale set's model may change, its running VMs
            # keep the script they booted until the user rolls them (`goldenenv up --roll-nodes`, which reimages)
            opts=child)
        self.scale_set_name = scale_set.name
        self.scale_set_id = scale_set.id
        self.register_outputs({"scale_set_name": self.scale_set_name})
