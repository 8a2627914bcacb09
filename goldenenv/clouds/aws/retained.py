"""What outlives an AWS stack, and how the next `up` finds it again.

The data bucket (datasets, checkpoints) and the image repository (the golden images nodes pull by digest) are
retained on destroy. Their names are derived from project, stack, account and region alone, so the next `up` of
the same stack computes the same names and adopts what it finds (Pulumi's `import` option) instead of creating an
empty twin beside the retained store. A store found under that name but tagged for another project or stack is
never adopted: that is a configuration error naming the key that picks another name.

Lookups are the only AWS calls a build makes outside Pulumi. `pulumi up` makes them live, with the caller's
credentials (`LiveLookup`); the offline plan answers from `OfflineLookup`, which by default knows of nothing.

An adoption must be right whichever way Pulumi imports: older engines refuse an import whose inputs differ from
the live store, current ones (pulumi/pulumi#19339) import and then update it. So the program declares for an
adopted store exactly what the first `up` created, and only what the cloud stores (no provider-only flag such as
force_destroy an import cannot read back); `before_up` aligns what can be changed in place (tags, the repository's
tag mutability and scanning) first; and a store that differs in what cannot change without replacing it (a bucket
in another region, a repository with another encryption) is refused here, before `up`. Every retained store is
`retain_on_delete`, so no destroy and no replacement ever deletes one; they are not `protect`ed, which would make
every `pulumi destroy` of the stack fail.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from goldenenv.clouds.aws.limits import S3_BUCKET_NAME_MAX, S3_RESERVED_PREFIXES
from goldenenv.clouds.aws.registry import ENCRYPTION, SCAN_ON_PUSH, TAG_MUTABILITY
from goldenenv.clouds.stores import Found
from goldenenv.spec import ConfigError, Problem

PLACEHOLDER_ACCOUNT = "000000000000"
"""The account the offline plan shows in names: the real one is the caller's, read at `up`."""

BUCKET_KEY = "goldenenv:storage.bucket.bucketName"
REPOSITORY_KEY = "goldenenv:tags.project"
"""The key that names the image repository (goldenenv/<project>/<stack>/<lock>) apart from another's."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def data_bucket_name(project: str, stack: str, account: str, region: str) -> str:
    """`<project>-<stack>-<account>-<region>` in S3's alphabet, at most 63 characters, the same on every `up`.

    Text S3 cannot hold (capitals, `_`, `.`, spaces) becomes `-`; when that loses anything, or the name must be
    shortened, an 8-hex digest of the exact project and stack is appended, so `Dev` and `dev`, or `a_b` and
    `a-b`, never share a bucket. Dots are never used (they break virtual-hosted TLS).
    """
    project_slug, stack_slug = _slug(project), _slug(stack)
    tail = f"-{account}-{region}"
    head = "-".join(part for part in (project_slug, stack_slug) if part)
    room = S3_BUCKET_NAME_MAX - len(tail)
    if project_slug != project or stack_slug != stack or len(head) > room:
        digest = hashlib.sha256(f"{project}\0{stack}".encode()).hexdigest()[:8]
        head = "-".join(part for part in (head[:room - len(digest) - 1].rstrip("-"), digest) if part)
    if head.startswith(S3_RESERVED_PREFIXES):
        head = f"data-{head}"[:room].rstrip("-")
    return head + tail


class AwsLookup(Protocol):
    def account_id(self) -> str: ...

    def bucket(self, name: str) -> Found | None: ...

    def repository(self, name: str) -> Found | None: ...


@dataclass
class OfflineLookup:
    """The offline plan's answers: a placeholder account, and only the stores a caller (a test) says exist."""

    account: str = PLACEHOLDER_ACCOUNT
    buckets: dict[str, Found] = field(default_factory=dict)
    repositories: dict[str, Found] = field(default_factory=dict)

    def account_id(self) -> str:
        return self.account

    def bucket(self, name: str) -> Found | None:
        return self.buckets.get(name)

    def repository(self, name: str) -> Found | None:
        return self.repositories.get(name)


class LiveLookup:
    """The same questions asked of AWS with the caller's credentials (what `pulumi up` uses)."""

    def __init__(self, region: str, session=None):
        import boto3

        self.region = region
        self.session = session or boto3.Session()
        self._account: str | None = None

    def account_id(self) -> str:
        if self._account is None:
            from botocore.exceptions import BotoCoreError, ClientError

            try:
                self._account = self.session.client("sts", region_name=self.region).get_caller_identity()["Account"]
            except (BotoCoreError, ClientError) as e:
                raise ConfigError([Problem("goldenenv:region", f"cannot read the AWS account ({e}); the stack's "
                                           "store names include it: configure AWS credentials")]) from None
        return self._account

    def bucket(self, name: str) -> Found | None:
        from botocore.exceptions import ClientError

        s3 = self.session.client("s3", region_name=self.region)
        try:
            head = s3.head_bucket(Bucket=name)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket", "NotFound"):
                return None
            if code in ("403", "AccessDenied", "Forbidden"):
                raise ConfigError([Problem(BUCKET_KEY, f"bucket {name} exists but this account cannot read it "
                                           "(another account owns the name); set bucketName to another name")])
            raise
        where = head.get("BucketRegion") or head.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get(
            "x-amz-bucket-region")
        if where and where != self.region:
            raise ConfigError([Problem(BUCKET_KEY, f"bucket {name} is in {where}, the stack in {self.region}: a "
                                       "bucket cannot move, and the stack's provider would replace it rather than "
                                       "adopt it; set bucketName to a bucket in the stack's region, or another "
                                       "name")])
        try:
            tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=name).get("TagSet", [])}
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "NoSuchTagSet":
                raise
            tags = {}
        return Found(name, tags)

    def repository(self, name: str) -> Found | None:
        from botocore.exceptions import ClientError

        ecr = self.session.client("ecr", region_name=self.region)
        try:
            found = ecr.describe_repositories(repositoryNames=[name])["repositories"][0]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "RepositoryNotFoundException":
                return None
            raise
        encryption = found.get("encryptionConfiguration", {}).get("encryptionType", "AES256")
        if encryption != ENCRYPTION:
            raise ConfigError([Problem(REPOSITORY_KEY, f"image repository {name} exists with {encryption} "
                                       f"encryption, the stack's is {ENCRYPTION}: ECR cannot change a repository's "
                                       "encryption, so adopting it would replace it (and fail on its name). Move "
                                       "its images elsewhere and delete it (`aws ecr delete-repository "
                                       f"--repository-name {name} --force --region {self.region}`), or give the "
                                       "stack another name (the repository is goldenenv/<project>/<stack>/<lock>)")])
        tags = {t["Key"]: t["Value"] for t in ecr.list_tags_for_resource(resourceArn=found["repositoryArn"])["tags"]}
        return Found(name, tags)


# ---------------------------------------------------------------- before `up`: make the adoption match

def align_tags(bucket: str, wanted: Mapping[str, str], region: str, client=None,
               log: Callable[[str], None] = print) -> bool:
    """Give an adopted bucket the tags the stack declares, so Pulumi's import finds no difference.

    Older Pulumi engines refuse an import whose inputs differ from the live resource (newer ones update it after
    the import); a retained bucket keeps the tags of the stack that made it, so a tag changed since (an owner, a
    cost center) would stop the next `up` halfway. Returns whether the tags were changed.
    """
    import boto3
    from botocore.exceptions import ClientError

    s3 = client or boto3.client("s3", region_name=region)
    try:
        current = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket).get("TagSet", [])}
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "NoSuchTagSet":
            raise
        current = {}
    if current == dict(wanted):
        return False
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in wanted.items()]})
    log(f"retagged retained bucket {bucket} to the stack's tags before adopting it")
    return True


def align_repository_tags(repository: str, wanted: Mapping[str, str], region: str, client=None,
                          log: Callable[[str], None] = print) -> bool:
    """The same for an adopted image repository. Returns whether the tags were changed."""
    import boto3

    ecr = client or boto3.client("ecr", region_name=region)
    arn = ecr.describe_repositories(repositoryNames=[repository])["repositories"][0]["repositoryArn"]
    current = {t["Key"]: t["Value"] for t in ecr.list_tags_for_resource(resourceArn=arn)["tags"]}
    if current == dict(wanted):
        return False
    stale = [k for k in current if k not in wanted]
    if stale:
        ecr.untag_resource(resourceArn=arn, tagKeys=stale)
    ecr.tag_resource(resourceArn=arn, tags=[{"Key": k, "Value": v} for k, v in wanted.items()])
    log(f"retagged retained image repository {repository} to the stack's tags before adopting it")
    return True


def align_repository_settings(repository: str, region: str, client=None,
                              log: Callable[[str], None] = print) -> list[str]:
    """Give an adopted image repository the tag mutability and scan-on-push the stack declares (both change in
    place), so the import finds no difference. Returns the settings changed."""
    import boto3

    ecr = client or boto3.client("ecr", region_name=region)
    found = ecr.describe_repositories(repositoryNames=[repository])["repositories"][0]
    changed = []
    if found.get("imageTagMutability") != TAG_MUTABILITY:
        ecr.put_image_tag_mutability(repositoryName=repository, imageTagMutability=TAG_MUTABILITY)
        changed.append(f"imageTagMutability {found.get('imageTagMutability')} -> {TAG_MUTABILITY}")
    if bool(found.get("imageScanningConfiguration", {}).get("scanOnPush")) != SCAN_ON_PUSH:
        ecr.put_image_scanning_configuration(repositoryName=repository,
                                             imageScanningConfiguration={"scanOnPush": SCAN_ON_PUSH})
        changed.append(f"scanOnPush -> {SCAN_ON_PUSH}")
    if changed:
        log(f"set retained image repository {repository} to the stack's settings before adopting it: "
            + ", ".join(changed))
    return changed


# ---------------------------------------------------------------- `destroy`: export first, purge only by name

EXPORT = "EXPORT_TO_REPOSITORY"
DONE = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})


class ExportFailed(RuntimeError):
    """The parallel file system's export to the bucket did not complete: destroying it now would lose files."""


@dataclass(frozen=True)
class ExportResult:
    task_id: str
    total: int
    succeeded: int
    failed: int
    seconds: float


def export_file_system(file_system_id: str, region: str, log: Callable[[str], None] = print, client=None,
                       poll_seconds: float = 15.0, timeout_seconds: float = 6 * 3600,
                       sleep: Callable[[float], None] = time.sleep) -> ExportResult:
    """Export every file written on the file system to its linked bucket and wait for it (FSx data repository
    task EXPORT_TO_REPOSITORY). The association's automatic export lags writes and stops with the file system, so
    `destroy` runs this first. Raises ExportFailed if the task fails, is cancelled, fails any file or times out.
    """
    import boto3
    from botocore.exceptions import ClientError

    fsx = client or boto3.client("fsx", region_name=region)
    started = time.monotonic()
    try:
        task = fsx.create_data_repository_task(
            Type=EXPORT, FileSystemId=file_system_id, Report={"Enabled": False},
        )["DataRepositoryTask"]
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code == "FileSystemNotFound":
            log(f"file system {file_system_id} no longer exists: nothing to export")
            return ExportResult("", 0, 0, 0, 0.0)
        raise ExportFailed(f"could not start the export of {file_system_id} to its bucket: "
                           f"{e.response.get('Error', {}).get('Message', code)}") from None
    task_id = task["TaskId"]
    log(f"exporting {file_system_id} to its bucket (task {task_id})")
    while True:
        task = fsx.describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0]
        status = task.get("Status", {})
        total, ok, bad = (int(status.get(k, 0)) for k in ("TotalCount", "SucceededCount", "FailedCount"))
        lifecycle = task["Lifecycle"]
        log(f"export {task_id}: {lifecycle.lower()}, {ok:,} of {total:,} files exported"
            + (f", {bad:,} failed" if bad else ""))
        if lifecycle in DONE:
            break
        if time.monotonic() - started > timeout_seconds:
            raise ExportFailed(f"export {task_id} of {file_system_id} still {lifecycle.lower()} after "
                               f"{timeout_seconds / 3600:g} h")
        sleep(poll_seconds)
    seconds = time.monotonic() - started
    if lifecycle != "SUCCEEDED" or bad:
        why = task.get("FailureDetails", {}).get("Message") or f"{bad:,} of {total:,} files failed"
        raise ExportFailed(f"export {task_id} of {file_system_id} ended {lifecycle.lower()}: {why}")
    return ExportResult(task_id, total, ok, bad, seconds)


def purge_bucket(bucket: str, region: str, log: Callable[[str], None] = print, client=None) -> int:
    """Delete every object version of a retained bucket, then the bucket: only ever asked for by name."""
    import boto3

    s3 = client or boto3.client("s3", region_name=region)
    deleted = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        batch = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                 for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        for start in range(0, len(batch), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": batch[start:start + 1000], "Quiet": True})
            deleted += len(batch[start:start + 1000])
    s3.delete_bucket(Bucket=bucket)
    log(f"purged bucket {bucket} ({deleted} object versions)")
    return deleted


def purge_repository(name: str, region: str, log: Callable[[str], None] = print, client=None) -> bool:
    """Delete a retained image repository and its images; False if it no longer exists."""
    import boto3
    from botocore.exceptions import ClientError

    ecr = client or boto3.client("ecr", region_name=region)
    try:
        ecr.delete_repository(repositoryName=name, force=True)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "RepositoryNotFoundException":
            return False
        raise
    log(f"purged image repository {name}")
    return True
