"""`goldenenv destroy --purge-data` on Tencent Cloud: the stack's versioned COS bucket is emptied of every object
version, delete marker and unfinished upload, then deleted; a failure says which bucket is left and what it holds.

COS is the stand-in of cosfake.py, behind the requests session Tencent's own COS SDK sends through: the SDK signs
every request with the caller's key and parses COS's XML answers, so what is tested is goldenenv with the SDK
the tencent extra pins.
"""

from __future__ import annotations

import functools
import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from cosfake import FakeCos, session
from goldenenv import automation
from goldenenv.cli import app
from goldenenv.clouds.tencent import StoreError, TencentCloud, api, purge
from goldenenv.lifecycle import load_spec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REGION = "ap-guangzhou"
BUCKET = "goldenenv-ge-dev-data-1250000000"
SECRET_ID, SECRET_KEY, TOKEN = "AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE", "Gu5t9xGARNpq86cd98joQYCN3EXAMPLE", "tmp-token"
CHECKPOINTS = 1500
"""Checkpoint versions in the bucket: two pages of ListObjectVersions (1,000 a page) with the delete markers."""
MARKED = 500
"""Checkpoints a user deleted (every third), which left a delete marker each on the versioned bucket."""


def fill(cos: FakeCos) -> None:
    cos.create(BUCKET)
    for n in range(CHECKPOINTS):
        cos.put(BUCKET, f"checkpoints/步骤 {n:05d}.pt")  # a space and non-ASCII: COS lists keys URL-encoded
    for n in range(0, CHECKPOINTS, 3):
        cos.delete_marker(BUCKET, f"checkpoints/步骤 {n:05d}.pt")
    cos.start_upload(BUCKET, "datasets/shard 0001.tar")
    cos.start_upload(BUCKET, "datasets/shard 0002.tar")


@pytest.fixture
def cos() -> FakeCos:
    found = FakeCos(REGION, SECRET_ID, SECRET_KEY, TOKEN)
    fill(found)
    return found


def client(cos: FakeCos, secret_key: str = SECRET_KEY, token: str = TOKEN):
    return purge.cos_client(REGION, api.Credentials(SECRET_ID, secret_key, token), session=session(cos))


# ---------------------------------------------------------------- the purge itself

def test_every_version_delete_marker_and_upload_goes_then_the_bucket(cos):
    lines = []
    assert purge.purge_bucket(BUCKET, client(cos), lines.append) is True
    assert BUCKET not in cos.buckets
    assert cos.calls == ["ListObjectVersions", "DeleteObjects", "ListObjectVersions", "DeleteObjects",
                         "ListMultipartUploads", "AbortMultipartUpload", "AbortMultipartUpload", "DeleteBucket"]
    assert lines[-1] == (f"purged bucket {BUCKET} (2000 object versions and delete markers deleted, 2 unfinished "
                         "uploads aborted)")


def test_the_cloud_hook_purges_the_stacks_bucket_by_name(cos):
    purged = TencentCloud().purge(SimpleNamespace(region=REGION), {"bucket": BUCKET}, lambda m: None,
                                  client=client(cos))
    assert purged == [BUCKET] and BUCKET not in cos.buckets


def test_a_bucket_that_is_already_gone_is_nothing_to_purge(cos):
    del cos.buckets[BUCKET]
    lines = []
    assert TencentCloud().purge(SimpleNamespace(region=REGION), {"bucket": BUCKET}, lines.append,
                                client=client(cos)) == []
    assert lines == [f"bucket {BUCKET} is already gone: nothing to purge"]
    assert TencentCloud().purge(SimpleNamespace(region=REGION), {}, lines.append) == []  # a stack with no bucket


# ---------------------------------------------------------------- the stand-in refuses what COS refuses

def test_the_stand_in_refuses_a_batch_over_1000_a_delete_without_version_and_a_full_bucket(cos):
    from qcloud_cos.cos_exception import CosServiceError

    sdk = client(cos)
    too_many = [{"Key": f"k{n}", "VersionId": "v"} for n in range(1001)]
    with pytest.raises(CosServiceError) as refused:
        sdk.delete_objects(Bucket=BUCKET, Delete={"Quiet": "false", "Object": too_many})
    assert refused.value.get_error_code() == "MalformedXML"
    held = cos.held(BUCKET)
    sdk.delete_objects(Bucket=BUCKET, Delete={"Quiet": "false", "Object": [{"Key": "checkpoints/步骤 00001.pt"}]})
    assert cos.held(BUCKET) == held + 1  # versioned: a delete without its version only adds a delete marker
    with pytest.raises(CosServiceError) as full:
        sdk.delete_bucket(Bucket=BUCKET)
    assert (full.value.get_status_code(), full.value.get_error_code()) == (409, "BucketNotEmpty")


# ---------------------------------------------------------------- failures: the bucket named, what is left said

def test_a_wrong_key_is_refused_and_nothing_is_said_purged(cos):
    lines = []
    with pytest.raises(purge.PurgeFailed) as failed:
        purge.purge_bucket(BUCKET, client(cos, secret_key="not-the-key"), lines.append)
    assert str(failed.value) == (
        f"could not purge COS bucket {BUCKET}: listing its object versions failed (SignatureDoesNotMatch: The "
        "Signature you specified is invalid.). 0 object versions and delete markers deleted before it; the bucket "
        "is still there with the rest of its data")
    assert cos.held(BUCKET) == CHECKPOINTS + MARKED + 2 and lines == []


def test_temporary_credentials_without_their_token_are_refused(cos):
    with pytest.raises(purge.PurgeFailed, match="InvalidAccessKeyId"):
        purge.purge_bucket(BUCKET, client(cos, token=""), lambda m: None)
    assert BUCKET in cos.buckets


def test_a_page_refused_part_way_says_how_much_went_and_that_the_bucket_is_left(cos):
    cos.refuse["ListObjectVersions"], cos.refuse_after["ListObjectVersions"] = (403, "AccessDenied"), 1
    lines = []
    with pytest.raises(purge.PurgeFailed) as failed:
        purge.purge_bucket(BUCKET, client(cos), lines.append)
    message = str(failed.value)
    assert message.startswith(f"could not purge COS bucket {BUCKET}: listing its object versions failed "
                              "(AccessDenied: Access Denied.). 1000 object versions and delete markers deleted")
    assert cos.held(BUCKET) == CHECKPOINTS + MARKED + 2 - 1000
    assert not any(line.startswith("purged") for line in lines)


def test_versions_cos_will_not_delete_are_named_with_their_error(cos):
    cos.undeletable["checkpoints/步骤 00007.pt"] = "AccessDenied"
    with pytest.raises(purge.PurgeFailed) as failed:
        purge.purge_bucket(BUCKET, client(cos), lambda m: None)
    assert str(failed.value).startswith(
        f"could not purge COS bucket {BUCKET}: COS refused to delete 1 of 1000 object versions, e.g. "
        "checkpoints/步骤 00007.pt version ")
    assert "(AccessDenied: Access Denied.). 999 object versions and delete markers deleted" in str(failed.value)
    assert "DeleteBucket" not in cos.calls


def test_a_bucket_written_to_while_it_is_emptied_is_refused_and_what_it_holds_is_said(cos):
    cos.write_when["DeleteBucket"] = "checkpoints/late.pt"  # a node that still writes
    with pytest.raises(purge.PurgeFailed) as failed:
        purge.purge_bucket(BUCKET, client(cos), lambda m: None)
    assert str(failed.value) == (
        f"could not purge COS bucket {BUCKET}: deleting the bucket failed (BucketNotEmpty: The bucket you tried "
        "to delete is not empty.). 2000 object versions and delete markers deleted, 2 unfinished uploads aborted "
        "before it; the bucket is still there with 1 object versions and delete markers (e.g. checkpoints/late.pt, "
        "written while it was being emptied?)")


def test_the_cloud_hook_turns_a_failure_into_the_lifecycle_error_naming_the_bucket(cos):
    cos.refuse["DeleteObjects"] = (403, "AccessDenied")
    with pytest.raises(StoreError, match=rf"could not purge COS bucket {BUCKET}.*empty and delete bucket {BUCKET} "
                                         "in the COS console"):
        TencentCloud().purge(SimpleNamespace(region=REGION), {"bucket": BUCKET}, lambda m: None, client=client(cos))


def test_without_credentials_the_bucket_is_named_as_kept(monkeypatch):
    for name in (api.SECRET_ID_ENV, api.SECRET_KEY_ENV, api.TOKEN_ENV):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StoreError, match=rf"no Tencent Cloud credentials.*empty and delete bucket {BUCKET}"):
        TencentCloud().purge(SimpleNamespace(region=REGION), {"bucket": BUCKET}, lambda m: None)


def test_without_the_cos_sdk_the_package_and_the_bucket_are_named(monkeypatch):
    monkeypatch.setenv(api.SECRET_ID_ENV, SECRET_ID)
    monkeypatch.setenv(api.SECRET_KEY_ENV, SECRET_KEY)
    monkeypatch.setitem(sys.modules, "qcloud_cos", None)  # as if the tencent extra were not installed
    with pytest.raises(StoreError, match=r"COS SDK \(cos-python-sdk-v5\) is not installed: pip install "
                                         rf"'goldenenv\[tencent\]'.*empty and delete bucket {BUCKET}"):
        TencentCloud().purge(SimpleNamespace(region=REGION), {"bucket": BUCKET}, lambda m: None)


# ---------------------------------------------------------------- the user's command

class FakeStack:
    """The part of an Automation API stack destroy uses: the stack's outputs, and a destroy that succeeds."""

    def __init__(self, outputs: dict):
        self._outputs, self.calls = outputs, []
        self.workspace = SimpleNamespace(env_vars={})

    def outputs(self):
        return {k: SimpleNamespace(value=v) for k, v in self._outputs.items()}

    def destroy(self, on_output=None, run_program=None):
        self.calls.append("destroy")


@pytest.fixture
def dev(monkeypatch, cos):
    """`goldenenv destroy -s tencent-gn7-dev` with Pulumi's stack and COS stood in, the caller's key in the
    variables the provider reads."""
    spec = load_spec("tencent-gn7-dev")
    cos.region = spec.region
    target = FakeStack({"bucket": BUCKET})
    monkeypatch.setattr(automation, "stack", lambda spec: target)
    monkeypatch.setattr(purge, "cos_client", functools.partial(purge.cos_client, session=session(cos)))
    for name, value in ((api.SECRET_ID_ENV, SECRET_ID), (api.SECRET_KEY_ENV, SECRET_KEY), (api.TOKEN_ENV, TOKEN)):
        monkeypatch.setenv(name, value)
    return target


def test_destroy_purge_data_empties_and_deletes_the_bucket(dev, cos):
    result = CliRunner().invoke(app, ["destroy", "-s", "tencent-gn7-dev", "--purge-data"])
    assert result.exit_code == 0, result.output
    assert dev.calls == ["destroy"] and BUCKET not in cos.buckets
    assert f"purged bucket {BUCKET} (2000 object versions and delete markers deleted" in " ".join(result.output.split())


def test_destroy_without_purge_data_keeps_the_bucket(dev, cos):
    result = CliRunner().invoke(app, ["destroy", "-s", "tencent-gn7-dev"])
    assert result.exit_code == 0, result.output
    assert cos.calls == [] and cos.held(BUCKET) == CHECKPOINTS + MARKED + 2
    assert f"kept bucket {BUCKET}" in " ".join(result.output.split())


def test_a_purge_that_fails_exits_1_naming_the_bucket_and_what_is_left(dev, cos):
    cos.refuse["DeleteBucket"] = (403, "AccessDenied")
    result = CliRunner().invoke(app, ["destroy", "-s", "tencent-gn7-dev", "--purge-data"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    flat = " ".join(result.output.split())
    assert (f"could not purge COS bucket {BUCKET}: deleting the bucket failed (AccessDenied: Access Denied.)"
            in flat)
    assert "the bucket is still there" in flat and f"empty and delete bucket {BUCKET} in the COS console" in flat
    assert "purged bucket" not in flat and BUCKET in cos.buckets


def test_a_destroy_that_fails_part_way_still_purges_the_bucket_as_asked(dev, cos):
    def fails(on_output=None, run_program=None):
        raise RuntimeError("code: 255\n stderr: error: InvalidParameter.VpcHasResources")

    dev.destroy = fails
    dev.export_stack = lambda: SimpleNamespace(deployment={"resources": []})
    result = CliRunner().invoke(app, ["destroy", "-s", "tencent-gn7-dev", "--purge-data"])
    flat = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"--purge-data deleted the retained stores all the same, as asked: {BUCKET}" in flat
    assert BUCKET not in cos.buckets
