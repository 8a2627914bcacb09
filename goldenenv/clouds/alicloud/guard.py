"""The budget guard: reads the stack's month-to-date spend from the bill, alerts at each threshold once a month,
and stops the stack's nodes once spend passes the limit (hard stop).

Alibaba Cloud has no budget resource (its Budget Management is console-only and alert-only), so the stack runs
this file as a Function Compute timer function every 15 minutes. It is shipped alone as the function's code:
standard library only, so it needs neither the billing SDK (which the FC runtime lacks) nor the ECS SDK; every
call is a signed OpenAPI RPC request (signature version 1, HMAC-SHA1). The tag keys are written here again; a
unit test checks them against goldenenv.spec, so the fact still has one owner.

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
  200; one the answer leaves out, or answers with an error, is tried again in this run (STOP_ATTEMPTS in all),
  then reported (alert, failed invocation) and tried again by the next run, which finds it still Running. Nodes
  started again by hand are stopped on the next run while spend stays over the limit: raise the limit or turn
  the hard stop off to run again this month.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

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

BILLING_TZ = timezone(timedelta(hours=8), "Asia/Shanghai")
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
STOP_ATTEMPTS = 3
STOP_RETRY_SECONDS = 5.0
"""The pause before each new StopInstances attempt for the nodes the last one did not stop; the timer's next run
(15 minutes later) tries again after that."""
STOPPED_MODE = "StopCharging"
"""Economical mode: a stopped pay-as-you-go VPC instance stops billing for its vCPUs, memory and GPUs, which are
released, so a start later may wait for capacity. An instance that refuses this mode is reported as a failed
stop (its answer's Code), never counted as stopped."""
RUNNING_STATES = ("Running",)
"""StopInstances stops a Running instance; one still starting is stopped by the next run, 15 minutes later."""
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
    """An OpenAPI call that failed: its error code and message (or the network error)."""

    def __init__(self, action: str, code: str, message: str):
        super().__init__(f"{action}: {code}: {message}")
        self.action, self.code, self.message = action, code, message


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
            raise ApiError(action, str(error.get("Code", e.code)), str(error.get("Message", e.reason))) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ApiError(action, type(e).__name__, str(e)) from None
        if body.get("Success") is False:  # BSS answers some errors with HTTP 200
            raise ApiError(action, str(body.get("Code", "")), str(body.get("Message", "")))
        return body

    return call


# ---------------------------------------------------------------- the bill

def billing_time(now: datetime) -> datetime:
    """`now` on the bill's clock (BILLING_TZ; a naive `now` is taken as UTC): 2026-12-31T23:30Z is already
    2027-01-01 07:30 there, so the bill month is 2027-01."""
    return (now if now.tzinfo else now.replace(tzinfo=timezone.utc)).astimezone(BILLING_TZ)


def bill_amount(value: Any, where: str) -> float:
    """A bill amount as a finite float: a JSON number, or text that reads as one; UnreadableBill otherwise (NaN,
    Infinity, other text, null, a missing amount)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnreadableBill(f"{where}: PretaxAmount {value!r} is not a number")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        raise UnreadableBill(f"{where}: PretaxAmount {value!r} is not a number") from None
    if not math.isfinite(number):
        raise UnreadableBill(f"{where}: PretaxAmount {value!r} is not a finite number")
    return number


def _item_name(item: dict[str, Any], page: int, n: int) -> str:
    named = item.get("SplitItemID") or item.get("InstanceID") or item.get("ProductCode")
    return f"bill item {n} of page {page}" + (f" ({named}, {item.get('BillingDate', '?')})" if named else "")


def month_spend(bill: Call, stack: str, cycle: str) -> tuple[float, set[str]]:
    """The stack's pretax spend for the billing cycle (YYYY-MM) over every page, and the currencies it is in (""
    for an item that names none). Raises ApiError when a call fails, UnreadableBill when an answer holds no
    finite amount where one must be."""
    total, currencies, token, page = 0.0, set(), None, 0
    while True:
        page += 1
        params = {"BillingCycle": cycle, "MaxResults": str(BILL_PAGE_SIZE),
                  "TagFilter.1.TagKey": STACK_TAG_KEY, "TagFilter.1.TagValues.1": stack}
        if token:
            params["NextToken"] = token
        answer = bill("DescribeSplitItemBill", params)
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
        token = data.get("NextToken")
        if not token:
            if not math.isfinite(total):
                raise UnreadableBill(f"the amounts sum to {total}, not a finite number")
            return total, currencies


# ---------------------------------------------------------------- the stack's resources and the guard's memory

def _tag_filter(project: str, stack: str) -> dict[str, str]:
    return {"Tag.1.Key": STACK_TAG_KEY, "Tag.1.Value": stack, "Tag.2.Key": PROJECT_TAG_KEY, "Tag.2.Value": project}


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t.get("TagKey", ""): t.get("TagValue", "") for t in (resource.get("Tags") or {}).get("Tag", [])}


def _owned(resource: dict[str, Any], project: str, stack: str) -> bool:
    tags = _tags(resource)
    return tags.get(STACK_TAG_KEY) == stack and tags.get(PROJECT_TAG_KEY) == project


def _pages(ecs: Call, action: str, params: dict[str, str], outer: str, inner: str) -> Iterator[dict[str, Any]]:
    token = None
    while True:
        page = ecs(action, {**params, "MaxResults": str(ECS_PAGE_SIZE), **({"NextToken": token} if token else {})})
        yield from (page.get(outer) or {}).get(inner) or []
        token = page.get("NextToken")
        if not token:
            return


def stack_instances(ecs: Call, region: str, project: str, stack: str) -> list[dict[str, Any]]:
    """The stack's instances: both tags match (two projects may each have a stack 'dev')."""
    found = _pages(ecs, "DescribeInstances", {"RegionId": region, **_tag_filter(project, stack)},
                   "Instances", "Instance")
    return [i for i in found if _owned(i, project, stack)]


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


def read_memory(ecs: Call, region: str, project: str, stack: str, cycle: str) -> Memory:
    groups = [g for g in _pages(ecs, "DescribeSecurityGroups", {"RegionId": region, **_tag_filter(project, stack)},
                                "SecurityGroups", "SecurityGroup") if _owned(g, project, stack)]
    memory = parse_memory([_tags(g).get(STATE_TAG_KEY, "") for g in groups], cycle)
    memory.holders = [g["SecurityGroupId"] for g in groups]
    return memory


def write_memory(ecs: Call, region: str, memory: Memory) -> None:
    if not memory.holders:
        raise ApiError("TagResources", "NoHolder", "no security group of the stack to remember the alerts on")
    params = {"RegionId": region, "ResourceType": "securitygroup",
              "Tag.1.Key": STATE_TAG_KEY, "Tag.1.Value": memory.encode()}
    params.update({f"ResourceId.{n}": group for n, group in enumerate(memory.holders, 1)})
    ecs("TagResources", params)


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


def run(budget: Budget, *, bill: Call, ecs: Call, notify: Notify, now: datetime, dry_run: bool = False) -> Report:
    """One guard run at `now`: read the bill, alert new thresholds, hard stop, remember. Never raises for a
    cloud error: each one is in the report (and a bill problem is alerted). Fails closed: a bill that cannot be
    read as finite amounts in the limit's currency counts as over the limit."""
    local = billing_time(now)
    cycle, today = local.strftime("%Y-%m"), local.strftime("%Y-%m-%d")
    report = Report(budget.project, budget.stack, cycle, dry_run=dry_run)
    try:
        memory = read_memory(ecs, budget.region, budget.project, budget.stack, cycle)
    except ApiError as e:
        report.failed.append(f"cannot read what was already alerted ({e}); alerts may repeat")
        memory = Memory(cycle)
    before = memory.encode()

    try:
        spend, currencies = month_spend(bill, budget.stack, cycle)
    except ApiError as e:
        report.failed.append(f"cannot read the bill: {e}")
        if memory.reported.get(PROBLEM_CALL) != today:
            subject = f"goldenenv budget guard of {budget.stack} cannot read the bill"
            _alert(report, notify, dry_run, subject, (
                f"The budget guard of project {budget.project} stack {budget.stack} could not read this month's "
                f"spend from DescribeSplitItemBill: {e}. Until it can, no threshold alerts and no hard stop happen. "
                "Check the function's RAM role (bssapi:DescribeSplitItemBill) and that the split bill is enabled "
                "in the Expenses and Costs console. This alert repeats once a day while it lasts."))
            memory.reported[PROBLEM_CALL] = today
        _remember(report, ecs, budget.region, memory, before, dry_run)
        return report
    except (UnreadableBill, ValueError, TypeError, AttributeError) as e:
        _fail_closed(report, ecs, budget, notify, dry_run, memory, today, PROBLEM_AMOUNT,
                     f"the bill cannot be read as a finite amount: {e}")
        _remember(report, ecs, budget.region, memory, before, dry_run)
        return report

    report.spend = spend
    foreign = currencies - {budget.currency}
    if foreign or not (math.isfinite(budget.monthly_limit) and budget.monthly_limit > 0):
        why = (f"the bill is in {', '.join(sorted(c or 'no currency given' for c in foreign))}, the limit in "
               f"{budget.currency}: {spend:,.2f} cannot be compared with {budget.monthly_limit:,.2f}" if foreign else
               f"the monthly limit {budget.monthly_limit!r} is not a positive number")
        _fail_closed(report, ecs, budget, notify, dry_run, memory, today, PROBLEM_COMPARE, why)
        _remember(report, ecs, budget.region, memory, before, dry_run)
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
        _hard_stop(report, ecs, budget, notify, dry_run, f"{report.percent:.1f} % of its monthly limit")
    _remember(report, ecs, budget.region, memory, before, dry_run)
    return report


def _fail_closed(report: Report, ecs: Call, budget: Budget, notify: Notify, dry_run: bool, memory: Memory,
                 today: str, kind: str, why: str) -> None:
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
        _hard_stop(report, ecs, budget, notify, dry_run, f"a bill that cannot be trusted ({why})")


def _alert(report: Report, notify: Notify, dry_run: bool, subject: str, body: str) -> None:
    report.alerts.append(subject)
    if dry_run:
        return
    try:
        notify(subject, body)
    except Exception as e:  # noqa: BLE001 - a failed delivery is reported, never fatal to the stop
        report.failed.append(f"could not send the alert '{subject}': {e}")


def stop_instances(ecs: Call, region: str, instances: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """One StopInstances attempt over `instances` in calls of at most 100: (stopped, {instance: why not}). An
    instance counts as stopped only when the answer names it with Code 200; one the answer leaves out (or an
    answer without InstanceResponses) is not."""
    stopped: list[str] = []
    errors: dict[str, str] = {}
    for start in range(0, len(instances), MAX_IDS_PER_STOP):
        chunk = list(instances[start:start + MAX_IDS_PER_STOP])
        params = {"RegionId": region, "StoppedMode": STOPPED_MODE, "ForceStop": "false",
                  "BatchOptimization": "SuccessFirst"}
        params.update({f"InstanceId.{n}": instance for n, instance in enumerate(chunk, 1)})
        try:
            answer = ecs("StopInstances", params)
        except ApiError as e:
            errors.update({instance: str(e) for instance in chunk})
            continue
        wrapper = answer.get("InstanceResponses") if isinstance(answer, dict) else None
        responses = wrapper.get("InstanceResponse") if isinstance(wrapper, dict) else None
        outcome = {str(r["InstanceId"]): r for r in (responses if isinstance(responses, list) else [])
                   if isinstance(r, dict) and r.get("InstanceId")}
        for instance in chunk:
            result = outcome.get(instance)
            if result is None:
                errors[instance] = "not in the StopInstances answer"
            elif str(result.get("Code")) != STOP_OK:
                errors[instance] = f"{result.get('Code')}: {result.get('Message')}"
            else:
                stopped.append(instance)
    return stopped, errors


def _hard_stop(report: Report, ecs: Call, budget: Budget, notify: Notify, dry_run: bool, why: str) -> None:
    try:
        running = [i["InstanceId"] for i in stack_instances(ecs, budget.region, budget.project, budget.stack)
                   if i.get("Status") in RUNNING_STATES]
    except ApiError as e:
        report.failed.append(f"hard stop: cannot list the stack's nodes: {e}")
        return
    if dry_run:
        report.stopped += running
        return
    pending, errors = running, {}
    for attempt in range(STOP_ATTEMPTS):
        if not pending:
            break
        if attempt:
            time.sleep(STOP_RETRY_SECONDS)
        stopped, errors = stop_instances(ecs, budget.region, pending)
        report.stopped += stopped
        pending = [i for i in pending if i in errors]
    report.failed += [f"hard stop of {i}: {errors[i]} (tried {STOP_ATTEMPTS} times; not stopped, the next run "
                      "tries again)" for i in pending]
    if report.stopped or pending:
        _alert(report, notify, dry_run,
               f"goldenenv budget: hard stop of {budget.stack}" + (" incomplete" if pending else ""), (
                   f"Project {budget.project} stack {budget.stack} is at {why}; the guard stopped "
                   f"{len(report.stopped)} node(s): {', '.join(report.stopped) or 'none'}. Disks keep billing."
                   + (f" It could not stop {len(pending)} node(s), tried {STOP_ATTEMPTS} times: "
                      + "; ".join(f"{i} ({errors[i]})" for i in pending)
                      + ". The next run, in 15 minutes, tries again." if pending else "")))


def _remember(report: Report, ecs: Call, region: str, memory: Memory, before: str, dry_run: bool) -> None:
    if dry_run or memory.encode() == before:
        return
    try:
        write_memory(ecs, region, memory)
    except ApiError as e:
        report.failed.append(f"cannot remember the alerts sent ({e}); they may repeat on the next run")


# ---------------------------------------------------------------- delivery

def direct_mail(dm: Call, sender: str, recipients: Sequence[str]) -> Notify:
    """Alerts as one email each, through Direct Mail from a sender address verified in its console."""

    def send(subject: str, body: str) -> None:
        print(f"ALERT {subject}: {body}")
        if not (sender and recipients):
            raise RuntimeError("no Direct Mail sender address or no recipients: the alert is only in this output")
        dm("SingleSendMail", {"AccountName": sender, "AddressType": "1", "ReplyToAddress": "false",
                              "ToAddress": ",".join(recipients), "Subject": subject[:100], "TextBody": body})

    return send


# ---------------------------------------------------------------- Function Compute entry point

def budget_from_env(env: dict[str, str]) -> Budget:
    return Budget(
        project=env[PROJECT_ENV], stack=env[STACK_ENV], region=env[REGION_ENV],
        monthly_limit=float(env[LIMIT_ENV]), currency=env.get(CURRENCY_ENV, "USD"),
        thresholds=tuple(int(t) for t in env.get(THRESHOLDS_ENV, "").split(",") if t.strip()),
        hard_stop=env.get(HARD_STOP_ENV, "false").strip().lower() == "true",
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
    notify = direct_mail(rpc_client(env[DM_ENDPOINT_ENV], DM_VERSION, credentials), env.get(SENDER_ENV, ""),
                         [e for e in env.get(EMAILS_ENV, "").split(",") if e])
    report = run(budget, bill=rpc_client(env[BSS_ENDPOINT_ENV], BSS_VERSION, credentials),
                 ecs=rpc_client(f"ecs.{budget.region}.aliyuncs.com", ECS_VERSION, credentials),
                 notify=notify, now=datetime.now(timezone.utc), dry_run=dry_run)
    for line in report.log_lines():
        print(line)
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} problem(s); see the lines above")
    return json.dumps(report.to_dict())
