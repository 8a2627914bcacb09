"""Azure's guardrail facts: the pulumi-azure-native type tokens the generic rules of goldenenv.guardrails read, and
how to read them. Resources are in engine form (camelCase inputs: securityRules, sourceAddressPrefix,
publicIPAddressConfiguration, storageCapacityTiB), as pulumi-azure-native 3.x sends them.

- Tags: every taggable resource carries the stack's tags in `tags`, unchanged (tags.py). They are not inherited from
  the resource group (learn.microsoft.com tag-resources), and azure-native has no provider-level default tags (no
  tagsAll output), so each resource is judged by its own. Taggability comes from the SDK class signature
  (azure-native:compute:VirtualMachineScaleSet -> pulumi_azure_native.compute.VirtualMachineScaleSet takes `tags`).
- Network security groups decide who reaches a node. A group's inline securityRules and the standalone SecurityRule
  resources naming it (networkSecurityGroupName) are judged together; only Inbound Allow rules open anything, and
  an allow is judged as written (a Deny at a better priority is not subtracted, as on the other clouds). Sources are
  sourceAddressPrefix or sourceAddressPrefixes: "*", "Any" and the service tag "Internet" are the whole internet;
  "VirtualNetwork" and "AzureLoadBalancer" are the stack's own network and Azure's health probe, no address range
  (a rule from them is like a rule from the nodes' own group elsewhere: peerings would widen VirtualNetwork, and the
  stack plans none), so a group lets the cluster in with "VirtualNetwork", not with the VNet's CIDR, which the rules
  read as an address range (slurmctld-beyond-cluster);
  any other service tag (AzureCloud, Storage.EastUS, ...) is public space the rules cannot measure, so SSH counts it
  as the whole internet. Protocol "*" with ports is tcp and udp on those ports; with port "*" every protocol.
- A node is public through a public IP: a scale set's ipConfigurations[].publicIPAddressConfiguration (each VM gets
  one), a NetworkInterface's ipConfigurations[].publicIPAddress, a VM's inline publicIPAddressConfiguration, or any
  PublicIPAddress / PublicIPPrefix the plan attaches elsewhere than a NAT gateway (goldenenv's only public address is
  the NAT gateway's, for egress: network.py). An Azure subnet gives no public address by default (no
  mapPublicIpOnLaunch), so a VM whose network profile declares no public IP configuration says it takes none.
- Nothing to say for imdsv1-allowed: Azure's Instance Metadata Service answers only requests carrying the header
  `Metadata: true`, from inside the VM (traffic to it never leaves the host), and has no tokenless mode to switch
  off (learn.microsoft.com/azure/virtual-machines/instance-metadata-service).
- Nothing to say for unencrypted-storage or unencrypted-topic: Azure Storage encryption "is enabled for all new and
  existing storage accounts and cannot be disabled" (learn.microsoft.com storage-service-encryption), managed disks
  (OS disks of nodes and head) are encrypted at rest by default with platform-managed keys (learn.microsoft.com
  disk-encryption), and Managed Lustre encrypts at rest too. A VM's local NVMe temp disks are covered only by
  encryption at host, which no rule asks for (whether the ND sizes support it is unverified).
- Data stores: the storage account and its Blob containers hold datasets and checkpoints (retained, in the data
  resource group). A resource group is one too when a planned data store lives in it: deleting a group deletes
  everything in it, retained or not. A storage account holds no data only when its tags say so (goldenenv-holds:
  function-code, on the stop function's own account), never for being named by an app; nor does a resource group
  holding no data store.
  Managed Lustre is the fast working copy, exported to Blob before destroy (like FSx and GCP Managed Lustre): it is
  not retained, but it must be linked to a Blob container (hsm.settings.container), or destroy loses its data.
- A storage account is public when it allows anonymous blob access (allowBlobPublicAccess: unset leaves it to the
  API version's default, so it must say false), or when it takes connections from any internet address
  (publicNetworkAccess not Disabled and networkRuleSet.defaultAction not Deny: unset is open) while it holds data (a
  function app's own account, flagged so and reached by the Functions host over the internet, holds none), or when
  its ipRules together admit more than an admin allowance (0.0.0.0/1 + 128.0.0.0/1 is the whole internet); a Blob
  container is public with publicAccess Blob or Container.
- The budget is an Azure Cost Management budget (azure-native:consumption:Budget). Its hard stop is an action group
  (notifications[].contactGroups) whose receivers run the stop: an Azure Function (azureFunctionReceivers, whose
  function app must be in the plan), a webhook, an Automation runbook or a Logic App (Microsoft's budget scenario:
  learn.microsoft.com cost-management-budget-scenario; RESEARCH-3 2.6).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.clouds.azure import tags as azure_tags
from goldenenv.clouds.azure.roles import BUILT_IN
from goldenenv.clouds.azure import hardening, privilege
from goldenenv.guardrails import (
    BudgetWatch,
    Context,
    boot_text,
    Ingress,
    PlannedResource,
    ProviderFacts,
    _items,
    _label,
    _mapping,
    _port,
    _refers_to,
    describe_wide,
    holds_flag,
)
from goldenenv.clouds.azure import stop_chain

PROVIDER = "azure-native"
NSG = "azure-native:network:NetworkSecurityGroup"
SECURITY_RULE = "azure-native:network:SecurityRule"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
VIRTUAL_MACHINE = "azure-native:compute:VirtualMachine"
INSTANCES = (SCALE_SET, VIRTUAL_MACHINE)
NETWORK_INTERFACE = "azure-native:network:NetworkInterface"
PUBLIC_IP = "azure-native:network:PublicIPAddress"
PUBLIC_IP_PREFIX = "azure-native:network:PublicIPPrefix"
NAT_GATEWAY = "azure-native:network:NatGateway"
RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"
LUSTRE = "azure-native:storagecache:AmlFilesystem"
BUDGET = "azure-native:consumption:Budget"
ACTION_GROUPS = ("azure-native:monitor:ActionGroup", "azure-native:insights:ActionGroup")
WEB_APP = "azure-native:web:WebApp"
APP_SETTINGS = "azure-native:web:WebAppApplicationSettings"

WORLD_SOURCES = frozenset({"*", "any", "internet"})
"""NSG sources (lower case) meaning any address: the wildcard, the portal's "Any", the Internet service tag."""
NETWORK_SOURCES = frozenset({"virtualnetwork", "azureloadbalancer"})
"""Service tags that are no internet source: the VNet's own (and peered) space, Azure's health probe address."""
STOP_RECEIVERS = ("azureFunctionReceivers", "webhookReceivers", "automationRunbookReceivers", "logicAppReceivers")
"""Action group receivers that run something (the others only notify people)."""


# ---------------------------------------------------------------- ssh-open-to-world, ingress-open-to-world

def _port_ranges(rule: Mapping[str, Any]) -> list[tuple[int | None, int | None]]:
    """destinationPortRange(s) as (low, high); "*" is every port; unreadable text is skipped."""
    texts = [rule.get("destinationPortRange"), *_items(rule.get("destinationPortRanges"))]
    ranges = []
    for text in (str(t).strip() for t in texts if t is not None and str(t).strip()):
        if text == "*":
            ranges.append((0, 65535))
            continue
        low, _, high = text.partition("-")
        if _port(low) is not None:
            ranges.append((_port(low), _port(high or low)))
    return ranges


def _rule_sources(rule: Mapping[str, Any]) -> list[str]:
    """The rule's sources as the engine reads them: the world as 0.0.0.0/0; network-internal tags dropped."""
    found = []
    for source in [rule.get("sourceAddressPrefix"), *_items(rule.get("sourceAddressPrefixes"))]:
        if not isinstance(source, str) or not source.strip():
            continue
        text = source.strip()
        if text.lower() in WORLD_SOURCES:
            found.append("0.0.0.0/0")
        elif text.lower() not in NETWORK_SOURCES:
            found.append(text)
    return found


def rule_ingress(rule: Mapping[str, Any]) -> list[Ingress]:
    """What one security rule (inline or standalone, engine form) lets in from address sources."""
    if str(rule.get("direction") or "Inbound").strip().lower() != "inbound":
        return []
    if str(rule.get("access") or "Allow").strip().lower() != "allow":
        return []
    sources = _rule_sources(rule)
    protocol = str(rule.get("protocol") or "*").strip().lower()
    ranges = _port_ranges(rule)
    if protocol == "*":
        if not ranges or (0, 65535) in ranges:
            return [Ingress("all", None, None, s) for s in sources]
        return [Ingress(p, low, high, s) for p in ("tcp", "udp") for low, high in ranges for s in sources]
    if protocol in ("tcp", "udp"):
        return [Ingress(protocol, low, high, s) for low, high in ranges or [(0, 65535)] for s in sources]
    return [Ingress(protocol, None, None, s) for s in sources]


def ingress(resource: PlannedResource) -> list[Ingress]:
    if resource.type == NSG:
        return [p for rule in _items(resource.props.get("securityRules")) for p in rule_ingress(_mapping(rule))]
    if resource.type == SECURITY_RULE:
        return rule_ingress(resource.props)
    return []


# ---------------------------------------------------------------- public-ip-on-gpu-node, public-ip-on-head

def _network_profile(resource: PlannedResource) -> Mapping[str, Any]:
    if resource.type == SCALE_SET:
        return _mapping(_mapping(resource.props.get("virtualMachineProfile")).get("networkProfile"))
    return _mapping(resource.props.get("networkProfile"))


def _ip_configurations(resource: PlannedResource) -> list[tuple[str, Mapping[str, Any]]]:
    """("<nic>/<ip configuration>", config) of each inline NIC configuration of a scale set or VM, or of a NIC."""
    if resource.type == NETWORK_INTERFACE:
        return [(str(c.get("name") or f"#{i}"), c)
                for i, c in enumerate(map(_mapping, _items(resource.props.get("ipConfigurations"))))]
    found = []
    for i, nic in enumerate(map(_mapping, _items(_network_profile(resource).get("networkInterfaceConfigurations")))):
        for j, config in enumerate(map(_mapping, _items(nic.get("ipConfigurations")))):
            found.append((f"{nic.get('name') or f'#{i}'}/{config.get('name') or f'#{j}'}", config))
    return found


def _attached_to_nat(address: PlannedResource, ctx: Context) -> bool:
    prop = "publicIpAddresses" if address.type == PUBLIC_IP else "publicIpPrefixes"
    values = (address.id, address.outputs.get("id"), address.props.get("id"))
    return any(_refers_to(nat, prop, _mapping(ref).get("id"), address, values)
               for nat in ctx.of_type(NAT_GATEWAY) for ref in _items(nat.props.get(prop)))


def public_ip(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    label = _label(resource)
    if resource.type in INSTANCES:
        for where, config in _ip_configurations(resource):
            if config.get("publicIPAddressConfiguration") is not None:
                public = _mapping(config.get("publicIPAddressConfiguration"))
                version = str(public.get("publicIPAddressVersion") or "IPv4")
                yield (f"{label} ip configuration {where} has a publicIPAddressConfiguration, so every VM gets a "
                       f"public {version} address, reachable from the internet; drop it: the nodes egress through "
                       f"the NAT gateway and are reached over the VNet (SSH from network.adminCidrs, or Bastion).")
    elif resource.type == NETWORK_INTERFACE:
        for where, config in _ip_configurations(resource):
            if config.get("publicIPAddress") is not None:
                yield (f"{label} ip configuration {where} takes a public IP address, so the VM using this NIC is "
                       f"reachable from the internet; drop publicIPAddress and egress through the NAT gateway.")
    elif resource.type in (PUBLIC_IP, PUBLIC_IP_PREFIX) and not _attached_to_nat(resource, ctx):
        yield (f"{label} is a public address that no NAT gateway of the plan uses: attached to a NIC, a scale set "
               f"or a load balancer it makes a node reachable from the internet. The stack's only public address "
               f"is the NAT gateway's, for egress; attach it there (publicIpAddresses) or remove it.")


def says_private(resource: PlannedResource) -> bool:
    """A scale set or VM with a network profile and no public IP configuration in it: Azure gives no public address
    by default. A separate NetworkInterface it names is judged on its own (public-ip-on-gpu-node)."""
    profile = _network_profile(resource)
    declared = _items(profile.get("networkInterfaceConfigurations")) or _items(profile.get("networkInterfaces"))
    return bool(declared) and not any(c.get("publicIPAddressConfiguration") is not None
                                      for _, c in _ip_configurations(resource))


# ---------------------------------------------------------------- s3-public-access: Blob storage

def public_data(resource: PlannedResource, ctx: Context) -> Iterator[str]:
    props, label = resource.props, _label(resource)
    if resource.type == STORAGE_ACCOUNT:
        allow = props.get("allowBlobPublicAccess")
        if allow is not False:
            found = "true" if allow is True else f"{allow!r}" if allow is not None else "unset"
            unset = " (unset follows the API version's default)" if allow is None else ""
            yield (f"{label} leaves allowBlobPublicAccess {found}{unset}: a container with publicAccess Blob or "
                   f"Container would serve its data to anyone; set allowBlobPublicAccess false.")
        network = str(props.get("publicNetworkAccess") or "Enabled")
        action = str(_mapping(props.get("networkRuleSet")).get("defaultAction") or "Allow")
        if network.lower() == "enabled" and action.lower() == "allow" and not holds_no_data(resource, ctx):
            yield (f"{label} takes connections from any internet address (publicNetworkAccess {network}, "
                   f"networkRuleSet.defaultAction {action}; unset is open): anyone holding a key or SAS token "
                   f"reaches the data. Set networkRuleSet.defaultAction Deny and allow the compute subnet "
                   f"(virtualNetworkRules, over its Microsoft.Storage service endpoint) and network.adminCidrs "
                   f"(ipRules), or publicNetworkAccess Disabled.")
        rules = [_mapping(r) for r in _items(_mapping(props.get("networkRuleSet")).get("ipRules"))]
        allowed = [r.get("iPAddressOrRange") or r.get("ipAddressOrRange") for r in rules
                   if str(r.get("action") or "Allow").lower() == "allow"]
        wide = describe_wide([a if "/" in str(a) else f"{a}/32" for a in allowed if isinstance(a, str)])
        if network.lower() == "enabled" and wide:
            yield (f"{label} admits, through networkRuleSet.ipRules, addresses that {wide}: split ranges are "
                   f"summed as Azure applies them together; allow the admin CIDRs only (network.adminCidrs).")
    elif resource.type == BLOB_CONTAINER:
        access = str(props.get("publicAccess") or "None")
        if access.lower() in ("blob", "container"):
            what = "its blobs" if access.lower() == "blob" else "its blobs and their listing"
            yield (f"{label} sets publicAccess {access}: {what} can be read anonymously by anyone on the internet; "
                   f"set publicAccess None and grant access by role (Storage Blob Data Reader) to named "
                   f"identities.")


# ---------------------------------------------------------------- data-store-not-retained

def _names(resource: PlannedResource, *props: str) -> set[str]:
    """What references to a resource read as: its id, its Azure name (an explicit name input or the mock's name)."""
    values = (resource.id, resource.outputs.get("id"), resource.outputs.get("name"),
              *(resource.props.get(p) for p in props), *(resource.outputs.get(p) for p in props))
    return {v for v in values if isinstance(v, str) and v}


def _account_names(account: PlannedResource) -> set[str]:
    return {n.rsplit("/", 1)[-1] for n in _names(account, "accountName")}


def _account_of(container: PlannedResource, ctx: Context) -> PlannedResource | None:
    value = container.props.get("accountName")
    return next((a for a in ctx.of_type(STORAGE_ACCOUNT) if isinstance(value, str) and value in _names(
        a, "accountName")), None)


def _holds_data(resource: PlannedResource, ctx: Context) -> bool:
    return resource.type in (STORAGE_ACCOUNT, BLOB_CONTAINER) and not holds_no_data(resource, ctx)


def holds_no_data(resource: PlannedResource, ctx: Context) -> bool:
    """A storage account holds none of the user's data only when its tags say so (HOLDS_TAG: function-code on the
    stop function's account, written by budget.py), and then neither do its containers; being named by a function
    app's settings exempts nothing, since an app can be pointed at the data account. A resource group holds data
    only when a planned data store lives in it."""
    if resource.type == RESOURCE_GROUP:
        names = _names(resource, "resourceGroupName")
        return not any(_holds_data(r, ctx) and r.props.get("resourceGroupName") in names
                       for r in ctx.of_type(STORAGE_ACCOUNT, BLOB_CONTAINER))
    if resource.type == STORAGE_ACCOUNT:
        return holds_flag(resource.props.get("tags")) is not None
    if resource.type == BLOB_CONTAINER:
        account = _account_of(resource, ctx)
        return account is not None and holds_no_data(account, ctx)
    return False


def final_backup_gap(resource: PlannedResource, ctx: Context) -> str | None:
    """Managed Lustre takes no backup when deleted: unless it is linked to a Blob container, destroy loses its
    data (goldenenv exports it to its container first)."""
    if resource.type != LUSTRE:
        return None
    settings = _mapping(_mapping(resource.props.get("hsm")).get("settings"))
    if settings.get("container"):
        return None
    return ("link it to a retained Blob container (hsm.settings.container, with a loggingContainer in the same "
            "account) so its data can be exported there before destroy")


# ---------------------------------------------------------------- budget-not-planned

def _contact_groups(budget: PlannedResource) -> list[Any]:
    notes = _mapping(budget.props.get("notifications"))
    return [g for note in notes.values() for g in _items(_mapping(note).get("contactGroups"))]


def _runs(group: PlannedResource, ctx: Context) -> str | None:
    """Why an action group stops nothing, or None when one of its receivers runs something of the plan (a planned
    function app; a webhook, runbook or Logic App is taken at its word)."""
    receivers = {key: [_mapping(r) for r in _items(group.props.get(key))] for key in STOP_RECEIVERS}
    if not any(receivers.values()):
        return (f"routes its alert to {_label(group)}, which only notifies people (no function, webhook, runbook or "
                f"Logic App receiver), so nothing stops the nodes; add the stop function as an azureFunctionReceiver")
    functions = receivers["azureFunctionReceivers"]
    if functions and not any(receivers[k] for k in STOP_RECEIVERS[1:]):
        apps = [f.get("functionAppResourceId") for f in functions]
        planned = [_names(app) for app in ctx.of_type(WEB_APP)]
        if not any(a is None or any(a in names for names in planned) for a in apps):
            return (f"routes its alert to {_label(group)}, whose function app {apps[0]} is not in the plan: the hard "
                    f"stop's function is missing")
    return None


def budgets(ctx: Context) -> list[BudgetWatch]:
    """Each Cost Management budget; it stops the nodes when a notification names an action group
    (contactGroups), and that group, when planned, must run the stop."""
    watches = []
    groups = list(ctx.of_type(*ACTION_GROUPS))
    for budget in ctx.of_type(BUDGET):
        named = _contact_groups(budget)
        gap = None
        for value in named:
            if value is None:  # unknown until deployment (a policy-pack preview): taken at its word
                gap = None
                break
            group = next((g for g in groups if value in _names(g, "actionGroupName")), None)
            if group is None:
                gap = (f"routes its alert to {value}, which is no action group of the plan, so nothing of the "
                       f"stack stops the nodes; plan the action group and its stop function")
            else:
                gap = _runs(group, ctx)
            if gap is None:
                break
        watches.append(BudgetWatch(budget, stops=bool(named), gap=gap))
    return watches


# ---------------------------------------------------------------- pull-not-granted, bucket-service-not-granted

REGISTRY = "azure-native:containerregistry:Registry"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
PULL_ROLES = frozenset({BUILT_IN["AcrPull"], "8311e382-0749-4cb8-b61a-304f252e45ec",
                        "b24988ac-6180-42a0-ab88-20f7382dd24c", "8e3af657-a8ff-443c-a75c-2fe8c4bcb635"})
"""Built-in roles that pull from a registry: AcrPull (roles.BUILT_IN), AcrPush, Contributor, Owner (Azure built-in
roles)."""
LUSTRE_ROLES = ("Storage Account Contributor", "Storage Blob Data Contributor")
"""What Azure Managed Lustre's storage linking asks of the HPC Cache Resource Provider on the storage account
(amlfs-prerequisites: both roles, on the account or above it; storage.HPC_CACHE_ROLES grants them)."""


def boot_script(resource: PlannedResource) -> str | None:
    """A VM's osProfile.customData, a scale set's virtualMachineProfile.osProfile.customData (base64)."""
    if resource.type == VIRTUAL_MACHINE:
        return boot_text(_mapping(resource.props.get("osProfile")).get("customData"))
    if resource.type == SCALE_SET:
        profile = _mapping(_mapping(resource.props.get("virtualMachineProfile")).get("osProfile"))
        return boot_text(profile.get("customData"))
    return None


def repository_addresses(registry: PlannedResource) -> list[str]:
    server = registry.outputs.get("loginServer")
    name = registry.props.get("registryName")
    return [v for v in (server, f"{name}.azurecr.io" if isinstance(name, str) and name else None)
            if isinstance(v, str) and v]


def _covers(scope: Any, target: Any) -> bool:
    """A role assignment's scope covers a resource id: the id itself or a scope above it (case-insensitive)."""
    if not isinstance(scope, str) or not isinstance(target, str) or not scope:
        return False
    scope, target = scope.rstrip("/").lower(), target.rstrip("/").lower()
    return target == scope or target.startswith(scope + "/")


def _role_guid(assignment: PlannedResource) -> str:
    return str(assignment.props.get("roleDefinitionId") or "").rstrip("/").rsplit("/", 1)[-1].lower()


def pull_gap(host: PlannedResource, registry: PlannedResource, ctx: Context) -> str | None:
    """One of the host's user-assigned managed identities holds AcrPull (or a role including it) on the registry
    or a scope above it."""
    identity = _mapping(host.props.get("identity"))
    assigned = identity.get("userAssignedIdentities")
    ids = {str(i).lower() for i in (_mapping(assigned).keys() if isinstance(assigned, Mapping) else _items(assigned))}
    principals = {i.outputs.get("principalId") for i in ctx.of_type(IDENTITY) if str(i.id or "").lower() in ids}
    principals.discard(None)
    if not principals:
        return "has no planned user-assigned managed identity, so it has no token for the registry"
    if any(a.props.get("principalId") in principals and _role_guid(a) in PULL_ROLES
           and _covers(a.props.get("scope"), registry.id) for a in ctx.of_type(ROLE_ASSIGNMENT)):
        return None
    return "has a managed identity that holds no AcrPull role on the registry"


def bucket_service_gap(fs: PlannedResource, ctx: Context) -> str | None:
    """An Azure Managed Lustre file system linked to a blob container (hsm.settings.container) imports and exports
    as the HPC Cache Resource Provider, which needs both LUSTRE_ROLES on the container's storage account; one
    principal must hold both there."""
    container = _mapping(_mapping(fs.props.get("hsm")).get("settings")).get("container")
    if not isinstance(container, str) or not container:
        return None
    account = container.split("/blobServices/", 1)[0]
    holders: dict[str, set[str]] = {}
    for a in ctx.of_type(ROLE_ASSIGNMENT):
        if _covers(a.props.get("scope"), account) and isinstance(a.props.get("principalId"), str):
            holders.setdefault(a.props["principalId"], set()).add(_role_guid(a))
    if any({BUILT_IN[r] for r in LUSTRE_ROLES} <= roles for roles in holders.values()):
        return None
    return (f"imports from and exports to {account.rsplit('/', 1)[-1]} as the HPC Cache Resource Provider, which "
            f"holds not both {' and '.join(LUSTRE_ROLES)} on that storage account")


FACTS = ProviderFacts(
    privilege=privilege.judge, host_hardening=hardening.host, storage_hardening=hardening.storage,
    data_lifecycle=hardening.lifecycle, not_judged=hardening.NOT_JUDGED,
    name=PROVIDER,
    security_groups=(NSG,),
    standalone_ingress_rules=(SECURITY_RULE,),
    group_property="networkSecurityGroupName",
    ingress=ingress,
    public_ip=public_ip,
    data_stores=(STORAGE_ACCOUNT, BLOB_CONTAINER, RESOURCE_GROUP),
    holds_no_data=holds_no_data,
    final_backup_gap=final_backup_gap,
    public_data=public_data,
    instances=INSTANCES,
    says_private=says_private,
    budgets=budgets,
    budget_hint="set goldenenv:budget so the stack plans its Azure Cost Management budget "
                "(azure-native:consumption:Budget), and budget.hardStop the action group and function that "
                "deallocate the nodes",
    stop_chain=stop_chain.stop_chain,
    tag_input="tags",
    tag_outputs=(),
    tag_form=lambda stack_tags: azure_tags.tags(stack_tags),
    boot_script=boot_script,
    repositories=(REGISTRY,),
    repository_addresses=repository_addresses,
    pull_gap=pull_gap,
    bucket_services=(LUSTRE,),
    bucket_service_gap=bucket_service_gap,
)
