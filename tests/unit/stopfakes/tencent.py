"""Tencent Cloud's stop function (goldenenv/clouds/tencent/stop.py) on an in-process fake of billing and CVM, for
the fault table.

The fake answers in the shapes of the API v3 JSON (the Response object): DescribeBillSummaryByTag with Ready and
SummaryOverview[] (TagValue, RealTotalCost as a string in yuan), DescribeInstances with TotalCount and
InstanceSet[] (InstanceId, InstanceState, CPU, CreatedTime in ISO 8601 UTC, Tags[] of Key/Value), filtered on
tag:<key> Filters, Offset and Limit (at most 100), or by InstanceIds (never both, as the API takes one or the
other), GetMonitorData (QCE/CVM BaseCpuUsage, at most 10 instances a call, a period of 10, 60, 300, 3600 or 86400 s,
times with their offset; DataPoints[] of Dimensions, Timestamps and Values, a node with no data answered with empty
ones: https://tencentcloud.com/document/api/248/33881), StopInstances with at most 100
InstanceIds. StopInstances is asynchronous, as Tencent documents it ("This API is async... The result of the
instance operation can be queried by calling the DescribeInstances API. If the latest operation status
(LatestOperationState) of the instance is SUCCESS, the operation is successful":
https://www.tencentcloud.com/document/product/1103/42487 and the CvmClient.StopInstances docstring of
tencentcloud-sdk-python-cvm 3.1.178): the call accepts the batch and each instance goes STOPPING with LatestOperation
StopInstances and LatestOperationState OPERATING (Instance.LatestOperationState: SUCCESS, OPERATING, FAILED); the
DescribeInstances after the one that first shows it so finds it STOPPED + SUCCESS, or, for a node the fault table
makes unstoppable, RUNNING again + FAILED with a LatestOperationErrorMsg. Every operation the fake accepted is
finished before the next timer run. The refusals Tencent makes at the call stay synchronous and refuse the batch
whole (the fake's reading; the real API's batch semantics are unverified): a node still starting with
UnsupportedOperation.InstanceStatePending, one stopping or stopped with UnsupportedOperation.InstanceStateStopping /
InstanceStateStopped (tencentcloud-sdk-python-cvm errorcodes.py). Faults come as the function's ApiError: throttling
as RequestLimitExceeded, every fifth one InternalError (Tencent's common error codes).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from goldenenv.clouds.tencent import stop
from goldenenv.clouds.tencent.tags import PROJECT_KEY
from goldenenv.spec import STACK_TAG_KEY

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
CREATED = NOW - timedelta(hours=30)
"""Every fleet node was created 30 h ago: past the 24 h time to live the ttl path runs with."""
TTL_HOURS, IDLE_MINUTES = 24, 30
LIMIT = 1000.0
LIVE = ("PENDING", "RUNNING", "STARTING")
ENV = {stop.LIMIT_ENV: f"{LIMIT:g}", stop.CURRENCY_ENV: "CNY", stop.HARD_STOP_ENV: "true", stop.DRY_RUN_ENV: "false",
       stop.TAG_KEY_ENV: STACK_TAG_KEY, stop.TAG_VALUE_ENV: STACK, stop.PROJECT_KEY_ENV: PROJECT_KEY,
       stop.PROJECT_VALUE_ENV: PROJECT, stop.REGION_ENV: "ap-guangzhou"}

PATHS = {"hard-stop": {},
         "ttl": {stop.HARD_STOP_ENV: "false", stop.TTL_HOURS_ENV: str(TTL_HOURS)},
         "idle": {stop.HARD_STOP_ENV: "false", stop.IDLE_MINUTES_ENV: str(IDLE_MINUTES)}}
"""The settings each path runs with, over ENV."""


class FakeTencent:
    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.faults, self.throttle = faults, Throttle(faults)
        self.instances: dict[str, dict[str, Any]] = {}
        self.names: dict[str, str] = {}
        self.polls_left: dict[str, int] = {}
        self.stop_calls: list[str] = []
        self.cpu: dict[str, list[float]] = {}
        """Instance id -> its 5-minute mean BaseCpuUsage points, oldest first (none: no data)."""
        self.monitor_refuses = False
        """GetMonitorData answers an error that is not throttling (the metric cannot be read)."""
        self.run = 0
        self.stop_looks = 1
        """How many DescribeInstances show an accepted stop still OPERATING before it finishes."""
        self.operating: dict[str, int] = {}
        """Instance id -> looks left before its accepted stop finishes."""
        for n, node in enumerate(fleet):
            instance_id = f"ins-{n:08x}"
            tags = [{"Key": "owner", "Value": "ml-infra"}]
            if node.stack is not None:
                tags += [{"Key": STACK_TAG_KEY, "Value": node.stack}, {"Key": PROJECT_KEY, "Value": node.project}]
            self.instances[instance_id] = {"InstanceId": instance_id, "InstanceType": "HCCPNV4ane.58XLARGE1929",
                                           "InstanceState": "PENDING" if node.starting_polls else "RUNNING",
                                           "CPU": 232, "CreatedTime": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                           "Tags": tags, "LatestOperation": "RunInstances",
                                           "LatestOperationState": "OPERATING" if node.starting_polls else "SUCCESS"}
            self.names[node.name] = instance_id
            self.polls_left[instance_id] = node.starting_polls

    def __call__(self, service: str, version: str, action: str, params: dict[str, Any]) -> dict[str, Any]:
        if self.throttle.now():
            if self.throttle.calls % 5 == 0:
                raise stop.ApiError("InternalError", "internal error")
            raise stop.ApiError("RequestLimitExceeded", "request limit exceeded")
        if action == "DescribeBillSummaryByTag":
            assert params["TagKey"] == STACK_TAG_KEY and params["TagValue"] == STACK
            return {"Ready": 1, "SummaryOverview": [{"TagValue": STACK, "RealTotalCost": "1200.00"}]}
        if action == "DescribeInstances":
            return self._describe(params)
        if action == "StopInstances":
            return self._stop(params)
        if action == "GetMonitorData":
            return self._monitor(params)
        raise AssertionError(f"unexpected call {action}")

    def _describe(self, params: dict[str, Any]) -> dict[str, Any]:
        limit = int(params.get("Limit", 20))
        if not 1 <= limit <= 100 or ("InstanceIds" in params and "Filters" in params):
            raise stop.ApiError("InvalidParameter", "Limit 1 to 100; InstanceIds or Filters")
        size = min(limit, self.faults.page_size or limit)
        if "InstanceIds" in params:
            matching = [self.instances[i] for i in params["InstanceIds"] if i in self.instances]
        else:
            wanted = {f["Name"].removeprefix("tag:"): f["Values"][0] for f in params["Filters"]}
            matching = [i for i in self.instances.values()
                        if all({t["Key"]: t["Value"] for t in i["Tags"]}.get(k) == v for k, v in wanted.items())]
        start = int(params.get("Offset") or 0)
        if self.run == 1 and self.faults.lost_page and "Filters" in params \
                and start == (self.faults.lost_page - 1) * size:
            raise stop.ApiError("InternalError", "internal error")
        page = matching[start:start + size]
        for instance in page:
            if instance["InstanceState"] == "PENDING":
                self.polls_left[instance["InstanceId"]] -= 1
                if self.polls_left[instance["InstanceId"]] <= 0:
                    instance.update(InstanceState="RUNNING", LatestOperationState="SUCCESS")
        for instance in page:
            if self.operating.get(instance["InstanceId"]) == 0:
                self._finish(instance["InstanceId"])
        shown = [json.loads(json.dumps(i)) for i in page]
        for instance in page:
            if instance["InstanceId"] in self.operating:
                self.operating[instance["InstanceId"]] -= 1
        return {"TotalCount": len(matching), "InstanceSet": shown}

    def _finish(self, instance_id: str) -> None:
        """The accepted stop's outcome: STOPPED + SUCCESS, or RUNNING + FAILED for a node the table refuses."""
        del self.operating[instance_id]
        instance = self.instances[instance_id]
        if instance_id in {self.names[n] for n in self.faults.refuse}:
            instance.update(InstanceState="RUNNING", LatestOperationState="FAILED",
                            LatestOperationErrorMsg="the fake's locked instance could not be shut down")
        else:
            instance.update(InstanceState="STOPPED", LatestOperationState="SUCCESS")
            instance.pop("LatestOperationErrorMsg", None)

    def settle(self) -> None:
        """Finish every accepted stop, as Tencent does long before the next hourly run."""
        for instance_id in list(self.operating):
            self._finish(instance_id)

    def _monitor(self, params: dict[str, Any]) -> dict[str, Any]:
        if (params.get("Namespace"), params.get("MetricName")) != ("QCE/CVM", "BaseCpuUsage") \
                or params.get("Period") not in (10, 60, 300, 3600, 86400) or not 1 <= len(params["Instances"]) <= 10:
            raise stop.ApiError("InvalidParameter", "QCE/CVM BaseCpuUsage, a supported period, 1 to 10 instances")
        start, end = (datetime.fromisoformat(params[k]) for k in ("StartTime", "EndTime"))
        if start.tzinfo is None or end.tzinfo is None or end < start:
            raise stop.ApiError("InvalidParameter.TimeFormat", "times with their offset, EndTime after StartTime")
        if self.monitor_refuses:
            raise stop.ApiError("FailedOperation.FakeDataQuery", "the metric cannot be read")
        points = []
        for instance in params["Instances"]:
            (dimension,) = instance["Dimensions"]
            values = self.cpu.get(dimension["Value"], [])
            stamps = [int(end.timestamp()) - params["Period"] * (len(values) - k) for k in range(len(values))]
            points.append({"Dimensions": [dimension], "Timestamps": stamps, "Values": values})
        return {"MetricName": params["MetricName"], "Period": params["Period"], "DataPoints": points}

    def _stop(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = params["InstanceIds"]
        if not 1 <= len(ids) <= 100 or params.get("StoppedMode") != "STOP_CHARGING":
            raise stop.ApiError("InvalidParameter", "1 to 100 ids, STOP_CHARGING")
        self.stop_calls += ids
        for instance_id in ids:
            state = self.instances[instance_id]["InstanceState"]
            if state != "RUNNING":
                raise stop.ApiError("UnsupportedOperation.InstanceState" + state.title().replace("_", ""),
                                    f"{instance_id} is {state}, not RUNNING")
        for instance_id in ids:
            self.instances[instance_id].update(InstanceState="STOPPING", LatestOperation="StopInstances",
                                               LatestOperationState="OPERATING")
            self.operating[instance_id] = self.stop_looks
        return {"RequestId": "stop"}


class TencentAdapter:
    cloud = "tencent"
    provider = "tencentcloud"
    not_served: dict[str, str] = {}

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.api = FakeTencent(fleet, faults)
        self.seed, self.runs = faults.seed, 0

    def invoke(self, path: str, **env: str) -> Invocation:
        """The timer's run with the budget over its limit ("hard-stop"), or with the hard stop off and a 24 h time
        to live ("ttl") or a 30-minute idle time ("idle"); ``env`` changes the function's settings besides."""
        self.runs += 1
        self.api.run = self.runs
        clock = simulated_clock(stop.TIMEOUT_SECONDS - 30, seed=self.seed + self.runs)
        settings = {**ENV, **PATHS[path], **env}
        try:
            stop.handler({}, None, env=settings, api=self.api, clock=clock, now=NOW)
        except Exception as error:  # the invocation fails: SCF retries or counts it as an error
            return Invocation(True, str(error))
        finally:
            self.api.settle()
        return Invocation(False)

    def running(self) -> set[str]:
        return {n for n, i in self.api.names.items() if self.api.instances[i]["InstanceState"] in LIVE}

    def touched(self) -> set[str]:
        called = set(self.api.stop_calls)
        return {n for n, i in self.api.names.items() if i in called}

    def restart(self, name: str) -> None:
        self.api.instances[self.api.names[name]].update(InstanceState="RUNNING", LatestOperation="StartInstances",
                                                        LatestOperationState="SUCCESS")

    def named(self, name: str) -> str:
        return self.api.names[name]

    def close(self) -> None:
        pass


ADAPTER = TencentAdapter
"""Tencent Cloud's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
