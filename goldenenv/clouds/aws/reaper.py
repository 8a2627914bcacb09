"""The reaper: stops (or terminates) a stack's instances once their time to live has run out, or all of them at once.

AWS's stop function, in AWS's folder. It runs as an AWS Lambda function, so a cluster is torn down with the laptop
off: on a schedule for the time to live, and from the budget's SNS topic for the hard stop. This
file is shipped as the function's code (teardown.reaper_archive: reaper.py at the package's root, the handler
``reaper.handler``) with the stop core (goldenenv/clouds/stopcore.py) beside it: it imports the standard library and
the core only, and boto3 (which the Lambda runtime provides, and goldenenv's aws extra installs) inside ``handler``.
The tag keys are therefore written here again; a unit test checks them against goldenenv.spec, so the fact still has
one owner.

The rules every stop function shares are the core's, and this file supplies only EC2's and SSM's calls: every call
is retried with full-jitter backoff on throttling and server errors (THROTTLING, SERVER_ERRORS) for as long as the
invocation's time allows; the listing is read page by page, each page retried, and a listing that cannot be read
to its end fails the invocation (it is never "no nodes"); nodes are stopped in calls of at most 1,000 ids, and a
call that fails is retried per instance so one node never holds back the others and the report says exactly which
failed; a node still pending (EC2 refuses to stop it: IncorrectInstanceState) is watched within the invocation and
stopped once it runs, and otherwise reported, failing the invocation, so the next scheduled run stops it.

Expiry is computed here, not in the program: an instance expires at its LaunchTime plus its ``goldenenv:ttl-hours``
tag, so no timestamp is baked into the Pulumi program and ``pulumi up`` stays deterministic. LaunchTime is the
last start, so a node started again by hand after the reaper stopped it gets a fresh time to live.

A node is one of the stack's only when both its stack tag and its project tag match: two projects may each have
a stack named ``dev`` in one account. Each node is judged on its own, so one bad tag cannot shield its siblings.

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
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

try:
    from goldenenv.clouds import stopcore
except ImportError:  # in the function's package, shipped beside this file
    import stopcore  # type: ignore[no-redef]

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
PAGE_SIZE = 1000
"""DescribeInstances' MaxResults: 5 to 1,000 a page (EC2 API reference, DescribeInstances)."""
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
"""Error codes of a throttled AWS call: retried with backoff (EC2: RequestLimitExceeded, "Request throttling",
https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html; the others are SSM's and botocore's)."""
SERVER_ERRORS = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
                           "RequestTimeout", "RequestTimeoutException"})
"""Server-side errors worth another try: EC2's InternalError and Unavailable ("Common client and server errors",
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html#api-error-codes-table-server),
SSM's InternalServerError-like answers and any HTTP 5xx answer."""
NETWORK_ERRORS = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                            "ConnectionClosedError"})
"""botocore's exceptions for an answer that never came (named, since this file imports no botocore)."""
NOT_RUNNING_YET = "IncorrectInstanceState"
"""EC2's answer to a stop of an instance that is not running yet: the node is watched, then stopped."""
TIMEOUT_SECONDS = 300
"""The function's timeout (teardown.py deploys it): room for a stack of thousands of nodes in calls of 1,000 ids,
one call per node when a call fails, throttled calls retried, and pending nodes watched until they run."""
MARGIN_SECONDS = 15.0
"""Kept back from the invocation's time for the report and the log lines."""
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
    """Instances not due: time left, or no time to live; or already stopping, or gone."""
    skipped: list[Decision] = field(default_factory=list)
    """Instances that could not be judged (a bad ttl tag, no launch time); the reason says why."""
    failed: list[Decision] = field(default_factory=list)
    """Instances whose stop or terminate call failed, that were still pending when the invocation's time ran out, or
    whose spot request could not be read; the reason says which."""
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


Unjudgeable = stopcore.Unjudgeable
"""A node whose tags or description do not allow a decision (the stop core's, which ttl_due raises too): it is
reported and skipped."""


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore ClientError ('' for any other exception); this file imports no botocore."""
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def transient(error: BaseException) -> bool:
    """Whether another try may succeed: throttling, a server error or HTTP 5xx, or no answer at all."""
    if error_code(error) in THROTTLING | SERVER_ERRORS or type(error).__name__ in NETWORK_ERRORS:
        return True
    response = getattr(error, "response", None)
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    return isinstance(status, int) and status >= 500


def new_clock(seconds: float | None = None) -> stopcore.Clock:
    """The invocation's clock: ``seconds`` (the time Lambda says is left, else the function's timeout) less a
    margin for the report."""
    return stopcore.Clock(TIMEOUT_SECONDS if seconds is None else seconds, margin_seconds=MARGIN_SECONDS,
                          monotonic=lambda: _monotonic(), sleep=lambda wait: _sleep(wait))


def _retry(call: Callable[[], T], clock: stopcore.Clock) -> T:
    return stopcore.retry(call, transient, clock)


def reap(ec2: Any, project: str, stack: str, now: datetime, action: str = "stop", dry_run: bool = False,
         clock: stopcore.Clock | None = None) -> Report:
    """Stop or terminate the stack's live instances whose time to live has passed at ``now``.

    ``ec2`` is a boto3 EC2 client. Only instances tagged with both this project and this stack are listed; of
    those, instances without a ttl tag are kept, and instances whose ttl tag or launch time cannot be read are
    skipped and reported. "stop" terminates a one-time spot instance, which EC2 cannot stop. A dry run reports the
    same decisions and calls neither StopInstances nor TerminateInstances.
    """
    return _run(ec2, project, stack, now, action, dry_run, TTL, lambda instance: _expiry(instance, now), clock)


def hard_stop(ec2: Any, project: str, stack: str, now: datetime, dry_run: bool = False,
              clock: stopcore.Clock | None = None) -> Report:
    """The budget's hard stop: stop every live instance of the stack now, terminating one-time spot instances.

    Stopped on-demand and persistent-spot nodes keep their EBS volumes; terminated one-time spot nodes lose their
    root volume and, like every stopped node, their instance-store (local NVMe) data.
    """
    return _run(ec2, project, stack, now, "stop", dry_run, HARD_STOP,
                lambda instance: "the budget's actual spend passed 100 %", clock)


def _run(ec2: Any, project: str, stack: str, now: datetime, action: str, dry_run: bool, trigger: str,
         due: Callable[[dict[str, Any]], str | Decision], clock: stopcore.Clock | None) -> Report:
    """List the stack's nodes, judge each with ``due`` (a reason to act, or a Decision to keep), then act."""
    if action not in ACTIONS:
        raise ValueError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone (e.g. datetime.now(timezone.utc))")
    if not project or not stack:
        raise ValueError("both the project and the stack must be named: they select the nodes")
    clock = clock or new_clock()
    report = Report(project, stack, trigger, action, dry_run, now.isoformat())
    chosen: list[tuple[dict[str, Any], str]] = []
    for instance in _live_instances(ec2, project, stack, clock):
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
    requests, unreadable = _spot_requests(ec2, spot, clock)
    decisions: dict[str, Decision] = {}
    for instance, reason in chosen:
        instance_id = instance["InstanceId"]
        if instance_id in unreadable:
            report.failed.append(Decision(instance_id, f"its spot request could not be read: {unreadable[instance_id]}"))
        elif instance_id in spot:
            decisions[instance_id] = _spot_decision(instance_id, reason, requests.get(instance_id))
        else:
            decisions[instance_id] = Decision(instance_id, reason, action)
    if dry_run:
        report.acted += decisions.values()
        return report
    for act in ACTIONS:
        nodes = [i for i, _ in chosen if i["InstanceId"] in decisions and decisions[i["InstanceId"]].action == act]
        if nodes:
            _act(ec2, project, stack, report, act, getattr(ec2, f"{act}_instances"), nodes, decisions, clock)
    return report


def _state_class(act: str) -> Callable[[dict[str, Any]], str]:
    """EC2 stops a running node only (a pending one is watched until it runs); it terminates a pending one too."""

    def state(instance: dict[str, Any]) -> str:
        name = (instance.get("State") or {}).get("Name")
        if name == "pending":
            return stopcore.STARTING if act == "stop" else stopcore.LIVE
        return stopcore.LIVE if name == "running" else stopcore.STOPPING

    return state


def _act(ec2: Any, project: str, stack: str, report: Report, act: str, call: Callable[..., Any],
         nodes: list[dict[str, Any]], decisions: dict[str, Decision], clock: stopcore.Clock) -> None:
    """Stop or terminate ``nodes`` on the core: calls of at most 1,000 ids, a failed call retried per instance,
    pending nodes watched and stopped once they run."""
    plan = stopcore.StopPlan(
        name=lambda instance: instance["InstanceId"],
        state=_state_class(act),
        stop=lambda batch: call(InstanceIds=[i["InstanceId"] for i in batch]),
        transient=transient,
        refresh=lambda waiting: [i for chunk in _chunks([w["InstanceId"] for w in waiting], MAX_FILTER_VALUES)
                                 for i in _live_instances(ec2, project, stack, clock, chunk)],
        not_yet=lambda error: error_code(error) == NOT_RUNNING_YET,
        batch_size=MAX_IDS_PER_CALL,
    )
    done = stopcore.stop_every(nodes, plan, clock, lambda instance: decisions[instance["InstanceId"]].reason)
    report.acted += [decisions[o.node] for o in done.stopped]
    report.kept += [Decision(o.node, f"left alone: {o.reason}") for o in done.left]
    report.failed += [Decision(o.node, o.reason, act) for o in done.failed]
    report.failed += [Decision(o.node, f"still pending: {o.reason}", act) for o in done.waiting]


def _live_instances(ec2: Any, project: str, stack: str, clock: stopcore.Clock,
                    instance_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The stack's pending and running instances, every page read (each retried); ListingIncomplete otherwise."""
    filters = [
        {"Name": f"tag:{STACK_TAG_KEY}", "Values": [stack]},
        {"Name": f"tag:{PROJECT_TAG_KEY}", "Values": [project]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]
    if instance_ids:
        filters.append({"Name": "instance-id", "Values": list(instance_ids)})

    def page(token: str | None) -> tuple[list[dict[str, Any]], str | None]:
        answer = ec2.describe_instances(Filters=filters, MaxResults=PAGE_SIZE, **({"NextToken": token} if token else {}))
        return [i for r in answer["Reservations"] for i in r["Instances"]], answer.get("NextToken")

    return stopcore.all_pages(page, clock, transient, f"the instances of project {project} stack {stack}")


def _expiry(instance: dict[str, Any], now: datetime) -> str | Decision:
    """Why an expired node is due; a Decision to keep one that is not."""
    instance_id = instance["InstanceId"]
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    raw = tags.get(TTL_TAG_KEY)
    if raw is None:
        return Decision(instance_id, f"no {TTL_TAG_KEY} tag: no time to live")
    hours = stopcore.positive(raw)
    if hours is None:
        raise Unjudgeable(f"{TTL_TAG_KEY} tag {raw!r} is not a positive number of hours")
    launched = instance.get("LaunchTime")
    if not isinstance(launched, datetime) or launched.tzinfo is None:
        raise Unjudgeable(f"no launch time in its description ({launched!r}): its time to live cannot be counted")
    due = stopcore.ttl_due(launched, hours, now, since="launch")
    expires = launched + timedelta(hours=hours)
    return due or Decision(instance_id, f"expires at {expires.isoformat()} ({raw} h after launch)")


def _spot_decision(instance_id: str, reason: str, request: dict[str, Any] | None) -> Decision:
    """Stop a spot node held by a live persistent request; terminate any other, which EC2 cannot stop."""
    if request and request.get("Type") == "persistent" and request.get("State") in KEEPS_A_STOPPED_SPOT:
        return Decision(instance_id, f"{reason}; persistent spot request {request.get('SpotInstanceRequestId')}: "
                                     "stopped, and it stays stopped until started", "stop")
    kind = f"a {request.get('Type')} spot request ({request.get('State')})" if request else "no spot request on record"
    return Decision(instance_id, f"{reason}; {kind} cannot hold a stopped instance, so it is terminated "
                                 "(its root volume and instance-store data are lost)", "terminate")


def _spot_requests(ec2: Any, instance_ids: Sequence[str], clock: stopcore.Clock
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The spot request of each spot instance, by instance id; and the error for each whose lookup failed."""
    found: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}

    def lookup(ids: Sequence[str]) -> None:
        def page(token: str | None) -> tuple[list[dict[str, Any]], str | None]:
            answer = ec2.describe_spot_instance_requests(
                Filters=[{"Name": "instance-id", "Values": list(ids)}], **({"NextToken": token} if token else {}))
            return answer["SpotInstanceRequests"], answer.get("NextToken")

        for request in stopcore.all_pages(page, clock, transient, "the spot requests"):
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
    torn down or judged, was still pending when the invocation's time ran out, when the stack's nodes could not be
    listed, or when the hard stop could not be recorded or read; the nodes it could act on are acted on. Its
    calls are retried within the time Lambda gives the invocation (the context's remaining time).
    """
    import boto3

    remaining = getattr(context, "get_remaining_time_in_millis", None)
    clock = new_clock(remaining() / 1000.0 if callable(remaining) else None)
    return invoke(event, os.environ, boto3.client("ec2"), lambda: boto3.client("ssm"), utc_now(), clock)


def invoke(event: Any, env: Mapping[str, str], ec2: Any, ssm: Callable[[], Any], now: datetime,
           clock: stopcore.Clock) -> dict[str, Any]:
    """One invocation (``handler``'s work) with its settings and clients given: ``ssm`` makes the SSM client when
    it is needed."""
    dry_run = _flag(env.get(DRY_RUN_ENV, "false"))
    if isinstance(event, dict) and event.get("dryRun") is True:
        dry_run = True
    project, stack = env[PROJECT_ENV], env[STACK_ENV]
    parameter = env.get(HARD_STOP_PARAMETER_ENV, "")
    problems: list[str] = []
    try:
        report = _invoke(event, env, ec2, ssm, project, stack, parameter, now, dry_run, problems, clock)
    except stopcore.ListingIncomplete as error:
        raise RuntimeError(f"project={project} stack={stack}: the stack's nodes could not be listed, so none was "
                           f"judged or stopped ({error}); the next scheduled run tries again" + "".join(
                               f"; {p}" for p in problems)) from error
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


def _invoke(event: Any, env: Mapping[str, str], ec2: Any, ssm: Callable[[], Any], project: str, stack: str, parameter: str, now: datetime,
            dry_run: bool, problems: list[str], clock: stopcore.Clock) -> Report:
    """The hard stop (recorded first) for a budget notification, else the schedule's run."""
    if is_hard_stop(event):
        state = "not recorded (dry run)" if dry_run else ""
        if parameter and not dry_run:
            try:
                state = record_hard_stop(ssm(), parameter, now, _trigger_of(event), clock)
            except Exception as error:  # the nodes are still stopped; the failure fails the invocation
                state = f"COULD NOT be recorded in {parameter}: {type(error).__name__}: {error}"
                problems.append(f"the hard stop could not be recorded in {parameter}, so no scheduled run will "
                                f"repeat it ({type(error).__name__}: {error})")
        report = hard_stop(ec2, project, stack, now, dry_run, clock)
    else:
        in_force, state = (hard_stop_in_force(ssm(), parameter, now, problems, clock) if parameter
                           else (False, ""))
        if in_force:
            report = hard_stop(ec2, project, stack, now, dry_run, clock)
        else:
            report = reap(ec2, project, stack, now, env.get(ACTION_ENV, "stop"), dry_run, clock)
    report.hard_stop_state = state
    return report


def month_of(now: datetime) -> str:
    """The budget period ``now`` falls in: AWS Budgets counts calendar months in UTC."""
    return stopcore.budget_month(now, stopcore.UTC)


def record_hard_stop(ssm: Any, parameter: str, now: datetime, trigger: str, clock: stopcore.Clock | None = None) -> str:
    """Write the hard stop of this month to the parameter (retried while throttled); returns what it wrote."""
    record = {"month": month_of(now), "since": now.isoformat(), "by": trigger}
    limit = _budget_limit()
    if limit is not None:
        record["limit"] = limit
    value = json.dumps(record, sort_keys=True)
    _retry(lambda: ssm.put_parameter(Name=parameter, Value=value, Type="String", Overwrite=True), clock or new_clock())
    return (f"recorded in {parameter} for {month_of(now)}: later scheduled runs stop every node until the month ends "
            "or the budget is raised")


def hard_stop_in_force(ssm: Any, parameter: str, now: datetime, problems: list[str],
                       clock: stopcore.Clock | None = None) -> tuple[bool, str]:
    """Whether the parameter holds a hard stop of the current month, and what to log about it. A value that cannot
    be read keeps the hard stop in force (it must not be lost) and is added to ``problems``; a parameter that does
    not exist, or that this function may not read (it is not this stack's), means no hard stop."""
    release = f"aws ssm put-parameter --overwrite --name {parameter} --value {NO_HARD_STOP}"
    try:
        value = _retry(lambda: ssm.get_parameter(Name=parameter), clock or new_clock())["Parameter"]["Value"]
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
    return stopcore.positive(os.environ.get(BUDGET_LIMIT_ENV))


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
