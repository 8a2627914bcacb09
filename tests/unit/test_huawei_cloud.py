"""Huawei Cloud's stack rules: bad input is refused at its key (exit 2 in the CLI), each anchored on the fact it
rests on; the export before destroy; the registry's temporary login; the IAM judge."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from goldenenv import clouds, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.huawei import obslink, privilege
from goldenenv.spec import ConfigError

STACKS = Path(__file__).resolve().parents[2] / "stacks"
DEV = "huawei-gpu-dev"


def refusals(stack: str, **changes) -> list[str]:
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    values = copy.deepcopy(values)
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            values[section] = {**values.get(section, {}), field: value}
        else:
            values[section] = value
    try:
        clouds.validate(stackconfig.load(stack, values))
    except ConfigError as e:
        return [str(p) for p in e.problems]
    return []


def test_the_shipped_stack_passes():
    assert refusals(DEV) == []


def test_the_dev_stack_plans_strict_with_exit_0():
    result = CliRunner().invoke(app, ["plan", "-s", DEV, "--strict"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "huaweicloud:Ecs/instance:Instance" in result.output and "FunctionGraph/trigger:Trigger" in result.output


def test_spot_is_refused_until_its_notice_is_known():
    found = refusals(DEV, nodes__capacity="spot")
    assert any(p.startswith("goldenenv:nodes.capacity") and "on-demand" in p for p in found), found


def test_rdma_is_refused_on_a_gpu_ecs_flavor():
    found = refusals(DEV, nodes__rdma=True)
    assert any(p.startswith("goldenenv:nodes.rdma") for p in found), found


@pytest.mark.parametrize("size, words", [(1000, "1,228"), (4000, "nearest is 3,686")])
def test_sfs_turbo_hpc_below_its_minimum_or_off_its_step_is_refused(size, words):
    """Huawei's HPC sizes: at least 1,228 GB at 40M, a multiple of 1.2 TiB rounded down to GiB (3,686, 4,915 ...):
    terraform-provider-huaweicloud docs/resources/sfs_turbo.md@a0345b8."""
    found = refusals(DEV, storage={"parallelFs": {"enabled": True, "sizeGib": size}})
    assert any(p.startswith("goldenenv:storage.parallelFs.sizeGib") and words in p for p in found), found
    assert refusals(DEV, storage={"parallelFs": {"enabled": True, "sizeGib": 4915}}) == []


@pytest.mark.parametrize("key, value", [("team:a", "x"), ("team", "a/b")])
def test_a_tag_huawei_refuses_is_named_at_its_key(key, value):
    """TMS: keys of letters, digits, _ and - (36 at most), values of the same and . (43 at most)."""
    found = refusals(DEV, tags__extra={key: value})
    assert any(p.startswith(f"goldenenv:tags.extra.{key}") and "Huawei Cloud refuses" in p for p in found), found


def test_more_than_ten_tags_are_refused():
    found = refusals(DEV, tags__extra={f"k{n}": "v" for n in range(8)})
    assert any(p.startswith("goldenenv:tags") and "at most 10" in p for p in found), found


def test_the_bucket_name_must_be_one_obs_takes():
    found = refusals(DEV, storage={"bucket": {"name": "Bad_Bucket"}})
    assert any(p.startswith("goldenenv:storage.bucket.name") for p in found), found


def test_export_waits_for_success_and_a_failure_stops_destroy():
    asked, states = [], iter(["RUNNING", "RUNNING", "SUCCESS"])

    def call(region, operation, fields):
        asked.append((operation, fields))
        return {"task_id": "t-1"} if operation == "create_hpc_cache_task" else {"status": next(states)}

    obslink.export("cn-north-4", "share-1", lambda line: None, call=call, sleep=lambda s: None)
    assert asked[0] == ("create_hpc_cache_task", {"share_id": "share-1", "body": {
        "type": "export", "src_target": "goldenenv", "src_prefix": "", "dest_target": "goldenenv", "dest_prefix": ""}})
    assert [a[0] for a in asked[1:]] == ["show_hpc_cache_task"] * 3

    failing = iter(["RUNNING", "FAIL"])
    with pytest.raises(obslink.ExportFailed, match="failed"):
        obslink.export("cn-north-4", "share-1", lambda line: None, sleep=lambda s: None,
                       call=lambda r, o, f: {"task_id": "t-2"} if o == "create_hpc_cache_task"
                       else {"status": next(failing)})


def test_destroy_refuses_to_go_on_when_the_export_fails():
    cloud = clouds.get("huawei")
    spec = stackconfig.load(DEV, stackconfig.namespaced(stackconfig.read_stack_file(
        STACKS / f"Pulumi.{DEV}.yaml"))[0])
    with pytest.raises(RuntimeError, match="Nothing was destroyed"):
        cloud.before_destroy(spec, {"fileSystemId": "share-1", "backendTargetId": "t"}, False, lambda line: None,
                             call=lambda r, o, f: {"task_id": "t"} if o == "create_hpc_cache_task"
                             else {"status": "FAIL"})


def test_image_push_logs_in_with_swrs_temporary_login():
    """SWR CreateSecret answers auths.<registry>.auth, base64 of user:password
    (https://support.huaweicloud.com/api-swr/swr_02_0052.html)."""
    asked = []

    def call(method, url, body):
        asked.append((method, url))
        return {"auths": {"swr.cn-north-4.myhuaweicloud.com": {
            "auth": base64.b64encode(b"cn-north-4@AKRECORDED:recorded-login-key").decode()}}}

    cloud = clouds.get("huawei")
    spec = stackconfig.load(DEV, stackconfig.namespaced(stackconfig.read_stack_file(
        STACKS / f"Pulumi.{DEV}.yaml"))[0])
    auth = cloud.registry_auth(spec, cloud.registry_url(spec), call=call)
    assert auth == {"username": "cn-north-4@AKRECORDED", "password": "recorded-login-key",
                    "registry": "swr.cn-north-4.myhuaweicloud.com"}
    assert asked == [("POST", "https://swr-api.cn-north-4.myhuaweicloud.com/v2/manage/utils/secret"
                              "?projectname=cn-north-4")]


def _resource(type_, label, urn_components, **props):
    urn = f"urn:pulumi:dev::goldenenv::{'$'.join(urn_components + [type_])}::{label}"
    return SimpleNamespace(type=type_, name=label, urn=urn, props=props, id=label, outputs={})


def test_an_agency_holding_a_system_role_or_delegated_to_another_account_is_refused():
    node = ["goldenenv:huawei:GpuCluster", "goldenenv:huawei:GpuNodePool"]
    role = _resource(privilege.ROLE, "gpu-policy", node, name="gpu", policy=privilege.node_policy("b", "s"))
    agency = _resource(privilege.AGENCY, "gpu-agency", node, name="gpu", delegatedServiceName="op_svc_ecs",
                       projectRoles=[{"project": "cn-north-4", "roles": ["gpu", "Tenant Administrator"]}])
    ctx = SimpleNamespace(resources=[role, agency])
    assert list(privilege.judge(role, ctx)) == []
    [problem] = list(privilege.judge(agency, ctx))
    assert "'Tenant Administrator'" in problem and "the GPU nodes' agency" in problem
    agency.props.update(projectRoles=[{"project": "cn-north-4", "roles": ["gpu"]}], delegatedDomainName="someone")
    assert any("someone" in p for p in privilege.judge(agency, ctx))


def test_a_wildcard_in_the_nodes_policy_is_refused():
    node = ["goldenenv:huawei:GpuCluster", "goldenenv:huawei:GpuNodePool"]
    policy = json.loads(privilege.node_policy("b", "s"))
    policy["Statement"].append({"Effect": "Allow", "Action": ["ecs:*:*"], "Resource": ["*"]})
    role = _resource(privilege.ROLE, "gpu-policy", node, name="gpu", policy=json.dumps(policy))
    assert any("ecs:*:*" in p for p in privilege.judge(role, SimpleNamespace(resources=[role])))


def test_a_shared_file_system_plans_sfs_turbo_hpc_linked_to_the_bucket(tmp_path):
    """parallelFs: SFS Turbo HPC at 40M in the nodes' subnet, and its backend target (the dynamic resource) to the
    stack's bucket; plan --strict passes every guardrail (the link names the planned bucket)."""
    import yaml

    config = stackconfig.read_stack_file(STACKS / f"Pulumi.{DEV}.yaml")
    config["goldenenv:storage"] = {"parallelFs": {"enabled": True, "sizeGib": 4915}}
    (tmp_path / "Pulumi.huawei-turbo.yaml").write_text(yaml.safe_dump({"config": config}))
    result = CliRunner().invoke(app, ["plan", "-s", "huawei-turbo", "--stacks-dir", str(tmp_path), "--strict"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "huaweicloud:Sfs/turbo:Turbo · shareType=HPC, hpcBandwidth=40M, size=4915" in " ".join(
        result.output.split())
    assert "huawei-turbo-data-obs-link pulumi-python:dynamic:Resource" in " ".join(result.output.split())
    assert "export SFS Turbo's goldenenv/" in " ".join(result.output.split()) or "SFS Turbo HPC is linked" in \
        " ".join(result.output.split())


class StandInSfsTurbo:
    """SFSTurboClient as the backend target's provider calls it, answering in huaweicloudsdksfsturbo 3.1.219's
    shapes (CreateBackendTargetResponse target_id, lifecycle; a target that is gone answers 404)."""

    def __init__(self):
        self.targets, self.calls = {}, []

    def create_backend_target(self, request):
        self.calls.append(("create", request))
        self.targets["t-1"] = request.body
        return SimpleNamespace(target_id="t-1", lifecycle="CREATING")

    def show_backend_target_info(self, request):
        from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException, SdkError

        self.calls.append(("read", request))
        if request.target_id not in self.targets:
            raise ClientRequestException(404, SdkError(request_id="r", error_code="SFS.TURBO.0001",
                                                       error_msg="not found"))
        return SimpleNamespace(lifecycle="AVAILABLE")

    def update_obs_target_policy(self, request):
        self.calls.append(("update", request))

    def delete_backend_target(self, request):
        self.calls.append(("delete", request))
        self.targets.pop(request.target_id)


def test_the_backend_target_is_created_read_updated_and_deleted_through_the_sdk(monkeypatch):
    client = StandInSfsTurbo()
    monkeypatch.setattr(obslink, "_client", lambda region: client)
    provider = obslink.BackendTargetProvider()
    props = {"region": "cn-north-4", "shareId": "share-1", "bucket": "goldenenv-data", "folder": "goldenenv",
             "endpoint": "obs.cn-north-4.myhuaweicloud.com", "events": ["NEW", "CHANGED"]}
    created = provider.create(props)
    body = client.calls[0][1].body
    assert created.id == "t-1" and client.calls[0][1].share_id == "share-1"
    assert (body.file_system_path, body.obs.bucket, body.obs.endpoint) == (
        "goldenenv", "goldenenv-data", "obs.cn-north-4.myhuaweicloud.com")
    assert body.obs.policy.auto_export_policy.events == ["NEW", "CHANGED"]
    assert provider.read("t-1", props).outs["lifecycle"] == "AVAILABLE"
    assert provider.diff("t-1", props, {**props, "bucket": "other"}).replaces == ["bucket"]
    provider.update("t-1", props, props)
    provider.delete("t-1", props)
    assert client.calls[-1][1].delete_data_in_file_system is False
    assert provider.read("t-1", props).id is None


def test_a_time_to_live_and_an_idle_time_reach_the_stop_function(tmp_path):
    """lifecycle.ttlHours and idleMinutes are the stop function's to run: the plan hands them to it, or the stop
    chain's guardrail fails plan --strict naming the setting the function was not told."""
    import yaml

    config = stackconfig.read_stack_file(STACKS / f"Pulumi.{DEV}.yaml")
    config["goldenenv:lifecycle"] = {**config.get("goldenenv:lifecycle", {}), "ttlHours": 24, "idleMinutes": 30}
    (tmp_path / "Pulumi.huawei-ttl.yaml").write_text(yaml.safe_dump({"config": config}))
    result = CliRunner().invoke(app, ["plan", "-s", "huawei-ttl", "--stacks-dir", str(tmp_path), "--strict"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
