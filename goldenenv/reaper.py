"""The reaper: stops (or terminates) a stack's instances once their time to live has run out.

It runs as an AWS Lambda function on a schedule, so a cluster is torn down with the laptop off. This file is
shipped alone as the function's code: it imports the standard library only, and boto3 (which the Lambda runtime
provides) inside ``handler``. The tag keys are therefore written here again; a unit test checks them against
goldenenv.spec, so the fact still has one owner.

Expiry is computed here, not in the program: an instance expires at its LaunchTime plus its ``goldenenv:ttl-hours``
tag, so no timestamp is baked into the Pulumi program and ``pulumi up`` stays deterministic. LaunchTime is the
last start, so a node started again by hand after the reaper stopped it gets a fresh time to live.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

STACK_TAG_KEY = "goldenenv:stack"
"""Equal to goldenenv.spec.STACK_TAG_KEY (checked by a test)."""
TTL_TAG_KEY = "goldenenv:ttl-hours"
"""Hours an instance may run after its launch; set on the stack's nodes by the program."""
ACTIONS = ("stop", "terminate")
LIVE_STATES = ("pending", "running")

STACK_ENV = "GOLDENENV_STACK"
ACTION_ENV = "GOLDENENV_ACTION"
DRY_RUN_ENV = "GOLDENENV_DRY_RUN"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True)
class Decision:
    instance_id: str
    reason: str
    action: str | None = None
    """stop | terminate for an instance acted on (or that a dry run would act on); None when kept."""


@dataclass
class Report:
    stack: str
    action: str
    dry_run: bool
    now: str
    acted: list[Decision] = field(default_factory=list)
    kept: list[Decision] = field(default_factory=list)
    failed: list[Decision] = field(default_factory=list)
    """Instances whose stop or terminate call failed; the reason is the error."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def log_lines(self) -> list[str]:
        """One line per instance, for CloudWatch Logs."""
        prefix = f"stack={self.stack} action={self.action}{' DRY RUN' if self.dry_run else ''}:"
        verb = "would " if self.dry_run else ""
        lines = [f"{prefix} {verb}{d.action} {d.instance_id}: {d.reason}" for d in self.acted]
        lines += [f"{prefix} keep {d.instance_id}: {d.reason}" for d in self.kept]
        lines += [f"{prefix} FAILED to {d.action} {d.instance_id}: {d.reason}" for d in self.failed]
        lines.append(f"{prefix} {len(self.acted)} {verb}{self.action}, {len(self.kept)} kept, "
                     f"{len(self.failed)} failed")
        return lines


def reap(ec2: Any, stack: str, now: datetime, action: str = "stop", dry_run: bool = False) -> Report:
    """Stop or terminate the stack's live instances whose time to live has passed at ``now``.

    ``ec2`` is a boto3 EC2 client. Instances of other stacks, and untagged ones, are never listed; the stack's
    instances without a valid ttl tag are kept and reported. A one-time spot instance cannot be stopped, so
    "stop" terminates it. A dry run reports the same decisions and calls neither StopInstances nor
    TerminateInstances.
    """
    if action not in ACTIONS:
        raise ValueError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone (e.g. datetime.now(timezone.utc))")
    report = Report(stack, action, dry_run, now.isoformat())
    for instance in _live_instances(ec2, stack):
        decision = _decide(instance, now, action)
        (report.kept if decision.action is None else report.acted).append(decision)
    if not dry_run:
        for act, call in (("stop", ec2.stop_instances), ("terminate", ec2.terminate_instances)):
            ids = [d.instance_id for d in report.acted if d.action == act]
            if not ids:
                continue
            try:
                call(InstanceIds=ids)
            except Exception as error:  # botocore's ClientError; this file imports no botocore
                failed = [d for d in report.acted if d.action == act]
                report.acted = [d for d in report.acted if d.action != act]
                report.failed += [Decision(d.instance_id, f"{type(error).__name__}: {error}", act) for d in failed]
    return report


def _live_instances(ec2: Any, stack: str) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": f"tag:{STACK_TAG_KEY}", "Values": [stack]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ])
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def _decide(instance: dict[str, Any], now: datetime, action: str) -> Decision:
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
        return Decision(instance_id, f"{TTL_TAG_KEY} tag {raw!r} is not a positive number of hours")
    expires = instance["LaunchTime"] + timedelta(hours=hours)
    if now < expires:
        return Decision(instance_id, f"expires at {expires.isoformat()} ({raw} h after launch)")
    reason = f"expired at {expires.isoformat()} ({raw} h after launch)"
    if action == "stop" and instance.get("InstanceLifecycle") == "spot":
        return Decision(instance_id, reason + "; a spot instance cannot be stopped, so it is terminated", "terminate")
    return Decision(instance_id, reason, action)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def handler(event: Any, context: Any) -> dict[str, Any]:
    """Lambda entry point; configured by GOLDENENV_STACK, GOLDENENV_ACTION (stop) and GOLDENENV_DRY_RUN (false).

    An event ``{"dryRun": true}`` turns a single invocation into a dry run (it cannot turn one off), so
    ``aws lambda invoke --payload '{"dryRun": true}'`` shows what the next run would do.
    """
    import boto3

    dry_run = _flag(os.environ.get(DRY_RUN_ENV, "false"))
    if isinstance(event, dict) and event.get("dryRun") is True:
        dry_run = True
    report = reap(boto3.client("ec2"), os.environ[STACK_ENV], utc_now(),
                  os.environ.get(ACTION_ENV, "stop"), dry_run)
    for line in report.log_lines():
        print(line)
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} instance(s) could not be torn down; see the lines above")
    return report.to_dict()


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value not in _TRUE | _FALSE:
        raise ValueError(f"{DRY_RUN_ENV}={text!r}: use true or false")
    return value in _TRUE
