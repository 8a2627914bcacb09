"""Huawei Cloud's stop function (goldenenv/clouds/huawei/stop.py) on an in-process fake of BSS, ECS, Cloud Eye,
ModelArts and SMN, for the fault table and the stop paths.

The fake answers in the shapes huaweicloudsdkbss, huaweicloudsdkecs and huaweicloudsdkmodelarts 3.1.219 document:
- BSS ListCustomerselfResourceRecords (GET /v2/bills/customer-bills/res-fee-records: cycle YYYY-MM in Beijing time,
  offset from 0, limit; fee_records[] of resource_id, resource_tag, amount; total_count; currency);
- ECS ListServersDetails (GET /v1/{project}/cloudservers/detail: `tags` matching servers whose tags contain the
  value, offset a page number from 1, limit at most 1,000; servers[] of id, name, status, created
  ("2019-05-22T03:19:19Z" form), flavor {id, vcpus as text}, tags ["key=value"]; count) and BatchStopServers
  (POST /v1/{project}/cloudservers/action with os-stop: at most 1,000 servers; SOFT or HARD). BatchStopServers is
  asynchronous (it answers a job_id): the fake shows the server SHUTOFF from the next listing;
- Cloud Eye ShowMetricData (GET /V1.0/{project}/metric-data: namespace, metric_name, dim.0=key,value, from and to
  in ms with from before to, period 1/300/1200/3600/14400/86400, filter average/max/min/sum/variance:
  https://support.huaweicloud.com/intl/en-us/api-ces/ces_03_0033.html); its datapoints[] of average and timestamp
  are the fake's reading (the response section was not read); a server with no data gets none;
- ModelArts ListDevServers (GET /v1/{project}/dev-servers: limit 0 to 1024, offset counting records; data[] of
  ServerResponse id, name, status, create_at; total) and BatchDevServersAction (POST /v1/{project}/dev-servers/
  action, {"type": "STOP", "servers": [{"id"}]}). The batch is accepted and each server goes STOPPING; the listing
  after the one that first shows it so finds it STOPPED, or STOP_FAILED for a server the fault table makes
  unstoppable (the fake's reading: how ModelArts reports a failed stop beyond the status STOP_FAILED is
  unverified). A batch naming a server that is not RUNNING or STOP_FAILED is refused whole (the fake's reading);
- SMN PublishMessage (POST /v2/{project}/notifications/topics/<urn>/publish).

Every call is checked against the stop function's own policy (goldenenv/clouds/huawei/privilege.py stop_policy, as
the stack grants it): an action the policy does not allow is refused with 403, and a stop of an ECS server that
lacks the policy's tag condition too. Faults come as the function's ApiError: throttling as HTTP 429 APIGW.0308
(the fake's reading of Huawei's API gateway), every fifth one a 500; a node the table makes unstoppable is refused
at the ECS call with 400 Ecs.0100 (the fake's code), or fails its stop as above on ModelArts.

Which fleet node is what: a node whose catalog type is a Lite Server's (liteservers.is_lite_server) is one
(``typed``); otherwise every second node is a Lite Server named `goldenenv-<stack>-pool-<n>` (its stack's name
prefix; the untagged decoy's has none), the rest ECS servers. Each (stack, project) has its own VPC, which its ECS
servers' metadata.vpc_id and its DevServers' vpc_id name, and a Slurm head (an ECS server with the stack's tags,
not a fleet node): so another project's same-named stack's Lite Server shares the prefix but not the VPC.
"""

from __future__ import annotations

import fnmatch
import json
import urllib.parse
from datetime import datetime, timedelta, timezone
from typing import Any

from goldenenv import catalog
from goldenenv.clouds.huawei import privilege, stop, stop_lite
from goldenenv.clouds.huawei.tags import STACK_KEY

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

NOW = datetime(2026, 7, 31, 20, 0, tzinfo=timezone.utc)
"""Past 16:00 UTC on the last day of July: already August in Beijing, the month BSS bills in."""
CREATED = NOW - timedelta(hours=30)
"""Every fleet node was created 30 h ago: past the 24 h time to live the ttl path runs with."""
BILL_MONTH = "2026-08"
LIMIT = 1000.0
TTL_HOURS, IDLE_MINUTES = 24, 30
LIVE = ("ACTIVE", "BUILD", "REBOOT")
LITE_LIVE = ("RUNNING", "CREATING", "STARTING", "STOP_FAILED", "ERROR")
REGION = "cn-north-4"
TOPIC = "urn:smn:cn-north-4:0:goldenenv-stop-alerts"
ENV = {stop.LIMIT_ENV: f"{LIMIT:g}", stop.CURRENCY_ENV: "CNY", stop.HARD_STOP_ENV: "true", stop.DRY_RUN_ENV: "false",
       stop.TAG_KEY_ENV: STACK_KEY, stop.TAG_VALUE_ENV: STACK, stop.PROJECT_KEY_ENV: "project",
       stop.PROJECT_VALUE_ENV: PROJECT, stop.REGION_ENV: REGION, stop.ALERT_TOPIC_ENV: TOPIC,
       stop.DEVSERVER_PREFIX_ENV: stop_lite.prefix(STACK)}
PATHS = {"hard-stop": {},
         "ttl": {stop.HARD_STOP_ENV: "false", stop.TTL_HOURS_ENV: str(TTL_HOURS)},
         "idle": {stop.HARD_STOP_ENV: "false", stop.IDLE_MINUTES_ENV: str(IDLE_MINUTES)}}
"""The settings each path runs with, over ENV (ttl and idle: the hard stop off, the month's spend over the limit)."""
BILL_PAGE_MAX = 1000
PERIODS, FILTERS = (1, 300, 1200, 3600, 14400, 86400), ("average", "max", "min", "sum", "variance")
ECS_HOST, CES_HOST, SMN_HOST = (f"{s}.{REGION}.myhuaweicloud.com" for s in ("ecs", "ces", "smn"))


def vpc_of(stack: str | None, project: str) -> str:
    """Each stack's own VPC (the untagged decoy sits in the account's default one)."""
    return f"vpc-{stack}-{project}" if stack is not None else "vpc-default"


def allowed(policy: str) -> list[tuple[str, dict[str, Any]]]:
    """(action pattern, condition) of every Allow statement of a policy document."""
    return [(a, s.get("Condition") or {}) for s in json.loads(policy)["Statement"] if s.get("Effect") == "Allow"
            for a in s.get("Action") or []]


class FakeHuawei:
    def __init__(self, fleet: list[FleetNode], faults: Faults, lite: set[str] | None = None):
        self.faults, self.throttle = faults, Throttle(faults)
        self.servers: dict[str, dict[str, Any]] = {}
        self.devservers: dict[str, dict[str, Any]] = {}
        self.names: dict[str, str] = {}
        self.polls_left: dict[str, int] = {}
        self.stop_calls: list[str] = []
        self.pending: set[str] = set()
        self.operating: dict[str, int] = {}
        """DevServer id -> listings left before its accepted stop finishes."""
        self.run = 0
        self.records: list[dict[str, Any]] = []
        self.currency = "CNY"
        self.bill_months: list[str] = []
        self.cpu: dict[str, list[float]] = {}
        """Server id -> its 5-minute mean cpu_util points, oldest first (none: no data)."""
        self.metric_refused = False
        self.policy = privilege.stop_policy(STACK_KEY, STACK, "goldenenv-stop-alerts")
        self.refused_calls: list[str] = []
        self.published: list[tuple[str, str]] = []
        """(topic urn, message) of each failure the function published."""
        lite = lite if lite is not None else {n.name for k, n in enumerate(fleet) if k % 2 == 1}
        for k, (stack, project) in enumerate(dict.fromkeys((n.stack, n.project) for n in fleet if n.stack)):
            self._ecs(f"head-{k:06x}-0000-4000-a000-000000000000", f"{stack}-head", stack, project, 0)
        for n, node in enumerate(fleet):
            tags = ["owner=ml-infra"] + ([f"{STACK_KEY}={node.stack}", f"project={node.project}"]
                                         if node.stack is not None else [])
            if node.name in lite:
                server_id = f"{n:08x}-0000-4000-9000-000000000000"
                name = f"goldenenv-{node.stack}-pool-{n}" if node.stack is not None else f"notebook-{n}"
                self.devservers[server_id] = {"id": server_id, "name": name, "flavor": "ascend-snt9b",
                                              "status": "CREATING" if node.starting_polls else "RUNNING",
                                              "create_at": int(CREATED.timestamp() * 1000),
                                              "vpc_id": vpc_of(node.stack, node.project)}
            else:
                server_id = f"{n:08x}-0000-4000-8000-000000000000"
                self._ecs(server_id, node.name, node.stack, node.project, node.starting_polls)
            self.names[node.name] = server_id
            self.polls_left[server_id] = node.starting_polls
            self.records.append({"resource_id": server_id, "resource_tag": ";".join(tags),
                                 "amount": 1200.0 if node.ours else 5000.0})

    def _ecs(self, server_id: str, name: str, stack: str | None, project: str, starting_polls: int) -> None:
        tags = ["owner=ml-infra"] + ([f"{STACK_KEY}={stack}", f"project={project}"] if stack is not None else [])
        self.servers[server_id] = {"id": server_id, "name": name, "flavor": {"id": "pi2.2xlarge.4", "vcpus": "8"},
                                   "status": "BUILD" if starting_polls else "ACTIVE", "tags": tags,
                                   "created": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                   "metadata": {"vpc_id": vpc_of(stack, project), "charging_mode": "0"}}

    def grant(self, idle: bool) -> None:
        """The policy the stack gives the function: with the idle stop, Cloud Eye's read too."""
        self.policy = privilege.stop_policy(STACK_KEY, STACK, "goldenenv-stop-alerts", idle=idle)

    def _granted(self, action: str, tags: list[str] | None = None) -> None:
        for pattern, condition in allowed(self.policy):
            if not fnmatch.fnmatch(action, pattern):
                continue
            wanted = {f"{k.split('/', 1)[1]}={v}" for k, values in (condition.get("StringEquals") or {}).items()
                      if k.startswith("g:ResourceTag/") for v in values}
            if tags is None or wanted <= set(tags):
                return
        self.refused_calls.append(action)
        raise stop.ApiError(403, "APIGW.0302", f"the agency's policy does not allow {action} (the fake's code)")

    def __call__(self, method: str, host: str, path: str, body: Any) -> dict[str, Any]:
        if self.throttle.now():
            if self.throttle.calls % 5 == 0:
                raise stop.ApiError(500, "SYS.0500", "internal error")
            raise stop.ApiError(429, "APIGW.0308", "the request is throttled")
        route, _, query = path.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        if host == stop.BSS_HOST and route == "/v2/bills/customer-bills/res-fee-records" and method == "GET":
            self._granted("bss:bill:view")
            return self._bill(params)
        if host == ECS_HOST and route == "/v1/{project}/cloudservers/detail" and method == "GET":
            self._granted("ecs:cloudServers:listServersDetails")
            return self._list(params)
        if host == ECS_HOST and route == "/v1/{project}/cloudservers/action" and method == "POST":
            return self._stop(body)
        if host == CES_HOST and route == "/V1.0/{project}/metric-data" and method == "GET":
            self._granted("ces:metricData:list")
            return self._metric(params)
        if host == stop_lite.host(REGION) and route == "/v1/{project}/dev-servers" and method == "GET":
            self._granted("modelarts:devserver:list")
            return self._list_lite(params)
        if host == stop_lite.host(REGION) and route == "/v1/{project}/dev-servers/action" and method == "POST":
            self._granted("modelarts:devserver:stop")
            return self._stop_lite(body)
        if host == SMN_HOST and route.startswith("/v2/{project}/notifications/topics/") \
                and route.endswith("/publish") and method == "POST":
            self._granted("smn:topic:publish")
            self.published.append((route.split("/")[5], body["message"]))
            return {"message_id": f"m-{len(self.published)}"}
        raise AssertionError(f"unexpected call {method} {host}{path}")

    def _bill(self, params: dict[str, str]) -> dict[str, Any]:
        self.bill_months.append(params["cycle"])
        limit = int(params.get("limit", 10))
        if not 1 <= limit <= BILL_PAGE_MAX:
            raise stop.ApiError(400, "CBC.0100", "limit out of range")
        size = min(limit, self.faults.page_size or limit)
        start = int(params.get("offset", 0))
        return {"fee_records": self.records[start:start + size], "total_count": len(self.records),
                "currency": self.currency}

    def _list(self, params: dict[str, str]) -> dict[str, Any]:
        limit = int(params.get("limit", 25))
        if not 1 <= limit <= 1000:
            raise stop.ApiError(400, "Ecs.0005", "limit 1 to 1000")
        size = min(limit, self.faults.page_size or limit)
        number = max(1, int(params.get("offset", 1)))
        wanted = params.get("tags", "")
        matching = [s for s in self.servers.values() if any(wanted in t for t in s["tags"])]
        if self.run == 1 and self.faults.lost_page and number == self.faults.lost_page:
            raise stop.ApiError(500, "SYS.0500", "internal error")
        page = matching[(number - 1) * size:number * size]
        for server in page:
            if server["status"] == "BUILD":
                self.polls_left[server["id"]] -= 1
                if self.polls_left[server["id"]] <= 0:
                    server["status"] = "ACTIVE"
            if server["id"] in self.pending:
                self.pending.discard(server["id"])
                server["status"] = "SHUTOFF"
        return {"servers": [dict(s, tags=list(s["tags"])) for s in page], "count": len(matching)}

    def _stop(self, body: dict[str, Any]) -> dict[str, Any]:
        order = body.get("os-stop") or {}
        ids = [s["id"] for s in order.get("servers") or []]
        if not 1 <= len(ids) <= 1000 or order.get("type") not in ("SOFT", "HARD"):
            raise stop.ApiError(400, "Ecs.0005", "1 to 1000 servers, type SOFT or HARD")
        for server_id in ids:
            self._granted("ecs:cloudServers:stop", self.servers[server_id]["tags"])
        refused = {self.names[n] for n in self.faults.refuse}
        if refused & set(ids):
            raise stop.ApiError(400, "Ecs.0100", "the fake's locked server cannot be stopped")
        for server_id in ids:
            if self.servers[server_id]["status"] != "ACTIVE":
                raise stop.ApiError(409, "Ecs.0100", f"{server_id} is {self.servers[server_id]['status']}")
        self.stop_calls += ids
        self.pending |= set(ids)
        return {"job_id": f"job-{len(self.stop_calls)}"}

    def _metric(self, params: dict[str, str]) -> dict[str, Any]:
        key, _, server_id = params.get("dim.0", "").partition(",")
        start, end = int(params.get("from", 0)), int(params.get("to", 0))
        if (params.get("namespace"), params.get("metric_name"), key) != ("SYS.ECS", "cpu_util", "instance_id") \
                or int(params.get("period", 0)) not in PERIODS or params.get("filter") not in FILTERS \
                or not 0 < start < end:
            raise stop.ApiError(400, "ces.0014", "namespace, metric_name, dim.0, from < to (ms), period, filter")
        if self.metric_refused:
            raise stop.ApiError(400, "ces.0050", "the fake's metric cannot be read")
        period = int(params["period"]) * 1000
        values = self.cpu.get(server_id, [])
        return {"metric_name": "cpu_util", "datapoints": [
            {"average": v, "timestamp": end - period * (len(values) - k), "unit": "%"} for k, v in enumerate(values)]}

    def _list_lite(self, params: dict[str, str]) -> dict[str, Any]:
        limit = int(params.get("limit", 10))
        if not 0 <= limit <= 1024:
            raise stop.ApiError(400, "ModelArts.0101", "limit 0 to 1024 (the fake's code)")
        size = min(limit, self.faults.page_size or limit)
        start = int(params.get("offset", 0))
        everyone = list(self.devservers.values())
        page = everyone[start:start + size]
        for server in page:
            if server["status"] == "CREATING":
                self.polls_left[server["id"]] -= 1
                if self.polls_left[server["id"]] <= 0:
                    server["status"] = "RUNNING"
        for server in page:
            if self.operating.get(server["id"]) == 0:
                self._finish(server["id"])
        shown = [dict(s) for s in page]
        for server in page:
            if server["id"] in self.operating:
                self.operating[server["id"]] -= 1
        return {"data": shown, "total": len(everyone), "current": start // max(size, 1) + 1, "size": size,
                "pages": -(-len(everyone) // max(size, 1))}

    def _stop_lite(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = [s.get("id") for s in body.get("servers") or []]
        if body.get("type") != "STOP" or not ids or any(i not in self.devservers for i in ids):
            raise stop.ApiError(400, "ModelArts.0101", "type STOP and existing servers (the fake's code)")
        for server_id in ids:
            if self.devservers[server_id]["status"] not in ("RUNNING", "STOP_FAILED"):
                raise stop.ApiError(400, "ModelArts.6510", f"{server_id} is {self.devservers[server_id]['status']}"
                                    " (the fake's code)")
        self.stop_calls += ids
        for server_id in ids:
            self.devservers[server_id]["status"] = "STOPPING"
            self.operating[server_id] = 1
        return {"data": [dict(self.devservers[i]) for i in ids], "total": len(ids)}

    def _finish(self, server_id: str) -> None:
        """The accepted stop's outcome: STOPPED, or STOP_FAILED for a server the fault table refuses."""
        del self.operating[server_id]
        refused = {self.names[n] for n in self.faults.refuse}
        self.devservers[server_id]["status"] = "STOP_FAILED" if server_id in refused else "STOPPED"

    def settle(self) -> None:
        """Finish every accepted stop, as ECS and ModelArts do long before the next hourly run."""
        for server_id in self.pending:
            self.servers[server_id]["status"] = "SHUTOFF"
        self.pending.clear()
        for server_id in list(self.operating):
            self._finish(server_id)

    def status(self, name: str) -> str:
        server_id = self.names[name]
        return (self.servers.get(server_id) or self.devservers[server_id])["status"]


class HuaweiAdapter:
    cloud = "huawei"
    provider = "huaweicloud"
    not_served: dict[str, str] = {}

    def __init__(self, fleet: list[FleetNode], faults: Faults, lite: set[str] | None = None):
        self.api = FakeHuawei(fleet, faults, lite)
        self.seed, self.runs = faults.seed, 0

    @classmethod
    def typed(cls, types: list[str]) -> tuple[HuaweiAdapter, dict[str, str]]:
        """One node of the stack per catalog type (node-<k>), a Lite Server where the type is one; and each node's
        type by its name."""
        from goldenenv.clouds.huawei.liteservers import is_lite_server  # the Lite Server pools' own rule

        names = {f"node-{k}": t for k, t in enumerate(types)}
        world = cls([FleetNode(n) for n in names], Faults(), {n for n, t in names.items() if is_lite_server(t)})
        for name, instance_type in names.items():
            server = world.api.servers.get(world.api.names[name])
            if server is not None:
                server["flavor"] = {"id": instance_type, "vcpus": str(catalog.instance_type("huawei",
                                                                                           instance_type).vcpus)}
            else:
                world.api.devservers[world.api.names[name]]["flavor"] = instance_type
        return world, names

    def invoke(self, path: str, **env: str) -> Invocation:
        """The timer's run with the month's spend over the limit ("hard-stop"), or with the hard stop off and a
        24 h time to live ("ttl") or a 30-minute idle time ("idle"); ``env`` changes the settings besides."""
        self.runs += 1
        self.api.run = self.runs
        settings = {**ENV, **PATHS[path], **env}
        self.api.grant(idle=bool(settings.get(stop.IDLE_MINUTES_ENV)))
        clock = simulated_clock(stop.TIMEOUT_SECONDS - 30, seed=self.seed + self.runs)
        try:
            stop.handler({}, None, env=settings, api=self.api, clock=clock, now=NOW)
        except Exception as error:  # the invocation fails: FunctionGraph counts it as an error
            return Invocation(True, str(error))
        finally:
            self.api.settle()
        return Invocation(False)

    def running(self) -> set[str]:
        return {n for n in self.api.names if self.api.status(n) in LIVE + LITE_LIVE}

    def touched(self) -> set[str]:
        called = set(self.api.stop_calls)
        return {n for n, i in self.api.names.items() if i in called}

    def restart(self, name: str) -> None:
        server_id = self.api.names[name]
        if server_id in self.api.servers:
            self.api.servers[server_id]["status"] = "ACTIVE"
        else:
            self.api.devservers[server_id]["status"] = "RUNNING"

    def named(self, name: str) -> str:
        return self.api.names[name]

    def close(self) -> None:
        pass


ADAPTER = HuaweiAdapter
"""Huawei Cloud's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
