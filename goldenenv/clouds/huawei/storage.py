"""The stack's data on Huawei Cloud: an OBS bucket that outlives the stack (private, encrypted, versioned; kept on
destroy, adopted by the next up) and, with a shared file system, SFS Turbo HPC on the nodes' network linked to the
bucket by its backend target (obslink.py), which destroy exports through before deleting the file system.

Nodes mount SFS Turbo over NFS (share_proto NFS) at its export location (templates/node/sfs-turbo-mount.sh.j2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_huaweicloud as huaweicloud

from goldenenv.clouds.huawei.obslink import LINKED_FOLDER, BackendTarget, obs_endpoint
from goldenenv.nodeboot import SharedFs

TURBO_SHARE_TYPE = "HPC"
TURBO_BANDWIDTH = "40M"
"""HPC at 40 MB/s/TiB: the smaller minimum (1,228 GB: limits.SFS_TURBO_HPC_MIN_GIB) of the types the backend target
takes (20/40/125/250/500/1000 MB/s/TiB)."""
SSE_ALGORITHM = "AES256"
"""obs.Bucket sse_algorithm: SSE-OBS with keys OBS keeps (kms is the other choice, with a DEW key)."""
SHAREDFS_UNIT = "goldenenv-sharedfs.service"
BUCKET_KEY = "goldenenv:storage.bucket.name"


def turbo_mount(export_location: str) -> SharedFs:
    return SharedFs(SHAREDFS_UNIT, "sfs-turbo-mount.sh", {"export_location": export_location,
                                                          "linked_folder": LINKED_FOLDER})


class HuaweiLookup(Protocol):
    def bucket_exists(self, name: str) -> bool: ...


@dataclass(frozen=True)
class OfflineLookup:
    """The offline plan's account: nothing exists yet."""

    existing: frozenset[str] = frozenset()

    def bucket_exists(self, name: str) -> bool:
        return name in self.existing


class LiveLookup:
    """Whether a bucket answers: OBS answers an unsigned HEAD of a private bucket 403 and of a missing one 404 (the
    S3-compatible behaviour OBS documents for HeadBucket; unverified on an account)."""

    def __init__(self, region: str):
        self.region = region

    def bucket_exists(self, name: str) -> bool:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"https://{name}.{obs_endpoint(self.region)}/", method="HEAD")
        try:
            urllib.request.urlopen(request, timeout=15)
        except urllib.error.HTTPError as e:
            return e.code != 404
        return True


@dataclass(frozen=True, kw_only=True)
class DataStoreArgs:
    bucket: str
    adopt_bucket: bool
    region: str
    zone: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    parallel_fs: bool
    fs_size_gib: int = 0
    tags: dict[str, str] = field(default_factory=dict)


class DataStore(pulumi.ComponentResource):
    """The OBS bucket, kept on destroy; with a shared file system, SFS Turbo HPC in the nodes' subnet and security
    group, and its backend target to the bucket."""

    bucket_name: pulumi.Output[str]
    share_id: pulumi.Output[str] | None
    target_id: pulumi.Output[str] | None
    mount: pulumi.Output[SharedFs | None]

    def __init__(self, name: str, args: DataStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:DataStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        bucket = huaweicloud.obs.Bucket(
            f"{name}-bucket", bucket=args.bucket, acl="private", versioning=True, encryption=True,
            sse_algorithm=SSE_ALGORITHM, force_destroy=False, tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, protect=False,
                                        import_=args.bucket if args.adopt_bucket else None))
        self.bucket_name = bucket.bucket
        self.share_id = self.target_id = None
        self.mount = pulumi.Output.from_input(None)
        if args.parallel_fs:
            fs = huaweicloud.sfs.Turbo(
                f"{name}-turbo", name=f"{name}-turbo"[:64], availability_zone=args.zone, vpc_id=args.vpc_id,
                subnet_id=args.subnet_id, security_group_id=args.security_group_id, size=args.fs_size_gib,
                share_type=TURBO_SHARE_TYPE, hpc_bandwidth=TURBO_BANDWIDTH, share_proto="NFS", tags=args.tags,
                opts=child)
            link = BackendTarget(f"{name}-obs-link", region=args.region, share_id=fs.id, bucket=bucket.bucket,
                                 endpoint=obs_endpoint(args.region), opts=child)
            self.share_id, self.target_id = fs.id, link.id
            self.mount = fs.export_location.apply(turbo_mount)
        self.register_outputs({"bucket": self.bucket_name, "share_id": self.share_id, "target_id": self.target_id})


def bucket_outputs(data: DataStore) -> dict[str, Any]:
    return {"bucket": data.bucket_name, "sharedFs": data.share_id, "fileSystemId": data.share_id,
            "backendTargetId": data.target_id}
