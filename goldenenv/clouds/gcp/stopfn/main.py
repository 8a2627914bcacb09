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
here. One log line per action, as JSON with a severity Cloud Logging reads; never a token. A stop or a listing
that fails raises after the rest is done, so Eventarc retries the message (the handler is idempotent).
"""

from __future__ import annotations

import base64
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

STACK_LABEL_KEY = "goldenenv_stack"
"""goldenenv.spec.STACK_TAG_KEY as a Google Cloud label (checked by a test)."""
PROJECT_LABEL_KEY = "project"

GCP_PROJECT_ENV = "GOLDENENV_GCP_PROJECT"
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
LIVE_STATES = ("PROVISIONING", "STAGING", "RUNNING")
DISCARD_LOCAL_SSD = "discardLocalSsd"
"""instances.stop's query parameter (Compute Engine API v1): required on a VM with Local SSD."""
CPU_METRIC = "compute.googleapis.com/instance/cpu/utilization"
IDLE_PERIOD_SECONDS = 300
IDLE_CPU_PERCENT_CAP = 5.0
IDLE_CORES = 0.5
"""Idle: under min(5 %, half a core) of CPU, as goldenenv.clouds.aws.teardown.idle_cpu_threshold."""
PACIFIC = timezone(timedelta(hours=-8))
"""Budget months begin at 12 AM US and Canadian Pacific Time (UTC-8) (Cloud Billing Budget API reference)."""
TIMEOUT_SECONDS = 30


class ApiError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, message: str):
        super().__init__(f"{method} {url.split('?')[0]}: HTTP {status}: {message}")
        self.status = status


def log(severity: str, message: str) -> None:
    """One line, JSON, so Cloud Logging keeps the severity."""
    print(json.dumps({"severity": severity, "message": message}), flush=True)


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
            raise ApiError(method, url, error.code, _error_message(error.read())) from None
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(method, url, 0, str(getattr(error, "reason", error))) from None
        try:
            answer = json.loads(body or b"{}")
        except ValueError:
            raise ApiError(method, url, 200, "the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise ApiError(method, url, 200, "the answer is not a JSON object")
        return answer


def _error_message(body: bytes) -> str:
    """Google's error body ({"error": {"code", "message", "status"}}) as one line; the raw text otherwise."""
    try:
        error = json.loads(body)["error"]
        return f"{error.get('status') or error.get('code')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return body.decode("utf-8", "replace")[:300]


def zone_of(instance: dict[str, Any]) -> str:
    return str(instance.get("zone", "")).rstrip("/").rsplit("/", 1)[-1]


def stack_instances(api: Google, gcp_project: str, project: str, stack: str) -> list[dict[str, Any]]:
    """Every instance of the stack in the project, all zones and pages (instances.aggregatedList), filtered on both
    labels by the API and checked again here."""
    query = {"filter": f'(labels.{STACK_LABEL_KEY} = "{stack}") (labels.{PROJECT_LABEL_KEY} = "{project}")',
             "maxResults": "500"}
    found, token = [], None
    while True:
        page = dict(query, **({"pageToken": token} if token else {}))
        answer = api.call("GET", f"{api.compute}/projects/{gcp_project}/aggregated/instances?"
                                 f"{urllib.parse.urlencode(page)}")
        for scoped in (answer.get("items") or {}).values():
            for instance in (scoped.get("instances") or []) if isinstance(scoped, dict) else []:
                labels = instance.get("labels") or {}
                if labels.get(STACK_LABEL_KEY) == stack and labels.get(PROJECT_LABEL_KEY) == project:
                    found.append(instance)
        token = answer.get("nextPageToken")
        if not token:
            return found


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


# ---------------------------------------------------------------- the budget's message

@dataclass(frozen=True)
class Verdict:
    stop: bool
    reason: str
    unreadable: bool = False
    """The message could not be read: stopped anyway (fail closed), logged at ERROR."""


def _amount(payload: dict[str, Any], key: str) -> float:
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{key} is {'missing' if value is None else repr(value)}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{key} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{key} is {value!r}, not a finite amount")
    return number


def budget_month(moment: datetime) -> str:
    return moment.astimezone(PACIFIC).strftime("%Y-%m")


def judge_budget(data: Any, *, currency: str, deployed_limit: float | None, now: datetime) -> Verdict:
    """Whether a budget message calls for the hard stop. Fails closed: what cannot be read stops the nodes."""
    try:
        payload = json.loads(base64.b64decode(data or b"", validate=True))
        if not isinstance(payload, dict):
            raise ValueError("the message is not a JSON object")
        cost, budget = _amount(payload, "costAmount"), _amount(payload, "budgetAmount")
        if budget <= 0:
            raise ValueError(f"budgetAmount {budget:g} is not a positive amount")
    except (ValueError, TypeError) as problem:  # binascii.Error and JSONDecodeError are ValueErrors
        return Verdict(True, f"the budget message cannot be read ({problem}): treated as over the limit", True)
    code = payload.get("currencyCode")
    if code != currency:
        return Verdict(True, f"the budget message is in {code!r}, the limit in {currency!r}: {cost:,.2f} cannot be "
                             "compared with the limit, so it is treated as over it", True)
    started = payload.get("costIntervalStart")
    try:
        interval = budget_month(datetime.fromisoformat(str(started).replace("Z", "+00:00")) + timedelta(hours=12))
    except ValueError:
        interval = None
    if interval is not None and interval < budget_month(now):
        return Verdict(False, f"a message about {interval} (costIntervalStart {started}), a past month: ignored")
    limit = max(budget, deployed_limit) if deployed_limit else budget
    raised = f" (the budget as deployed; the message says {budget:,.2f})" if limit > budget else ""
    spent = f"{cost:,.2f} {currency} of {limit:,.2f}{raised}"
    if cost >= limit:
        return Verdict(True, f"spend {spent}: at or over the limit")
    return Verdict(False, f"spend {spent}: under the limit")


# ---------------------------------------------------------------- the schedule's message

def _timestamp(value: Any) -> datetime:
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} carries no time zone")
    return moment


def ttl_reason(instance: dict[str, Any], ttl_hours: float, now: datetime) -> str | None:
    """Why an expired node is due; None while it has time left. Raises ValueError when no start can be read."""
    key = "lastStartTimestamp" if instance.get("lastStartTimestamp") else "creationTimestamp"
    started = _timestamp(instance.get(key))
    expires = started + timedelta(hours=ttl_hours)
    return f"time to live expired at {expires.isoformat()} ({ttl_hours:g} h after {key})" if now >= expires else None


def idle_threshold(vcpus: int) -> float:
    """The idle CPU utilisation as a fraction: min(5 %, half a core)."""
    return min(IDLE_CPU_PERCENT_CAP, 100.0 * IDLE_CORES / max(vcpus, 1)) / 100.0


def idle_reason(api: Google, gcp_project: str, instance: dict[str, Any], idle_minutes: int,
                now: datetime) -> str | None:
    """Why a node is idle (every 5-minute mean CPU of the last idle_minutes under the threshold, the window covered);
    None when it is not, or cannot be known yet."""
    started = _timestamp(instance.get("lastStartTimestamp") or instance.get("creationTimestamp"))
    if now - started < timedelta(minutes=idle_minutes):
        return None
    machine = str(instance.get("machineType", "")).rstrip("/").rsplit("/", 1)[-1]
    vcpus = int(api.call("GET", f"{api.compute}/projects/{gcp_project}/zones/{zone_of(instance)}/machineTypes/"
                                f"{machine}").get("guestCpus") or 1)
    threshold = idle_threshold(vcpus)
    query = {
        "filter": f'metric.type = "{CPU_METRIC}" AND resource.labels.instance_id = "{instance.get("id")}"',
        "interval.startTime": (now - timedelta(minutes=idle_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "interval.endTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "aggregation.alignmentPeriod": f"{IDLE_PERIOD_SECONDS}s",
        "aggregation.perSeriesAligner": "ALIGN_MEAN",
    }
    answer = api.call("GET", f"{api.monitoring}/projects/{gcp_project}/timeSeries?{urllib.parse.urlencode(query)}")
    points = [p for series in answer.get("timeSeries") or [] for p in series.get("points") or []]
    values = [float((p.get("value") or {}).get("doubleValue", math.nan)) for p in points]
    # the newest period may not be written yet (Monitoring samples each minute, shown up to 4 minutes later)
    needed = max(1, math.ceil(idle_minutes * 60 / IDLE_PERIOD_SECONDS) - 1)
    if len(values) < needed or not all(math.isfinite(v) and v < threshold for v in values):
        return None
    return (f"idle: CPU under {threshold:.1%} ({vcpus} vCPUs) for {idle_minutes} minutes "
            f"(highest 5-minute mean {max(values):.2%})")


# ---------------------------------------------------------------- one message

@dataclass
class Report:
    mode: str
    stopped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _stop(api: Google, gcp_project: str, instances: list[tuple[dict[str, Any], str]], report: Report,
          prefix: str) -> None:
    for instance, reason in instances:
        name = f"{zone_of(instance)}/{instance.get('name')}"
        try:
            operation = stop_instance(api, gcp_project, instance)
        except ApiError as error:
            report.failed.append(f"{name}: {error}")
            log("ERROR", f"{prefix} FAILED to stop {name} ({reason}): {error}")
            continue
        report.stopped.append(name)
        log("NOTICE", f"{prefix} stop {name} ({reason}); operation {operation.get('name', '?')}")


def run(message: dict[str, Any], env: dict[str, str], now: datetime, api: Google | None = None) -> Report:
    """Handle one Pub/Sub message ({"data": base64, "attributes": {...}}) at ``now``."""
    api = api or Google(env)
    gcp_project, project, stack = env[GCP_PROJECT_ENV], env[PROJECT_ENV], env[STACK_ENV]
    attributes = message.get("attributes") or {}
    mode = REAPER_MODE if attributes.get(MODE_ATTRIBUTE) == REAPER_MODE else "budget"
    prefix = f"project={project} stack={stack} {mode}:"
    report = Report(mode)
    if mode == "budget":
        if env.get(HARD_STOP_ENV, "false").strip().lower() != "true":
            log("INFO", f"{prefix} the hard stop is off: nothing to do")
            return report
        verdict = judge_budget(message.get("data"), currency=env.get(CURRENCY_ENV, "USD"),
                               deployed_limit=_positive(env.get(BUDGET_LIMIT_ENV)), now=now)
        log("ERROR" if verdict.unreadable else "WARNING" if verdict.stop else "INFO", f"{prefix} {verdict.reason}")
        if not verdict.stop:
            return report
        live = _listing(api, gcp_project, project, stack, report, prefix)
        _stop(api, gcp_project, [(i, f"hard stop: {verdict.reason}") for i in live], report, prefix)
    else:
        ttl, idle = _positive(env.get(TTL_HOURS_ENV)), _positive(env.get(IDLE_MINUTES_ENV))
        due = []
        for instance in _listing(api, gcp_project, project, stack, report, prefix):
            name = f"{zone_of(instance)}/{instance.get('name')}"
            try:
                reason = (ttl_reason(instance, ttl, now) if ttl else None) or (
                    idle_reason(api, gcp_project, instance, int(idle), now) if idle else None)
            except (ValueError, TypeError) as problem:
                report.failed.append(f"{name}: cannot be judged ({problem})")
                log("ERROR", f"{prefix} SKIPPED {name}: cannot be judged ({problem})")
                continue
            except ApiError as error:
                report.failed.append(f"{name}: {error}")
                log("ERROR", f"{prefix} SKIPPED {name}: its idleness cannot be read ({error})")
                continue
            if reason:
                due.append((instance, reason))
            else:
                log("INFO", f"{prefix} keep {name}")
        _stop(api, gcp_project, due, report, prefix)
    log("INFO", f"{prefix} {len(report.stopped)} stopped, {len(report.failed)} failed")
    return report


def _listing(api: Google, gcp_project: str, project: str, stack: str, report: Report,
             prefix: str) -> list[dict[str, Any]]:
    """The stack's live nodes; none (and a failure) when the listing fails."""
    try:
        instances = stack_instances(api, gcp_project, project, stack)
    except ApiError as error:
        report.failed.append(f"cannot list the stack's instances: {error}")
        log("ERROR", f"{prefix} cannot list the stack's instances: {error}")
        return []
    for instance in instances:
        if instance.get("status") not in LIVE_STATES:
            log("INFO", f"{prefix} leave {zone_of(instance)}/{instance.get('name')}: {instance.get('status')}")
    return [i for i in instances if i.get("status") in LIVE_STATES]


def _positive(text: str | None) -> float | None:
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _message_of(event: Any) -> dict[str, Any]:
    """The Pub/Sub message of a CloudEvent (google.cloud.pubsub.topic.v1.messagePublished) or of its data dict."""
    data = getattr(event, "data", event)
    if isinstance(data, dict) and isinstance(data.get("message"), dict):
        return data["message"]
    return {}


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handle(cloud_event: Any) -> None:
    """The entry point. Raises when a listing or a stop failed, so Eventarc delivers the message again."""
    report = run(_message_of(cloud_event), dict(os.environ), utc_now())
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} problem(s): " + "; ".join(report.failed))


try:  # the Cloud Functions runtime provides it; registering the signature is all it is used for
    import functions_framework
except ImportError:
    pass
else:
    handle = functions_framework.cloud_event(handle)
