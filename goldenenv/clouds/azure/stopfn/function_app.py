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
  ``properties.currentSpend.amount`` against ``properties.amount``) and deallocates only when the budget says the
  month's spend is at or over the limit (the larger of the budget's amount and GOLDENENV_BUDGET_LIMIT, the limit `up`
  deployed, as on Google Cloud: a budget that `up` raised ends the stop). The caller is untrusted, so the budget
  decides: when the budget cannot be read at all (refused 403, missing 404, throttled or failing after the retries,
  any other error) nothing is deallocated, the reason is logged at ERROR and the invocation fails (it raises: the
  host answers HTTP 500 and Application Insights counts a failed request, which the stop-failure alert emails to the
  budget's contacts); the next timer run reads the budget again. A budget that
  answers but cannot be judged (a spend or amount that is missing, not a number, NaN or infinite, or a spend in
  another currency than the stack's) fails closed, as on Google Cloud: the stack is deallocated and the reason
  logged at ERROR. An anonymous caller can therefore make the function read the budget, never deallocate a stack
  the budget says is under its limit.
- **reaper**, a timer trigger every 15 minutes (NCRONTAB ``0 */15 * * * *``). With the hard stop on it first reads
  the budget: while the month is over the limit it deallocates whatever of the stack is still allocated, so the hard
  stop lasts until the month ends or `up` raises the budget, as on AWS and Google Cloud (Azure sends a threshold's
  alert once a period; this repeats it). A budget it cannot read at all stops nothing for the budget (the role and
  the budget may still be propagating after `up`) and fails the run; one that answers but cannot be judged fails
  closed as on the alert. The month is the budget's own: currentSpend is "the current amount of cost which is
  being tracked for a budget", reset on its timeGrain, Monthly (learn.microsoft.com javascript/api/@azure/
  arm-consumption/budget), so the function computes no month of its own. Then the time to live and the idle
  stop, as the AWS reaper and Google Cloud's stopfn do:

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

The shared rules are the stop core's (stopcore.py, shipped beside this file): every ARM call is retried with
backoff and jitter on throttling and transient errors (HTTP 429, 408, 5xx, no answer) while the invocation's time
allows (the timer's ten minutes of host.json, the alert's 230 seconds, the most an HTTP-triggered function has to
answer: learn.microsoft.com azure-functions/functions-scale, "Function app timeout duration"); every page of a
listing is read, and a page that never comes fails the invocation (a partial listing is never "no nodes"); a scale
set's instances are deallocated in one call, and a call that fails is retried instance by instance, so one
instance ARM refuses (409 Conflict or OperationNotAllowed) never holds back its siblings. An instance still being
created or starting (ProvisioningState/creating, PowerState/starting) is watched and deallocated once it runs, or
named as waiting for the next run. One log line per node; never a token. A node failed or still waiting, or a
listing that fails, makes the invocation fail after the rest is done (the handlers are idempotent: what is
deallocated or deallocating is left alone).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

try:
    from goldenenv.clouds import stopcore
except ImportError:  # in the function's package, shipped beside this file
    import stopcore

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
STARTING_POWER, CREATING = "PowerState/starting", "ProvisioningState/creating"
"""An instance view's codes while a VM is being started or created
(learn.microsoft.com virtual-machines/states-billing): it is deallocated once it runs."""
CPU_METRIC = "Percentage CPU"
IDLE_PERIOD_MINUTES = 5
DEFAULT_IDLE_CPU_PERCENT = 0.5
"""When the program gave no threshold: half a core of a 96-vCPU ND node, which keeps any node doing real work."""
COMMON_SCHEMA, BUDGET_SCHEMA = "azureMonitorCommonAlertSchema", "AIP Budget Notification"
MAX_BODY_BYTES = 1 << 16
TIMEOUT_SECONDS = 30
"""One ARM call's time limit."""
TIMER_SECONDS, ALERT_SECONDS, MARGIN_SECONDS = 600, 230, 30
"""The timer's time limit (host.json functionTimeout, checked by a test) and the alert's (230 s, the most an
HTTP-triggered function has to answer whatever the timeout: learn.microsoft.com azure-functions/functions-scale,
"Function app timeout duration"), less what is kept for the summary."""
MAX_INSTANCE_IDS = 1000
"""Instance ids in one deallocate call: a scale set holds at most 1,000 VMs
(learn.microsoft.com virtual-machine-scale-sets/virtual-machine-scale-sets-placement-groups)."""

logger = logging.getLogger("goldenenv.stopfn")


class ApiError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, message: str):
        super().__init__(f"{method} {url.split('?')[0]}: HTTP {status}: {message}")
        self.status = status

    @property
    def transient(self) -> bool:
        """No answer, a timeout, throttling or a server error: worth trying again."""
        return self.status in (0, 408, 429) or self.status >= 500


def transient(error: BaseException) -> bool:
    """The stop core's classifier: ARM throttling (429), a timeout, a server error or no answer."""
    return isinstance(error, ApiError) and error.transient


def timer_clock() -> stopcore.Clock:
    return stopcore.Clock(TIMER_SECONDS, margin_seconds=MARGIN_SECONDS)


def alert_clock() -> stopcore.Clock:
    return stopcore.Clock(ALERT_SECONDS, margin_seconds=MARGIN_SECONDS)


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

    def pages(self, path: str, clock: stopcore.Clock, query: dict[str, str] | None = None,
              api_version: str = COMPUTE_API_VERSION) -> list[dict[str, Any]]:
        """Every item of a list, following nextLink, each page retried; stopcore.ListingIncomplete when one never
        comes."""

        def page(target: str | None) -> tuple[list[dict[str, Any]], str | None]:
            answer, _ = self.call("GET", target or path, None if target else query, api_version=api_version)
            return ([item for item in answer.get("value") or [] if isinstance(item, dict)],
                    answer.get("nextLink") or None)

        return stopcore.all_pages(page, clock, transient, path.rsplit("/", 1)[-1])

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
    provisioning: str | None = None
    started: datetime | None = None
    computer_name: str | None = None

    @property
    def label(self) -> str:
        return f"{self.scale_set.get('name')}/{self.instance_id}" if self.scale_set else str(self.name)

    @property
    def allocated(self) -> bool:
        return self.power not in DEALLOCATED

    @property
    def state(self) -> str:
        """The stop core's state class. A powered-off (stopped) VM still holds its allocation and bills: live."""
        if self.power == "PowerState/deallocated":
            return stopcore.STOPPED
        if self.power == "PowerState/deallocating":
            return stopcore.STOPPING
        creating = (self.provisioning or "").lower() == CREATING.lower()
        if self.power == STARTING_POWER or (self.power is None and creating):
            return stopcore.STARTING
        return stopcore.LIVE


def _timestamp(value: Any) -> datetime | None:
    if not value:
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _node(name: str, resource_id: str, properties: dict[str, Any], view: dict[str, Any], **extra: Any) -> Node:
    statuses = [s for s in view.get("statuses") or [] if isinstance(s, dict)]
    power = next((str(s["code"]) for s in statuses if str(s.get("code", "")).startswith("PowerState/")), None)
    provisioning = next((str(s["code"]) for s in statuses if str(s.get("code", "")).startswith("ProvisioningState/")),
                        None)
    provisioned = [t for t in (_timestamp(s.get("time")) for s in statuses
                               if str(s.get("code", "")).startswith("ProvisioningState/")) if t]
    started = max(provisioned) if provisioned else _timestamp(properties.get("timeCreated"))
    return Node(name=name, resource_id=resource_id, power=power, provisioning=provisioning, started=started,
                computer_name=view.get("computerName") or (properties.get("osProfile") or {}).get("computerName"),
                **extra)


def stack_scale_sets(api: Arm, subscription: str, group: str, project: str, stack: str,
                     clock: stopcore.Clock) -> list[dict[str, Any]]:
    path = (f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/"
            "virtualMachineScaleSets")
    return [s for s in api.pages(path, clock) if is_stack(s, project, stack)]


def scale_set_nodes(api: Arm, scale_set: dict[str, Any], clock: stopcore.Clock) -> list[Node]:
    """The scale set's instances with their instance views (one list, every page)."""
    nodes = []
    for vm in api.pages(f"{scale_set['id']}/virtualMachines", clock, {"$expand": "instanceView"}):
        properties = vm.get("properties") or {}
        nodes.append(_node(str(vm.get("name")), str(vm.get("id")), properties, properties.get("instanceView") or {},
                           scale_set=scale_set, instance_id=str(vm.get("instanceId"))))
    return nodes


def stack_vm_nodes(api: Arm, subscription: str, group: str, project: str, stack: str,
                   clock: stopcore.Clock) -> list[Node]:
    """The group's standalone VMs (the head) with the stack's tags, each with its instance view."""
    path = f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines"
    nodes = []
    for vm in api.pages(path, clock):
        if is_stack(vm, project, stack):
            try:
                view, _ = stopcore.retry(lambda: api.call("GET", f"{vm['id']}/instanceView"), transient, clock)
            except ApiError as error:
                raise stopcore.ListingIncomplete(f"the instance view of {vm.get('name')}: {error}") from error
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

Verdict = stopcore.Verdict


def judge_budget(budget: dict[str, Any], *, currency: str, deployed_limit: float | None) -> Verdict:
    """Whether the month's spend is at or over the limit. Fails closed: a budget that answers but cannot be judged
    (no properties, a spend or amount that is not a finite number, a spend in another currency) is over it."""
    properties = budget.get("properties") if isinstance(budget, dict) else None
    if not isinstance(properties, dict):
        return Verdict(True, "the budget cannot be read (it has no properties): treated as over the limit", True)
    spend = properties.get("currentSpend")
    spend = spend if isinstance(spend, dict) else {}
    return stopcore.judge_spend(spend.get("amount"), properties.get("amount"), currency=currency,
                                cost_currency=spend.get("unit"), deployed_limit=deployed_limit, what="the budget",
                                cost_name="properties.currentSpend.amount", budget_name="properties.amount")


def read_budget(api: Arm, subscription: str, name: str, *, currency: str, deployed_limit: float | None,
                clock: stopcore.Clock | None = None) -> Verdict:
    """The budget's verdict, the call retried on throttling and transient errors. Raises ApiError when ARM did not
    answer with the budget; an answer that cannot be judged is an unreadable Verdict (stop)."""
    path = f"/subscriptions/{subscription}/providers/Microsoft.Consumption/budgets/{name}"
    budget, _ = stopcore.retry(lambda: api.call("GET", path, api_version=CONSUMPTION_API_VERSION), transient,
                               clock or timer_clock())
    return judge_budget(budget, currency=currency, deployed_limit=deployed_limit)


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
    return stopcore.ttl_due(node.started, ttl_hours, now, "its last start or change")


def cpu_series(api: Arm, resource_id: str, minutes: int, now: datetime, split: bool,
               clock: stopcore.Clock | None = None) -> dict[str, list[float]]:
    """5-minute average Percentage CPU over the last `minutes`, per VMName (lowercase; "" when not split)."""
    query = {
        "metricnames": CPU_METRIC,
        "timespan": f"{(now - timedelta(minutes=minutes)):%Y-%m-%dT%H:%M:%SZ}/{now:%Y-%m-%dT%H:%M:%SZ}",
        "interval": f"PT{IDLE_PERIOD_MINUTES}M",
        "aggregation": "Average",
        **({"$filter": "VMName eq '*'"} if split else {}),
    }
    answer, _ = stopcore.retry(lambda: api.call("GET", f"{resource_id}/providers/Microsoft.Insights/metrics", query,
                                                api_version=METRICS_API_VERSION), transient, clock or timer_clock())
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
    return stopcore.idle_due(values, idle_minutes, IDLE_PERIOD_MINUTES, threshold, " %")


# ---------------------------------------------------------------- one invocation

@dataclass
class Report:
    mode: str
    deallocated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Every node not deallocated that should be (failed, or still starting), every listing or budget read that
    failed: what fails the invocation."""


@dataclass
class Context:
    api: Arm
    subscription: str
    group: str
    project: str
    stack: str
    report: Report
    clock: stopcore.Clock

    @property
    def prefix(self) -> str:
        return f"project={self.project} stack={self.stack} {self.report.mode}:"


def _context(mode: str, env: dict[str, str], api: Arm | None, clock: stopcore.Clock) -> Context:
    return Context(api or Arm(env), env[SUBSCRIPTION_ENV], env[RESOURCE_GROUP_ENV], env[PROJECT_ENV],
                   env[STACK_ENV], Report(mode), clock)


def _fail(ctx: Context, message: str) -> None:
    ctx.report.failed.append(message)
    logger.error("%s %s", ctx.prefix, message)


def _nodes(ctx: Context) -> list[Node]:
    """The stack's scale-set instances and VMs, every page; stopcore.ListingIncomplete when a listing failed."""
    sets = stack_scale_sets(ctx.api, ctx.subscription, ctx.group, ctx.project, ctx.stack, ctx.clock)
    instances = [n for s in sets for n in scale_set_nodes(ctx.api, s, ctx.clock)]
    return instances + stack_vm_nodes(ctx.api, ctx.subscription, ctx.group, ctx.project, ctx.stack, ctx.clock)


def _listing(ctx: Context) -> list[Node] | None:
    """The stack's nodes; None (and a failure) when a listing cannot be completed: never read as "no nodes"."""
    try:
        return _nodes(ctx)
    except stopcore.ListingIncomplete as error:
        _fail(ctx, f"cannot list the stack's VMs: {error}")
        return None


def stop_plan(ctx: Context) -> stopcore.StopPlan[Node]:
    """ARM's calls for the stop core: one deallocate per scale set (its instances' ids), one per VM."""

    def refresh(waiting: list[Node]) -> list[Node]:
        wanted = {n.label for n in waiting}
        return [n for n in _nodes(ctx) if n.label in wanted]

    return stopcore.StopPlan(
        name=lambda n: n.label, state=lambda n: n.state,
        stop=lambda batch: deallocate(ctx.api, batch[0].scale_set, batch),
        transient=transient, refresh=refresh,
        group=lambda n: str(n.scale_set["id"]) if n.scale_set else n.resource_id,
        batch_size=MAX_INSTANCE_IDS)


def _deallocate(ctx: Context, nodes: list[Node], reasons: dict[str, str]) -> None:
    outcome = stopcore.stop_every(nodes, stop_plan(ctx), ctx.clock, lambda n: reasons[n.label])
    for line in outcome.lines(ctx.prefix, "deallocate"):
        level = logging.WARNING if f"{ctx.prefix} deallocate " in line else (
            logging.INFO if f"{ctx.prefix} leave " in line else logging.ERROR)
        logger.log(level, "%s", line)
    ctx.report.deallocated += [o.node for o in outcome.stopped]
    ctx.report.failed += outcome.problems()


def _hard_stop(ctx: Context, reason: str) -> None:
    nodes = _listing(ctx)
    if nodes is not None:
        _deallocate(ctx, nodes, {n.label: f"hard stop: {reason}" for n in nodes})


def _hard_stop_on(env: dict[str, str]) -> bool:
    return stopcore.flag(env.get(HARD_STOP_ENV))


def _budget(ctx: Context, env: dict[str, str]) -> Verdict:
    return read_budget(ctx.api, ctx.subscription, env[BUDGET_NAME_ENV], currency=env.get(CURRENCY_ENV, "USD"),
                       deployed_limit=stopcore.positive(env.get(BUDGET_LIMIT_ENV)), clock=ctx.clock)


def run_alert(body: bytes, env: dict[str, str], now: datetime, api: Arm | None = None,
              clock: stopcore.Clock | None = None) -> Report:
    """Handle one call of the budget's action group (see the module's docstring)."""
    ctx = _context("alert", env, api, clock or alert_clock())
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
        _fail(ctx, f"cannot read the budget {ours} ({error}): nothing is deallocated on an untrusted call; the next "
                   "timer run reads the budget again")
        return ctx.report
    _log_verdict(ctx, verdict)
    if verdict.stop:
        _hard_stop(ctx, verdict.reason)
    _summary(ctx)
    return ctx.report


def _log_verdict(ctx: Context, verdict: Verdict) -> None:
    """The budget's verdict, one line: ERROR when it could not be judged, WARNING when it stops the stack."""
    if verdict.unreadable:
        logger.error("%s %s", ctx.prefix, verdict.reason)
    else:
        logger.log(logging.WARNING if verdict.stop else logging.INFO, "%s %s", ctx.prefix, verdict.reason)


def run_timer(env: dict[str, str], now: datetime, api: Arm | None = None,
              clock: stopcore.Clock | None = None) -> Report:
    """The 15-minute run: the hard stop while the month is over the limit, then the time to live and idle stop."""
    ctx = _context("timer", env, api, clock or timer_clock())
    if _hard_stop_on(env):
        try:
            verdict = _budget(ctx, env)
        except ApiError as error:
            _fail(ctx, f"the budget cannot be read ({error}): nothing is stopped for the budget until it can be")
        else:
            _log_verdict(ctx, verdict)
            if verdict.stop:
                _hard_stop(ctx, verdict.reason)
                _summary(ctx)
                return ctx.report
    ttl, idle = stopcore.positive(env.get(TTL_HOURS_ENV)), stopcore.positive(env.get(IDLE_MINUTES_ENV))
    if ttl or idle:
        _reap(ctx, ttl, int(idle) if idle else None,
              stopcore.positive(env.get(IDLE_CPU_PERCENT_ENV)) or DEFAULT_IDLE_CPU_PERCENT, now)
    _summary(ctx)
    return ctx.report


def _reap(ctx: Context, ttl: float | None, idle: int | None, threshold: float, now: datetime) -> None:
    nodes = _listing(ctx)
    if nodes is None:
        return
    due: dict[str, str] = {}
    running_left = False
    by_set: dict[str, list[Node]] = {}
    for node in nodes:
        if node.scale_set:
            by_set.setdefault(str(node.scale_set["id"]), []).append(node)
    series_of: dict[str, dict[str, list[float]]] = {}
    for node in [n for n in nodes if n.scale_set]:
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
            key = str(node.scale_set["id"])
            if key not in series_of:
                try:
                    series_of[key] = cpu_series(ctx.api, key, idle, now, split=True, clock=ctx.clock)
                except ApiError as error:
                    _fail(ctx, f"SKIPPED idle check of {node.scale_set.get('name')}: {error}")
                    series_of[key] = {}
            series = series_of[key]
            running = [n for n in by_set[key] if n.power == RUNNING]
            values = series.get(node.name.lower()) or series.get((node.computer_name or "").lower())
            if values is None and len(running) == 1 and set(series) == {""}:
                values = series[""]
            reason = idle_reason(values, idle, threshold)
        if reason:
            due[node.label] = reason
        else:
            running_left = running_left or node.power == RUNNING
            logger.info("%s keep %s", ctx.prefix, node.label)
    for vm in [n for n in nodes if not n.scale_set]:
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
            due[vm.label] = reason
        else:
            logger.info("%s keep %s", ctx.prefix, vm.label)
    _deallocate(ctx, [n for n in nodes if n.label in due], due)


def _summary(ctx: Context) -> None:
    logger.info("%s %d deallocated, %d failed or waiting", ctx.prefix, len(ctx.report.deallocated),
                len(ctx.report.failed))


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handle_alert(body: bytes) -> tuple[int, dict[str, Any]]:
    """The HTTP entry point's work: status 500 when the budget could not be read, a listing or a deallocation
    failed, or a node is still starting: the stop-failure alert emails the contacts, and the caller may retry."""
    report = run_alert(body[:MAX_BODY_BYTES], dict(os.environ), utc_now())
    status = 500 if report.failed else 200
    return status, {"mode": report.mode, "deallocated": report.deallocated, "failed": report.failed}


def handle_timer() -> None:
    """The timer entry point's work: raises, naming each node, when a listing, a budget read or a deallocation
    failed or a node is still starting."""
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
        if status >= 500:
            # the host counts an HTTP invocation as failed (requests/failed, the stop-failure alert's metric) only
            # when it raises; a returned 500 counts as a success (Azure/azure-functions-host#6511)
            raise RuntimeError(json.dumps(answer))
        return func.HttpResponse(json.dumps(answer), status_code=status, mimetype="application/json")

    @app.function_name(name=TIMER_FUNCTION)
    @app.timer_trigger(schedule=SCHEDULE, arg_name="timer", run_on_startup=False, use_monitor=True)
    def reaper(timer: Any) -> None:
        handle_timer()
