"""Alibaba Cloud's lifecycle hooks: tear down after the run without losing files, stand up again, purge by name.

`destroy` exports CPFS to the bucket through the stack's data flow and waits before anything is deleted; `up`
adopts the retained bucket after giving it the stack's tags; `--purge-data` deletes the bucket and the image
repository by name; the nodes' time to live is Alibaba's auto-release time.

NAS answers come from captures/alicloud_nas_*.json: assembled, not recorded from an account, in the response
model of the NAS 2017-06-26 API (CreateDataFlowTask: RequestId, TaskId; DescribeDataFlowTasks: TaskInfo.Task[]
with FilesystemId, Status, ErrorMsg and ProgressStats.FilesTotal / FilesDone / BytesTotal / BytesDone, as the
alibabacloud nas-20170626 SDK models name them). The task exports 1,200 files, 384 GiB.
"""

from __future__ import annotations

import copy
import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from goldenenv import automation, stackconfig
from goldenenv.clouds.alicloud import AlicloudCloud, StoreError, dataflow, guard, nodes, storage
from goldenenv.clouds.alicloud.registry import repository_names
from goldenenv.clouds.alicloud.storage import Found, OfflineLookup
from goldenenv.clouds.base import BuildContext
from goldenenv.lifecycle import load_spec
from goldenenv.plan import plan_config, stack_file
from goldenenv.spec import STACK_TAG_KEY, ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CAPTURES = Path(__file__).parent / "captures"
STACK, DEV = "alicloud-ebmgn8v-2node", "alicloud-gn7i-dev"
ACCOUNT = "1234567890123456"
FS, FLOW, TASK = "cpfs-0a1b2c3d4e5f6a7b", "df-2b3c4d5e6f7a8b9c", "task-38aa8e890f451a2b"
OUTPUTS = {"bucket": "kept-data-bucket", "fileSystemId": FS, "dataFlowId": FLOW, "filesetId": "fset-1",
           "filesetPath": "/goldenenv/"}
CREDENTIAL_VARS = ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN",
                   "ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY", "ALICLOUD_SECURITY_TOKEN")
INSTANCE = "alicloud:ecs/instance:Instance"


def capture(name: str) -> dict:
    return json.loads((CAPTURES / f"alicloud_nas_{name}.json").read_text())


class Nas:
    """The NAS OpenAPI as the export calls it: CreateDataFlowTask, then DescribeDataFlowTasks answering the given
    captures in turn (the last one again if asked more)."""

    def __init__(self, *describes: str, create_error: guard.ApiError | None = None):
        self.describes = [capture(f"DescribeDataFlowTasks_{d}") for d in describes]
        self.create_error = create_error
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(self, action: str, params: dict[str, str]) -> dict:
        self.calls.append((action, dict(params)))
        if action == "CreateDataFlowTask":
            if self.create_error:
                raise self.create_error
            return capture("CreateDataFlowTask")
        if action == "DescribeDataFlowTasks":
            return self.describes.pop(0) if len(self.describes) > 1 else self.describes[0]
        raise AssertionError(f"unexpected call {action}")


def export(nas: Nas, lines: list[str] | None = None, **kw) -> dataflow.ExportResult:
    return dataflow.export_fileset(FS, FLOW, "/goldenenv/", nas, (lines if lines is not None else []).append,
                                   sleep=lambda s: None, **kw)


# ---------------------------------------------------------------- the export, against NAS answers

def test_export_creates_an_export_task_on_the_data_flow_and_reports_progress():
    nas = Nas("pending", "executing_300", "executing_900", "completed")
    lines: list[str] = []
    result = export(nas, lines)
    assert nas.calls[0] == ("CreateDataFlowTask", {"FileSystemId": FS, "DataFlowId": FLOW, "TaskAction": "Export",
                                                   "DataType": "MetaAndData", "Directory": "/goldenenv/"})
    assert [params for action, params in nas.calls[1:]] == [
        {"FileSystemId": FS, "Filters.1.Key": "TaskIds", "Filters.1.Value": TASK}] * 4
    assert (result.task_id, result.files_total, result.files_done, result.bytes_done) == (TASK, 1200, 1200, 384 * 2**30)
    assert [line for line in lines if "files" in line] == [
        f"export {TASK}: pending, 0 of 0 files (0.0 GiB of 0.0 GiB) exported",
        f"export {TASK}: executing, 300 of 1,200 files (96.0 GiB of 384.0 GiB) exported",
        f"export {TASK}: executing, 900 of 1,200 files (288.0 GiB of 384.0 GiB) exported",
        f"export {TASK}: completed, 1,200 of 1,200 files (384.0 GiB of 384.0 GiB) exported",
    ]


def test_a_failed_export_task_is_refused_with_its_error():
    with pytest.raises(dataflow.ExportFailed, match=f"export {TASK} of {FS} ended failed: the data flow has no "
                                                    "permission to write"):
        export(Nas("executing_300", "failed"))


def test_an_export_that_completes_with_files_left_is_refused():
    answer = capture("DescribeDataFlowTasks_completed")
    answer["TaskInfo"]["Task"][0]["ProgressStats"]["FilesDone"] = 1199
    nas = Nas("completed")
    nas.describes = [answer]
    with pytest.raises(dataflow.ExportFailed, match="ended completed: 1 of 1,200 files not exported"):
        export(nas)


def test_a_cancelled_export_is_refused():
    answer = capture("DescribeDataFlowTasks_executing_900")
    answer["TaskInfo"]["Task"][0]["Status"] = "Canceled"
    nas = Nas("executing_900")
    nas.describes = [answer]
    with pytest.raises(dataflow.ExportFailed, match="ended canceled"):
        export(nas)


def test_an_export_that_cannot_start_is_refused_and_a_gone_file_system_has_nothing_to_export():
    stopped = guard.ApiError("CreateDataFlowTask", "OperationDenied.DataFlowStatus", "the data flow is not Running")
    with pytest.raises(dataflow.ExportFailed, match="could not start the export.*not Running"):
        export(Nas("completed", create_error=stopped))
    gone = guard.ApiError("CreateDataFlowTask", dataflow.FILE_SYSTEM_GONE, "The specified file system does not exist.")
    lines: list[str] = []
    assert export(Nas("completed", create_error=gone), lines).task_id == ""
    assert lines == [f"file system {FS} no longer exists: nothing to export"]


def test_an_export_still_running_after_the_timeout_is_refused():
    with pytest.raises(dataflow.ExportFailed, match="still executing after"):
        export(Nas("executing_300"), timeout_seconds=-1)


# ---------------------------------------------------------------- destroy: export first, refuse on failure

@pytest.fixture(scope="module")
def spec():
    return load_spec(STACK)


def test_before_destroy_exports_the_stacks_fileset_and_says_skip_export_when_refused(spec):
    nas = Nas("completed")
    AlicloudCloud().before_destroy(spec, OUTPUTS, False, lambda m: None, nas=nas)
    assert [action for action, _ in nas.calls] == ["CreateDataFlowTask", "DescribeDataFlowTasks"]
    with pytest.raises(StoreError, match="Nothing was destroyed.*--skip-export") as refused:
        AlicloudCloud().before_destroy(spec, OUTPUTS, False, lambda m: None, nas=Nas("failed"))
    assert isinstance(refused.value, RuntimeError)


def test_skip_export_calls_nothing_and_says_the_files_are_lost(spec):
    nas, lines = Nas("completed"), []
    AlicloudCloud().before_destroy(spec, OUTPUTS, True, lines.append, nas=nas)
    assert nas.calls == []
    assert lines == [f"not exporting {FS} (--skip-export): files written on CPFS and not yet exported to the bucket "
                     "are lost"]


def test_nas_extreme_has_nothing_to_export_and_says_its_files_go(spec):
    nas, lines = Nas("completed"), []
    AlicloudCloud().before_destroy(spec, {"bucket": "b", "fileSystemId": "extreme-0a1b", "dataFlowId": None},
                                   False, lines.append, nas=nas)
    assert nas.calls == [] and "deletes it with its files" in lines[0]
    AlicloudCloud().before_destroy(spec, {"bucket": "b"}, False, lines.append, nas=nas)  # no shared file system
    assert nas.calls == [] and len(lines) == 1


class FakeStack:
    """The part of an Automation API stack destroy uses."""

    def __init__(self, outputs: dict):
        self._outputs = outputs
        self.calls: list[str] = []

    def outputs(self):
        return {k: type("Out", (), {"value": v})() for k, v in self._outputs.items()}

    def destroy(self, on_output=None):
        self.calls.append("destroy")


def test_automation_destroy_exports_first_and_deletes_nothing_when_the_export_fails(spec, monkeypatch):
    answers: list[Nas] = []

    def client(region, credentials):
        assert region == spec.region
        return answers[-1]

    for var, value in {"ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(dataflow, "nas_client", client)
    monkeypatch.setattr(dataflow, "POLL_SECONDS", 0.0)

    answers.append(Nas("executing_900", "completed"))
    target = FakeStack(OUTPUTS)
    automation.destroy(spec, log=lambda m: None, target=target)
    assert [a for a, _ in answers[-1].calls][0] == "CreateDataFlowTask" and target.calls == ["destroy"]

    answers.append(Nas("executing_300", "failed"))
    refused = FakeStack(OUTPUTS)
    with pytest.raises(automation.LifecycleError, match="ended failed.*Nothing was destroyed.*--skip-export"):
        automation.destroy(spec, log=lambda m: None, target=refused)
    assert refused.calls == []  # nothing deleted

    answers.append(Nas("failed"))
    skipped, lines = FakeStack(OUTPUTS), []
    automation.destroy(spec, log=lines.append, target=skipped, skip_export=True)
    assert skipped.calls == ["destroy"] and answers[-1].calls == []
    assert any("--skip-export" in line for line in lines)


def test_plan_says_destroy_exports_cpfs_and_that_nas_extreme_loses_its_files(spec):
    result = plan_config(STACK, config(), context=BuildContext(lookup=OfflineLookup(ACCOUNT)))
    bucket = result.outputs["bucket"]
    accounting, step = result.destroy_steps  # the Slurm accounting history first (headhistory), then the fileset
    assert "accounting" in accounting
    assert "Export" in step and "MetaAndData" in step and f"oss://{bucket}/" in step and "--skip-export" in step
    fs = result.of_type("alicloud:nas/fileSystem:FileSystem")[0]
    flow = result.of_type("alicloud:nas/dataFlow:DataFlow")[0]
    fileset = result.of_type("alicloud:nas/fileset:Fileset")[0]
    assert result.outputs["fileSystemId"] == fs.id
    assert result.outputs["dataFlowId"] == flow.outputs["dataFlowId"]
    assert result.outputs["filesetId"] == fileset.outputs["filesetId"]
    assert result.outputs["filesetPath"] == fileset.props["fileSystemPath"]

    nas = plan_config("nas", nas_config())
    accounting, step = nas.destroy_steps
    assert "accounting" in accounting
    assert "NAS extreme" in step and "deletes it with every file" in step and "checkpoints belong in the bucket" in step
    assert any("NAS extreme" in f.message and "not linked to the bucket" in f.message
               for f in nas.findings if f.rule == "plan-note")
    assert nas.outputs.get("dataFlowId") is None and nas.outputs["fileSystemId"]


# ---------------------------------------------------------------- configuration helpers

def config(stack: str = STACK) -> dict:
    return stackconfig.read_stack_file(stack_file(stack))


def nas_config() -> dict:
    """The training stack where Alibaba offers no CPFS: NAS extreme."""
    changed = copy.deepcopy(config())
    changed["goldenenv:region"] = "cn-hongkong"
    del changed["goldenenv:zone"]
    return changed


# ---------------------------------------------------------------- the nodes' role mounts only what it must

def node_actions(result) -> list[str]:
    policy = next(r for r in result.of_type("alicloud:ram/policy:Policy") if r.name.endswith("-gpu-access"))
    return [a for s in json.loads(policy.props["policyDocument"])["Statement"] for a in s["Action"]]


def test_only_cpfs_nodes_may_look_up_their_export():
    assert set(storage.NODE_MOUNT_ACTIONS) <= set(node_actions(plan_config(STACK, config())))
    assert not set(storage.NODE_MOUNT_ACTIONS) & set(node_actions(plan_config("nas", nas_config())))


# ---------------------------------------------------------------- credentials

def test_preflight_says_which_variables_to_set(spec, monkeypatch):
    for var in CREDENTIAL_VARS:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError) as refused:
        AlicloudCloud().preflight(spec)
    message = str(refused.value)
    for var in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALICLOUD_ACCESS_KEY",
                "ALICLOUD_SECRET_KEY"):
        assert var in message
    with pytest.raises(automation.LifecycleError, match="no Alibaba Cloud credentials"):
        automation._cloud_step(AlicloudCloud().preflight, spec)  # one line, as the CLI shows it
    monkeypatch.setenv("ALICLOUD_ACCESS_KEY", "id")
    monkeypatch.setenv("ALICLOUD_SECRET_KEY", "secret")
    AlicloudCloud().preflight(spec)


# ---------------------------------------------------------------- up: adopt the retained stores, tags first

class FakeBucket:
    def __init__(self, name: str, tags: dict | None = None, versions: int = 3):
        self.name, self.tags = name, dict(tags or {})
        self.stored = [(f"checkpoints/step-{n}.pt", f"v{n}") for n in range(versions)]
        self.deleted: list[tuple[str, str]] = []
        self.bucket_deleted = False

    def find(self):
        return None if self.bucket_deleted else Found(self.name, self.tags)

    def put_tags(self, tags):
        self.tags = dict(tags)

    def versions(self, key_marker, version_marker):
        return list(self.stored), "", "", False

    def delete_versions(self, batch):
        self.deleted += batch

    def delete_bucket(self):
        self.bucket_deleted = True


def test_before_up_adopts_the_retained_bucket_after_giving_it_the_stacks_tags(spec):
    name = storage.bucket_name(spec.tags.project, spec.stack, ACCOUNT, spec.region)
    stale = {**spec.stack_tags, "owner": "someone-who-left"}
    bucket, lines = FakeBucket(name, stale), []
    namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
    lookup = OfflineLookup(ACCOUNT, buckets={name: Found(name, stale)}, namespaces={namespace},
                           repositories={f"{namespace}/{repo}"})
    stores = AlicloudCloud().before_up(spec, lines.append, lookup=lookup, bucket_client=bucket)
    assert (stores.adopt_bucket, stores.adopt_namespace, stores.adopt_repo) == (name, True, True)
    # what the program declares on the bucket, so the import finds no difference
    planned = plan_config(STACK, config(), context=BuildContext(lookup=lookup))
    assert bucket.tags == planned.of_type("alicloud:oss/bucket:Bucket")[0].props["tags"]
    assert bucket.tags["owner"] == spec.tags.owner and bucket.tags["cpfs-dataflow"] == "true"
    assert any("adopting retained bucket" in line for line in lines)
    assert any("retagged" in line for line in lines)


def test_before_up_adopts_nothing_new_and_never_another_stacks_bucket(spec):
    fresh = AlicloudCloud().before_up(spec, lambda m: None, lookup=OfflineLookup(ACCOUNT))
    assert (fresh.adopt_bucket, fresh.adopt_namespace, fresh.adopt_repo) == (None, False, False)
    name = storage.bucket_name(spec.tags.project, spec.stack, ACCOUNT, spec.region)
    theirs = Found(name, {"project": spec.tags.project, STACK_TAG_KEY: "someone-else"})
    bucket = FakeBucket(name, theirs.tags)
    with pytest.raises(ConfigError, match="goldenenv:storage.bucket.bucketName.*belongs to project"):
        AlicloudCloud().before_up(spec, lambda m: None, lookup=OfflineLookup(ACCOUNT, buckets={name: theirs}),
                                  bucket_client=bucket)
    assert bucket.tags == theirs.tags  # untouched


# ---------------------------------------------------------------- --purge-data: by name

class FakeAcr:
    def __init__(self, exists: bool = True):
        self.exists, self.deleted = exists, []

    def delete_repository(self, namespace, name):
        if not self.exists:
            return False
        self.deleted.append(f"{namespace}/{name}")
        return True


def test_purge_deletes_the_named_bucket_and_the_stacks_repository_only(spec):
    bucket, acr, lines = FakeBucket("kept-data-bucket"), FakeAcr(), []
    purged = AlicloudCloud().purge(spec, OUTPUTS, lines.append, bucket_client=bucket, acr=acr)
    namespace, repo = repository_names(spec.tags.project, spec.stack, spec.image.lock)
    assert purged == ["kept-data-bucket", f"{namespace}/{repo}"]
    assert bucket.bucket_deleted and len(bucket.deleted) == 3 and acr.deleted == [f"{namespace}/{repo}"]
    assert lines[-1] == f"purged image repository {namespace}/{repo}"
    gone = AlicloudCloud().purge(spec, OUTPUTS, lambda m: None, bucket_client=FakeBucket("kept-data-bucket"),
                                 acr=FakeAcr(exists=False))
    assert gone == ["kept-data-bucket"]


def test_purge_without_the_acr_sdk_names_it_and_deletes_nothing(spec, monkeypatch):
    monkeypatch.setitem(sys.modules, "alibabacloud_cr20160607", None)  # as if not installed
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret")
    bucket = FakeBucket("kept-data-bucket")
    with pytest.raises(RuntimeError, match="pip install alibabacloud-cr20160607"):
        AlicloudCloud().purge(spec, OUTPUTS, lambda m: None, bucket_client=bucket)
    assert not bucket.bucket_deleted and bucket.deleted == []


def test_the_acr_delete_treats_a_missing_repository_as_gone():
    class TeaError(Exception):
        def __init__(self, code, status):
            super().__init__(code)
            self.code, self.statusCode = code, status

    class Client:
        def __init__(self, error=None):
            self.error, self.calls = error, []

        def delete_repo(self, namespace, name):
            self.calls.append((namespace, name))
            if self.error:
                raise self.error

    acr = storage.AcrApi.__new__(storage.AcrApi)  # the SDK is not installed here: the client is given
    acr.client = Client()
    assert acr.delete_repository("goldenenv-p", "dev-lock") and acr.client.calls == [("goldenenv-p", "dev-lock")]
    acr.client = Client(TeaError("REPO_NOT_EXIST", 404))
    assert acr.delete_repository("goldenenv-p", "dev-lock") is False
    acr.client = Client(TeaError("Forbidden.RAM", 403))
    with pytest.raises(TeaError):
        acr.delete_repository("goldenenv-p", "dev-lock")


# ---------------------------------------------------------------- the time to live: Alibaba's auto-release time

def test_auto_release_time_is_iso_8601_utc_rounded_up_to_the_minute():
    assert nodes.auto_release_time(8, datetime(2026, 12, 1, 10, 0, 30, tzinfo=timezone.utc)) == "2026-12-01T18:01:00Z"
    assert nodes.auto_release_time(1.5, datetime(2026, 12, 31, 23, 0, tzinfo=timezone.utc)) == "2027-01-01T00:30:00Z"
    east8 = timezone(timedelta(hours=8))
    assert nodes.auto_release_time(2, datetime(2026, 12, 1, 18, 0, tzinfo=east8)) == "2026-12-01T12:00:00Z"


def test_ttl_hours_sets_each_nodes_release_time_once_and_the_plan_says_it_deletes_them():
    changed = copy.deepcopy(config())
    changed["goldenenv:lifecycle"] = {"ttlHours": 8}
    before = datetime.now(timezone.utc)
    result = plan_config("ttl", changed)
    after = datetime.now(timezone.utc)
    instances = result.of_type(INSTANCE)
    assert len(instances) == 3, "two nodes and the Slurm head, released with them"
    for node in instances:
        at = datetime.strptime(node.props["autoReleaseTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        assert before + timedelta(hours=8) - timedelta(seconds=1) <= at <= after + timedelta(hours=8, minutes=1)
        assert node.props["instanceChargeType"] == "PostPaid"
        assert "autoReleaseTime" in node.ignore_changes  # set when created: a later up does not move it
        assert node.delete_before_replace
    note = next(f.message for f in result.findings if f.rule == "plan-note" and "ttlHours" in f.message)
    assert "releases (deletes)" in note and "unlike AWS" in note and "checkpoints in the bucket" in note
    plain = plan_config(STACK, config())
    assert all("autoReleaseTime" not in n.props and "autoReleaseTime" not in n.ignore_changes
               for n in plain.of_type(INSTANCE))


def test_a_ttl_alibaba_cannot_take_names_the_key():
    changed = copy.deepcopy(config())
    changed["goldenenv:lifecycle"] = {"ttlHours": 0.25}
    with pytest.raises(ConfigError) as refused:
        plan_config("ttl", changed)
    (problem,) = refused.value.problems
    assert problem.key == "goldenenv:lifecycle.ttlHours" and "30 min" in problem.message


# ---------------------------------------------------------------- the file system's tier

def test_throughput_per_tib_picks_the_cpfs_tier_and_an_fsx_value_is_refused():
    storage_types = {r.props["storageType"] for r in plan_config(STACK, config()).of_type(
        "alicloud:nas/fileSystem:FileSystem")}
    assert storage_types == {"advance_200"}  # the shipped stack sets throughputPerTib: 200
    changed = copy.deepcopy(config())
    changed["goldenenv:storage"]["parallelFs"]["throughputPerTib"] = 250
    with pytest.raises(ConfigError) as refused:
        plan_config("tier", changed)
    (problem,) = refused.value.problems
    assert problem.key == "goldenenv:storage.parallelFs.throughputPerTib" and "advance_200" in problem.message


def test_a_bucket_name_too_short_for_a_data_flow_names_the_key():
    changed = copy.deepcopy(config())
    changed["goldenenv:storage"]["bucket"] = {"bucketName": "ckpts"}
    with pytest.raises(ConfigError) as refused:
        plan_config("short", changed)
    (problem,) = refused.value.problems
    assert problem.key == "goldenenv:storage.bucket.bucketName" and "8 characters" in problem.message
