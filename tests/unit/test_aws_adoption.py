"""Adopting the retained stores is right whichever way Pulumi imports.

Older engines refuse an import whose inputs differ from the live store; current ones (pulumi/pulumi#19339) import
it and then update it. Under both, the adopted bucket, its settings and the image repository must come out as the
first `up` made them: the program declares the same inputs on the adopting `up` as on the creating one, declares
nothing the cloud does not store (an import cannot read it back, so it would differ), keeps every store on destroy
and on replacement, and what cannot be changed in place (a bucket's region, a repository's encryption) is refused
before `up`; what can (tags, tag mutability, scanning) is aligned first. AWS is moto here.
"""

from __future__ import annotations

import boto3
import pytest
import yaml

from goldenenv.clouds.aws import AwsCloud, retained
from goldenenv.clouds.aws.retained import Found, OfflineLookup
from goldenenv.clouds.aws.storage import bucket_tags
from goldenenv.clouds.base import BuildContext
from goldenenv.plan import STACKS, plan_config, stack_file
from goldenenv.spec import ConfigError

ACCOUNT = "123456789012"
BUCKET = "aws:s3/bucket:Bucket"
REPOSITORY = "aws:ecr/repository:Repository"
DATA_STORE = "goldenenv:aws:DataStore"
IMAGE_REPOSITORY = "goldenenv:aws:ImageRepository"
BUCKET_SETTINGS = {
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
}
REPOSITORY_SETTINGS = {"aws:ecr/lifecyclePolicy:LifecyclePolicy"}
NOT_STORED = {
    # pulumi-aws's Bucket docs: "when importing a bucket, a successful `pulumi up` is required to set this value
    # in state" - S3 has no such setting, it is the provider's own
    BUCKET: {"forceDestroy"},
    # ECR's DescribeRepositories has no such field; terraform-provider-aws imports aws_ecr_repository by name
    # (ImportStatePassthrough) and its force_delete has no default, so an import leaves it unset
    REPOSITORY: {"forceDelete"},
}
AWS_STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.aws-*.yaml"))


def config(stack: str) -> dict:
    return yaml.safe_load(stack_file(stack).read_text())["config"]


def stores(result) -> dict[str, object]:
    """The retained stores and their settings, by URN: what an adopting `up` must declare as the first one did."""
    kinds = {BUCKET, REPOSITORY} | BUCKET_SETTINGS | REPOSITORY_SETTINGS
    return {r.urn: r for r in result.resources if r.type in kinds}


def first_and_again(stack: str):
    """The first `up` (nothing exists) and the one after destroy (the retained stores exist, tagged as the
    first `up` tagged them)."""
    first = plan_config(stack, config(stack), context=BuildContext(lookup=OfflineLookup(account=ACCOUNT)))
    [bucket], [repo] = first.of_type(BUCKET), first.of_type(REPOSITORY)
    name, repository = bucket.props["bucket"], repo.props["name"]
    found = OfflineLookup(account=ACCOUNT, buckets={name: Found(name, dict(bucket.props["tags"]))},
                          repositories={repository: Found(repository, dict(repo.props["tags"]))})
    again = plan_config(stack, config(stack), context=BuildContext(lookup=found))
    return first, again


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_adopting_up_declares_what_the_first_up_created(stack):
    first, again = first_and_again(stack)
    created, adopted = stores(first), stores(again)
    assert set(created) == set(adopted) and len(created) == 2 + len(BUCKET_SETTINGS) + len(REPOSITORY_SETTINGS)
    for urn, made in created.items():
        kept = adopted[urn]
        assert kept.props == made.props, urn  # an import that updates changes nothing
        assert made.retain_on_delete and kept.retain_on_delete, f"{urn}: a destroy or a replacement would delete it"
        assert made.import_id is None
        assert kept.import_id == ({BUCKET: made.props.get("bucket"), REPOSITORY: made.props.get("name")}
                                  .get(made.type)), urn


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_an_adopted_store_declares_only_what_the_cloud_stores(stack):
    _, again = first_and_again(stack)
    for kind, provider_only in NOT_STORED.items():
        [store] = again.of_type(kind)
        assert store.import_id
        assert not provider_only & set(store.props), (
            f"{kind} declares {sorted(provider_only & set(store.props))}: an import cannot read it back")


def test_the_bucket_settings_and_repository_policy_are_the_stores_own():
    """Settings are created on every `up` (a PUT that makes them what the stack says), kept on destroy, and each
    belongs to its store's component."""
    first, _ = first_and_again("aws-p5-2node")
    parents = {r.urn: r.type for r in first.resources}
    for r in stores(first).values():
        assert parents[r.parent_urn] == (IMAGE_REPOSITORY if r.type in {REPOSITORY} | REPOSITORY_SETTINGS
                                         else DATA_STORE), r.urn


# ---------------------------------------------------------------- what cannot be adopted unchanged: refused first

@pytest.fixture
def spec():
    from goldenenv.lifecycle import load_spec

    return load_spec("aws-p5-2node")


def retained_names(spec) -> tuple[str, str]:
    found = AwsCloud().before_up(spec, log=lambda m: None)
    return found.bucket, found.repository


def test_a_bucket_in_another_region_is_refused_before_up(aws_env, spec):
    bucket, _ = retained_names(spec)
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    with pytest.raises(ConfigError, match=rf"goldenenv:storage.bucket.bucketName: bucket {bucket} is in eu-west-1, "
                                          r"the stack in us-east-1"):
        AwsCloud().before_up(spec, log=lambda m: None)


def test_a_repository_with_another_encryption_is_refused_before_up(aws_env, spec):
    _, repository = retained_names(spec)
    boto3.client("ecr", region_name="us-east-1").create_repository(repositoryName=repository)  # AES256
    with pytest.raises(ConfigError, match=rf"image repository {repository} exists with AES256 encryption, the "
                                          r"stack's is KMS: ECR cannot change"):
        AwsCloud().before_up(spec, log=lambda m: None)


def test_a_repository_is_given_the_stacks_settings_before_it_is_adopted(aws_env, spec):
    bucket, repository = retained_names(spec)
    ecr = boto3.client("ecr", region_name="us-east-1")
    ecr.create_repository(repositoryName=repository, encryptionConfiguration={"encryptionType": "KMS"},
                          imageTagMutability="MUTABLE", imageScanningConfiguration={"scanOnPush": False})
    lines: list[str] = []
    adopted = AwsCloud().before_up(spec, log=lines.append)
    assert adopted.adopt_repository == repository
    found = ecr.describe_repositories(repositoryNames=[repository])["repositories"][0]
    assert found["imageTagMutability"] == "IMMUTABLE" and found["imageScanningConfiguration"] == {"scanOnPush": True}
    assert any("imageTagMutability MUTABLE -> IMMUTABLE" in line for line in lines)
    assert retained.align_repository_settings(repository, "us-east-1", log=lines.append) == []  # already aligned


def test_a_bucket_the_first_up_made_is_adopted_with_the_declared_tags(aws_env, spec):
    bucket, _ = retained_names(spec)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    assert AwsCloud().before_up(spec, log=lambda m: None).adopt_bucket == bucket
    tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket)["TagSet"]}
    assert tags == bucket_tags(f"{spec.stack}-data", spec.stack_tags)
