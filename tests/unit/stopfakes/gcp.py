"""Google Cloud's stop function (goldenenv/clouds/gcp/stopfn/main.py) on an in-process fake of the metadata server
and Compute Engine v1, for the fault table.

The fake answers in Compute Engine's shapes: instances.aggregatedList by zone with nextPageToken and the label
filter the function sends; instances.stop returning a zonal operation; a rate quota as 403 rateLimitExceeded
(https://cloud.google.com/compute/api-quota) or 429 RESOURCE_EXHAUSTED; a VM still PROVISIONING refused as
400 resourceNotReady until it runs. Errors go through the function's own error reading (stopfn.http_error).
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from datetime import datetime, timedelta, timezone
from typing import Any

from goldenenv.clouds.gcp.stopfn import main as stopfn

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

GCP_PROJECT = "acme-train-1"
NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
ZONES = ("us-central1-a", "us-central1-b")
LIVE = ("RUNNING", "PROVISIONING", "STAGING")


def _error(code: int, status: str, message: str, reason: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "status": status,
                                 "errors": [{"message": message, "domain": "global", "reason": reason}]}}).encode()


RATE_LIMITED = _error(403, "PERMISSION_DENIED", "Rate Limit Exceeded", "rateLimitExceeded")
RESOURCE_EXHAUSTED = _error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Queries' and limit "
                                                       "'Queries per minute' of service 'compute.googleapis.com'",
                            "rateLimitExceeded")


class FakeCompute(stopfn.Google):
    """The metadata server and Compute Engine, in process: ``_request`` answers as the APIs do over HTTP."""

    def __init__(self, fleet: list[FleetNode], faults: Faults, env: dict[str, str]):
        super().__init__(env)
        self.faults = faults
        self.throttle = Throttle(faults)
        self.instances: dict[str, dict[str, Any]] = {}
        self.polls_left: dict[str, int] = {}
        self.stop_calls: list[str] = []
        self.run = 0
        """The adapter's invocation count."""
        for n, node in enumerate(fleet):
            labels = {"owner": "ml-infra"}
            if node.stack is not None:
                labels |= {stopfn.STACK_LABEL_KEY: node.stack, stopfn.PROJECT_LABEL_KEY: node.project}
            zone = ZONES[n % len(ZONES)]
            link = f"https://www.googleapis.com/compute/v1/projects/{GCP_PROJECT}/zones/{zone}"
            self.instances[node.name] = {
                "kind": "compute#instance", "id": str(1000 + n), "name": node.name, "zone": link,
                "status": "PROVISIONING" if node.starting_polls else "RUNNING",
                "machineType": f"{link}/machineTypes/a3-highgpu-8g", "labels": labels,
                "creationTimestamp": (NOW - timedelta(hours=40)).isoformat(),
                "lastStartTimestamp": (NOW - timedelta(hours=30)).isoformat(),
            }
            self.polls_left[node.name] = node.starting_polls

    def _request(self, method: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
        if self.throttle.now():
            raise stopfn.http_error(method, url, *((403, RATE_LIMITED) if self.throttle.calls % 3 else
                                                   (429, RESOURCE_EXHAUSTED)))
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        path = parts.path
        if path.endswith("/instance/service-accounts/default/token"):
            return {"access_token": "ya29.fake", "expires_in": 3599, "token_type": "Bearer"}
        if method == "GET" and path.endswith(f"/projects/{GCP_PROJECT}/aggregated/instances"):
            return self.aggregated(query)
        found = re.search(r"/zones/([^/]+)/instances/([^/]+)/stop$", path)
        if method == "POST" and found:
            return self.stop(method, url, found.group(1), urllib.parse.unquote(found.group(2)), query)
        raise stopfn.http_error(method, url, 404, _error(404, "NOT_FOUND", f"The resource '{path}' was not found",
                                                         "notFound"))

    def aggregated(self, query: dict[str, str]) -> dict[str, Any]:
        wanted = dict(re.findall(r'labels\.(\w+) = "([^"]*)"', query.get("filter", "")))
        matching = [i for i in self.instances.values()
                    if all(i["labels"].get(k) == v for k, v in wanted.items())]
        size = min(int(query.get("maxResults", "500")), self.faults.page_size or 500)
        start = int(query.get("pageToken") or 0)
        if self.run == 1 and self.faults.lost_page and start == (self.faults.lost_page - 1) * size:
            raise stopfn.http_error("GET", "aggregated/instances", 503, _error(
                503, "UNAVAILABLE", "The service is currently unavailable.", "backendError"))
        page = matching[start:start + size]
        for instance in page:
            self.shown(instance["name"])
        items: dict[str, Any] = {}
        for instance in page:
            items.setdefault(f"zones/{instance['zone'].rsplit('/', 1)[1]}", {"instances": []})["instances"].append(
                json.loads(json.dumps(instance)))
        answer: dict[str, Any] = {"kind": "compute#instanceAggregatedList", "items": items}
        if start + size < len(matching):
            answer["nextPageToken"] = str(start + size)
        return answer

    def shown(self, name: str) -> None:
        """A starting VM runs once it has been seen starting_polls times."""
        if self.instances[name]["status"] == "PROVISIONING":
            self.polls_left[name] -= 1
            if self.polls_left[name] <= 0:
                self.instances[name]["status"] = "RUNNING"
                self.instances[name]["lastStartTimestamp"] = NOW.isoformat()

    def stop(self, method: str, url: str, zone: str, name: str, query: dict[str, str]) -> dict[str, Any]:
        instance = self.instances.get(name)
        if instance is None or not instance["zone"].endswith(f"/zones/{zone}"):
            raise stopfn.http_error(method, url, 404, _error(404, "NOT_FOUND", f"The resource "
                                    f"'projects/{GCP_PROJECT}/zones/{zone}/instances/{name}' was not found",
                                                             "notFound"))
        self.stop_calls.append(name)
        if query.get(stopfn.DISCARD_LOCAL_SSD) != "true":
            raise stopfn.http_error(method, url, 400, _error(400, "INVALID_ARGUMENT", "VM has a Local SSD attached "
                                    "but an undefined value for `discard-local-ssd`.", "badRequest"))
        if name in self.faults.refuse:
            raise stopfn.http_error(method, url, 400, _error(400, "FAILED_PRECONDITION", "The instance is protected "
                                                             "by a policy.", "conditionNotMet"))
        if instance["status"] == "PROVISIONING":
            raise stopfn.http_error(method, url, 400, _error(400, "FAILED_PRECONDITION", f"The resource "
                                    f"'projects/{GCP_PROJECT}/zones/{zone}/instances/{name}' is not ready",
                                                             "resourceNotReady"))
        if instance["status"] in LIVE:
            instance["status"] = "TERMINATED"
        return {"kind": "compute#operation", "name": f"operation-stop-{name}", "operationType": "stop",
                "status": "RUNNING", "targetLink": f"{instance['zone']}/instances/{name}"}


class GcpAdapter:
    cloud = "gcp"
    provider = "gcp"
    not_served: dict[str, str] = {}

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.env = {stopfn.GCP_PROJECT_ENV: GCP_PROJECT, stopfn.PROJECT_ENV: PROJECT, stopfn.STACK_ENV: STACK,
                    stopfn.BUDGET_LIMIT_ENV: "1000.00", stopfn.CURRENCY_ENV: "USD",
                    stopfn.METADATA_URL_ENV: "http://metadata.invalid/computeMetadata/v1",
                    stopfn.COMPUTE_URL_ENV: "https://compute.invalid/compute/v1"}
        self.api = FakeCompute(fleet, faults, self.env)
        self.seed = faults.seed
        self.runs = 0

    def invoke(self, path: str) -> Invocation:
        self.runs += 1
        self.api.run = self.runs
        if path == "hard-stop":
            payload = {"budgetDisplayName": "goldenenv-dev", "costAmount": 1200.0, "budgetAmount": 1000.0,
                       "currencyCode": "USD", "costIntervalStart": "2026-07-01T07:00:00Z",
                       "alertThresholdExceeded": 1.0}
            message = {"data": base64.b64encode(json.dumps(payload).encode()).decode()}
            env = {**self.env, stopfn.HARD_STOP_ENV: "true"}
        else:
            message = {"data": base64.b64encode(b"{}").decode(),
                       "attributes": {stopfn.MODE_ATTRIBUTE: stopfn.REAPER_MODE}}
            env = {**self.env, stopfn.HARD_STOP_ENV: "false", stopfn.TTL_HOURS_ENV: "24"}
        clock = simulated_clock(stopfn.INVOCATION_SECONDS - stopfn.MARGIN_SECONDS, seed=self.seed + self.runs)
        report = stopfn.run(message, env, NOW, api=self.api, clock=clock)
        return Invocation(bool(report.failed), "; ".join(report.failed))

    def running(self) -> set[str]:
        return {n for n, i in self.api.instances.items() if i["status"] in LIVE}

    def touched(self) -> set[str]:
        return set(self.api.stop_calls)

    def restart(self, name: str) -> None:
        self.api.instances[name]["status"] = "RUNNING"
        self.api.instances[name]["lastStartTimestamp"] = NOW.isoformat()

    def named(self, name: str) -> str:
        return f"{self.api.instances[name]['zone'].rsplit('/', 1)[1]}/{name}"

    def close(self) -> None:
        pass


ADAPTER = GcpAdapter
"""Google Cloud's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
