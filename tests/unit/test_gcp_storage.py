"""Google Cloud's data store (Cloud Storage bucket + Managed Lustre), its transfers and boot scripts.

The component runs under the offline plan's recording monitor with storage.plan_mock. The values Google takes are
written out here from its documentation, not read from the code: Managed Lustre's tiers and capacities
(docs.cloud.google.com/managed-lustre/docs/performance-tiers), the importData / exportData bodies and the
long-running operation shapes (managed-lustre/docs/reference/rest/v1, google.longrunning.Operation).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pulumi
import pulumi_gcp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import storage
from goldenenv.clouds.gcp.storage import Found, OfflineLookup
from goldenenv.nodeboot import SharedFs, ready_marker
from goldenenv.render import render
from goldenenv.spec import STACK_TAG_KEY, ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GCP_PROJECT = "ml-team-prod-4821"
PROJECT, STACK = "llm-pretrain", "gcp-a3mega-2node"
BUCKET = "gcp:storage/bucket:Bucket"
LUSTRE = "gcp:lustre/instance:Instance"
RANGE = "gcp:compute/globalAddress:GlobalAddress"
PEERING = "gcp:servicenetworking/connection:Connection"
NETWORK_ID = f"projects/{GCP_PROJECT}/global/networks/ge-llm-system"
GCS_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")  # Cloud Storage bucket naming, without dots
LUSTRE_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")  # lustre.Instance instance_id rules
TAGS = {STACK_TAG_KEY: STACK, "project": PROJECT, "cost-center": "ML-42"}


# ---------------------------------------------------------------- names

def test_bucket_name_is_project_stack_gcp_project_region():
    assert storage.bucket_name(PROJECT, STACK, GCP_PROJECT, "us-central1") == \
        "llm-pretrain-gcp-a3mega-2node-ml-team-prod-4821-us-central1"


@settings(max_examples=300, deadline=None)
@given(project=st.text(min_size=1, max_size=256), stack=st.from_regex(r"[A-Za-z0-9_.-]{1,100}", fullmatch=True),
       gcp_project=st.from_regex(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", fullmatch=True),
       region=st.sampled_from(["us-central1", "europe-west4", "northamerica-northeast1", "asia-southeast1"]))
def test_every_legal_stack_name_gives_a_valid_stable_bucket_name(project, stack, gcp_project, region):
    name = storage.bucket_name(project, stack, gcp_project, region)
    assert GCS_NAME.fullmatch(name) and 3 <= len(name) <= 63, name
    assert not name.startswith("goog") and "google" not in name, name
    assert storage.valid_bucket_name(name)
    assert name == storage.bucket_name(project, stack, gcp_project, region)


@pytest.mark.parametrize("a,b", [("Dev", "dev"), ("a_b", "a-b"), ("a.b", "a-b"), ("x" * 80, "x" * 81)])
def test_stacks_that_cloud_storage_cannot_tell_apart_still_get_their_own_bucket(a, b):
    assert storage.bucket_name("p", a, GCP_PROJECT, "us-east5") != storage.bucket_name("p", b, GCP_PROJECT, "us-east5")


def test_reserved_words_never_reach_a_bucket_name():
    for project, stack in [("google-research", "dev"), ("goog", "x"), ("g", "oogle")]:
        name = storage.bucket_name(project, stack, GCP_PROJECT, "us-central1")
        assert storage.valid_bucket_name(name) and not name.startswith("goog") and "google" not in name, name


@pytest.mark.parametrize("name,ok", [
    ("my-bucket_1", True), ("abc", True), ("ab", False), ("a" * 64, False), ("My-bucket", False),
    ("-bucket", False), ("bucket-", False), ("goog-data", False), ("my-google-data", False), ("a.b.c", False),
    ("x; rm -rf /", False),
])
def test_valid_bucket_name(name, ok):
    assert storage.valid_bucket_name(name) is ok


# ---------------------------------------------------------------- the component under the offline plan's mocks

class MockCloud:
    plan_mock = staticmethod(storage.plan_mock)

    @staticmethod
    def plan_call(args):
        return None


def run_program(program):
    """Run `program` under the offline plan's recording monitor and storage.plan_mock: (records, outputs)."""
    from goldenenv import plan

    return plan.record(program, MockCloud())


def args(**more) -> storage.DataStoreArgs:
    values = dict(
        bucket_name=storage.bucket_name(PROJECT, STACK, GCP_PROJECT, "us-central1"), adopt_bucket=None,
        noncurrent_version_days=30, parallel_fs=True, fs_size_gib=18_000, fs_throughput_per_tib=500,
        region="us-central1", zone="us-central1-a", network_id=NETWORK_ID, network_name="ge-llm-system",
        gcp_project=GCP_PROJECT, checkpoint_prefix="checkpoints/", labels=gcp_labels.labels(TAGS))
    values.update(more)
    return storage.DataStoreArgs(**values)


def data_store(**more) -> storage.DataStore:
    return storage.DataStore(f"{STACK}-data", args(**more))


def outputs_of(store: storage.DataStore) -> dict:
    return {"bucket": store.bucket_name, "url": store.bucket_url, "fs": store.fs_id, "ip": store.fs_mount_ip,
            "mount": store.mount}


def by_type(records, token):
    [found] = [r for r in records if r.type == token]
    return found


def test_the_bucket_is_uniform_private_versioned_labelled_and_retained():
    records, outputs = run_program(lambda: outputs_of(data_store()))
    bucket = by_type(records, BUCKET)
    name = storage.bucket_name(PROJECT, STACK, GCP_PROJECT, "us-central1")
    assert bucket.props["name"] == name and bucket.props["location"] == "us-central1"
    assert bucket.props["uniformBucketLevelAccess"] is True
    assert bucket.props["publicAccessPrevention"] == "enforced"
    assert bucket.props["versioning"] == {"enabled": True}
    assert bucket.retain_on_delete and not bucket.protect and bucket.import_id is None
    assert bucket.props.get("forceDestroy") in (None, False)
    labels = bucket.props["labels"]
    assert labels["goldenenv_stack"] == STACK and labels["project"] == PROJECT and labels["cost-center"] == "ml-42"
    assert outputs["bucket"] == name and outputs["url"] == f"gs://{name}"
    component = next(r for r in records if r.type == "goldenenv:gcp:DataStore")
    assert bucket.parent_urn == component.urn


def test_old_checkpoint_versions_expire_after_the_stacks_days():
    records, _ = run_program(lambda: outputs_of(data_store(noncurrent_version_days=12)))
    rules = by_type(records, BUCKET).props["lifecycleRules"]
    delete = [r for r in rules if r["action"]["type"] == "Delete"]
    assert len(delete) == 1
    condition = delete[0]["condition"]
    assert condition["daysSinceNoncurrentTime"] == 12 and condition["withState"] == "ARCHIVED"
    assert condition["matchesPrefixes"] == ["checkpoints/"]
    abort = [r for r in rules if r["action"]["type"] == "AbortIncompleteMultipartUpload"]
    assert abort and abort[0]["condition"]["age"] == 7


def test_without_a_parallel_fs_there_is_the_bucket_only():
    records, outputs = run_program(lambda: outputs_of(data_store(parallel_fs=False, fs_size_gib=1200,
                                                                 fs_throughput_per_tib=250)))
    assert {r.type for r in records if r.custom} == {BUCKET}
    assert outputs.get("mount") is None and outputs.get("fs") is None


# ---------------------------------------------------------------- adoption of the retained bucket

def test_up_destroy_up_adopts_the_retained_bucket_by_import():
    name = storage.bucket_name(PROJECT, STACK, GCP_PROJECT, "us-central1")
    lookup = OfflineLookup(GCP_PROJECT, buckets={name: Found(name, gcp_labels.labels(TAGS))})
    adopt = storage.adoptable(lookup.bucket(name), PROJECT, STACK)
    assert adopt == name
    records, _ = run_program(lambda: outputs_of(data_store(adopt_bucket=adopt)))
    bucket = by_type(records, BUCKET)
    assert bucket.import_id == name and bucket.retain_on_delete


def test_nothing_is_adopted_when_no_bucket_exists_and_an_unlabelled_one_is():
    name = "some-bucket"
    assert storage.adoptable(OfflineLookup().bucket(name), PROJECT, STACK) is None
    assert storage.adoptable(Found(name, {}), PROJECT, STACK) == name


@pytest.mark.parametrize("owner", [{"project": PROJECT, "goldenenv_stack": "other-stack"},
                                   {"project": "someone-else", "goldenenv_stack": STACK}])
def test_a_bucket_of_another_stack_is_never_adopted(owner):
    with pytest.raises(ConfigError) as refused:
        storage.adoptable(Found("their-bucket", owner), PROJECT, STACK)
    text = str(refused.value)
    assert "goldenenv:storage.bucket.bucketName" in text and "their-bucket" in text and "belongs to" in text


def test_a_stack_whose_name_labels_lowercase_still_adopts_its_own_bucket():
    tags = {STACK_TAG_KEY: "GCP-Dev", "project": "LLM"}
    found = Found("b", gcp_labels.labels(tags))
    assert storage.adoptable(found, "LLM", "GCP-Dev") == "b"


# ---------------------------------------------------------------- Managed Lustre on private services access

def test_lustre_gets_private_services_access_and_the_tier_asked_for(monkeypatch):
    captured = {}

    class SpyInstance(pulumi_gcp.lustre.Instance):
        def __init__(self, resource_name, opts=None, **kwargs):
            captured["depends_on"] = list(opts.depends_on or [])
            super().__init__(resource_name, opts=opts, **kwargs)

    monkeypatch.setattr(storage.gcp.lustre, "Instance", SpyInstance)
    records, outputs = run_program(lambda: outputs_of(data_store()))
    address, connection, fs = by_type(records, RANGE), by_type(records, PEERING), by_type(records, LUSTRE)
    assert address.props["purpose"] == "VPC_PEERING" and address.props["addressType"] == "INTERNAL"
    assert address.props["prefixLength"] == 20 and address.props["network"] == NETWORK_ID
    assert connection.props["network"] == NETWORK_ID
    assert connection.props["service"] == "servicenetworking.googleapis.com"
    assert connection.props["reservedPeeringRanges"] == [address.props["name"]]
    assert [type(d).__name__ for d in captured["depends_on"]] == ["Connection", "BucketIAMMember"]
    props = fs.props
    assert props["capacityGib"] == "18000" and props["perUnitStorageThroughput"] == "500"
    assert props["location"] == "us-central1-a" and props["network"] == NETWORK_ID
    assert re.fullmatch(r"[A-Za-z0-9]{1,8}", props["filesystem"])
    assert LUSTRE_ID.fullmatch(props["instanceId"]) and props["labels"]["goldenenv_stack"] == STACK
    assert not fs.retain_on_delete  # the file system goes with the stack; destroy exports it first
    mount_point = fs.outputs["mountPoint"]
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+@tcp:/" + props["filesystem"], mount_point)
    assert outputs["fs"] == props["instanceId"] and outputs["ip"] == mount_point.split("@")[0]
    mount = outputs["mount"]
    assert isinstance(mount, SharedFs) and mount.unit == "goldenenv-sharedfs.service"
    assert mount.script == "lustre-mount-gcp.sh" and mount.values["source_path"] == mount_point


@pytest.mark.parametrize("size,tier", [(9_000, 1000), (18_000, 500), (36_000, 250), (72_000, 125),
                                       (1_530_000, 1000), (1_584_000, 1000), (2_376_000, 125)])
def test_sizes_google_takes_pass(size, tier):
    assert storage.problems(True, size, tier) == []


@pytest.mark.parametrize("size,tier,key,says", [
    (1_200, 250, "sizeGib", "36,000"),       # the spec's default size is far below any tier's minimum
    (10_000, 1000, "sizeGib", "multiple of 9,000"),
    (1_539_000, 1000, "sizeGib", "multiple of 72,000"),  # above 1,530,000 GiB the step is 72,000
    (9_000, 500, "sizeGib", "18,000"),
    (72_000, 200, "throughputPerTib", "125, 250, 500, 1000"),
    (72_000, 25, "throughputPerTib", "125, 250, 500, 1000"),
])
def test_a_size_or_tier_google_refuses_names_the_key_and_the_valid_values(size, tier, key, says):
    found = storage.problems(True, size, tier)
    assert len(found) == 1 and found[0].startswith(f"goldenenv:storage.parallelFs.{key}: "), found
    assert says in found[0]
    assert storage.problems(False, size, tier) == []  # no parallel file system, nothing to refuse


def test_spec_problems_are_problems_at_the_key():
    class Fs:
        enabled, size_gib, throughput_per_tib = True, 1200, 250

    class Spec:
        class storage:  # noqa: N801
            parallel_fs = Fs

    [problem] = storage.spec_problems(Spec)
    assert problem.key == "goldenenv:storage.parallelFs.sizeGib" and "36,000" in problem.message


def test_the_component_refuses_a_tier_google_does_not_take():
    with pytest.raises(ValueError, match=r"throughputPerTib.*125, 250, 500, 1000"):
        storage.check_args(args(fs_throughput_per_tib=200))
    with pytest.raises(ValueError, match="not a Cloud Storage bucket name"):
        storage.check_args(args(bucket_name="goog-mine"))


def test_plan_mocks_depend_on_the_resource_alone():
    def mock(typ, name, inputs):
        return storage.plan_mock(pulumi.runtime.MockResourceArgs(typ=typ, name=name, inputs=inputs, provider=None,
                                                                 resource_id=None))

    inputs = {"instanceId": "x-lustre", "location": "us-central1-a", "filesystem": "lustrefs"}
    assert mock(LUSTRE, "x-lustre", inputs) == mock(LUSTRE, "x-lustre", dict(inputs))
    resource_id, state = mock(LUSTRE, "x-lustre", inputs)
    assert resource_id == f"projects/{storage.PLACEHOLDER_PROJECT}/locations/us-central1-a/instances/x-lustre"
    assert state["mountPoint"].endswith("@tcp:/lustrefs") and state["mountPoint"].startswith("10.90.")
    assert mock(BUCKET, "b", {"name": "bkt"}) == ("bkt", {
        "name": "bkt", "url": "gs://bkt", "project": storage.PLACEHOLDER_PROJECT,
        "selfLink": "https://www.googleapis.com/storage/v1/b/bkt"})
    assert mock("gcp:compute/instance:Instance", "n", {}) is None  # the cloud's own mock answers for the rest


# ---------------------------------------------------------------- Google's APIs, served by a local fake

class FakeGoogle:
    """A local HTTP server answering like Google's JSON APIs: each route maps (method, path) to a list of
    (status, body) answers, the last one repeated; every request is recorded."""

    def __init__(self, routes):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.requests = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((self.command, self.path, dict(self.headers), body))
                key = (self.command, self.path.split("?", 1)[0])
                answers = fake.routes.get(key)
                status, payload = (answers.pop(0) if len(answers) > 1 else answers[0]) if answers else (
                    404, {"error": {"code": 404, "message": f"no route {key}", "status": "NOT_FOUND"}})
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _answer

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    servers = []

    def make(routes):
        servers.append(FakeGoogle(routes))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


INSTANCE = f"projects/{GCP_PROJECT}/locations/us-central1-a/instances/llm-lustre"
OPERATION = f"projects/{GCP_PROJECT}/locations/us-central1-a/operations/operation-1718000000000-abc"
METADATA_TYPE = "type.googleapis.com/google.cloud.lustre.v1.ExportDataMetadata"


def operation(done: bool, copied: int = 0, found: int = 3, failed: int = 0, **result) -> dict:
    """A google.longrunning.Operation as Managed Lustre returns it (int64 counters as JSON strings)."""
    counters = {"foundObjectsCount": str(found), "bytesFoundCount": str(found * 2**30),
                "objectsCopiedCount": str(copied), "bytesCopiedCount": str(copied * 2**30)}
    if failed:
        counters["objectsFailedCount"] = str(failed)
    op = {"name": OPERATION, "done": done,
          "metadata": {"@type": METADATA_TYPE, "createTime": "2026-01-01T00:00:00Z",
                       "operationMetadata": {"counters": counters}}}
    return {**op, **result}


def run_transfer(server, direction="export", **more):
    logs = []
    result = storage.transfer(direction, GCP_PROJECT, "us-central1-a", "llm-lustre", "llm-bucket", "",
                              token_fn=lambda: "tok-123", log=logs.append, base_url=server.url,
                              poll_seconds=0, sleep=lambda s: None, **more)
    return result, logs


def test_export_starts_the_transfer_and_polls_the_operation_to_done(fake):
    server = fake({
        ("POST", f"/v1/{INSTANCE}:exportData"): [(200, operation(False))],
        ("GET", f"/v1/{OPERATION}"): [(200, operation(False, copied=1)), (200, operation(False, copied=2)),
                                      (200, operation(True, copied=3, response={"@type": "x"}))],
    })
    result, logs = run_transfer(server)
    method, path, headers, body = server.requests[0]
    assert (method, path) == ("POST", f"/v1/{INSTANCE}:exportData")
    assert headers["Authorization"] == "Bearer tok-123"
    assert body == {"lustrePath": {"path": "/"}, "gcsPath": {"uri": "gs://llm-bucket/"}}
    assert [r[:2] for r in server.requests[1:]] == [("GET", f"/v1/{OPERATION}")] * 3
    assert result.operation == OPERATION and result.objects_copied == 3 and result.bytes_copied == 3 * 2**30
    assert any("3 of 3 objects copied" in line for line in logs)


def test_import_of_a_prefix_posts_import_data_with_both_paths(fake):
    server = fake({
        ("POST", f"/v1/{INSTANCE}:importData"): [(200, operation(True, copied=3, response={}))],
    })
    logs = []
    result = storage.transfer("import", GCP_PROJECT, "us-central1-a", "llm-lustre", "llm-bucket", "datasets/",
                              token_fn=lambda: "t", log=logs.append, base_url=server.url, sleep=lambda s: None)
    body = server.requests[0][3]
    assert body == {"gcsPath": {"uri": "gs://llm-bucket/datasets/"}, "lustrePath": {"path": "/datasets"}}
    assert result.objects_copied == 3


def test_an_operation_error_fails_clearly_with_the_command_to_run_by_hand(fake):
    server = fake({
        ("POST", f"/v1/{INSTANCE}:exportData"): [(200, operation(False))],
        ("GET", f"/v1/{OPERATION}"): [(200, operation(True, error={
            "code": 7, "message": "service agent lacks storage.objects.create on llm-bucket"}))],
    })
    with pytest.raises(RuntimeError) as failed:
        run_transfer(server)
    text = str(failed.value)
    assert "export of Managed Lustre llm-lustre" in text and "failed" in text and OPERATION in text
    assert "storage.objects.create" in text
    assert ("gcloud lustre instances export-data llm-lustre --project=ml-team-prod-4821 --location=us-central1-a "
            "--gcs-path-uri=gs://llm-bucket/ --lustre-path=/") in text


def test_failed_objects_fail_the_transfer(fake):
    server = fake({("POST", f"/v1/{INSTANCE}:exportData"): [(200, operation(True, copied=2, failed=1,
                                                                               response={}))]})
    with pytest.raises(RuntimeError, match="1 objects not copied"):
        run_transfer(server)


def test_a_refused_start_says_why_and_what_to_run(fake):
    server = fake({("POST", f"/v1/{INSTANCE}:exportData"): [(409, {"error": {
        "code": 409, "message": "unable to queue the operation", "status": "ABORTED"}})]})
    with pytest.raises(RuntimeError) as refused:
        run_transfer(server)
    text = str(refused.value)
    assert "could not start" in text and "unable to queue the operation" in text
    assert "another transfer is running" in text and "gcloud lustre instances export-data" in text


def test_an_operation_still_running_at_the_timeout_stops_destroy(fake):
    server = fake({("POST", f"/v1/{INSTANCE}:exportData"): [(200, operation(False))],
                   ("GET", f"/v1/{OPERATION}"): [(200, operation(False, copied=1))]})
    with pytest.raises(RuntimeError, match="still running after"):
        run_transfer(server, timeout_seconds=0)


def test_exporting_an_instance_that_is_gone_is_nothing_to_do(fake):
    server = fake({})
    result, logs = run_transfer(server)
    assert result is None and "no longer exists" in logs[0]
    with pytest.raises(RuntimeError, match="could not start the import"):
        run_transfer(server, direction="import")
    with pytest.raises(ValueError):
        run_transfer(server, direction="sideways")


# ---------------------------------------------------------------- lookups, labels and purge over Cloud Storage

def test_the_live_lookup_reads_a_buckets_labels(fake):
    server = fake({("GET", "/storage/v1/b/mine"): [(200, {"name": "mine", "location": "US-CENTRAL1",
                                                          "labels": {"project": PROJECT}})],
                   ("GET", "/storage/v1/b/theirs"): [(403, {"error": {"code": 403, "message": "denied"}})],
                   ("GET", "/storage/v1/b/far"): [(200, {"name": "far", "location": "EUROPE-WEST4"})]})
    lookup = storage.LiveLookup(GCP_PROJECT, "us-central1", token_fn=lambda: "t", base_url=server.url)
    assert lookup.project_id() == GCP_PROJECT
    assert lookup.bucket("mine") == Found("mine", {"project": PROJECT})
    assert lookup.bucket("absent") is None and not lookup.bucket_exists("absent")
    with pytest.raises(ConfigError, match="another project owns it"):
        lookup.bucket("theirs")
    with pytest.raises(ConfigError, match="europe-west4"):
        lookup.bucket("far")


def test_align_bucket_labels_sets_wanted_and_clears_stale(fake):
    server = fake({("GET", "/storage/v1/b/b"): [(200, {"labels": {"project": "p", "old": "x"}})],
                   ("PATCH", "/storage/v1/b/b"): [(200, {})]})
    assert storage.align_bucket_labels("b", {"project": "p", "goldenenv_stack": "s"}, lambda: "t", log=lambda m: None,
                                       base_url=server.url)
    assert server.requests[-1][3] == {"labels": {"old": None, "project": "p", "goldenenv_stack": "s"}}


def test_purge_deletes_every_generation_then_the_bucket(fake):
    root = "/storage/v1/b/llm-bucket"
    server = fake({
        ("GET", f"{root}/o"): [(200, {"items": [{"name": "ckpt/a b", "generation": "1"},
                                                {"name": "ckpt/a b", "generation": "2"}], "nextPageToken": "n"}),
                               (200, {"items": [{"name": "datasets/x", "generation": "7"}]})],
        ("DELETE", f"{root}/o/ckpt%2Fa%20b"): [(204, {})],
        ("DELETE", f"{root}/o/datasets%2Fx"): [(204, {})],
        ("DELETE", root): [(204, {})],
    })
    logs = []
    assert storage.purge("llm-bucket", lambda: "t", logs.append, base_url=server.url) == 3
    deletes = [path for method, path, *_ in server.requests if method == "DELETE"]
    assert deletes == [f"{root}/o/ckpt%2Fa%20b?generation=1", f"{root}/o/ckpt%2Fa%20b?generation=2",
                       f"{root}/o/datasets%2Fx?generation=7", root]
    assert "versions=true" in server.requests[0][1] and "pageToken=n" in server.requests[3][1]
    assert "purged bucket llm-bucket (3 object versions)" in logs


# ---------------------------------------------------------------- boot: the mount and the one-time import

def bash_n(script: str) -> None:
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def mount_script(source_path: str = "10.90.0.2@tcp:/lustrefs") -> str:
    return render("node/lustre-mount-gcp.sh.j2", mount_point="/fsx", owner=1000,
                  directories=["/fsx/datasets", "/fsx/checkpoints"], ready=ready_marker(storage.SHAREDFS_UNIT),
                  **storage.lustre_mount(source_path).values)


def test_the_mount_script_mounts_lustre_after_waiting_for_its_client():
    script = mount_script()
    bash_n(script)
    assert "source_path=10.90.0.2@tcp:/lustrefs" in script and "mount_point=/fsx" in script
    assert 'mount -t lustre -o "$options" "$source_path" "$mount_point"' in script
    assert "modprobe lustre" in script and "mount.lustre" in script
    assert "mkdir -p /fsx/datasets /fsx/checkpoints" in script
    assert ready_marker(storage.SHAREDFS_UNIT) in script


def test_a_hostile_value_reaches_the_mount_script_as_data():
    script = mount_script("10.0.0.2@tcp:/fs; touch /tmp/pwned")
    bash_n(script)
    assert "source_path='10.0.0.2@tcp:/fs; touch /tmp/pwned'" in script


def test_the_mount_unit_renders_through_the_nodes_boot():
    from goldenenv.lifecycle import load_spec
    from goldenenv.nodeboot import shared_fs_unit

    unit = shared_fs_unit(load_spec("alicloud-ebmgn8v-2node"), storage.lustre_mount("10.90.0.2@tcp:/lustrefs"),
                          scheduler=True)
    bash_n(unit.script.content)
    assert unit.script.path.endswith("/lustre-mount-gcp.sh") and "mount -t lustre" in unit.script.content
    assert "ExecStart=/usr/local/libexec/goldenenv/lustre-mount-gcp.sh" in unit.unit.content


def import_script(**more) -> str:
    values = storage.import_values(GCP_PROJECT, "us-central1-a", "llm-lustre", "llm-bucket", "/fsx")
    values.update(more)
    return render("node/lustre-import-gcp.sh.j2", **values)


def test_the_import_script_calls_import_data_once_with_a_metadata_token():
    script = import_script()
    bash_n(script)
    for line in ("project=ml-team-prod-4821", "zone=us-central1-a", "instance_id=llm-lustre",
                 "gcs_path=gs://llm-bucket/", "lustre_path=/", "marker=/fsx/.goldenenv/bucket-imported"):
        assert line in script
    assert "Metadata-Flavor: Google" in script and "/instance/service-accounts/default/token" in script
    assert '$api/projects/$project/locations/$zone/instances/$instance_id:importData' in script
    assert 'if [ "$marked_uid" = "$uid" ]' in script and '> "$marker"' in script
    assert "gcloud lustre instances import-data" in script


def test_a_hostile_value_reaches_the_import_script_as_data():
    script = import_script(instance_id="x; touch /tmp/pwned", gcs_path="gs://b/$(reboot)/")
    bash_n(script)
    assert "instance_id='x; touch /tmp/pwned'" in script and "gcs_path='gs://b/$(reboot)/'" in script


def python_in(script: str, opening: str) -> str:
    return script.split(opening, 1)[1].split("\n'", 1)[0]


@pytest.mark.parametrize("op,says", [
    (operation(False, copied=1), "running 1 of 3 objects copied"),
    (operation(True, copied=3, response={}), "done 3 objects copied"),
    (operation(True, error={"code": 7, "message": "no access"}), "failed no access"),
    (operation(True, copied=2, failed=1, response={}), "failed 1 objects not copied"),
])
def test_the_import_scripts_operation_reader_reads_googles_shapes(op, says):
    reader = python_in(import_script(), "state=$(printf '%s' \"$answer\" | python3 -c '\n")
    done = subprocess.run(["python3", "-c", reader], input=json.dumps(op), text=True, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == says


def test_the_import_scripts_request_body_is_json_whatever_the_paths_hold():
    builder = python_in(import_script(), "body=$(python3 -c '\n")
    odd = 'gs://b/"quoted" \\ $(x)/'
    done = subprocess.run(["python3", "-c", builder, odd, "/"], text=True, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"gcsPath": {"uri": odd}, "lustrePath": {"path": "/"}}


def test_two_projects_with_the_same_stack_name_get_their_own_lustre():
    ours = storage.lustre_instance_id(f"{STACK}-data", storage.bucket_name(PROJECT, STACK, GCP_PROJECT, "us-east5"))
    theirs = storage.lustre_instance_id(f"{STACK}-data", storage.bucket_name("vision", STACK, GCP_PROJECT, "us-east5"))
    assert ours != theirs and LUSTRE_ID.fullmatch(ours) and LUSTRE_ID.fullmatch(theirs)


def test_the_live_lookup_asks_compute_engine_whether_the_host_image_is_readable(fake):
    mine, missing, theirs = (f"projects/{GCP_PROJECT}/global/images/slurm-a3mega",
                             f"projects/{GCP_PROJECT}/global/images/not-built-yet",
                             "projects/another-project/global/images/private")
    server = fake({("GET", f"/{mine}"): [(200, {"name": "slurm-a3mega", "status": "READY"})],
                   ("GET", f"/{theirs}"): [(403, {"error": {"code": 403, "message": "Required 'compute.images.get' "
                                                             "permission", "status": "PERMISSION_DENIED"}})]})
    lookup = storage.LiveLookup(GCP_PROJECT, "us-central1", token_fn=lambda: "t", compute_url=server.url)
    assert lookup.image_readable(mine)
    assert not lookup.image_readable(missing), "Compute Engine answers 404 for an image never built"
    assert not lookup.image_readable(theirs)
    assert [r[2]["Authorization"] for r in server.requests] == ["Bearer t"] * 3


class NothingStopped:
    """The stack's stopped nodes as Compute Engine lists them: none."""

    def stopped(self) -> list[str]:
        return []

    def start(self, names: list[str]) -> None:
        raise AssertionError(f"nothing is stopped, yet {names} were started")


def test_up_refuses_a_host_image_the_project_cannot_read_before_creating_anything():
    """The A3 Mega stack on an image the user builds first: an up before it exists is refused naming the key, by
    goldenenv up's before_up and by the program itself (pulumi up), before any resource is declared."""
    from goldenenv import clouds, stackconfig
    from goldenenv.clouds.base import BuildContext
    from goldenenv.plan import plan_config, run_program, stack_file

    stack = "gcp-a3mega-2node"
    config = stackconfig.read_stack_file(stack_file(stack))
    config["goldenenv:nodes"]["hostImage"] = {"id": f"projects/{GCP_PROJECT}/global/images/slurm-a3mega",
                                              "driver": "580.65.06", "kernelModules": ["import_helper"]}
    spec = plan_config(stack, config).spec
    image = spec.nodes[0].host_image.id
    lookup = storage.OfflineLookup(unreadable_images=frozenset({image}))
    with pytest.raises(ConfigError) as refused:
        clouds.get("gcp").before_up(spec, lambda m: None, lookup, nodes=NothingStopped())
    [problem] = refused.value.problems
    assert problem.key == "goldenenv:nodes.hostImage.id" and image in problem.message and "build it" in problem.message
    with pytest.raises(Exception, match="not an image this project can read"):
        run_program(stack, config, BuildContext(lookup=lookup))
    assert clouds.get("gcp").before_up(spec, lambda m: None, storage.OfflineLookup(), nodes=NothingStopped())
