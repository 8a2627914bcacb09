"""Tear down after the run, stand up again next week, nothing lost.

The retained stores (bucket, image repository) get the same name on every `up` and are adopted when they exist;
`destroy` exports the parallel file system to the bucket and waits before deleting anything. AWS is moto where
moto models the call, and botocore's Stubber with responses in the FSx API's own shapes where it does not (moto
has no data repository tasks).
"""

from __future__ import annotations


import datetime
import re

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from goldenenv import automation
from goldenenv.clouds.aws import AwsCloud, StoreError, retained
from goldenenv.clouds.aws.registry import repository_name
from goldenenv.clouds.aws.retained import Found, OfflineLookup, data_bucket_name
from goldenenv.clouds.base import BuildContext
from goldenenv.plan import plan_config, stack_file
from goldenenv.spec import STACK_TAG_KEY, ConfigError
from fake_automation import FakeStack

ACCOUNT = "123456789012"
STACK = "aws-p5-2node"
BUCKET = "aws:s3/bucket:Bucket"
REPOSITORY = "aws:ecr/repository:Repository"

# S3's naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html), written out here
S3_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def valid_s3_name(name: str) -> bool:
    return (bool(S3_NAME.fullmatch(name)) and ".." not in name
            and not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name)
            and not name.startswith(("xn--", "sthree-", "amzn-s3-demo-"))
            and not name.endswith(("-s3alias", "--ol-s3", ".mrap", "--x-s3")))


def config(stack: str = STACK) -> dict:
    return yaml.safe_load(stack_file(stack).read_text())["config"]


def planned(lookup: OfflineLookup, stack: str = STACK, cfg: dict | None = None):
    return plan_config(stack, cfg or config(stack), context=BuildContext(lookup=lookup))


def one(result, type_token: str):
    [found] = result.of_type(type_token)
    return found


# ---------------------------------------------------------------- names

def test_bucket_name_is_project_stack_account_region():
    assert data_bucket_name("llm-pretrain", "aws-p5-2node", ACCOUNT, "us-east-1") == \
        "llm-pretrain-aws-p5-2node-123456789012-us-east-1"


STACK_NAMES = st.from_regex(r"[A-Za-z0-9_.-]{1,100}", fullmatch=True)
PROJECTS = st.text(min_size=1, max_size=256)


@settings(max_examples=300, deadline=None)
@given(project=PROJECTS, stack=STACK_NAMES, region=st.sampled_from(["us-east-1", "ap-southeast-5", "us-gov-west-1"]))
def test_every_legal_stack_name_gives_a_valid_stable_bucket_name(project, stack, region):
    name = data_bucket_name(project, stack, ACCOUNT, region)
    assert valid_s3_name(name), name
    assert name.endswith(f"-{ACCOUNT}-{region}")
    assert name == data_bucket_name(project, stack, ACCOUNT, region)


@pytest.mark.parametrize("a,b", [("Dev", "dev"), ("a_b", "a-b"), ("a.b", "a-b"), ("x" * 80, "x" * 81)])
def test_stacks_that_s3_cannot_tell_apart_still_get_their_own_bucket(a, b):
    assert data_bucket_name("p", a, ACCOUNT, "us-east-1") != data_bucket_name("p", b, ACCOUNT, "us-east-1")


def test_a_stack_name_with_underscore_plans_a_valid_bucket():
    result = planned(OfflineLookup(account=ACCOUNT), stack="my_team_p5", cfg=config())
    name = one(result, BUCKET).props["bucket"]
    assert valid_s3_name(name) and "_" not in name


# ---------------------------------------------------------------- up -> destroy -> up under mocks

def test_up_destroy_up_plans_the_same_bucket_and_adopts_it():
    first = planned(OfflineLookup(account=ACCOUNT))
    bucket, repo = one(first, BUCKET), one(first, REPOSITORY)
    name = bucket.props["bucket"]
    assert name == data_bucket_name("llm-pretrain", STACK, ACCOUNT, "us-east-1")
    assert bucket.retain_on_delete and repo.retain_on_delete
    assert bucket.import_id is None and repo.import_id is None  # nothing to adopt: created

    # destroy keeps both; the next up finds them under the same names
    kept = {r.type: r for r in first.kept_on_destroy}
    assert {BUCKET, REPOSITORY} <= set(kept)
    tags = dict(first.spec.stack_tags)
    again = planned(OfflineLookup(account=ACCOUNT, buckets={name: Found(name, tags)},
                                  repositories={repo.props["name"]: Found(repo.props["name"], tags)}))
    assert one(again, BUCKET).props["bucket"] == name
    assert one(again, BUCKET).import_id == name
    assert one(again, REPOSITORY).import_id == repo.props["name"]
    assert len(again.of_type(BUCKET)) == 1  # adopted, not a second bucket beside it
    assert again.outputs["bucket"] == name


def test_a_store_of_another_stack_under_that_name_is_never_adopted():
    name = data_bucket_name("llm-pretrain", STACK, ACCOUNT, "us-east-1")
    theirs = Found(name, {"project": "llm-pretrain", STACK_TAG_KEY: "someone-else"})
    with pytest.raises(ConfigError, match="goldenenv:storage.bucket.bucketName.*belongs to project"):
        planned(OfflineLookup(account=ACCOUNT, buckets={name: theirs}))


def test_plan_says_what_destroy_keeps_and_what_it_deletes():
    result = planned(OfflineLookup(account=ACCOUNT))
    doc = result.to_json()["destroy"]
    kept = {k["type"]: k["physicalName"] for k in doc["keeps"]}
    assert kept[BUCKET] == result.outputs["bucket"]
    assert kept[REPOSITORY] == repository_name("llm-pretrain", STACK, "aws-h100")
    assert doc["deletes"]["Instance"] == result.spec.nodes[0].count + 1, "the nodes and the Slurm head"
    assert doc["deletes"]["LustreFileSystem"] == 1
    assert any("EXPORT_TO_REPOSITORY" in step and result.outputs["bucket"] in step for step in doc["first"])
    fs = one(result, "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fs.props["skipFinalBackup"] is True  # linked to S3: AWS backs up no linked file system


def test_without_a_parallel_fs_destroy_has_nothing_to_export():
    result = planned(OfflineLookup(account=ACCOUNT), stack="aws-g5-dev", cfg=config("aws-g5-dev"))
    assert result.destroy_steps == [] and "LustreFileSystem" not in result.deleted_on_destroy


# ---------------------------------------------------------------- the live lookups and adoption, against moto

def test_live_lookup_finds_the_retained_bucket_and_repository(aws_env):
    lookup = retained.LiveLookup("us-east-1")
    assert lookup.account_id() == ACCOUNT  # moto's account
    assert lookup.bucket("nope-123") is None and lookup.repository("goldenenv/x/y/z") is None
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="kept-data")
    s3.put_bucket_tagging(Bucket="kept-data", Tagging={"TagSet": [{"Key": STACK_TAG_KEY, "Value": "dev"}]})
    boto3.client("ecr", region_name="us-east-1").create_repository(
        repositoryName="goldenenv/p/dev/cpu", tags=[{"Key": "project", "Value": "p"}],
        encryptionConfiguration={"encryptionType": "KMS"})
    assert lookup.bucket("kept-data") == Found("kept-data", {STACK_TAG_KEY: "dev"})
    assert lookup.repository("goldenenv/p/dev/cpu") == Found("goldenenv/p/dev/cpu", {"project": "p"})


def test_before_up_adopts_retained_stores_and_aligns_their_tags(aws_env):
    from goldenenv.lifecycle import load_spec

    spec = load_spec(STACK)
    cloud = AwsCloud()
    first = cloud.before_up(spec, log=lambda m: None)
    assert first.adopt_bucket is None and first.adopt_repository is None
    # what the first up made and destroy kept, with an owner tag changed since
    s3, ecr = boto3.client("s3", region_name="us-east-1"), boto3.client("ecr", region_name="us-east-1")
    old = {**spec.stack_tags, "owner": "someone-who-left"}
    s3.create_bucket(Bucket=first.bucket)
    s3.put_bucket_tagging(Bucket=first.bucket, Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in old.items()]})
    ecr.create_repository(repositoryName=first.repository, tags=[{"Key": k, "Value": v} for k, v in old.items()],
                          encryptionConfiguration={"encryptionType": "KMS"}, imageTagMutability="IMMUTABLE",
                          imageScanningConfiguration={"scanOnPush": True})
    lines: list[str] = []
    again = cloud.before_up(spec, log=lines.append)
    assert (again.adopt_bucket, again.adopt_repository) == (first.bucket, first.repository)
    tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=first.bucket)["TagSet"]}
    assert tags == {**spec.stack_tags, "Name": f"{STACK}-data-bucket"}  # what the program declares
    arn = ecr.describe_repositories(repositoryNames=[first.repository])["repositories"][0]["repositoryArn"]
    assert {t["Key"]: t["Value"] for t in ecr.list_tags_for_resource(resourceArn=arn)["tags"]} == spec.stack_tags
    assert any("adopting retained bucket" in line for line in lines)


def test_purge_deletes_the_named_bucket_and_repository_only(aws_env):
    from goldenenv.lifecycle import load_spec

    spec = load_spec(STACK)
    s3, ecr = boto3.client("s3", region_name="us-east-1"), boto3.client("ecr", region_name="us-east-1")
    for bucket in ("stack-data", "other-team"):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        for n in range(3):
            s3.put_object(Bucket=bucket, Key="checkpoints/step-1.pt", Body=f"v{n}".encode())
    mine = repository_name(spec.tags.project, spec.stack, spec.image.lock)
    ecr.create_repository(repositoryName=mine)
    ecr.create_repository(repositoryName="goldenenv/other/dev/cpu")
    purged = AwsCloud().purge(spec, {"bucket": "stack-data"}, log=lambda m: None)
    assert purged == ["stack-data", mine]
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["other-team"]
    assert [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]] == ["goldenenv/other/dev/cpu"]


# ---------------------------------------------------------------- destroy exports first

FS = "fs-0123456789abcdef0"
TASK = "task-0123456789abcdef0"
NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)


def _task(lifecycle: str, total: int, ok: int, failed: int = 0, **extra) -> dict:
    """A DataRepositoryTask as the FSx API returns it (the Stubber checks it against the API's shapes)."""
    return {"TaskId": TASK, "Lifecycle": lifecycle, "Type": "EXPORT_TO_REPOSITORY", "CreationTime": NOW,
            "FileSystemId": FS, "Report": {"Enabled": False},
            "Status": {"TotalCount": total, "SucceededCount": ok, "FailedCount": failed}, **extra}


def _stubbed(*describes: dict):
    fsx = boto3.client("fsx", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(fsx)
    stub.add_response("create_data_repository_task", {"DataRepositoryTask": _task("PENDING", 0, 0)},
                      {"Type": "EXPORT_TO_REPOSITORY", "FileSystemId": FS, "Report": {"Enabled": False}})
    for task in describes:
        stub.add_response("describe_data_repository_tasks", {"DataRepositoryTasks": [task]}, {"TaskIds": [TASK]})
    stub.activate()
    return fsx, stub


def test_export_waits_for_the_task_and_reports_progress():
    fsx, stub = _stubbed(_task("EXECUTING", 1200, 300), _task("EXECUTING", 1200, 900), _task("SUCCEEDED", 1200, 1200))
    lines: list[str] = []
    result = retained.export_file_system(FS, "us-east-1", lines.append, client=fsx, sleep=lambda s: None)
    stub.assert_no_pending_responses()
    assert (result.total, result.succeeded, result.failed) == (1200, 1200, 0)
    assert [line for line in lines if "files exported" in line] == [
        f"export {TASK}: executing, 300 of 1,200 files exported",
        f"export {TASK}: executing, 900 of 1,200 files exported",
        f"export {TASK}: succeeded, 1,200 of 1,200 files exported",
    ]


@pytest.mark.parametrize("last", [
    _task("FAILED", 10, 4, 6, FailureDetails={"Message": "Access denied to s3://bucket/"}),
    _task("SUCCEEDED", 10, 9, 1),
    _task("CANCELED", 10, 2),
], ids=["failed", "some-files-failed", "canceled"])
def test_a_failed_export_is_refused(last):
    fsx, _ = _stubbed(last)
    with pytest.raises(retained.ExportFailed, match=f"export {TASK} of {FS} ended"):
        retained.export_file_system(FS, "us-east-1", lambda m: None, client=fsx, sleep=lambda s: None)


def test_destroy_exports_before_deleting_and_stops_when_the_export_fails(monkeypatch):
    from goldenenv.lifecycle import load_spec

    spec = load_spec(STACK)
    order: list[str] = []
    target = FakeStack({"bucket": "b", "fileSystemId": FS})

    def export(fs_id, region, log, **kw):
        order.append(f"export {fs_id}")
        return retained.ExportResult(TASK, 1, 1, 0, 0.1)

    monkeypatch.setattr(retained, "export_file_system", export)
    automation.destroy(spec, log=lambda m: None, target=target)
    assert order == [f"export {FS}"] and target.calls == ["destroy"]

    def failing(*a, **kw):
        raise retained.ExportFailed(f"export {TASK} of {FS} ended failed: Access denied")

    monkeypatch.setattr(retained, "export_file_system", failing)
    refused = FakeStack({"bucket": "b", "fileSystemId": FS})
    with pytest.raises(automation.LifecycleError, match="Nothing was destroyed.*--skip-export"):
        automation.destroy(spec, log=lambda m: None, target=refused)
    assert refused.calls == []  # nothing deleted

    skipped, lines = FakeStack({"bucket": "b", "fileSystemId": FS}), []
    automation.destroy(spec, log=lines.append, target=skipped, skip_export=True)
    assert skipped.calls == ["destroy"] and any("--skip-export" in line for line in lines)


def test_store_error_is_a_runtime_error_the_cli_reports():
    assert issubclass(StoreError, RuntimeError)
