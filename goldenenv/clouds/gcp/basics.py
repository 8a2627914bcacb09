"""What Google Cloud's Cloud class and its cluster parts (parts.py) both use: the cloud's name, the repository's image
address, a pool's fabric and the stack's NICs and zone, a pool's pinned host image (and whether the project can read
it), a type's boot disk, the caller's project and the bucket that outlives a stack. It sits below both, so the parts
need not import the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi_gcp as gcp

from goldenenv import catalog
from goldenenv.images import host as hostlayer
from goldenenv.clouds.base import pinned_host_image
from goldenenv.clouds.gcp.nodes import PD_DISK, ROCE_DISK
from goldenenv.spec import ClusterSpec, Problem, pool_key

CLOUD = "gcp"
REGISTRY = "{region}-docker.pkg.dev/{project}/{repository}/{image}"
"""An image in an Artifact Registry Docker repository (Artifact Registry: "Push and pull images"); the stack's image
is named for its lock."""


def fabric_of(pool: Any, it: catalog.InstanceType) -> str:
    """The pool's GPU network: the type's fabric (catalog instance_types.rdma) unless the pool turns RDMA off."""
    return it.rdma if pool.rdma is not False and it.rdma not in ("", "none") else "none"


@dataclass(frozen=True)
class StackNics:
    """What the stack's networks are built for: one GPU fabric, and the most host and GPU NICs a pool's type has."""

    fabric: str
    host: int
    gpu: int


def stack_nics(spec: ClusterSpec) -> StackNics:
    """The pools' one fabric (check() refuses two) and NIC counts: a pool without the fabric (a G2 beside A3 Megas)
    takes the host NICs its type has and no GPU network."""
    pools = [(pool, catalog.instance_type(CLOUD, pool.instance_type)) for pool in spec.nodes]
    fabrics = {fabric_of(pool, it) for pool, it in pools} - {"none"}
    fabric = fabrics.pop() if len(fabrics) == 1 else "none"
    return StackNics(fabric, max(max(1, it.network_cards) for _, it in pools),
                     max((it.rdma_interfaces for pool, it in pools if fabric_of(pool, it) == fabric), default=0)
                     if fabric != "none" else 0)


def stack_zone(spec: ClusterSpec) -> str | None:
    """The zone to build in: the stack's, else the first the catalog says sells the first pool's type there."""
    if spec.placed_zone:
        return spec.placed_zone
    zones = catalog.type_zones(CLOUD, spec.nodes[0].instance_type).get(spec.region, ())
    return zones[0] if zones else None


def host_image(spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    return pinned_host_image(CLOUD, spec, pool, baked_for)


def unreadable_host_images(spec: ClusterSpec, lookup: Any) -> list[Problem]:
    """Each pool's pinned host image (the head boots the first pool's) that the project cannot read: an image of the
    user's own not built yet (the A3 Mega stack's, made with Cluster Toolkit's blueprint), a typo, another project's
    private image. Refused before anything is created, as Compute Engine would refuse the insert after the
    networks, the bucket and Lustre were made."""
    problems = []
    for i, pool in enumerate(spec.nodes):
        image = host_image(spec, pool, hostlayer.layer(spec, pool))
        if not lookup.image_readable(image):
            at = f"{pool_key(i, len(spec.nodes))}.hostImage"
            at += ".id" if pool.host_image is not None and not isinstance(pool.host_image, str) else ""
            problems.append(Problem(at, f"{image} is not an image this project can read (Compute Engine answers "
                                    "404 or 403): build it first (the stack file says how), or write an image "
                                    "that exists: projects/<project>/global/images/<name>"))
    return problems


def boot_disk_type(it: catalog.InstanceType) -> str:
    """Hyperdisk for the A3/A4 families (A3 Ultra and A4 take no Persistent Disk), pd-balanced otherwise."""
    return ROCE_DISK if it.name.startswith(("a3-", "a4-")) else PD_DISK


def _project_from_env() -> str | None:
    """The Google project the caller's tools name: GOOGLE_CLOUD_PROJECT (or the provider's other variables), else
    gcloud's configured project; None when neither says."""
    import os
    import shutil
    import subprocess

    found = next((os.environ[k] for k in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_PROJECT", "CLOUDSDK_CORE_PROJECT")
                  if os.environ.get(k)), None)
    if found or not shutil.which("gcloud"):
        return found
    done = subprocess.run(["gcloud", "config", "get-value", "project"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or None if done.returncode == 0 else None


def _live_project() -> str:
    """Inside the program: the caller's project, else the provider's own (`gcp:project` in the stack file)."""
    return _project_from_env() or gcp.organizations.get_project().project_id


@dataclass(frozen=True)
class RetainedStores:
    bucket: str
    adopt_bucket: str | None

    @classmethod
    def find(cls, spec: ClusterSpec, lookup: Any) -> RetainedStores:
        """A bucket labelled for another project or stack under the derived name is refused (storage.adoptable)."""
        from goldenenv.clouds.gcp import storage

        bucket = spec.storage.bucket.bucket_name or storage.bucket_name(
            spec.tags.project, spec.stack, lookup.project_id(), spec.region)
        return cls(bucket, storage.adoptable(lookup.bucket(bucket), spec.tags.project, spec.stack))
