"""Alibaba Cloud's budget guard (goldenenv/clouds/alicloud/guard.py) on an in-process fake of BSS and ECS, for the
fault table.

The fake answers in the shapes of the OpenAPI's JSON: DescribeSplitItemBill with Data.Items[] and Data.NextToken,
DescribeInstances with Instances.Instance[], Tags.Tag[] and NextToken (MaxResults at most 100), filtered server-side
on Tag.N and InstanceIds, StopInstances with BatchOptimization=SuccessFirst answering InstanceResponses.
InstanceResponse[] one Code per instance. Faults come as the guard's ApiError, as its rpc_client raises them from an
HTTP error: throttling as Throttling.User (HTTP 400, "Request was denied due to user flow control.") and Throttling
(ECS, "API throttling", https://www.alibabacloud.com/help/doc-detail/437902.htm), every fifth one as ServiceUnavailable
(HTTP 503, "Response results", https://www.alibabacloud.com/help/doc-detail/25932.htm). A node Starting is refused
with IncorrectInstanceStatus and its CurrentStatus, as StopInstances does for an instance that is not Running; a
refused node answers the fake's own code (the fake's, not a captured answer).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import cloudfolder
from goldenenv.clouds.alicloud import guard

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
REGION = "cn-wulanchabu"
LIMIT = 1000.0
LIVE = ("Starting", "Running")
ECS_PAGE_MAX = 100
"""DescribeInstances: MaxResults 1 to 100."""


class FakeAlibaba:
    """BSS, ECS and Direct Mail as the guard calls them (guard.Call): (action, params) -> the JSON body."""

    def __init__(self, fleet: list[FleetNode], faults: Faults, stop_module: Any = guard):
        self.guard = stop_module
        """The guard module under test (its tag keys, its ApiError, which it catches): Alibaba's, or a copy's."""
        self.faults = faults
        self.throttle = Throttle(faults)
        self.instances: dict[str, dict[str, Any]] = {}
        self.names: dict[str, str] = {}
        self.polls_left: dict[str, int] = {}
        self.stop_calls: list[str] = []
        self.memory = ""
        self.alerts: list[str] = []
        self.run = 0
        """The invocation now running (the adapter counts them): a lost page is lost in the first only."""
        for n, node in enumerate(fleet):
            instance_id = f"i-2ze{n:017x}"
            tags = [{"TagKey": "owner", "TagValue": "ml-infra"}]
            if node.stack is not None:
                tags += [{"TagKey": self.guard.STACK_TAG_KEY, "TagValue": node.stack},
                         {"TagKey": self.guard.PROJECT_TAG_KEY, "TagValue": node.project}]
            self.instances[instance_id] = {"InstanceId": instance_id, "RegionId": REGION,
                                           "InstanceType": "ecs.ebmgn8v.48xlarge",
                                           "Status": "Starting" if node.starting_polls else "Running",
                                           "Tags": {"Tag": tags}}
            self.names[node.name] = instance_id
            self.polls_left[instance_id] = node.starting_polls

    def _throttled(self, action: str) -> None:
        if self.throttle.now():
            if self.throttle.calls % 5 == 0:
                raise self.guard.ApiError(action, "ServiceUnavailable",
                                     "The request has failed due to a temporary failure of the server.", status=503)
            code = "Throttling.User" if self.throttle.calls % 2 else "Throttling"
            raise self.guard.ApiError(action, code, "Request was denied due to user flow control.", status=400)

    def bill(self, action: str, params: dict[str, str]) -> dict[str, Any]:
        """The month's bill of the stack: 1,200 CNY over two pages, whatever the filter (the guard sends its own)."""
        self._throttled(action)
        assert action == "DescribeSplitItemBill" and params["TagFilter.1.TagValues.1"] == STACK
        if params.get("NextToken"):
            return {"Code": "Success", "Success": True,
                    "Data": {"Items": [{"PretaxAmount": 500.0, "Currency": "CNY"}], "NextToken": ""}}
        return {"Code": "Success", "Success": True,
                "Data": {"Items": [{"PretaxAmount": 700.0, "Currency": "CNY"}], "NextToken": "page-2"}}

    def ecs(self, action: str, params: dict[str, str]) -> dict[str, Any]:
        self._throttled(action)
        if action == "DescribeInstances":
            return self._describe(params)
        if action == "StopInstances":
            return self._stop(params)
        if action == "DescribeSecurityGroups":
            return {"SecurityGroups": {"SecurityGroup": [{"SecurityGroupId": "sg-2zeguard", "Tags": {"Tag": [
                {"TagKey": self.guard.STACK_TAG_KEY, "TagValue": STACK}, {"TagKey": self.guard.PROJECT_TAG_KEY,
                                                                     "TagValue": PROJECT},
                {"TagKey": self.guard.STATE_TAG_KEY, "TagValue": self.memory}]}}]}, "NextToken": ""}
        if action == "TagResources":
            self.memory = params["Tag.1.Value"]
            return {"RequestId": "tag"}
        raise AssertionError(f"unexpected call {action}")

    def notify(self, subject: str, body: str) -> None:
        self.alerts.append(subject)

    def _describe(self, params: dict[str, str]) -> dict[str, Any]:
        size = int(params.get("MaxResults", "10"))
        if not 1 <= size <= ECS_PAGE_MAX:
            raise self.guard.ApiError("DescribeInstances", "InvalidParameter", f"MaxResults {size}", status=400)
        size = min(size, self.faults.page_size or size)
        wanted = {params[k]: params[k.replace(".Key", ".Value")] for k in params if k.startswith("Tag.")
                  and k.endswith(".Key")}
        ids = set(json.loads(params["InstanceIds"])) if "InstanceIds" in params else None
        matching = [i for i in self.instances.values()
                    if all({t["TagKey"]: t["TagValue"] for t in i["Tags"]["Tag"]}.get(k) == v
                           for k, v in wanted.items()) and (ids is None or i["InstanceId"] in ids)]
        start = int(params.get("NextToken") or 0)
        if self.run == 1 and self.faults.lost_page and start == (self.faults.lost_page - 1) * size:
            raise self.guard.ApiError("DescribeInstances", "ServiceUnavailable",
                                 "The request has failed due to a temporary failure of the server.", status=503)
        page = matching[start:start + size]
        for instance in page:
            self._shown(instance["InstanceId"])
        return {"RequestId": "describe", "Instances": {"Instance": [json.loads(json.dumps(i)) for i in page]},
                "NextToken": str(start + size) if start + size < len(matching) else ""}

    def _shown(self, instance_id: str) -> None:
        """A node Starting runs once it has been listed starting_polls times."""
        if self.instances[instance_id]["Status"] == "Starting":
            self.polls_left[instance_id] -= 1
            if self.polls_left[instance_id] <= 0:
                self.instances[instance_id]["Status"] = "Running"

    def _stop(self, params: dict[str, str]) -> dict[str, Any]:
        ids = [v for k, v in sorted(params.items()) if k.startswith("InstanceId.")]
        if not 1 <= len(ids) <= self.guard.MAX_IDS_PER_STOP or params.get("BatchOptimization") != "SuccessFirst":
            raise self.guard.ApiError("StopInstances", "InvalidParameter", "1 to 100 ids, SuccessFirst", status=400)
        refused = {self.names[n] for n in self.faults.refuse}
        answers = []
        for instance_id in ids:
            self.stop_calls.append(instance_id)
            instance = self.instances[instance_id]
            status = instance["Status"]
            if instance_id in refused:
                answers.append({"InstanceId": instance_id, "Code": "OperationDenied.FakeLock", "Message": "The "
                                "instance is locked.", "PreviousStatus": status, "CurrentStatus": status})
            elif status != "Running":
                answers.append({"InstanceId": instance_id, "Code": self.guard.NOT_RUNNING_YET, "Message": "The current "
                                "status of the resource does not support this operation.",
                                "PreviousStatus": status, "CurrentStatus": status})
            else:
                instance["Status"] = "Stopped"
                answers.append({"InstanceId": instance_id, "Code": "200", "Message": "success",
                                "PreviousStatus": "Running", "CurrentStatus": "Stopping"})
        return {"RequestId": "stop", "InstanceResponses": {"InstanceResponse": answers}}


class AlibabaAdapter:
    cloud = "alicloud"
    provider = "alicloud"
    stop_module: Any = guard
    """The guard the fake runs: Alibaba's own, or the copy in another cloud's folder (`of`)."""
    not_served = {"ttl": "Alibaba releases the node itself at its auto_release_time (clouds/alicloud/nodes.py): "
                         "the cloud deletes it, no stop call of goldenenv's is made"}

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.api = FakeAlibaba(fleet, faults, self.stop_module)
        self.seed = faults.seed
        self.runs = 0

    def invoke(self, path: str) -> Invocation:
        """One timer run of the guard with the month's spend over the limit and the hard stop on."""
        assert path == "hard-stop"
        self.runs += 1
        self.api.run = self.runs
        budget = self.stop_module.Budget(project=PROJECT, stack=STACK, region=REGION, monthly_limit=LIMIT, currency="CNY",
                              thresholds=(50, 100), hard_stop=True)
        clock = simulated_clock(self.stop_module.TIMEOUT_SECONDS - self.stop_module.MARGIN_SECONDS, seed=self.seed + self.runs)
        report = self.stop_module.run(budget, bill=self.api.bill, ecs=self.api.ecs, notify=self.api.notify, now=NOW,
                           clock=clock)
        return Invocation(bool(report.failed), "; ".join(report.failed))

    def running(self) -> set[str]:
        return {n for n, i in self.api.names.items() if self.api.instances[i]["Status"] in LIVE}

    def touched(self) -> set[str]:
        called = set(self.api.stop_calls)
        return {n for n, i in self.api.names.items() if i in called}

    def restart(self, name: str) -> None:
        self.api.instances[self.api.names[name]]["Status"] = "Running"

    def named(self, name: str) -> str:
        return self.api.names[name]

    def close(self) -> None:
        pass

    @classmethod
    def of(cls, cloud: str) -> type:
        """This fake running the guard of another cloud folder built on Alibaba Cloud (a copy of Alibaba's, its
        guard.py with its own tag keys and errors) on the same BSS and ECS: what that cloud's stop function calls."""
        return type(f"{cloud.title()}Adapter", (cls,),
                    {"cloud": cloud, "stop_module": cloudfolder.module(cloud, "guard")})


ADAPTER = AlibabaAdapter
"""Alibaba Cloud's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
