"""Huawei Cloud's stop function (goldenenv/clouds/huawei/stop.py) on an in-process fake of BSS and ECS, for the
fault table and the stop paths.

The fake answers in the shapes huaweicloudsdkbss and huaweicloudsdkecs 3.1.219 document: BSS
ListCustomerselfResourceRecords (GET /v2/bills/customer-bills/res-fee-records: cycle YYYY-MM in Beijing time,
offset from 0, limit; fee_records[] of resource_id, resource_tag, amount; total_count; currency), ECS
ListServersDetails (GET /v1/{project}/cloudservers/detail: `tags` matching servers whose tags contain the value,
offset a page number from 1, limit at most 1,000; servers[] of id, name, status, flavor, tags ["key=value"]; count)
and BatchStopServers (POST /v1/{project}/cloudservers/action with os-stop: at most 1,000 servers; SOFT or HARD).
BatchStopServers is asynchronous (it answers a job_id): the fake shows the server SHUTOFF from the next listing.
How `resource_tag` writes several tags is not documented: the fake writes them `key=value;key=value`. Faults come as
the function's ApiError: throttling as HTTP 429 APIGW.0308 (the fake's reading of Huawei's API gateway), every fifth
one a 500; a node the table makes unstoppable is refused at the call with 400 Ecs.0100 (the fake's code: ECS's
refusal codes for a server it cannot stop were not read).
"""

from __future__ import annotations

import urllib.parse
from datetime import datetime, timezone
from typing import Any

from goldenenv.clouds.huawei import stop
from goldenenv.clouds.huawei.tags import STACK_KEY

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

NOW = datetime(2026, 7, 31, 20, 0, tzinfo=timezone.utc)
"""Past 16:00 UTC on the last day of July: already August in Beijing, the month BSS bills in."""
BILL_MONTH = "2026-08"
LIMIT = 1000.0
LIVE = ("ACTIVE", "BUILD", "REBOOT")
ENV = {stop.LIMIT_ENV: f"{LIMIT:g}", stop.CURRENCY_ENV: "CNY", stop.HARD_STOP_ENV: "true", stop.DRY_RUN_ENV: "false",
       stop.TAG_KEY_ENV: STACK_KEY, stop.TAG_VALUE_ENV: STACK, stop.PROJECT_KEY_ENV: "project",
       stop.PROJECT_VALUE_ENV: PROJECT, stop.REGION_ENV: "cn-north-4",
       stop.ALERT_TOPIC_ENV: "urn:smn:cn-north-4:0:goldenenv-stop-alerts"}
BILL_PAGE_MAX = 1000


class FakeHuawei:
    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.faults, self.throttle = faults, Throttle(faults)
        self.servers: dict[str, dict[str, Any]] = {}
        self.names: dict[str, str] = {}
        self.polls_left: dict[str, int] = {}
        self.stop_calls: list[str] = []
        self.pending: set[str] = set()
        self.run = 0
        self.records: list[dict[str, Any]] = []
        self.currency = "CNY"
        self.bill_months: list[str] = []
        self.published: list[tuple[str, str]] = []
        """(topic urn, message) of each failure the function published."""
        for n, node in enumerate(fleet):
            server_id = f"{n:08x}-0000-4000-8000-000000000000"
            tags = ["owner=ml-infra"]
            if node.stack is not None:
                tags += [f"{STACK_KEY}={node.stack}", f"project={node.project}"]
            self.servers[server_id] = {"id": server_id, "name": node.name, "flavor": {"id": "pi2.2xlarge.4"},
                                       "status": "BUILD" if node.starting_polls else "ACTIVE", "tags": tags}
            self.names[node.name] = server_id
            self.polls_left[server_id] = node.starting_polls
            self.records.append({"resource_id": server_id, "resource_tag": ";".join(tags),
                                 "amount": 1200.0 if node.ours else 5000.0})

    def __call__(self, method: str, host: str, path: str, body: Any) -> dict[str, Any]:
        if self.throttle.now():
            if self.throttle.calls % 5 == 0:
                raise stop.ApiError(500, "SYS.0500", "internal error")
            raise stop.ApiError(429, "APIGW.0308", "the request is throttled")
        route, _, query = path.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        if host == stop.BSS_HOST and route == "/v2/bills/customer-bills/res-fee-records" and method == "GET":
            return self._bill(params)
        if host == "ecs.cn-north-4.myhuaweicloud.com" and route == "/v1/{project}/cloudservers/detail":
            return self._list(params)
        if host == "ecs.cn-north-4.myhuaweicloud.com" and route == "/v1/{project}/cloudservers/action":
            return self._stop(body)
        if host == "smn.cn-north-4.myhuaweicloud.com" and route.startswith("/v2/{project}/notifications/topics/") \
                and route.endswith("/publish") and method == "POST":
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
        refused = {self.names[n] for n in self.faults.refuse}
        if refused & set(ids):
            raise stop.ApiError(400, "Ecs.0100", "the fake's locked server cannot be stopped")
        for server_id in ids:
            if self.servers[server_id]["status"] != "ACTIVE":
                raise stop.ApiError(409, "Ecs.0100", f"{server_id} is {self.servers[server_id]['status']}")
        self.stop_calls += ids
        self.pending |= set(ids)
        return {"job_id": f"job-{len(self.stop_calls)}"}

    def settle(self) -> None:
        """Finish every accepted stop, as ECS does long before the next hourly run."""
        for server_id in self.pending:
            self.servers[server_id]["status"] = "SHUTOFF"
        self.pending.clear()


class HuaweiAdapter:
    cloud = "huawei"
    provider = "huaweicloud"
    not_served = {"ttl": "Huawei runs no time to live yet: Cloud.check refuses lifecycle.ttlHours (stop.py)"}

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.api = FakeHuawei(fleet, faults)
        self.seed, self.runs = faults.seed, 0

    def invoke(self, path: str, **env: str) -> Invocation:
        """The timer's run with the month's spend over the limit ("hard-stop"); ``env`` changes the settings."""
        assert path == "hard-stop", path
        self.runs += 1
        self.api.run = self.runs
        clock = simulated_clock(stop.TIMEOUT_SECONDS - 30, seed=self.seed + self.runs)
        try:
            stop.handler({}, None, env={**ENV, **env}, api=self.api, clock=clock, now=NOW)
        except Exception as error:  # the invocation fails: FunctionGraph counts it as an error
            return Invocation(True, str(error))
        finally:
            self.api.settle()
        return Invocation(False)

    def running(self) -> set[str]:
        return {n for n, i in self.api.names.items() if self.api.servers[i]["status"] in LIVE}

    def touched(self) -> set[str]:
        called = set(self.api.stop_calls)
        return {n for n, i in self.api.names.items() if i in called}

    def restart(self, name: str) -> None:
        self.api.servers[self.api.names[name]]["status"] = "ACTIVE"

    def named(self, name: str) -> str:
        return self.api.names[name]

    def close(self) -> None:
        pass


ADAPTER = HuaweiAdapter
"""Huawei Cloud's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
