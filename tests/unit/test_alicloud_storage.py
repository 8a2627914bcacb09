"""The Alibaba Cloud data store, image repository and their boot fragments, under Pulumi's mocks.

The stack file's plan (CPFS region) shows the retained bucket: private, versioned, encrypted, public access
blocked, adopted by import when the lookup finds it, linked to CPFS by a fileset and a data flow; a tiny program
plans NAS extreme where no CPFS is offered. The provider does not check enum strings client-side, so the values
sent are compared with the sets its documentation lists (pulumi-alicloud 4.0.0 docstrings, written out here).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pulumi
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from goldenenv.clouds.alicloud import registry, storage
from goldenenv.clouds.alicloud.storage import Found, OfflineLookup
from goldenenv.clouds.base import BuildContext
from goldenenv.nodeboot import NodeBoot, SharedFs, ready_marker
from goldenenv.plan import plan_config, stack_file
from goldenenv.render import render
from goldenenv.spec import STACK_TAG_KEY, ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STACK = "alicloud-ebmgn8v-2node"
ACCOUNT = "1234567890123456"
BUCKET = "alicloud:oss/bucket:Bucket"
FILE_SYSTEM = "alicloud:nas/fileSystem:FileSystem"

# The provider's documented values (pulumi_alicloud 4.0.0 docstrings), written out here, not read from the code
FILE_SYSTEM_TYPES = {"standard", "extreme", "cpfs", "cpfsse"}
CPFS_STORAGE_TYPES = {"advance_100", "advance_200"}
EXTREME_STORAGE_TYPES = {"standard", "advance"}
PROTOCOL_TYPES = {"cpfs": {"cpfs"}, "extreme": {"NFS"}}
DATAFLOW_THROUGHPUTS = {600, 1200, 1500}
SSE_ALGORITHMS = {"KMS", "AES256"}
ACLS = {"private", "public-read", "public-read-write"}
VERSIONING = {"Enabled", "Suspended"}
PROTOCOL_SPECS = {"General", "CL1", "CL2"}
REPO_TYPES = {"PUBLIC", "PRIVATE"}
OSS_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")  # OSS bucket naming rules


def config(stack: str = STACK) -> dict:
    return yaml.safe_load(stack_file(stack).read_text())["config"]


def planned(lookup: OfflineLookup | None = None, stack: str = STACK, cfg: dict | None = None):
    return plan_config(stack, cfg or config(stack), context=BuildContext(lookup=lookup or OfflineLookup(ACCOUNT)))


def one(result, type_token: str):
    [found] = result.of_type(type_token)
    return found


# ---------------------------------------------------------------- names

def test_bucket_name_is_project_stack_account_region():
    assert storage.bucket_name("sandbox", "alicloud-gn7i-dev", ACCOUNT, "cn-hangzhou") == \
        "sandbox-alicloud-gn7i-dev-1234567890123456-cn-hangzhou"


@settings(max_examples=300, deadline=None)
@given(project=st.text(min_size=1, max_size=256), stack=st.from_regex(r"[A-Za-z0-9_.-]{1,100}", fullmatch=True),
       region=st.sampled_from(["cn-wulanchabu", "ap-southeast-1", "eu-central-1"]))
def test_every_legal_stack_name_gives_a_valid_stable_bucket_name(project, stack, region):
    name = storage.bucket_name(project, stack, ACCOUNT, region)
    assert OSS_NAME.fullmatch(name), name
    assert len(name) >= 8  # what a CPFS data flow's source bucket needs
    assert name.endswith(f"-{ACCOUNT}-{region}") and name == storage.bucket_name(project, stack, ACCOUNT, region)


@pytest.mark.parametrize("a,b", [("Dev", "dev"), ("a_b", "a-b"), ("a.b", "a-b"), ("x" * 80, "x" * 81)])
def test_stacks_that_oss_cannot_tell_apart_still_get_their_own_bucket(a, b):
    assert storage.bucket_name("p", a, ACCOUNT, "cn-hangzhou") != storage.bucket_name("p", b, ACCOUNT, "cn-hangzhou")


@settings(max_examples=200, deadline=None)
@given(project=st.text(min_size=1, max_size=64), stack=st.from_regex(r"[A-Za-z0-9_.-]{1,100}", fullmatch=True),
       lock=st.from_regex(r"[a-z0-9][a-z0-9-]{0,40}", fullmatch=True))
def test_acr_names_fit_the_providers_rules(project, stack, lock):
    namespace, repo = registry.repository_names(project, stack, lock)
    for name in (namespace, repo):
        assert 2 <= len(name) <= 30 and re.fullmatch(r"[a-z0-9][a-z0-9-]*[a-z0-9]", name), name
    assert registry.repository_names(project, stack, lock) == (namespace, repo)


# ---------------------------------------------------------------- the bucket: private, versioned, encrypted, kept

def test_the_bucket_is_private_versioned_encrypted_blocked_and_retained():
    result = planned()
    bucket = one(result, BUCKET)
    name = bucket.props["bucket"]
    assert name == storage.bucket_name("llm-pretrain", STACK, ACCOUNT, "cn-wulanchabu")
    assert bucket.retain_on_delete and bucket.import_id is None and not bucket.props.get("forceDestroy")
    acl = one(result, "alicloud:oss/bucketAcl:BucketAcl")
    block = one(result, "alicloud:oss/bucketPublicAccessBlock:BucketPublicAccessBlock")
    versioning = one(result, "alicloud:oss/bucketVersioning:BucketVersioning")
    sse = one(result, "alicloud:oss/bucketServerSideEncryption:BucketServerSideEncryption")
    assert acl.props == {"bucket": name, "acl": "private"}
    assert block.props == {"bucket": name, "blockPublicAccess": True}
    assert versioning.props == {"bucket": name, "status": "Enabled"}
    assert sse.props["bucket"] == name and sse.props["sseAlgorithm"] == "AES256"
    assert all(r.retain_on_delete for r in (acl, block, versioning, sse))
    assert acl.props["acl"] in ACLS and versioning.props["status"] in VERSIONING
    assert sse.props["sseAlgorithm"] in SSE_ALGORITHMS
    # the sub-resources own these settings: a refresh must not make the next up delete them from the bucket
    assert {"acl", "versioning", "serverSideEncryptionRule"} <= set(bucket.ignore_changes)


def test_old_checkpoint_versions_expire_and_incomplete_uploads_are_aborted():
    result = planned()
    rules = {r["id"]: r for r in one(result, BUCKET).props["lifecycleRules"]}
    spec = result.spec
    checkpoints = rules["expire-old-checkpoint-versions"]
    assert checkpoints["enabled"] and checkpoints["prefix"] == spec.storage.parallel_fs.checkpoint_prefix
    assert checkpoints["noncurrentVersionExpirations"] == [{"days": spec.storage.bucket.noncurrent_version_days}]
    assert rules["abort-incomplete-uploads"]["abortMultipartUploads"] == [{"days": 7}]


def test_the_bucket_carries_the_stack_tags_and_the_data_flow_tag():
    result = planned()
    tags = one(result, BUCKET).props["tags"]
    assert tags["cpfs-dataflow"] == "true"
    assert tags[STACK_TAG_KEY] == STACK and tags["project"] == "llm-pretrain"
    assert tags == storage.bucket_tags(f"{STACK}-data", result.spec.stack_tags, data_flow=True)


def test_up_destroy_up_adopts_the_retained_bucket_by_import():
    first = planned()
    name = one(first, BUCKET).props["bucket"]
    assert {r.type for r in first.kept_on_destroy} >= {BUCKET, "alicloud:cr/namespace:Namespace",
                                                        "alicloud:cr/repo:Repo"}
    tags = dict(first.spec.stack_tags)
    again = planned(OfflineLookup(ACCOUNT, buckets={name: Found(name, tags)}))
    assert one(again, BUCKET).import_id == name and len(again.of_type(BUCKET)) == 1
    assert again.outputs["bucket"] == name


def test_a_bucket_of_another_stack_is_never_adopted():
    name = storage.bucket_name("llm-pretrain", STACK, ACCOUNT, "cn-wulanchabu")
    theirs = Found(name, {"project": "llm-pretrain", STACK_TAG_KEY: "someone-else"})
    with pytest.raises(ConfigError, match="bucketName.*belongs to project"):
        storage.adoptable(theirs, "llm-pretrain", STACK)
    assert storage.adoptable(Found(name, {}), "llm-pretrain", STACK) == name  # untagged: adopted, then tagged
    assert storage.adoptable(None, "llm-pretrain", STACK) is None


def test_plan_names_the_bucket_with_the_lookups_account():
    result = planned(OfflineLookup())
    assert one(result, BUCKET).props["bucket"].endswith(f"-{storage.PLACEHOLDER_ACCOUNT}-cn-wulanchabu")


# ---------------------------------------------------------------- CPFS linked to the bucket

def test_cpfs_fileset_and_data_flow_link_the_bucket():
    result = planned()
    name = one(result, BUCKET).props["bucket"]
    fs = one(result, FILE_SYSTEM)
    assert (fs.props["fileSystemType"], fs.props["protocolType"]) == ("cpfs", "cpfs")
    assert fs.props["fileSystemType"] in FILE_SYSTEM_TYPES and fs.props["protocolType"] in PROTOCOL_TYPES["cpfs"]
    assert fs.props["storageType"] in CPFS_STORAGE_TYPES
    assert fs.props["capacity"] == result.spec.storage.parallel_fs.size_gib
    assert {"zoneId", "vpcId", "vswitchId"} <= set(fs.props) and not fs.retain_on_delete
    fileset = one(result, "alicloud:nas/fileset:Fileset")
    flow = one(result, "alicloud:nas/dataFlow:DataFlow")
    assert fileset.props["fileSystemId"] == fs.id and fileset.props["fileSystemPath"] == "/goldenenv/"
    assert flow.props["sourceStorage"] == f"oss://{name}"
    assert flow.props["fsetId"] == fileset.outputs["filesetId"] and flow.props["fileSystemId"] == fs.id
    assert flow.props["throughput"] in DATAFLOW_THROUGHPUTS
    service = one(result, "alicloud:nas/protocolService:ProtocolService")
    export = one(result, "alicloud:nas/protocolMountTarget:ProtocolMountTarget")
    assert (service.props["protocolType"], service.props["protocolSpec"]) == ("NFS", "General")
    assert service.props["protocolSpec"] in PROTOCOL_SPECS
    assert export.props["fsetId"] == fileset.outputs["filesetId"]
    assert export.props["protocolServiceId"] == service.outputs["protocolServiceId"]
    assert result.outputs["sharedFs"] == fs.id


def test_data_flow_throughput_stays_under_the_file_systems_bandwidth():
    assert storage.dataflow_throughput(200, 10 * 1024) == 1500  # 2,000 MB/s baseline
    assert storage.dataflow_throughput(100, 14 * 1024) == 1200  # 1,400 MB/s
    assert storage.dataflow_throughput(100, 3600) == 600  # below every value: the smallest the API takes
    assert set(storage.DATAFLOW_THROUGHPUTS) == DATAFLOW_THROUGHPUTS


def test_the_cpfs_regions_are_where_the_stores_go_to_cpfs():
    assert storage.fs_kind_for("cn-wulanchabu") == "cpfs" and storage.fs_kind_for("ap-southeast-1") == "cpfs"
    assert storage.fs_kind_for("eu-central-1") == "nas" and storage.fs_kind_for("us-east-1") == "nas"


# ---------------------------------------------------------------- NAS extreme where no data flow is offered

class MockCloud:
    plan_mock = staticmethod(storage.plan_mock)

    @staticmethod
    def plan_call(args):
        return None


def run_program(program):
    """Run `program` under the offline plan's recording monitor and storage.plan_mock: (records, outputs)."""
    from goldenenv import plan

    records, outputs = plan.record(program, MockCloud())
    return records, outputs


def data_store(region: str, parallel_fs: bool = True, fs_kind: str | None = None, **more) -> storage.DataStore:
    return storage.DataStore("d", storage.DataStoreArgs(
        bucket_name=storage.bucket_name("p", "s", ACCOUNT, region), adopt_bucket=None, noncurrent_version_days=30,
        parallel_fs=parallel_fs, fs_kind=fs_kind or storage.fs_kind_for(region), fs_size_gib=1024,
        zone_id=f"{region}-a", vpc_id="vpc-1", vswitch_id="vsw-1", checkpoint_prefix="checkpoints/",
        region=region, tags={STACK_TAG_KEY: "s", "project": "p"}, **more))


def test_nas_extreme_and_a_mount_target_where_the_region_has_no_cpfs():
    records, outputs = run_program(lambda: {"mount": data_store("eu-central-1").mount})
    by_type = {r.type: r for r in records}
    fs = by_type[FILE_SYSTEM].props
    assert (fs["fileSystemType"], fs["protocolType"]) == ("extreme", "NFS")
    assert fs["fileSystemType"] in FILE_SYSTEM_TYPES and fs["protocolType"] in PROTOCOL_TYPES["extreme"]
    assert fs["storageType"] in EXTREME_STORAGE_TYPES and fs["encryptType"] == 1
    assert "vpcId" not in fs and "vswitchId" not in fs  # extreme NAS takes them on its mount target
    target = by_type["alicloud:nas/mountTarget:MountTarget"].props
    assert target["fileSystemId"] == by_type[FILE_SYSTEM].id and target["networkType"] == "Vpc"
    assert (target["vpcId"], target["vswitchId"]) == ("vpc-1", "vsw-1")
    assert not any(r.type.startswith(("alicloud:nas/dataFlow", "alicloud:nas/fileset")) for r in records)
    assert "cpfs-dataflow" not in by_type[BUCKET].props["tags"]
    mount = outputs["mount"]
    assert isinstance(mount, SharedFs) and mount.script == "nas-mount.sh" and mount.unit == storage.SHAREDFS_UNIT
    assert mount.values["source_path"] == f"{by_type['alicloud:nas/mountTarget:MountTarget'].outputs['mountTargetDomain']}:/share"


def test_without_a_parallel_fs_there_is_the_bucket_only():
    records, outputs = run_program(lambda: {"mount": data_store("cn-hangzhou", parallel_fs=False).mount})
    assert outputs.get("mount") is None
    assert not any(r.type.startswith("alicloud:nas/") for r in records)
    assert "cpfs-dataflow" not in next(r for r in records if r.type == BUCKET).props["tags"]


def test_cpfs_is_refused_where_the_region_offers_none():
    with pytest.raises(ValueError, match="not offered in eu-central-1"):
        storage.check_args(storage.DataStoreArgs(
            bucket_name="p-s-1234567890123456-eu-central-1", adopt_bucket=None, noncurrent_version_days=30,
            parallel_fs=True, fs_kind="cpfs", fs_size_gib=1024, zone_id="z", vpc_id="v", vswitch_id="w",
            checkpoint_prefix="c/", region="eu-central-1", tags={}))


def test_plan_mocks_depend_on_the_resource_alone():
    args = pulumi.runtime.MockResourceArgs(typ="alicloud:nas/fileset:Fileset", name="x-fileset",
                                           inputs={"fileSystemId": "cpfs-1"}, provider=None, resource_id=None)
    again = pulumi.runtime.MockResourceArgs(typ="alicloud:nas/fileset:Fileset", name="x-fileset",
                                            inputs={"fileSystemId": "cpfs-1"}, provider=None, resource_id=None)
    assert storage.plan_mock(args) == storage.plan_mock(again)
    resource_id, state = storage.plan_mock(args)
    assert resource_id == f"cpfs-1:{state['filesetId']}" and state["filesetId"].startswith("fset-")
    other = pulumi.runtime.MockResourceArgs(typ="alicloud:ecs/instance:Instance", name="n", inputs={},
                                            provider=None, resource_id=None)
    assert storage.plan_mock(other) is None  # the cloud's own mock answers for the rest


# ---------------------------------------------------------------- the image repository

def test_image_repository_is_private_retained_and_pulled_over_the_vpc():
    result = planned()
    namespace = one(result, "alicloud:cr/namespace:Namespace")
    repo = one(result, "alicloud:cr/repo:Repo")
    assert namespace.retain_on_delete and repo.retain_on_delete
    assert namespace.props["defaultVisibility"] == "PRIVATE" and namespace.props["autoCreate"] is False
    assert repo.props["repoType"] == "PRIVATE" and repo.props["repoType"] in REPO_TYPES
    ns, name = registry.repository_names("llm-pretrain", STACK, result.spec.image.lock)
    assert result.outputs["imageRepository"] == f"registry-vpc.mock.aliyuncs.com/{ns}/{name}"
    assert namespace.import_id is None and repo.import_id is None
    again = planned(OfflineLookup(ACCOUNT, namespaces={ns}, repositories={f"{ns}/{name}"}))
    assert one(again, "alicloud:cr/namespace:Namespace").import_id == ns
    assert one(again, "alicloud:cr/repo:Repo").import_id == f"{ns}/{name}"


def test_the_vpc_url_comes_from_the_repositorys_own_domains():
    assert registry._vpc_domain([{"public": "registry.cn-x.aliyuncs.com", "vpc": "registry-vpc.cn-x.aliyuncs.com"}]) \
        == "registry-vpc.cn-x.aliyuncs.com"
    with pytest.raises(ValueError, match="no VPC endpoint"):
        registry._vpc_domain([{"public": "registry.cn-x.aliyuncs.com"}])


# ---------------------------------------------------------------- boot: the mount scripts and the ACR login

def spec_of(stack: str = STACK):
    from goldenenv.lifecycle import load_spec

    return load_spec(stack)


def bash_n(script: str) -> None:
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("mount", [
    storage.cpfs_mount("cn-wulanchabu", "cpfs-0123456789abcdef", "exp-0123456789abcdef"),
    storage.nas_mount("0a1b2c3d4e-abc12.cn-hangzhou.extreme.nas.aliyuncs.com"),
], ids=["cpfs", "nas"])
def test_mount_units_render_and_pass_bash_n(mount):
    spec = spec_of()
    boot = NodeBoot(spec, "gpu", fabric="erdma", local_nvme=False,
                    image_ref="registry-vpc.cn-wulanchabu.aliyuncs.com/ns/repo@sha256:" + "0" * 64,
                    registry_login="acr")
    files = {f.path: f for f in boot.files(mount)}
    script = files[f"/usr/local/libexec/goldenenv/{mount.script}"].content
    unit = files[f"/etc/systemd/system/{storage.SHAREDFS_UNIT}"].content
    bash_n(script)
    assert f"mount_point={spec.storage.parallel_fs.mount_point}" in script
    assert "Before=docker.service goldenenv-container.service" in unit
    assert f"ExecStart=/usr/local/libexec/goldenenv/{mount.script}" in unit
    container = files["/etc/systemd/system/goldenenv-container.service"].content
    ordered = {line.split("=", 1)[0]: line.split("=", 1)[1].split() for line in container.splitlines()
               if line.startswith(("After=", "Wants=", "Requires="))}
    assert storage.SHAREDFS_UNIT in ordered["After"] and storage.SHAREDFS_UNIT in ordered["Wants"]
    assert "Requires" not in ordered, "the container waits for the mount's ready marker, retried; never Requires="
    golden = files["/usr/local/libexec/goldenenv/golden-image.sh"].content
    bash_n(golden)
    assert ready_marker(storage.SHAREDFS_UNIT) in golden and ready_marker(storage.SHAREDFS_UNIT) in script


def test_the_cpfs_script_looks_up_its_export_with_hardened_metadata_and_valid_python():
    script = render("node/cpfs-mount.sh.j2", mount_point="/mnt/fsx", owner=1000, directories=["/mnt/fsx/datasets"],
                    ready=ready_marker(storage.SHAREDFS_UNIT),
                    **storage.cpfs_mount("cn-wulanchabu", "cpfs-0123", "exp-0456").values)
    assert "export_id=exp-0456" in script and "nas_endpoint=nas-vpc.cn-wulanchabu.aliyuncs.com" in script
    assert "export_path=/share/goldenenv" in script and "mount -t \"$fs_type\"" in script
    python = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    compile(python, "cpfs-lookup", "exec")
    assert "X-aliyun-ecs-metadata-token-ttl-seconds" in python and "DescribeProtocolMountTarget" in python
    assert "X-aliyun-ecs-metadata-token\"" in python


def test_a_hostile_value_reaches_the_mount_script_as_data():
    hostile = "exp-1; touch /tmp/pwned"
    script = render("node/cpfs-mount.sh.j2", mount_point="/mnt/fsx", owner=1000, directories=[],
                    ready=ready_marker(storage.SHAREDFS_UNIT),
                    **storage.cpfs_mount("cn-wulanchabu", "cpfs-1", hostile).values)
    bash_n(script)
    assert "export_id='exp-1; touch /tmp/pwned'" in script


def test_acr_login_reads_a_provisioned_file_and_puts_no_secret_in_user_data():
    boot = NodeBoot(spec_of(), "gpu", fabric="erdma", local_nvme=False,
                    image_ref="registry-vpc.cn-wulanchabu.aliyuncs.com/ns/repo@sha256:" + "1" * 64,
                    registry_login="acr")
    cloud_config = boot.cloud_config(None)
    script = next(f.content for f in boot.files(None) if f.path.endswith("golden-image.sh"))
    bash_n(script)
    assert "registry*.aliyuncs.com)" in script and "/etc/goldenenv/acr-login" in script
    assert "--password-stdin" in script and "--password " not in script
    assert "{##" not in cloud_config and "RAM role" not in cloud_config  # the template comment stays out


# ---------------------------------------------------------------- outside Pulumi: lookups and purge

class FakeBucket:
    """BucketApi over an in-memory bucket of object versions."""

    def __init__(self, name: str, versions: list[tuple[str, str]], page: int = 1000, tags=None):
        self.name, self.stored, self.page = name, list(versions), page
        self.tags = dict(tags or {})
        self.deleted_batches: list[int] = []
        self.bucket_deleted = False

    def find(self):
        return None if self.bucket_deleted else Found(self.name, self.tags)

    def put_tags(self, tags):
        self.tags = dict(tags)

    def versions(self, key_marker, version_marker):
        start = 0 if not key_marker else self.stored.index((key_marker, version_marker)) + 1
        chunk = self.stored[start:start + self.page]
        truncated = start + self.page < len(self.stored)
        last = chunk[-1] if chunk and truncated else ("", "")
        return chunk, last[0], last[1], truncated

    def delete_versions(self, batch):
        assert len(batch) <= 1000
        self.deleted_batches.append(len(batch))

    def delete_bucket(self):
        self.bucket_deleted = True


def test_purge_deletes_every_version_then_the_bucket():
    versions = [(f"checkpoints/step-{n // 3}.pt", f"v{n}") for n in range(2500)]
    bucket = FakeBucket("kept", versions, page=1200)
    lines: list[str] = []
    assert storage.purge_bucket("kept", "cn-hangzhou", lines.append, client=bucket) == 2500
    assert bucket.deleted_batches == [1000, 200, 1000, 200, 100] and bucket.bucket_deleted
    assert lines == ["purged bucket kept (2500 object versions)"]


def test_align_bucket_tags_retags_only_when_they_differ():
    bucket = FakeBucket("kept", [], tags={"owner": "someone-who-left"})
    wanted = {"owner": "ml-infra", STACK_TAG_KEY: STACK}
    assert storage.align_bucket_tags("kept", wanted, "cn-hangzhou", client=bucket, log=lambda m: None)
    assert bucket.tags == wanted
    assert not storage.align_bucket_tags("kept", wanted, "cn-hangzhou", client=bucket, log=lambda m: None)


def test_the_live_lookup_names_the_sdk_it_needs(monkeypatch):
    monkeypatch.setitem(sys.modules, "oss2", None)  # as if not installed
    lookup = storage.LiveLookup("cn-hangzhou", credentials=storage.guard.Credentials("id", "secret"))
    with pytest.raises(RuntimeError, match="pip install oss2"):
        lookup.bucket("any")
    with pytest.raises(RuntimeError, match="pip install oss2"):
        storage.oss_bucket("any", "cn-hangzhou", storage.guard.Credentials("id", "secret"))
    monkeypatch.setitem(sys.modules, "alibabacloud_cr20160607", None)
    with pytest.raises(RuntimeError, match="pip install alibabacloud-cr20160607"):
        lookup.namespace_exists("goldenenv-p")


class TeaError(Exception):
    """The shape of Tea.exceptions.TeaException: code, and statusCode from the response."""

    def __init__(self, code: str, status: int):
        super().__init__(code)
        self.code, self.statusCode = code, status


def test_a_missing_acr_namespace_is_absent_and_other_errors_are_raised():
    def missing():
        raise TeaError("NAMESPACE_NOT_EXIST", 404)

    def forbidden():
        raise TeaError("Forbidden.RAM", 403)

    assert storage._found(lambda: {"namespace": "x"}) is True
    assert storage._found(missing) is False
    with pytest.raises(TeaError, match="Forbidden"):
        storage._found(forbidden)


def test_the_live_lookup_reads_the_account_through_sts():
    calls = []
    lookup = storage.LiveLookup("cn-hangzhou", credentials=storage.guard.Credentials("id", "secret"),
                                sts=lambda action, params: calls.append(action) or {"AccountId": ACCOUNT})
    assert lookup.account_id() == ACCOUNT and lookup.account_id() == ACCOUNT and calls == ["GetCallerIdentity"]

    def refused(action, params):
        raise storage.guard.ApiError(action, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")

    with pytest.raises(ConfigError, match="cannot read the Alibaba Cloud account"):
        storage.LiveLookup("cn-hangzhou", credentials=storage.guard.Credentials("id", "s"), sts=refused).account_id()


def test_credentials_come_from_the_cli_variables_or_the_providers():
    assert storage.credentials_from_env({"ALICLOUD_ACCESS_KEY": "a", "ALICLOUD_SECRET_KEY": "b"}) == \
        storage.guard.Credentials("a", "b", None)
    both = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "x", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "y",
            "ALIBABA_CLOUD_SECURITY_TOKEN": "t", "ALICLOUD_ACCESS_KEY": "a", "ALICLOUD_SECRET_KEY": "b"}
    assert storage.credentials_from_env(both) == storage.guard.Credentials("x", "y", "t")
    with pytest.raises(ConfigError, match="no Alibaba Cloud credentials"):
        storage.credentials_from_env({})


@pytest.mark.parametrize("tier", [250, 150, 300])
def test_a_disabled_file_system_plans_whatever_its_tier_says(tier):
    """The tier of a file system that is not built is not judged (the config check skips it too): a disabled
    parallelFs with the spec's default 250 plans, with no file system, rather than failing inside the program."""
    cfg = config("alicloud-gn7i-dev")
    cfg["goldenenv:storage"] = {"parallelFs": {"enabled": False, "throughputPerTib": tier}}
    result = planned(stack="alicloud-gn7i-dev", cfg=cfg)
    assert not result.of_type(FILE_SYSTEM)
    assert result.of_type(BUCKET)
