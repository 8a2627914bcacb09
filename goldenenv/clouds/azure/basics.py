"""What Azure's Cloud class and its cluster parts (parts.py) both use: the cloud's name, its zone notation, the
stack's resource group, vault and registry names, the zone a stack's machines go to, a pool's fabric and pinned host
image, and the subscription the caller's tools name. It sits below both, so the parts need not import the package.
"""

from __future__ import annotations

import re
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.azure.naming import global_name, resource_name
from goldenenv.clouds.base import pinned_host_image
from goldenenv.spec import ClusterSpec

CLOUD = "azure"
ZONE = re.compile(r"^(?P<region>[a-z][a-z0-9]*)-(?P<zone>[1-9])$")
"""goldenenv's zone notation on Azure, `<region>-<n>`: Azure's logical zone n of the region."""
REGISTRY_REPOSITORY = "goldenenv"
"""The repository nodes pull from in the stack's registry: <registry>.azurecr.io/goldenenv."""


def compute_group(project: str, stack: str) -> str:
    return resource_name("rg", project, stack, limit=90)


def vault_name(project: str, stack: str, subscription: str) -> str:
    """Key Vault names: 3-24 letters, digits and hyphens, a letter first."""
    return global_name("kv", project, stack, subscription, 24, hyphens=True)


def registry_name(project: str, stack: str, subscription: str) -> str:
    """Container registry names: 5-50 letters and digits."""
    return global_name("ge", project, stack, subscription, 50, hyphens=False)


def logical_zone(spec: ClusterSpec) -> str | None:
    """Azure's zone number for the stack's zone (eastus-1 -> "1"), else the first the catalog says sells the first
    pool's size; None: regional."""
    if spec.placed_zone:
        found = ZONE.fullmatch(spec.placed_zone)
        return found["zone"] if found else None
    zones = catalog.type_zones(CLOUD, spec.nodes[0].instance_type).get(spec.region, ())
    return ZONE.fullmatch(zones[0])["zone"] if zones and ZONE.fullmatch(zones[0]) else None


def fabric_of(pool: Any, it: catalog.InstanceType) -> str:
    return it.rdma if pool.rdma is not False and it.rdma not in ("", "none") else "none"


def host_image(spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    return pinned_host_image(CLOUD, spec, pool, baked_for)


def _subscription_from_env() -> str:
    """The subscription the caller's tools name: ARM_SUBSCRIPTION_ID / AZURE_SUBSCRIPTION_ID, else the Azure CLI's."""
    import os
    import shutil
    import subprocess

    found = os.environ.get("ARM_SUBSCRIPTION_ID") or os.environ.get("AZURE_SUBSCRIPTION_ID")
    if found:
        return found
    if shutil.which("az"):
        done = subprocess.run(["az", "account", "show", "--query", "id", "--output", "tsv"], capture_output=True,
                              text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    raise RuntimeError("no Azure subscription: set ARM_SUBSCRIPTION_ID, or `az login` and `az account set "
                       "--subscription ID`")
