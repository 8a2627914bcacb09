"""The stack's data on Tencent Cloud: a COS bucket that outlives the stack (kept on destroy, adopted by the next up)
and, with a shared file system, CFS Turbo on the nodes' network linked to the bucket by a data flow (dataflow.py),
which destroy exports through before deleting the file system.

CFS Turbo sits on a CCN (Cloud Connect Network) the stack's VPC joins: the provider's FileSystem docstring ties
Turbo to net_interface CCN (the current API also allows VPC), with a CIDR of its own outside the VPC's (TURBO_CIDR).
Its capacity is at least limits.TURBO_MIN_GIB. Nodes mount it with Tencent's private-protocol Turbo client
(templates/node/cfs-turbo-mount.sh.j2), not NFS.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv.clouds.tencent.dataflow import TARGET_ROOT, DataFlow
from goldenenv.nodeboot import SharedFs

PLACEHOLDER_APPID = "1250000000"
"""The app id the offline plan writes in bucket names (a COS bucket is <name>-<appid>)."""
TURBO_STORAGE_TYPE = "TP"
"""Turbo high-performance: the smaller of Turbo's two minimums (limits.TURBO_MIN_GIB)."""
TURBO_CIDR = ipaddress.ip_network("172.31.254.0/24")
"""The CCN range the Turbo file system takes: outside every VPC range goldenenv's checks let a stack use
(Cloud.check refuses a VPC that overlaps it)."""
TURBO_PATH = "goldenenv/"
"""The folder of the file system the data flow links to the bucket's root (TargetPath /cfs/<it>)."""
SHAREDFS_UNIT = "goldenenv-sharedfs.service"
BUCKET_KEY = "goldenenv:storage.bucket.name"


def bucket_full_name(name: str, appid: str) -> str:
    return f"{name}-{appid}"


def cos_address(bucket: str, region: str) -> str:
    """The bucket's address as a data flow's SourceStorageAddress takes it (cos.<region>.myqcloud.com; unverified
    beyond CreateDataFlow's field)."""
    return f"https://{bucket}.cos.{region}.myqcloud.com"


def turbo_mount(fs_id: str, mount_ip: str) -> SharedFs:
    return SharedFs(SHAREDFS_UNIT, "cfs-turbo-mount.sh", {"fs_id": fs_id, "mount_ip": mount_ip})


class TencentLookup(Protocol):
    def appid(self) -> str: ...
    def bucket_exists(self, name: str) -> bool: ...


@dataclass(frozen=True)
class OfflineLookup:
    """The offline plan's account: nothing exists yet, a placeholder app id."""

    existing: frozenset[str] = frozenset()

    def appid(self) -> str:
        return PLACEHOLDER_APPID

    def bucket_exists(self, name: str) -> bool:
        return name in self.existing


class LiveLookup:
    """The caller's account: its app id (CAM GetUserAppId) and whether a bucket answers (COS answers an unsigned
    HEAD of a private bucket 403, of a missing one 404)."""

    def __init__(self, region: str, call: Any = None):
        self.region, self._call = region, call

    def _api(self) -> Any:
        if self._call is None:
            from goldenenv.clouds.tencent import api

            self._call = api.client(api.credentials_from_env(), self.region)
        return self._call

    def appid(self) -> str:
        return str(self._api()("cam", "2019-01-16", "GetUserAppId", {})["AppId"])

    def bucket_exists(self, name: str) -> bool:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"https://{name}.cos.{self.region}.myqcloud.com/", method="HEAD")
        try:
            urllib.request.urlopen(request, timeout=15)
        except urllib.error.HTTPError as e:
            return e.code != 404
        return True


@dataclass(frozen=True, kw_only=True)
class DataStoreArgs:
    bucket: str
    """The full bucket name, <name>-<appid>."""
    adopt_bucket: bool
    region: str
    zone: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    parallel_fs: bool
    fs_size_gib: int = 0
    tags: dict[str, str] = field(default_factory=dict)


class DataStore(pulumi.ComponentResource):
    """The COS bucket, kept on destroy; with a shared file system, CFS Turbo on a CCN with the VPC attached, its
    permission group (the VPC's range, read-write) and the data flow to the bucket."""

    bucket_name: pulumi.Output[str]
    fs_id: pulumi.Output[str] | None
    """The file system's ID (cfs-...), which the data flow and the stack's outputs name."""
    data_flow_id: pulumi.Output[str] | None
    mount: pulumi.Output[SharedFs | None]

    def __init__(self, name: str, args: DataStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:DataStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        bucket = tencentcloud.cos.Bucket(
            f"{name}-bucket", bucket=args.bucket, acl="private", versioning_enable=True,
            encryption_algorithm="AES256", tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, protect=False,
                                        import_=args.bucket if args.adopt_bucket else None))
        self.bucket_name = bucket.bucket
        self.fs_id = self.data_flow_id = None
        self.mount = pulumi.Output.from_input(None)
        if args.parallel_fs:
            ccn = tencentcloud.ccn.Instance(f"{name}-ccn", name=f"{name}-turbo"[:60],
                                            description="CFS Turbo's network, joined by the stack's VPC",
                                            tags=args.tags, opts=child)
            tencentcloud.ccn.AttachmentV2(f"{name}-ccn-vpc", ccn_id=ccn.id, instance_id=args.vpc_id,
                                          instance_region=args.region, instance_type="VPC", opts=child)
            group = tencentcloud.cfs.AccessGroup(f"{name}-turbo-access", name=f"{name}-turbo"[:64],
                                                 description="the stack's VPC, read-write", opts=child)
            tencentcloud.cfs.AccessRule(f"{name}-turbo-vpc", access_group_id=group.id, auth_client_ip=args.vpc_cidr,
                                        priority=1, rw_permission="RW", user_permission="no_root_squash",
                                        opts=child)
            fs = tencentcloud.cfs.FileSystem(
                f"{name}-turbo", name=f"{name}-turbo"[:64], availability_zone=args.zone,
                access_group_id=group.id, storage_type=TURBO_STORAGE_TYPE, protocol="TURBO", net_interface="CCN",
                ccn_id=ccn.id, cidr_block=str(TURBO_CIDR), capacity=args.fs_size_gib, tags=args.tags, opts=child)
            flow = DataFlow(f"{name}-flow", region=args.region, file_system_id=fs.id,
                            bucket_address=bucket.bucket.apply(lambda b: cos_address(b, args.region)),
                            source_path="/", target_path=TARGET_ROOT + TURBO_PATH, opts=child)
            self.fs_id, self.data_flow_id = fs.id, flow.id
            # the mount names the file system by its mount root (the provider's fs_id, "Mount root-directory"), not
            # by its ID (cfs-...): Tencent's Turbo mount is <mount ip>@tcp0:/<fsid>/cfs
            self.mount = pulumi.Output.all(fs.fs_id, fs.mount_ip).apply(lambda v: turbo_mount(v[0], v[1]))
        self.register_outputs({"bucket": self.bucket_name, "fs_id": self.fs_id, "data_flow_id": self.data_flow_id})
