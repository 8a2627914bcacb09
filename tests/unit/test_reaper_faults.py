"""The reaper survives bad nodes and big stacks: each node is judged alone, calls stay within EC2's limits,
a failed call is retried per instance so the report is exact, and other projects' nodes are never touched."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from goldenenv.clouds import stopcore
from goldenenv.clouds.aws import reaper

PROJECT, OTHER_PROJECT, STACK = "finetune", "pretrain", "dev"
IMAGE = "ami-12c6146b"
"""Any id will do: moto launches it without looking it up."""
EC2_IDS_PER_CALL = 1000
"""StopInstances / TerminateInstances: "Up to 1000 instance IDs" (EC2 API reference)."""


def tags(project: str = PROJECT, stack: str = STACK, ttl: str | None = "1") -> list[dict]:
    values = {reaper.PROJECT_TAG_KEY: project, reaper.STACK_TAG_KEY: stack}
    if ttl is not None:
        values[reaper.TTL_TAG_KEY] = ttl
    return [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in values.items()]}]


def launch(ec2, count: int = 1, **extra) -> list[str]:
    extra.setdefault("TagSpecifications", tags())
    return [i["InstanceId"] for i in ec2.run_instances(ImageId=IMAGE, MinCount=count, MaxCount=count,
                                                       InstanceType="t3.micro", **extra)["Instances"]]


def spot_request(ec2, kind: str, ttl: str = "1") -> str:
    """A node launched by a spot request of this kind, tagged as the stack's nodes are."""
    (request,) = ec2.request_spot_instances(
        Type=kind, LaunchSpecification={"ImageId": IMAGE, "InstanceType": "t3.micro"})["SpotInstanceRequests"]
    instance_id = ec2.describe_spot_instance_requests(
        SpotInstanceRequestIds=[request["SpotInstanceRequestId"]])["SpotInstanceRequests"][0]["InstanceId"]
    ec2.create_tags(Resources=[instance_id], Tags=tags(ttl=ttl)[0]["Tags"])
    return instance_id


def states(ec2) -> dict[str, str]:
    pages = ec2.get_paginator("describe_instances").paginate()
    return {i["InstanceId"]: i["State"]["Name"] for p in pages for r in p["Reservations"] for i in r["Instances"]}


def later(ec2, hours: float = 2):
    pages = ec2.get_paginator("describe_instances").paginate()
    return max(i["LaunchTime"] for p in pages for r in p["Reservations"] for i in r["Instances"]) + timedelta(hours=hours)


def record_calls(ec2) -> list[tuple[str, int]]:
    """Every EC2 call the client makes, paginators included, with the number of ids it carries."""
    calls: list[tuple[str, int]] = []

    def count(params, model, **_):
        ids = len(params.get("InstanceIds", [])) + len(params.get("SpotInstanceRequestIds", []))
        ids += sum(len(f.get("Values", [])) for f in params.get("Filters", []) if f.get("Name") == "instance-id")
        calls.append((model.name, ids))

    ec2.meta.events.register("before-parameter-build.ec2.*", count)
    return calls


STOPPED = ("stopping", "stopped")
TERMINATED = ("shutting-down", "terminated")


def test_expired_nodes_are_stopped_in_calls_no_larger_than_the_call_limit(ec2, monkeypatch):
    """Chunking against moto's EC2, at a call limit of 10 so 25 nodes take three calls (moto launches 1,100 nodes in
    about 40 s); the real limit of 1,000 at 1,100 nodes is held on the fast fake below
    (test_1100_nodes_with_every_second_call_throttled_are_stopped_in_one_invocation)."""
    monkeypatch.setattr(reaper, "MAX_IDS_PER_CALL", 10)
    nodes = launch(ec2, 25)
    calls = record_calls(ec2)
    report = reaper.reap(ec2, PROJECT, STACK, later(ec2), "stop")

    assert sorted(d.instance_id for d in report.acted) == sorted(nodes)
    assert report.failed == report.skipped == []
    stops = [ids for name, ids in calls if name == "StopInstances"]
    assert sorted(stops) == [5, 10, 10]
    now = states(ec2)
    assert {now[n] for n in nodes} <= set(STOPPED)


def test_a_ttl_too_large_to_count_is_reported_and_its_siblings_are_still_reaped(ec2):
    huge = launch(ec2, TagSpecifications=tags(ttl="99999999"))[0]
    siblings = launch(ec2, 3)
    report = reaper.reap(ec2, PROJECT, STACK, later(ec2), "stop")

    assert sorted(d.instance_id for d in report.acted) == sorted(siblings)
    assert [d.instance_id for d in report.skipped] == [huge]
    assert "99999999" in report.skipped[0].reason
    assert states(ec2)[huge] == "running"


class _NoLaunchTime:
    """The moto client, except that DescribeInstances omits one node's LaunchTime."""

    def __init__(self, client, instance_id: str):
        self._client, self._id = client, instance_id

    def __getattr__(self, name):
        return getattr(self._client, name)

    def describe_instances(self, **kwargs):
        page = self._client.describe_instances(**kwargs)
        for r in page["Reservations"]:
            for i in r["Instances"]:
                if i["InstanceId"] == self._id:
                    del i["LaunchTime"]
        return page


def test_a_node_without_a_launch_time_is_reported_and_its_siblings_are_still_reaped(ec2):
    blind, *siblings = launch(ec2, 4)
    report = reaper.reap(_NoLaunchTime(ec2, blind), PROJECT, STACK, later(ec2), "stop")

    assert sorted(d.instance_id for d in report.acted) == sorted(siblings)
    assert [d.instance_id for d in report.skipped] == [blind]
    assert "launch time" in report.skipped[0].reason
    assert states(ec2)[blind] == "running"


def test_one_stop_protected_node_among_five_is_the_only_failure(ec2):
    protected = launch(ec2, DisableApiStop=True)[0]
    others = launch(ec2, 4)
    report = reaper.reap(ec2, PROJECT, STACK, later(ec2), "stop")

    assert sorted(d.instance_id for d in report.acted) == sorted(others)
    assert [(d.instance_id, d.action) for d in report.failed] == [(protected, "stop")]
    assert "OperationNotPermitted" in report.failed[0].reason
    now = states(ec2)
    assert {now[n] for n in others} <= set(STOPPED)
    assert now[protected] == "running"


def test_spot_nodes_are_stopped_when_persistent_and_terminated_when_one_time(ec2):
    persistent = spot_request(ec2, "persistent")
    one_time = spot_request(ec2, "one-time")
    launched_spot = launch(ec2, InstanceMarketOptions={"MarketType": "spot"})[0]  # no request on record
    on_demand = launch(ec2)[0]
    report = reaper.reap(ec2, PROJECT, STACK, later(ec2), "stop")

    acted = {d.instance_id: d.action for d in report.acted}
    assert acted == {persistent: "stop", one_time: "terminate", launched_spot: "terminate", on_demand: "stop"}
    now = states(ec2)
    assert now[persistent] in STOPPED and now[on_demand] in STOPPED
    assert now[one_time] in TERMINATED and now[launched_spot] in TERMINATED


def test_another_projects_stack_of_the_same_name_is_never_touched(ec2):
    ours = launch(ec2, 2)
    theirs = launch(ec2, 2, TagSpecifications=tags(project=OTHER_PROJECT))
    now = later(ec2)
    reaped = reaper.reap(ec2, PROJECT, STACK, now, "terminate")
    stopped = reaper.hard_stop(ec2, PROJECT, STACK, now)

    seen = {d.instance_id for r in (reaped, stopped) for d in r.acted + r.kept + r.skipped + r.failed}
    assert seen == set(ours)
    after = states(ec2)
    assert {after[n] for n in theirs} == {"running"}


def test_the_reaper_role_may_only_touch_nodes_tagged_with_both_project_and_stack():
    from goldenenv.clouds.aws.teardown import reaper_policy

    policy = reaper_policy(PROJECT, STACK, "arn:aws:logs:us-east-1:123456789012:log-group:x")
    (scoped,) = [s for s in policy["Statement"] if "ec2:StopInstances" in s["Action"]]
    assert scoped["Condition"] == {"StringEquals": {"aws:ResourceTag/goldenenv:stack": STACK,
                                                    "aws:ResourceTag/project": PROJECT}}


class _Longest(random.Random):
    """Full jitter's longest wait every time, so the waits show the backoff's growth."""

    def uniform(self, low: float, high: float) -> float:
        return high


def longest_waits(waits: list[float]) -> stopcore.Clock:
    """The invocation's clock, its waits recorded and taking no time."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    return stopcore.Clock(reaper.TIMEOUT_SECONDS, monotonic=lambda: now[0], sleep=sleep, rng=_Longest())


class _Throttled:
    """The moto client, except that its first calls of DescribeInstances and StopInstances are throttled."""

    def __init__(self, client, describes: int, stops: int):
        self._client, self.left = client, {"describe_instances": describes, "stop_instances": stops}

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _throttle(self, name):
        if self.left[name]:
            self.left[name] -= 1
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}}, name)

    def describe_instances(self, **kwargs):
        self._throttle("describe_instances")
        return self._client.describe_instances(**kwargs)

    def stop_instances(self, **kwargs):
        self._throttle("stop_instances")
        return self._client.stop_instances(**kwargs)


def test_throttled_calls_are_retried_with_growing_backoff_and_every_node_is_stopped(ec2):
    nodes = launch(ec2, 3)
    waits: list[float] = []
    report = reaper.reap(_Throttled(ec2, describes=4, stops=3), PROJECT, STACK, later(ec2), "stop",
                         clock=longest_waits(waits))

    assert sorted(d.instance_id for d in report.acted) == sorted(nodes) and report.failed == []
    assert {states(ec2)[n] for n in nodes} <= set(STOPPED)
    assert waits == [0.5, 1.0, 2.0, 4.0] + [0.5, 1.0, 2.0]



class _FailingFirst:
    """The moto client, except that the first call of DescribeInstances and of StopInstances each fail with
    ``error``."""

    def __init__(self, client, error: Exception):
        self._client, self.error, self.left = client, error, {"describe_instances", "stop_instances"}

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _fail(self, name):
        if name in self.left:
            self.left.discard(name)
            raise self.error

    def describe_instances(self, **kwargs):
        self._fail("describe_instances")
        return self._client.describe_instances(**kwargs)

    def stop_instances(self, **kwargs):
        self._fail("stop_instances")
        return self._client.stop_instances(**kwargs)


class EndpointConnectionError(Exception):
    """Named as botocore names a call that got no answer (the reaper imports no botocore)."""


@pytest.mark.parametrize("error", [
    ClientError({"Error": {"Code": "InternalError", "Message": "An internal error has occurred."}}, "op"),
    ClientError({"Error": {"Code": "Unavailable", "Message": "The server is overloaded."}}, "op"),
    ClientError({"Error": {"Code": "Whatever"}, "ResponseMetadata": {"HTTPStatusCode": 502}}, "op"),
    EndpointConnectionError("Could not connect to the endpoint URL"),
], ids=["InternalError", "Unavailable", "http-502", "no-answer"])
def test_server_errors_and_lost_answers_are_retried_like_throttling(ec2, error):
    """EC2's server errors (InternalError, Unavailable: "Error codes for the Amazon EC2 API", server errors) are
    worth another try; a client error is not (test_one_stop_protected_node_among_five_is_the_only_failure)."""
    nodes = launch(ec2, 2)
    waits: list[float] = []
    report = reaper.reap(_FailingFirst(ec2, error), PROJECT, STACK, later(ec2), "stop", clock=longest_waits(waits))
    assert sorted(d.instance_id for d in report.acted) == sorted(nodes) and report.failed == []
    assert waits == [0.5, 0.5]


class _Context:
    """Lambda's context: the invocation's time left."""

    def __init__(self, millis: int):
        self.millis = millis

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


def test_the_handler_retries_only_within_the_time_lambda_says_is_left(ec2, monkeypatch):
    import boto3

    launch(ec2, 2)
    now = [0.0]
    monkeypatch.setattr(reaper, "_monotonic", lambda: now[0])
    monkeypatch.setattr(reaper, "_sleep", lambda seconds: now.__setitem__(0, now[0] + seconds))
    monkeypatch.setattr(boto3, "client", lambda *a, **k: _Throttled(ec2, describes=10_000, stops=0))
    for name, value in {reaper.PROJECT_ENV: PROJECT, reaper.STACK_ENV: STACK, reaper.DRY_RUN_ENV: "false"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match="could not be listed.*RequestLimitExceeded"):
        reaper.handler({"hardStop": True}, _Context(60_000))
    assert 0 < now[0] <= 60 - reaper.MARGIN_SECONDS, "it gave up before Lambda's deadline, leaving the margin"


def test_1100_nodes_with_every_second_call_throttled_are_stopped_in_one_invocation():
    """The probe's exemplar, held: EC2 throttles every second call (stopfakes.aws answers RequestLimitExceeded as
    EC2 does), and the hard stop still stops all 1,100 nodes in one invocation, in calls of at most 1,000 ids."""
    from stopfakes.aws import AwsAdapter
    from stopfakes.world import Faults, FleetNode

    fleet = [FleetNode(f"dev-node-{k}") for k in range(1100)]
    world = AwsAdapter(fleet, Faults(throttle="every-second"))
    sizes: list[int] = []
    stop = world.ec2.stop_instances
    world.ec2.stop_instances = lambda InstanceIds: sizes.append(len(InstanceIds)) or stop(InstanceIds=InstanceIds)

    outcome = world.invoke("hard-stop")
    assert not outcome.failed, outcome.message
    assert world.running() == set()
    assert max(sizes) == EC2_IDS_PER_CALL and sum(sizes) > 1100, "a throttled call was sent again"
