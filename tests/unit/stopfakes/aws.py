"""AWS's reaper (goldenenv/clouds/aws/reaper.py) on an in-process fake of EC2, for the fault table.

The fake answers in EC2's shapes as boto3 returns them: DescribeInstances with Reservations[].Instances[] and
NextToken, filtered on tags, state and instance id; errors as botocore's ClientError with EC2's codes: a throttled
call is RequestLimitExceeded ("Request throttling", https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html),
a stop of a node still pending is refused for the whole call with IncorrectInstanceState, and a node with stop
protection with OperationNotPermitted ("Error codes for the Amazon EC2 API",
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html). A call names at most 1,000 ids.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.exceptions import ClientError

from goldenenv.clouds.aws import reaper

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
LIVE = ("pending", "running")
STATE_CODES = {"pending": 0, "running": 16, "stopping": 64, "stopped": 80}
MAX_IDS = 1000
"""StopInstances: up to 1,000 instance ids a call (EC2 API reference)."""
TTL_HOURS = "24"


def _client_error(operation: str, code: str, message: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


class FakeEc2:
    """EC2 as the reaper calls it through boto3: describe_instances, stop_instances."""

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.faults = faults
        self.throttle = Throttle(faults)
        self.instances: dict[str, dict[str, Any]] = {}
        self.names: dict[str, str] = {}
        self.polls_left: dict[str, int] = {}
        self.stop_calls: list[str] = []
        self.run = 0
        """The invocation now running (the adapter counts them): a lost page is lost in the first only."""
        for n, node in enumerate(fleet):
            instance_id = f"i-{n:017x}"
            tags = [{"Key": "owner", "Value": "ml-infra"}]
            if node.stack is not None:
                tags += [{"Key": reaper.STACK_TAG_KEY, "Value": node.stack},
                         {"Key": reaper.PROJECT_TAG_KEY, "Value": node.project},
                         {"Key": reaper.TTL_TAG_KEY, "Value": TTL_HOURS}]
            state = "pending" if node.starting_polls else "running"
            self.instances[instance_id] = {"InstanceId": instance_id, "InstanceType": "p5.48xlarge", "Tags": tags,
                                           "State": {"Code": STATE_CODES[state], "Name": state},
                                           "LaunchTime": NOW - timedelta(hours=30)}
            self.names[node.name] = instance_id
            self.polls_left[instance_id] = node.starting_polls

    def _throttled(self, operation: str) -> None:
        if self.throttle.now():
            raise _client_error(operation, "RequestLimitExceeded", "Request limit exceeded.", 503)

    def describe_instances(self, Filters: list[dict[str, Any]] = (), MaxResults: int = 1000,  # noqa: N803
                           NextToken: str | None = None) -> dict[str, Any]:
        self._throttled("DescribeInstances")
        if not 5 <= MaxResults <= 1000:
            raise _client_error("DescribeInstances", "InvalidParameterValue", f"MaxResults {MaxResults}: 5 to 1000")
        wanted = {f["Name"]: set(f["Values"]) for f in Filters}
        matching = [i for i in self.instances.values() if self._matches(i, wanted)]
        size = min(MaxResults, self.faults.page_size or MaxResults)
        start = int(NextToken or 0)
        if self.run == 1 and self.faults.lost_page and start == (self.faults.lost_page - 1) * size:
            raise _client_error("DescribeInstances", "InternalError", "An internal error has occurred.", 500)
        page = matching[start:start + size]
        for instance in page:
            self._shown(instance["InstanceId"])
        answer: dict[str, Any] = {"Reservations": [{"ReservationId": f"r-{i['InstanceId'][2:]}",
                                                    "Instances": [dict(i, State=dict(i["State"]))]} for i in page]}
        if start + size < len(matching):
            answer["NextToken"] = str(start + size)
        return answer

    @staticmethod
    def _matches(instance: dict[str, Any], wanted: dict[str, set[str]]) -> bool:
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        for name, values in wanted.items():
            if name.startswith("tag:") and tags.get(name[4:]) not in values:
                return False
            if name == "instance-state-name" and instance["State"]["Name"] not in values:
                return False
            if name == "instance-id" and instance["InstanceId"] not in values:
                return False
        return True

    def _shown(self, instance_id: str) -> None:
        """A pending node runs once it has been listed starting_polls times."""
        instance = self.instances[instance_id]
        if instance["State"]["Name"] == "pending":
            self.polls_left[instance_id] -= 1
            if self.polls_left[instance_id] <= 0:
                self._set(instance_id, "running")

    def _set(self, instance_id: str, state: str) -> None:
        self.instances[instance_id]["State"] = {"Code": STATE_CODES[state], "Name": state}

    def stop_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        self._throttled("StopInstances")
        if not 1 <= len(InstanceIds) <= MAX_IDS:
            raise _client_error("StopInstances", "InvalidParameterValue", f"{len(InstanceIds)} ids: 1 to {MAX_IDS}")
        unknown = [i for i in InstanceIds if i not in self.instances]
        if unknown:
            raise _client_error("StopInstances", "InvalidInstanceID.NotFound",
                                f"The instance ID '{unknown[0]}' does not exist")
        self.stop_calls += InstanceIds
        for instance_id in InstanceIds:
            if self.instances[instance_id]["State"]["Name"] == "pending":
                raise _client_error("StopInstances", "IncorrectInstanceState", f"The instance '{instance_id}' is "
                                    "not in a state from which it can be stopped.")
            if instance_id in {self.names[n] for n in self.faults.refuse}:
                raise _client_error("StopInstances", "OperationNotPermitted", f"The instance '{instance_id}' may "
                                    "not be stopped. Modify its 'disableApiStop' instance attribute and try again.")
        changes = []
        for instance_id in InstanceIds:
            before = self.instances[instance_id]["State"]
            if before["Name"] == "running":
                self._set(instance_id, "stopped")
            changes.append({"InstanceId": instance_id, "PreviousState": before,
                            "CurrentState": self.instances[instance_id]["State"]})
        return {"StoppingInstances": changes}


class AwsAdapter:
    cloud = "aws"
    provider = "aws"
    not_served: dict[str, str] = {}

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.ec2 = FakeEc2(fleet, faults)
        self.env = {reaper.PROJECT_ENV: PROJECT, reaper.STACK_ENV: STACK, reaper.ACTION_ENV: "stop",
                    reaper.DRY_RUN_ENV: "false"}
        self.seed = faults.seed
        self.runs = 0

    def invoke(self, path: str) -> Invocation:
        """The budget's notification (hard stop) or the schedule's event (time to live); no SSM parameter."""
        self.runs += 1
        self.ec2.run = self.runs
        event = {"hardStop": True} if path == "hard-stop" else {}
        clock = simulated_clock(reaper.TIMEOUT_SECONDS - reaper.MARGIN_SECONDS, seed=self.seed + self.runs)
        try:
            reaper.invoke(event, self.env, self.ec2, lambda: None, NOW, clock)
        except RuntimeError as failure:
            return Invocation(True, str(failure))
        return Invocation(False)

    def running(self) -> set[str]:
        return {n for n, i in self.ec2.names.items() if self.ec2.instances[i]["State"]["Name"] in LIVE}

    def touched(self) -> set[str]:
        called = set(self.ec2.stop_calls)
        return {n for n, i in self.ec2.names.items() if i in called}

    def restart(self, name: str) -> None:
        instance_id = self.ec2.names[name]
        self.ec2._set(instance_id, "running")
        self.ec2.instances[instance_id]["LaunchTime"] = NOW

    def named(self, name: str) -> str:
        return self.ec2.names[name]

    def close(self) -> None:
        pass


ADAPTER = AwsAdapter
"""AWS's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
