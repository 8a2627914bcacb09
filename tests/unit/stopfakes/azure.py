"""Azure's stop function (goldenenv/clouds/azure/stopfn/function_app.py) on an in-process fake of the App Service
identity endpoint and ARM, for the fault table.

The fake answers in ARM's shapes: lists with ``value`` and an absolute ``nextLink``; scale-set instances with their
instance view (ProvisioningState/creating and no power state while a VM is created); deallocate answering 202 with
Azure-AsyncOperation; throttling as HTTP 429 with the Compute provider's body (learn.microsoft.com
virtual-machines/troubleshooting/troubleshooting-throttling-errors); a deallocation naming an instance still being
created, or one the fault refuses, answered 409 for the whole call, as ARM answers one request.
"""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime, timedelta, timezone
from typing import Any

from goldenenv.clouds.azure.stopfn import function_app as stopfn

from . import simulated_clock
from .world import PROJECT, STACK, Faults, FleetNode, Invocation, Throttle

SUB = "00000000-0000-0000-0000-000000000000"
GROUP = "rg-llm-pretrain-dev"
GROUP_ID = f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
COMPUTE = f"{GROUP_ID}/providers/Microsoft.Compute"
BUDGET = "goldenenv-llm-pretrain-dev"
BASE = "https://management.invalid"
NOW = datetime(2026, 7, 20, 8, 0, tzinfo=timezone.utc)
SET_SIZE = 300
"""Instances per scale set of the fake (a scale set holds up to 1,000)."""

THROTTLED = {"error": {"code": "OperationNotAllowed", "message": "The server rejected the request because too many "
                       "requests have been received for this subscription.",
                       "details": [{"code": "TooManyRequests", "target": "HighCostGetVMScaleSet30Min",
                                    "message": "{\"operationGroup\":\"HighCostGetVMScaleSet30Min\"}"}]}}


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f0+00:00")


def tags_of(node: FleetNode) -> dict[str, str]:
    if node.stack is None:
        return {"owner": "ml-infra"}
    return {"goldenenv:stack": node.stack, "project": node.project, "owner": "ml-infra"}


class FakeArm(stopfn.Arm):
    """ARM in process: ``_request`` answers as ARM does over HTTP, errors through the function's own reading."""

    def __init__(self, fleet: list[FleetNode], faults: Faults, env: dict[str, str]):
        super().__init__(env)
        self.faults = faults
        self.throttle = Throttle(faults)
        self.budget = {"amount": 1000.0, "spend": 1200.5, "unit": "USD"}
        self.scale_sets: dict[str, dict[str, Any]] = {}
        self.vms: dict[str, dict[str, Any]] = {}
        self.where: dict[str, tuple[str, str | None]] = {}
        """fleet name -> (scale set, instance id), or (VM name, None)."""
        self.deallocated: list[str] = []
        self.run = 0
        """The adapter's invocation count."""
        groups: dict[tuple[str | None, str], list[FleetNode]] = {}
        for node in fleet:
            groups.setdefault((node.stack, node.project), []).append(node)
        for (stack, project), nodes in groups.items():
            head, *members = nodes
            self.vms[head.name] = {"tags": tags_of(head), **self._state(head)}
            self.where[head.name] = (head.name, None)
            for start in range(0, len(members), SET_SIZE):
                name = f"{stack or 'untagged'}-{project}-pool{start // SET_SIZE}"
                instances = {}
                for k, node in enumerate(members[start:start + SET_SIZE]):
                    instances[str(k)] = {"fleet": node.name, **self._state(node)}
                    self.where[node.name] = (name, str(k))
                self.scale_sets[name] = {"id": f"{COMPUTE}/virtualMachineScaleSets/{name}", "tags": tags_of(nodes[0]),
                                         "instances": instances}

    @staticmethod
    def _state(node: FleetNode) -> dict[str, Any]:
        return {"power": None if node.starting_polls else "running", "polls": node.starting_polls,
                "provisioning": "creating" if node.starting_polls else "succeeded",
                "time": NOW - timedelta(hours=30), "name": node.name}

    # ARM over HTTP, in process

    def _request(self, method: str, url: str, headers: dict[str, str],
                 body: Any = None) -> tuple[dict[str, Any], dict[str, str]]:
        if self.throttle.now():
            raise stopfn.ApiError(method, url, 429, stopfn._error_message(json.dumps(THROTTLED).encode()))
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        path = urllib.parse.unquote(parts.path)
        if url.startswith("http://identity.invalid/"):
            return {"access_token": "arm-token", "token_type": "Bearer"}, {}
        if path == f"/subscriptions/{SUB}/providers/Microsoft.Consumption/budgets/{BUDGET}":
            return {"name": BUDGET, "properties": {"category": "Cost", "amount": self.budget["amount"],
                                                   "timeGrain": "Monthly",
                                                   "currentSpend": {"amount": self.budget["spend"],
                                                                    "unit": self.budget["unit"]}}}, {}
        if method == "GET" and path == f"{COMPUTE}/virtualMachineScaleSets":
            return self.page(path, query, [{"id": s["id"], "name": n, "tags": s["tags"],
                                            "type": "Microsoft.Compute/virtualMachineScaleSets"}
                                           for n, s in self.scale_sets.items()]), {}
        if method == "GET" and path == f"{COMPUTE}/virtualMachines":
            return self.page(path, query, [{"id": f"{COMPUTE}/virtualMachines/{n}", "name": n, "tags": v["tags"],
                                            "properties": {"provisioningState": "Succeeded"}}
                                           for n, v in self.vms.items()]), {}
        for name, scale_set in self.scale_sets.items():
            if method == "GET" and path == f"{scale_set['id']}/virtualMachines":
                return self.page(path, query, [self.instance(name, i, v) for i, v in scale_set["instances"].items()],
                                 shown=[v for v in scale_set["instances"].values()]), {}
            if method == "POST" and path == f"{scale_set['id']}/deallocate":
                ids = (body or {}).get("instanceIds") or list(scale_set["instances"])
                return self.deallocate(method, url, [scale_set["instances"][i] for i in ids])
        for name, vm in self.vms.items():
            vm_id = f"{COMPUTE}/virtualMachines/{name}"
            if method == "GET" and path == f"{vm_id}/instanceView":
                self.shown(vm)
                return {"computerName": name, "statuses": self.statuses(vm)}, {}
            if method == "POST" and path == f"{vm_id}/deallocate":
                return self.deallocate(method, url, [vm])
        raise stopfn.ApiError(method, url, 404, f"ResourceNotFound: The Resource '{path}' was not found.")

    def page(self, path: str, query: dict[str, str], items: list[dict[str, Any]],
             shown: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        size = self.faults.page_size or 1000
        start = int(query.get("$skiptoken") or 0)
        lost = self.faults.lost_page
        if self.run == 1 and lost and start == (lost - 1) * size and path.endswith("/virtualMachines"):
            raise stopfn.ApiError("GET", path, 503, "ServiceUnavailable: The service is temporarily unavailable.")
        for state in (shown or [])[start:start + size]:
            self.shown(state)
        answer: dict[str, Any] = {"value": items[start:start + size]}
        if start + size < len(items):
            rest = {k: v for k, v in query.items() if k != "$skiptoken"}
            answer["nextLink"] = f"{BASE}{path}?{urllib.parse.urlencode({**rest, '$skiptoken': start + size})}"
        return answer

    def shown(self, state: dict[str, Any]) -> None:
        """A VM being created runs once it has been seen `polls` times."""
        if state["provisioning"] == "creating":
            state["polls"] -= 1
            if state["polls"] <= 0:
                state.update(provisioning="succeeded", power="running", time=NOW)

    def statuses(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        found = [{"code": f"ProvisioningState/{state['provisioning']}", "time": _iso(state["time"])}]
        if state["power"]:
            found.append({"code": f"PowerState/{state['power']}"})
        return found

    def instance(self, scale_set: str, instance_id: str, state: dict[str, Any]) -> dict[str, Any]:
        return {"name": f"{scale_set}_{instance_id}", "instanceId": instance_id,
                "id": f"{self.scale_sets[scale_set]['id']}/virtualMachines/{instance_id}",
                "properties": {"instanceView": {"statuses": self.statuses(state)}}}

    def deallocate(self, method: str, url: str, states: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
        refused = [s["name"] for s in states if s["name"] in self.faults.refuse]
        creating = [s["name"] for s in states if s["provisioning"] == "creating"]
        if refused:
            raise stopfn.ApiError(method, url, 409, "OperationNotAllowed: The operation is not allowed: the VM has a "
                                                    "policy that blocks deallocation.")
        if creating:
            raise stopfn.ApiError(method, url, 409, "Conflict: The request cannot be completed: the VM is being "
                                                    "created.")
        for state in states:
            self.deallocated.append(state["name"])
            if state["power"] in ("running", "stopped", "starting"):
                state["power"] = "deallocating"
        return {}, {"Azure-AsyncOperation": f"{BASE}/subscriptions/{SUB}/providers/Microsoft.Compute/operations/x"}


class AzureAdapter:
    cloud = "azure"
    provider = "azure-native"
    not_served: dict[str, str] = {}

    def __init__(self, fleet: list[FleetNode], faults: Faults):
        self.env = {stopfn.SUBSCRIPTION_ENV: SUB, stopfn.RESOURCE_GROUP_ENV: GROUP, stopfn.PROJECT_ENV: PROJECT,
                    stopfn.STACK_ENV: STACK, stopfn.BUDGET_NAME_ENV: BUDGET, stopfn.BUDGET_LIMIT_ENV: "1000.00",
                    stopfn.CURRENCY_ENV: "USD", stopfn.ARM_URL_ENV: BASE,
                    stopfn.IDENTITY_ENDPOINT_ENV: "http://identity.invalid/msi/token",
                    stopfn.IDENTITY_HEADER_ENV: "identity-header"}
        self.arm = FakeArm(fleet, faults, self.env)
        self.seed = faults.seed
        self.runs = 0

    def invoke(self, path: str) -> Invocation:
        """The hard stop: the budget's alert first, the 15-minute timer after (it repeats the stop while the month
        is over the limit). The time to live: the timer."""
        self.runs += 1
        self.arm.run = self.runs
        if path == "hard-stop" and self.runs == 1:
            body = json.dumps({"schemaId": stopfn.COMMON_SCHEMA, "data": {
                "essentials": {"monitoringService": "CostAlerts"},
                "alertContext": {"AlertData": {"BudgetName": BUDGET, "ThresholdType": "Actual"}}}}).encode()
            clock = simulated_clock(stopfn.ALERT_SECONDS - stopfn.MARGIN_SECONDS, seed=self.seed + self.runs)
            report = stopfn.run_alert(body, {**self.env, stopfn.HARD_STOP_ENV: "true"}, NOW, self.arm, clock)
        else:
            env = {**self.env, stopfn.HARD_STOP_ENV: "true"} if path == "hard-stop" else {
                **self.env, stopfn.HARD_STOP_ENV: "false", stopfn.TTL_HOURS_ENV: "24"}
            clock = simulated_clock(stopfn.TIMER_SECONDS - stopfn.MARGIN_SECONDS, seed=self.seed + self.runs)
            report = stopfn.run_timer(env, NOW, self.arm, clock)
        return Invocation(bool(report.failed), "; ".join(report.failed))

    def _state(self, name: str) -> dict[str, Any]:
        where, instance_id = self.arm.where[name]
        return self.arm.vms[where] if instance_id is None else self.arm.scale_sets[where]["instances"][instance_id]

    def running(self) -> set[str]:
        return {n for n in self.arm.where if self._state(n)["power"] in (None, "running", "starting", "stopped")}

    def touched(self) -> set[str]:
        return set(self.arm.deallocated)

    def restart(self, name: str) -> None:
        self._state(name).update(power="running", provisioning="succeeded", time=NOW)

    def named(self, name: str) -> str:
        where, instance_id = self.arm.where[name]
        return where if instance_id is None else f"{where}/{instance_id}"

    def close(self) -> None:
        pass


ADAPTER = AzureAdapter
"""Azure's adapter (stopfakes.world.Adapter), found by the cloud's name (stopfakes.found)."""
