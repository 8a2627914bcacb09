"""The reaper: stops (or terminates) a stack's instances once their time to live has run out, or all of them at once.

It runs as an AWS Lambda function, so a cluster is torn down with the laptop off: on a schedule for the time to
live, and from the budget's SNS topic for the hard stop. This file is shipped alone as the function's code: it
imports the standard library only, and boto3 (which the Lambda runtime provides) inside ``handler``. The tag keys
are therefore written here again; a unit test checks them against goldenenv.spec, so the fact still has one owner.

Expiry is computed here, not in the program: an instance expires at its LaunchTime plus its ``goldenenv:ttl-hours``
tag, so no timestamp is baked into the Pulumi program and ``pulumi up`` stays deterministic. LaunchTime is the
last start, so a node started again by hand after the reaper stopped it gets a fresh time to live.

A node is one of the stack's only when both its stack tag and its project tag match: two projects may each have
a stack named ``dev`` in one account. Each node is judged on its own, so one bad tag cannot shield its siblings;
calls carry at most 1,000 ids, and a failed call is retried per instance so the report says exactly which failed.
A throttled call (RequestLimitExceeded, Throttling...) is retried with backoff; a node still pending when it is to
be stopped (EC2 refuses with IncorrectInstanceState) is watched until it runs and then stopped, for a while in the
same invocation, and by the next scheduled run after that.

The hard stop is never lost: AWS Budgets notifies once a month, so the notification first records the month in
the stack's SSM parameter (``GOLDENENV_HARD_STOP_PARAMETER``), then stops the nodes. Every scheduled run reads
that parameter and, while it holds the current month (UTC, as Budgets counts), stops every running or pending node
instead of judging time to live; a node started again is stopped within one schedule period. The stop ends with
the month, when `up` deploys a budget above the one the stop recorded (``GOLDENENV_BUDGET_LIMIT``), or when an
operator writes ``none`` to the parameter.

A node that cannot be judged (an unreadable ttl tag, no launch time) fails the invocation after its siblings
are reaped, so Lambda's Errors metric counts it and the error names it.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

STACK_TAG_KEY = "goldenenv:stack"
"""Equal to goldenenv.spec.STACK_TAG_KEY (checked by a test)."""
PROJECT_TAG_KEY = "project"
"""The key goldenenv.spec.Tags.resolved gives the project (checked by a test)."""
TTL_TAG_KEY = "goldenenv:ttl-hours"
"""Hours an instance may run after its launch; set on the stack's nodes by the program."""
ACTIONS = ("stop", "terminate")
LIVE_STATES = ("pending", "running")
TTL, HARD_STOP = "ttl", "hard stop"
"""What triggered a run: a node's time to live, or the budget's hard stop (every node, now)."""

MAX_IDS_PER_CALL = 1000
"""StopInstances and TerminateInstances take up to 1,000 instance ids a call (EC2 API reference)."""
MAX_FILTER_VALUES = 200
"""Instance ids per filter when looking up spot requests; EC2 caps the values of a filter on some calls at 200."""
KEEPS_A_STOPPED_SPOT = ("open", "active", "disabled")
"""States of a persistent spot request that can hold a stopped instance; cancelled or closed ones cannot."""

STACK_ENV = "GOLDENENV_STACK"
PROJECT_ENV = "GOLDENENV_PROJECT"
ACTION_ENV = "GOLDENENV_ACTION"
DRY_RUN_ENV = "GOLDENENV_DRY_RUN"
BUDGET_LIMIT_ENV = "GOLDENENV_BUDGET_LIMIT"
"""The stack's monthly budget as deployed: the hard stop records it, and a later limit above the recorded one (the
budget raised by `up`) ends the stop. Unset: only the month's end or an operator ends it."""
HARD_STOP_PARAMETER_ENV = "GOLDENENV_HARD_STOP_PARAMETER"
"""The SSM parameter the hard stop records its month in; unset: this function neither records nor reads one."""
NO_HARD_STOP = "none"
"""The parameter's value while no hard stop is in force; writing it ends one early."""
THROTTLING = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "ThrottledException",
                        "TooManyRequestsException", "RequestThrottled", "RequestThrottledException", "SlowDown"})
"""Error codes of a throttled AWS call: retried with backoff."""
RETRY_ATTEMPTS = 8
RETRY_BASE_SECONDS, RETRY_CAP_SECONDS = 0.5, 20.0
"""Exponential backoff with full jitter: at most about a minute of waiting for one call."""
PENDING_WAIT_SECONDS, PENDING_POLL_SECONDS = 120.0, 10.0
"""How long an invocation watches pending nodes it could not stop yet, and how often it looks again."""
_sleep = time.sleep
_monotonic = time.monotonic
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

T = TypeVar("T")


@dataclass(frozen=True)
class Decision:
    instance_id: str
    reason: str
    action: str | None = None
    """stop | terminate for an instance acted on (or that a dry run would act on); None when kept or skipped."""


@dataclass
class Report:
    project: str
    stack: str
    trigger: str
    action: str
    dry_run: bool
    now: str
    acted: list[Decision] = field(default_factory=list)
    kept: list[Decision] = field(default_factory=list)
    """Instances not due: time left, or no time to live."""
    skipped: list[Decision] = field(default_factory=list)
    """Instances that could not be judged (a bad ttl tag, no launch time); the reason says why."""
    failed: list[Decision] = field(default_factory=list)
    """Instances whose stop or terminate call failed, or whose spot request could not be read; the reason is the error."""
    hard_stop_state: str = ""
    """What the hard-stop parameter said (or why it could not be read); empty when none is configured."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def log_lines(self) -> list[str]:
        """One line per instance, for CloudWatch Logs."""
        prefix = (f"project={self.project} stack={self.stack} {self.trigger} action={self.action}"
                  f"{' DRY RUN' if self.dry_run else ''}:")
        verb = "would " if self.dry_run else ""
        lines = [f"{prefix} {verb}{d.action} {d.instance_id}: {d.reason}" for d in self.acted]
        lines += [f"{prefix} keep {d.instance_id}: {d.reason}" for d in self.kept]
        lines += [f"{prefix} SKIPPED {d.instance_id}: {d.reason}" for d in self.skipped]
        lines += [f"{prefix} FAILED to {d.action or 'act on'} {d.instance_id}: {d.reason}" for d in self.failed]
        if self.hard_stop_state:
            lines.insert(0, f"{prefix} hard stop: {self.hard_stop_state}")
        lines.append(f"{prefix} {len(self.acted)} {verb}acted on, {len(self.kept)} kept, "
                     f"{len(self.skipped)} skipped, {len(self.failed)} failed")
        return lines


class Unjudgeable(ValueError):
    """A node whose tags or description do not allow a decision; it is reported and skipped."""


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore ClientError ('' for any other exception); this file imports no botocore."""
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _retry(call: Callable[[], T]) -> T:
    """``call()``, again after a backoff while AWS throttles it; any other error, or the last one, is raised."""
    for attempt in range(RETRY_ATTEMPTS):
        try:
            return call()
        except Exception as error:
            if error_code(error) not in THROTTLING or attempt == RETRY_ATTEMPTS - 1:
                raise
            _sleep(random.uniform(0, min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** attempt)))
    raise AssertionError("unreachable")


def reap(ec2: Any, project: str, stack: str, now: datetime, action: str = "stop", dry_run: bool = False) -> Report:
    """Stop or terminate the stack's live instances whose time to live has passed at ``now``.

    ``ec2`` is a boto3 EC2 client. Only instances tagged with both this project and this stack are listed; of
    those, instances without a ttl tag are kept, and instances whose ttl tag or launch time cannot be read are
    skipped and reported. "stop" terminates a one-time spot instance, which EC2 cannot stop. A dry run reports the
    same decisions and calls neither StopInstances nor TerminateInstances.
    """
    return _run(ec2, project, stack, now, action, dry_run, TTL, lambda instance: _expiry(instance, now))


def hard_stop(ec2: Any, project: str, stack: str, now: datetime, dry_run: bool = False) -> Report:
    """The budget's hard stop: stop every live instance of the stack now, terminating one-time spot instances.

    Stopped on-demand and persistent-spot nodes keep their EBS volumes; terminated one-time spot nodes lose their
    root volume and, like every stopped node, their instance-store (local NVMe) data.
    """
    return _run(ec2, project, stack, now, "stop", dry_run, HARD_STOP,
                lambda instance: "the budget's actual spend passed 100 %")


def _run(ec2: Any, project: str, stack: str, now: datetime, action: str, dry_run: bool, trigger: str,
         due: Callable[[dict[str, Any]], str | Decision]) -> Report:
    """List the stack's nodes, judge each with ``due`` (a reason to act, or a Decision to keep), then act."""
    if action not in ACTIONS:
        raise ValueError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone (e.g. datetime.now(timezone.utc))")
    if not project or not stack:
        raise ValueError("both the project and the stack must be named: they select the nodes")
    report = Report(project, stack, trigger, action, dry_run, now.isoformat())
    chosen: list[tuple[dict[str, Any], str]] = []
    for instance in _live_instances(ec2, project, stack):
        try:
            verdict = due(instance)
        except Unjudgeable as problem:
            report.skipped.append(Decision(instance["InstanceId"], str(problem)))
            continue
        if isinstance(verdict, Decision):
            report.kept.append(verdict)
        else:
            chosen.append((instance, verdict))
    spot = [i["InstanceId"] for i, _ in chosen if action == "stop" and i.get("InstanceLifecycle") == "spot"]
    requests, unreadable = _spot_requests(ec2, spot)
    decisions = []
    for instance, reason in chosen:
        instance_id = instance["InstanceId"]
        if instance_id in unreadable:
            report.failed.append(Decision(instance_id, f"its spot request could not be read: {unreadable[instance_id]}"))
        elif instance_id in spot:
            decisions.append(_spot_decision(instance_id, reason, requests.get(instance_id)))
        else:
            decisions.append(Decision(instance_id, reason, action))
    pending = {i["InstanceId"] for i, _ in chosen if (i.get("State") or {}).get("Name") == "pending"}
    waiting = _act(ec2, report, decisions, dry_run, pending)
    if waiting:
        _stop_once_running(ec2, project, stack, report, waiting)
    return report


def _live_instances(ec2: Any, project: str, stack: str, instance_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    filters = [
        {"Name": f"tag:{STACK_TAG_KEY}", "Values": [stack]},
        {"Name": f"tag:{PROJECT_TAG_KEY}", "Values": [project]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]
    if instance_ids:
        filters.append({"Name": "instance-id", "Values": list(instance_ids)})

    def listing() -> list[dict[str, Any]]:
        pages = ec2.get_paginator("describe_instances").paginate(Filters=filters)
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    return _retry(listing)


def _stop_once_running(ec2: Any, project: str, stack: str, report: Report, waiting: list[Decision]) -> None:
    """Nodes EC2 would not stop while pending: look again every PENDING_POLL_SECONDS and act on each once it runs
    (or is gone); those still pending after PENDING_WAIT_SECONDS fail, and the next scheduled run retries them."""
    deadline = _monotonic() + PENDING_WAIT_SECONDS
    while waiting and _monotonic() < deadline:
        _sleep(PENDING_POLL_SECONDS)
        try:
            live = {i["InstanceId"]: i for chunk in _chunks([d.instance_id for d in waiting], MAX_FILTER_VALUES)
                    for i in _live_instances(ec2, project, stack, chunk)}
        except Exception as error:
            report.failed += [Decision(d.instance_id, f"still pending; it could not be looked at again: "
                                                      f"{type(error).__name__}: {error}", d.action) for d in waiting]
            return
        for decision in [d for d in waiting if d.instance_id not in live]:
            waiting.remove(decision)
            report.kept.append(Decision(decision.instance_id, "was pending, and is no longer running nor pending"))
        ready = [d for d in waiting if (live[d.instance_id].get("State") or {}).get("Name") != "pending"]
        waiting[:] = [d for d in waiting if d not in ready]
        waiting += _act(ec2, report, ready, False, set())
    report.failed += [Decision(d.instance_id, f"still pending after {PENDING_WAIT_SECONDS:g} s: EC2 stops a node only "
                                              "once it runs; the next scheduled run stops it", d.action)
                      for d in waiting]


def _expiry(instance: dict[str, Any], now: datetime) -> str | Decision:
    """Why an expired node is due; a Decision to keep one that is not."""
    instance_id = instance["InstanceId"]
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    raw = tags.get(TTL_TAG_KEY)
    if raw is None:
        return Decision(instance_id, f"no {TTL_TAG_KEY} tag: no time to live")
    try:
        hours = float(raw)
    except ValueError:
        hours = math.nan
    if not (math.isfinite(hours) and hours > 0):
        raise Unjudgeable(f"{TTL_TAG_KEY} tag {raw!r} is not a positive number of hours")
    launched = instance.get("LaunchTime")
    if not isinstance(launched, datetime) or launched.tzinfo is None:
        raise Unjudgeable(f"no launch time in its description ({launched!r}): its time to live cannot be counted")
    try:
        expires = launched + timedelta(hours=hours)
    except OverflowError:
        raise Unjudgeable(f"{TTL_TAG_KEY} tag {raw!r} runs past the last date Python can count") from None
    if now < expires:
        return Decision(instance_id, f"expires at {expires.isoformat()} ({raw} h after launch)")
    return f"expired at {expires.isoformat()} ({raw} h after launch)"


def _spot_decision(instance_id: str, reason: str, request: dict[str, Any] | None) -> Decision:
    """Stop a spot node held by a live persistent request; terminate any other, which EC2 cannot stop."""
    if request and request.get("Type") == "persistent" and request.get("State") in KEEPS_A_STOPPED_SPOT:
        return Decision(instance_id, f"{reason}; persistent spot request {request.get('SpotInstanceRequestId')}: "
                                     "stopped, and it stays stopped until started", "stop")
    kind = f"a {request.get('Type')} spot request ({request.get('State')})" if request else "no spot request on record"
    return Decision(instance_id, f"{reason}; {kind} cannot hold a stopped instance, so it is terminated "
                                 "(its root volume and instance-store data are lost)", "terminate")


def _spot_requests(ec2: Any, instance_ids: Sequence[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The spot request of each spot instance, by instance id; and the error for each whose lookup failed."""
    found: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}

    def lookup(ids: Sequence[str]) -> None:
        pages = ec2.get_paginator("describe_spot_instance_requests").paginate(
            Filters=[{"Name": "instance-id", "Values": list(ids)}])
        for page in pages:
            for request in page["SpotInstanceRequests"]:
                found[request["InstanceId"]] = request

    for chunk in _chunks(instance_ids, MAX_FILTER_VALUES):
        try:
            lookup(chunk)
        except Exception:  # botocore's ClientError; retried one by one so only the broken lookups fail
            for instance_id in chunk:
                try:
                    lookup([instance_id])
                except Exception as error:
                    errors[instance_id] = f"{type(error).__name__}: {error}"
    return found, errors


def _act(ec2: Any, report: Report, decisions: list[Decision], dry_run: bool, pending: set[str]) -> list[Decision]:
    """Stop, then terminate, in calls of at most 1,000 ids; a throttled call is retried with backoff, and a call
    that fails is retried per instance. Returns the decisions on ``pending`` nodes EC2 would not stop yet."""
    waiting: list[Decision] = []
    for act, call in (("stop", ec2.stop_instances), ("terminate", ec2.terminate_instances)):
        for chunk in _chunks([d for d in decisions if d.action == act], MAX_IDS_PER_CALL):
            if dry_run:
                report.acted += chunk
                continue
            try:
                _retry(lambda: call(InstanceIds=[d.instance_id for d in chunk]))
                report.acted += chunk
            except Exception:  # botocore's ClientError; this file imports no botocore
                for decision in chunk:
                    try:
                        _retry(lambda: call(InstanceIds=[decision.instance_id]))
                        report.acted.append(decision)
                    except Exception as error:
                        if decision.instance_id in pending and error_code(error) == "IncorrectInstanceState":
                            waiting.append(decision)
                        else:
                            report.failed.append(Decision(decision.instance_id, f"{type(error).__name__}: {error}", act))
    return waiting


def _chunks(items: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handler(event: Any, context: Any) -> dict[str, Any]:
    """Lambda entry point; configured by GOLDENENV_PROJECT, GOLDENENV_STACK, GOLDENENV_ACTION (stop),
    GOLDENENV_DRY_RUN (false) and GOLDENENV_HARD_STOP_PARAMETER (the hard stop's SSM parameter, if any).

    A notification from SNS (the budget's topic) or an event ``{"hardStop": true}`` is the hard stop: it records
    the month in the parameter first, then stops every node of the stack. Any other event (the schedule's) stops
    every node while the parameter holds the current month, and otherwise runs the time to live. An event
    ``{"dryRun": true}`` turns a single invocation into a dry run (it cannot turn one off, and a dry run records
    nothing), so ``aws lambda invoke --payload '{"dryRun": true}'`` shows what the next run would do.

    The invocation fails (Lambda's Errors metric counts it, the error names the nodes) when a node could not be
    torn down or judged, or the hard stop could not be recorded or read; the nodes it could act on are acted on.
    """
    import boto3

    dry_run = _flag(os.environ.get(DRY_RUN_ENV, "false"))
    if isinstance(event, dict) and event.get("dryRun") is True:
        dry_run = True
    project, stack, ec2 = os.environ[PROJECT_ENV], os.environ[STACK_ENV], boto3.client("ec2")
    parameter = os.environ.get(HARD_STOP_PARAMETER_ENV, "")
    now, problems = utc_now(), []
    if is_hard_stop(event):
        state = "not recorded (dry run)" if dry_run else ""
        if parameter and not dry_run:
            try:
                state = record_hard_stop(boto3.client("ssm"), parameter, now, _trigger_of(event))
            except Exception as error:  # the nodes are still stopped; the failure fails the invocation
                state = f"COULD NOT be recorded in {parameter}: {type(error).__name__}: {error}"
                problems.append(f"the hard stop could not be recorded in {parameter}, so no scheduled run will "
                                f"repeat it ({type(error).__name__}: {error})")
        report = hard_stop(ec2, project, stack, now, dry_run)
    else:
        in_force, state = (hard_stop_in_force(boto3.client("ssm"), parameter, now, problems) if parameter
                           else (False, ""))
        if in_force:
            report = hard_stop(ec2, project, stack, now, dry_run)
        else:
            report = reap(ec2, project, stack, now, os.environ.get(ACTION_ENV, "stop"), dry_run)
    report.hard_stop_state = state
    for line in report.log_lines():
        print(line)
    if report.failed:
        problems.append(f"{len(report.failed)} instance(s) could not be torn down: "
                        f"{', '.join(d.instance_id for d in report.failed)}")
    if report.skipped:
        problems.append(f"{len(report.skipped)} instance(s) could not be judged and keep running: "
                        + "; ".join(f"{d.instance_id} ({d.reason})" for d in report.skipped))
    if problems:
        raise RuntimeError(f"project={project} stack={stack}: " + "; ".join(problems) + "; see the lines above")
    return report.to_dict()


def month_of(now: datetime) -> str:
    """The budget period ``now`` falls in: AWS Budgets counts calendar months in UTC."""
    return now.astimezone(timezone.utc).strftime("%Y-%m")


def record_hard_stop(ssm: Any, parameter: str, now: datetime, trigger: str) -> str:
    """Write the hard stop of this month to the parameter (retried while throttled); returns what it wrote."""
    record = {"month": month_of(now), "since": now.isoformat(), "by": trigger}
    limit = _budget_limit()
    if limit is not None:
        record["limit"] = limit
    value = json.dumps(record, sort_keys=True)
    _retry(lambda: ssm.put_parameter(Name=parameter, Value=value, Type="String", Overwrite=True))
    return (f"recorded in {parameter} for {month_of(now)}: later scheduled runs stop every node until the month ends "
            "or the budget is raised")


def hard_stop_in_force(ssm: Any, parameter: str, now: datetime, problems: list[str]) -> tuple[bool, str]:
    """Whether the parameter holds a hard stop of the current month, and what to log about it. A value that cannot
    be read keeps the hard stop in force (it must not be lost) and is added to ``problems``; a parameter that does
    not exist, or that this function may not read (it is not this stack's), means no hard stop."""
    release = f"aws ssm put-parameter --overwrite --name {parameter} --value {NO_HARD_STOP}"
    try:
        value = _retry(lambda: ssm.get_parameter(Name=parameter))["Parameter"]["Value"]
    except Exception as error:
        if error_code(error) in ("ParameterNotFound", "AccessDeniedException"):
            return False, f"none recorded ({parameter}: {error_code(error)})"
        problems.append(f"the hard-stop parameter {parameter} could not be read ({type(error).__name__}: {error}); "
                        "the time to live was run instead")
        return False, f"UNKNOWN: {parameter} could not be read: {type(error).__name__}: {error}"
    if value.strip() == NO_HARD_STOP:
        return False, f"none in force ({parameter} = {NO_HARD_STOP})"
    try:
        recorded = json.loads(value)
        month = recorded["month"]
        datetime.strptime(month, "%Y-%m")
    except (ValueError, TypeError, KeyError):
        problems.append(f"the hard-stop parameter {parameter} holds {value!r}, which is not a month: every node "
                        f"is stopped until it does, or `{release}`")
        return True, f"IN FORCE: {parameter} holds {value!r}, which is not a month; stopping every node"
    if month != month_of(now):
        return False, f"the hard stop of {month} ended with its month; nodes are left alone"
    limit, stopped_at = _budget_limit(), recorded.get("limit")
    if limit is not None and isinstance(stopped_at, (int, float)) and limit > stopped_at:
        return False, (f"the hard stop of {month} ended: the budget was raised from {stopped_at:g} to {limit:g}; "
                       "nodes are left alone (AWS Budgets notifies again if spending passes the new limit)")
    return True, (f"IN FORCE for {month} ({value}): stopping every running or pending node until the month ends or "
                  f"`up` raises the budget; `{release}` ends it now")


def _budget_limit() -> float | None:
    """The deployed monthly budget (BUDGET_LIMIT_ENV), or None when unset or unreadable."""
    try:
        value = float(os.environ.get(BUDGET_LIMIT_ENV, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _trigger_of(event: Any) -> str:
    return "a budget notification" if isinstance(event, dict) and event.get("hardStop") is not True else "a request"


def is_hard_stop(event: Any) -> bool:
    """A message from SNS (only the budget's topic may invoke the function that way) or an explicit request."""
    if not isinstance(event, dict):
        return False
    records = event.get("Records")
    from_sns = isinstance(records, list) and any(
        isinstance(r, dict) and r.get("EventSource") == "aws:sns" for r in records)
    return from_sns or event.get("hardStop") is True


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value not in _TRUE | _FALSE:
        raise ValueError(f"{DRY_RUN_ENV}={text!r}: use true or false")
    return value in _TRUE
