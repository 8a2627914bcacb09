"""Auto-teardown as planned for AWS: the reaper's schedule, function and role, one idle alarm per node, and an
Errors alarm per function that emails the budget's addresses."""

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

from goldenenv import stackconfig
from goldenenv.clouds.aws import reaper, teardown
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
TOPIC = "aws:sns/topic:Topic"
TOPIC_POLICY = "aws:sns/topicPolicy:TopicPolicy"
SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"
KEY = "aws:kms/key:Key"
KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
PARAMETER = "aws:ssm/parameter:Parameter"
ALERTS = "goldenenv:aws:FunctionAlerts"
CLOUDWATCH = "cloudwatch.amazonaws.com"
SPOT_STACK = "aws-p4d-4node-spot"
LIFECYCLE = {"ttlHours": 2, "idleMinutes": 30}
IMAGE = "ami-12c6146b"


def config_with(lifecycle: dict | None, stack: str = "aws-p5-2node", hard_stop: bool | None = None) -> dict:
    """The shipped stack with this lifecycle (None: none), and budget.hardStop set when ``hard_stop`` is not None."""
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config.pop("goldenenv:lifecycle", None)
    if lifecycle is not None:
        config["goldenenv:lifecycle"] = lifecycle
    if hard_stop is not None:
        config["goldenenv:budget"] = {**config["goldenenv:budget"], "hardStop": hard_stop}
    return config


def idle_alarms(p) -> list:
    """The nodes' idle alarms (EC2 CPU); the functions' Errors alarms are the other alarms of a plan."""
    return [a for a in p.of_type(ALARM) if a.props["namespace"] == "AWS/EC2"]


def errors_alarms(p) -> list:
    return [a for a in p.of_type(ALARM) if a.props["namespace"] == "AWS/Lambda"]


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
    assert set(archive.assets) == {"reaper.py", "stopcore.py"}, "the reaper imports the stop core beside it"
    assert Path(archive.assets["reaper.py"].path).samefile(reaper.__file__)
    assert Path(archive.assets["stopcore.py"].path).samefile(reaper.stopcore.__file__)
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
    alarms = idle_alarms(planned)
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
    assert len(planned.of_type(ALARM)) == len(alarms) + len(errors_alarms(planned)), "no third kind of alarm"


@pytest.mark.parametrize("idle_minutes, periods", [(10, 2), (32, 7), (60, 12)])
def test_idle_minutes_round_up_to_whole_periods(idle_minutes, periods):
    result = plan_config("idle", config_with({"idleMinutes": idle_minutes}, hard_stop=False))
    assert {a.props["evaluationPeriods"] for a in result.of_type(ALARM)} == {periods}
    assert errors_alarms(result) == [], "no function, so no Errors alarm"
    assert teardown_of(result, FUNCTION) == result.of_type(SCHEDULE) == [], "no ttl nor hard stop, no reaper"
    assert all(reaper.TTL_TAG_KEY not in n.props["tags"] for n in result.of_type(INSTANCE))


def test_ttl_alone_makes_no_idle_alarms_only_an_errors_alarm_per_function():
    result = plan_config("ttl", config_with({"ttlHours": 1.5}))
    assert idle_alarms(result) == []
    functions = result.of_type(FUNCTION)
    assert len(functions) == 2, "the reaper and the budget's hard stop"
    assert sorted(a.props["dimensions"]["FunctionName"] for a in result.of_type(ALARM)) == sorted(
        f.name for f in functions)
    assert len(result.of_type(SCHEDULE)) == 1
    assert {n.props["tags"][reaper.TTL_TAG_KEY] for n in result.of_type(INSTANCE)} == {"1.5"}


@pytest.mark.parametrize("lifecycle, hard_stop, schedules", [
    ({"ttlHours": 4}, True, 1),
    ({"ttlHours": 4}, False, 1),
    (None, True, 1),
    ({"idleMinutes": 30}, True, 1),
    ({"idleMinutes": 30}, False, 0),
    (None, False, 0),
])
def test_the_reaper_is_scheduled_once_for_a_ttl_or_a_hard_stop_and_not_without_either(lifecycle, hard_stop, schedules):
    result = plan_config("schedules", config_with(lifecycle, hard_stop=hard_stop))
    assert not result.failed, [f.message for f in result.findings if f.severity.value == "error"]
    assert len(result.of_type(SCHEDULE)) == len(teardown_of(result, FUNCTION)) == schedules
    if schedules:
        (schedule,), (function,) = result.of_type(SCHEDULE), teardown_of(result, FUNCTION)
        assert name_of(schedule.props["target"]["arn"]) == function.name == result.outputs["reaperFunction"]
    else:
        assert "reaperFunction" not in result.outputs


def test_spot_nodes_are_terminated_when_idle_because_they_cannot_be_stopped():
    result = plan_config("spot", config_with(LIFECYCLE, stack="aws-p4d-4node-spot"))
    assert result.spec.nodes[0].capacity.value == "spot"
    alarms = idle_alarms(result)
    assert len(alarms) == result.spec.nodes[0].count
    assert {tuple(a.props["alarmActions"]) for a in alarms} == {
        (f"arn:aws:automate:{result.spec.region}:ec2:terminate",)}


def test_no_lifecycle_nor_hard_stop_means_no_teardown_resources():
    result = plan_config("forever", config_with(None, hard_stop=False))
    assert not result.failed
    for kind in (COMPONENT, ALERTS, SCHEDULE, ALARM, FUNCTION, TOPIC, SUBSCRIPTION):
        assert [r for r in result.resources if r.type == kind] == [], kind
    assert all(reaper.TTL_TAG_KEY not in n.props["tags"] for n in result.of_type(INSTANCE))
    assert "reaperFunction" not in result.outputs and "idleAlarms" not in result.outputs


def test_a_hard_stop_without_lifecycle_makes_the_reaper_and_its_schedule_but_no_idle_alarm_nor_ttl_tag():
    result = plan_config("stopped", config_with(None, hard_stop=True))
    assert not result.failed
    assert len(result.of_type(SCHEDULE)) == 1 and len(teardown_of(result, FUNCTION)) == 1
    assert idle_alarms(result) == [] and len(errors_alarms(result)) == 2
    assert all(reaper.TTL_TAG_KEY not in n.props["tags"] for n in result.of_type(INSTANCE))
    assert "idleAlarms" not in result.outputs


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


# ---------------------------------------------------------------- a hard stop without a time to live


@pytest.fixture(scope="module")
def spot_shipped():
    """The shipped spot stack as it is: a budget with hardStop, no lifecycle."""
    from goldenenv.plan import plan
    return plan(SPOT_STACK)


def load_shipped(function, region: str, monkeypatch):
    """The planned function's shipped file, imported as the Lambda runtime does, with its planned environment."""
    loaded = importlib.util.spec_from_file_location("reaper", function.props["code"].assets["reaper.py"].path)
    module = importlib.util.module_from_spec(loaded)
    monkeypatch.setitem(sys.modules, "reaper", module)
    loaded.loader.exec_module(module)
    for name, value in {**function.props["environment"]["variables"], "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": region}.items():
        monkeypatch.setenv(name, value)
    return module


def test_the_shipped_spot_stack_schedules_a_reaper_that_reads_the_hard_stop_parameter(spot_shipped):
    p = spot_shipped
    assert p.spec.budget.hard_stop and p.spec.lifecycle.ttl_hours is None, "the spot stack file changed"
    assert not p.failed, [f.message for f in p.findings if f.severity.value == "error"]
    (schedule,), function = p.of_type(SCHEDULE), one(p, FUNCTION)
    assert name_of(schedule.props["target"]["arn"]) == function.name == p.outputs["reaperFunction"]
    assert schedule.props["scheduleExpression"] == teardown.REAPER_RATE
    (state,) = p.of_type(PARAMETER)
    assert function.props["environment"]["variables"][reaper.HARD_STOP_PARAMETER_ENV] == state.props["name"]
    (reads,) = [s for s in statements(policy_of(p, role_assumed_by(p, "lambda.amazonaws.com")))
                if "ssm:GetParameter" in s["Action"]]
    assert reads["Action"] == ["ssm:GetParameter"] and reads["Resource"].endswith(f":parameter{state.props['name']}")
    assert idle_alarms(p) == [] and all(reaper.TTL_TAG_KEY not in n.props["tags"] for n in p.of_type(INSTANCE))
    assert any("hardStop is repeated" in f.message and "no lifecycle.ttlHours" in f.message
               for f in p.findings if f.rule == "plan-note")


def test_without_a_ttl_a_node_started_again_after_the_hard_stop_is_stopped_by_the_scheduled_run(
        spot_shipped, monkeypatch):
    """The budget's function records the hard stop and stops the nodes; a node started again the same month is
    stopped by the next run of the schedule's function, which otherwise keeps nodes without a ttl tag."""
    from datetime import datetime, timezone

    p = spot_shipped
    (hard_stop_fn,) = [f for f in p.of_type(FUNCTION) if f.name.endswith("-hard-stop-fn")]
    reaper_fn, (state,) = one(p, FUNCTION), p.of_type(PARAMETER)
    june = datetime(2025, 6, 14, 12, tzinfo=timezone.utc)
    sns = {"Records": [{"EventSource": "aws:sns", "Sns": {"Message": "AWS Budget Notification"}}]}
    value = state.props["value"]
    value = value["value"] if isinstance(value, dict) and "value" in value else value

    with mock_aws():
        ec2, ssm = boto3.client("ec2", region_name=p.spec.region), boto3.client("ssm", region_name=p.spec.region)
        ssm.put_parameter(Name=state.props["name"], Value=value, Type="String",
                          Tags=[{"Key": k, "Value": v} for k, v in state.props["tags"].items()])
        node_tags = [{"Key": k, "Value": v} for k, v in p.of_type(INSTANCE)[0].props["tags"].items()]
        nodes = [i["InstanceId"] for i in ec2.run_instances(
            ImageId=IMAGE, MinCount=2, MaxCount=2,
            TagSpecifications=[{"ResourceType": "instance", "Tags": node_tags}])["Instances"]]

        def states() -> dict[str, str]:
            return {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances(InstanceIds=nodes)["Reservations"]
                    for i in r["Instances"]}

        scheduled = load_shipped(reaper_fn, p.spec.region, monkeypatch)
        monkeypatch.setattr(scheduled, "utc_now", lambda: june)
        before = scheduled.handler({}, None)
        assert before["trigger"] == scheduled.TTL and before["acted"] == [] and before["skipped"] == []
        assert sorted(d["instance_id"] for d in before["kept"]) == sorted(nodes), "no ttl tag: no time to live"

        budget_fn = load_shipped(hard_stop_fn, p.spec.region, monkeypatch)
        monkeypatch.setattr(budget_fn, "utc_now", lambda: june)
        assert sorted(d["instance_id"] for d in budget_fn.handler(sns, None)["acted"]) == sorted(nodes)
        assert json.loads(ssm.get_parameter(Name=state.props["name"])["Parameter"]["Value"])["month"] == "2025-06"
        ec2.stop_instances(InstanceIds=nodes)
        ec2.start_instances(InstanceIds=[nodes[0]])
        assert states()[nodes[0]] == "running"

        scheduled = load_shipped(reaper_fn, p.spec.region, monkeypatch)
        monkeypatch.setattr(scheduled, "utc_now", lambda: june.replace(day=30, hour=23))
        result = scheduled.handler({}, None)
        assert result["trigger"] == scheduled.HARD_STOP
        assert [d["instance_id"] for d in result["acted"]] == [nodes[0]]
        assert states()[nodes[0]] in ("stopping", "stopped")


# ---------------------------------------------------------------- a failing function is noticed


@pytest.mark.parametrize("stack", ["aws-p5-2node", SPOT_STACK])
def test_each_function_has_an_errors_alarm_notifying_an_encrypted_topic_the_budget_emails_subscribe_to(stack):
    from goldenenv.plan import plan

    p = plan(stack)
    assert not p.failed and not [f for f in p.findings if f.rule in ("untagged-resource", "unencrypted-topic")]
    functions, alarms = p.of_type(FUNCTION), errors_alarms(p)
    assert len(functions) == 2 and len(alarms) == len(functions) == len(p.of_type(ALARM)) - len(idle_alarms(p))
    (alerts,) = [r for r in p.resources if r.type == ALERTS]
    (topic,) = [t for t in p.of_type(TOPIC) if t.parent_urn == alerts.urn]
    wanted = p.spec.stack_tags
    for function in functions:
        (alarm,) = [a for a in alarms if a.props["dimensions"] == {"FunctionName": function.name}]
        a = alarm.props
        assert (a["namespace"], a["metricName"], a["statistic"]) == ("AWS/Lambda", "Errors", "Sum")
        assert (a["comparisonOperator"], a["threshold"]) == ("GreaterThanOrEqualToThreshold", 1)
        assert a["period"] == 900 and a["evaluationPeriods"] == a["datapointsToAlarm"] == 1
        assert a["treatMissingData"] == "notBreaching"
        assert [name_of(t) for t in a["alarmActions"]] == [topic.name]
        assert p.spec.tags.project in a["name"] and p.spec.stack in a["name"]
        assert {k: a["tags"].get(k) for k in wanted} == wanted

    subscriptions = [s for s in p.of_type(SUBSCRIPTION) if name_of(s.props["topic"]) == topic.name]
    assert sorted((s.props["protocol"], s.props["endpoint"]) for s in subscriptions) == sorted(
        ("email", e) for e in p.spec.budget.emails), "emails only: nothing on this topic stops a node"
    assert not any(s.props["protocol"] == "lambda" for s in subscriptions)

    key = next(k for k in p.of_type(KEY) if k.parent_urn == alerts.urn)
    assert name_of(topic.props["kmsMasterKeyId"]) == key.name and key.props["enableKeyRotation"] is True
    (key_policy,) = [k for k in p.of_type(KEY_POLICY) if k.parent_urn == alerts.urn]
    (cloudwatch_key,) = [s for s in statements(key_policy) if s["Principal"] == {"Service": CLOUDWATCH}]
    assert set(cloudwatch_key["Action"]) == {"kms:GenerateDataKey*", "kms:Decrypt"}
    (topic_policy,) = [t for t in p.of_type(TOPIC_POLICY) if t.parent_urn == alerts.urn]
    (publish,) = [s for s in statements(topic_policy) if s["Principal"] == {"Service": CLOUDWATCH}]
    assert publish["Action"] == "SNS:Publish" and name_of(publish["Resource"]) == topic.name
    assert publish["Condition"]["ArnLike"]["aws:SourceArn"].endswith(":alarm:*")
    for r in (topic, key):
        assert {k: r.props["tags"].get(k) for k in wanted} == wanted, f"{r.name} lacks stack tags"


def test_a_stack_with_a_ttl_and_no_hard_stop_alarms_its_reaper_to_the_budget_emails():
    result = plan_config("soft", config_with({"ttlHours": 8}, hard_stop=False))
    assert not result.failed
    (function,), (alarm,) = result.of_type(FUNCTION), errors_alarms(result)
    assert alarm.props["dimensions"] == {"FunctionName": function.name}
    (topic,) = result.of_type(TOPIC)
    assert [name_of(t) for t in alarm.props["alarmActions"]] == [topic.name] and topic.props["kmsMasterKeyId"]
    assert sorted(s.props["endpoint"] for s in result.of_type(SUBSCRIPTION)) == sorted(result.spec.budget.emails)
