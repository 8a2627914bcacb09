"""The budget guard: reads the stack's month-to-date spend from the bill, alerts at each threshold once a month,
and stops the stack's nodes once spend passes the limit (hard stop).

Alibaba Cloud has no budget resource (its Budget Management is console-only and alert-only), so the stack runs
this file as a Function Compute timer function every 15 minutes. It is shipped as the function's code with the stop
core (goldenenv/clouds/stopcore.py) beside it: standard library and the core only, so it needs neither the billing
SDK (which the FC runtime lacks) nor the ECS SDK; every call is a signed OpenAPI RPC request (signature version 1,
HMAC-SHA1). The tag keys are written here again; a unit test checks them against goldenenv.spec, so the fact still
has one owner.

The rules every stop function shares are the core's; this file supplies Alibaba's calls. Every BSS, ECS and Direct
Mail call is retried with full-jitter backoff on throttling and server errors (TRANSIENT_CODES, HTTP 429 and 5xx,
no answer) for as long as the invocation's time allows (TIMEOUT_SECONDS less a margin); every listing (the bill,
the instances, the security groups) is read page by page, each page retried, and one that cannot be read to its
end is an error, never "no nodes" nor "no spend".

What it reads, and what that means:
- spend: BSS OpenAPI DescribeSplitItemBill for the month (BillingCycle YYYY-MM), filtered on the stack tag,
  every page (MaxResults 300 + NextToken), PretaxAmount summed. Split bills lag consumption by about 48 hours
  (72 for per-bucket OSS items) and exist only once the split bill is enabled in the Expenses and Costs console,
  so the guard sees yesterday's spend at best: the limit is a soft one. The month is the bill's, Beijing time
  (UTC+8), not UTC: from 00:00 Beijing on the 1st the guard reads the new month's bill.
- fail closed: a bill answer the guard cannot read as finite amounts (NaN, Infinity, text, an amount missing,
  no Data) or in another currency than the limit cannot be compared with the limit. It is alerted with the
  reason (once a day), fails the invocation and, with the hard stop on, counts as over the limit: the nodes are
  stopped. A bill call that fails outright (permission, network) is alerted and fails the invocation, but stops
  nothing: no answer is not a wrong answer, and a network blip must not stop a training run.
- memory: which thresholds already alerted this month is kept in one tag (``goldenenv:budget-alerts``) on the
  stack's security groups, found by the project and stack tags. A security group lives exactly as long as the
  stack and is never stopped or rolled, so the memory survives restarts of the function and of the nodes. If
  writing it fails, the next run alerts again: an alert may repeat, it is never lost.
- alerts: one message per threshold, to the budget's emails through Direct Mail (SingleSendMail) from the sender
  address the account has verified there; every alert is also printed to the invocation's output. Without a
  sender an alert cannot be delivered, which fails the invocation (the function's error count shows it). A bill
  the guard cannot read or compare is itself an alert (once a day) and fails the invocation: never a silent pass.
- hard stop: at 100 % or more, every running node of the stack (both tags match) is stopped with StopInstances,
  in calls of at most 100 ids, in economical mode (StopCharging: a pay-as-you-go instance stops billing for its
  vCPUs, memory and GPUs; disks keep billing). A node counts as stopped only when the answer names it with Code
  200; one the answer leaves out, or answers with an error, is tried again alone in this run, so one node never
  holds back the others, then reported (alert, failed invocation) and tried again by the next run, which finds
  it still Running. A node Starting or Pending (ECS refuses to stop it: IncorrectInstanceStatus) is watched
  within the invocation and stopped once it is Running; one still starting when the time runs out is reported
  and fails the invocation, and the next run stops it. Nodes started again by hand are stopped on the next run
  while spend stays over the limit: raise the limit or turn the hard stop off to run again this month.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

try:
    from goldenenv.clouds import stopcore
except ImportError:  # in the function's package, shipped beside this file
    import stopcore  # type: ignore[no-redef]

STACK_TAG_KEY = "goldenenv:stack"
"""Equal to goldenenv.spec.STACK_TAG_KEY (checked by a test)."""
PROJECT_TAG_KEY = "project"
"""The key goldenenv.spec.Tags.resolved gives the project (checked by a test)."""
STATE_TAG_KEY = "goldenenv:budget-alerts"
"""On the stack's security groups: `<YYYY-MM>:<thresholds alerted, comma separated>`, then `;<kind><YYYY-MM-DD>`
for each kind of bill problem (PROBLEM_KINDS) with the last day it was alerted."""
PROBLEM_CALL, PROBLEM_AMOUNT, PROBLEM_COMPARE = "e", "n", "c"
PROBLEM_KINDS = (PROBLEM_CALL, PROBLEM_AMOUNT, PROBLEM_COMPARE)
"""Bill problems alerted once a day each: the bill call failed (e), the answer holds no finite amount (n), the
spend cannot be compared with the limit (c: another currency, or a limit that is not a positive number)."""

BILLING_TZ = stopcore.BEIJING
"""The time zone of Alibaba Cloud's bill: billing cycles (YYYY-MM) and billing dates are Beijing time, UTC+8,
which has no daylight saving time. Alibaba states its bill schedule in UTC+8: "The final bill for the current
month is available for query after 12:00 (UTC+8) on the fourth day of the next month" (BSS OpenAPI
DescribeSplitItemBill, https://alibabacloud.com/help/en/boa/latest/api-bssopenapi-2017-12-14-describesplititembill)
and "The final monthly bill of a month is issued after 12:00 (UTC+8) on the second day of the following month"
(Expenses and Costs, https://www.alibabacloud.com/help/en/user-center/user-guide/how-to-manage-bills). A fixed
offset, not zoneinfo: the FC runtime need not ship tz data."""

BSS_VERSION = "2017-12-14"
ECS_VERSION = "2014-05-26"
DM_VERSION = "2015-11-23"
BILL_PAGE_SIZE = 300
"""DescribeSplitItemBill returns at most 300 items a page."""
ECS_PAGE_SIZE = 100
MAX_IDS_PER_STOP = 100
"""StopInstances takes up to 100 InstanceId.N a call."""
STOP_OK = "200"
"""An InstanceResponse's Code when its instance was stopped (ECS StopInstances: "A return value of 200 indicates
that the operation was successful"); any other Code, or no answer for the instance, is a failed stop."""
NOT_RUNNING_YET = "IncorrectInstanceStatus"
"""ECS's answer to a stop of an instance that is not Running (StopInstances, error codes: "The current status of
the resource does not support this operation."): a node Starting or Pending is watched until it runs."""
STOPPED_MODE = "StopCharging"
"""Economical mode: a stopped pay-as-you-go VPC instance stops billing for its vCPUs, memory and GPUs, which are
released, so a start later may wait for capacity. An instance that refuses this mode is reported as a failed
stop (its answer's Code), never counted as stopped."""
STATE_CLASSES = {"Running": stopcore.LIVE, "Starting": stopcore.STARTING, "Pending": stopcore.STARTING,
                 "Stopping": stopcore.STOPPING, "Stopped": stopcore.STOPPED}
"""ECS instance states (ECS, "Instance states", https://www.alibabacloud.com/help/doc-detail/25380.htm) as the core's classes:
StopInstances stops a Running instance; Pending (being created) and Starting become Running within the minute, so
they are watched and stopped then. A state not listed here is treated as Running: the stop is tried, and a refusal
is reported, never a silent skip."""
THROTTLING_CODES = frozenset({"Throttling", "Throttling.User", "Throttling.Api", "Throttling.Resource",
                              "Throttling.Concurrency"})
"""Throttled calls: ECS answers Throttling, and an API throttled in minute T is served again in minute T+1 (ECS,
"API throttling", https://www.alibabacloud.com/help/doc-detail/437902.htm); the OpenAPI gateway answers
Throttling.User and Throttling.Api ("Throttling and quota management",
https://alibabacloud.com/help/en/openapi/throttling-and-quota-management)."""
SERVER_CODES = frozenset({"ServiceUnavailable", "InternalError", "InternalFailure", "UnknownError",
                          "ServiceUnavailableTemporary"})
"""Server errors worth another try: "ServiceUnavailable: The request has failed due to a temporary failure of the
server" and "InternalError" (ECS, "Response results", https://www.alibabacloud.com/help/doc-detail/25932.htm)."""
TIMEOUT_SECONDS = 600
"""The function's timeout (budget.py deploys it): within the 15-minute timer, so runs never overlap, and long
enough to outwait a minute of throttling on each call and nodes Starting for several minutes."""
MARGIN_SECONDS = 30.0
"""Kept back from the invocation's time for the last alert and the memory write."""
HARD_STOP_PERCENT = 100.0

PROJECT_ENV = "GOLDENENV_PROJECT"
STACK_ENV = "GOLDENENV_STACK"
REGION_ENV = "GOLDENENV_REGION"
LIMIT_ENV = "GOLDENENV_MONTHLY_LIMIT"
CURRENCY_ENV = "GOLDENENV_CURRENCY"
THRESHOLDS_ENV = "GOLDENENV_THRESHOLDS"
HARD_STOP_ENV = "GOLDENENV_HARD_STOP"
EMAILS_ENV = "GOLDENENV_ALERT_EMAILS"
SENDER_ENV = "GOLDENENV_ALERT_SENDER"
BSS_ENDPOINT_ENV = "GOLDENENV_BSS_ENDPOINT"
DM_ENDPOINT_ENV = "GOLDENENV_DM_ENDPOINT"
DRY_RUN_ENV = "GOLDENENV_DRY_RUN"

Call = Callable[[str, dict[str, str]], dict[str, Any]]
"""One OpenAPI call: (action, parameters) -> the response body; raises ApiError."""
Notify = Callable[[str, str], None]
"""(subject, body) -> None: delivers one alert."""


class ApiError(RuntimeError):
    """An OpenAPI call that failed: its error code and message (or the network error), the HTTP status (0 when no
    answer came), and for a stop refused per instance the instances and the state ECS says each is in."""

    def __init__(self, action: str, code: str, message: str, status: int | None = None,
                 instances: Sequence[str] = (), current: str = ""):
        super().__init__(f"{action}: {code}: {message}")
        self.action, self.code, self.message, self.status = action, code, message, status
        self.instances, self.current = list(instances), current


def transient(error: BaseException) -> bool:
    """Whether another try may succeed: throttling, a server error, HTTP 429 or 5xx, or no answer at all."""
    if not isinstance(error, ApiError):
        return False
    return (error.code in THROTTLING_CODES or error.code in SERVER_CODES or error.status == 0
            or (error.status is not None and (error.status == 429 or error.status >= 500)))


def new_clock(seconds: float = TIMEOUT_SECONDS) -> stopcore.Clock:
    """The invocation's clock: the function's timeout less a margin for the last alert and the memory write."""
    return stopcore.Clock(seconds, margin_seconds=MARGIN_SECONDS)


class UnreadableBill(ValueError):
    """A bill answer that came back but cannot be read as finite amounts: the guard fails closed on it."""


# ---------------------------------------------------------------- signed RPC calls (standard library only)

def percent_encode(value: str) -> str:
    """RFC 3986 encoding as Alibaba Cloud's RPC signature wants it: space %20, `*` %2A, `~` kept."""
    return urllib.parse.quote(str(value), safe="~")


def rpc_signature(params: dict[str, str], secret: str, method: str = "GET") -> str:
    """Signature version 1 (HMAC-SHA1) over the sorted, encoded query."""
    query = "&".join(f"{percent_encode(k)}={percent_encode(v)}" for k, v in sorted(params.items()))
    to_sign = f"{method}&{percent_encode('/')}&{percent_encode(query)}"
    digest = hmac.new(f"{secret}&".encode(), to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    access_key_secret: str
    security_token: str | None = None


def signed_url(endpoint: str, version: str, action: str, params: dict[str, str], credentials: Credentials,
               timestamp: str, nonce: str) -> str:
    """The full GET URL of one RPC call, signed."""
    query = {
        "Format": "JSON", "Version": version, "AccessKeyId": credentials.access_key_id,
        "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0", "SignatureNonce": nonce,
        "Timestamp": timestamp, "Action": action, **params,
    }
    if credentials.security_token:
        query["SecurityToken"] = credentials.security_token
    query["Signature"] = rpc_signature(query, credentials.access_key_secret)
    return f"https://{endpoint}/?" + "&".join(f"{percent_encode(k)}={percent_encode(v)}" for k, v in query.items())


def rpc_client(endpoint: str, version: str, credentials: Credentials, timeout: float = 30.0) -> Call:
    """A Call that sends signed requests to one product's endpoint."""

    def call(action: str, params: dict[str, str]) -> dict[str, Any]:
        url = signed_url(endpoint, version, action, params, credentials,
                         datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), str(uuid.uuid4()))
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - https only
                body = json.loads(response.read().decode() or "{}")
        except urllib.error.HTTPError as e:
            try:
                error = json.loads(e.read().decode() or "{}")
            except ValueError:
                error = {}
            raise ApiError(action, str(error.get("Code", e.code)), str(error.get("Message", e.reason)),
                           status=e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise ApiError(action, type(e).__name__, str(e), status=0) from None
        except ValueError as e:
            raise ApiError(action, type(e).__name__, str(e)) from None
        if body.get("Success") is False:  # BSS answers some errors with HTTP 200
            raise ApiError(action, str(body.get("Code", "")), str(body.get("Message", "")))
        return body

    return call


# ---------------------------------------------------------------- the bill

def billing_time(now: datetime) -> datetime:
    """`now` on the bill's clock (BILLING_TZ), by the stop core's rule (stopcore.on_clock)."""
    return stopcore.on_clock(now, BILLING_TZ)


def bill_amount(value: Any, where: str) -> float:
    """A bill amount as a finite float by the stop core's rule (stopcore.amount); UnreadableBill otherwise (NaN,
    Infinity, other text, null, a missing amount)."""
    try:
        return stopcore.amount(value, f"{where}: PretaxAmount")
    except stopcore.Unreadable as problem:
        raise UnreadableBill(str(problem)) from None


def _item_name(item: dict[str, Any], page: int, n: int) -> str:
    named = item.get("SplitItemID") or item.get("InstanceID") or item.get("ProductCode")
    return f"bill item {n} of page {page}" + (f" ({named}, {item.get('BillingDate', '?')})" if named else "")


def month_spend(bill: Call, stack: str, cycle: str, clock: stopcore.Clock | None = None) -> tuple[float, set[str]]:
    """The stack's pretax spend for the billing cycle (YYYY-MM) over every page, and the currencies it is in (""
    for an item that names none). Each page is retried while throttled; raises stopcore.ListingIncomplete when a
    page cannot be had, UnreadableBill when an answer holds no finite amount where one must be."""
    params = {"BillingCycle": cycle, "MaxResults": str(BILL_PAGE_SIZE),
              "TagFilter.1.TagKey": STACK_TAG_KEY, "TagFilter.1.TagValues.1": stack}

    def fetch(token: str | None) -> tuple[list[Any], str | None]:
        answer = bill("DescribeSplitItemBill", {**params, **({"NextToken": token} if token else {})})
        data = answer.get("Data") if isinstance(answer, dict) else None
        following = data.get("NextToken") if isinstance(data, dict) else None
        return [answer], following if isinstance(following, str) else None

    answers = stopcore.all_pages(fetch, clock or new_clock(), transient, f"the bill of {cycle}")
    total, currencies = 0.0, set()
    for page, answer in enumerate(answers, 1):
        data = answer.get("Data") if isinstance(answer, dict) else None
        if not isinstance(data, dict):
            raise UnreadableBill(f"page {page} of DescribeSplitItemBill has no Data: {str(answer)[:200]}")
        items = data.get("Items")
        if items is None:
            items = []  # nothing billed yet (a new stack, the first two days of a month)
        if not isinstance(items, list):
            raise UnreadableBill(f"page {page} of DescribeSplitItemBill: Items is {str(items)[:200]}, not a list")
        for n, item in enumerate(items, 1):
            if not isinstance(item, dict):
                raise UnreadableBill(f"bill item {n} of page {page} is {str(item)[:200]}, not an object")
            where = _item_name(item, page, n)
            if "PretaxAmount" not in item:
                raise UnreadableBill(f"{where} has no PretaxAmount")
            total += bill_amount(item["PretaxAmount"], where)
            currencies.add(str(item.get("Currency") or ""))
    if not math.isfinite(total):
        raise UnreadableBill(f"the amounts sum to {total}, not a finite amount")
    return total, currencies


# ---------------------------------------------------------------- the stack's resources and the guard's memory

def _tag_filter(project: str, stack: str) -> dict[str, str]:
    return {"Tag.1.Key": STACK_TAG_KEY, "Tag.1.Value": stack, "Tag.2.Key": PROJECT_TAG_KEY, "Tag.2.Value": project}


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t.get("TagKey", ""): t.get("TagValue", "") for t in (resource.get("Tags") or {}).get("Tag", [])}


def _owned(resource: dict[str, Any], project: str, stack: str) -> bool:
    tags = _tags(resource)
    return tags.get(STACK_TAG_KEY) == stack and tags.get(PROJECT_TAG_KEY) == project


def _pages(ecs: Call, action: str, params: dict[str, str], outer: str, inner: str,
           clock: stopcore.Clock) -> list[dict[str, Any]]:
    """Every item of an ECS listing (MaxResults + NextToken), each page retried; ListingIncomplete otherwise."""

    def fetch(token: str | None) -> tuple[list[dict[str, Any]], str | None]:
        page = ecs(action, {**params, "MaxResults": str(ECS_PAGE_SIZE), **({"NextToken": token} if token else {})})
        return (page.get(outer) or {}).get(inner) or [], page.get("NextToken") or None

    return stopcore.all_pages(fetch, clock, transient, f"{action} in {params.get('RegionId', '?')}")


def stack_instances(ecs: Call, region: str, project: str, stack: str, clock: stopcore.Clock | None = None,
                    instance_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The stack's instances (of ``instance_ids`` only, when given): both tags match (two projects may each have
    a stack 'dev')."""
    params = {"RegionId": region, **_tag_filter(project, stack)}
    if instance_ids:
        params["InstanceIds"] = json.dumps(list(instance_ids))
    found = _pages(ecs, "DescribeInstances", params, "Instances", "Instance", clock or new_clock())
    wanted = set(instance_ids)
    return [i for i in found if _owned(i, project, stack) and (not wanted or i.get("InstanceId") in wanted)]


@dataclass
class Memory:
    """What the guard remembers between runs: thresholds alerted in `cycle`, and the last day each kind of bill
    problem (PROBLEM_KINDS) was alerted; `holders` are the security groups the memory is kept on."""

    cycle: str
    alerted: set[int] = field(default_factory=set)
    reported: dict[str, str] = field(default_factory=dict)
    holders: list[str] = field(default_factory=list)

    def encode(self) -> str:
        text = f"{self.cycle}:{','.join(str(t) for t in sorted(self.alerted))}"
        return text + "".join(f";{kind}{day}" for kind, day in sorted(self.reported.items()) if day)


def parse_memory(values: Sequence[str], cycle: str) -> Memory:
    """The union of what every holder remembers for `cycle`; other months are forgotten."""
    memory = Memory(cycle)
    for value in values:
        head, *marks = value.split(";")
        month, _, levels = head.partition(":")
        if month == cycle:
            memory.alerted |= {int(t) for t in levels.split(",") if t.strip().isdigit()}
        for mark in marks:
            kind, day = mark[:1], mark[1:]
            if kind in PROBLEM_KINDS and day.startswith(cycle):
                memory.reported[kind] = max(memory.reported.get(kind, ""), day)
    return memory


def read_memory(ecs: Call, region: str, project: str, stack: str, cycle: str,
                clock: stopcore.Clock | None = None) -> Memory:
    groups = [g for g in _pages(ecs, "DescribeSecurityGroups", {"RegionId": region, **_tag_filter(project, stack)},
                                "SecurityGroups", "SecurityGroup", clock or new_clock()) if _owned(g, project, stack)]
    memory = parse_memory([_tags(g).get(STATE_TAG_KEY, "") for g in groups], cycle)
    memory.holders = [g["SecurityGroupId"] for g in groups]
    return memory


def write_memory(ecs: Call, region: str, memory: Memory, clock: stopcore.Clock | None = None) -> None:
    if not memory.holders:
        raise ApiError("TagResources", "NoHolder", "no security group of the stack to remember the alerts on")
    params = {"RegionId": region, "ResourceType": "securitygroup",
              "Tag.1.Key": STATE_TAG_KEY, "Tag.1.Value": memory.encode()}
    params.update({f"ResourceId.{n}": group for n, group in enumerate(memory.holders, 1)})
    stopcore.retry(lambda: ecs("TagResources", params), transient, clock or new_clock())


# ---------------------------------------------------------------- one run

@dataclass(frozen=True)
class Budget:
    project: str
    stack: str
    region: str
    monthly_limit: float
    currency: str
    thresholds: tuple[int, ...]
    hard_stop: bool


@dataclass
class Report:
    project: str
    stack: str
    cycle: str
    spend: float | None = None
    percent: float | None = None
    alerts: list[str] = field(default_factory=list)
    """Subjects of the alerts sent (or, in a dry run, that would be)."""
    stopped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """What went wrong: an unreadable bill, a stop or a memory write that failed."""
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def log_lines(self) -> list[str]:
        prefix = f"project={self.project} stack={self.stack} cycle={self.cycle}{' DRY RUN' if self.dry_run else ''}:"
        spend = ("unknown" if self.spend is None else f"{self.spend:.2f} (not comparable with the limit)"
                 if self.percent is None else f"{self.spend:.2f} ({self.percent:.1f} % of the limit)")
        lines = [f"{prefix} spend {spend}"]
        lines += [f"{prefix} ALERT {subject}" for subject in self.alerts]
        lines += [f"{prefix} stopped {i}" for i in self.stopped]
        lines += [f"{prefix} FAILED {why}" for why in self.failed]
        return lines


def run(budget: Budget, *, bill: Call, ecs: Call, notify: Notify, now: datetime, dry_run: bool = False,
        clock: stopcore.Clock | None = None) -> Report:
    """One guard run at `now`: read the bill, alert new thresholds, hard stop, remember. Never raises for a
    cloud error: each one is in the report (and a bill problem is alerted). Fails closed: a bill that cannot be
    read as finite amounts in the limit's currency counts as over the limit. ``clock`` is the invocation's time
    (new_clock() when not given): every call is retried within it, and nodes still starting are watched in it."""
    clock = clock or new_clock()
    cycle, today = stopcore.budget_month(now, BILLING_TZ), billing_time(now).strftime("%Y-%m-%d")
    report = Report(budget.project, budget.stack, cycle, dry_run=dry_run)
    try:
        memory = read_memory(ecs, budget.region, budget.project, budget.stack, cycle, clock)
    except (ApiError, stopcore.ListingIncomplete) as e:
        report.failed.append(f"cannot read what was already alerted ({e}); alerts may repeat")
        memory = Memory(cycle)
    before = memory.encode()

    try:
        spend, currencies = month_spend(bill, budget.stack, cycle, clock)
    except (ApiError, stopcore.ListingIncomplete) as e:
        report.failed.append(f"cannot read the bill: {e}")
        if memory.reported.get(PROBLEM_CALL) != today:
            subject = f"goldenenv budget guard of {budget.stack} cannot read the bill"
            _alert(report, notify, dry_run, subject, (
                f"The budget guard of project {budget.project} stack {budget.stack} could not read this month's "
                f"spend from DescribeSplitItemBill: {e}. Until it can, no threshold alerts and no hard stop happen. "
                "Check the function's RAM role (bssapi:DescribeSplitItemBill) and that the split bill is enabled "
                "in the Expenses and Costs console. This alert repeats once a day while it lasts."))
            memory.reported[PROBLEM_CALL] = today
        _remember(report, ecs, budget.region, memory, before, dry_run, clock)
        return report
    except (UnreadableBill, ValueError, TypeError, AttributeError) as e:
        _fail_closed(report, ecs, budget, notify, dry_run, memory, today, PROBLEM_AMOUNT,
                     f"the bill cannot be read as a finite amount: {e}", clock)
        _remember(report, ecs, budget.region, memory, before, dry_run, clock)
        return report

    report.spend = spend
    foreign = currencies - {budget.currency}
    if foreign or not (math.isfinite(budget.monthly_limit) and budget.monthly_limit > 0):
        why = (f"the bill is in {', '.join(sorted(c or 'no currency given' for c in foreign))}, the limit in "
               f"{budget.currency}: {spend:,.2f} cannot be compared with {budget.monthly_limit:,.2f}" if foreign else
               f"the monthly limit {budget.monthly_limit!r} is not a positive number")
        _fail_closed(report, ecs, budget, notify, dry_run, memory, today, PROBLEM_COMPARE, why, clock)
        _remember(report, ecs, budget.region, memory, before, dry_run, clock)
        return report

    report.percent = 100.0 * spend / budget.monthly_limit
    for level in sorted(set(budget.thresholds)):
        if report.percent >= level and level not in memory.alerted:
            _alert(report, notify, dry_run,
                   f"goldenenv budget: {budget.stack} passed {level} % of {budget.monthly_limit:,.2f} "
                   f"{budget.currency}", (
                       f"Project {budget.project} stack {budget.stack} has spent {spend:,.2f} {budget.currency} "
                       f"in {cycle}, {report.percent:.1f} % of its monthly limit of {budget.monthly_limit:,.2f}. "
                       "Split bills lag usage by about two days, so spend is at least this."
                       + (" At 100 % the hard stop stops every node of the stack." if budget.hard_stop else "")))
            memory.alerted.add(level)

    if budget.hard_stop and report.percent >= HARD_STOP_PERCENT:
        _hard_stop(report, ecs, budget, notify, dry_run, f"{report.percent:.1f} % of its monthly limit", clock)
    _remember(report, ecs, budget.region, memory, before, dry_run, clock)
    return report


def _fail_closed(report: Report, ecs: Call, budget: Budget, notify: Notify, dry_run: bool, memory: Memory,
                 today: str, kind: str, why: str, clock: stopcore.Clock) -> None:
    """A bill the guard cannot compare with the limit: alert the reason (once a day for this kind), fail the
    invocation and, with the hard stop on, act as if spend were over the limit."""
    report.failed.append(why + ("; treated as over the limit" if budget.hard_stop else "; no hard stop (it is off)"))
    if memory.reported.get(kind) != today:
        _alert(report, notify, dry_run, f"goldenenv budget guard of {budget.stack}: the bill cannot be trusted", (
            f"The budget guard of project {budget.project} stack {budget.stack} cannot compare this month's spend "
            f"({report.cycle}, DescribeSplitItemBill) with its limit of {budget.monthly_limit:,.2f} "
            f"{budget.currency}: {why}. "
            + ("It treats the spend as over the limit, so the hard stop stops every running node of the stack on "
               "each run until the bill reads as finite amounts in the limit's currency (or the hard stop is "
               "turned off). " if budget.hard_stop else
               "No threshold alert or hard stop can be judged until it does. ")
            + "This alert repeats once a day while it lasts."))
        memory.reported[kind] = today
    if budget.hard_stop:
        _hard_stop(report, ecs, budget, notify, dry_run, f"a bill that cannot be trusted ({why})", clock)


def _alert(report: Report, notify: Notify, dry_run: bool, subject: str, body: str) -> None:
    report.alerts.append(subject)
    if dry_run:
        return
    try:
        notify(subject, body)
    except Exception as e:  # noqa: BLE001 - a failed delivery is reported, never fatal to the stop
        report.failed.append(f"could not send the alert '{subject}': {e}")


def stop_instances(ecs: Call, region: str, instances: Sequence[str]) -> tuple[list[str], dict[str, ApiError]]:
    """One StopInstances attempt over `instances` in calls of at most 100: (stopped, {instance: why not}). An
    instance counts as stopped only when the answer names it with Code 200; one the answer leaves out (or an
    answer without InstanceResponses) is not. A call that fails as a whole raises its ApiError."""
    stopped: list[str] = []
    errors: dict[str, ApiError] = {}
    for start in range(0, len(instances), MAX_IDS_PER_STOP):
        chunk = list(instances[start:start + MAX_IDS_PER_STOP])
        params = {"RegionId": region, "StoppedMode": STOPPED_MODE, "ForceStop": "false",
                  "BatchOptimization": "SuccessFirst"}
        params.update({f"InstanceId.{n}": instance for n, instance in enumerate(chunk, 1)})
        try:
            answer = ecs("StopInstances", params)
        except ApiError as e:
            e.instances = chunk
            raise
        wrapper = answer.get("InstanceResponses") if isinstance(answer, dict) else None
        responses = wrapper.get("InstanceResponse") if isinstance(wrapper, dict) else None
        outcome = {str(r["InstanceId"]): r for r in (responses if isinstance(responses, list) else [])
                   if isinstance(r, dict) and r.get("InstanceId")}
        for instance in chunk:
            result = outcome.get(instance)
            if result is None:
                errors[instance] = ApiError("StopInstances", "NotAnswered", "not in the StopInstances answer",
                                            instances=[instance])
            elif str(result.get("Code")) != STOP_OK:
                errors[instance] = ApiError("StopInstances", str(result.get("Code")), str(result.get("Message")),
                                            instances=[instance], current=str(result.get("CurrentStatus") or ""))
            else:
                stopped.append(instance)
    return stopped, errors


class StopRefused(ApiError):
    """StopInstances answered, and refused some of the instances: each one's error in ``errors``."""

    def __init__(self, errors: dict[str, ApiError]):
        first = next(iter(errors.values()))
        super().__init__("StopInstances", first.code if len(errors) == 1 else "PartlyRefused",
                         "; ".join(f"{i}: {e.code}: {e.message}" for i, e in errors.items()),
                         instances=list(errors), current=first.current if len(errors) == 1 else "")
        self.errors = errors


def _stop_plan(ecs: Call, budget: Budget, clock: stopcore.Clock) -> stopcore.StopPlan[dict[str, Any]]:
    """Alibaba's calls for the core's stop_every: StopInstances with SuccessFirst, so each answer says which nodes
    stopped; the nodes it stopped are never sent again when the rest are retried alone."""
    done: set[str] = set()
    status: dict[str, str] = {}

    def state(instance: dict[str, Any]) -> str:
        status[instance["InstanceId"]] = str(instance.get("Status") or "")
        return STATE_CLASSES.get(status[instance["InstanceId"]], stopcore.LIVE)

    def stop(batch: list[dict[str, Any]]) -> None:
        todo = [i["InstanceId"] for i in batch if i["InstanceId"] not in done]
        if not todo:
            return
        stopped, errors = stop_instances(ecs, budget.region, todo)
        done.update(stopped)
        if errors:
            raise StopRefused(errors)

    def batch_transient(error: BaseException) -> bool:
        """A refusal is retried as a whole only when every instance's error is transient."""
        if isinstance(error, StopRefused):
            return all(transient(e) for e in error.errors.values())
        return transient(error)

    def not_yet(error: BaseException) -> bool:
        """Refused because it is not Running yet (or any more): watched, then stopped or left as it becomes."""
        if getattr(error, "code", "") != NOT_RUNNING_YET:
            return False
        current = getattr(error, "current", "") or ""
        if current:
            return current != "Running"
        return all(status.get(i) != "Running" for i in getattr(error, "instances", []))

    return stopcore.StopPlan(
        name=lambda instance: instance["InstanceId"], state=state, stop=stop, transient=batch_transient,
        refresh=lambda waiting: stack_instances(ecs, budget.region, budget.project, budget.stack, clock,
                                                [i["InstanceId"] for i in waiting]),
        not_yet=not_yet, batch_size=MAX_IDS_PER_STOP)


def _hard_stop(report: Report, ecs: Call, budget: Budget, notify: Notify, dry_run: bool, why: str,
               clock: stopcore.Clock) -> None:
    try:
        nodes = stack_instances(ecs, budget.region, budget.project, budget.stack, clock)
    except (ApiError, stopcore.ListingIncomplete) as e:
        report.failed.append(f"hard stop: cannot list the stack's nodes: {e}")
        return
    plan = _stop_plan(ecs, budget, clock)
    if dry_run:
        report.stopped += [i["InstanceId"] for i in nodes if plan.state(i) in (stopcore.LIVE, stopcore.STARTING)]
        return
    done = stopcore.stop_every(nodes, plan, clock, f"hard stop at {why}")
    stopped = [o.node for o in done.stopped]
    report.stopped += stopped
    unstopped = [(o.node, o.reason) for o in done.failed] + [(o.node, f"still starting: {o.reason}")
                                                              for o in done.waiting]
    report.failed += [f"hard stop of {node}: {reason} (not stopped; the next run tries again)"
                      for node, reason in unstopped]
    if stopped or unstopped:
        _alert(report, notify, dry_run,
               f"goldenenv budget: hard stop of {budget.stack}" + (" incomplete" if unstopped else ""), (
                   f"Project {budget.project} stack {budget.stack} is at {why}; the guard stopped "
                   f"{len(stopped)} node(s): {', '.join(stopped) or 'none'}. Disks keep billing."
                   + (f" It could not stop {len(unstopped)} node(s): "
                      + "; ".join(f"{node} ({reason})" for node, reason in unstopped)
                      + ". The next run, in 15 minutes, tries again." if unstopped else "")))


def _remember(report: Report, ecs: Call, region: str, memory: Memory, before: str, dry_run: bool,
              clock: stopcore.Clock) -> None:
    if dry_run or memory.encode() == before:
        return
    try:
        write_memory(ecs, region, memory, clock)
    except ApiError as e:
        report.failed.append(f"cannot remember the alerts sent ({e}); they may repeat on the next run")


# ---------------------------------------------------------------- delivery

def direct_mail(dm: Call, sender: str, recipients: Sequence[str], clock: stopcore.Clock | None = None) -> Notify:
    """Alerts as one email each, through Direct Mail from a sender address verified in its console; a throttled
    send is retried within the invocation's time."""

    def send(subject: str, body: str) -> None:
        print(f"ALERT {subject}: {body}")
        if not (sender and recipients):
            raise RuntimeError("no Direct Mail sender address or no recipients: the alert is only in this output")
        params = {"AccountName": sender, "AddressType": "1", "ReplyToAddress": "false",
                  "ToAddress": ",".join(recipients), "Subject": subject[:100], "TextBody": body}
        stopcore.retry(lambda: dm("SingleSendMail", params), transient, clock or new_clock())

    return send


# ---------------------------------------------------------------- Function Compute entry point

def budget_from_env(env: dict[str, str]) -> Budget:
    return Budget(
        project=env[PROJECT_ENV], stack=env[STACK_ENV], region=env[REGION_ENV],
        monthly_limit=float(env[LIMIT_ENV]), currency=env.get(CURRENCY_ENV, "USD"),
        thresholds=tuple(int(t) for t in env.get(THRESHOLDS_ENV, "").split(",") if t.strip()),
        hard_stop=stopcore.flag(env.get(HARD_STOP_ENV)),
    )


def credentials_of(context: Any, env: dict[str, str]) -> Credentials:
    """The function role's temporary credentials (FC passes them in the context), else the environment's."""
    given = getattr(context, "credentials", None)
    if given is not None and getattr(given, "access_key_id", None):
        return Credentials(given.access_key_id, given.access_key_secret, getattr(given, "security_token", None))
    return Credentials(env["ALIBABA_CLOUD_ACCESS_KEY_ID"], env["ALIBABA_CLOUD_ACCESS_KEY_SECRET"],
                       env.get("ALIBABA_CLOUD_SECURITY_TOKEN"))


def handler(event: Any, context: Any) -> str:
    """FC entry point (timer trigger). An event `{"dryRun": true}` turns one invocation into a dry run. Fails the
    invocation when anything failed, so the function's error metric shows a guard that cannot do its job."""
    env = dict(os.environ)
    budget, credentials = budget_from_env(env), credentials_of(context, env)
    try:
        payload = json.loads(event) if isinstance(event, (bytes, str)) and event else {}
    except ValueError:
        payload = {}
    dry_run = env.get(DRY_RUN_ENV, "false").lower() == "true" or (isinstance(payload, dict)
                                                                   and payload.get("dryRun") is True)
    clock = new_clock()
    notify = direct_mail(rpc_client(env[DM_ENDPOINT_ENV], DM_VERSION, credentials), env.get(SENDER_ENV, ""),
                         [e for e in env.get(EMAILS_ENV, "").split(",") if e], clock)
    report = run(budget, bill=rpc_client(env[BSS_ENDPOINT_ENV], BSS_VERSION, credentials),
                 ecs=rpc_client(f"ecs.{budget.region}.aliyuncs.com", ECS_VERSION, credentials),
                 notify=notify, now=datetime.now(timezone.utc), dry_run=dry_run, clock=clock)
    for line in report.log_lines():
        print(line)
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} problem(s); see the lines above")
    return json.dumps(report.to_dict())
