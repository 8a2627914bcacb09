"""Auto-teardown as planned for AWS: the reaper's schedule, function and role, and one idle alarm per node."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import sys
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from goldenenv import reaper, stackconfig
from goldenenv.clouds.aws import teardown
from goldenenv.guardrails import is_taggable
from goldenenv.plan import plan_config, stack_file

FUNCTION = "aws:lambda/function:Function"
SCHEDULE = "aws:scheduler/schedule:Schedule"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
INSTANCE = "aws:ec2/instance:Instance"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
COMPONENT = "goldenenv:aws:AutoTeardown"
OWN_TYPES = {FUNCTION, LOG_GROUP, ROLE}
LIFECYCLE = {"ttlHours": 2, "idleMinutes": 30}


def config_with(lifecycle: dict | None, stack: str = "aws-p5-2node") -> dict:
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config.pop("goldenenv:lifecycle", None)
    if lifecycle is not None:
        config["goldenenv:lifecycle"] = lifecycle
    return config


def teardown_of(p, type_token) -> list:
    """Resources of this type in the AutoTeardown component (the budget's hard stop has a function of its own)."""
    components = {r.urn for r in p.resources if r.type == COMPONENT}
    return [r for r in p.of_type(type_token) if r.parent_urn in components]


def one(p, type_token):
    found = teardown_of(p, type_token) if type_token in OWN_TYPES else p.of_type(type_token)
    assert len(found) == 1, f"expected one {type_token}, found {len(found)}"
    return found[0]


def statements(policy) -> list[dict]:
    return json.loads(policy.props["policy"])["Statement"]


def name_of(arn: str) -> str:
    """The resource name at the end of an ARN (the plan's mock ARNs end in the resource's name)."""
    return arn.rsplit(":", 1)[-1]


def policy_of(p, role):
    return next(r for r in p.of_type(ROLE_POLICY) if r.props["role"] == role.id)


def role_assumed_by(p, service: str):
    (role,) = [r for r in teardown_of(p, ROLE)
               if json.loads(r.props["assumeRolePolicy"])["Statement"][0]["Principal"] == {"Service": service}]
    return role


@pytest.fixture(scope="module")
def planned():
    return plan_config("teardown", config_with(LIFECYCLE))


def test_plan_with_lifecycle_fails_no_guardrail_and_tags_every_teardown_resource(planned):
    assert not planned.failed, [f.message for f in planned.findings if f.severity.value == "error"]
    (component,) = [r for r in planned.resources if r.type == COMPONENT]
    children = [r for r in planned.resources if r.parent_urn == component.urn]
    untaggable = {ROLE_POLICY, SCHEDULE}  # neither takes tags
    tagged = [r for r in children if r.type not in untaggable]
    assert {r.type for r in tagged} == {ROLE, LOG_GROUP, FUNCTION, ALARM}
    assert not any(is_taggable(r.type) for r in children if r.type in untaggable)
    wanted = planned.spec.stack_tags
    for r in tagged:
        assert {k: (r.props.get("tags") or {}).get(k) for k in wanted} == wanted, f"{r.name} lacks stack tags"


def test_the_schedule_invokes_the_reaper_function_through_a_role_that_may_invoke_only_it(planned):
    schedule, function = one(planned, SCHEDULE), one(planned, FUNCTION)
    target = schedule.props["target"]
    assert name_of(target["arn"]) == function.name
    assert schedule.props["scheduleExpression"] == teardown.REAPER_RATE
    assert schedule.props["flexibleTimeWindow"] == {"mode": "OFF"}

    invoker = role_assumed_by(planned, "scheduler.amazonaws.com")
    assert name_of(target["roleArn"]) == invoker.name
    assert statements(policy_of(planned, invoker)) == [
        {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": target["arn"]}]


def test_the_function_ships_reaper_py_and_is_configured_for_the_stack(planned):
    function = one(planned, FUNCTION)
    archive = function.props["code"]
    assert set(archive.assets) == {"reaper.py"}
    assert Path(archive.assets["reaper.py"].path).samefile(reaper.__file__)
    module, entry = function.props["handler"].split(".")
    assert f"{module}.py" in archive.assets and callable(getattr(reaper, entry))
    assert function.props["runtime"].startswith("python3.")

    env = function.props["environment"]["variables"]
    assert env[reaper.STACK_ENV] == planned.spec.stack
    assert env[reaper.PROJECT_ENV] == planned.spec.tags.project
    assert env[reaper.ACTION_ENV] in reaper.ACTIONS
    assert reaper._flag(env[reaper.DRY_RUN_ENV]) is False
    assert planned.outputs["reaperFunction"] == function.name


def test_the_reaper_role_stops_and_terminates_only_the_stacks_instances_and_logs_to_its_own_group(planned):
    function = one(planned, FUNCTION)
    role = role_assumed_by(planned, "lambda.amazonaws.com")
    assert name_of(function.props["role"]) == role.name
    granted = statements(policy_of(planned, role))

    def actions(statement):
        return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]

    teardown_actions = {"ec2:StopInstances", "ec2:TerminateInstances"}
    scoped = [s for s in granted if teardown_actions & set(actions(s))]
    assert scoped and all(
        s["Condition"] == {"StringEquals": {f"aws:ResourceTag/{reaper.STACK_TAG_KEY}": planned.spec.stack,
                                            f"aws:ResourceTag/{reaper.PROJECT_TAG_KEY}": planned.spec.tags.project}}
        for s in scoped)
    assert teardown_actions <= {a for s in scoped for a in actions(s)}
    unscoped = {a for s in granted if "Condition" not in s for a in actions(s)}
    assert unscoped == {"ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests", "logs:CreateLogStream",
                        "logs:PutLogEvents"}
    assert not any("*" in a for s in granted for a in actions(s))

    logs = one(planned, LOG_GROUP)
    assert function.props["loggingConfig"]["logGroup"] == logs.props["name"]
    assert logs.props["retentionInDays"] > 0
    log_resources = {s["Resource"] for s in granted if "logs:PutLogEvents" in actions(s)}
    assert {name_of(r.removesuffix(":*")) for r in log_resources} == {logs.name}


def test_names_that_are_unique_in_an_account_carry_the_project_as_well_as_the_stack(planned):
    """Two projects may each have a stack of the same name in one account: their log groups and alarms differ."""
    project, stack = planned.spec.tags.project, planned.spec.stack
    names = [one(planned, LOG_GROUP).props["name"]] + [a.props["name"] for a in planned.of_type(ALARM)]
    assert names and all(project in n and stack in n for n in names)


def test_nodes_carry_their_time_to_live_and_nothing_else_does(planned):
    ttl = planned.spec.lifecycle.ttl_hours
    for node in planned.of_type(INSTANCE):
        assert float(node.props["tags"][reaper.TTL_TAG_KEY]) == ttl
    launched = {s["resourceType"]: s["tags"] for s in one(planned, LT).props["tagSpecifications"]}
    assert float(launched["instance"][reaper.TTL_TAG_KEY]) == ttl
    assert reaper.TTL_TAG_KEY not in planned.spec.stack_tags
    assert reaper.TTL_TAG_KEY not in one(planned, "aws:s3/bucket:Bucket").props["tags"]


def test_one_idle_alarm_per_node_stops_it_after_the_idle_minutes(planned):
    alarms = planned.of_type(ALARM)
    # the GPU nodes, not the Slurm head (idle by CPU all the time: an alarm would stop the queue)
    nodes = [n for n in planned.of_type(INSTANCE) if "launchTemplate" in n.props]
    assert sorted(a.props["dimensions"]["InstanceId"] for a in alarms) == sorted(n.id for n in nodes)
    idle = planned.spec.lifecycle.idle_minutes
    for alarm in alarms:
        p = alarm.props
        assert p["alarmActions"] == [f"arn:aws:automate:{planned.spec.region}:ec2:stop"]
        assert (p["namespace"], p["metricName"], p["statistic"]) == ("AWS/EC2", "CPUUtilization", "Average")
        assert p["comparisonOperator"] == "LessThanThreshold"
        assert p["evaluationPeriods"] == p["datapointsToAlarm"] == math.ceil(idle * 60 / p["period"])
        assert p["period"] == 300
        assert p["treatMissingData"] == "notBreaching", "a stopped node must not keep alarming"
    assert sorted(planned.outputs["idleAlarms"]) == sorted(a.props["name"] for a in alarms)


@pytest.mark.parametrize("idle_minutes, periods", [(10, 2), (32, 7), (60, 12)])
def test_idle_minutes_round_up_to_whole_periods(idle_minutes, periods):
    result = plan_config("idle", config_with({"idleMinutes": idle_minutes}))
    assert {a.props["evaluationPeriods"] for a in result.of_type(ALARM)} == {periods}
    assert teardown_of(result, FUNCTION) == result.of_type(SCHEDULE) == [], "no ttl, no reaper"
    assert all(reaper.TTL_TAG_KEY not in n.props["tags"] for n in result.of_type(INSTANCE))


def test_ttl_alone_makes_no_alarms():
    result = plan_config("ttl", config_with({"ttlHours": 1.5}))
    assert result.of_type(ALARM) == []
    assert len(result.of_type(SCHEDULE)) == 1
    assert {n.props["tags"][reaper.TTL_TAG_KEY] for n in result.of_type(INSTANCE)} == {"1.5"}


def test_spot_nodes_are_terminated_when_idle_because_they_cannot_be_stopped():
    result = plan_config("spot", config_with(LIFECYCLE, stack="aws-p4d-4node-spot"))
    assert result.spec.nodes[0].capacity.value == "spot"
    alarms = result.of_type(ALARM)
    assert len(alarms) == result.spec.nodes[0].count
    assert {tuple(a.props["alarmActions"]) for a in alarms} == {
        (f"arn:aws:automate:{result.spec.region}:ec2:terminate",)}


def test_no_lifecycle_means_no_teardown_resources():
    result = plan_config("forever", config_with(None))
    assert not result.failed
    for kind in (COMPONENT, SCHEDULE, ALARM):
        assert [r for r in result.resources if r.type == kind] == [], kind
    assert all(reaper.TTL_TAG_KEY not in n.props["tags"] for n in result.of_type(INSTANCE))
    assert "reaperFunction" not in result.outputs and "idleAlarms" not in result.outputs


def test_plan_says_how_the_lifecycle_is_enforced(planned):
    notes = [f.message for f in planned.findings if f.rule == "plan-note"]
    assert not any("not yet enforced" in n for n in notes)
    assert any("ttlHours" in n and f"{planned.spec.lifecycle.ttl_hours:g} h" in n for n in notes)
    assert any("idleMinutes" in n and "CPU" in n for n in notes)


def test_the_planned_function_stops_a_planned_node_once_its_ttl_has_passed(planned, monkeypatch):
    """The shipped file, its planned environment and the planned node tags, run together against moto."""
    function, node = one(planned, FUNCTION), planned.of_type(INSTANCE)[0]
    shipped = importlib.util.spec_from_file_location("reaper", function.props["code"].assets["reaper.py"].path)
    lambda_module = importlib.util.module_from_spec(shipped)
    monkeypatch.setitem(sys.modules, "reaper", lambda_module)  # as the Lambda runtime imports it
    shipped.loader.exec_module(lambda_module)
    for name, value in {**function.props["environment"]["variables"], "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": planned.spec.region}.items():
        monkeypatch.setenv(name, value)

    with mock_aws():
        ec2 = boto3.client("ec2")
        tags = [{"Key": k, "Value": v} for k, v in node.props["tags"].items()]
        (instance,) = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])["Instances"]
        ttl = timedelta(hours=planned.spec.lifecycle.ttl_hours)
        monkeypatch.setattr(lambda_module, "utc_now", lambda: instance["LaunchTime"] + ttl - timedelta(minutes=1))
        assert lambda_module.handler({}, None)["acted"] == []
        monkeypatch.setattr(lambda_module, "utc_now", lambda: instance["LaunchTime"] + ttl)
        assert [d["instance_id"] for d in lambda_module.handler({}, None)["acted"]] == [instance["InstanceId"]]
        state = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] in ("stopping", "stopped")


def test_idle_alarms_use_half_a_core_so_a_gpu_bound_node_is_not_idle():
    from goldenenv import catalog
    from goldenenv.clouds.aws.teardown import idle_cpu_threshold

    p5 = catalog.instance_type("aws", "p5.48xlarge")
    busy_gpu_job = 100 * p5.gpu_count / p5.vcpus  # one core per GPU
    assert idle_cpu_threshold(p5.vcpus) < busy_gpu_job
    assert idle_cpu_threshold(catalog.instance_type("aws", "g5.xlarge").vcpus) == 5.0
