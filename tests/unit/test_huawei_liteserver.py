"""Huawei's Ascend Lite Server pools: the ModelArts DevServer dynamic resource against a stand-in of the API in
huaweicloudsdkmodelarts 3.1.219's shapes (tests/unit/modelarts_fake.py), the stack huawei-snt9b-2node as plan shows
it, and the pool rules a stack file is refused by (exit 2 at the key)."""

from __future__ import annotations

import base64
import copy
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import clouds, compat, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.huawei import devserver
from goldenenv.spec import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from modelarts_fake import StandInEcs, StandInModelArts  # noqa: E402

STACKS = Path(__file__).resolve().parents[2] / "stacks"
STACK = "huawei-snt9b-2node"
FLAVOR = "modelarts.bm.npu.arm.8snt9b2.d"
ARM_IMAGE = ("HCE2.0-Arm-64bit-for-Snt9B-BareMetal-with-23.0.6-7.1.0.9.220-CANN7.1.0.5",
             "5b2c7a3e-1f4d-4c1e-9a0b-3d2e1f0a9b8c", "ARM")
X86_IMAGE = ("Ubuntu 22.04 server 64bit", "7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "X86")
PROPS = {"region": "cn-north-4", "name": "goldenenv-huawei-snt9b-2node-npu-0", "flavor": FLAVOR,
         "imageId": ARM_IMAGE[0], "zone": "cn-north-4a", "vpcId": "vpc-1", "subnetId": "subnet-1",
         "securityGroupId": "sg-1", "keyPair": "goldenenv-key", "userData": "#cloud-config\n",
         "rootVolumeGib": 100, "agencyName": "goldenenv-llm-pretrain-huawei-snt9b-2node-npu"}


@pytest.fixture
def modelarts(monkeypatch):
    def make(**kwargs):
        fake = StandInModelArts({FLAVOR: ("ARM", "cn-north-4a", False)}, [ARM_IMAGE, X86_IMAGE], **kwargs)
        monkeypatch.setattr(devserver, "_client", lambda region: fake)
        fake.ecs = StandInEcs(fake)
        monkeypatch.setattr(devserver, "_ecs_client", lambda region: fake.ecs)
        monkeypatch.setattr(devserver, "SLEEP", lambda seconds: None)
        return fake
    return make


def test_a_lite_server_is_created_as_modelarts_takes_it_and_waited_for_until_running(modelarts):
    fake = modelarts()
    created = devserver.DevServerProvider().create(dict(PROPS))
    body = next(r for what, r in fake.calls if what == "create").body
    assert (body.name, body.flavor, body.arch, body.server_type) == (PROPS["name"], FLAVOR, "ARM", "BMS")
    assert body.image_id == ARM_IMAGE[1] and body.key_pair_name == "goldenenv-key" and body.admin_pass is None
    assert (body.network.vpc_id, body.network.subnet_id, body.network.security_group_id) == (
        "vpc-1", "subnet-1", "sg-1")
    assert body.charging_info.charging_mode == "POST_PAID" and body.root_volume.size == 100
    assert base64.b64decode(body.user_data).decode() == "#cloud-config\n"
    assert fake.servers[created.id]["status"] == "RUNNING"
    assert created.outs["status"] == "RUNNING" and created.outs["privateIp"] == "10.44.0.10"
    assert "adminPass" not in created.outs
    assert fake.ecs.metadata == {f"bms-{created.id[-4:]}": {"agency_name": PROPS["agencyName"]}}


def test_a_sold_out_flavor_stops_up_naming_the_flavor_and_zone_and_buys_nothing(modelarts):
    fake = modelarts()
    fake.flavors[FLAVOR] = ("ARM", "cn-north-4a", True)
    with pytest.raises(devserver.DevServerError, match=rf"LiteServerSoldOut: .*{FLAVOR} is sold out in cn-north-4a"):
        devserver.DevServerProvider().create(dict(PROPS))
    assert not fake.servers and "create" not in [what for what, _ in fake.calls]


def test_a_flavor_the_account_is_not_offered_is_said_with_the_service_ticket(modelarts):
    modelarts()
    with pytest.raises(devserver.DevServerError, match="lists no Lite Server flavor .* service ticket"):
        devserver.DevServerProvider().create({**PROPS, "flavor": "modelarts.bm.npu.arm.8snt9b9.d"})


def test_an_image_of_the_other_architecture_is_refused_by_name(modelarts):
    modelarts()
    with pytest.raises(devserver.DevServerError, match="built for X86, not ARM"):
        devserver.DevServerProvider().create({**PROPS, "imageId": X86_IMAGE[0]})
    with pytest.raises(devserver.DevServerError, match="offers no Lite Server image named 'nope'"):
        devserver.DevServerProvider().create({**PROPS, "imageId": "nope"})


def test_an_x86_image_given_by_id_is_refused_by_modelarts(modelarts):
    from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException

    fake = modelarts()
    with pytest.raises(ClientRequestException) as refused:
        devserver.DevServerProvider().create({**PROPS, "imageId": X86_IMAGE[1]})
    assert refused.value.status_code == 400 and not fake.servers


def test_a_caller_without_the_grant_is_refused(modelarts):
    from huaweicloudsdkcore.exceptions.exceptions import ClientRequestException

    modelarts(granted=False)
    with pytest.raises(ClientRequestException) as refused:
        devserver.DevServerProvider().create(dict(PROPS))
    assert refused.value.status_code == 403


def test_a_server_that_fails_to_come_up_is_an_error_naming_it_and_its_status(modelarts):
    modelarts(comes_up_as="CREATE_FAILED")
    with pytest.raises(devserver.DevServerError, match=f"{PROPS['name']} .* ModelArts says CREATE_FAILED"):
        devserver.DevServerProvider().create(dict(PROPS))


def test_read_rename_replace_and_delete(modelarts):
    fake = modelarts()
    provider = devserver.DevServerProvider()
    server = provider.create(dict(PROPS)).id
    assert provider.read(server, PROPS).outs["status"] == "RUNNING"
    renamed = provider.diff(server, PROPS, {**PROPS, "name": "goldenenv-huawei-snt9b-2node-npu-9"})
    assert renamed.changes and renamed.replaces == []
    provider.update(server, PROPS, {**PROPS, "name": "goldenenv-huawei-snt9b-2node-npu-9"})
    assert fake.servers[server]["name"] == "goldenenv-huawei-snt9b-2node-npu-9"
    moved = provider.diff(server, PROPS, {**PROPS, "flavor": "other", "userData": "#cloud-config\nx: 1\n"})
    assert moved.replaces == ["flavor", "userData"] and moved.delete_before_replace
    provider.delete(server, PROPS)
    assert server not in fake.servers
    assert provider.read(server, PROPS).id is None


def _values(**nodes) -> dict:
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(STACKS / f"Pulumi.{STACK}.yaml"))
    values = copy.deepcopy(values)
    values["nodes"] = {k: v for k, v in {**values["nodes"], **nodes}.items() if v is not None}
    return values


def _refusals(**nodes) -> list[str]:
    try:
        clouds.validate(stackconfig.load(STACK, _values(**nodes)))
    except ConfigError as e:
        return [str(p) for p in e.problems]
    return []


def test_the_shipped_stack_passes_its_rules():
    assert _refusals() == []


@pytest.mark.parametrize("nodes, key, words", [
    ({"capacity": "spot"}, "goldenenv:nodes.capacity", "no spot"),
    ({"sshPublicKey": None}, "goldenenv:nodes.sshPublicKey", "sets no password"),
    ({"hostImage": "ubuntu-2204"}, "goldenenv:nodes.hostImage", "x86 image"),
])
def test_what_a_lite_server_pool_cannot_take_is_refused_at_its_key(nodes, key, words):
    found = _refusals(**nodes)
    assert any(p.startswith(key) and words in p for p in found), found


def test_a_flavor_not_in_the_catalog_exits_2_naming_the_key():
    with pytest.raises(ConfigError) as refused:
        clouds.validate(stackconfig.load(STACK, _values(instanceType="modelarts.bm.npu.arm.8snt9b9.d")))
    assert any(str(p).startswith("goldenenv:nodes.instanceType") for p in refused.value.problems)


def test_a_cuda_lock_on_the_npu_pool_is_refused_naming_both_sides():
    values = _values()
    values["image"] = {"lock": "huawei-t4"}
    checked = compat.check_stack(stackconfig.load(STACK, values))
    refused = [c for found in checked for c in found.conflicts if c.rule == "accelerator-mismatch"]
    assert [c.severity for c in refused] == [compat.ERROR], checked
    assert refused[0].pins == ("image=huawei-t4 (NVIDIA CUDA)", f"instance={FLAVOR}")
    assert "8 x 910B3 (Huawei Ascend NPUs)" in refused[0].message


def test_the_stack_plans_strict_with_its_lite_servers_cost_and_guardrails():
    result = CliRunner().invoke(app, ["plan", "-s", STACK, "--strict"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "huawei-snt9b-2node-npu goldenenv:huawei:GpuNodePool" in text
    assert "huawei-snt9b-2node-npu-1 pulumi-python:dynamic/huawei:DevServer" in text
    assert "ListDevServerFlavors is_sold_out" in text and "CNY/hour" in text
    assert ("warning strict:huawei-lite-capacity huawei-snt9b-2node-npu-0: 2 x Lite Server "
            f"{FLAVOR} in cn-north-4a") in text


def test_each_planned_lite_server_has_the_shared_name_the_node_group_and_no_secret():
    from goldenenv import plan

    config = stackconfig.read_stack_file(STACKS / f"Pulumi.{STACK}.yaml")
    spec = stackconfig.load(STACK, _values())
    resources, _ = plan.run_program(STACK, config, plan.offline_context(spec))
    servers = [r for r in resources if r.type == "pulumi-python:dynamic/huawei:DevServer"]
    assert sorted(s.props["name"] for s in servers) == ["goldenenv-huawei-snt9b-2node-npu-0",
                                                   "goldenenv-huawei-snt9b-2node-npu-1"]
    assert all(s.props["flavor"] == FLAVOR and s.props["keyPair"] and s.props["userData"] for s in servers)
    assert all("adminPass" not in s.props and "password" not in str(s.props).lower() for s in servers)
    groups = [r for r in resources if r.type == "huaweicloud:Vpc/secgroup:Secgroup" and r.name.endswith("-nodes-sg")]
    assert {s.props["securityGroupId"] for s in servers} == {groups[0].id}
    assert {s.props["agencyName"] for s in servers} == {"goldenenv-llm-pretrain-huawei-snt9b-2node-npu"}
