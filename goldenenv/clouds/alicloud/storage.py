"""Storage tiers on Alibaba Cloud: an OSS bucket that outlives the cluster, and a shared file system beside it.

The bucket is the durable tier (datasets in, checkpoints out): private, versioned, encrypted, public access
blocked, retained on destroy, named the same on every `up` (bucket_name) and adopted by the next `up` when it
already exists (Pulumi import). The shared file system is a fast view for the nodes:

- CPFS (general-purpose) where the region offers it: a file system, a fileset linked to the whole bucket by a data
  flow (objects appear as files, loaded on demand; files written reach the bucket only through data flow export
  tasks, which `destroy` runs first: dataflow.py), and an NFS
  protocol service whose export of the fileset the nodes mount (the CPFS-NFS client when the host image has it,
  else the kernel's NFSv3 client). The bucket carries the tag `cpfs-dataflow=true`, which a data flow requires.
- elsewhere NAS extreme: a file system and a VPC mount target, mounted over NFSv3; not linked to the bucket, so
  checkpoints meant to outlive the stack are written to the bucket.

The bucket is kept out of the stack's resource group: destroy deletes that group, and Alibaba deletes no resource
group that still holds a resource (DeleteResourceGroup: "Before you delete a resource group, you must delete all
the resources in it"; error DeleteConflict.ResourceGroup.Resource, which terraform-provider-alicloud retries,
aliyun/terraform-provider-alicloud#6109), so a retained bucket in it would make every destroy fail. It goes to the
account's default resource group, which cannot be deleted (Resource Management, "Delete a resource group"); the
stack's tags still name it, and the budget guard's split bill reads tags, not groups. The ACR namespace and
repository take no resource group.

pulumi-alicloud 4.0.0 gives no domain for a CPFS export (nas.ProtocolMountTarget outputs only its export id), so
the node resolves it at boot from the NAS API with its instance RAM role (templates/node/cpfs-mount.sh.j2): the
node's role needs NODE_MOUNT_ACTIONS.

Lookups (which account, which retained bucket, namespace and repository exist) are the only calls a build makes
outside Pulumi: `pulumi up` makes them live (LiveLookup: the account through STS, signed with the standard library;
the bucket with the OSS SDK `oss2`, the ACR namespace and repository with `alibabacloud-cr20160607`; without them
a clear error says what to install), the offline plan answers from OfflineLookup, which knows of nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_alicloud as alicloud

from goldenenv.clouds.alicloud import budget, guard, privilege, registry
from goldenenv.clouds import stores
from goldenenv.clouds.base import stable_number
from goldenenv.clouds.stores import Found
from goldenenv.nodeboot import SharedFs
from goldenenv.spec import ConfigError, Problem

# ---------------------------------------------------------------- the provider's enum strings, checked by tests

CPFS, NAS = "cpfs", "nas"
FS_KINDS = (CPFS, NAS)
CPFS_FILE_SYSTEM_TYPE = CPFS_PROTOCOL_TYPE = "cpfs"
CPFS_STORAGE_TYPES = {100: "advance_100", 200: "advance_200"}
"""MB/s per TiB of baseline throughput -> CPFS storage type (pulumi-alicloud nas.FileSystem storage_type)."""
DEFAULT_THROUGHPUT_PER_TIB = 100
"""What a stack gets when it does not set parallelFs.throughputPerTib (whose default, 250, is FSx's)."""
EXTREME_FILE_SYSTEM_TYPE = "extreme"
EXTREME_PROTOCOL_TYPE = "NFS"
EXTREME_STORAGE_TYPES = {100: "standard", 200: "advance"}
EXTREME_ENCRYPT_TYPE = 1
"""NAS-managed key (encrypt_type 1 is offered for standard and extreme NAS; CPFS takes no encrypt_type)."""
DATAFLOW_THROUGHPUTS = (600, 1200, 1500)
"""nas.DataFlow throughput, MB/s: the only values the API takes; it must stay below the file system's bandwidth."""
DATAFLOW_BUCKET_NAME_MIN = 8
"""A data flow's source bucket name has at least 8 characters (check_args)."""
DATAFLOW_TAG = {"cpfs-dataflow": "true"}
"""A data flow reads only a bucket tagged so (CPFS "Manage dataflows", prerequisites)."""
PROTOCOL_TYPE, PROTOCOL_SPEC = "NFS", "General"
"""The CPFS protocol service: NFSv3, the free General specification."""
VPC_NETWORK = "Vpc"
DEFAULT_ACCESS_GROUP = "DEFAULT_VPC_GROUP_NAME"
"""NAS's default VPC permission group: any address of the VPC may mount (the mount target is reachable only from
the VPC; the stack's security groups decide which hosts get there)."""
SSE_ALGORITHM = "AES256"
"""OSS-managed keys: transparent to every authorized reader, the CPFS data flow's service role included, and no
KMS charges; KMS would also need the data flow's role granted on the key."""
VERSIONING_STATUS = "Enabled"
BUCKET_ACL = "private"
BUCKET_REDUNDANCY = "LRS"
BUCKET_STORAGE_CLASS = "Standard"
ABORT_MULTIPART_DAYS = 7
SUB_RESOURCE_SETTINGS = ("acl", "versioning", "serverSideEncryptionRule")
"""Bucket settings owned by oss.BucketAcl, oss.BucketVersioning and oss.BucketServerSideEncryption."""

CPFS_REGIONS = frozenset({
    "cn-qingdao", "cn-beijing", "cn-zhangjiakou", "cn-huhehaote", "cn-wulanchabu", "cn-hangzhou", "cn-shanghai",
    "cn-shenzhen", "cn-heyuan", "cn-chengdu", "ap-southeast-1",
})
"""Regions with CPFS general-purpose, whose data flows link filesets to OSS: the regions of CPFS's API endpoints
(help.aliyun.com/zh/cpfs/developer-reference/integration-overview, "服务接入点"). Data flows need CPFS 2.2.0 or
later, which a new file system is; per-zone stock is not in this table."""
FILESET_PATH = "/goldenenv/"
"""The fileset linked to the bucket: the bucket's keys are its paths (checkpoints/ -> <mount>/checkpoints/)."""
CPFS_EXPORT_ROOT = "/share"
"""CPFS exports appear under /share (`<domain>:/share/<fileset>`, alibabacloud-nas-utils README)."""
EXTREME_EXPORT = "/share"
"""NAS extreme mounts `<mount target domain>:/share` (NAS documentation)."""
NFS_OPTIONS = "vers=3,nolock,proto=tcp,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport"
CPFS_NFS_OPTIONS = "vers=3,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport"
"""The CPFS-NFS client's documented mount options (alibabacloud-nas-utils README, mount.cpfs-nfs)."""
SHAREDFS_UNIT = "goldenenv-sharedfs.service"
NAS_API_VERSION = "2017-06-26"
NODE_MOUNT_ACTIONS = privilege.MOUNT_ACTIONS
"""What a node's instance RAM role needs to mount CPFS (the export's domain is looked up at boot): the
least-privilege table's (alicloud/privilege.py)."""


# ---------------------------------------------------------------- names and adoption

PLACEHOLDER_ACCOUNT = "0000000000000000"
"""The account the offline plan shows in names (Alibaba Cloud account ids are 16 digits); the real one is read
at `up`."""
BUCKET_KEY = "goldenenv:storage.bucket.bucketName"
RETAINED_GROUP = "the account's default resource group"
"""Where the retained bucket lives: outside the stack's resource group, which destroy deletes (module docstring)."""
OSS_NAME_MIN, OSS_NAME_MAX = 3, 63
OSS_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def bucket_name(project: str, stack: str, account: str, region: str) -> str:
    """`<project>-<stack>-<account>-<region>` in OSS's alphabet (3-63 lowercase letters, digits and `-`, starting
    and ending with a letter or digit), the same on every `up`.

    Text OSS cannot hold becomes `-`; when that loses anything, or the name must be shortened, an 8-hex digest of
    the exact project and stack is appended, so `Dev` and `dev`, or `a_b` and `a-b`, never share a bucket.
    """
    project_slug, stack_slug = _slug(project), _slug(stack)
    tail = f"-{_slug(account)}-{_slug(region)}"
    head = "-".join(part for part in (project_slug, stack_slug) if part)
    room = OSS_NAME_MAX - len(tail)
    if project_slug != project or stack_slug != stack or len(head) > room or not head:
        digest = hashlib.sha256(f"{project}\0{stack}".encode()).hexdigest()[:8]
        head = "-".join(part for part in (head[:room - len(digest) - 1].rstrip("-"), digest) if part)
    return head + tail


def valid_bucket_name(name: str) -> bool:
    return bool(OSS_NAME.fullmatch(name))


class AlicloudLookup(Protocol):
    def account_id(self) -> str: ...

    def bucket(self, name: str) -> Found | None: ...

    def bucket_exists(self, name: str) -> bool: ...

    def namespace_exists(self, name: str) -> bool: ...

    def repository_exists(self, namespace: str, name: str) -> bool: ...


@dataclass
class OfflineLookup:
    """The offline plan's answers: a placeholder account, and only the stores a caller (a test) says exist."""

    account: str = PLACEHOLDER_ACCOUNT
    buckets: dict[str, Found] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    repositories: set[str] = field(default_factory=set)
    """`<namespace>/<repository>` of image repositories that exist."""

    def account_id(self) -> str:
        return self.account

    def bucket(self, name: str) -> Found | None:
        return self.buckets.get(name)

    def bucket_exists(self, name: str) -> bool:
        return self.bucket(name) is not None

    def namespace_exists(self, name: str) -> bool:
        return name in self.namespaces

    def repository_exists(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.repositories


OSS_SDK = "oss2"
ACR_SDK = "alibabacloud-cr20160607"


def _missing(package: str, what: str) -> RuntimeError:
    return RuntimeError(f"{what} needs the Alibaba Cloud SDK package {package!r}, which is not installed: "
                        f"pip install {package}")


def credentials_from_env(env: Mapping[str, str] | None = None) -> guard.Credentials:
    """The caller's credentials, from the variables the Alibaba Cloud CLI and SDKs read, or pulumi-alicloud's."""
    env = os.environ if env is None else env
    for key_id, secret, token in (("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                                   "ALIBABA_CLOUD_SECURITY_TOKEN"),
                                  ("ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY", "ALICLOUD_SECURITY_TOKEN")):
        if env.get(key_id) and env.get(secret):
            return guard.Credentials(env[key_id], env[secret], env.get(token) or None)
    raise ConfigError([Problem("goldenenv:region", "no Alibaba Cloud credentials: set ALIBABA_CLOUD_ACCESS_KEY_ID "
                               "and ALIBABA_CLOUD_ACCESS_KEY_SECRET (or ALICLOUD_ACCESS_KEY / ALICLOUD_SECRET_KEY)")])


class LiveLookup:
    """The same questions asked of Alibaba Cloud with the caller's credentials (what `pulumi up` uses)."""

    def __init__(self, region: str, credentials: guard.Credentials | None = None, sts: guard.Call | None = None):
        self.region = region
        self._credentials = credentials
        self._sts = sts
        self._account: str | None = None

    @property
    def credentials(self) -> guard.Credentials:
        if self._credentials is None:
            self._credentials = credentials_from_env()
        return self._credentials

    def account_id(self) -> str:
        """The caller's account id (STS GetCallerIdentity): the stack's bucket name includes it."""
        if self._account is None:
            sts = self._sts or guard.rpc_client("sts.aliyuncs.com", "2015-04-01", self.credentials)
            try:
                self._account = str(sts("GetCallerIdentity", {})["AccountId"])
            except (guard.ApiError, KeyError) as e:
                raise ConfigError([Problem("goldenenv:region", f"cannot read the Alibaba Cloud account ({e}); the "
                                           "stack's bucket name includes it: check the credentials")]) from None
        return self._account

    def bucket(self, name: str) -> Found | None:
        return oss_bucket(name, self.region, self.credentials).find()

    def bucket_exists(self, name: str) -> bool:
        return self.bucket(name) is not None

    def namespace_exists(self, name: str) -> bool:
        return AcrApi(self.region, self.credentials).namespace_exists(name)

    def repository_exists(self, namespace: str, name: str) -> bool:
        return AcrApi(self.region, self.credentials).repository_exists(namespace, name)


class AcrApi:
    """ACR personal edition calls with its SDK (`alibabacloud-cr20160607`: GetNamespace, GetRepo, DeleteRepo). The
    2016-06-07 API is ROA (REST paths, a different signature), which guard.py's RPC signer does not speak."""

    def __init__(self, region: str, credentials: guard.Credentials,
                 purpose: str = "finding a retained ACR namespace or repository"):
        try:
            from alibabacloud_cr20160607.client import Client
            from alibabacloud_tea_openapi.models import Config
        except ImportError:
            raise _missing(ACR_SDK, purpose) from None
        self.client = Client(Config(access_key_id=credentials.access_key_id,
                                    access_key_secret=credentials.access_key_secret,
                                    security_token=credentials.security_token, region_id=region,
                                    endpoint=f"cr.{region}.aliyuncs.com"))

    def namespace_exists(self, name: str) -> bool:
        return _found(lambda: self.client.get_namespace(name))

    def repository_exists(self, namespace: str, name: str) -> bool:
        return _found(lambda: self.client.get_repo(namespace, name))

    def delete_repository(self, namespace: str, name: str) -> bool:
        """DeleteRepo (DELETE /repos/{namespace}/{name}), which deletes its images too; False if it is gone."""
        return _found(lambda: self.client.delete_repo(namespace, name))


def _found(call: Callable[[], Any]) -> bool:
    """Whether a Get (or Delete) call finds its object: a 404 or a *_NOT_EXIST code is absent, any other error is
    raised."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - Tea.exceptions.TeaException, imported with the SDK
        if getattr(e, "statusCode", None) == 404 or "NOT_EXIST" in str(getattr(e, "code", "") or "").upper():
            return False
        raise
    return True


class RepositoryApi(Protocol):
    """The ACR call `destroy --purge-data` makes; AcrApi does it with the SDK."""

    def delete_repository(self, namespace: str, name: str) -> bool: ...


def purge_repository(namespace: str, name: str, region: str, log: Callable[[str], None] = print,
                     client: RepositoryApi | None = None) -> bool:
    """Delete the stack's retained image repository and its images, by name; False if it no longer exists. The
    namespace stays: it is the project's, shared by its stacks."""
    acr = client or AcrApi(region, credentials_from_env(), "deleting the stack's ACR repository")
    if not acr.delete_repository(namespace, name):
        return False
    log(f"purged image repository {namespace}/{name}")
    return True


def adoptable(found: Found | None, project: str, stack: str, key: str = BUCKET_KEY, kind: str = "bucket") -> str | None:
    """stores.adoptable, for the bucket by default."""
    return stores.adoptable(found, project, stack, key, kind)


# ---------------------------------------------------------------- the OSS calls outside Pulumi (SDK when installed)

class BucketApi(Protocol):
    """The few OSS calls goldenenv makes outside Pulumi, on one bucket; OssBucket does them with `oss2`."""

    name: str

    def find(self) -> Found | None: ...

    def put_tags(self, tags: Mapping[str, str]) -> None: ...

    def versions(self, key_marker: str, version_marker: str) -> tuple[list[tuple[str, str]], str, str, bool]:
        """One page of (key, version id) of every object version and delete marker; the next markers; truncated."""

    def delete_versions(self, batch: list[tuple[str, str]]) -> None: ...

    def delete_bucket(self) -> None: ...


class OssBucket:
    """BucketApi with the OSS SDK (`oss2`), over the region's public endpoint."""

    def __init__(self, name: str, region: str, credentials: guard.Credentials):
        try:
            import oss2
        except ImportError:
            raise _missing(OSS_SDK, f"reaching OSS bucket {name}") from None
        self.oss2 = oss2
        self.name = name
        auth = (oss2.StsAuth(credentials.access_key_id, credentials.access_key_secret, credentials.security_token)
                if credentials.security_token else oss2.Auth(credentials.access_key_id, credentials.access_key_secret))
        self.bucket = oss2.Bucket(auth, f"https://oss-{region}.aliyuncs.com", name)

    def find(self) -> Found | None:
        errors = self.oss2.exceptions
        try:
            self.bucket.get_bucket_info()
        except errors.NoSuchBucket:
            return None
        except errors.AccessDenied:
            raise ConfigError([Problem(BUCKET_KEY, f"bucket {self.name} exists but this account cannot read it "
                                       "(another account owns the name); set bucketName to another name")]) from None
        tags = dict(self.bucket.get_bucket_tagging().tag_set.tagging_rule)
        return Found(self.name, tags)

    def put_tags(self, tags: Mapping[str, str]) -> None:
        rule = self.oss2.models.TaggingRule()
        for key, value in tags.items():
            rule.add(key, value)
        self.bucket.put_bucket_tagging(self.oss2.models.Tagging(rule))

    def versions(self, key_marker: str, version_marker: str) -> tuple[list[tuple[str, str]], str, str, bool]:
        page = self.bucket.list_object_versions(key_marker=key_marker, versionid_marker=version_marker, max_keys=1000)
        found = [(v.key, v.versionid) for v in page.versions] + [(m.key, m.versionid) for m in page.delete_marker]
        return found, page.next_key_marker, page.next_versionid_marker, page.is_truncated

    def delete_versions(self, batch: list[tuple[str, str]]) -> None:
        models = self.oss2.models
        listing = models.BatchDeleteObjectVersionList()
        for key, version in batch:
            listing.append(models.BatchDeleteObjectVersion(key, version))
        self.bucket.delete_object_versions(listing)

    def delete_bucket(self) -> None:
        self.bucket.delete_bucket()


def oss_bucket(name: str, region: str, credentials: guard.Credentials | None = None) -> BucketApi:
    return OssBucket(name, region, credentials or credentials_from_env())


DELETE_BATCH = 1000
"""OSS DeleteMultipleObjects takes at most 1,000 keys (or versions) a call."""


def purge_bucket(name: str, region: str, log: Callable[[str], None] = print, client: BucketApi | None = None) -> int:
    """Delete every object version and delete marker of a retained bucket, then the bucket: only ever asked for
    by name (`destroy --purge-data`). Returns how many versions were deleted."""
    bucket = client or oss_bucket(name, region)
    deleted, key_marker, version_marker = 0, "", ""
    while True:
        found, key_marker, version_marker, truncated = bucket.versions(key_marker, version_marker)
        for start in range(0, len(found), DELETE_BATCH):
            bucket.delete_versions(found[start:start + DELETE_BATCH])
            deleted += len(found[start:start + DELETE_BATCH])
        if not truncated:
            break
    bucket.delete_bucket()
    log(f"purged bucket {name} ({deleted} object versions)")
    return deleted


def align_bucket_tags(name: str, wanted: Mapping[str, str], region: str, client: BucketApi | None = None,
                      log: Callable[[str], None] = print) -> bool:
    """Give an adopted bucket the tags the stack declares (bucket_tags) before the import, so Pulumi finds no
    difference: a retained bucket keeps the tags of the stack that made it. Returns whether they changed."""
    bucket = client or oss_bucket(name, region)
    found = bucket.find()
    if found is None or dict(found.tags) == dict(wanted):
        return False
    bucket.put_tags(wanted)
    log(f"retagged retained bucket {name} to the stack's tags before adopting it")
    return True


# ---------------------------------------------------------------- the component

@dataclass(frozen=True, kw_only=True)
class DataStoreArgs:
    bucket_name: str
    """Derived from project, stack, account and region (bucket_name) or the stack's bucketName."""
    adopt_bucket: str | None
    """The retained bucket to adopt (Pulumi import) when it already exists; None to create it."""
    noncurrent_version_days: int
    parallel_fs: bool
    fs_kind: str
    """cpfs | nas (fs_kind_for gives the region's)."""
    fs_size_gib: int
    zone_id: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    vswitch_id: pulumi.Input[str]
    checkpoint_prefix: str
    resource_group_id: pulumi.Input[str] | None = None
    """The stack's resource group, for the shared file system (deleted with the stack); never the bucket's."""
    region: str | None = None
    """The stack's region: checked against CPFS_REGIONS when given; the nodes' NAS endpoint otherwise comes
    from the file system's own region."""
    fs_throughput_per_tib: int = 100
    """100 or 200 MB/s per TiB: advance_100 / advance_200 for CPFS, standard / advance for NAS extreme."""
    tags: dict[str, str]


def fs_kind_for(region: str) -> str:
    """CPFS with a data flow to the bucket where the region offers it, else NAS extreme."""
    return CPFS if region in CPFS_REGIONS else NAS


def bucket_tags(name: str, tags: Mapping[str, str], data_flow: bool) -> dict[str, str]:
    """The bucket's own tags: what an adopted bucket is retagged to before the import (align_bucket_tags)."""
    return {**tags, "Name": f"{name}-bucket", **(DATAFLOW_TAG if data_flow else {})}


def dataflow_throughput(fs_throughput_per_tib: int, fs_size_gib: int) -> int:
    """The largest data-flow throughput under the file system's baseline bandwidth (per-TiB rate x capacity), at
    least the smallest the API takes. The API refuses a flow faster than the file system; a small file system
    (under 6 TiB at 100 MB/s/TiB by this rate alone) may need a larger size or advance_200."""
    baseline = fs_throughput_per_tib * fs_size_gib / 1024
    fitting = [t for t in DATAFLOW_THROUGHPUTS if t < baseline]
    return max(fitting) if fitting else DATAFLOW_THROUGHPUTS[0]


class DataStore(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    mount: pulumi.Output[SharedFs | None]
    fs_id: pulumi.Output[str] | None
    fileset_id: pulumi.Output[str] | None
    """The CPFS fileset linked to the bucket (what `destroy` exports with a data flow task); None for NAS."""
    data_flow_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: DataStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:alicloud:DataStore", name, None, opts)
        check_args(args)
        data_flow = args.parallel_fs and args.fs_kind == CPFS
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        bucket = alicloud.oss.Bucket(
            f"{name}-bucket", bucket=args.bucket_name, storage_class=BUCKET_STORAGE_CLASS,
            redundancy_type=BUCKET_REDUNDANCY, force_destroy=False,
            lifecycle_rules=[
                {"id": "expire-old-checkpoint-versions", "enabled": True, "prefix": args.checkpoint_prefix,
                 "noncurrent_version_expirations": [{"days": args.noncurrent_version_days}]},
                {"id": "abort-incomplete-uploads", "enabled": True, "prefix": "",
                 "abort_multipart_uploads": [{"days": ABORT_MULTIPART_DAYS}]},
            ],
            # no resource_group_id: the bucket outlives the stack, so it stays in the account's default resource
            # group (RETAINED_GROUP), never in the stack's, which destroy deletes
            tags=bucket_tags(name, args.tags, data_flow),
            # import of an id already in the stack's state is a no-op, so the option may stay on every later up;
            # the settings the sub-resources below own are ignored here, as the provider's docs require: else a
            # refresh reads them into the bucket and the next up "removes" them (DeleteBucketEncryption)
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(
                import_=args.adopt_bucket, ignore_changes=list(SUB_RESOURCE_SETTINGS))),
        )
        alicloud.oss.BucketAcl(f"{name}-bucket-acl", bucket=bucket.bucket, acl=BUCKET_ACL, opts=keep)
        alicloud.oss.BucketPublicAccessBlock(f"{name}-bucket-private", bucket=bucket.bucket,
                                             block_public_access=True, opts=keep)
        alicloud.oss.BucketVersioning(f"{name}-bucket-versioning", bucket=bucket.bucket, status=VERSIONING_STATUS,
                                      opts=keep)
        alicloud.oss.BucketServerSideEncryption(f"{name}-bucket-sse", bucket=bucket.bucket,
                                                sse_algorithm=SSE_ALGORITHM, opts=keep)

        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.bucket.apply(lambda b: f"acs:oss:*:*:{b}")
        self.fs_id = self.fileset_id = self.data_flow_id = None
        if not args.parallel_fs:
            self.mount = pulumi.Output.from_input(None)
        elif data_flow:
            self.mount = self._cpfs(name, args, bucket)
        else:
            self.mount = self._extreme(name, args)
        self.register_outputs({
            "bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn, "fs_id": self.fs_id,
            "fileset_id": self.fileset_id, "data_flow_id": self.data_flow_id,
        })

    def _cpfs(self, name: str, args: DataStoreArgs, bucket: alicloud.oss.Bucket) -> pulumi.Output[SharedFs]:
        """CPFS, a fileset linked to the bucket by a data flow, and an NFS export of the fileset for the nodes."""
        child = pulumi.ResourceOptions(parent=self)
        fs = alicloud.nas.FileSystem(
            f"{name}-cpfs", file_system_type=CPFS_FILE_SYSTEM_TYPE, protocol_type=CPFS_PROTOCOL_TYPE,
            storage_type=CPFS_STORAGE_TYPES[args.fs_throughput_per_tib], capacity=args.fs_size_gib,
            zone_id=args.zone_id, vpc_id=args.vpc_id, vswitch_id=args.vswitch_id,
            description=f"goldenenv {name} parallel file system"[:128],
            resource_group_id=args.resource_group_id, tags=args.tags, opts=child,
        )
        fileset = alicloud.nas.Fileset(
            f"{name}-fileset", file_system_id=fs.id, file_system_path=FILESET_PATH,
            description="goldenenv view of the stack bucket", opts=child,
        )
        flow = alicloud.nas.DataFlow(
            f"{name}-dataflow", file_system_id=fs.id, fset_id=fileset.fileset_id,
            source_storage=bucket.bucket.apply(lambda b: f"oss://{b}"),
            throughput=dataflow_throughput(args.fs_throughput_per_tib, args.fs_size_gib),
            description="goldenenv link of the fileset to the stack bucket", opts=child,
        )
        service = alicloud.nas.ProtocolService(
            f"{name}-nfs", file_system_id=fs.id, protocol_type=PROTOCOL_TYPE, protocol_spec=PROTOCOL_SPEC,
            vpc_id=args.vpc_id, vswitch_id=args.vswitch_id, description="goldenenv NFS access for the nodes",
            opts=child,
        )
        export = alicloud.nas.ProtocolMountTarget(
            f"{name}-export", file_system_id=fs.id, protocol_service_id=service.protocol_service_id,
            fset_id=fileset.fileset_id, vpc_id=args.vpc_id, vswitch_id=args.vswitch_id,
            access_group_name=DEFAULT_ACCESS_GROUP, description="goldenenv export of the bucket fileset",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[flow]),
        )
        self.fs_id, self.fileset_id, self.data_flow_id = fs.id, fileset.fileset_id, flow.data_flow_id
        region = args.region if args.region else fs.region_id
        return pulumi.Output.all(region, fs.id, export.export_id).apply(lambda v: cpfs_mount(*v))

    def _extreme(self, name: str, args: DataStoreArgs) -> pulumi.Output[SharedFs]:
        """NAS extreme and its VPC mount target (extreme NAS takes no VPC or vSwitch itself: its mount target does)."""
        child = pulumi.ResourceOptions(parent=self)
        fs = alicloud.nas.FileSystem(
            f"{name}-nas", file_system_type=EXTREME_FILE_SYSTEM_TYPE, protocol_type=EXTREME_PROTOCOL_TYPE,
            storage_type=EXTREME_STORAGE_TYPES[args.fs_throughput_per_tib], capacity=args.fs_size_gib,
            zone_id=args.zone_id, encrypt_type=EXTREME_ENCRYPT_TYPE,
            description=f"goldenenv {name} shared file system"[:128],
            resource_group_id=args.resource_group_id, tags=args.tags, opts=child,
        )
        target = alicloud.nas.MountTarget(
            f"{name}-nas-mount", file_system_id=fs.id, network_type=VPC_NETWORK, vpc_id=args.vpc_id,
            vswitch_id=args.vswitch_id, access_group_name=DEFAULT_ACCESS_GROUP, opts=child,
        )
        self.fs_id = fs.id
        return target.mount_target_domain.apply(nas_mount)


def check_args(args: DataStoreArgs) -> None:
    """Refuse what the provider would only refuse mid-`up`."""
    if args.fs_kind not in FS_KINDS:
        raise ValueError(f"fs_kind {args.fs_kind!r} is not one of {', '.join(FS_KINDS)}")
    if args.parallel_fs and args.fs_kind == CPFS and args.region and args.region not in CPFS_REGIONS:
        raise ValueError(f"CPFS (and its data flow to OSS) is not offered in {args.region}; use NAS extreme there "
                         f"(regions with CPFS: {', '.join(sorted(CPFS_REGIONS))})")
    if args.parallel_fs and args.fs_throughput_per_tib not in CPFS_STORAGE_TYPES:  # no tier without a file system
        raise ValueError(f"fs_throughput_per_tib {args.fs_throughput_per_tib} is not one of "
                         f"{', '.join(map(str, CPFS_STORAGE_TYPES))}")
    if not valid_bucket_name(args.bucket_name):
        raise ValueError(f"{args.bucket_name!r} is not an OSS bucket name (3-63 lowercase letters, digits, '-')")
    if args.parallel_fs and args.fs_kind == CPFS and len(args.bucket_name) < DATAFLOW_BUCKET_NAME_MIN:
        raise ValueError(f"a CPFS data flow needs a bucket name of 8 characters or more, not {args.bucket_name!r}")


# ---------------------------------------------------------------- the mount adapter

def cpfs_mount(region: str, file_system_id: str, export_id: str) -> SharedFs:
    """How a node mounts the CPFS export of the bucket's fileset (templates/node/cpfs-mount.sh.j2)."""
    return SharedFs(SHAREDFS_UNIT, "cpfs-mount.sh", {
        "file_system_id": file_system_id, "export_id": export_id,
        "export_path": CPFS_EXPORT_ROOT + FILESET_PATH.rstrip("/"),
        "nas_endpoint": f"nas-vpc.{region}.aliyuncs.com", "nas_api_version": NAS_API_VERSION,
        "options": CPFS_NFS_OPTIONS, "fallback_options": NFS_OPTIONS,
    })


def nas_mount(mount_target_domain: str) -> SharedFs:
    """How a node mounts NAS extreme over NFSv3 (templates/node/nas-mount.sh.j2)."""
    return SharedFs(SHAREDFS_UNIT, "nas-mount.sh", {
        "source_path": f"{mount_target_domain}:{EXTREME_EXPORT}", "options": NFS_OPTIONS,
    })


# ---------------------------------------------------------------- the offline plan's answers

def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What Alibaba Cloud computes for the data store's, the image repository's and the budget guard's
    resources, as stand-ins marked mock; None for other types. Values depend on the resource alone
    (stable_number), never on registration order."""
    return _storage_mock(args) or registry.plan_mock(args) or budget.plan_mock(args)


def _storage_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    typ, inputs = args.typ, args.inputs
    n = stable_number(f"{typ}::{args.name}")
    if typ == "alicloud:oss/bucket:Bucket":
        name = inputs.get("bucket") or f"{args.name}-{n % 16**7:07x}"
        return name, {"bucket": name, "extranetEndpoint": "oss-mock.aliyuncs.com",
                      "intranetEndpoint": "oss-mock-internal.aliyuncs.com", "location": "oss-mock",
                      "owner": PLACEHOLDER_ACCOUNT, "creationDate": "mock"}
    if typ == "alicloud:nas/fileSystem:FileSystem":
        prefix = "cpfs" if inputs.get("fileSystemType") == CPFS_FILE_SYSTEM_TYPE else "extreme"
        return f"{prefix}-{n % 16**16:016x}", {"status": "Running", "regionId": "mock"}
    fs = str(inputs.get("fileSystemId", "mock-fs"))
    if typ == "alicloud:nas/fileset:Fileset":
        fileset = f"fset-{n % 16**16:016x}"
        return f"{fs}:{fileset}", {"filesetId": fileset, "status": "CREATED"}
    if typ == "alicloud:nas/dataFlow:DataFlow":
        flow = f"df-{n % 16**16:016x}"
        return f"{fs}:{flow}", {"dataFlowId": flow, "status": "Running"}
    if typ == "alicloud:nas/protocolService:ProtocolService":
        service = f"ptc-{n % 16**16:016x}"
        return f"{fs}:{service}", {"protocolServiceId": service, "status": "Running"}
    if typ == "alicloud:nas/protocolMountTarget:ProtocolMountTarget":
        export = f"exp-{n % 16**16:016x}"
        return f"{fs}:{inputs.get('protocolServiceId', 'ptc-mock')}:{export}", {"exportId": export,
                                                                                "status": "Active"}
    if typ == "alicloud:nas/mountTarget:MountTarget":
        domain = f"{n % 16**10:010x}-mock.extreme.nas.aliyuncs.com"
        return f"{fs}:{domain}", {"mountTargetDomain": domain, "status": "Active"}
    return None

