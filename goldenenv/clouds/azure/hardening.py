"""Host and storage hardening on Azure: no password login, storage over HTTPS with TLS 1.2 and without shared keys
unless a named reason says why, no data account emptied by its lifecycle management policy.

Storage account settings are the ARM properties supportsHttpsTrafficOnly (enableHttpsTrafficOnly in
azure-native), minimumTlsVersion and allowSharedKeyAccess, whose absence means true (learn.microsoft.com/azure/
storage/common/shared-key-authorization-prevent: "If the AllowSharedKeyAccess property is not set, ... Shared Key
is permitted"). Trusted Launch is not judged yet: which GPU sizes support it is not in the catalog (see NOT_JUDGED).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.hardening import Reason, deletes_within_a_day, excused, reason_hint

AMLFS_SHARED_KEY = "amlfs-shared-key"
FUNCTION_DEPLOYMENT_KEY = "function-deployment-key"
REASONS = {
    AMLFS_SHARED_KEY: Reason(
        AMLFS_SHARED_KEY, frozenset({"allowSharedKeyAccess"}),
        "Azure Managed Lustre's blob integration requires storage account key access enabled (its resource provider "
        "makes SAS tokens); nodes and head use their managed identities",
        "https://learn.microsoft.com/azure/azure-managed-lustre/amlfs-prerequisites"),
    FUNCTION_DEPLOYMENT_KEY: Reason(
        FUNCTION_DEPLOYMENT_KEY, frozenset({"allowSharedKeyAccess"}),
        "the Pulumi provider uploads the stop function's package blob with the account key; the function's host "
        "reads its storage with a managed identity",
        "https://github.com/pulumi/pulumi-azure-native/issues/2015"),
}
NOT_JUDGED = {"host-not-hardened (Trusted Launch)":
              "which ND/NC GPU sizes support Trusted Launch is not yet a catalog fact "
              "(learn.microsoft.com/azure/virtual-machines/trusted-launch, 'Virtual machines sizes'); password login "
              "is judged"}
ACCOUNT = "azure-native:storage:StorageAccount"
POLICY = "azure-native:storage:ManagementPolicy"
HOSTS = ("azure-native:compute:VirtualMachine", "azure-native:compute:VirtualMachineScaleSet")
TLS_OK = frozenset({"TLS1_2", "TLS1_3"})


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def host(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type not in HOSTS:
        return
    profile = resource.props.get("virtualMachineProfile") if "ScaleSet" in resource.type else resource.props
    os_profile = (profile or {}).get("osProfile") or {}
    linux = os_profile.get("linuxConfiguration") or {}
    if linux.get("disablePasswordAuthentication") is not True or os_profile.get("adminPassword"):
        yield (f"{_label(resource)} allows password login (osProfile.linuxConfiguration.disablePasswordAuthentication "
               f"is not true, or an adminPassword is set): set disablePasswordAuthentication true and log in with "
               f"the pool's key or Entra ID.")


def storage(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type != ACCOUNT:
        return
    props = resource.props
    if props.get("enableHttpsTrafficOnly") is False:
        yield f"{_label(resource)} accepts plain HTTP (enableHttpsTrafficOnly false): set it true."
    if props.get("minimumTlsVersion") not in TLS_OK:
        yield (f"{_label(resource)} accepts TLS below 1.2 (minimumTlsVersion {props.get('minimumTlsVersion')!r}, "
               f"unset is TLS 1.0): set TLS1_2.")
    if props.get("allowSharedKeyAccess") is not False and not excused(resource, "allowSharedKeyAccess", REASONS,
                                                                      "tags"):
        yield (f"{_label(resource)} allows shared key access (allowSharedKeyAccess "
               f"{props.get('allowSharedKeyAccess', 'unset, which allows it')}): anyone with the account key reads "
               f"and deletes everything; set it false, {reason_hint('allowSharedKeyAccess', REASONS)}.")


def lifecycle(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type != POLICY:
        return
    for rule in ((resource.props.get("policy") or {}).get("rules") or ()):
        if rule.get("enabled") is False:
            continue
        definition = rule.get("definition") or {}
        filters = definition.get("filters") or {}
        if filters.get("prefixMatch") or filters.get("blobIndexMatch"):
            continue
        delete = ((definition.get("actions") or {}).get("baseBlob") or {}).get("delete") or {}
        days = [v for k, v in delete.items() if k.startswith("daysAfter")]
        if any(deletes_within_a_day(d) for d in days):
            yield (f"{_label(resource)} rule {rule.get('name')!r} deletes every blob after {min(days)} day(s): it "
                   f"would empty the stack's data; scope it to a prefix or remove it.")
