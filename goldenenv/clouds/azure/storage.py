"""Storage tiers on Azure: a Blob storage account that outlives the cluster, and Azure Managed Lustre beside it.

The account is the durable tier (datasets in, checkpoints out). It lives in the stack's data resource group
(data_group_name), which `destroy` keeps, under a name the same on every `up` (account_name: a digest of the
subscription, project and stack, as Blob names are global), and the next `up` adopts it (Pulumi import of the
account and of the containers and lifecycle policy it holds) when its tags say it is this stack's; another stack's
is refused (stores.adoptable). It takes requests over HTTPS with TLS 1.2 or newer, never anonymously (no public blob
access), and from nothing but the stack's subnets (network rules: deny by default, a virtual network rule for the
compute subnet and Managed Lustre's, both with a Microsoft.Storage service endpoint) and the admin networks given.
Blobs are versioned; old versions of checkpoints are deleted noncurrent_version_days after they were written
(a lifecycle management policy, scoped to the checkpoint prefix); deleted blobs and containers are kept 7 days.

Azure Managed Lustre (AMLFS) is the fast view for the nodes, in the compute resource group (it goes with the
stack). Its Blob integration (HSM) links it to the data container when it is created: the container's blobs are
imported into the namespace (metadata first, contents on first read), and `destroy` exports the file system back
(archive) and waits before anything is deleted. It needs a second container for its logs, shared key access on
the account, and two roles on the account for the HPC Cache Resource Provider's service principal, whose object id
differs per tenant (LiveLookup.hpc_cache_principal_id asks Microsoft Graph for it by its application id). Nodes
mount it with the kernel Lustre client the Ubuntu HPC image carries (templates/node/lustre-mount-azure.sh.j2,
`mount -t lustre -o noatime,flock <mgs>@tcp:/lustrefs <mount point>`).

Decisions, each with its reason:
- hierarchical namespace off: AMLFS takes both kinds of account (blob-integration.md: HNS containers keep POSIX
  attributes in the blob header, flat ones in blob metadata), but blob versioning, which keeps overwritten
  checkpoints, is not supported on HNS accounts (learn.microsoft.com versioning-overview; azurerm PR #19418).
- shared key access on only with AMLFS, by its named reason (tag hardening.AMLFS_SHARED_KEY): AMLFS's prerequisites
  require "storage account key access ... Enabled" (the resource provider makes SAS tokens). Nodes and heads never
  use keys: they hold Storage Blob Data Contributor on the data container with their managed identity (grant).
- infrastructure encryption on (a second AES-256 layer with Microsoft-managed keys): free, and settable only at
  creation. Customer-managed keys are not offered.
- Standard_ZRS when the stack has a zone (its region has availability zones, which ZRS needs), else
  Standard_LRS: AMLFS takes both (amlfs-prerequisites.md, "Supported storage account types").
- an adopted account whose settings drifted while the stack was destroyed (its virtual network rules are removed
  when destroy deletes the subnets: storage-network-security.md) is imported and then updated: Pulumi's engine
  imports a resource whose inputs differ and reconciles them with an update (pulumi/pulumi#16397, documented by
  pulumi/docs#18198, 2026-03).

Lookups (does the group or account exist, whose tags does it carry, is a Key Vault name soft-deleted, the HPC Cache
principal) are the only calls a build makes outside Pulumi: `pulumi up` makes them live (LiveLookup: Azure Resource
Manager's REST API and Microsoft Graph with tokens from `az account get-access-token`, standard library only); the
offline plan answers from OfflineLookup, which knows of nothing.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_azure_native as azure

from goldenenv.clouds import stores
from goldenenv.clouds.azure import hardening, roles
from goldenenv.clouds.azure.naming import resource_name
from goldenenv.clouds.base import CloudApiError, cli_token, json_call, stable_number
from goldenenv.clouds.stores import PROJECT_TAG_KEY, Found
from goldenenv.hardening import EXCEPTION_KEY
from goldenenv.nodeboot import SharedFs
from goldenenv.spec import STACK_TAG_KEY, ConfigError, Problem

# ---------------------------------------------------------------- Managed Lustre's SKUs, as Microsoft documents them

SIZE_KEY = "goldenenv:storage.parallelFs.sizeGib"
THROUGHPUT_KEY = "goldenenv:storage.parallelFs.throughputPerTib"
ENABLED_KEY = "goldenenv:storage.parallelFs.enabled"
GIB_PER_TIB = 1024


@dataclass(frozen=True)
class AmlfsSku:
    """One AMLFS SKU: capacities from min_tib to max_tib in steps of step_tib."""

    name: str
    throughput_per_tib: int
    min_tib: int
    max_tib: int
    step_tib: int

    def capacity_problem(self, size_gib: int) -> str | None:
        step_gib = self.step_tib * GIB_PER_TIB
        low, high = self.min_tib * GIB_PER_TIB, self.max_tib * GIB_PER_TIB
        if low <= size_gib <= high and size_gib % step_gib == 0:
            return None
        below = min(max(low, size_gib - size_gib % step_gib), high)
        above = max(min(high, below + step_gib if size_gib > below else below), low)
        near = f"{below:,}" if below == above else f"{below:,} or {above:,}"
        return (f"a multiple of {step_gib:,} GiB ({self.step_tib} TiB; 1 TiB = {GIB_PER_TIB:,} GiB) from {low:,} to "
                f"{high:,} GiB (e.g. {near})")


SKUS = {s.throughput_per_tib: s for s in (
    AmlfsSku("AMLFS-Durable-Premium-40", 40, 48, 768, 48),
    AmlfsSku("AMLFS-Durable-Premium-125", 125, 16, 128, 16),
    AmlfsSku("AMLFS-Durable-Premium-250", 250, 8, 128, 8),
    AmlfsSku("AMLFS-Durable-Premium-500", 500, 4, 128, 4),
)}
"""AMLFS's SKUs (MB/s per TiB), with the minimum, maximum and increment of each. Read in MicrosoftDocs
azure-stack-docs azure-managed-lustre/amlfs-overview.md ("SKU | Throughput per TiB storage | Storage Min | Storage
Max | Increment", every stored version) and create-file-system-portal.md ("Throughput configurations": the same
table, "Upon request, Azure Managed Lustre can support larger storage capacities up to 2.5PB ... open a support
ticket"). [C] A third-party AKS chart README shows larger maxima (1,536 / 512 / 256 / 128 TiB); Microsoft's pages
are followed here, so a size above Microsoft's maximum is refused with the support-ticket route named."""
SKU_THROUGHPUTS = tuple(sorted(SKUS))
SUBNET_PREFIXES = ((16, 27), (40, 26), (92, 25), (196, 24), (400, 23))
"""AMLFS's subnet by capacity (TiB up to, CIDR prefix): amlfs-prerequisites.md "Network size requirements" (4-16 TiB
/27, 20-40 /26, 44-92 /25, 96-196 /24, 200-400 /23, "a rough estimate of the minimum subnet size"). Above 400 TiB
the table says nothing: /22 there is an extrapolation (unverified). The ARM schema's filesystemSubnet docstring asks
for "at least a /24" [C]; Microsoft's table, which is by size, is followed."""
LARGEST_PREFIX = 22
FILESYSTEM = "lustrefs"
"""The Lustre file system name every AMLFS has: "The lustrefs value ... is the system-assigned internal name ...
Don't change this literal value" (connect-clients.md); the API's mountCommand reads `mount -t lustre
<mgs>@tcp:/lustrefs ...` (amlFilesystems_Get.json example)."""
MOUNT_OPTIONS = "noatime,flock"
"""Microsoft's mount options for AMLFS clients: `sudo mount -t lustre -o noatime,flock MGS_IP@tcp:/lustrefs
/client_path` (connect-clients.md). flock: POSIX locks across nodes, which checkpoint writers and pip caches take."""
SHAREDFS_UNIT = "goldenenv-sharedfs.service"
MOUNT_SCRIPT = "lustre-mount-azure.sh"
MAINTENANCE_WINDOW = {"day_of_week": "Sunday", "time_of_day_utc": "02:00"}
"""AMLFS's required weekly 30-minute maintenance window (a time of day matching ^([0-9]|0[0-9]|1[0-9]|2[0-3]):[0-5]
[0-9]$, storagecache 2024-03-01 amlfilesystem.json)."""
IMPORT_PREFIXES = ["/"]
"""What AMLFS imports from the data container when it is created: everything (the API's default, written out)."""


def _fs_problems(enabled: bool, size_gib: int, throughput_per_tib: int) -> list[tuple[str, str]]:
    if not enabled:
        return []
    sku = SKUS.get(throughput_per_tib)
    if sku is None:
        return [(THROUGHPUT_KEY, f"Azure Managed Lustre has no {throughput_per_tib} MB/s per TiB tier; write one of "
                 f"{', '.join(map(str, SKU_THROUGHPUTS))} (SKUs {', '.join(s.name for s in SKUS.values())}; the "
                 "tier cannot change after creation)")]
    wrong = sku.capacity_problem(size_gib)
    if wrong is None:
        return []
    smallest = ", ".join(f"{s.throughput_per_tib} -> {s.min_tib * GIB_PER_TIB:,}" for s in SKUS.values())
    return [(SIZE_KEY, f"Azure Managed Lustre at {throughput_per_tib} MB/s per TiB ({sku.name}) takes {wrong}, not "
             f"{size_gib:,} GiB (smallest per tier: {smallest} GiB; Microsoft raises the maximum on a support "
             "request)")]


def problems(enabled: bool = True, size_gib: int = 0, throughput_per_tib: int = 0) -> list[str]:
    """Why AMLFS would refuse this size or tier; [] when it takes them or no parallel file system is asked for.
    Each message starts with the stack key and says what to write."""
    return [f"{key}: {message}" for key, message in _fs_problems(enabled, size_gib, throughput_per_tib)]


def spec_problems(spec: Any) -> list[Problem]:
    """What Azure would refuse in a ClusterSpec's storage: the parallel file system's size and tier, and a
    bucketName that is not a storage account name."""
    fs = spec.storage.parallel_fs
    found = [Problem(key, message) for key, message in _fs_problems(fs.enabled, fs.size_gib, fs.throughput_per_tib)]
    name = spec.storage.bucket.bucket_name
    if name is not None and not valid_account_name(name):
        found.append(Problem(BUCKET_KEY, f"{name!r} is not an Azure storage account name: 3 to 24 lowercase letters "
                             f"and digits, nothing else (e.g. {re.sub(r'[^a-z0-9]', '', name.lower())[:24]!r}); "
                             "the name is global across Azure"))
    return found


def sku_of(throughput_per_tib: int) -> AmlfsSku:
    return SKUS[throughput_per_tib]


def capacity_tib(size_gib: int) -> int:
    """AMLFS's storageCapacityTiB for a size in GiB (a whole number of TiB: spec_problems refuses the rest)."""
    return math.ceil(size_gib / GIB_PER_TIB)


def amlfs_subnet_prefix(size_gib: int) -> int:
    """The prefix length of the subnet AMLFS needs for `size_gib` (SUBNET_PREFIXES)."""
    tib = capacity_tib(size_gib)
    return next((prefix for most, prefix in SUBNET_PREFIXES if tib <= most), LARGEST_PREFIX)


# ---------------------------------------------------------------- names and adoption

BUCKET_KEY = "goldenenv:storage.bucket.bucketName"
GROUP_KEY = "goldenenv:tags.project"
"""Where a data resource group of another stack under this stack's name is reported: the group's name is the
project's and the stack's, so renaming either is the way out."""
PLACEHOLDER_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
"""The subscription the offline plan shows in ids; the real one is the caller's, read at `up`."""
PLACEHOLDER_HPC_CACHE_PRINCIPAL = "22222222-2222-2222-2222-222222222222"
ACCOUNT_NAME = re.compile(r"[a-z0-9]{3,24}")
"""Storage account names: "between 3 and 24 characters in length and use numbers and lower-case letters only"
(pulumi-azure-native storage.StorageAccount account_name docstring, from the ARM schema)."""
DATA_CONTAINER = "data"
LOG_CONTAINER = "lustre-logs"
"""AMLFS's logging container: "Must be a separate container in the same storage account as the hydration and archive
container" (storagecache 2024-03-01 AmlFilesystemHsmSettings.loggingContainer)."""
POLICY_NAME = "default"
"""A storage account's one lifecycle management policy is always named `default`."""
BLOB_SERVICE = "default"
SOFT_DELETE_DAYS = 7
CHECKPOINT_RULE = "checkpoint-versions"


def valid_account_name(name: str) -> bool:
    return bool(ACCOUNT_NAME.fullmatch(name))


def account_name(project: str, stack: str, subscription_id: str) -> str:
    """The stack's storage account: the stack's letters and digits (at most 14) and 10 hex of a digest of the
    subscription, project and stack, so two stacks (or two subscriptions) never ask for the same global name; 12 to
    24 lowercase letters and digits, the same on every `up`."""
    digest = hashlib.sha256(f"{subscription_id}\0{project}\0{stack}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]", "", stack.lower())[:14]
    return f"{slug or 'ge'}{digest}"


def data_group_name(project: str, stack: str) -> str:
    """`rg-<project>-<stack>-data`, written like the compute group (clouds/azure resource_name): the resource group
    that `destroy` keeps, holding the storage account and the registry."""
    return resource_name("rg", project, stack, "data", limit=90)


def group_id(subscription: str, group: str) -> str:
    return f"/subscriptions/{subscription}/resourceGroups/{group}"


def account_id(subscription: str, group: str, account: str) -> str:
    return f"{group_id(subscription, group)}/providers/Microsoft.Storage/storageAccounts/{account}"


def container_id(account_arm_id: str, container: str) -> str:
    return f"{account_arm_id}/blobServices/{BLOB_SERVICE}/containers/{container}"


def policy_id(account_arm_id: str) -> str:
    return f"{account_arm_id}/managementPolicies/{POLICY_NAME}"


def _owner(found: Found | None) -> Found | None:
    """`found` with its project and stack tags under goldenenv's spelling (Azure tag names are case-insensitive:
    tag-resources.md)."""
    if found is None:
        return None
    lower = {str(k).lower(): v for k, v in (found.tags or {}).items()}
    owner = {key: lower[key.lower()] for key in (PROJECT_TAG_KEY, STACK_TAG_KEY) if lower.get(key.lower())}
    return Found(found.name, owner)


def adoptable(found: Found | None, project: str, stack: str, key: str = BUCKET_KEY,
              kind: str = "storage account") -> str | None:
    """stores.adoptable over Azure tags: the name to import, None when nothing exists; ConfigError at `key` when
    the resource is tagged for another project or stack."""
    return stores.adoptable(_owner(found), project, stack, key, kind)


# ---------------------------------------------------------------- Azure's REST APIs, standard library only

ARM_URL = "https://management.azure.com"
GRAPH_URL = "https://graph.microsoft.com"
RESOURCES_API = "2024-03-01"
STORAGE_API = "2024-01-01"
STORAGECACHE_API = "2024-03-01"
REGISTRY_API = "2023-07-01"
KEYVAULT_API = "2023-07-01"
NETWORK_API = "2018-10-01"
"""API versions: pulumi-azure-native 3.29's defaults for resource groups (2024-03-01), storage (2024-01-01) and
storagecache (2024-03-01); Key Vault's deletedVaults list is read in azure-rest-api-specs keyvault stable/2023-07-01
(listDeletedVaults.json); the registry GET uses containerregistry's stable 2023-07-01; a scale set's network
interfaces, NetworkInterfaces_ListVirtualMachineScaleSetNetworkInterfaces (microsoft.Compute/.../networkInterfaces,
2018-10-01)."""
HPC_CACHE_APP_ID = "4392ab71-2ce2-4b0d-8770-b352745c73f5"
"""The "HPC Cache Resource Provider" application (Microsoft first-party; named "storagecache Resource Provider"
before general availability: amlfs-prerequisites.md). Its id read in Microsoft's first-party application lists and
in Azure's own AMLFS test scripts (`New-AzRoleAssignment ... -ApplicationId 4392ab71-...`). Its service principal's
object id differs per tenant, so LiveLookup asks Graph for it."""
HPC_CACHE_PRINCIPAL_ENV = "AZURE_HPC_CACHE_PRINCIPAL_ID"
"""Where a caller whose login cannot read Microsoft Graph (a service principal without a Graph permission) gives the
HPC Cache Resource Provider's object id instead."""
HPC_CACHE_ROLES = {"account": "Storage Account Contributor", "blob": "Storage Blob Data Contributor"}
"""What AMLFS's resource provider needs on the account before the file system is created (amlfs-prerequisites.md,
"Access roles for blob integration"; "It can take up to five minutes for the role settings to propagate")."""
TokenFn = Callable[[], str]
Rest = Callable[..., dict[str, Any]]


class ArmError(CloudApiError):
    """Azure's refusal, with its error code (ResourceNotFound, AuthorizationFailed ...)."""


def az_token(resource: str = f"{ARM_URL}/") -> str:
    """The caller's access token for `resource` from the Azure CLI (`az account get-access-token`): the same login
    the provider uses by default; no Azure SDK is a dependency."""
    return cli_token(["az", "account", "get-access-token", "--resource", resource, "--query", "accessToken",
                      "--output", "tsv"], "https://learn.microsoft.com/cli/azure/install-azure-cli", "az login")


def arm_token() -> str:
    return az_token(f"{ARM_URL}/")


def graph_token() -> str:
    return az_token(f"{GRAPH_URL}/")


def call(method: str, url: str, token: str, body: Any = None, timeout: float = 60) -> dict[str, Any]:
    """One JSON call to Azure (ARM or Graph); ArmError with Azure's own code and message on an HTTP error."""
    return json_call(method, url, token, body, timeout, error=ArmError)


def _get_or_none(rest: Rest, url: str, token: str) -> dict[str, Any] | None:
    try:
        return rest("GET", url, token)
    except ArmError as e:
        if e.status == 404:
            return None
        raise


@dataclass
class OfflineLookup:
    """The offline plan's answers: a placeholder subscription, and only what a caller (a test) says exists."""

    subscription: str = PLACEHOLDER_SUBSCRIPTION
    groups: dict[str, Found] = field(default_factory=dict)
    accounts: dict[str, Found] = field(default_factory=dict)
    """By account name (names are global)."""
    children: set[str] = field(default_factory=set)
    """ARM ids of the containers and lifecycle policies that exist."""
    deleted_vaults: set[str] = field(default_factory=set)
    registries: dict[str, Found] = field(default_factory=dict)
    hpc_cache_principal: str | None = PLACEHOLDER_HPC_CACHE_PRINCIPAL

    def subscription_id(self) -> str:
        return self.subscription

    def resource_group(self, name: str) -> Found | None:
        return self.groups.get(name)

    def storage_account(self, group: str, name: str) -> Found | None:
        return self.accounts.get(name)

    def storage_children(self, group: str, account: str) -> set[str]:
        prefix = account_id(self.subscription, group, account) + "/"
        return {c for c in self.children if c.startswith(prefix)}

    def deleted_vault(self, name: str) -> bool:
        return name.lower() in {v.lower() for v in self.deleted_vaults}

    def registry(self, group: str, name: str) -> Found | None:
        return self.registries.get(name)

    def hpc_cache_principal_id(self) -> str | None:
        return self.hpc_cache_principal


class LiveLookup:
    """The same questions asked of Azure Resource Manager (and Microsoft Graph) with the caller's tokens."""

    def __init__(self, subscription_id: str, token_fn: TokenFn | None = None, base_url: str = ARM_URL,
                 graph_token_fn: TokenFn | None = None, graph_url: str = GRAPH_URL, rest: Rest = call):
        self.subscription = subscription_id
        self._token_fn = token_fn or arm_token
        self._graph_token_fn = graph_token_fn or graph_token
        self.base_url, self.graph_url = base_url.rstrip("/"), graph_url.rstrip("/")
        self._rest = rest

    def subscription_id(self) -> str:
        return self.subscription

    def _get(self, path: str, api: str) -> dict[str, Any] | None:
        return _get_or_none(self._rest, f"{self.base_url}{path}?api-version={api}", self._token_fn())

    def _group(self, group: str) -> str:
        return group_id(self.subscription, urllib.parse.quote(group, safe=""))

    def resource_group(self, name: str) -> Found | None:
        found = self._get(self._group(name), RESOURCES_API)
        return None if found is None else Found(name, dict(found.get("tags") or {}))

    def storage_account(self, group: str, name: str) -> Found | None:
        """The account's tags when `group` holds it; None when no account has the name. A name held elsewhere
        (another resource group or subscription: names are global) is a ConfigError naming bucketName."""
        found = self._get(account_id(self.subscription, urllib.parse.quote(group, safe=""), name), STORAGE_API)
        if found is not None:
            return Found(name, dict(found.get("tags") or {}))
        answer = self._rest("POST", f"{self.base_url}/subscriptions/{self.subscription}/providers/Microsoft.Storage/"
                            f"checkNameAvailability?api-version={STORAGE_API}", self._token_fn(),
                            {"name": name, "type": "Microsoft.Storage/storageAccounts"})
        if answer.get("nameAvailable") is False:
            why = answer.get("message") or answer.get("reason") or "taken"
            raise ConfigError([Problem(BUCKET_KEY, f"storage account {name} is not in resource group {group} and its "
                                       f"name cannot be used ({why}): storage account names are global across "
                                       "Azure; set bucketName to another name")])
        return None

    def storage_children(self, group: str, account: str) -> set[str]:
        """ARM ids of the account's containers and of its lifecycle policy, as they exist."""
        base = account_id(self.subscription, urllib.parse.quote(group, safe=""), account)
        listing = self._get(f"{base}/blobServices/{BLOB_SERVICE}/containers", STORAGE_API) or {}
        arm_base = account_id(self.subscription, group, account)
        found = {container_id(arm_base, c["name"]) for c in listing.get("value") or [] if c.get("name")}
        if self._get(f"{base}/managementPolicies/{POLICY_NAME}", STORAGE_API) is not None:
            found.add(policy_id(arm_base))
        return found

    def deleted_vault(self, name: str) -> bool:
        """Whether a soft-deleted Key Vault holds `name` (GET /subscriptions/{s}/providers/Microsoft.KeyVault/
        deletedVaults, every page): the next vault of that name must be recovered, not created."""
        url: str | None = (f"{self.base_url}/subscriptions/{self.subscription}/providers/Microsoft.KeyVault/"
                           f"deletedVaults?api-version={KEYVAULT_API}")
        while url:
            page = self._rest("GET", url, self._token_fn())
            for vault in page.get("value") or []:
                names = {str(vault.get("name") or ""), str(vault.get("id") or "").rsplit("/", 1)[-1],
                         str((vault.get("properties") or {}).get("vaultId") or "").rsplit("/", 1)[-1]}
                if name.lower() in {n.lower() for n in names}:
                    return True
            url = page.get("nextLink")
        return False

    def registry(self, group: str, name: str) -> Found | None:
        found = self._get(f"{self._group(group)}/providers/Microsoft.ContainerRegistry/registries/{name}",
                          REGISTRY_API)
        return None if found is None else Found(name, dict(found.get("tags") or {}))

    def hpc_cache_principal_id(self) -> str | None:
        """The object id of the HPC Cache Resource Provider's service principal in the caller's tenant: the
        environment's HPC_CACHE_PRINCIPAL_ENV when set, else Microsoft Graph's answer (GET /v1.0/servicePrincipals
        (appId='...'), which a signed-in user may read by default; a service principal needs a Graph permission).
        None when the tenant has none (Microsoft.StorageCache never registered)."""
        given = os.environ.get(HPC_CACHE_PRINCIPAL_ENV, "").strip()
        if given:
            return given
        try:
            found = _get_or_none(self._rest, f"{self.graph_url}/v1.0/servicePrincipals(appId='{HPC_CACHE_APP_ID}')"
                                 "?$select=id,displayName", self._graph_token_fn())
        except ArmError as e:
            if e.status not in (401, 403):
                raise
            raise ConfigError([Problem(ENABLED_KEY, "cannot read the HPC Cache Resource Provider's service principal "
                                       f"from Microsoft Graph ({e}); Azure Managed Lustre needs its object id. Run "
                                       f"`az ad sp show --id {HPC_CACHE_APP_ID} --query id --output tsv` as a user "
                                       f"who may, and set {HPC_CACHE_PRINCIPAL_ENV} to it")]) from None
        return str(found["id"]) if found and found.get("id") else None

    def scale_set_addresses(self, group: str, scale_set: str) -> list[str]:
        """The primary private address of each VM of a Uniform scale set, in instance order."""
        url: str | None = (f"{self.base_url}{self._group(group)}/providers/microsoft.Compute/virtualMachineScaleSets/"
                           f"{scale_set}/networkInterfaces?api-version={NETWORK_API}")
        found: list[tuple[int, str]] = []
        while url:
            page = self._rest("GET", url, self._token_fn())
            for nic in page.get("value") or []:
                props = nic.get("properties") or {}
                vm = str((props.get("virtualMachine") or {}).get("id") or "").rsplit("/", 1)[-1]
                configs = props.get("ipConfigurations") or []
                primary = next((c for c in configs if (c.get("properties") or {}).get("primary")),
                               configs[0] if configs else None)
                address = ((primary or {}).get("properties") or {}).get("privateIPAddress")
                if address:
                    found.append((int(vm) if vm.isdigit() else len(found), str(address)))
            url = page.get("nextLink")
        return [address for _, address in sorted(found)]


@dataclass(frozen=True)
class RetainedStores:
    """What the stack's data resource group holds from an earlier `up`, and what this `up` adopts."""

    data_group: str
    adopt_group: str | None
    """The data resource group's ARM id to import; None: create it."""
    account: str
    adopt_account: str | None
    """The storage account's ARM id to import; None: create it."""
    adopt_children: tuple[str, ...] = ()
    """ARM ids of the adopted account's containers and lifecycle policy (each imported, as azure-native refuses to
    create what exists)."""
    hpc_cache_principal_id: str | None = None
    """The HPC Cache Resource Provider's object id in this tenant; None when the stack has no Lustre."""

    @classmethod
    def find(cls, spec: Any, lookup: Any) -> RetainedStores:
        """The stack's data group and account, adopted when they exist and carry this project's and stack's tags;
        another stack's is refused (ConfigError naming the key to change)."""
        project, stack = spec.tags.project, spec.stack
        subscription = lookup.subscription_id()
        group = data_group_name(project, stack)
        adopt_group = adoptable(lookup.resource_group(group), project, stack, GROUP_KEY, "resource group")
        account = spec.storage.bucket.bucket_name or account_name(project, stack, subscription)
        adopted = adoptable(lookup.storage_account(group, account), project, stack)
        principal = None
        if spec.storage.parallel_fs.enabled:
            principal = lookup.hpc_cache_principal_id()
            if not principal:
                raise ConfigError([Problem(ENABLED_KEY, "Azure Managed Lustre needs the HPC Cache Resource Provider "
                                           f"(application {HPC_CACHE_APP_ID}) in this tenant, to reach the Blob "
                                           "container; none was found. Register the provider: az provider register "
                                           "--namespace Microsoft.StorageCache (check with az ad sp show --id "
                                           f"{HPC_CACHE_APP_ID}), or set parallelFs.enabled false")])
        children = tuple(sorted(lookup.storage_children(group, account))) if adopted else ()
        return cls(group, group_id(subscription, group) if adopt_group else None, account,
                   account_id(subscription, group, account) if adopted else None, children, principal)


# ---------------------------------------------------------------- destroy: export Lustre to Blob; purge by name

POLL_SECONDS = 30.0
TIMEOUT_SECONDS = 12 * 3600
RUNNING = frozenset({"InProgress", "FSScanInProgress", "Cancelling"})
"""ArchiveStatusType values of an archive still going (storagecache 2024-03-01: NotConfigured, Idle, InProgress,
Canceled, Completed, Failed, Cancelling, FSScanInProgress)."""
ARCHIVE_PATH = "/"
"""The path archived: "Specify '/' to archive all modified data" (AmlFilesystemArchiveInfo.filesystemPath)."""
MAX_POLL_ERRORS = 3


@dataclass(frozen=True)
class ArchiveResult:
    fs_name: str
    last_completion_time: str
    seconds: float


def amlfs_url(base_url: str, subscription: str, resource_group: str, fs_name: str) -> str:
    return (f"{base_url.rstrip('/')}/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/"
            f"Microsoft.StorageCache/amlFilesystems/{fs_name}")


def archive_status(filesystem: Mapping[str, Any], path: str = ARCHIVE_PATH) -> dict[str, Any]:
    """properties.hsm.archiveStatus[filesystemPath == path].status of an AmlFilesystem ({} when none)."""
    hsm = (filesystem.get("properties") or {}).get("hsm") or {}
    entry = next((a for a in hsm.get("archiveStatus") or [] if (a.get("filesystemPath") or "/") == path), None)
    return dict((entry or {}).get("status") or {})


def archive(subscription: str, resource_group: str, fs_name: str, log: Callable[[str], None] = print,
            token_fn: TokenFn | None = None, base_url: str = ARM_URL, poll_seconds: float = POLL_SECONDS,
            timeout_seconds: float = TIMEOUT_SECONDS, sleep: Callable[[float], None] = time.sleep,
            rest: Rest = call) -> ArchiveResult | None:
    """Export the whole file system to its Blob container (AMLFS "archive", what `destroy` runs first) and wait.

    POST {amlFilesystem}/archive?api-version=2024-03-01 {"filesystemPath": "/"}, then GET the file system until
    properties.hsm.archiveStatus for "/" reads Completed for this archive (it started after the one seen before,
    or was seen running). Returns None when the file system no longer exists (nothing left to lose). Raises
    RuntimeError naming the file system and the `az amlfs` command to run by hand when the archive cannot start,
    fails, is canceled or outlives timeout_seconds; the caller then deletes nothing. An archive already running is
    waited for first (AMLFS runs one at a time)."""
    token_fn = token_fn or arm_token
    url = amlfs_url(base_url, subscription, resource_group, fs_name)
    by_hand = f"az amlfs archive --amlfs-name {fs_name} --resource-group {resource_group}"
    what = f"export of Azure Managed Lustre {fs_name} ({resource_group}) to its Blob container"
    started = time.monotonic()
    errors = 0

    def read() -> dict[str, Any] | None:
        nonlocal errors
        while True:
            try:
                found = _get_or_none(rest, f"{url}?api-version={STORAGECACHE_API}", token_fn())
                errors = 0
                return found
            except ArmError as e:
                errors += 1
                if e.status < 500 or errors >= MAX_POLL_ERRORS:
                    raise RuntimeError(f"cannot follow the {what}: {e}. Check it with `az amlfs show --amlfs-name "
                                       f"{fs_name} --resource-group {resource_group}`; delete nothing until it is "
                                       f"done, or run it by hand: {by_hand}") from None
                sleep(poll_seconds)

    def waited() -> bool:
        return time.monotonic() - started > timeout_seconds

    filesystem = read()
    if filesystem is None:
        log(f"Azure Managed Lustre {fs_name} no longer exists in {resource_group}: nothing to export")
        return None
    if not ((filesystem.get("properties") or {}).get("hsm") or {}).get("settings"):
        raise RuntimeError(f"Azure Managed Lustre {fs_name} has no Blob integration: nothing can export it; copy its "
                           "files out by hand, or destroy with --skip-export to lose them")
    before = archive_status(filesystem)
    while before.get("state") in RUNNING:
        if waited():
            raise RuntimeError(f"an earlier archive of {fs_name} is still running after "
                               f"{timeout_seconds / 3600:g} h; delete nothing until it is done")
        log(f"an archive of {fs_name} is already running ({before.get('percentComplete', 0)} %); waiting for it")
        sleep(poll_seconds)
        filesystem = read() or {}
        before = archive_status(filesystem)
    try:
        rest("POST", f"{url}/archive?api-version={STORAGECACHE_API}", token_fn(), {"filesystemPath": ARCHIVE_PATH})
    except ArmError as e:
        if e.status == 404:
            log(f"Azure Managed Lustre {fs_name} no longer exists in {resource_group}: nothing to export")
            return None
        raise RuntimeError(f"could not start the {what}: {e}. Run it by hand: {by_hand}") from None
    log(f"exporting {fs_name} to its Blob container (archive of {ARCHIVE_PATH})")
    seen_running = False
    while True:
        if waited():
            raise RuntimeError(f"the {what} is still running after {timeout_seconds / 3600:g} h; follow it with `az "
                               f"amlfs show --amlfs-name {fs_name} --resource-group {resource_group}` and delete "
                               f"nothing until it is done, or run it again by hand: {by_hand}")
        sleep(poll_seconds)
        filesystem = read()
        if filesystem is None:
            raise RuntimeError(f"Azure Managed Lustre {fs_name} disappeared during its export; check the Blob "
                               "container before deleting anything else")
        status = archive_status(filesystem)
        state = status.get("state")
        ours = seen_running or status.get("lastStartedTime") != before.get("lastStartedTime")
        if state in RUNNING:
            seen_running = True
            log(f"archive of {fs_name}: {state}, {status.get('percentComplete', 0)} % complete")
        elif ours and state == "Completed":
            return ArchiveResult(fs_name, str(status.get("lastCompletionTime") or ""), time.monotonic() - started)
        elif ours and state in ("Failed", "Canceled"):
            why = ": ".join(str(p) for p in (status.get("errorCode"), status.get("errorMessage")) if p) or state
            raise RuntimeError(f"the {what} ended {state} ({why}); check the logging container {LOG_CONTAINER}, then "
                               f"run it again by hand: {by_hand}")


def purge(subscription: str, data_group: str, account: str, log: Callable[[str], None] = print,
          token_fn: TokenFn | None = None, base_url: str = ARM_URL, rest: Rest = call) -> bool:
    """Delete the retained storage account `account` (every container, blob and version in it): only ever asked for
    by name (`destroy --purge-data`). Returns whether it was deleted; False when it is already gone."""
    token = (token_fn or arm_token)()
    url = f"{base_url.rstrip('/')}{account_id(subscription, data_group, account)}?api-version={STORAGE_API}"
    if _get_or_none(rest, url, token) is None:
        log(f"storage account {account} no longer exists in {data_group}: nothing to purge")
        return False
    try:
        rest("DELETE", url, token)
    except ArmError as e:
        raise RuntimeError(f"purging storage account {account} failed: {e}; delete it by hand with: az storage "
                           f"account delete --name {account} --resource-group {data_group} --yes") from None
    log(f"purged storage account {account} (every container, blob and version in it)")
    return True


# ---------------------------------------------------------------- the component

@dataclass(frozen=True, kw_only=True)
class DataStoreArgs:
    data_group: pulumi.Input[str]
    """The retained data resource group (the caller creates it, retain_on_delete): the account's home."""
    compute_group: pulumi.Input[str]
    """The stack's compute resource group: AMLFS's home, deleted on destroy."""
    location: str
    zone: str | None
    """Azure's logical zone ("1") for AMLFS, and ZRS for the account; None: regional, LRS."""
    account_name: str
    adopt_account: str | None
    """The retained account's ARM id to import (RetainedStores.find), or None to create it."""
    noncurrent_version_days: int
    parallel_fs: bool
    fs_size_gib: int
    fs_throughput_per_tib: int
    fs_subnet_id: pulumi.Input[str] | None
    """AMLFS's own subnet (it cannot be changed later); None without parallel_fs."""
    node_subnet_id: pulumi.Input[str]
    """The compute subnet (Microsoft.Storage service endpoint): the account's network rules admit it."""
    checkpoint_prefix: str
    mount_point: str
    tags: dict[str, str]
    subscription_id: pulumi.Input[str]
    hpc_cache_principal_id: pulumi.Input[str] | None = None
    """The HPC Cache Resource Provider's object id (RetainedStores.find): required with parallel_fs."""
    adopt_children: Sequence[str] = ()
    """ARM ids of the adopted account's containers and policy to import (RetainedStores.adopt_children)."""
    allowed_ip_ranges: Sequence[str] = ()
    """Public networks (network.adminCidrs) the account also takes requests from, for uploads from a laptop."""


def check_args(args: DataStoreArgs) -> None:
    """Refuse what Azure would only refuse mid-`up`."""
    if not valid_account_name(args.account_name):
        raise ValueError(f"{args.account_name!r} is not a storage account name (3-24 lowercase letters and digits)")
    if args.noncurrent_version_days < 1:
        raise ValueError(f"noncurrent_version_days must be at least 1, not {args.noncurrent_version_days}")
    found = problems(args.parallel_fs, args.fs_size_gib, args.fs_throughput_per_tib)
    if found:
        raise ValueError("; ".join(found))
    if args.parallel_fs and (args.fs_subnet_id is None or args.hpc_cache_principal_id is None):
        raise ValueError("parallel_fs needs fs_subnet_id (AMLFS's subnet) and hpc_cache_principal_id (the HPC Cache "
                         "Resource Provider's object id: RetainedStores.find)")


def ip_rules(ranges: Sequence[str]) -> list[dict[str, str]]:
    """Storage firewall IP rules for the public networks among `ranges`: Azure takes neither private (RFC 1918)
    ranges nor IPv6 in them, and a /31 or /32 only as a bare address (storage-network-security.md, "IP network
    rules"; unverified here)."""
    rules = []
    for text in ranges:
        network = ipaddress.ip_network(str(text), strict=False)
        if network.version != 4 or not network.is_global:
            continue
        value = str(network.network_address) if network.prefixlen >= 31 else str(network)
        rules.append({"i_p_address_or_range": value, "action": "Allow"})
    return rules


def lifecycle_rules(noncurrent_version_days: int, checkpoint_prefix: str) -> list[dict[str, Any]]:
    """Old versions of checkpoints are deleted noncurrent_version_days after they were written (Azure counts a
    version's age from its creation: DateAfterCreation; unverified whether from when it became noncurrent), like the
    S3, OSS and Cloud Storage rules, scoped to the checkpoint prefix ("A prefix string must start with a container
    name": lifecycle-management-overview.md)."""
    prefix = f"{DATA_CONTAINER}/{checkpoint_prefix.strip('/')}/" if checkpoint_prefix.strip("/") else DATA_CONTAINER
    return [{
        "name": CHECKPOINT_RULE, "enabled": True, "type": "Lifecycle",
        "definition": {
            "filters": {"blob_types": ["blockBlob"], "prefix_match": [prefix]},
            "actions": {"version": {"delete": {"days_after_creation_greater_than": noncurrent_version_days}}},
        },
    }]


def lustre_name(name: str) -> str:
    """The AMLFS resource's name: the component's, in AMLFS's alphabet (^[0-9a-zA-Z][-0-9a-zA-Z_]{0,78}
    [0-9a-zA-Z]$), at most 80 characters."""
    text = re.sub(r"[^0-9A-Za-z_-]+", "-", f"{name}-lustre").strip("-_")
    if len(text) > 80:
        text = f"{text[:71].rstrip('-_')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return text


def _field(value: Any, snake: str, camel: str) -> Any:
    """A field of an output object, whether the SDK gives its typed class or a plain dict."""
    if value is None:
        return None
    found = getattr(value, snake, None)
    if found is None and isinstance(value, Mapping):
        found = value.get(camel, value.get(snake))
    return found


class DataStore(pulumi.ComponentResource):
    account_name: pulumi.Output[str]
    account_id: pulumi.Output[str]
    container_name: pulumi.Output[str]
    container_id: pulumi.Output[str]
    blob_endpoint: pulumi.Output[str]
    fs_id: pulumi.Output[str] | None
    fs_name: pulumi.Output[str] | None
    mgs_address: pulumi.Output[str] | None
    mount_command: pulumi.Output[str] | None
    mount: pulumi.Output[SharedFs | None]

    def __init__(self, name: str, args: DataStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:azure:DataStore", name, None, opts)
        check_args(args)
        self._subscription = args.subscription_id
        adopted = set(args.adopt_children)

        def keep(arm_id: str | None = None) -> pulumi.ResourceOptions:
            # import of an id already in the stack's state is a no-op, so the option may stay on every later up
            return pulumi.ResourceOptions(parent=self, retain_on_delete=True, import_=arm_id)

        subnets = [args.node_subnet_id] + ([args.fs_subnet_id] if args.parallel_fs else [])
        account = azure.storage.StorageAccount(
            f"{name}-account", account_name=args.account_name, resource_group_name=args.data_group,
            location=args.location, kind="StorageV2",
            sku={"name": "Standard_ZRS" if args.zone else "Standard_LRS"}, access_tier="Hot",
            is_hns_enabled=False, allow_blob_public_access=False, minimum_tls_version="TLS1_2",
            enable_https_traffic_only=True, allow_shared_key_access=args.parallel_fs,
            allow_cross_tenant_replication=False,
            default_to_o_auth_authentication=True,
            encryption={"key_source": "Microsoft.Storage", "require_infrastructure_encryption": True,
                        "services": {"blob": {"enabled": True, "key_type": "Account"}}},
            network_rule_set={"default_action": "Deny", "bypass": "AzureServices",
                              "virtual_network_rules": [{"virtual_network_resource_id": s, "action": "Allow"}
                                                        for s in subnets],
                              "ip_rules": ip_rules(args.allowed_ip_ranges)},
            tags={**args.tags, EXCEPTION_KEY: hardening.AMLFS_SHARED_KEY} if args.parallel_fs else args.tags,
            opts=keep(args.adopt_account))
        arm_id = args.adopt_account
        service = azure.storage.BlobServiceProperties(
            f"{name}-blob-service", account_name=account.name, resource_group_name=args.data_group,
            blob_services_name=BLOB_SERVICE, is_versioning_enabled=True,
            delete_retention_policy={"enabled": True, "days": SOFT_DELETE_DAYS},
            container_delete_retention_policy={"enabled": True, "days": SOFT_DELETE_DAYS},
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True))

        def container(suffix: str, container_name: str) -> azure.storage.BlobContainer:
            existing = container_id(arm_id, container_name) if arm_id else None
            return azure.storage.BlobContainer(
                f"{name}-{suffix}", account_name=account.name, resource_group_name=args.data_group,
                container_name=container_name, public_access="None",
                opts=pulumi.ResourceOptions.merge(keep(existing if existing in adopted else None),
                                                  pulumi.ResourceOptions(depends_on=[service])))

        data = container("container", DATA_CONTAINER)
        logs = container("lustre-logs", LOG_CONTAINER)
        existing_policy = policy_id(arm_id) if arm_id else None
        azure.storage.ManagementPolicy(
            f"{name}-lifecycle", account_name=account.name, resource_group_name=args.data_group,
            management_policy_name=POLICY_NAME,
            policy={"rules": lifecycle_rules(args.noncurrent_version_days, args.checkpoint_prefix)},
            opts=pulumi.ResourceOptions.merge(keep(existing_policy if existing_policy in adopted else None),
                                              pulumi.ResourceOptions(depends_on=[service])))

        self.account_name = account.name
        self.account_id = account.id
        self.container_name = data.name
        self.container_id = data.id
        self.blob_endpoint = account.primary_endpoints.apply(lambda e: _field(e, "blob", "blob"))
        self._data_container = data
        self.fs_id = self.fs_name = self.mgs_address = self.mount_command = None
        self.mount = (self._lustre(name, args, account, data, logs) if args.parallel_fs
                      else pulumi.Output.from_input(None))
        self.register_outputs({
            "account_name": self.account_name, "account_id": self.account_id, "container_name": self.container_name,
            "container_id": self.container_id, "blob_endpoint": self.blob_endpoint, "fs_id": self.fs_id,
            "fs_name": self.fs_name, "mgs_address": self.mgs_address,
        })

    def _lustre(self, name: str, args: DataStoreArgs, account: azure.storage.StorageAccount,
                data: azure.storage.BlobContainer, logs: azure.storage.BlobContainer) -> pulumi.Output[SharedFs]:
        """The resource provider's two roles on the account, then AMLFS linked to the data container."""
        child = pulumi.ResourceOptions(parent=self)
        grants = [roles.grant(f"{name}-lustre-rp-{key}", role=role, scope=account.id,
                              principal_id=args.hpc_cache_principal_id, subscription_id=args.subscription_id,
                              opts=child)
                  for key, role in HPC_CACHE_ROLES.items()]
        sku = sku_of(args.fs_throughput_per_tib)
        fs = azure.storagecache.AmlFilesystem(
            f"{name}-lustre", aml_filesystem_name=lustre_name(name), resource_group_name=args.compute_group,
            location=args.location, sku={"name": sku.name}, storage_capacity_ti_b=capacity_tib(args.fs_size_gib),
            filesystem_subnet=args.fs_subnet_id, zones=[args.zone] if args.zone else None,
            maintenance_window=MAINTENANCE_WINDOW,
            hsm={"settings": {"container": data.id, "logging_container": logs.id,
                              "import_prefixes_initial": IMPORT_PREFIXES}},
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*grants, data, logs]))
        self.fs_id = fs.id
        self.fs_name = fs.name
        self.mgs_address = fs.client_info.apply(lambda c: _field(c, "mgs_address", "mgsAddress"))
        self.mount_command = self.mgs_address.apply(
            lambda mgs: f"mount -t lustre -o {MOUNT_OPTIONS} {mgs}@tcp:/{FILESYSTEM} {args.mount_point}")
        return self.mgs_address.apply(lustre_mount)

    def grant(self, name: str, principal_id: pulumi.Input[str]) -> None:
        """Storage Blob Data Contributor on the data container (read, write, delete blobs; nothing else) for a
        node's or the head's managed identity."""
        roles.grant(name, role="Storage Blob Data Contributor", scope=self.container_id, principal_id=principal_id,
                    subscription_id=self._subscription, opts=pulumi.ResourceOptions(parent=self))


def lustre_mount(mgs_address: str) -> SharedFs:
    """How a node mounts AMLFS on every boot (templates/node/lustre-mount-azure.sh.j2)."""
    return SharedFs(SHAREDFS_UNIT, MOUNT_SCRIPT, {"source_path": f"{mgs_address}@tcp:/{FILESYSTEM}",
                                                  "options": MOUNT_OPTIONS})


# ---------------------------------------------------------------- the offline plan's answers

MOCK_LUSTRE_SUBNET = "10.42.128"
"""AMLFS's subnet under the default network.cidr (10.42.0.0/16: the Lustre subnet starts its second half); the
mock cannot see the subnet's range, so the MGS address is a stand-in there (Azure keeps a subnet's first 4
addresses)."""


def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What Azure computes for the data store's resources, as stand-ins; None for other types. Values depend on the
    resource alone (stable_number), never on registration order."""
    typ, inputs = args.typ, args.inputs
    group = str(inputs.get("resourceGroupName") or "mock-rg")
    account = str(inputs.get("accountName") or args.name)
    account_arm = account_id(PLACEHOLDER_SUBSCRIPTION, group, account)
    if typ == "azure-native:storage:StorageAccount":
        return account_arm, {
            "name": account, "provisioningState": "Succeeded",
            "primaryEndpoints": {"blob": f"https://{account}.blob.core.windows.net/",
                                 "dfs": f"https://{account}.dfs.core.windows.net/"},
        }
    if typ == "azure-native:storage:BlobContainer":
        name = str(inputs.get("containerName") or args.name)
        return container_id(account_arm, name), {"name": name}
    if typ == "azure-native:storage:BlobServiceProperties":
        return f"{account_arm}/blobServices/{BLOB_SERVICE}", {"name": BLOB_SERVICE}
    if typ == "azure-native:storage:ManagementPolicy":
        return policy_id(account_arm), {"name": POLICY_NAME}
    if typ == "azure-native:storagecache:AmlFilesystem":
        name = str(inputs.get("amlFilesystemName") or args.name)
        mgs = f"{MOCK_LUSTRE_SUBNET}.{4 + stable_number(f'{typ}::{args.name}') % 16}"
        tib = float(inputs.get("storageCapacityTiB") or 0)
        per_tib = int(str((inputs.get("sku") or {}).get("name") or "-0").rsplit("-", 1)[-1] or 0)
        return (f"{group_id(PLACEHOLDER_SUBSCRIPTION, group)}/providers/Microsoft.StorageCache/amlFilesystems/{name}",
                {"name": name, "provisioningState": "Succeeded", "health": {"state": "Available"},
                 "throughputProvisionedMBps": int(tib * per_tib),
                 "clientInfo": {"mgsAddress": mgs, "lustreVersion": "2.15.7",
                                "mountCommand": f"mount -t lustre {mgs}@tcp:/{FILESYSTEM} /lustre/{FILESYSTEM}"}})
    return None

