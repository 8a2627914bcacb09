"""Host and storage hardening on Azure: Trusted Launch where the size supports it, no password login, storage over
HTTPS with TLS 1.2 and without shared keys unless a named reason says why, no data account emptied by its lifecycle
management policy.

Storage account settings are the ARM properties supportsHttpsTrafficOnly (enableHttpsTrafficOnly in
azure-native), minimumTlsVersion and allowSharedKeyAccess, whose absence means true (learn.microsoft.com/azure/
storage/common/shared-key-authorization-prevent: "If the AllowSharedKeyAccess property is not set, ... Shared Key
is permitted").

Trusted Launch (securityProfile.securityType TrustedLaunch, uefiSettings vTpmEnabled and secureBootEnabled) is a
fact of the size, in the catalog (catalog/data/boot_integrity.csv, from TRUSTED_LAUNCH "Virtual machines sizes":
the D, E, F, L, HB/HC/HX, NC, ND and NV families, not NDasrA100_v4 and NDm_A100_v4 yet, never NC, NV and NP v1, A,
Dv2, Dv3, DC and EC); the first row whose pattern matches decides, and a size no row knows is held to it (fails
closed). Secure Boot loads only signed kernel
modules: the host images' NVIDIA driver and Lustre client are built by DKMS, so hosts booting them name
UNSIGNED_KERNEL_MODULES ("Secure Boot should be disabled for installing CUDA drivers on other Linux VMs",
TRUSTED_LAUNCH, note under the size table).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import functools
import re

from goldenenv import catalog
from goldenenv.hardening import Reason, deletes_within_a_day, excused, reason_hint

TRUSTED_LAUNCH = "https://learn.microsoft.com/azure/virtual-machines/trusted-launch"
UNSIGNED_KERNEL_MODULES = "unsigned-kernel-modules"
AMLFS_SHARED_KEY = "amlfs-shared-key"
FUNCTION_DEPLOYMENT_KEY = "function-deployment-key"
REASONS = {
    UNSIGNED_KERNEL_MODULES: Reason(
        UNSIGNED_KERNEL_MODULES, frozenset({"secureBootEnabled"}),
        "the host image's NVIDIA driver and Lustre client are kernel modules built by DKMS, not signed with a key "
        "the firmware trusts; Secure Boot would refuse to load them",
        TRUSTED_LAUNCH),
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
NOT_JUDGED: dict[str, str] = {}
ACCOUNT = "azure-native:storage:StorageAccount"
POLICY = "azure-native:storage:ManagementPolicy"
HOSTS = ("azure-native:compute:VirtualMachine", "azure-native:compute:VirtualMachineScaleSet")
TLS_OK = frozenset({"TLS1_2", "TLS1_3"})


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


@functools.cache
def _trusted_launch_rows() -> tuple[tuple[re.Pattern[str], bool], ...]:
    return tuple((re.compile(row["size_pattern"], re.IGNORECASE), row["trusted_launch"] == "yes")
                 for row in catalog.rows("boot_integrity") if row["cloud"] == "azure")


def supports_trusted_launch(size: str) -> bool:
    """Whether the catalog says the size takes Trusted Launch; a size it does not know is held to it."""
    return next((supported for pattern, supported in _trusted_launch_rows() if pattern.match(size)), True)


def trusted_launch(*, secure_boot: bool) -> dict[str, Any]:
    """The security profile of a Trusted Launch host (vTPM on; Secure Boot as its image allows)."""
    return {"security_type": "TrustedLaunch",
            "uefi_settings": {"secure_boot_enabled": secure_boot, "v_tpm_enabled": True}}


def _size(resource: Any) -> str:
    if "ScaleSet" in resource.type:
        return str((resource.props.get("sku") or {}).get("name", ""))
    return str((resource.props.get("hardwareProfile") or {}).get("vmSize", ""))


def _trusted_launch_gaps(resource: Any, profile: dict) -> list[str]:
    security = profile.get("securityProfile") or {}
    uefi = security.get("uefiSettings") or {}
    gaps = [] if security.get("securityType") == "TrustedLaunch" else ["securityType TrustedLaunch"]
    if uefi.get("vTpmEnabled") is not True:
        gaps.append("vTpmEnabled")
    if uefi.get("secureBootEnabled") is not True and not excused(resource, "secureBootEnabled", REASONS, "tags"):
        gaps.append("secureBootEnabled")
    return gaps


def host(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type not in HOSTS:
        return
    profile = resource.props.get("virtualMachineProfile") if "ScaleSet" in resource.type else resource.props
    size = _size(resource)
    gaps = _trusted_launch_gaps(resource, profile or {}) if supports_trusted_launch(size) else []
    if gaps:
        yield (f"{_label(resource)} ({size}) boots without {', '.join(gaps)} (securityProfile), though its size "
               f"supports Trusted Launch ({TRUSTED_LAUNCH}): Secure Boot and a vTPM keep a tampered boot chain from "
               f"running; turn them on, {reason_hint('secureBootEnabled', REASONS)}.")
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
