"""The Slurm head on Azure: the munge key's vault, and a small on-demand VM running slurmctld.

The munge key lives in a Key Vault of the stack's own, with the RBAC permission model (no access policies), soft
delete on (Azure's default, which cannot be turned off) and purge protection off, so `destroy` leaves a vault that
the next `up` of the same stack recovers (create mode `recover`, when before_up finds it soft-deleted) instead of
failing on the name. The program creates no secret: the head's first boot writes 1024 random bytes as secret
`munge-key` (templates/node/munge-key-azure.sh.j2) with its identity, which holds Key Vault Secrets Officer on this
vault only; the nodes' identities hold Key Vault Secrets User on it. The key is in no input, state or output. The
vault takes requests only from the compute subnet (its network ACLs), over its service endpoint.

The head is private (no public IP, the compute subnet), boots from the first pool's host image (which carries Docker
and the NVIDIA stack, unused here) and takes its boot script from customData, which Azure reads at creation only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure

from goldenenv.clouds.azure.nodes import (
    ADMIN_USER, ENTRA_LOGIN, custom_data, host_security, host_security_tags, image_reference, linux_login, os_disk,
)
from goldenenv.clouds import access
from goldenenv.nodeboot import MungeKey

HEAD_COMPONENT = "goldenenv:azure:SlurmHead"
VAULT_COMPONENT = "goldenenv:azure:MungeVault"
SECRET = "munge-key"
KEY_VAULT_API = "7.4"
"""Key Vault's data-plane REST version the munge script calls (GET/PUT /secrets/{name}?api-version=7.4)."""
SOFT_DELETE_DAYS = 7
"""The shortest retention Key Vault takes (7 to 90 days): a destroyed stack's vault is gone for good a week later."""


def munge_key(vault_uri: str, client_id: str) -> MungeKey:
    """The munge key adapter: the stack's vault, read (and on the head written) over Key Vault's REST API with the
    host's user-assigned identity's token from the instance metadata service."""
    return MungeKey("munge-key-azure.sh", {"vault_url": vault_uri.rstrip("/"), "secret": SECRET,
                                           "client_id": client_id, "api_version": KEY_VAULT_API})


@dataclass(frozen=True, kw_only=True)
class MungeVaultArgs:
    resource_group: pulumi.Input[str]
    location: str
    vault_name: str
    tenant_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    recover: bool
    """A soft-deleted vault of this name exists (an earlier up of this stack): recover it rather than create."""
    tags: dict[str, str]


class MungeVault(pulumi.ComponentResource):
    vault_id: pulumi.Output[str]
    vault_uri: pulumi.Output[str]

    def __init__(self, name: str, args: MungeVaultArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(VAULT_COMPONENT, name, None, opts)
        vault = azure.keyvault.Vault(
            f"{name}-vault", vault_name=args.vault_name, resource_group_name=args.resource_group,
            location=args.location, tags=args.tags,
            properties={
                "tenant_id": args.tenant_id, "sku": {"family": "A", "name": "standard"},
                "enable_rbac_authorization": True, "enable_soft_delete": True,
                "soft_delete_retention_in_days": SOFT_DELETE_DAYS, "public_network_access": "Enabled",
                "network_acls": {"default_action": "Deny", "bypass": "None",
                                 "virtual_network_rules": [{"id": args.subnet_id}]},
                **({"create_mode": "recover"} if args.recover else {}),
            },
            opts=pulumi.ResourceOptions(parent=self))
        self.vault_id = vault.id
        self.vault_uri = vault.properties.vault_uri
        self.register_outputs({"vault_id": self.vault_id, "vault_uri": self.vault_uri})


@dataclass(frozen=True, kw_only=True)
class SlurmHeadArgs:
    resource_group: pulumi.Input[str]
    location: str
    zone: str | None
    vm_size: str
    image: str
    os_disk_gib: int
    subnet_id: pulumi.Input[str]
    cluster_group_id: pulumi.Input[str]
    user_data: pulumi.Input[str]
    """The cloud-config; its munge key values need the identity's client id (`identity_client_id` first)."""
    ssh_key: access.NodeKey | None
    tags: dict[str, str]
    names: Any


class SlurmHead(pulumi.ComponentResource):
    """The head's identity (made first: its boot script names it), NIC and VM."""

    private_ip: pulumi.Output[str]
    vm_name: pulumi.Output[str]
    principal_id: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, identity: azure.managedidentity.UserAssignedIdentity,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(HEAD_COMPONENT, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.principal_id = identity.principal_id
        nic = azure.network.NetworkInterface(
            f"{name}-nic", network_interface_name=args.names("nic"), resource_group_name=args.resource_group,
            location=args.location, enable_accelerated_networking=True, tags=args.tags,
            ip_configurations=[{"name": "ipv4", "primary": True, "private_ip_allocation_method": "Dynamic",
                                "subnet": {"id": args.subnet_id},
                                "application_security_groups": [{"id": args.cluster_group_id}]}], opts=child)
        vm = azure.compute.VirtualMachine(
            name, vm_name=args.names(), resource_group_name=args.resource_group, location=args.location,
            zones=[args.zone] if args.zone else None,
            hardware_profile={"vm_size": args.vm_size},
            identity={"type": "UserAssigned", "user_assigned_identities": [identity.id]},
            os_profile={"computer_name": "head", "admin_username": ADMIN_USER,
                        "custom_data": pulumi.Output.from_input(args.user_data).apply(custom_data),
                        "linux_configuration": linux_login(args.ssh_key)},
            storage_profile={"image_reference": image_reference(args.image),
                             "os_disk": {**os_disk(args.os_disk_gib), "delete_option": "Delete"}},
            network_profile={"network_interfaces": [{"id": nic.id, "primary": True}]},
            **host_security(args.vm_size),
            tags={**args.tags, **host_security_tags(args.vm_size)},
            # customData is read at creation only; Azure refuses to change it on a VM (a new script replaces it)
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["osProfile.customData"])))
        if args.ssh_key is None:
            azure.compute.VirtualMachineExtension(
                f"{name}-entra-login", vm_name=vm.name, resource_group_name=args.resource_group,
                location=args.location, vm_extension_name=ENTRA_LOGIN["name"], publisher=ENTRA_LOGIN["publisher"],
                type=ENTRA_LOGIN["type"], type_handler_version=ENTRA_LOGIN["type_handler_version"],
                auto_upgrade_minor_version=True, tags=args.tags, opts=child)
        self.private_ip = nic.ip_configurations.apply(lambda configs: configs[0].private_ip_address)
        self.vm_name = vm.name
        self.register_outputs({"private_ip": self.private_ip, "vm_name": self.vm_name})
