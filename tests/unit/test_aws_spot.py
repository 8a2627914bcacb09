"""AWS spot nodes that come back by themselves: persistent requests with interruption behaviour stop where EC2
allows them (no placement group), one-time ones in a cluster placement group, and a delete that cancels the
request first so EC2 does not launch a deleted node again."""

from __future__ import annotations

import copy
import dataclasses

import boto3
import pulumi
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from goldenenv import automation, stackconfig
from goldenenv.clouds import DESTROYING_ENV
from goldenenv.clouds.aws import readiness, spot
from goldenenv.plan import plan, plan_config, stack_file
from goldenenv.spec import STACK_TAG_KEY

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
PLACEMENT = "aws:ec2/placementGroup:PlacementGroup"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def spot_config(stack: str, **lifecycle) -> dict:
    config = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    config["goldenenv:nodes"]["capacity"] = "spot"
    if lifecycle:
        config["goldenenv:lifecycle"] = lifecycle
    return config


@pytest.fixture(scope="module")
def g5_spot():
    """aws-g5-dev (1 x g5.xlarge, no EFA, so no placement group) on spot capacity."""
    return plan_config("g5-spot", spot_config("aws-g5-dev", idleMinutes=30))


@pytest.fixture(scope="module")
def p4d_spot():
    """The shipped EFA spot stack: its nodes sit in a cluster placement group."""
    return plan("aws-p4d-4node-spot")


def nodes(result) -> list:
    return [r for r in result.of_type(INSTANCE) if not r.name.endswith("-head")]


def strict(result, rule: str) -> list[str]:
    return [f.message for f in result.findings if f.rule == rule]


def test_a_spot_pool_outside_a_placement_group_is_stopped_and_restarted_by_ec2(g5_spot):
    template = g5_spot.of_type(LT)[0].props
    assert template["instanceMarketOptions"] == {
        "marketType": "spot",
        "spotOptions": {"spotInstanceType": "persistent", "instanceInterruptionBehavior": "stop"}}
    assert g5_spot.of_type(PLACEMENT) == [] and "groupName" not in template.get("placement", {})
    requests = [t for t in template["tagSpecifications"] if t["resourceType"] == "spot-instances-request"]
    assert requests and requests[0]["tags"][STACK_TAG_KEY] == "g5-spot"
    assert not g5_spot.failed and strict(g5_spot, "strict:spot-restart") == []
    notes = [f.message for f in g5_spot.findings if f.rule == "plan-note"]
    assert any("persistent spot requests" in n and "EC2 starts the same node again" in n for n in notes)


def test_every_persistent_spot_node_cancels_its_request_before_it_is_deleted(g5_spot):
    pool = nodes(g5_spot)
    assert pool and all(node.delete_hooks == ("g5-spot-gpu-cancel-spot-request",) for node in pool)
    head = [r for r in g5_spot.of_type(INSTANCE) if r.name.endswith("-head")]
    assert head and head[0].delete_hooks == ()  # on demand: no request to cancel


def test_an_efa_spot_pool_keeps_its_placement_group_and_one_time_requests(p4d_spot):
    template = p4d_spot.of_type(LT)[0].props
    assert template["instanceMarketOptions"]["spotOptions"] == {
        "spotInstanceType": "one-time", "instanceInterruptionBehavior": "terminate"}
    assert len(p4d_spot.of_type(PLACEMENT)) == 1 and template["placement"]["groupName"]
    assert all(node.delete_hooks == () for node in nodes(p4d_spot))
    notes = [f.message for f in p4d_spot.findings if f.rule == "plan-note"]
    assert any("one-time spot requests" in n and "placement group" in n for n in notes)


def test_idle_persistent_spot_nodes_are_stopped_one_time_ones_terminated(g5_spot):
    assert {tuple(a.props["alarmActions"]) for a in g5_spot.of_type(ALARM)} == {
        (f"arn:aws:automate:{g5_spot.spec.region}:ec2:stop",)}


def test_readiness_refuses_stop_in_a_placement_group_and_a_node_that_would_come_back(g5_spot):
    placed = [dataclasses.replace(r, props={**r.props, "placement": {**r.props.get("placement", {}),
                                                                      "groupName": "cluster-pg"}})
              if r.type == LT else r for r in g5_spot.resources]
    found = [f.message for f in readiness.findings(placed, {}) if f.rule == "strict:spot-restart"]
    assert len(found) == 1 and "placement group" in found[0] and "EC2 refuses" in found[0]

    unhooked = [dataclasses.replace(r, delete_hooks=()) if r.type == INSTANCE else r for r in g5_spot.resources]
    found = [f.message for f in readiness.findings(unhooked, {}) if f.rule == "strict:spot-restart"]
    assert len(found) == len(nodes(g5_spot)) and "launch it again" in found[0]


def hook_args(**outputs) -> pulumi.ResourceHookArgs:
    return pulumi.ResourceHookArgs(urn="urn:pulumi:s::goldenenv::aws:ec2/instance:Instance::gpu-0", id="i-0abc",
                                   name="gpu-0", type=INSTANCE, old_outputs=outputs)


@mock_aws
def test_the_hook_cancels_the_nodes_persistent_request():
    ec2 = boto3.client("ec2", region_name="us-west-2")
    made = ec2.request_spot_instances(InstanceCount=1, Type="persistent", LaunchSpecification={
        "ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"})["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
    other = ec2.request_spot_instances(InstanceCount=1, Type="persistent", LaunchSpecification={
        "ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"})["SpotInstanceRequests"][0]["SpotInstanceRequestId"]

    # the region comes from the instance's ARN when the outputs carry no region
    spot.cancel_request(hook_args(spotInstanceRequestId=made, arn="arn:aws:ec2:us-west-2:123456789012:instance/i-0abc"))

    live = {r["SpotInstanceRequestId"]: r["State"] for r in ec2.describe_spot_instance_requests()["SpotInstanceRequests"]}
    assert made not in live or live[made] in ("cancelled", "closed")
    assert live[other] in ("open", "active")


def stubbed_ec2(error_code: str | None):
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    if error_code:
        stubber.add_client_error("cancel_spot_instance_requests", service_error_code=error_code,
                                 expected_params={"SpotInstanceRequestIds": ["sir-0abc"]})
    stubber.activate()
    return client, stubber


def test_a_request_ec2_no_longer_knows_lets_the_delete_go_on():
    client, stubber = stubbed_ec2(spot.GONE_REQUEST)
    spot.cancel_request(hook_args(spotInstanceRequestId="sir-0abc", region="us-east-1"), client=lambda region: client)
    stubber.assert_no_pending_responses()


def test_any_other_error_stops_the_delete_rather_than_leave_a_node_that_comes_back():
    client, _ = stubbed_ec2("UnauthorizedOperation")
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        spot.cancel_request(hook_args(spotInstanceRequestId="sir-0abc", region="us-east-1"),
                            client=lambda region: client)


def test_a_node_without_a_spot_request_calls_nothing():
    def no_client(region):
        raise AssertionError("no EC2 call for an instance without a spot request")

    spot.cancel_request(hook_args(arn="arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"), client=no_client)


class Workspace:
    def __init__(self):
        self.env_vars: dict[str, str] = {}


class RecordingStack:
    """The part of an Automation API stack destroy uses, recording how destroy was called."""

    def __init__(self):
        self.workspace = Workspace()
        self.calls: list[tuple[dict, dict]] = []

    def outputs(self):
        return {}

    def destroy(self, on_output=None, **kwargs):
        self.calls.append((kwargs, dict(self.workspace.env_vars)))


@pytest.mark.parametrize("stack, runs_program", [("aws-g5-dev", True), ("alicloud-gn7i-dev", False)])
def test_destroy_runs_the_program_where_nodes_carry_delete_hooks(stack, runs_program):
    from goldenenv.lifecycle import load_spec

    target = RecordingStack()
    automation.destroy(load_spec(stack), log=lambda m: None, target=target)
    ((kwargs, env),) = target.calls
    assert kwargs.get("run_program", False) is runs_program
    assert (env.get(DESTROYING_ENV) == "1") is runs_program
    assert DESTROYING_ENV not in target.workspace.env_vars  # restored after the destroy


def test_the_program_run_for_a_destroy_does_not_refuse_a_lock_that_stopped_fitting(monkeypatch):
    from goldenenv import program

    def refused():
        raise pulumi.RunError("the image lock does not fit the nodes")

    monkeypatch.setattr(program, "refuse_incompatible", refused)
    monkeypatch.setattr(program, "build", lambda: {})
    with pytest.raises(pulumi.RunError):
        program.main()
    monkeypatch.setenv(DESTROYING_ENV, "1")
    program.main()
