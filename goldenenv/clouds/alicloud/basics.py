"""What Alibaba Cloud's Cloud class and its cluster parts (parts.py) both use: the cloud's name, the stores that
outlive a stack (RetainedStores), the stack's shared file system kind and tier, a pool's ERIs, the resource group's
name and a pool's pinned host image. It sits below both, so the parts need not import the package.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.alicloud import storage
from goldenenv.clouds.alicloud.registry import repository_names
from goldenenv.clouds.base import pinned_host_image
from goldenenv.spec import ClusterSpec

CLOUD = "alicloud"
RESOURCE_GROUP_NAME_MAX = 50


@dataclass(frozen=True)
class RetainedStores:
    """The names of what outlives the stack, and which of them already exist to be adopted."""

    bucket: str
    adopt_bucket: str | None
    adopt_namespace: bool
    adopt_repo: bool

    @classmethod
    def find(cls, spec: ClusterSpec, lookup: storage.AlicloudLookup) -> RetainedStores:
        """A bucket of another project or stack under the derived name is refused (storage.adoptable)."""
        project = spec.tags.project
        bucket = spec.storage.bucket.bucket_name or storage.bucket_name(
            project, spec.stack, lookup.account_id(), spec.region)
        namespace, repo = repository_names(project, spec.stack, spec.image.lock)
        return cls(bucket, storage.adoptable(lookup.bucket(bucket), project, spec.stack, storage.BUCKET_KEY, "bucket"),
                   lookup.namespace_exists(namespace), lookup.repository_exists(namespace, repo))


def shared_fs_kind(spec: ClusterSpec) -> str | None:
    """cpfs (linked to the bucket by a data flow) where the region offers CPFS, else nas (extreme, not linked);
    None without a shared file system."""
    return storage.fs_kind_for(spec.region) if spec.storage.parallel_fs.enabled else None


def fs_throughput_per_tib(spec: ClusterSpec) -> int:
    """The stack's parallelFs.throughputPerTib when it sets one, else Alibaba's default tier (the spec's own
    default is FSx's)."""
    fs = spec.storage.parallel_fs
    return fs.throughput_per_tib if "throughput_per_tib" in fs.model_fields_set else storage.DEFAULT_THROUGHPUT_PER_TIB


def eri_count(pool: Any, it: catalog.InstanceType) -> int:
    """The ERIs each node of the pool gets: the type's eRDMA interfaces unless the pool turns RDMA off."""
    return it.rdma_interfaces if (pool.rdma is not False and it.rdma == "erdma") else 0


def resource_group_name(project: str, stack: str) -> str:
    """3 to 50 letters, digits and `-`, starting with a letter; shortened with a hash so two stacks never share."""
    text = re.sub(r"[^A-Za-z0-9-]+", "-", f"goldenenv-{project}-{stack}").strip("-")
    if len(text) <= RESOURCE_GROUP_NAME_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[:RESOURCE_GROUP_NAME_MAX - 9].rstrip('-')}-{digest}"


def host_image_id(spec: ClusterSpec, pool: Any, baked_for: Any = None) -> str:
    """The pool's pinned image: the one baked for its host layer (baked_for), else the stack's own id, else the
    catalog's (public image IDs are the same everywhere)."""
    return pinned_host_image(CLOUD, spec, pool, baked_for)
