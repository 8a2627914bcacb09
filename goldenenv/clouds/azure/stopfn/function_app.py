"""The stack's stop function on Azure: the budget's hard stop, and the time to live and idle stop.

It runs as an Azure Functions app of the stack's own (Flex Consumption, Python, the v2 programming model), so a
cluster is deallocated with the laptop off. This folder is shipped alone as the app's code: standard library only
(azure.functions, which the Python worker provides, only registers the two entry points), every call a plain ARM
REST request with the app's system-assigned managed identity: a token from the App Service identity endpoint
(GET $IDENTITY_ENDPOINT?resource=https://management.azure.com/&api-version=2019-08-01 with the header
X-IDENTITY-HEADER: $IDENTITY_HEADER; learn.microsoft.com app-service/overview-managed-identity, "REST endpoint
reference"). The tag keys are written here again; a unit test checks them against goldenenv.spec, so the fact still
has one owner.

Deallocate, never power off: a stopped (powered-off) VM keeps its compute allocation and keeps billing; only a
deallocated one stops the compute charge (learn.microsoft.com virtual-machines/states-billing). The function calls
POST .../virtualMachineScaleSets/{set}/deallocate with the instances' ids and POST .../virtualMachines/{vm}/deallocate
(Compute REST API 2024-07-01; 202 Accepted with an Azure-AsyncOperation header, not waited for), and nothing else
that changes a VM.

What it acts on: the scale sets and VMs of the stack's compute resource group (GOLDENENV_RESOURCE_GROUP) that carry
both the stack's tags, goldenenv:stack and project (two projects may each have a stack ``dev`` in one subscription).
Azure matches tag names without regard to case and values with it (learn.microsoft.com tag-resources); so does this.

Two entry points:

- **budget_alert**, an HTTP trigger the budget's action group calls at 100 % of actual spend (azureFunctionReceivers,
  common alert schema on). The endpoint is anonymous: an action group's Function action carries the function key in
  its URL (learn.microsoft.com azure-monitor/alerts/action-groups, "Function"), a secret goldenenv keeps out of
  state, so the call is treated as a doorbell and never trusted. The body is read in either shape Azure sends for a
  budget (alerts-common-schema-test-action-definitions: the common schema's ``CostAlerts`` with
  ``alertContext.AlertData.BudgetName``/``ThresholdType``, or the older ``AIP Budget Notification`` with
  ``data.BudgetName``); an alert about another budget, or a forecast, is ignored. For this budget, or a body that
  cannot be read, the function reads the budget itself (Consumption Budgets - Get, api-version 2024-08-01:
  ``properties.currentSpend.amount`` against ``properties.amount``) and deallocates when the month's spend is at or
  over the limit (the larger of the budget's amount and GOLDENENV_BUDGET_LIMIT, the limit `up` deployed, as on
  Google Cloud: a budget that `up` raised ends the stop). Fail closed, as Google Cloud's stopfn does: when an alert
  rang and the budget cannot be read (missing, refused, not a number), the stack is deallocated and the reason
  logged at ERROR. A transient failure (HTTP 429, 5xx, no answer) instead fails the call, so the action group and
  the next timer run try again. An anonymous caller can therefore make the function read the budget, never
  deallocate a stack under its limit.
- **reaper**, a timer trigger every 15 minutes (NCRONTAB ``0 */15 * * * *``). With the hard stop on it first reads
  the budget: while the month is over the limit it deallocates whatever of the stack is still allocated, so the hard
  stop lasts until the month ends or `up` raises the budget, as on AWS and Google Cloud (Azure sends a threshold's
  alert once a period; this repeats it). A budget it cannot read here stops nothing (no alert rang; the role and the
  budget may still be propagating after `up`) and fails the run. Then the time to live and the idle stop, as the AWS
  reaper and Google Cloud's stopfn do:

  * time to live: an instance expires GOLDENENV_TTL_HOURS after its last start. Azure records no start time as
    such; the instance view's provisioning status carries the time of the VM's last completed operation (its
    creation, a start, a model update), which is what the time to live counts from, so a node started again by
    hand after a stop gets a fresh time to live (the VM's timeCreated when the status has no time).
  * idle: a running scale-set instance is idle when its Azure Monitor ``Percentage CPU`` (host metric, no agent;
    5-minute averages split by the VMName dimension) stayed under GOLDENENV_IDLE_CPU_PERCENT (min(5 %, half a core),
    the AWS and Google Cloud threshold) for GOLDENENV_IDLE_MINUTES. GPU use reaches Azure Monitor only through an
    agent the nodes do not run, so a GPU job that leaves the CPU idle counts as idle. Missing data is not idleness,
    and an instance up for less than the idle time is kept. The head (a VM) is deallocated as idle only when none
    of the stack's scale-set instances is left running: its own CPU says nothing about the cluster's use.

One log line per action; never a token. A deallocation or a listing that fails makes the invocation fail after
the rest is done (the handlers are idempotent: what is deallocated or deallocating is left alone).
"""

from __future__ import annotations

import json
import logging
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

STACK_TAG_KEY = "goldenenv:stack"
"""goldenenv.spec.STACK_TAG_KEY (checked by a test)."""
PROJECT_TAG_KEY = "project"

SUBSCRIPTION_ENV = "GOLDENENV_SUBSCRIPTION_ID"
RESOURCE_GROUP_ENV = "GOLDENENV_RESOURCE_GROUP"
"""The stack's compute resource group: the only group whose VMs the function lists."""
PROJECT_ENV = "GOLDENENV_PROJECT"
STACK_ENV = "GOLDENENV_STACK"
HARD_STOP_ENV = "GOLDENENV_HARD_STOP"
BUDGET_NAME_ENV = "GOLDENENV_BUDGET_NAME"
"""The stack's budget, at subscription scope."""
BUDGET_LIMIT_ENV = "GOLDENENV_BUDGET_LIMIT"
CURRENCY_ENV = "GOLDENENV_CURRENCY"
TTL_HOURS_ENV = "GOLDENENV_TTL_HOURS"
IDLE_MINUTES_ENV = "GOLDENENV_IDLE_MINUTES"
IDLE_CPU_PERCENT_ENV = "GOLDENENV_IDLE_CPU_PERCENT"
CODE_DIGEST_ENV = "GOLDENENV_CODE_DIGEST"
"""The shipped code's digest: set by the program so a new package restarts the app; not read here."""
ARM_URL_ENV = "GOLDENENV_ARM_URL"
"""Base URL, overridden by the tests only (a local fake of ARM); the deployed function uses ARM_URL."""
IDENTITY_ENDPOINT_ENV, IDENTITY_HEADER_ENV = "IDENTITY_ENDPOINT", "IDENTITY_HEADER"
"""Set by App Service (and Azure Functions) in every app with a managed identity."""

ARM_URL = "https://management.azure.com"
ARM_RESOURCE = "https://management.azure.com/"
IDENTITY_API_VERSION = "2019-08-01"
COMPUTE_API_VERSION = "2024-07-01"
CONSUMPTION_API_VERSION = "2024-08-01"
METRICS_API_VERSION = "2018-01-01"

ALERT_FUNCTION, ALERT_ROUTE = "budget_alert", "budget-alert"
TIMER_FUNCTION, SCHEDULE = "reaper", "0 */15 * * * *"
"""Equal to budget.py's (checked by a test): the action group names the function and its URL."""

DEALLOCATED = ("PowerState/deallocated", "PowerState/deallocating")
RUNNING = "PowerState/running"
CPU_METRIC = "Percentage CPU"
IDLE_PERIOD_MINUTES = 5
DEFAULT_IDLE_CPU_PERCENT = 0.5
"""When the program gave no threshold: half a core of a 96-vCPU ND node, which keeps any node doing real work."""
COMMON_SCHEMA, BUDGET_SCHEMA = "azureMonitorCommonAlertSchema", "AIP Budget Notification"
MAX_BODY_BYTES = 1 << 16
TIMEOUT_SECONDS = 30

logger = logging.getLogger("goldenenv.stopfn")


class ApiError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, message: str):
        super().__init__(f"{method} {url.split('?')[0]}: HTTP {status}: {message}")
        self.status = status

    @property
    def transient(self) -> bool:
        """No answer, a timeout, throttling or a server error: worth trying again later."""
        return self.status in (0, 408, 429) or self.status >= 500


# ---------------------------------------------------------------- ARM

class Arm:
    """Azure Resource Manager, as the app's managed identity."""

    def __init__(self, env: dict[str, str]):
        self.base = (env.get(ARM_URL_ENV) or ARM_URL).rstrip("/")
        self.identity_endpoint = env.get(IDENTITY_ENDPOINT_ENV) or ""
        self.identity_header = env.get(IDENTITY_HEADER_ENV) or ""
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            if not (self.identity_endpoint and self.identity_header):
                raise ApiError("GET", IDENTITY_ENDPOINT_ENV, 0, "no managed identity: IDENTITY_ENDPOINT or "
                                                                "IDENTITY_HEADER is not set")
            query = urllib.parse.urlencode({"resource": ARM_RESOURCE, "api-version": IDENTITY_API_VERSION})
            answer, _ = self._request("GET", f"{self.identity_endpoint}?{query}",
                                      {"X-IDENTITY-HEADER": self.identity_header})
            if not isinstance(answer.get("access_token"), str):
                raise ApiError("GET", self.identity_endpoint, 200, "the identity endpoint gave no access_token")
            self._token = answer["access_token"]
        return self._token

    def url(self, target: str, query: dict[str, str] | None = None, api_version: str = COMPUTE_API_VERSION) -> str:
        """An ARM URL for a path (/subscriptions/...), or a nextLink ARM gave, which must point at ARM."""
        if target.startswith("/"):
            params = {"api-version": api_version, **(query or {})}
            encoded = urllib.parse.urlencode(params, safe="$", quote_via=urllib.parse.quote)
            return f"{self.base}{urllib.parse.quote(target)}?{encoded}"
        if not target.startswith(self.base + "/"):
            raise ApiError("GET", target, 0, "a nextLink outside Azure Resource Manager: not followed")
        return target

    def call(self, method: str, target: str, query: dict[str, str] | None = None, body: Any = None,
             api_version: str = COMPUTE_API_VERSION) -> tuple[dict[str, Any], dict[str, str]]:
        return self._request(method, self.url(target, query, api_version),
                             {"Authorization": f"Bearer {self.token()}"}, body)

    def pages(self, path: str, query: dict[str, str] | None = None,
              api_version: str = COMPUTE_API_VERSION) -> list[dict[str, Any]]:
        """Every item of a list, following nextLink."""
        found: list[dict[str, Any]] = []
        target: str | None = path
        while target:
            answer, _ = self.call("GET", target, query, api_version=api_version)
            found.extend(item for item in answer.get("value") or [] if isinstance(item, dict))
            target = answer.get("nextLink") or None
        return found

    @staticmethod
    def _request(method: str, url: str, headers: dict[str, str],
                 body: Any = None) -> tuple[dict[str, Any], dict[str, str]]:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        extra = {"Content-Type": "application/json"} if method == "POST" else {}
        request = urllib.request.Request(url, method=method, data=data,
                                         headers={**headers, **extra, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                raw, answer_headers = response.read(), dict(response.headers.items())
        except urllib.error.HTTPError as error:
            raise ApiError(method, url, error.code, _error_message(error.read())) from None
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(method, url, 0, str(getattr(error, "reason", error))) from None
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            raise ApiError(method, url, 200, "the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise ApiError(method, url, 200, "the answer is not a JSON object")
        return answer, answer_headers


def _error_message(body: bytes) -> str:
    """ARM's error body ({"error": {"code", "message"}}) as one line; the raw text otherwise."""
    try:
        error = json.loads(body)["error"]
        return f"{error.get('code')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return body.decode("utf-8", "replace")[:300]


# ---------------------------------------------------------------- the stack's VMs

def tag(tags: Any, key: str) -> str | None:
    """A tag's value; tag names match without regard to case."""
    if not isinstance(tags, dict):
        return None
    return next((value for name, value in tags.items() if str(name).lower() == key.lower()), None)


def is_stack(resource: dict[str, Any], project: str, stack: str) -> bool:
    tags = resource.get("tags")
    return tag(tags, STACK_TAG_KEY) == stack and tag(tags, PROJECT_TAG_KEY) == project


@dataclass
class Node:
    """One VM: a scale-set instance (scale_set set, instance_id its id) or a standalone VM (the head)."""

    name: str
    resource_id: str
    scale_set: dict[str, Any] | None = None
    instance_id: str | None = None
    power: str | None = None
    started: datetime | None = None
    computer_name: str | None = None

    @property
    def label(self) -> str:
        return f"{self.scale_set.get('name')}/{self.instance_id}" if self.scale_set else str(self.name)

    @property
    def allocated(self) -> bool:
        return self.power not in DEALLOCATED


def _timestamp(value: Any) -> datetime | None:
    if not value:
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _node(name: str, resource_id: str, properties: dict[str, Any], view: dict[str, Any], **extra: Any) -> Node:
    statuses = [s for s in view.get("statuses") or [] if isinstance(s, dict)]
    power = next((str(s["code"]) for s in statuses if str(s.get("code", "")).startswith("PowerState/")), None)
    provisioned = [t for t in (_timestamp(s.get("time")) for s in statuses
                               if str(s.get("code", "")).startswith("ProvisioningState/")) if t]
    started = max(provisioned) if provisioned else _timestamp(properties.get("timeCreated"))
    return Node(name=name, resource_id=resource_id, power=power, started=started,
                computer_name=view.get("computerName") or (properties.get("osProfile") or {}).get("computerName"),
                **extra)


def stack_scale_sets(api: Arm, subscription: str, group: str, project: str, stack: str) -> list[dict[str, Any]]:
    path = (f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/"
            "virtualMachineScaleSets")
    return [s for s in api.pages(path) if is_stack(s, project, stack)]


def scale_set_nodes(api: Arm, scale_set: dict[str, Any]) -> list[Node]:
    """The scale set's instances with their instance views (one list call)."""
    nodes = []
    for vm in api.pages(f"{scale_set['id']}/virtualMachines", {"$expand": "instanceView"}):
        properties = vm.get("properties") or {}
        nodes.append(_node(str(vm.get("name")), str(vm.get("id")), properties, properties.get("instanceView") or {},
                           scale_set=scale_set, instance_id=str(vm.get("instanceId"))))
    return nodes


def stack_vm_nodes(api: Arm, subscription: str, group: str, project: str, stack: str) -> list[Node]:
    """The group's standalone VMs (the head) with the stack's tags, each with its instance view."""
    path = f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines"
    nodes = []
    for vm in api.pages(path):
        if is_stack(vm, project, stack):
            view, _ = api.call("GET", f"{vm['id']}/instanceView")
            nodes.append(_node(str(vm.get("name")), str(vm["id"]), vm.get("properties") or {}, view))
    return nodes


def deallocate(api: Arm, scale_set: dict[str, Any] | None, nodes: list[Node]) -> str:
    """Deallocate scale-set instances (one call per set) or one VM; returns the operation ARM started."""
    if scale_set is not None:
        _, headers = api.call("POST", f"{scale_set['id']}/deallocate",
                              body={"instanceIds": [n.instance_id for n in nodes]})
    else:
        (vm,) = nodes
        _, headers = api.call("POST", f"{vm.resource_id}/deallocate")
    headers = {k.lower(): v for k, v in headers.items()}
    operation = headers.get("azure-asyncoperation") or headers.get("location") or "?"
    return operation.split("?")[0]


# ---------------------------------------------------------------- the budget

@dataclass(frozen=True)
class Verdict:
    stop: bool
    reason: str
    unreadable: bool = False
    """The budget could not be read; with an alert ringing, the stack is deallocated anyway (fail closed)."""


def _amount(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what} is {'missing' if value is None else repr(value)}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} is {value!r}, not a finite amount")
    return number


def judge_budget(budget: dict[str, Any], *, currency: str, deployed_limit: float | None) -> Verdict:
    """Whether the month's spend is at or over the limit. Raises ValueError when the budget cannot be read."""
    properties = budget.get("properties")
    if not isinstance(properties, dict):
        raise ValueError("the budget has no properties")
    amount = _amount(properties.get("amount"), "properties.amount")
    if amount <= 0:
        raise ValueError(f"properties.amount {amount:g} is not a positive amount")
    spend = properties.get("currentSpend")
    if not isinstance(spend, dict):
        raise ValueError("properties.currentSpend is missing")
    cost = _amount(spend.get("amount"), "properties.currentSpend.amount")
    unit = spend.get("unit")
    if deployed_limit and unit == currency and deployed_limit > amount:
        limit, note = deployed_limit, f" (the limit as deployed; the budget says {amount:,.2f})"
    else:
        limit, note = amount, ""
    if unit != currency:
        note += f" (the budget counts in {unit!r}, the stack in {currency!r}: compared in the budget's own unit)"
    spent = f"{cost:,.2f} {unit} of {limit:,.2f}{note}"
    return Verdict(cost >= limit, f"spend {spent}: {'at or over' if cost >= limit else 'under'} the limit")


def read_budget(api: Arm, subscription: str, name: str, *, currency: str,
                deployed_limit: float | None) -> Verdict:
    """The budget's verdict. Raises ApiError when ARM failed; an answer it cannot read is an unreadable Verdict."""
    path = f"/subscriptions/{subscription}/providers/Microsoft.Consumption/budgets/{name}"
    budget, _ = api.call("GET", path, api_version=CONSUMPTION_API_VERSION)
    try:
        return judge_budget(budget, currency=currency, deployed_limit=deployed_limit)
    except ValueError as problem:
        return Verdict(True, f"the budget {name} cannot be read ({problem})", True)


@dataclass(frozen=True)
class Alert:
    budget_name: str
    threshold_type: str
    """Actual or Forecasted."""


def read_alert(body: bytes) -> Alert:
    """The budget alert an action group posts, in the common alert schema or the budget's own. Raises ValueError."""
    payload = json.loads(body or b"")  # JSONDecodeError is a ValueError
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), dict):
        raise ValueError("the body is not an alert (no data object)")
    data, schema = payload["data"], payload.get("schemaId")
    if schema == COMMON_SCHEMA:
        service = (data.get("essentials") or {}).get("monitoringService")
        if service != "CostAlerts":
            raise ValueError(f"a {service!r} alert, not a budget's (CostAlerts)")
        found = (data.get("alertContext") or {}).get("AlertData") or {}
        name, kind = found.get("BudgetName"), found.get("ThresholdType") or "Actual"
    elif schema == BUDGET_SCHEMA:
        name, kind = data.get("BudgetName"), "Actual"
    else:
        raise ValueError(f"schemaId {schema!r} is not a budget alert's")
    if not isinstance(name, str) or not name:
        raise ValueError("the alert names no budget")
    return Alert(name, str(kind))


# ---------------------------------------------------------------- time to live and idle

def ttl_reason(node: Node, ttl_hours: float, now: datetime) -> str | None:
    """Why an expired node is due; None while it has time left. Raises ValueError when no start can be read."""
    if node.started is None:
        raise ValueError("its instance view has no provisioning time and it has no timeCreated")
    expires = node.started + timedelta(hours=ttl_hours)
    return (f"time to live expired at {expires.isoformat()} ({ttl_hours:g} h after its last start or change)"
            if now >= expires else None)


def cpu_series(api: Arm, resource_id: str, minutes: int, now: datetime, split: bool) -> dict[str, list[float]]:
    """5-minute average Percentage CPU over the last `minutes`, per VMName (lowercase; "" when not split)."""
    query = {
        "metricnames": CPU_METRIC,
        "timespan": f"{(now - timedelta(minutes=minutes)):%Y-%m-%dT%H:%M:%SZ}/{now:%Y-%m-%dT%H:%M:%SZ}",
        "interval": f"PT{IDLE_PERIOD_MINUTES}M",
        "aggregation": "Average",
        **({"$filter": "VMName eq '*'"} if split else {}),
    }
    answer, _ = api.call("GET", f"{resource_id}/providers/Microsoft.Insights/metrics", query,
                         api_version=METRICS_API_VERSION)
    series: dict[str, list[float]] = {}
    for metric in answer.get("value") or []:
        for line in (metric or {}).get("timeseries") or []:
            names = [str(m.get("value", "")).lower() for m in line.get("metadatavalues") or []
                     if str((m.get("name") or {}).get("value", "")).lower() == "vmname"]
            points = [p.get("average") for p in line.get("data") or [] if isinstance(p, dict)]
            series.setdefault(names[0] if names else "", []).extend(
                float(v) for v in points if isinstance(v, (int, float)) and not isinstance(v, bool))
    return series


def idle_reason(values: list[float] | None, idle_minutes: int, threshold: float) -> str | None:
    """Idle when every 5-minute average of the window is under the threshold and the window is covered (the newest
    period may not be written yet)."""
    needed = max(1, math.ceil(idle_minutes / IDLE_PERIOD_MINUTES) - 1)
    if not values or len(values) < needed or not all(math.isfinite(v) and v < threshold for v in values):
        return None
    return (f"idle: CPU under {threshold:g} % for {idle_minutes} minutes (highest 5-minute average "
            f"{max(values):.2f} %)")


# ---------------------------------------------------------------- one invocation

@dataclass
class Report:
    mode: str
    deallocated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


@dataclass
class Context:
    api: Arm
    subscription: str
    group: str
    project: str
    stack: str
    report: Report

    @property
    def prefix(self) -> str:
        return f"project={self.project} stack={self.stack} {self.report.mode}:"


def _context(mode: str, env: dict[str, str], api: Arm | None) -> Context:
    return Context(api or Arm(env), env[SUBSCRIPTION_ENV], env[RESOURCE_GROUP_ENV], env[PROJECT_ENV],
                   env[STACK_ENV], Report(mode))


def _fail(ctx: Context, message: str) -> None:
    ctx.report.failed.append(message)
    logger.error("%s %s", ctx.prefix, message)


def _listing(ctx: Context) -> tuple[list[tuple[dict[str, Any], list[Node]]], list[Node]] | None:
    """The stack's scale sets with their instances, and its VMs; None (and a failure) when a listing failed."""
    try:
        sets = stack_scale_sets(ctx.api, ctx.subscription, ctx.group, ctx.project, ctx.stack)
        return ([(s, scale_set_nodes(ctx.api, s)) for s in sets],
                stack_vm_nodes(ctx.api, ctx.subscription, ctx.group, ctx.project, ctx.stack))
    except ApiError as error:
        _fail(ctx, f"cannot list the stack's VMs: {error}")
        return None


def _deallocate(ctx: Context, due: list[tuple[Node, str]]) -> None:
    """Deallocate the due nodes: one call per scale set, one per VM."""
    groups: dict[str, tuple[dict[str, Any] | None, list[tuple[Node, str]]]] = {}
    for node, reason in due:
        key = str(node.scale_set["id"]) if node.scale_set else node.resource_id
        groups.setdefault(key, (node.scale_set, []))[1].append((node, reason))
    for scale_set, members in groups.values():
        nodes = [n for n, _ in members]
        names = ", ".join(n.label for n in nodes)
        try:
            operation = deallocate(ctx.api, scale_set, nodes)
        except ApiError as error:
            _fail(ctx, f"FAILED to deallocate {names}: {error}")
            continue
        ctx.report.deallocated.extend(n.label for n in nodes)
        reasons = "; ".join(sorted({r for _, r in members}))
        logger.warning("%s deallocate %s (%s); operation %s", ctx.prefix, names, reasons, operation)


def _hard_stop(ctx: Context, reason: str) -> None:
    listing = _listing(ctx)
    if listing is None:
        return
    sets, vms = listing
    nodes = [n for _, members in sets for n in members] + vms
    for node in nodes:
        if not node.allocated:
            logger.info("%s leave %s: %s", ctx.prefix, node.label, node.power)
    _deallocate(ctx, [(n, f"hard stop: {reason}") for n in nodes if n.allocated])


def _positive(text: str | None) -> float | None:
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _hard_stop_on(env: dict[str, str]) -> bool:
    return env.get(HARD_STOP_ENV, "false").strip().lower() == "true"


def _budget(ctx: Context, env: dict[str, str]) -> Verdict:
    return read_budget(ctx.api, ctx.subscription, env[BUDGET_NAME_ENV], currency=env.get(CURRENCY_ENV, "USD"),
                       deployed_limit=_positive(env.get(BUDGET_LIMIT_ENV)))


def run_alert(body: bytes, env: dict[str, str], now: datetime, api: Arm | None = None) -> Report:
    """Handle one call of the budget's action group (see the module's docstring)."""
    ctx = _context("alert", env, api)
    if not _hard_stop_on(env):
        logger.info("%s the hard stop is off: nothing to do", ctx.prefix)
        return ctx.report
    ours = env[BUDGET_NAME_ENV]
    try:
        alert: Alert | None = read_alert(body)
    except ValueError as problem:
        alert = None
        logger.error("%s the alert cannot be read (%s): the budget decides", ctx.prefix, problem)
    if alert is not None and alert.budget_name.lower() != ours.lower():
        logger.info("%s an alert for budget %s, not %s: ignored", ctx.prefix, alert.budget_name, ours)
        return ctx.report
    if alert is not None and alert.threshold_type.lower() != "actual":
        logger.info("%s a %s alert: only actual spend stops the stack", ctx.prefix, alert.threshold_type)
        return ctx.report
    try:
        verdict = _budget(ctx, env)
    except ApiError as error:
        if error.transient:
            _fail(ctx, f"cannot read the budget now ({error}): the action group and the next timer run retry")
            return ctx.report
        verdict = Verdict(True, f"the budget {ours} cannot be read ({error})", True)
    if verdict.unreadable:
        logger.error("%s %s: an alert rang, so it is treated as over the limit", ctx.prefix, verdict.reason)
    else:
        logger.log(logging.WARNING if verdict.stop else logging.INFO, "%s %s", ctx.prefix, verdict.reason)
    if verdict.stop:
        _hard_stop(ctx, verdict.reason)
    _summary(ctx)
    return ctx.report


def run_timer(env: dict[str, str], now: datetime, api: Arm | None = None) -> Report:
    """The 15-minute run: the hard stop while the month is over the limit, then the time to live and idle stop."""
    ctx = _context("timer", env, api)
    if _hard_stop_on(env):
        try:
            verdict = _budget(ctx, env)
        except ApiError as error:
            verdict = Verdict(False, f"the budget cannot be read ({error})", True)
        if verdict.unreadable:
            _fail(ctx, f"{verdict.reason}: nothing is stopped for the budget until it can be")
        elif verdict.stop:
            logger.warning("%s %s", ctx.prefix, verdict.reason)
            _hard_stop(ctx, verdict.reason)
            _summary(ctx)
            return ctx.report
        else:
            logger.info("%s %s", ctx.prefix, verdict.reason)
    ttl, idle = _positive(env.get(TTL_HOURS_ENV)), _positive(env.get(IDLE_MINUTES_ENV))
    if ttl or idle:
        _reap(ctx, ttl, int(idle) if idle else None, _positive(env.get(IDLE_CPU_PERCENT_ENV)) or
              DEFAULT_IDLE_CPU_PERCENT, now)
    _summary(ctx)
    return ctx.report


def _reap(ctx: Context, ttl: float | None, idle: int | None, threshold: float, now: datetime) -> None:
    listing = _listing(ctx)
    if listing is None:
        return
    sets, vms = listing
    due: list[tuple[Node, str]] = []
    running_left = False
    for scale_set, nodes in sets:
        series: dict[str, list[float]] | None = None
        running = [n for n in nodes if n.power == RUNNING]
        for node in nodes:
            if not node.allocated:
                continue
            try:
                reason = ttl_reason(node, ttl, now) if ttl else None
            except ValueError as problem:
                _fail(ctx, f"SKIPPED {node.label}: cannot be judged ({problem})")
                running_left = running_left or node.power == RUNNING
                continue
            if reason is None and idle and node.power == RUNNING and node.started and \
                    now - node.started >= timedelta(minutes=idle):
                if series is None:
                    try:
                        series = cpu_series(ctx.api, str(scale_set["id"]), idle, now, split=True)
                    except ApiError as error:
                        _fail(ctx, f"SKIPPED idle check of {scale_set.get('name')}: {error}")
                        series = {}
                values = series.get(node.name.lower()) or series.get((node.computer_name or "").lower())
                if values is None and len(running) == 1 and set(series) == {""}:
                    values = series[""]
                reason = idle_reason(values, idle, threshold)
            if reason:
                due.append((node, reason))
            else:
                running_left = running_left or node.power == RUNNING
                logger.info("%s keep %s", ctx.prefix, node.label)
    for vm in vms:
        if not vm.allocated:
            continue
        try:
            reason = ttl_reason(vm, ttl, now) if ttl else None
        except ValueError as problem:
            _fail(ctx, f"SKIPPED {vm.label}: cannot be judged ({problem})")
            continue
        if reason is None and idle and not running_left and vm.started and \
                now - vm.started >= timedelta(minutes=idle):
            reason = f"idle: none of the stack's scale-set instances is running ({idle} minutes idle time)"
        if reason:
            due.append((vm, reason))
        else:
            logger.info("%s keep %s", ctx.prefix, vm.label)
    _deallocate(ctx, due)


def _summary(ctx: Context) -> None:
    logger.info("%s %d deallocated, %d failed", ctx.prefix, len(ctx.report.deallocated), len(ctx.report.failed))


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handle_alert(body: bytes) -> tuple[int, dict[str, Any]]:
    """The HTTP entry point's work: status 500 when a listing or a deallocation failed, so the caller retries."""
    report = run_alert(body[:MAX_BODY_BYTES], dict(os.environ), utc_now())
    status = 500 if report.failed else 200
    return status, {"mode": report.mode, "deallocated": report.deallocated, "failed": report.failed}


def handle_timer() -> None:
    """The timer entry point's work: raises when a listing, a budget read or a deallocation failed."""
    report = run_timer(dict(os.environ), utc_now())
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} problem(s): " + "; ".join(report.failed))


try:  # the Python worker provides it; registering the two functions is all it is used for
    import azure.functions as func
except ImportError:
    func = None
else:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)

    @app.function_name(name=ALERT_FUNCTION)
    @app.route(route=ALERT_ROUTE, methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
    def budget_alert(req: Any) -> Any:
        status, answer = handle_alert(req.get_body() or b"")
        return func.HttpResponse(json.dumps(answer), status_code=status, mimetype="application/json")

    @app.function_name(name=TIMER_FUNCTION)
    @app.timer_trigger(schedule=SCHEDULE, arg_name="timer", run_on_startup=False, use_monitor=True)
    def reaper(timer: Any) -> None:
        handle_timer()
