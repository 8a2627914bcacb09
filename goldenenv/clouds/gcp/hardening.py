"""Host and storage hardening on Google Cloud: Shielded VM on every host, no bucket emptied by its lifecycle.

Shielded VM (Secure Boot, vTPM, integrity monitoring) is offered on every Compute Engine machine type whose image
supports it, and Google's public images (the Deep Learning VM and Ubuntu images goldenenv boots) all do
(cloud.google.com/compute/shielded-vm/docs/shielded-vm, "Supported images"). Secure Boot refuses unsigned kernel
modules: the NVIDIA driver goldenenv's host layer builds from NVIDIA's CUDA repository with DKMS is not signed by a
key the VM's firmware trusts, so GPU hosts name that reason (NVIDIA: signed, precompiled drivers "are required when
nodes are enabled with Secure Boot", UNSIGNED_DRIVER_SOURCE). Storage transport is Google's: Cloud Storage serves HTTPS only with TLS 1.2 or later and has no
shared key on a bucket (HMAC keys are per account, none created), so storage-not-hardened has nothing to judge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.hardening import Reason, deletes_within_a_day, excused, reason_hint

SHIELDED = ("enableSecureBoot", "enableVtpm", "enableIntegrityMonitoring")
UNSIGNED_GPU_DRIVER = "unsigned-gpu-driver"
UNSIGNED_DRIVER_SOURCE = ("https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/"
                          "install-precompiled-signed-drivers.html")
REASONS = {
    UNSIGNED_GPU_DRIVER: Reason(
        UNSIGNED_GPU_DRIVER, frozenset({"enableSecureBoot"}),
        "the NVIDIA driver is built by DKMS from NVIDIA's repository and is not signed with a key the firmware "
        "trusts; Secure Boot would refuse to load it",
        UNSIGNED_DRIVER_SOURCE),
}
NOT_JUDGED = {"storage-not-hardened": "Cloud Storage serves HTTPS only, with TLS 1.2 or later, and a bucket has no "
                                      "shared key (cloud.google.com/storage/docs/encryption, "
                                      "cloud.google.com/load-balancing/docs/ssl-policies-concepts)"}
HOSTS = ("gcp:compute/instance:Instance", "gcp:compute/instanceTemplate:InstanceTemplate",
         "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate")
BUCKET = "gcp:storage/bucket:Bucket"


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def host(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type not in HOSTS:
        return
    config = resource.props.get("shieldedInstanceConfig")
    config = config if isinstance(config, dict) else {}
    off = [s for s in SHIELDED if config.get(s) is not True and not excused(resource, s, REASONS, "labels")]
    if off:
        yield (f"{_label(resource)} boots without {', '.join(off)} (shieldedInstanceConfig): Shielded VM keeps a "
               f"tampered boot chain from running; turn {'them' if len(off) > 1 else 'it'} on, "
               f"{reason_hint(off[0], REASONS)}.")


def lifecycle(resource: Any, ctx: Any) -> Iterator[str]:
    if resource.type != BUCKET:
        return
    for rule in resource.props.get("lifecycleRules") or ():
        action = rule.get("action") or {}
        condition = rule.get("condition") or {}
        narrowed = any(condition.get(k) for k in ("matchesPrefixes", "matchesSuffixes", "daysSinceNoncurrentTime",
                                                  "numNewerVersions", "noncurrentTimeBefore")) \
            or str(condition.get("withState", "ANY")).upper() == "ARCHIVED"  # noncurrent versions only
        if str(action.get("type", "")).lower() == "delete" and deletes_within_a_day(condition.get("age", 0)) \
                and not narrowed:
            yield (f"{_label(resource)} has a lifecycle rule deleting every object aged {condition.get('age', 0)} "
                   f"day(s) or more: it would empty the stack's data; scope it to a prefix or remove it.")
