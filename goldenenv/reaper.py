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
"""

from __future__ import annotations

import math
import os
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
        lines.append(f"{prefix} {len(self.acted)} {verb}acted on, {len(self.kept)} kept, "
                     f"{len(self.skipped)} skipped, {len(self.failed)} failed")
        return lines


class Unjudgeable(ValueError):
    """A node whose tags or description do not allow a decision; it is reported and skipped."""


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
    _act(ec2, report, decisions, dry_run)
    return report


def _live_instances(ec2: Any, project: str, stack: str) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": f"tag:{STACK_TAG_KEY}", "Values": [stack]},
        {"Name": f"tag:{PROJECT_TAG_KEY}", "Values": [project]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ])
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


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


def _act(ec2: Any, report: Report, decisions: list[Decision], dry_run: bool) -> None:
    """Stop, then terminate, in calls of at most 1,000 ids; a failed call is retried per instance."""
    for act, call in (("stop", ec2.stop_instances), ("terminate", ec2.terminate_instances)):
        for chunk in _chunks([d for d in decisions if d.action == act], MAX_IDS_PER_CALL):
            if dry_run:
                report.acted += chunk
                continue
            try:
                call(InstanceIds=[d.instance_id for d in chunk])
                report.acted += chunk
            except Exception:  # botocore's ClientError; this file imports no botocore
                for decision in chunk:
                    try:
                        call(InstanceIds=[decision.instance_id])
                        report.acted.append(decision)
                    except Exception as error:
                        report.failed.append(Decision(decision.instance_id, f"{type(error).__name__}: {error}", act))


def _chunks(items: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handler(event: Any, context: Any) -> dict[str, Any]:
    """Lambda entry point; configured by GOLDENENV_PROJECT, GOLDENENV_STACK, GOLDENENV_ACTION (stop) and
    GOLDENENV_DRY_RUN (false).

    A notification from SNS (the budget's topic) or an event ``{"hardStop": true}`` is the hard stop: every node
    of the stack, now. Any other event runs the time to live. An event ``{"dryRun": true}`` turns a single
    invocation into a dry run (it cannot turn one off), so ``aws lambda invoke --payload '{"dryRun": true}'``
    shows what the next run would do.
    """
    import boto3

    dry_run = _flag(os.environ.get(DRY_RUN_ENV, "false"))
    if isinstance(event, dict) and event.get("dryRun") is True:
        dry_run = True
    project, stack, ec2 = os.environ[PROJECT_ENV], os.environ[STACK_ENV], boto3.client("ec2")
    if is_hard_stop(event):
        report = hard_stop(ec2, project, stack, utc_now(), dry_run)
    else:
        report = reap(ec2, project, stack, utc_now(), os.environ.get(ACTION_ENV, "stop"), dry_run)
    for line in report.log_lines():
        print(line)
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} instance(s) could not be torn down; see the lines above")
    return report.to_dict()


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
