"""Storage tiers: an S3 bucket that outlives the cluster, and FSx for Lustre linked to it.

The bucket is the durable tier (datasets in, checkpoints out): retained on destroy, named the same on every `up`
(retained.data_bucket_name), and adopted by the next `up` when it already exists. FSx is a fast view of it: the
data repository association imports new objects and exports files written on the nodes. A file system linked to
S3 cannot be backed up (AWS creates backups only of persistent file systems not linked to a data repository), so
it takes no final backup: `goldenenv destroy` exports it to the bucket and waits before deleting it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

EVENTS = ["NEW", "CHANGED", "DELETED"]


@dataclass(frozen=True, kw_only=True)
class DataStoreArgs:
    bucket_name: str
    """Derived from project, stack, account and region (or the stack's bucketName): the same on every `up`."""
    adopt_bucket: str | None
    """The retained bucket to adopt (Pulumi import) when it already exists; None to create it."""
    noncurrent_version_days: int
    checkpoint_prefix: str
    parallel_fs: bool
    fs_size_gib: int
    fs_throughput_per_tib: int
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    tags: dict[str, str]


class DataStore(pulumi.ComponentResource):
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    fs_id: pulumi.Output[str] | None
    fs_dns_name: pulumi.Output[str] | None
    fs_mount_name: pulumi.Output[str] | None

    def __init__(self, name: str, args: DataStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:DataStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)

        # import of an id already in the stack's state is a no-op, so the option may stay on every later up.
        # No force_destroy: the provider's default (false) is what it means, and an import cannot read the flag back
        # (S3 does not store it), so an adopted bucket declares only what S3 holds.
        bucket = aws.s3.Bucket(
            f"{name}-bucket", bucket=args.bucket_name,
            tags=bucket_tags(name, args.tags),
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(import_=args.adopt_bucket)),
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-bucket-private", bucket=bucket.id, block_public_acls=True, block_public_policy=True,
            ignore_public_acls=True, restrict_public_buckets=True, opts=keep,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-bucket-owner", bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"}, opts=keep,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-bucket-versioning", bucket=bucket.id,
            versioning_configuration={"status": "Enabled"}, opts=keep,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-bucket-sse", bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"},
                    "bucket_key_enabled": True}],
            opts=keep,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-bucket-lifecycle", bucket=bucket.id,
            rules=[
                {"id": "expire-old-checkpoint-versions", "status": "Enabled",
                 "filter": {"prefix": args.checkpoint_prefix},
                 "noncurrent_version_expiration": {"noncurrent_days": args.noncurrent_version_days}},
                {"id": "abort-incomplete-uploads", "status": "Enabled", "filter": {"prefix": ""},
                 "abort_incomplete_multipart_upload": {"days_after_initiation": 7}},
            ],
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=[versioning]),
        )

        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.fs_id = self.fs_dns_name = self.fs_mount_name = None
        if args.parallel_fs:
            fs = aws.fsx.LustreFileSystem(
                f"{name}-lustre", deployment_type="PERSISTENT_2", storage_type="SSD",
                storage_capacity=args.fs_size_gib, per_unit_storage_throughput=args.fs_throughput_per_tib,
                subnet_ids=args.subnet_id, security_group_ids=[args.security_group_id],
                data_compression_type="LZ4", skip_final_backup=True,  # linked to S3: no backup; destroy exports
                tags={**args.tags, "Name": f"{name}-lustre"}, opts=child,
            )
            aws.fsx.DataRepositoryAssociation(
                f"{name}-lustre-link", file_system_id=fs.id, file_system_path="/",
                data_repository_path=bucket.bucket.apply(lambda b: f"s3://{b}/"),
                batch_import_meta_data_on_create=True, delete_data_in_filesystem=False,
                s3={"auto_import_policy": {"events": EVENTS}, "auto_export_policy": {"events": EVENTS}},
                tags=args.tags, opts=child,
            )
            self.fs_id = fs.id
            self.fs_dns_name = fs.dns_name
            self.fs_mount_name = fs.mount_name
        self.register_outputs({
            "bucket_name": self.bucket_name, "bucket_arn": self.bucket_arn,
            "fs_id": self.fs_id, "fs_dns_name": self.fs_dns_name, "fs_mount_name": self.fs_mount_name,
        })


def bucket_tags(name: str, tags: dict[str, str]) -> dict[str, str]:
    """The bucket's own tags: what an adopted bucket is retagged to before the import (retained.align_tags)."""
    return {**tags, "Name": f"{name}-bucket"}
