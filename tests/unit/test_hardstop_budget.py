"""The budget's hard stop as planned for AWS, and the planned function run against moto: at 100 % actual spend
every node of the stack is stopped (one-time spot ones terminated), however many there are."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from goldenenv import stackconfig
from goldenenv.clouds.aws import limits, reaper
from goldenenv.clouds.aws.budget import notifications
from goldenenv.guardrails import is_taggable
from goldenenv.plan import plan_config, stack_file

SPOT_STACK = "aws-p4d-4node-spot"
COMPONENT = "goldenenv:aws:StackBudget"
BUDGET = "aws:budgets/budget:Budget"
TOPIC = "aws:sns/topic:Topic"
TOPIC_POLICY = "aws:sns/topicPolicy:TopicPolicy"
SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"
PERMISSION = "aws:lambda/permission:Permission"
KEY = "aws:kms/key:Key"
KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
FUNCTION = "aws:lambda/function:Function"
INSTANCE = "aws:ec2/instance:Instance"
BUDGETS = "budgets.amazonaws.com"
IMAGE = "ami-12c6146b"
NODES_IN_A_BIG_STACK = 150
"""More than the 100 instance ids a STOP_EC2_INSTANCES budget action takes."""


def config_of(stack: str, **budget) -> dict:
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config["goldenenv:budget"] = {**config["goldenenv:budget"], **budget}
    return config


@pytest.fixture(scope="module")
def spot_plan():
    return plan_config(SPOT_STACK, config_of(SPOT_STACK))


def children(p, type_token: str) -> list:
    (component,) = [r for r in p.resources if r.type == COMPONENT]
    return [r for r in p.resources if r.parent_urn == component.urn and r.type == type_token]


def one(p, type_token: str):
    found = children(p, type_token)
    assert len(found) == 1, f"expected one {type_token} in the budget, found {len(found)}"
    return found[0]


def name_of(arn: str) -> str:
    return arn.rsplit(":", 1)[-1]


def test_the_shipped_spot_stack_has_a_hard_stop(spot_plan):
    assert spot_plan.spec.budget.hard_stop
    assert {p.capacity.value for p in spot_plan.spec.nodes} == {"spot"}
    assert not spot_plan.failed, [f.message for f in spot_plan.findings if f.severity.value == "error"]


def test_no_budget_action_stops_the_nodes_the_stacks_function_does(spot_plan):
    assert spot_plan.of_type("aws:budgets/budgetAction:BudgetAction") == []
    assert spot_plan.of_type("aws:costexplorer/costAllocationTag:CostAllocationTag") == []
    function = one(spot_plan, FUNCTION)
    env = function.props["environment"]["variables"]
    assert env[reaper.PROJECT_ENV] == spot_plan.spec.tags.project
    assert env[reaper.STACK_ENV] == spot_plan.spec.stack
    assert env[reaper.ACTION_ENV] == "stop"
    assert reaper._flag(env[reaper.DRY_RUN_ENV]) is False


def test_the_actual_100_percent_alert_publishes_to_the_topic_that_invokes_the_function(spot_plan):
    budget, topic, function = one(spot_plan, BUDGET), one(spot_plan, TOPIC), one(spot_plan, FUNCTION)
    to_topic = [n for n in budget.props["notifications"] if n.get("subscriberSnsTopicArns")]
    assert [(n["threshold"], n["notificationType"]) for n in to_topic] == [(100.0, "ACTUAL")]
    assert [name_of(a) for a in to_topic[0]["subscriberSnsTopicArns"]] == [topic.name]
    assert to_topic[0]["subscriberEmailAddresses"] == spot_plan.spec.budget.emails
    kinds = [(n["threshold"], n["notificationType"]) for n in budget.props["notifications"]]
    assert len(kinds) == len(set(kinds)), "Budgets refuses two notifications of one threshold and type"

    subscription = one(spot_plan, SUBSCRIPTION)
    assert subscription.props["protocol"] == "lambda"
    assert name_of(subscription.props["topic"]) == topic.name
    assert name_of(subscription.props["endpoint"]) == function.name
    permission = one(spot_plan, PERMISSION)
    assert permission.props["principal"] == "sns.amazonaws.com"
    assert permission.props["action"] == "lambda:InvokeFunction"
    assert name_of(permission.props["sourceArn"]) == topic.name


def kinds_of(p) -> list[tuple[float, str]]:
    return [(n["threshold"], n["notificationType"]) for n in one(p, BUDGET).props["notifications"]]


def test_actual_spend_alerts_per_threshold_and_forecast_spend_at_100_percent_within_the_limit(spot_plan):
    budget = spot_plan.spec.budget
    assert budget.alert_thresholds == [50, 90] and budget.hard_stop, "the spot stack file changed: update this test"
    assert kinds_of(spot_plan) == [(50.0, "ACTUAL"), (90.0, "ACTUAL"), (100.0, "ACTUAL"), (100.0, "FORECASTED")]
    assert len(kinds_of(spot_plan)) <= limits.BUDGET_NOTIFICATIONS.value


def test_notifications_follow_each_list_and_the_hard_stop_only_adds_the_actual_100_percent():
    plain = notifications([50, 80], [80, 100], ["a@example.com"], None)
    assert [(n["threshold"], n["notification_type"]) for n in plain] == [
        (50, "ACTUAL"), (80, "ACTUAL"), (80, "FORECASTED"), (100, "FORECASTED")]
    assert not any("subscriber_sns_topic_arns" in n for n in plain)
    stopping = notifications([50, 50], [], ["a@example.com"], "arn:aws:sns:us-west-2:123456789012:hard-stop")
    assert [(n["threshold"], n["notification_type"], n.get("subscriber_sns_topic_arns")) for n in stopping] == [
        (50, "ACTUAL", None), (100, "ACTUAL", ["arn:aws:sns:us-west-2:123456789012:hard-stop"])]


def test_the_stacks_forecast_thresholds_reach_the_budget():
    asked = plan_config("forecasts", config_of(SPOT_STACK, forecastThresholds=[80, 120]))
    assert [k for k in kinds_of(asked) if k[1] == "FORECASTED"] == [(80.0, "FORECASTED"), (120.0, "FORECASTED")]
    none = plan_config("no-forecasts", config_of(SPOT_STACK, forecastThresholds=[]))
    assert [k for k in kinds_of(none) if k[1] == "FORECASTED"] == []


def test_budgets_may_publish_to_the_topic_and_use_its_key(spot_plan):
    topic, key = one(spot_plan, TOPIC), one(spot_plan, KEY)
    assert topic.props["kmsMasterKeyId"] not in ("alias/aws/sns", None), "Budgets cannot use the AWS managed key"
    assert name_of(topic.props["kmsMasterKeyId"]) == key.name
    assert key.props["enableKeyRotation"] is True

    policy = one(spot_plan, TOPIC_POLICY)
    statements = json.loads(policy.props["policy"])["Statement"]
    (publish,) = [s for s in statements if s["Principal"] == {"Service": BUDGETS}]
    assert publish["Action"] == "SNS:Publish" and name_of(publish["Resource"]) == topic.name
    assert set(publish["Condition"]) == {"StringEquals", "ArnLike"}

    key_statements = json.loads(one(spot_plan, KEY_POLICY).props["policy"])["Statement"]
    (budgets,) = [s for s in key_statements if s["Principal"] == {"Service": BUDGETS}]
    assert set(budgets["Action"]) == {"kms:GenerateDataKey*", "kms:Decrypt"}
    assert any(s["Action"] == "kms:*" and "root" in s["Principal"]["AWS"] for s in key_statements)


def test_every_taggable_hard_stop_resource_carries_the_stack_tags(spot_plan):
    (component,) = [r for r in spot_plan.resources if r.type == COMPONENT]
    mine = [r for r in spot_plan.resources if r.parent_urn == component.urn]
    assert {KEY, TOPIC, FUNCTION, BUDGET} <= {r.type for r in mine}
    wanted = spot_plan.spec.stack_tags
    for r in mine:
        if is_taggable(r.type):
            assert {k: (r.props.get("tags") or {}).get(k) for k in wanted} == wanted, f"{r.name} lacks stack tags"
    assert not [f for f in spot_plan.findings if f.rule in ("untagged-resource", "unencrypted-topic")]


def test_without_a_hard_stop_there_is_no_topic_nor_function():
    soft = plan_config("soft", config_of(SPOT_STACK, hardStop=False))
    for kind in (TOPIC, KEY, FUNCTION, SUBSCRIPTION, PERMISSION):
        assert children(soft, kind) == [], kind
    assert not any(n.get("subscriberSnsTopicArns") for n in one(soft, BUDGET).props["notifications"])


def notes(p) -> list[str]:
    return [f.message for f in p.findings if f.rule == "plan-note"]


def test_plan_says_the_spot_nodes_are_terminated_and_their_local_data_lost(spot_plan):
    pool = spot_plan.spec.nodes[0]
    said = [n for n in notes(spot_plan) if "hardStop" in n and pool.name in n]
    assert said and "terminate" in said[0] and "instance-store" in said[0] and str(pool.count) in said[0]
    assert not any("the hard stop stops the nodes" in n and "terminate" not in n for n in notes(spot_plan))


def test_plan_explains_the_cost_allocation_tag_is_an_account_step(spot_plan):
    (said,) = [n for n in notes(spot_plan) if "cost allocation tag" in n]
    assert "aws ce update-cost-allocation-tags-status" in said
    assert "24 h" in said and "linked (member) accounts cannot" in said and "management" in said


def test_the_activate_key_is_accepted_and_creates_nothing():
    asked = plan_config("asked", config_of(SPOT_STACK, activateCostAllocationTag=True))
    assert asked.of_type("aws:costexplorer/costAllocationTag:CostAllocationTag") == []
    (said,) = [n for n in notes(asked) if "cost allocation tag" in n]
    assert "activateCostAllocationTag" in said and "no longer creates" in said


# ---------------------------------------------------------------- the planned function against moto

SNS_EVENT = {"Records": [{"EventSource": "aws:sns", "EventVersion": "1.0", "Sns": {
    "Type": "Notification", "TopicArn": "arn:aws:sns:us-west-2:123456789012:hard-stop",
    "Subject": "AWS Budgets: goldenenv has exceeded your alert threshold", "Message": "AWS Budget Notification"}}]}
"""The shape of an SNS delivery to Lambda (AWS Lambda developer guide, "Using Lambda with Amazon SNS")."""


@pytest.fixture
def shipped(spot_plan, monkeypatch):
    """The planned function: its shipped file imported as the Lambda runtime does, its environment set."""
    function = one(spot_plan, FUNCTION)
    path = function.props["code"].assets["reaper.py"].path
    loaded = importlib.util.spec_from_file_location("reaper", path)
    module = importlib.util.module_from_spec(loaded)
    monkeypatch.setitem(sys.modules, "reaper", module)
    loaded.loader.exec_module(module)
    for name, value in {**function.props["environment"]["variables"], "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": spot_plan.spec.region}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield module, boto3.client("ec2")


def node_tags(p) -> list[dict]:
    node = p.of_type(INSTANCE)[0]
    return [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in node.props["tags"].items()]}]


def states(ec2) -> dict[str, str]:
    pages = ec2.get_paginator("describe_instances").paginate()
    return {i["InstanceId"]: i["State"]["Name"] for p in pages for r in p["Reservations"] for i in r["Instances"]}


def test_the_hard_stop_terminates_the_spot_stacks_one_time_spot_nodes_and_stops_the_rest(spot_plan, shipped):
    module, ec2 = shipped
    count = spot_plan.spec.nodes[0].count
    spot = [i["InstanceId"] for i in ec2.run_instances(
        ImageId=IMAGE, MinCount=count, MaxCount=count, TagSpecifications=node_tags(spot_plan),
        InstanceMarketOptions={"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}})["Instances"]]
    (request,) = ec2.request_spot_instances(
        Type="persistent", LaunchSpecification={"ImageId": IMAGE})["SpotInstanceRequests"]
    persistent = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]])["SpotInstanceRequests"][0]["InstanceId"]
    ec2.create_tags(Resources=[persistent], Tags=node_tags(spot_plan)[0]["Tags"])
    on_demand = ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1,
                                  TagSpecifications=node_tags(spot_plan))["Instances"][0]["InstanceId"]

    result = module.handler(SNS_EVENT, None)

    assert result["trigger"] == module.HARD_STOP and result["failed"] == []
    acted = {d["instance_id"]: d["action"] for d in result["acted"]}
    assert acted == {**{i: "terminate" for i in spot}, persistent: "stop", on_demand: "stop"}
    now = states(ec2)
    assert {now[i] for i in spot} <= {"shutting-down", "terminated"}
    assert now[persistent] in ("stopping", "stopped") and now[on_demand] in ("stopping", "stopped")


def test_the_hard_stop_stops_all_150_nodes_of_a_big_stack(spot_plan, shipped):
    module, ec2 = shipped
    nodes = [i["InstanceId"] for i in ec2.run_instances(
        ImageId=IMAGE, MinCount=NODES_IN_A_BIG_STACK, MaxCount=NODES_IN_A_BIG_STACK,
        TagSpecifications=node_tags(spot_plan))["Instances"]]
    result = module.handler(SNS_EVENT, None)
    assert sorted(d["instance_id"] for d in result["acted"]) == sorted(nodes)
    now = states(ec2)
    assert {now[i] for i in nodes} <= {"stopping", "stopped"}


def test_a_dry_run_hard_stop_changes_nothing_and_a_plain_event_is_the_time_to_live(spot_plan, shipped):
    module, ec2 = shipped
    ec2.run_instances(ImageId=IMAGE, MinCount=3, MaxCount=3, TagSpecifications=node_tags(spot_plan))
    before = states(ec2)
    dry = module.handler({"hardStop": True, "dryRun": True}, None)
    assert dry["dry_run"] is True and len(dry["acted"]) == 3 and states(ec2) == before
    ttl = module.handler({}, None)
    assert ttl["trigger"] == module.TTL and ttl["acted"] == [] and states(ec2) == before


def test_the_functions_deadline_is_its_deployed_timeout_less_a_margin(spot_plan):
    """The reaper retries and watches pending nodes until its own deadline: the time Lambda gives it (the planned
    timeout), less a margin for the report, so it reports before Lambda kills it."""
    function = one(spot_plan, FUNCTION)
    assert function.props["timeout"] == reaper.TIMEOUT_SECONDS
    assert 0 < reaper.MARGIN_SECONDS < reaper.TIMEOUT_SECONDS / 10
    assert reaper.new_clock().left() == pytest.approx(reaper.TIMEOUT_SECONDS - reaper.MARGIN_SECONDS, abs=1)


def test_is_hard_stop_reads_sns_deliveries_and_explicit_requests_only():
    assert reaper.is_hard_stop(SNS_EVENT) and reaper.is_hard_stop({"hardStop": True})
    for other in ({}, {"hardStop": "yes"}, {"Records": "x"}, {"Records": [{"EventSource": "aws:sqs"}]}, None, []):
        assert not reaper.is_hard_stop(other), other


# ---------------------------------------------------------------- a hard stop that is never lost

PARAMETER = "aws:ssm/parameter:Parameter"
QUEUE = "aws:sqs/queue:Queue"
JUNE, JULY = datetime(2025, 6, 14, 12, tzinfo=timezone.utc), datetime(2025, 7, 1, 0, 5, tzinfo=timezone.utc)


def unsecret(value):
    """A planned input the provider marks secret (as it does a parameter's value) comes wrapped; its value."""
    return value["value"] if isinstance(value, dict) and "value" in value else value


@pytest.fixture(scope="module")
def p5_plan():
    """A stack with both a hard stop and a time to live: the budget's function and the reaper's schedule."""
    return plan_config("aws-p5-2node", config_of("aws-p5-2node"))


def test_the_hard_stop_records_its_month_where_the_reapers_schedule_reads_it(p5_plan):
    (state,) = p5_plan.of_type(PARAMETER)
    assert unsecret(state.props["value"]) == reaper.NO_HARD_STOP and state.props["type"] == "String"
    assert "value" in state.ignore_changes, "a later up must not undo a hard stop"
    assert {k: state.props["tags"].get(k) for k in p5_plan.spec.stack_tags} == p5_plan.spec.stack_tags
    functions = {f.name: f for f in p5_plan.of_type(FUNCTION)}
    assert len(functions) == 2 and any(f.name.endswith("-reaper") for f in functions.values())
    for function in functions.values():
        assert function.props["environment"]["variables"][reaper.HARD_STOP_PARAMETER_ENV] == state.props["name"]

    def granted(function) -> list[dict]:
        (policy,) = [p for p in p5_plan.of_type("aws:iam/rolePolicy:RolePolicy") if p.name == f"{function.name}-policy"]
        return [s for s in json.loads(policy.props["policy"])["Statement"]
                if any(a.startswith("ssm:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]

    tag_scoped = {"StringEquals": {f"aws:ResourceTag/{reaper.STACK_TAG_KEY}": p5_plan.spec.stack,
                                   f"aws:ResourceTag/{reaper.PROJECT_TAG_KEY}": p5_plan.spec.tags.project}}
    for function in functions.values():
        (ssm,) = granted(function)
        assert ssm["Resource"].endswith(f":parameter{state.props['name']}") and ssm["Condition"] == tag_scoped
        writes = function.name.endswith("-hard-stop-fn")
        assert set(ssm["Action"]) == ({"ssm:GetParameter", "ssm:PutParameter"} if writes else {"ssm:GetParameter"})


def test_a_failed_hard_stop_invocation_keeps_its_event_in_an_encrypted_tagged_queue(spot_plan):
    function, queue = one(spot_plan, FUNCTION), one(spot_plan, QUEUE)
    assert name_of(function.props["deadLetterConfig"]["targetArn"]) == queue.name
    assert queue.props["sqsManagedSseEnabled"] is True
    assert {k: queue.props["tags"].get(k) for k in spot_plan.spec.stack_tags} == spot_plan.spec.stack_tags
    (policy,) = [p for p in children(spot_plan, "aws:iam/rolePolicy:RolePolicy") if "-hard-stop-fn" in p.name]
    sends = [s for s in json.loads(policy.props["policy"])["Statement"] if s["Action"] == "sqs:SendMessage"]
    assert [name_of(s["Resource"]) for s in sends] == [queue.name]


@pytest.fixture
def clock(shipped, monkeypatch):
    """The shipped module's waits take no time: sleeping moves a fake monotonic clock; the UTC time is settable."""
    module, _ = shipped
    ticks, now = [0.0], [JUNE]
    monkeypatch.setattr(module, "_monotonic", lambda: ticks[0], raising=False)
    monkeypatch.setattr(module, "_sleep", lambda seconds: ticks.__setitem__(0, ticks[0] + seconds), raising=False)
    monkeypatch.setattr(module, "utc_now", lambda: now[0])
    return now


@pytest.fixture
def planned_state(spot_plan, shipped):
    """The hard-stop parameter as `pulumi up` leaves it in moto's SSM; returns a reader of its value."""
    (state,) = children(spot_plan, PARAMETER)
    ssm = boto3.client("ssm")
    ssm.put_parameter(Name=state.props["name"], Value=unsecret(state.props["value"]), Type="String",
                      Tags=[{"Key": k, "Value": v} for k, v in state.props["tags"].items()])
    return lambda: ssm.get_parameter(Name=state.props["name"])["Parameter"]["Value"]


def launch_nodes(p, ec2, count: int = 2) -> list[str]:
    return [i["InstanceId"] for i in ec2.run_instances(
        ImageId=IMAGE, MinCount=count, MaxCount=count, TagSpecifications=node_tags(p))["Instances"]]


class _Pending:
    """moto's EC2, except that the nodes in ``pending`` are described as pending, and EC2 refuses to stop them
    (IncorrectInstanceState) as it does a node that is still starting."""

    def __init__(self, client, pending: set[str]):
        self._client, self.pending = client, pending

    def __getattr__(self, name):
        return getattr(self._client, name)

    def get_paginator(self, name):
        paginator, pending = self._client.get_paginator(name), self.pending

        class _Described:
            def paginate(self, **kwargs):
                for page in paginator.paginate(**kwargs):
                    for r in page["Reservations"]:
                        for i in r["Instances"]:
                            if i["InstanceId"] in pending:
                                i["State"] = {"Code": 0, "Name": "pending"}
                    yield page

        return _Described() if name == "describe_instances" else paginator

    def stop_instances(self, **kwargs):
        if self.pending & set(kwargs["InstanceIds"]):
            raise ClientError({"Error": {"Code": "IncorrectInstanceState",
                                         "Message": "The instance is not in a state from which it can be stopped."}},
                              "StopInstances")
        return self._client.stop_instances(**kwargs)


def clients(monkeypatch, ec2) -> None:
    """The handler's boto3.client("ec2") is ``ec2``; other services are moto's."""
    real = boto3.client
    monkeypatch.setattr(boto3, "client", lambda service, *a, **k: ec2 if service == "ec2" else real(service, *a, **k))


def test_a_node_pending_at_the_hard_stop_is_stopped_by_the_next_scheduled_run(
        spot_plan, shipped, clock, planned_state, monkeypatch, capsys):
    module, ec2 = shipped
    running, starting = launch_nodes(spot_plan, ec2)
    pending = _Pending(ec2, {starting})
    clients(monkeypatch, pending)

    with pytest.raises(RuntimeError, match=f"could not be torn down: {starting}"):
        module.handler(SNS_EVENT, None)  # Lambda retries it, and then keeps the event in the dead-letter queue
    assert states(ec2)[running] in ("stopping", "stopped") and states(ec2)[starting] == "running"
    assert json.loads(planned_state())["month"] == "2025-06"
    assert f"FAILED to stop {starting}: still pending" in capsys.readouterr().out

    pending.pending.clear()  # it has started
    clock[0] += timedelta(minutes=15)
    result = module.handler({}, None)  # the schedule's event
    assert result["trigger"] == module.HARD_STOP and [d["instance_id"] for d in result["acted"]] == [starting]
    assert states(ec2)[starting] in ("stopping", "stopped")


def test_a_node_that_starts_during_the_hard_stop_is_stopped_in_the_same_invocation(
        spot_plan, shipped, clock, planned_state, monkeypatch):
    module, ec2 = shipped
    (starting,) = launch_nodes(spot_plan, ec2, 1)
    pending = _Pending(ec2, {starting})
    clients(monkeypatch, pending)
    monkeypatch.setattr(module, "_sleep", lambda seconds: pending.pending.clear(), raising=False)

    result = module.handler(SNS_EVENT, None)
    assert [d["instance_id"] for d in result["acted"]] == [starting] and result["failed"] == []
    assert states(ec2)[starting] in ("stopping", "stopped")


def test_a_node_started_again_after_the_hard_stop_is_stopped_by_the_next_scheduled_run(
        spot_plan, shipped, clock, planned_state, capsys):
    module, ec2 = shipped
    nodes = launch_nodes(spot_plan, ec2)
    module.handler(SNS_EVENT, None)
    ec2.stop_instances(InstanceIds=nodes)  # moto's stopping is instant; make sure they count as stopped
    ec2.start_instances(InstanceIds=[nodes[0]])
    assert states(ec2)[nodes[0]] == "running"

    clock[0] = JUNE.replace(day=30, hour=23, minute=50)
    result = module.handler({}, None)
    assert [d["instance_id"] for d in result["acted"]] == [nodes[0]]
    assert states(ec2)[nodes[0]] in ("stopping", "stopped")
    assert "hard stop: IN FORCE for 2025-06" in capsys.readouterr().out


def test_after_the_month_ends_or_an_operator_releases_it_the_schedule_leaves_nodes_alone(
        spot_plan, shipped, clock, planned_state, capsys):
    module, ec2 = shipped
    nodes = launch_nodes(spot_plan, ec2)
    module.handler(SNS_EVENT, None)
    ec2.start_instances(InstanceIds=nodes)

    clock[0] = JULY
    result = module.handler({}, None)
    assert result["trigger"] == module.TTL and result["acted"] == []
    assert {states(ec2)[n] for n in nodes} == {"running"}
    assert "the hard stop of 2025-06 ended with its month" in capsys.readouterr().out

    clock[0] = JULY.replace(day=2)
    module.handler(SNS_EVENT, None)  # July's budget passes too; then the budget is raised and the stop released
    ec2.start_instances(InstanceIds=nodes)
    boto3.client("ssm").put_parameter(Name=module.os.environ[module.HARD_STOP_PARAMETER_ENV],
                                      Value=module.NO_HARD_STOP, Overwrite=True)
    assert module.handler({}, None)["acted"] == []
    assert {states(ec2)[n] for n in nodes} == {"running"}


class Calls(list):
    """The calls a throttle saw; ``end()`` lets the next ones through."""

    left: list[int]

    def end(self) -> None:
        self.left[0] = 0


def throttled(client, operation: str, times: int) -> Calls:
    """The next ``times`` calls of this EC2 operation answer RequestLimitExceeded, as EC2 does when throttling."""
    left, seen = [times], Calls()
    seen.left = left

    def refuse(**_):
        seen.append(1)
        if left[0]:
            left[0] -= 1
            return (SimpleNamespace(status_code=503, headers={}),
                    {"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."},
                     "ResponseMetadata": {"HTTPStatusCode": 503}})
        return None

    client.meta.events.register(f"before-call.ec2.{operation}", refuse)
    return seen


def test_a_throttled_describe_and_stop_are_retried_and_the_hard_stop_still_happens(
        spot_plan, shipped, clock, planned_state, monkeypatch, capsys):
    module, ec2 = shipped
    nodes = launch_nodes(spot_plan, ec2, 3)
    describes, stops = throttled(ec2, "DescribeInstances", 3), throttled(ec2, "StopInstances", 2)
    clients(monkeypatch, ec2)

    result = module.handler(SNS_EVENT, None)
    assert sorted(d["instance_id"] for d in result["acted"]) == sorted(nodes) and result["failed"] == []
    assert {states(ec2)[n] for n in nodes} <= {"stopping", "stopped"}
    assert len(describes) >= 4 and len(stops) == 3
    assert "3 acted on, 0 kept, 0 skipped, 0 failed" in capsys.readouterr().out


def test_an_exception_after_the_notification_leaves_the_hard_stop_recorded_so_the_schedule_acts(
        spot_plan, shipped, clock, planned_state, monkeypatch):
    module, ec2 = shipped
    nodes = launch_nodes(spot_plan, ec2)
    listings = throttled(ec2, "DescribeInstances", 10_000)  # throttled for the whole invocation
    clients(monkeypatch, ec2)

    with pytest.raises(RuntimeError, match="nodes could not be listed.*RequestLimitExceeded"):
        module.handler(SNS_EVENT, None)
    assert len(listings) > 10, "retried while the invocation's time allowed"
    listings.end()
    assert {states(ec2)[n] for n in nodes} == {"running"}
    assert json.loads(planned_state())["month"] == "2025-06"

    clock[0] += timedelta(minutes=15)
    result = module.handler({}, None)
    assert sorted(d["instance_id"] for d in result["acted"]) == sorted(nodes)
    assert {states(ec2)[n] for n in nodes} <= {"stopping", "stopped"}


def test_a_hard_stop_that_cannot_be_recorded_still_stops_the_nodes_and_fails_the_invocation(
        spot_plan, shipped, clock):
    module, ec2 = shipped  # no parameter: as if it had been deleted, so the write is refused
    nodes = launch_nodes(spot_plan, ec2)
    real = boto3.client

    class _NoSsm:
        def put_parameter(self, **kwargs):
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "denied"}}, "PutParameter")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(boto3, "client", lambda service, *a, **k: _NoSsm() if service == "ssm" else real(service, *a, **k))
        with pytest.raises(RuntimeError, match="could not be recorded"):
            module.handler(SNS_EVENT, None)
    assert {states(ec2)[n] for n in nodes} <= {"stopping", "stopped"}


def test_raising_the_budget_ends_the_hard_stop_and_the_same_budget_keeps_it(
        spot_plan, shipped, clock, planned_state, monkeypatch, capsys):
    """The stop records the deployed limit; `up` with a higher monthlyLimit redeploys the function's environment, and
    the next scheduled run leaves the nodes alone. With the limit unchanged, a node started again is stopped."""
    module, ec2 = shipped
    limit = float(module.os.environ[module.BUDGET_LIMIT_ENV])
    assert limit == spot_plan.spec.budget.monthly_limit
    nodes = launch_nodes(spot_plan, ec2)
    module.handler(SNS_EVENT, None)
    assert json.loads(planned_state())["limit"] == limit
    ec2.start_instances(InstanceIds=nodes)
    module.handler({}, None)
    assert {states(ec2)[n] for n in nodes} <= {"stopping", "stopped"}

    ec2.start_instances(InstanceIds=nodes)
    monkeypatch.setenv(module.BUDGET_LIMIT_ENV, f"{limit * 2:g}")
    assert module.handler({}, None)["acted"] == []
    assert {states(ec2)[n] for n in nodes} == {"running"}
    assert f"the budget was raised from {limit:g} to {limit * 2:g}" in capsys.readouterr().out
