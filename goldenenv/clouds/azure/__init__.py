"""Azure: ND InfiniBand clusters in virtual machine scale sets, Blob + Azure Managed Lustre, tags, and a budget whose
function deallocates the stack's VMs.

Each pool is one scale set in a single placement group, which is what puts its VMs in one InfiniBand fabric (Azure
wires it; nothing is declared for it): nodes.py. The Ubuntu HPC image carries the driver, DOCA/OFED, NCCL and the
ND topology file; the golden container gets the host's /etc/nccl.conf and /opt/microsoft (goldenenv/fabrics/ib).
Two resource groups: the compute group (network, nodes, head, Key Vault, Lustre, the budget's function), deleted by
destroy, and the data group (the storage account and the container registry), kept by destroy and adopted by the
next up (storage.py). Outside Pulumi, the cloud's lifecycle hooks: before_up (find the retained stores and a soft-
deleted vault), before_destroy (export Managed Lustre to Blob and wait), purge (the storage account, by name).

The subscription is the provider's own (`azure-native:subscriptionId` in the stack file, ARM_SUBSCRIPTION_ID, or the
Azure CLI's); the program reads it, and the tenant, from getClientConfig.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.access import head_key, key_type_problems
from goldenenv.clouds.azure import nodes as azure_nodes
from goldenenv.clouds.azure.readiness import USER_DATA
from goldenenv.clouds.azure.basics import (
    CLOUD, REGISTRY_REPOSITORY, ZONE, _subscription_from_env, compute_group, fabric_of, registry_name,
)
from goldenenv.clouds.azure.parts import GpuCluster
from goldenenv.clouds.azure.naming import mock_guid
from goldenenv.clouds.azure.network import subnet_ranges
from goldenenv.clouds.azure.nodes import MAX_PLACEMENT_GROUP
from goldenenv.clouds.base import (
    BuildContext, Capability, HostImageForm, PulumiCloud, host_image_problems, key_words, mock_address,
    sold_problems, zone_problems,
)
from goldenenv.spec import Capacity, ClusterSpec, Problem, pool_key

REGION = re.compile(r"^[a-z]+[a-z0-9]*$")
"""ARM location names: eastus, eastus2, westus3, swedencentral."""
IMAGE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*:){3}\d+(\.\d+)*$"
                   r"|^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/galleries/[^/]+"
                   r"/images/[^/]+/versions/\d+(\.\d+)*$")
HOST_IMAGE_FORM = HostImageForm(IMAGE, "<publisher>:<offer>:<sku>:<version>",
                                "is not a pinned Azure image: write publisher:offer:sku:version with a version "
                                "number (never latest), or a gallery image version's id",
                                "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/"
                                "Microsoft.Compute/galleries/goldenenv/images/ubuntu-gpu/versions/1.0.0")
CURRENCY = "USD"
ENTRA_LOGIN_USER = ("az", "account", "show", "--query", "user.name", "--output", "tsv")
"""The caller's Microsoft Entra ID login: the signed-in user's UPN (alice@contoso.com), the name `az ssh vm` logs in
as."""
ENTRA_LOGIN_HOW = ("Microsoft Entra ID as your own UPN: `az ssh vm`, or for goldenenv's ssh an OpenSSH certificate "
                   "from `az ssh cert --public-key-file ~/.ssh/id_rsa.pub --file ~/.ssh/id_rsa-aadcert.pub` (the "
                   "CertificateFile of the ssh config); "
                   "Docker needs sudo, which the Virtual Machine Administrator Login role grants (Virtual Machine "
                   "User Login does not); from network.adminCidrs or through Azure Bastion")
SSH_KEY_TYPES = ("ssh-rsa", "ssh-ed25519")
"""What Azure takes for a Linux VM's key (learn.microsoft.com: "SSH keys: RSA (2048 bits or more) and ED25519")."""
GET_CLIENT_CONFIG = "azure-native:authorization:getClientConfig"
PLACEHOLDER_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
PLACEHOLDER_TENANT = "11111111-1111-1111-1111-111111111111"
def _ib_rate(it: catalog.InstanceType) -> str:
    """The size's InfiniBand as NCCL uses it (catalog fabric_rates.csv: ports × rate), else its port count."""
    rate = catalog.fabric_rate(CLOUD, it.name)
    return rate.describe() if rate else f"{it.rdma_interfaces} ports"


class AzureCloud(PulumiCloud):
    name = CLOUD
    capabilities = frozenset({Capability.RDMA, Capability.SPOT, Capability.PARALLEL_FS, Capability.LOCAL_NVME,
                              Capability.BUDGET, Capability.HARD_STOP})
    registry_types = ("azure-native:containerregistry:",)
    key_props = {
        "azure-native:network:VirtualNetwork": ("addressSpace.addressPrefixes",),
        "azure-native:network:Subnet": ("addressPrefix", "defaultOutboundAccess"),
        "azure-native:compute:VirtualMachineScaleSet": (
            "sku.name", "sku.capacity", "singlePlacementGroup", "platformFaultDomainCount", "overprovision",
            "virtualMachineProfile.priority", "virtualMachineProfile.storageProfile.imageReference.version"),
        "azure-native:compute:VirtualMachine": ("hardwareProfile.vmSize",),
        "azure-native:storage:StorageAccount": ("accountName", "allowBlobPublicAccess", "isHnsEnabled"),
        "azure-native:storagecache:AmlFilesystem": ("sku.name", "storageCapacityTiB"),
        "azure-native:consumption:Budget": ("amount", "timeGrain"),
        "azure-native:keyvault:Vault": ("vaultName",),
    }
    data_bearing = {"VirtualMachineScaleSet": "OS disks and local NVMe scratch erased",
                    "AmlFilesystem": "after its export to Blob"}
    store_kinds = ("StorageAccount", "BlobContainer", "Registry", "ResourceGroup")
    placeholder_account = PLACEHOLDER_SUBSCRIPTION
    ssh_user = azure_nodes.ADMIN_USER
    """The administrator user, which takes nodes.sshPublicKey."""

    def file_system_client(self, spec: ClusterSpec) -> str | None:
        """Azure Managed Lustre's client (the amlfs Lustre client modules) when the stack has Managed Lustre."""
        return "amlfs-lustre" if spec.storage.parallel_fs.enabled else None

    def node_login(self, spec: ClusterSpec, pool: Any | None) -> Any:
        """A pool with nodes.sshPublicKey: the administrator user (passwordless sudo). Without one (the head: when no
        pool has a key): Microsoft Entra ID, where the login is the caller's UPN and sudo, which Docker needs, comes
        with the Virtual Machine Administrator Login role only."""
        from goldenenv.clouds.base import DockerReach, NodeLogin

        keyed = pool.ssh_key is not None if pool is not None else head_key(spec) is not None
        if keyed:
            return NodeLogin(self.ssh_user, DockerReach.SUDO, f"ssh as {self.ssh_user} with nodes.sshPublicKey")
        return NodeLogin(None, DockerReach.SUDO, ENTRA_LOGIN_HOW, caller=ENTRA_LOGIN_USER,
                         caller_setup="run `az login` (Azure CLI: "
                         "https://learn.microsoft.com/cli/azure/install-azure-cli)")

    head_instance_type = "Standard_D2s_v5"
    """A 2-vCPU, 8-GiB x86 general purpose size (catalog head_types.csv)."""
    user_data_limit = USER_DATA
    host_image_form = HOST_IMAGE_FORM

    def check(self, spec: ClusterSpec) -> list[Problem]:
        from goldenenv.clouds.azure import storage, tags

        problems = []
        if not REGION.fullmatch(spec.region):
            problems.append(Problem("goldenenv:region", f"'{spec.region}' is not an Azure region name (e.g. eastus, "
                                    "westus3, swedencentral)"))
        written = [Problem(key, f"'{zone}' is not an Azure zone as goldenenv writes it: <region>-<n>, e.g. "
                           f"{spec.region}-1 (Azure's logical zone 1)")
                   for key, zone in [("goldenenv:zone", spec.zone), *(("goldenenv:zones", z) for z in spec.zones or ())]
                   if zone and not ZONE.fullmatch(zone)]
        problems += written or zone_problems(CLOUD, spec)
        if spec.zones:
            problems.append(Problem("goldenenv:zones", "azure stacks build in one zone (a scale set's placement "
                                    "group and Managed Lustre are zonal): set goldenenv:zone instead"))
        if spec.budget and spec.budget.currency != CURRENCY:
            problems.append(Problem("goldenenv:budget.currency", f"the catalog prices Azure in {CURRENCY}; a "
                                    f"{spec.budget.currency} budget cannot be compared with the stack's cost: set "
                                    f"currency: {CURRENCY}"))
        from goldenenv.clouds import tagrules

        problems += tagrules.problems(tags.RULE, spec)
        problems += [Problem("goldenenv:tags", p) for p in tags.problems(spec.stack_tags, each_tag=False)]
        problems += key_type_problems(spec, SSH_KEY_TYPES, "Azure (Linux VMs take RSA and Ed25519 keys)")
        for i, pool in enumerate(spec.nodes):
            at = pool_key(i, len(spec.nodes))
            if pool.count > MAX_PLACEMENT_GROUP:
                problems.append(Problem(f"{at}.count", f"{pool.count} nodes do not fit one scale set's single "
                                        f"placement group, which holds at most {MAX_PLACEMENT_GROUP} VMs and is "
                                        "what puts them in one InfiniBand fabric; use at most "
                                        f"{MAX_PLACEMENT_GROUP}, or split the nodes into pools (each its own "
                                        "fabric)"))
            it = catalog.instance_types(CLOUD).get(pool.instance_type)
            if it is None:
                continue
            problems += host_image_problems(CLOUD, spec, pool, f"{at}.hostImage", HOST_IMAGE_FORM)
            problems += sold_problems(CLOUD, spec, it.name, spec.zone)
        problems += storage.spec_problems(spec)
        if spec.budget:
            from goldenenv.clouds.azure import budget

            problems += budget.problems(spec.budget)
        if not problems:
            fs = spec.storage.parallel_fs
            try:
                subnet_ranges(spec.network.cidr, storage.amlfs_subnet_prefix(fs.size_gib) if fs.enabled else None)
            except ValueError as e:
                problems.append(Problem("goldenenv:network.cidr", str(e).removeprefix("goldenenv:network.cidr ")))
        return problems

    def offline_lookup(self, spec: ClusterSpec) -> Any:
        from goldenenv.clouds.azure import storage

        return storage.OfflineLookup()

    def plan_mock(self, args: Any) -> tuple[str | None, dict[str, Any]] | None:
        """What ARM computes for a new resource (ids, identities' principal and client ids, addresses) as
        stand-ins; the storage and budget components' own first."""
        from goldenenv.clouds.azure import budget, storage

        for component in (storage, budget):
            found = component.plan_mock(args)
            if found is not None:
                return found
        inputs = args.inputs
        group = inputs.get("resourceGroupName")
        kind = args.typ.rsplit(":", 1)[-1]
        name_input = {"VirtualNetwork": "virtualNetworkName", "NetworkSecurityGroup": "networkSecurityGroupName",
                      "PublicIPAddress": "publicIpAddressName", "NatGateway": "natGatewayName",
                      "NetworkInterface": "networkInterfaceName", "UserAssignedIdentity": "resourceName",
                      "ApplicationSecurityGroup": "applicationSecurityGroupName",
                      "VirtualMachineScaleSet": "vmScaleSetName", "VirtualMachine": "vmName",
                      "Vault": "vaultName", "Registry": "registryName", "Subnet": "subnetName",
                      "VirtualMachineExtension": "vmExtensionName"}
        provider = {"VirtualNetwork": "Microsoft.Network/virtualNetworks",
                    "NetworkSecurityGroup": "Microsoft.Network/networkSecurityGroups",
                    "PublicIPAddress": "Microsoft.Network/publicIPAddresses",
                    "NatGateway": "Microsoft.Network/natGateways",
                    "NetworkInterface": "Microsoft.Network/networkInterfaces",
                    "ApplicationSecurityGroup": "Microsoft.Network/applicationSecurityGroups",
                    "UserAssignedIdentity": "Microsoft.ManagedIdentity/userAssignedIdentities",
                    "VirtualMachineScaleSet": "Microsoft.Compute/virtualMachineScaleSets",
                    "VirtualMachine": "Microsoft.Compute/virtualMachines",
                    "Vault": "Microsoft.KeyVault/vaults", "Registry": "Microsoft.ContainerRegistry/registries"}
        sub = f"/subscriptions/{PLACEHOLDER_SUBSCRIPTION}"
        if args.typ == "azure-native:resources:ResourceGroup":
            rg = inputs.get("resourceGroupName") or args.name
            return f"{sub}/resourceGroups/{rg}", {"name": rg}
        if args.typ == "azure-native:authorization:RoleAssignment":
            name = inputs.get("roleAssignmentName") or args.name
            return f"{inputs.get('scope')}/providers/Microsoft.Authorization/roleAssignments/{name}", {"name": name}
        if not args.typ.startswith("azure-native:") or kind not in name_input:
            return None
        name = inputs.get(name_input[kind]) or args.name
        if kind == "Subnet":
            vnet = inputs.get("virtualNetworkName")
            return (f"{sub}/resourceGroups/{group}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{name}",
                    {"name": name})
        if kind == "VirtualMachineExtension":
            return (f"{sub}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{inputs.get('vmName')}"
                    f"/extensions/{name}", {"name": name})
        resource_id = f"{sub}/resourceGroups/{group}/providers/{provider[kind]}/{name}"
        outputs: dict[str, Any] = {"name": name}
        if kind == "UserAssignedIdentity":
            outputs |= {"principalId": mock_guid(resource_id, "principal"),
                        "clientId": mock_guid(resource_id, "client"), "tenantId": PLACEHOLDER_TENANT}
        if kind == "NetworkInterface":
            outputs["ipConfigurations"] = [{**c, "privateIPAddress": mock_address(args.name)}
                                           for c in inputs.get("ipConfigurations") or []]
        if kind == "Vault":
            outputs["properties"] = {**(inputs.get("properties") or {}),
                                     "vaultUri": f"https://{name}.vault.azure.net/"}
        if kind == "Registry":
            outputs["loginServer"] = f"{name}.azurecr.io"
        if kind in ("VirtualMachineScaleSet", "VirtualMachine") and inputs.get("identity"):
            # ARM takes the identities as a list of ids and answers with a map of id -> its ids
            identity = inputs["identity"]
            outputs["identity"] = {**identity, "userAssignedIdentities": {
                i: {} for i in identity.get("userAssignedIdentities") or []}}
        return resource_id, outputs

    def plan_call(self, args: Any) -> dict[str, Any] | None:
        """getClientConfig: a placeholder subscription and tenant, never a live answer."""
        if args.token == GET_CLIENT_CONFIG:
            return {"subscriptionId": PLACEHOLDER_SUBSCRIPTION, "tenantId": PLACEHOLDER_TENANT,
                    "clientId": PLACEHOLDER_SUBSCRIPTION, "objectId": PLACEHOLDER_SUBSCRIPTION}
        return None

    def plan_notes(self, spec: ClusterSpec, costs: list) -> list[str]:
        notes = []
        for pool in spec.nodes:
            it = catalog.instance_type(CLOUD, pool.instance_type)
            if fabric_of(pool, it) == "ib":
                notes.append(f"{pool.name}: {pool.count} x {it.name} in one scale set with a single placement "
                             f"group: Azure wires their InfiniBand ports ({_ib_rate(it)}) each into one fabric "
                             f"(at most {MAX_PLACEMENT_GROUP} VMs); the size needs its GPU family's vCPU quota in "
                             f"{spec.region} ({it.vcpus * pool.count} vCPUs), and an on-demand request can fail for "
                             "capacity (AllocationFailed, ZonalAllocationFailed)")
            if pool.capacity is Capacity.SPOT:
                notes.append(f"{pool.name}: spot VMs are deallocated when Azure evicts them (Scheduled Events "
                             "Preempt, at least 30 s notice): their OS disks stay and bill, their local NVMe scratch "
                             "does not; keep checkpoints in Blob or on Lustre. Azure's Try & restore starts an "
                             f"evicted VM again within {azure_nodes.SPOT_RESTORE_TIMEOUT[2:].lower()} when capacity "
                             "returns; goldenenv up starts any still deallocated")
            if pool.ssh_key is None:
                notes.append(f"{pool.name}: no sshPublicKey: log in with Microsoft Entra ID (`az ssh vm`, or ssh "
                             "with `az ssh cert`'s certificate) as your own UPN, which needs the Virtual Machine "
                             "Administrator Login role on the VMs: goldenenv reaches Docker through sudo, which "
                             "Virtual Machine User Login does not give; the administrator key ARM requires is one "
                             "nobody holds")
        if spec.budget:
            notes.append("Cost Management budgets are evaluated a few times a day and lag usage by hours: the "
                         "stack's function deallocates its VMs when the budget's action group calls it at 100 %, and "
                         "its timer repeats the check every 15 minutes until the month ends or up raises the limit; "
                         "disks, Lustre, Blob and the registry keep billing until destroy. The budget and the "
                         "function's custom roles are created at subscription scope: the caller of up needs Cost "
                         "Management Contributor and roleDefinitions/roleAssignments write there")
        if spec.network.egress == "endpoints":
            notes.append("network.egress endpoints: no NAT gateway; nodes reach Blob, the registry and Key Vault by "
                         "service endpoints and nothing on the internet"
                         + ("; Managed Lustre's prerequisites ask outbound access to Azure's services (AzureCloud), "
                            "which its subnet then lacks: its creation may fail (unverified)"
                            if spec.storage.parallel_fs.enabled else ""))
        return notes + [
            "The nodes have no public IP: reach them at their private IPs from network.adminCidrs (a VPN or a peered "
            "network), or through Azure Bastion",
        ]

    def destroy_steps(self, spec: ClusterSpec, outputs: dict[str, Any]) -> list[str]:
        if not spec.storage.parallel_fs.enabled:
            return []
        container = outputs.get("blobContainer") or "<container>"
        return [f"export Managed Lustre to Blob container {container} (archive) and wait; a failed export stops "
                "destroy before anything is deleted (--skip-export destroys without it, losing files not yet "
                "exported)"]

    def readiness(self, resources: list, required_tags: dict[str, str]) -> list:
        from goldenenv.clouds.azure import readiness

        return readiness.findings(resources, required_tags)

    def describe(self, resource: Any) -> list[str]:
        return key_words(resource, self.key_props)

    def preflight(self, spec: ClusterSpec) -> None:
        """Refuse, saying what to set, when the caller has no Azure credentials: the Azure CLI's login, or a service
        principal's (ARM_CLIENT_ID with a secret, certificate or OIDC token)."""
        import os
        import shutil

        if os.environ.get("ARM_CLIENT_ID") or os.environ.get("ARM_USE_MSI") or shutil.which("az"):
            return
        raise RuntimeError("no Azure credentials: run `az login` (and `az account set --subscription ID`), or set "
                           "ARM_CLIENT_ID, ARM_CLIENT_SECRET, ARM_TENANT_ID and ARM_SUBSCRIPTION_ID for a service "
                           "principal")

    def before_up(self, spec: ClusterSpec, log: Callable[[str], None], lookup: Any = None,
                  nodes: Any = None) -> Any:
        """Find the retained stores to adopt, and start the stack's deallocated VMs (an evicted spot VM that Try &
        restore did not bring back, a VM the budget's function deallocated): `nodes` answers, the live ones when
        no lookup is given."""
        from goldenenv.clouds.azure import storage
        from goldenenv.clouds.base import start_stopped

        live = lookup is None
        lookup = lookup or storage.LiveLookup(_subscription_from_env())
        stores = storage.RetainedStores.find(spec, lookup)
        if stores.adopt_account:
            log(f"adopting retained storage account {stores.account} (datasets and checkpoints of an earlier up)")
        start_stopped(nodes if nodes is not None or not live else self.stopped_nodes(spec), log)
        return stores

    def spot_return(self, spec: ClusterSpec, pool: Any) -> Any:
        """Azure restores an evicted VM itself while capacity returns within the restore timeout (the scale set's
        spotRestorePolicy); past it the VM stays deallocated, in place, and `up` starts it."""
        from goldenenv.clouds.base import SpotBack, SpotReturn

        return SpotReturn((SpotBack.CLOUD, SpotBack.UP_STARTS),
                          (azure_nodes.SCALE_SET, "spotRestorePolicy.enabled", True),
                          f"an evicted VM is deallocated in place; Azure's Try & restore starts it again within "
                          f"{azure_nodes.SPOT_RESTORE_TIMEOUT[2:].lower()} when capacity returns, else goldenenv up "
                          "starts it")

    def stopped_nodes(self, spec: ClusterSpec) -> Any:
        from goldenenv.clouds.azure.stopped import LiveStoppedNodes

        return LiveStoppedNodes(_subscription_from_env(), compute_group(spec.tags.project, spec.stack))

    def before_destroy(self, spec: ClusterSpec, outputs: dict[str, Any], skip_export: bool,
                       log: Callable[[str], None], token: Callable[[], str] | None = None) -> None:
        from goldenenv.clouds.azure import storage

        fs = outputs.get("lustreFilesystem")
        if not fs:
            return
        if skip_export:
            log(f"not exporting {fs} (--skip-export): files written on Lustre and not yet exported to Blob are lost")
            return
        storage.archive(outputs.get("subscriptionId"), outputs.get("resourceGroup"), fs, log, token_fn=token)

    def purge(self, spec: ClusterSpec, outputs: dict[str, Any], log: Callable[[str], None]) -> list[str]:
        from goldenenv.clouds.azure import storage

        account = outputs.get("storageAccount")
        if not account:
            return []
        storage.purge(outputs.get("subscriptionId"), outputs.get("dataResourceGroup"), account, log)
        return [account]

    def registry_url(self, spec: ClusterSpec) -> str:
        """`<registry>.azurecr.io/goldenenv`: the stack's registry and the repository nodes pull from."""
        name = registry_name(spec.tags.project, spec.stack, _subscription_from_env())
        return f"{name}.azurecr.io/{REGISTRY_REPOSITORY}"

    def registry_auth(self, spec: ClusterSpec, registry: str, run: Callable[..., Any] | None = None) -> dict:
        """Docker credentials for the stack's registry from the caller's Azure CLI login (`az acr login
        --expose-token`: an ACR token for the fixed user ACR documents)."""
        import json
        import subprocess

        server = registry.split("/", 1)[0]
        done = (run or subprocess.run)(["az", "acr", "login", "--name", server.split(".", 1)[0], "--expose-token",
                                        "--output", "json"], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"az acr login --name {server} failed: {done.stderr.strip()[:300]}")
        token = json.loads(done.stdout)["accessToken"]
        return {"username": "00000000-0000-0000-0000-000000000000", "password": token, "registry": server}

    def build(self, spec: ClusterSpec, context: BuildContext | None = None) -> dict[str, Any]:
        return GpuCluster(spec.stack, spec, context or BuildContext()).outputs
