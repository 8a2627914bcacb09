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
  so the guard sees yesterday's spend at best: the limit is a soft one.
- memory: which thresholds already alerted this month is kept in one tag (``goldenenv:budget-alerts``) on the
  stack's security groups, found by the project and stack tags. A security group lives exactly as long as the
  stack and is never stopped or rolled, so the memory survives restarts of the function and of the nodes. If
  writing it fails, the next run alerts again: an alert may repeat, it is never lost.
- alerts: one message per threshold, to the budget's emails through Direct Mail (SingleSendMail) from the sender
  address the account has verified there; every alert is also printed to the invocation's output. Without a
  sender an alert cannot be delivered, which fails the invocation (the function's error count shows it). A bill
  the guard cannot read is itself an alert (once a day) and fails the invocation: never a silent pass.
- hard stop: at 100 % or more, every running node of the stack (both tags match) is stopped with StopInstances,
  in calls of at most 100 ids, in economical mode (StopCharging: a pay-as-you-go instance stops billing for its
  vCPUs, memory and GPUs; disks keep billing). Nodes started again by hand are stopped on the next run while
  spend stays over the limit: raise the limit or turn the hard stop off to run again this month.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

STACK_TAG_KEY = "goldenenv:stack"
"""Equal to goldenenv.spec.STACK_TAG_KEY (checked by a test)."""
PROJECT_TAG_KEY = "project"
"""The key goldenenv.spec.Tags.resolved gives the project (checked by a test)."""
STATE_TAG_KEY = "goldenenv:budget-alerts"
"""On the stack's security groups: `<YYYY-MM>:<thresholds alerted, comma separated>` and `;e<YYYY-MM-DD>`, the
last day an unreadable bill was reported."""

BSS_VERSION = "2017-12-14"
ECS_VERSION = "2014-05-26"
DM_VERSION = "2015-11-23"
BILL_PAGE_SIZE = 300
"""DescribeSplitItemBill returns at most 300 items a page."""
ECS_PAGE_SIZE = 100
MAX_IDS_PER_STOP = 100
"""StopInstances takes up to 100 InstanceId.N a call."""
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

def month_spend(bill: Call, stack: str, cycle: str) -> tuple[float, set[str]]:
    """The stack's pretax spend for the billing cycle (YYYY-MM) over every page, and the currencies it is in."""
    total, currencies, token = 0.0, set(), None
    while True:
        params = {"BillingCycle": cycle, "MaxResults": str(BILL_PAGE_SIZE),
                  "TagFilter.1.TagKey": STACK_TAG_KEY, "TagFilter.1.TagValues.1": stack}
        if token:
            params["NextToken"] = token
        data = bill("DescribeSplitItemBill", params).get("Data") or {}
        for item in data.get("Items") or []:
            total += float(item.get("PretaxAmount") or 0.0)
            if item.get("Currency"):
                currencies.add(str(item["Currency"]))
        token = data.get("NextToken")
        if not token:
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
    """What the guard remembers between runs: thresholds alerted in `cycle`, and the last day it reported an
    unreadable bill; `holders` are the security groups the memory is kept on."""

    cycle: str
    alerted: set[int] = field(default_factory=set)
    error_day: str = ""
    holders: list[str] = field(default_factory=list)

    def encode(self) -> str:
        text = f"{self.cycle}:{','.join(str(t) for t in sorted(self.alerted))}"
        return text + (f";e{self.error_day}" if self.error_day else "")


def parse_memory(values: Sequence[str], cycle: str) -> Memory:
    """The union of what every holder remembers for `cycle`; other months are forgotten."""
    memory = Memory(cycle)
    for value in values:
        head, _, error = value.partition(";e")
        month, _, levels = head.partition(":")
        if month == cycle:
            memory.alerted |= {int(t) for t in levels.split(",") if t.strip().isdigit()}
        if error.startswith(cycle):
            memory.error_day = max(memory.error_day, error)
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
        spend = "unknown" if self.spend is None else f"{self.spend:.2f} ({self.percent:.1f} % of the limit)"
        lines = [f"{prefix} spend {spend}"]
        lines += [f"{prefix} ALERT {subject}" for subject in self.alerts]
        lines += [f"{prefix} stopped {i}" for i in self.stopped]
        lines += [f"{prefix} FAILED {why}" for why in self.failed]
        return lines


def run(budget: Budget, *, bill: Call, ecs: Call, notify: Notify, now: datetime, dry_run: bool = False) -> Report:
    """One guard run at `now`: read the bill, alert new thresholds, hard stop, remember. Never raises for a
    cloud error: each one is in the report (and an unreadable bill is alerted)."""
    cycle, today = now.strftime("%Y-%m"), now.strftime("%Y-%m-%d")
    report = Report(budget.project, budget.stack, cycle, dry_run=dry_run)
    try:
        memory = read_memory(ecs, budget.region, budget.project, budget.stack, cycle)
    except ApiError as e:
        report.failed.append(f"cannot read what was already alerted ({e}); alerts may repeat")
        memory = Memory(cycle)
    before = memory.encode()

    try:
        spend, currencies = month_spend(bill, budget.stack, cycle)
    except (ApiError, ValueError, TypeError, AttributeError) as e:
        report.failed.append(f"cannot read the bill: {e}")
        if memory.error_day != today:
            subject = f"goldenenv budget guard of {budget.stack} cannot read the bill"
            _alert(report, notify, dry_run, subject, (
                f"The budget guard of project {budget.project} stack {budget.stack} could not read this month's "
                f"spend from DescribeSplitItemBill: {e}. Until it can, no threshold alerts and no hard stop happen. "
                "Check the function's RAM role (bssapi:DescribeSplitItemBill) and that the split bill is enabled "
                "in the Expenses and Costs console. This alert repeats once a day while it lasts."))
            memory.error_day = today
        _remember(report, ecs, budget.region, memory, before, dry_run)
        return report

    report.spend = spend
    report.percent = 100.0 * spend / budget.monthly_limit
    foreign = currencies - {budget.currency}
    if foreign:
        report.failed.append(f"the bill is in {', '.join(sorted(foreign))}, the limit in {budget.currency}: "
                             "compared as numbers")
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
        _hard_stop(report, ecs, budget, notify, dry_run)
    _remember(report, ecs, budget.region, memory, before, dry_run)
    return report


def _alert(report: Report, notify: Notify, dry_run: bool, subject: str, body: str) -> None:
    report.alerts.append(subject)
    if dry_run:
        return
    try:
        notify(subject, body)
    except Exception as e:  # noqa: BLE001 - a failed delivery is reported, never fatal to the stop
        report.failed.append(f"could not send the alert '{subject}': {e}")


def _hard_stop(report: Report, ecs: Call, budget: Budget, notify: Notify, dry_run: bool) -> None:
    try:
        running = [i["InstanceId"] for i in stack_instances(ecs, budget.region, budget.project, budget.stack)
                   if i.get("Status") in RUNNING_STATES]
    except ApiError as e:
        report.failed.append(f"hard stop: cannot list the stack's nodes: {e}")
        return
    for start in range(0, len(running), MAX_IDS_PER_STOP):
        chunk = running[start:start + MAX_IDS_PER_STOP]
        if dry_run:
            report.stopped += chunk
            continue
        params = {"RegionId": budget.region, "StoppedMode": STOPPED_MODE, "ForceStop": "false",
                  "BatchOptimization": "SuccessFirst"}
        params.update({f"InstanceId.{n}": instance for n, instance in enumerate(chunk, 1)})
        try:
            answer = ecs("StopInstances", params)
        except ApiError as e:
            report.failed += [f"hard stop of {i}: {e}" for i in chunk]
            continue
        outcome = {r.get("InstanceId"): r for r in (answer.get("InstanceResponses") or {}).get("InstanceResponse", [])}
        for instance in chunk:
            result = outcome.get(instance, {})
            if result and str(result.get("Code", "200")) != "200":
                report.failed.append(f"hard stop of {instance}: {result.get('Code')}: {result.get('Message')}")
            else:
                report.stopped.append(instance)
    if report.stopped and not dry_run:
        _alert(report, notify, dry_run, f"goldenenv budget: hard stop of {budget.stack}", (
            f"Spend of project {budget.project} stack {budget.stack} is {report.percent:.1f} % of its monthly limit; "
            f"the guard stopped {len(report.stopped)} node(s): {', '.join(report.stopped)}. Disks keep billing."))


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
