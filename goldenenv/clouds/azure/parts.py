"""Azure's cluster parts: what the cluster recipe (clouds/recipe.py) builds an Azure stack from, and the stack's
GpuCluster component (the recipe run with these parts). The Cloud class (the package) builds a stack with it.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as azure

from goldenenv import catalog, slurm
from goldenenv.images import host as hostlayer
from goldenenv.clouds import recipe
from goldenenv.clouds.access import head_key, node_key
from goldenenv.clouds.azure import roles
from goldenenv.clouds.azure.basics import (
    CLOUD, REGISTRY_REPOSITORY, _subscription_from_env, compute_group, fabric_of, host_image, logical_zone,
    registry_name, vault_name,
)
from goldenenv.clouds.azure.naming import resource_name
from goldenenv.clouds.azure.head import MungeVault, MungeVaultArgs, SlurmHead, SlurmHeadArgs, munge_key
from goldenenv.clouds.azure.network import Network, NetworkArgs
from goldenenv.clouds.azure.nodes import GpuNodePool, GpuNodePoolArgs
from goldenenv.clouds.base import HeadShape, mock_address


def _node_addresses(lookup: Any, scale_set_id: pulumi.Output[str], count: int, pool: str
                    ) -> pulumi.Output[list[str]]:
    """The scale set's VMs' private addresses: Azure assigns them (no Pulumi resource or function lists a Uniform
    scale set's NICs), so `up` asks ARM once the scale set exists (its id is unknown before, so a preview asks
    nothing); the offline plan writes placeholders."""
    if not hasattr(lookup, "scale_set_addresses"):
        return pulumi.Output.from_input([mock_address(f"{pool}-{i}") for i in range(count)])

    def ask(resource_id: str) -> list[str]:
        parts = resource_id.split("/")
        return lookup.scale_set_addresses(parts[parts.index("resourceGroups") + 1], parts[-1])

    return scale_set_id.apply(ask)


class AzureParts(recipe.Parts):
    """Azure's cluster parts: two resource groups (compute, deleted by destroy; data, kept), a virtual network,
    Blob with Azure Managed Lustre, a container registry, the munge key in Key Vault, the head VM and one scale set
    per pool (each host reads what it needs with its own managed identity), a budget whose function deallocates
    the stack's VMs."""

    cloud = recipe.CloudOf(CLOUD)
    registry_login = "azurecr"
    budget_output = "budgetFunction"
    vault: MungeVault | None = None

    def retained_stores(self) -> None:
        from goldenenv.clouds.azure import storage, tags as azure_tags

        spec = self.spec
        self.tags = azure_tags.tags(spec.stack_tags)
        self.lookup = self.context.lookup or storage.LiveLookup(_subscription_from_env())
        self.subscription = self.lookup.subscription_id()
        self.zone = logical_zone(spec)
        self.stores = storage.RetainedStores.find(spec, self.lookup)

    def names(self, *parts: str) -> str:
        return resource_name(self.spec.tags.project, self.spec.stack, *parts)

    def scope(self) -> None:
        spec, name = self.spec, self.name
        self.client = azure.authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(
            parent=self.parent))
        self.group = azure.resources.ResourceGroup(
            f"{name}-rg", resource_group_name=compute_group(spec.tags.project, spec.stack), location=spec.region,
            tags=self.tags, opts=self.child)
        self.data_group = azure.resources.ResourceGroup(
            f"{name}-data-rg", resource_group_name=self.stores.data_group, location=spec.region, tags=self.tags,
            opts=pulumi.ResourceOptions.merge(self.child, pulumi.ResourceOptions(
                retain_on_delete=True, import_=self.stores.adopt_group)))

    def network(self) -> None:
        from goldenenv.clouds.azure import storage

        spec, fs = self.spec, self.spec.storage.parallel_fs
        self.net = Network(f"{self.name}-network", NetworkArgs(
            resource_group=self.group.name, location=spec.region, cidr=spec.network.cidr,
            lustre_prefix=storage.amlfs_subnet_prefix(fs.size_gib) if fs.enabled else None,
            egress=spec.network.egress, admin_cidrs=[str(c) for c in spec.network.admin_cidrs], tags=self.tags,
            names=self.names, zone=self.zone), self.child)

    def data_store(self) -> recipe.DataStore:
        from goldenenv.clouds.azure import storage

        spec, fs, stores = self.spec, self.spec.storage.parallel_fs, self.stores
        data = self.data = storage.DataStore(f"{self.name}-data", storage.DataStoreArgs(
            data_group=self.data_group.name, compute_group=self.group.name, location=spec.region, zone=self.zone,
            account_name=stores.account, adopt_account=stores.adopt_account,
            noncurrent_version_days=spec.storage.bucket.noncurrent_version_days,
            parallel_fs=fs.enabled, fs_size_gib=fs.size_gib, fs_throughput_per_tib=fs.throughput_per_tib,
            fs_subnet_id=self.net.lustre_subnet_id, node_subnet_id=self.net.compute_subnet_id,
            checkpoint_prefix=fs.checkpoint_prefix, mount_point=fs.mount_point, tags=self.tags,
            subscription_id=self.subscription, hpc_cache_principal_id=stores.hpc_cache_principal_id,
            adopt_children=stores.adopt_children,
            allowed_ip_ranges=[str(c) for c in spec.network.admin_cidrs if c.version == 4]), self.child)
        return recipe.DataStore(data.mount, {
            "storageAccount": data.account_name,
            "blobContainer": data.container_name,
            "sharedFs": data.fs_name if fs.enabled else None,
            "lustreFilesystem": data.fs_name if fs.enabled else None,
        })

    def repository(self) -> recipe.Repository:
        spec, data_group, subscription = self.spec, self.stores.data_group, self.subscription
        registry_id = registry_name(spec.tags.project, spec.stack, subscription)
        found = self.lookup.registry(data_group, registry_id)
        self.registry = azure.containerregistry.Registry(
            f"{self.name}-registry", registry_name=registry_id, resource_group_name=self.data_group.name,
            location=spec.region, sku={"name": "Standard"}, admin_user_enabled=False, anonymous_pull_enabled=False,
            tags=self.tags, opts=pulumi.ResourceOptions.merge(self.child, pulumi.ResourceOptions(
                retain_on_delete=True,
                import_=(f"/subscriptions/{subscription}/resourceGroups/{data_group}/providers/"
                         f"Microsoft.ContainerRegistry/registries/{registry_id}") if found else None)))
        return recipe.Repository(self.registry.login_server.apply(
            lambda server: f"{server}/{REGISTRY_REPOSITORY}"))

    def secret_store(self) -> recipe.SecretStore:
        spec = self.spec
        vault_id = vault_name(spec.tags.project, spec.stack, self.subscription)
        vault = self.vault = MungeVault(f"{self.name}-munge", MungeVaultArgs(
            resource_group=self.group.name, location=spec.region, vault_name=vault_id,
            tenant_id=self.client.tenant_id, subnet_id=self.net.compute_subnet_id,
            recover=self.lookup.deleted_vault(vault_id), tags=self.tags), self.child)
        return recipe.SecretStore(lambda reader: pulumi.Output.all(vault_uri=vault.vault_uri, client_id=reader).apply(
            lambda at: munge_key(**at)))

    def _identity(self, host: str) -> Any:
        """The host's (or pool's) managed identity: what its boot reads the munge key, Blob and the registry as."""
        return azure.managedidentity.UserAssignedIdentity(
            f"{self.name}-{host}-identity", resource_name_=self.names(host, "identity"),
            resource_group_name=self.group.name, location=self.spec.region, tags=self.tags, opts=self.child)

    def _grants(self, host: str, principal: pulumi.Output[str], munge_role: str) -> None:
        """A host's reads: the munge key in the vault, the stack's Blob data, the golden image in the registry."""
        name, subscription = self.name, self.subscription
        if self.vault:
            roles.grant(f"{name}-{host}-munge", role=munge_role, scope=self.vault.vault_id,
                        principal_id=principal, subscription_id=subscription, opts=self.child)
        self.data.grant(f"{name}-{host}-blob", principal)
        roles.grant(f"{name}-{host}-pull", role="AcrPull", scope=self.registry.id, principal_id=principal,
                    subscription_id=subscription, opts=self.child)

    def head(self, shape: HeadShape, boot: recipe.Boot) -> recipe.Head:
        spec = self.spec
        identity = self._identity(slurm.HEAD_HOSTNAME)
        head = SlurmHead(f"{self.name}-{slurm.HEAD_HOSTNAME}", SlurmHeadArgs(
            resource_group=self.group.name, location=spec.region, zone=self.zone, vm_size=shape.instance_type,
            image=host_image(spec, spec.nodes[0], hostlayer.head_layer(spec)), os_disk_gib=shape.root_volume_gib,
            subnet_id=self.net.compute_subnet_id, cluster_group_id=self.net.cluster_group_id,
            user_data=boot.head(reader=identity.client_id),
            ssh_key=head_key(spec), tags=self.tags, names=lambda *parts: self.names(slurm.HEAD_HOSTNAME, *parts)),
            identity, self.child)
        self._grants(slurm.HEAD_HOSTNAME, identity.principal_id, "Key Vault Secrets Officer")
        return recipe.Head(head.private_ip, head.vm_name)

    def node_pool(self, pool: Any, boot: recipe.Boot) -> recipe.NodePool:
        spec = self.spec
        it = catalog.instance_type(CLOUD, pool.instance_type)
        identity = self._identity(pool.name)
        nodes = GpuNodePool(f"{self.name}-{pool.name}", GpuNodePoolArgs(
            resource_group=self.group.name, location=spec.region, zone=self.zone, vm_size=it.name, count=pool.count,
            image=host_image(spec, pool, hostlayer.layer(spec, pool)), os_disk_gib=pool.root_volume_gib,
            subnet_id=self.net.compute_subnet_id, cluster_group_id=self.net.cluster_group_id,
            capacity=pool.capacity.value,
            user_data=boot.node(pool.name, fabric_of(pool, it), it.local_nvme_count > 0, reader=identity.client_id),
            ssh_key=node_key(spec, pool), tags=self.tags, hostname_prefix=pool.name,
            names=lambda *parts: self.names(pool.name, *parts)), identity, self.child)
        self._grants(pool.name, identity.principal_id, "Key Vault Secrets User")
        return recipe.NodePool(pool, it, _node_addresses(self.lookup, nodes.scale_set_id, pool.count, pool.name),
                               None, nodes)

    def budget_guard(self, pools: list[recipe.NodePool]) -> recipe.BudgetGuard:
        """The budget and its stop function; the recipe asks only for a stack with a budget (budget_output)."""
        from goldenenv.clouds.azure.budget import BudgetStop, BudgetStopArgs

        spec = self.spec
        stop = BudgetStop(f"{self.name}-budget", BudgetStopArgs(
            project=spec.tags.project, stack=spec.stack, subscription_id=self.subscription,
            resource_group=self.group.name, location=spec.region, monthly_limit=spec.budget.monthly_limit,
            currency=spec.budget.currency, thresholds=spec.budget.alert_thresholds,
            forecast_thresholds=spec.budget.forecast_thresholds,
            emails=spec.budget.emails, hard_stop=spec.budget.hard_stop, tags=self.tags,
            ttl_hours=spec.lifecycle.ttl_hours, idle_minutes=spec.lifecycle.idle_minutes,
            node_vcpus=min(p.instance_type.vcpus for p in pools)), self.child)
        return recipe.BudgetGuard({self.budget_output: stop.function_name})

    def outputs(self, built: recipe.Built) -> dict[str, Any]:
        return {
            "subscriptionId": self.subscription,
            "resourceGroup": self.group.name,
            "dataResourceGroup": self.data_group.name,
            "zone": self.zone,
            "scaleSets": pulumi.Output.all(*[p.component.scale_set_name for p in built.pools]),
        }


class GpuCluster(recipe.Cluster):
    """Resource groups, network, data store, registry, vault, head, node pools and budget of one stack: the
    cluster recipe (clouds/recipe.py) with Azure's parts."""

    parts = AzureParts
