"""RULE: every stop path of every cloud with the hard stop stops every instance type the catalog sells there.

A cloud that declares Capability.HARD_STOP promises that the budget's hard stop, and the time to live and idle
stop where it offers them, end the billing of a node. Each path is driven here through the cloud's own stop code
(the function it ships, or the alarm action it plans) against that cloud's test fake, and the fakes refuse what the
cloud refuses: Compute Engine a stop without discardLocalSsd on a VM with Local SSD, ARM a deallocation of an
ephemeral OS disk, ECS economical mode on a type with local disks, EC2 a stop of an instance-store root. The fleet
holds one node of every catalog type of the cloud (goldenenv.catalog.instance_types), local NVMe / Local SSD
included; a node the path leaves running is named with the reason.

A cloud's driver is found by its name (DRIVERS), or by the provider it builds on where a driver runs the stop code of
any folder on that provider (BY_PROVIDER: Alibaba's guard.py, whichever folder holds it): a cloud started from a copy
of Alibaba's folder is driven through its own guard. A cloud added to the registry with the hard stop and neither
fails, naming the table to add its driver to, until its stop paths are driven.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import cloudfolder
import pytest
import shipped

from goldenenv import catalog, clouds, stackconfig
from goldenenv.clouds import base
from goldenenv.clouds.base import Capability
from goldenenv.spec import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PATHS = ("budget", "ttl", "idle")
HARD_STOP_CLOUDS = sorted(n for n in base.names() if Capability.HARD_STOP in base.get(n).capabilities)

NOT_A_STOP_CALL = {
    ("alicloud", "ttl"): "Alibaba releases the node itself at its auto_release_time (clouds/alicloud/nodes.py): "
                         "the cloud deletes it, no stop call is made",
    ("alicloud", "idle"): "Alibaba stacks have no idle stop: the cloud's check refuses lifecycle.idleMinutes",
}
"""Paths served without a stop call of goldenenv's (or not at all), each with why, by the driver's key (a cloud, or
for BY_PROVIDER's drivers the provider): the stop code they drive serves no other."""

TTL_HOURS, IDLE_MINUTES = 24, 30
"""A node started 30 h ago is past a 24 h time to live; one started 3 h ago with 6 idle 5-minute means is idle."""


def node_names(types: list[str]) -> dict[str, str]:
    return {f"node-{k}": t for k, t in enumerate(types)}


# ---------------------------------------------------------------- Google Cloud: stopfn/main.py on a fake Google

def gcp(path: str, types: list[str], request: pytest.FixtureRequest) -> dict[str, str]:
    import test_gcp_budget as fake_google

    from goldenenv.clouds.gcp.stopfn import main as stopfn

    names = node_names(types)
    started = TTL_HOURS + 6 if path == "ttl" else 3
    fleet = [fake_google.instance(n, "RUNNING", machine_type=t, started_hours_ago=started) for n, t in names.items()]
    fake = fake_google.FakeGoogle(fleet, cpu={n: [0.0] * 6 for n in names} if path == "idle" else None)
    try:
        env = {"budget": fake.env(),
               "ttl": fake.env(**{stopfn.HARD_STOP_ENV: "false", stopfn.TTL_HOURS_ENV: str(TTL_HOURS)}),
               "idle": fake.env(**{stopfn.HARD_STOP_ENV: "false", stopfn.IDLE_MINUTES_ENV: str(IDLE_MINUTES)})}[path]
        message = fake_google.budget_message(cost=2000.0) if path == "budget" else fake_google.reaper_message()
        report = stopfn.run(message, env, fake_google.NOW)
    finally:
        fake.close()
    failed = "; ".join(report.failed)
    return {t: f"{fake.instances[n]['status']} ({failed})" for n, t in names.items()
            if fake.instances[n]["status"] != "TERMINATED"}


# ---------------------------------------------------------------- Azure: stopfn/function_app.py on a fake ARM

def azure(path: str, types: list[str], request: pytest.FixtureRequest) -> dict[str, str]:
    import test_azure_budget as fake_arm

    from goldenenv.clouds.azure import nodes
    from goldenenv.clouds.azure.stopfn import function_app as stopfn

    sets = {f"pool{k}": t for k, t in enumerate(types)}
    started = TTL_HOURS + 6 if path == "ttl" else 3
    fake = fake_arm.FakeArm()
    try:
        for name, size in sets.items():
            fake.scale_set(name, {"0": fake_arm.node(started_hours_ago=started)}, size=size,
                           os_disk=nodes.os_disk(200))
        if path == "idle":
            fake.cpu = {name: {f"{name}_0": [0.0] * 6} for name in sets}
        off = {stopfn.HARD_STOP_ENV: "false"}
        if path == "budget":
            report = stopfn.run_alert(fake_arm.common_alert(), fake.env(), fake_arm.NOW)
        elif path == "ttl":
            report = stopfn.run_timer(fake.env(**off, **{stopfn.TTL_HOURS_ENV: str(TTL_HOURS)}), fake_arm.NOW)
        else:
            report = stopfn.run_timer(fake.env(**off, **{stopfn.IDLE_MINUTES_ENV: str(IDLE_MINUTES),
                                                         stopfn.IDLE_CPU_PERCENT_ENV: "0.5"}), fake_arm.NOW)
    finally:
        fake.close()
    failed = "; ".join(report.failed)
    return {t: f"{fake.scale_sets[n]['instances']['0']['power']} ({failed})" for n, t in sets.items()
            if fake.scale_sets[n]["instances"]["0"]["power"] != "deallocating"}


# ---------------------------------------------------------------- Tencent: stop.py on a fake billing and CVM

def tencent(path: str, types: list[str], request: pytest.FixtureRequest) -> dict[str, str]:
    from stopfakes.tencent import TencentAdapter
    from stopfakes.world import Faults, FleetNode

    fleet = [FleetNode(f"node-{k}") for k in range(len(types))]
    world = TencentAdapter(fleet, Faults())
    for k, t in enumerate(types):
        instance = world.api.instances[world.api.names[f"node-{k}"]]
        instance["InstanceType"] = t
        if path == "idle":
            world.api.cpu[instance["InstanceId"]] = [0.0] * 6
    outcome = world.invoke({"budget": "hard-stop"}.get(path, path),
                           **({"GOLDENENV_TTL_HOURS": str(TTL_HOURS)} if path == "ttl" else
                              {"GOLDENENV_IDLE_MINUTES": str(IDLE_MINUTES)} if path == "idle" else {}))
    return {world.api.instances[world.api.names[n]]["InstanceType"]: f"still running ({outcome.message})"
            for n in world.running()}


# ---------------------------------------------------------------- Alibaba Cloud: guard.py on fake BSS and ECS

def alicloud(cloud: str) -> Callable[[str, list[str], pytest.FixtureRequest], dict[str, str]]:
    """The driver of the guard.py in the cloud's folder (Alibaba's, or a copy's) on the same fake BSS and ECS."""
    return lambda path, types, request: alibaba_guard(cloudfolder.module(cloud, "guard"), path, types)


def alibaba_guard(guard: Any, path: str, types: list[str]) -> dict[str, str]:
    import test_alicloud_guard as fake_alibaba
    from stopfakes import simulated_clock

    assert path == "budget"
    fleet = [{"InstanceId": f"i-node{k:016d}", "InstanceName": f"node-{k}", "Status": "Running", "InstanceType": t,
              "RegionId": fake_alibaba.REGION, "InstanceChargeType": "PostPaid",
              "Tags": {"Tag": [{"TagKey": guard.STACK_TAG_KEY, "TagValue": fake_alibaba.STACK},
                               {"TagKey": guard.PROJECT_TAG_KEY, "TagValue": fake_alibaba.PROJECT}]}}
             for k, t in enumerate(types)]
    cloud = fake_alibaba.Cloud(fleet=fleet)
    budget = guard.Budget(project=fake_alibaba.PROJECT, stack=fake_alibaba.STACK, region=fake_alibaba.REGION,
                          monthly_limit=1000.0, currency="CNY", thresholds=(50, 80, 100), hard_stop=True)
    report = guard.run(budget, bill=cloud.bill, ecs=cloud.ecs, notify=cloud.notify, now=fake_alibaba.NOW,
                       clock=simulated_clock(guard.TIMEOUT_SECONDS - guard.MARGIN_SECONDS))
    failed = "; ".join(report.failed)
    return {i["InstanceType"]: f"{i['Status']} ({failed})" for i in fleet if i["Status"] != "Stopping"}


# ---------------------------------------------------------------- AWS: reaper.py and the idle alarm on moto's EC2

def aws(path: str, types: list[str], request: pytest.FixtureRequest) -> dict[str, str]:
    import test_reaper as fake_ec2

    from goldenenv.clouds.aws import reaper

    ec2 = request.getfixturevalue("ec2")
    tags = fake_ec2.stack_tags(**({reaper.TTL_TAG_KEY: "1"} if path == "ttl" else {}))
    specs = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    ids = {ec2.run_instances(ImageId=fake_ec2.IMAGE, MinCount=1, MaxCount=1, InstanceType=t,
                             TagSpecifications=specs)["Instances"][0]["InstanceId"]: t for t in types}
    refusing = fake_ec2.Ec2Refusing(ec2)
    now = max(fake_ec2.launched(ec2, i) for i in ids) + timedelta(hours=2)
    problems = ""
    if path == "budget":
        report = reaper.hard_stop(refusing, fake_ec2.PROJECT, fake_ec2.STACK, now)
        problems = "; ".join(f"{d.instance_id}: {d.reason}" for d in report.failed)
    elif path == "ttl":
        report = reaper.reap(refusing, fake_ec2.PROJECT, fake_ec2.STACK, now)
        problems = "; ".join(f"{d.instance_id}: {d.reason}" for d in report.failed)
    else:
        for instance_id, action in idle_alarm_actions(list(ids)).items():
            if action != "stop":
                problems += f"{instance_id}: its idle alarm's action is {action}; "
                continue
            try:
                refusing.stop_instances(InstanceIds=[instance_id])
            except Exception as refused:  # noqa: BLE001 - the refusal is the finding
                problems += f"{instance_id}: {refused}; "
    now_states = fake_ec2.states(ec2)
    return {t: f"{now_states[i]} ({problems})" for i, t in ids.items() if now_states[i] not in ("stopping", "stopped")}


# ---------------------------------------------------------------- Huawei Cloud: stop.py on a fake BSS and ECS

def huawei(path: str, types: list[str], request: pytest.FixtureRequest) -> dict[str, str]:
    """Each type on an ECS server or, where the catalog type is a Lite Server's, a ModelArts DevServer. The idle
    path runs over the types whose pool the cloud's check takes lifecycle.idleMinutes for."""
    from stopfakes.huawei import HuaweiAdapter

    from goldenenv.clouds.huawei.liteservers import is_lite_server

    if path == "idle":
        types = [t for t in types if not is_lite_server(t)]
    world, names = HuaweiAdapter.typed(types)
    if path == "idle":
        world.api.cpu = {i: [0.0] * 6 for i in world.api.servers}
    outcome = world.invoke({"budget": "hard-stop"}.get(path, path))
    return {names[n]: f"{world.api.status(n)} ({outcome.message})" for n in world.running()}


def idle_alarm_actions(instance_ids: list[str]) -> dict[str, str]:
    """What each node's planned idle alarm does when it fires: the EC2 action of its arn:...:automate:...:ec2:<act>
    alarm action, by the instance id of its InstanceId dimension."""
    from goldenenv import plan
    from goldenenv.clouds.aws.teardown import AutoTeardown, AutoTeardownArgs

    def program():
        AutoTeardown("t", AutoTeardownArgs(
            stack="team-a", project="finetune", region="us-east-1", ttl_hours=None, idle_minutes=IDLE_MINUTES,
            instance_ids={f"node-{k}": i for k, i in enumerate(instance_ids)}, tags={}))
        return {}

    records, _ = plan.record(program, base.get("aws"))
    alarms = [r for r in records if r.type == "aws:cloudwatch/metricAlarm:MetricAlarm"]
    found = {}
    for alarm in alarms:
        (action,) = alarm.props["alarmActions"]
        assert action.startswith("arn:aws:automate:us-east-1:ec2:"), action
        found[alarm.props["dimensions"]["InstanceId"]] = action.rsplit(":", 1)[1]
    assert sorted(found) == sorted(instance_ids)
    return found


Driver = Callable[[str, list[str], pytest.FixtureRequest], dict[str, str]]
"""A cloud's stop paths driven through its own code: (path, catalog types, request) -> {type: why it runs}."""
DRIVERS: dict[str, Driver] = {"aws": aws, "gcp": gcp, "azure": azure, "tencent": tencent, "huawei": huawei}
"""Cloud -> the driver of its own stop code."""
BY_PROVIDER: dict[str, Callable[[str], Driver]] = {"alicloud": alicloud}
"""Provider -> the driver of the stop code of a cloud's folder built on it (cloudfolder.provider)."""


def idle_stop_refused(cloud: str) -> bool:
    """Whether the cloud's check refuses lifecycle.idleMinutes on its first shipped stack (no idle stop to drive)."""
    stack = next(s for c, s in shipped.pulumi_stacks() if c == cloud)
    values, unknown = stackconfig.namespaced(stackconfig.read_stack_file(shipped.STACKS / f"Pulumi.{stack}.yaml"))
    values["lifecycle"] = {**(values.get("lifecycle") or {}), "idleMinutes": IDLE_MINUTES}
    try:
        clouds.validate(stackconfig.load(stack, values, unknown))
    except ConfigError as refused:
        return any(p.key == "goldenenv:lifecycle.idleMinutes" for p in refused.problems)
    return False


def driver_of(cloud: str) -> tuple[str, Driver]:
    """The key of the cloud's driver (the cloud, or its provider) and the driver."""
    if cloud in DRIVERS:
        return cloud, DRIVERS[cloud]
    provider = cloudfolder.provider(cloud)
    if provider in BY_PROVIDER:
        return provider, BY_PROVIDER[provider](cloud)
    pytest.fail(f"add {cloud}'s driver to DRIVERS in tests/unit/test_contract_stop_paths.py: {cloud} declares the "
                "hard stop, and the driver runs each of its stop paths through its own code on a fake of its API",
                pytrace=False)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cloud", HARD_STOP_CLOUDS)
def test_every_stop_path_stops_every_catalog_instance_type(cloud, path, request):
    key, drive = driver_of(cloud)
    if (key, path) in NOT_A_STOP_CALL:
        if path == "idle":
            assert idle_stop_refused(cloud), f"{cloud} takes lifecycle.idleMinutes: drive its idle stop here"
        pytest.skip(NOT_A_STOP_CALL[key, path])
    types = sorted(catalog.instance_types(cloud))
    assert types, f"the catalog sells no instance type on {cloud}"
    still_running = drive(path, types, request)
    assert still_running == {}, f"{cloud} {path} stop left these catalog types running: {still_running}"


def test_the_rule_covers_types_with_local_ssd_and_local_nvme():
    """Literal anchors: A3 Mega has 16 Local SSD disks of 375 GiB (cloud.google.com/compute/docs/gpus, A3 Mega),
    ND H100 v5 eight local NVMe disks; the fleets above hold them."""
    assert catalog.instance_type("gcp", "a3-megagpu-8g").local_nvme_count == 16
    assert catalog.instance_type("azure", "Standard_ND96isr_H100_v5").local_nvme_count == 8
    assert any(t.local_nvme_count for t in catalog.instance_types("aws").values())


def test_the_fakes_refuse_what_their_cloud_refuses(request):
    """Each fake refuses the call its cloud refuses, so a path that makes it cannot pass the rule."""
    import test_alicloud_guard as fake_alibaba
    import test_azure_budget as fake_arm
    import test_gcp_budget as fake_google

    from goldenenv.clouds.gcp.stopfn import main as stopfn

    mega = fake_google.instance("mega", "RUNNING", machine_type="a3-megagpu-8g")
    google = fake_google.FakeGoogle([mega])
    try:
        api = stopfn.Google(google.env())
        with pytest.raises(stopfn.ApiError, match="HTTP 400.*discard-local-ssd"):
            api.call("POST", f"{api.compute}/projects/{fake_google.GCP_PROJECT}/zones/{fake_google.ZONE}/instances/"
                             "mega/stop")
    finally:
        google.close()

    arm = fake_arm.FakeArm()
    try:
        arm.scale_set("eph", {"0": fake_arm.node()}, os_disk={"diff_disk_settings": {"option": "Local"}})
        report = fake_arm.stopfn.run_alert(fake_arm.common_alert(), arm.env(), fake_arm.NOW)
        assert report.deallocated == [] and "OperationNotAllowed" in report.failed[0]
    finally:
        arm.close()

    assert fake_alibaba.ecs_refusal({"InstanceType": "ecs.ebmgn8v.48xlarge"}, "StopCharging") is None
    local = next((t for t in catalog.instance_types("alicloud").values() if t.local_nvme_count), None)
    if local is not None:
        assert fake_alibaba.ecs_refusal({"InstanceType": local.name}, "StopCharging")
