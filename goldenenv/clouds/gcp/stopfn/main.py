"""The stack's stop function on Google Cloud: the budget's hard stop, and the time to live and idle stop.

It runs as a Cloud Functions (2nd gen) function on the stack's Pub/Sub topic, so a cluster is stopped with the
laptop off. This folder is shipped alone as the function's code: standard library only (functions-framework,
which the runtime installs, only registers the entry point), every call a plain REST request with the function's
own access token from the metadata server. The label keys are written here again; a unit test checks them
against goldenenv.spec and goldenenv.clouds.gcp.labels, so the fact still has one owner.

Two kinds of message arrive on the topic:

- **The budget's** (Cloud Billing, https://cloud.google.com/billing/docs/how-to/budgets-programmatic-notifications):
  base64 JSON with costAmount, budgetAmount, currencyCode, budgetDisplayName, costIntervalStart. Google sends one
  several times a day whatever the thresholds, with the month-to-date cost, so the handler is idempotent: with the
  hard stop on, every message whose cost is at or over the limit stops the stack's nodes still live
  (PROVISIONING, STAGING, RUNNING); a node already STOPPING or TERMINATED is left alone, so a repeated message
  stops nothing twice. The hard stop therefore lasts while messages say the month is over the limit: a node
  started again by hand is stopped by the next message; the stop ends with the month (Google's month starts at
  midnight US Pacific time, and a message about a past month is ignored), or when `up` raises the budget: the
  limit is the larger of the message's budgetAmount and the limit the function was deployed with
  (GOLDENENV_BUDGET_LIMIT), so a message sent before the raise does not stop nodes the raise let run.
  Fail closed, as Alibaba Cloud's guard does: a message that cannot be read (not base64 JSON, a cost or budget
  that is missing, not a number, NaN or infinite, a currency other than the stack's) counts as over the limit:
  the nodes are stopped and the reason logged at ERROR.
- **The schedule's** (Cloud Scheduler, every 15 minutes, attribute ``goldenenv_mode=reaper``): the time to live
  and the idle stop, as the AWS reaper and idle alarms do. A node expires at its last start plus
  GOLDENENV_TTL_HOURS: lastStartTimestamp, like EC2's LaunchTime that the AWS reaper counts from, so a node started
  again by hand after a stop gets a fresh time to live (creationTimestamp when it has never started). A node is
  idle when its CPU stayed under min(5 %, half a core) for GOLDENENV_IDLE_MINUTES, the AWS threshold
  (teardown.idle_cpu_threshold): Cloud Monitoring's compute.googleapis.com/instance/cpu/utilization needs no
  agent, whereas GPU utilisation reaches Cloud Monitoring only through the Ops Agent, which the nodes do not run.
  Missing data is not idleness (the AWS alarms' notBreaching), and a node up for less than the idle time is kept.

A node is the stack's only when both its goldenenv_stack and its project labels match (two projects may each
have a stack ``dev`` in one Google Cloud project); the listing filters on both, and each node is checked again
here. The shared rules are the stop core's (stopcore.py, shipped beside this file): every REST call is retried
with backoff and jitter on throttling and transient errors (HTTP 429, 403 rateLimitExceeded, 5xx, no answer)
while the invocation's time allows; every page of aggregatedList is read, and a page that never comes fails the
invocation (a partial listing is never "no nodes"); one node's failed stop never holds back the others. Compute
Engine's documentation does not say whether it accepts a stop while a VM is PROVISIONING or STAGING, so the
function asks: a refusal that says the VM is not ready yet (resourceNotReady) makes it a starting node, as a
PENDING (flex-start) or REPAIRING one is: watched within the invocation and stopped once it runs, else named as
waiting and stopped by the next message. One log line per node, as JSON with a severity Cloud Logging reads;
never a token. A node failed or still waiting makes the invocation raise after the rest is done, so Eventarc
delivers the message again (the handler is idempotent).
"""

from __future__ import annotations

import base64
import json
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

STACK_LABEL_KEY = "goldenenv_stack"
"""goldenenv.spec.STACK_TAG_KEY as a Google Cloud label (checked by a test)."""
PROJECT_LABEL_KEY = "project"

GCP_PROJECT_ENV = "GOLDENENV_GCP_PROJECT"
GCP_PROJECT_NUMBER_ENV = "GOLDENENV_GCP_PROJECT_NUMBER"
"""Set by the program: the project number the budget filters on, which the guardrails compare; not read here."""
STACK_ENV = "GOLDENENV_STACK"
"""The stack label's value on the nodes."""
PROJECT_ENV = "GOLDENENV_PROJECT"
"""The project label's value on the nodes."""
HARD_STOP_ENV = "GOLDENENV_HARD_STOP"
BUDGET_LIMIT_ENV = "GOLDENENV_BUDGET_LIMIT"
"""The monthly limit the stack was deployed with: a message's smaller budgetAmount (sent before `up` raised the
budget) does not stop nodes the raise let run."""
CURRENCY_ENV = "GOLDENENV_CURRENCY"
TTL_HOURS_ENV = "GOLDENENV_TTL_HOURS"
IDLE_MINUTES_ENV = "GOLDENENV_IDLE_MINUTES"
METADATA_URL_ENV = "GOLDENENV_METADATA_URL"
COMPUTE_URL_ENV = "GOLDENENV_COMPUTE_URL"
MONITORING_URL_ENV = "GOLDENENV_MONITORING_URL"
"""Base URLs, overridden by the tests only (a local fake of the APIs); the deployed function uses the defaults."""
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1"
COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
MONITORING_URL = "https://monitoring.googleapis.com/v3"

MODE_ATTRIBUTE = "goldenenv_mode"
REAPER_MODE = "reaper"
"""The schedule's messages carry this attribute; every other message is read as the budget's."""
STATE_CLASSES = {
    "RUNNING": stopcore.LIVE, "PROVISIONING": stopcore.LIVE, "STAGING": stopcore.LIVE,
    "PENDING": stopcore.STARTING, "REPAIRING": stopcore.STARTING,
    "STOPPING": stopcore.STOPPING, "SUSPENDING": stopcore.STOPPING, "PENDING_STOP": stopcore.STOPPING,
    "TERMINATED": stopcore.STOPPED, "STOPPED": stopcore.STOPPED, "SUSPENDED": stopcore.STOPPED,
}
"""Compute Engine's instance statuses (Instance.status, Compute Engine API v1; instance life cycle,
https://cloud.google.com/compute/docs/instances/instance-life-cycle) by the stop core's state class. A stop is
asked of PROVISIONING and STAGING VMs; one refused as not ready yet is watched like a PENDING one. A status this
table does not know is treated as live: a stop is asked, never silently skipped."""
DISCARD_LOCAL_SSD = "discardLocalSsd"
"""instances.stop's query parameter (Compute Engine API v1): required on a VM with Local SSD."""
CPU_METRIC = "compute.googleapis.com/instance/cpu/utilization"
IDLE_PERIOD_SECONDS = 300
PACIFIC = stopcore.PACIFIC
"""Budget months begin at 12 AM US and Canadian Pacific Time (UTC-8) (Cloud Billing Budget API reference)."""
TIMEOUT_SECONDS = 30
"""One REST call's time limit."""
INVOCATION_SECONDS, MARGIN_SECONDS = 540, 30
"""The function's time limit (goldenenv.clouds.gcp.budget.TIMEOUT_SECONDS, checked by a test) and what is kept of
it for the summary: retries and waits for starting nodes end before it."""
THROTTLED_REASONS = ("rateLimitExceeded", "userRateLimitExceeded")
"""403 reasons of a rate quota (https://cloud.google.com/compute/api-quota: "a 403 error with the reason
rateLimitExceeded"); 429 RESOURCE_EXHAUSTED is the other form."""
NOT_READY_REASON = "resourceNotReady"
"""Compute Engine's error reason for an operation on a resource that is not ready for it yet."""


class ApiError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, message: str, reason: str = ""):
        super().__init__(f"{method} {url.split('?')[0]}: HTTP {status}: {message}")
        self.status = status
        self.reason = reason


def http_error(method: str, url: str, status: int, body: bytes) -> ApiError:
    """The ApiError of an HTTP error answer, with Google's error reason when the body gives one."""
    message, reason = _error_message(body)
    return ApiError(method, url, status, message, reason)


def transient(error: BaseException) -> bool:
    """Throttling, a server error or no answer: worth trying again within the invocation."""
    if not isinstance(error, ApiError):
        return False
    return (error.status in (0, 408, 429) or error.status >= 500
            or (error.status == 403 and error.reason in THROTTLED_REASONS))


def not_ready(error: BaseException) -> bool:
    """Compute Engine refused the stop because the VM is not ready for it yet (still starting)."""
    return isinstance(error, ApiError) and error.reason == NOT_READY_REASON


def log(severity: str, message: str) -> None:
    """One line, JSON, so Cloud Logging keeps the severity."""
    print(json.dumps({"severity": severity, "message": message}), flush=True)


def new_clock() -> stopcore.Clock:
    """This invocation's time."""
    return stopcore.Clock(INVOCATION_SECONDS, margin_seconds=MARGIN_SECONDS)


# ---------------------------------------------------------------- the APIs

class Google:
    """The metadata server, Compute Engine and Cloud Monitoring, as the function's service account."""

    def __init__(self, env: dict[str, str]):
        self.metadata = env.get(METADATA_URL_ENV) or METADATA_URL
        self.compute = env.get(COMPUTE_URL_ENV) or COMPUTE_URL
        self.monitoring = env.get(MONITORING_URL_ENV) or MONITORING_URL
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            answer = self._request("GET", f"{self.metadata}/instance/service-accounts/default/token",
                                   {"Metadata-Flavor": "Google"})
            self._token = str(answer["access_token"])
        return self._token

    def call(self, method: str, url: str) -> dict[str, Any]:
        return self._request(method, url, {"Authorization": f"Bearer {self.token()}"})

    @staticmethod
    def _request(method: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
        extra = {"Content-Type": "application/json"} if method == "POST" else {}
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None,
                                         headers={**headers, **extra, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise http_error(method, url, error.code, error.read()) from None
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(method, url, 0, str(getattr(error, "reason", error))) from None
        try:
            answer = json.loads(body or b"{}")
        except ValueError:
            raise ApiError(method, url, 200, "the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise ApiError(method, url, 200, "the answer is not a JSON object")
        return answer


def _error_message(body: bytes) -> tuple[str, str]:
    """Google's error body ({"error": {"code", "message", "status", "errors": [{"reason"}]}}) as one line, and its
    first reason; the raw text and no reason otherwise."""
    try:
        error = json.loads(body)["error"]
        reasons = [e.get("reason") for e in error.get("errors") or [] if isinstance(e, dict)]
        return f"{error.get('status') or error.get('code')}: {error.get('message')}", str(reasons[0] if reasons else "")
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return body.decode("utf-8", "replace")[:300], ""


def zone_of(instance: dict[str, Any]) -> str:
    return str(instance.get("zone", "")).rstrip("/").rsplit("/", 1)[-1]


def node_name(instance: dict[str, Any]) -> str:
    return f"{zone_of(instance)}/{instance.get('name')}"


def is_stack(instance: dict[str, Any], project: str, stack: str) -> bool:
    labels = instance.get("labels") or {}
    if not isinstance(labels, dict):
        return False
    return labels.get(STACK_LABEL_KEY) == stack and labels.get(PROJECT_LABEL_KEY) == project


def stack_instances(api: Google, gcp_project: str, project: str, stack: str,
                    clock: stopcore.Clock | None = None) -> list[dict[str, Any]]:
    """Every instance of the stack in the project, all zones and pages (instances.aggregatedList), filtered on both
    labels by the API and checked again here. Each page is retried; stopcore.ListingIncomplete when one never
    comes."""
    query = {"filter": f'(labels.{STACK_LABEL_KEY} = "{stack}") (labels.{PROJECT_LABEL_KEY} = "{project}")',
             "maxResults": "500"}

    def page(token: str | None) -> tuple[list[dict[str, Any]], str | None]:
        answer = api.call("GET", f"{api.compute}/projects/{gcp_project}/aggregated/instances?"
                                 f"{urllib.parse.urlencode(dict(query, **({'pageToken': token} if token else {})))}")
        found = [instance for scoped in (answer.get("items") or {}).values() if isinstance(scoped, dict)
                 for instance in scoped.get("instances") or [] if isinstance(instance, dict)]
        return [i for i in found if is_stack(i, project, stack)], answer.get("nextPageToken") or None

    return stopcore.all_pages(page, clock or new_clock(), transient, "instances.aggregatedList")


def stop_instance(api: Google, gcp_project: str, instance: dict[str, Any]) -> dict[str, Any]:
    """instances.stop with discardLocalSsd=true; returns the zonal operation Compute Engine started.

    Compute Engine refuses to stop a VM with Local SSD unless the call says what becomes of it (HTTP 400 "VM has a
    Local SSD attached but an undefined value for `discard-local-ssd`"; gcloud compute instances stop: "If a VM has
    any attached Local SSD disks, you must use the --discard-local-ssd flag"), and A3, A4 and A2 Ultra nodes all
    have Local SSD. It is discarded: it holds /scratch only, which a node never keeps across a stop, and preserving
    it bills and is limited (https://cloud.google.com/compute/docs/disks/local-ssd#stop_instance). The parameter
    is accepted on a VM without Local SSD too, so every stop path sends it."""
    query = urllib.parse.urlencode({DISCARD_LOCAL_SSD: "true"})
    return api.call("POST", f"{api.compute}/projects/{gcp_project}/zones/{zone_of(instance)}/instances/"
                            f"{urllib.parse.quote(str(instance['name']))}/stop?{query}")


def state_class(instance: dict[str, Any]) -> str:
    return STATE_CLASSES.get(str(instance.get("status")), stopcore.LIVE)


def stop_plan(api: Google, gcp_project: str, project: str, stack: str,
              clock: stopcore.Clock) -> stopcore.StopPlan[dict[str, Any]]:
    """Compute Engine's calls for the stop core: one instances.stop per VM (there is no batch stop)."""

    def refresh(waiting: list[dict[str, Any]]) -> list[dict[str, Any]]:
        wanted = {node_name(i) for i in waiting}
        return [i for i in stack_instances(api, gcp_project, project, stack, clock) if node_name(i) in wanted]

    return stopcore.StopPlan(name=node_name, state=state_class,
                             stop=lambda batch: [stop_instance(api, gcp_project, i) for i in batch],
                             transient=transient, refresh=refresh, not_yet=not_ready, batch_size=1)


# ---------------------------------------------------------------- the budget's message

Verdict = stopcore.Verdict


def budget_month(moment: datetime) -> str:
    return stopcore.budget_month(moment, PACIFIC)


def judge_budget(data: Any, *, currency: str, deployed_limit: float | None, now: datetime) -> Verdict:
    """Whether a budget message calls for the hard stop. Fails closed: what cannot be read stops the nodes."""
    try:
        payload = json.loads(base64.b64decode(data or b"", validate=True))
        if not isinstance(payload, dict):
            raise ValueError("the message is not a JSON object")
    except (ValueError, TypeError) as problem:  # binascii.Error and JSONDecodeError are ValueErrors
        return Verdict(True, f"the budget message cannot be read ({problem}): treated as over the limit", True)
    verdict = stopcore.judge_spend(payload.get("costAmount"), payload.get("budgetAmount"), currency=currency,
                                   cost_currency=payload.get("currencyCode"), deployed_limit=deployed_limit,
                                   what="the budget message", cost_name="costAmount", budget_name="budgetAmount")
    if verdict.unreadable:
        return verdict
    started = payload.get("costIntervalStart")
    try:
        interval = budget_month(datetime.fromisoformat(str(started).replace("Z", "+00:00")) + timedelta(hours=12))
    except ValueError:
        interval = None
    if interval is not None and interval < budget_month(now):
        return Verdict(False, f"a message about {interval} (costIntervalStart {started}), a past month: ignored")
    return verdict


# ---------------------------------------------------------------- the schedule's message

def _timestamp(value: Any) -> datetime:
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} carries no time zone")
    return moment


def ttl_reason(instance: dict[str, Any], ttl_hours: float, now: datetime) -> str | None:
    """Why an expired node is due; None while it has time left. Raises ValueError when no start can be read."""
    key = "lastStartTimestamp" if instance.get("lastStartTimestamp") else "creationTimestamp"
    return stopcore.ttl_due(_timestamp(instance.get(key)), ttl_hours, now, key)


def idle_threshold(vcpus: int) -> float:
    """The idle CPU utilisation as a fraction: min(5 %, half a core)."""
    return stopcore.idle_cpu_percent(vcpus) / 100.0


def idle_reason(api: Google, gcp_project: str, instance: dict[str, Any], idle_minutes: int,
                now: datetime, clock: stopcore.Clock | None = None) -> str | None:
    """Why a node is idle (every 5-minute mean CPU of the last idle_minutes under the threshold, the window covered);
    None when it is not, or cannot be known yet."""
    clock = clock or new_clock()
    started = _timestamp(instance.get("lastStartTimestamp") or instance.get("creationTimestamp"))
    if now - started < timedelta(minutes=idle_minutes):
        return None
    machine = str(instance.get("machineType", "")).rstrip("/").rsplit("/", 1)[-1]
    vcpus = int(stopcore.retry(lambda: api.call(
        "GET", f"{api.compute}/projects/{gcp_project}/zones/{zone_of(instance)}/machineTypes/{machine}"),
        transient, clock).get("guestCpus") or 1)
    threshold = idle_threshold(vcpus)
    query = {
        "filter": f'metric.type = "{CPU_METRIC}" AND resource.labels.instance_id = "{instance.get("id")}"',
        "interval.startTime": (now - timedelta(minutes=idle_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "interval.endTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "aggregation.alignmentPeriod": f"{IDLE_PERIOD_SECONDS}s",
        "aggregation.perSeriesAligner": "ALIGN_MEAN",
    }
    answer = stopcore.retry(lambda: api.call(
        "GET", f"{api.monitoring}/projects/{gcp_project}/timeSeries?{urllib.parse.urlencode(query)}"),
        transient, clock)
    points = [p for series in answer.get("timeSeries") or [] for p in series.get("points") or []]
    values = [(p.get("value") or {}).get("doubleValue") for p in points]
    percents = [100.0 * v if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in values]
    reason = stopcore.idle_due(percents, idle_minutes, IDLE_PERIOD_SECONDS / 60, 100.0 * threshold, " %")
    return f"{reason} ({vcpus} vCPUs)" if reason else None


# ---------------------------------------------------------------- one message

@dataclass
class Report:
    mode: str
    stopped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Every node not stopped that should be (failed, or still starting), and every listing or judgement that
    failed: what makes the invocation raise."""


def _stop(api: Google, gcp_project: str, project: str, stack: str, instances: list[dict[str, Any]],
          reasons: dict[str, str], report: Report, prefix: str, clock: stopcore.Clock) -> None:
    outcome = stopcore.stop_every(instances, stop_plan(api, gcp_project, project, stack, clock), clock,
                                  lambda i: reasons[node_name(i)])
    for line in outcome.lines(prefix):
        log("NOTICE" if f"{prefix} stop " in line else "INFO" if f"{prefix} leave " in line else "ERROR", line)
    report.stopped += [o.node for o in outcome.stopped]
    report.failed += outcome.problems()


def run(message: dict[str, Any], env: dict[str, str], now: datetime, api: Google | None = None,
        clock: stopcore.Clock | None = None) -> Report:
    """Handle one Pub/Sub message ({"data": base64, "attributes": {...}}) at ``now``."""
    api = api or Google(env)
    clock = clock or new_clock()
    gcp_project, project, stack = env[GCP_PROJECT_ENV], env[PROJECT_ENV], env[STACK_ENV]
    attributes = message.get("attributes") or {}
    mode = REAPER_MODE if attributes.get(MODE_ATTRIBUTE) == REAPER_MODE else "budget"
    prefix = f"project={project} stack={stack} {mode}:"
    report = Report(mode)
    if mode == "budget":
        if not stopcore.flag(env.get(HARD_STOP_ENV)):
            log("INFO", f"{prefix} the hard stop is off: nothing to do")
            return report
        verdict = judge_budget(message.get("data"), currency=env.get(CURRENCY_ENV, "USD"),
                               deployed_limit=stopcore.positive(env.get(BUDGET_LIMIT_ENV)), now=now)
        log("ERROR" if verdict.unreadable else "WARNING" if verdict.stop else "INFO", f"{prefix} {verdict.reason}")
        if not verdict.stop:
            return report
        instances = _listing(api, gcp_project, project, stack, report, prefix, clock)
        _stop(api, gcp_project, project, stack, instances, {node_name(i): f"hard stop: {verdict.reason}"
                                                            for i in instances}, report, prefix, clock)
    else:
        ttl, idle = stopcore.positive(env.get(TTL_HOURS_ENV)), stopcore.positive(env.get(IDLE_MINUTES_ENV))
        due: dict[str, str] = {}
        instances = _listing(api, gcp_project, project, stack, report, prefix, clock)
        for instance in instances:
            name = node_name(instance)
            if state_class(instance) in (stopcore.STOPPING, stopcore.STOPPED):
                continue
            try:
                reason = (ttl_reason(instance, ttl, now) if ttl else None) or (
                    idle_reason(api, gcp_project, instance, int(idle), now, clock) if idle else None)
            except (ValueError, TypeError) as problem:
                report.failed.append(f"{name}: cannot be judged ({problem})")
                log("ERROR", f"{prefix} SKIPPED {name}: cannot be judged ({problem})")
                continue
            except ApiError as error:
                report.failed.append(f"{name}: {error}")
                log("ERROR", f"{prefix} SKIPPED {name}: its idleness cannot be read ({error})")
                continue
            if reason:
                due[name] = reason
            else:
                log("INFO", f"{prefix} keep {name}")
        _stop(api, gcp_project, project, stack, [i for i in instances if node_name(i) in due], due, report, prefix,
              clock)
    log("INFO", f"{prefix} {len(report.stopped)} stopped, {len(report.failed)} failed or waiting")
    return report


def _listing(api: Google, gcp_project: str, project: str, stack: str, report: Report, prefix: str,
             clock: stopcore.Clock) -> list[dict[str, Any]]:
    """The stack's nodes; none, and a failure that fails the invocation, when the listing cannot be completed."""
    try:
        return stack_instances(api, gcp_project, project, stack, clock)
    except stopcore.ListingIncomplete as error:
        report.failed.append(f"cannot list the stack's instances: {error}")
        log("ERROR", f"{prefix} cannot list the stack's instances, so none is known stopped: {error}")
        return []


def _message_of(event: Any) -> dict[str, Any]:
    """The Pub/Sub message of a CloudEvent (google.cloud.pubsub.topic.v1.messagePublished) or of its data dict."""
    data = getattr(event, "data", event)
    if isinstance(data, dict) and isinstance(data.get("message"), dict):
        return data["message"]
    return {}


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handle(cloud_event: Any) -> None:
    """The entry point. Raises when a listing or a stop failed, or a node is still starting, so Eventarc delivers
    the message again; the error names each node."""
    report = run(_message_of(cloud_event), dict(os.environ), utc_now())
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} problem(s): " + "; ".join(report.failed))


try:  # the Cloud Functions runtime provides it; registering the signature is all it is used for
    import functions_framework
except ImportError:
    pass
else:
    handle = functions_framework.cloud_event(handle)
