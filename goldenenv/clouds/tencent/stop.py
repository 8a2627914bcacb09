"""The stack's stop function on Tencent Cloud (SCF, Python 3.9, handler stop.handler), run hourly by a timer
trigger: it reads the month's spend for the stack's cost-allocation tag (billing DescribeBillSummaryByTag: whole
months in Beijing time, a Ready flag that is 0 while Tencent prepares the bill) and, with the hard stop on, stops
every instance carrying the stack's tag (StopInstances, StoppedMode STOP_CHARGING) once the spend reaches the
limit, by stopcore's shared rules: a bill that is not ready or cannot be read counts as over the limit (fail
closed); nodes still starting are watched and stopped once they run.

The same timer runs the time to live and the idle stop, as Google Cloud's and Azure's stop functions do. A node
expires GOLDENENV_TTL_HOURS after its CreatedTime (DescribeInstances, ISO 8601 in UTC: CVM keeps no last start time,
so a node started again by hand after its time to live is stopped again by the next run; raise ttlHours and `up`
to keep it). A node is idle when Cloud Monitor's BaseCpuUsage (namespace QCE/CVM, dimension InstanceId, reported by
the host with no agent on the node: https://tencentcloud.com/document/product/248/6843) stayed under min(5 %, half
a core) in every 5-minute mean of the last GOLDENENV_IDLE_MINUTES (GetMonitorData,
https://tencentcloud.com/document/api/248/33881; a missing timestamp is a dropped point). As on the other clouds,
missing or too few points are not idleness and a node up for less than the idle time is kept; a node whose metric
cannot be read, or whose start cannot be read, is named and fails the invocation after the rest is done (the
function's failure alarm tells the budget's addresses), so it is never stopped as idle and never silently kept.

StopInstances is asynchronous: the call only accepts the batch (each instance goes STOPPING), and each instance's
outcome is read afterwards from DescribeInstances, its LatestOperation (StopInstances) and LatestOperationState
(OPERATING, SUCCESS or FAILED) beside its InstanceState ("This API is async... If the latest operation status
(LatestOperationState) of the instance is SUCCESS, the operation is successful": the CvmClient.StopInstances
docstring of tencentcloud-sdk-python-cvm 3.1.178, and Lighthouse's StopInstances page, which says the same of the
same call shape: https://www.tencentcloud.com/document/product/1103/42487; CVM's own English page
https://www.tencentcloud.com/document/api/213/15743 says STOPPING then STOPPED). So every accepted stop is looked at
again within the invocation's time (CONFIRM_SECONDS of it are kept for that): a node whose stop Tencent FAILED (it
is RUNNING again) is named with Tencent's LatestOperationErrorMsg, and so is one whose stop had not finished when
the time ran out; either fails the invocation after the rest is done, so the failure alarm tells the budget's
addresses at once rather than the next hourly run finding the node running. The next run stops it again.

Standard library only, shipped beside stopcore.py: the calls are signed here (TC3-HMAC-SHA256) with the credentials
SCF gives a function whose role it assumes (TENCENTCLOUD_SECRETID, TENCENTCLOUD_SECRETKEY,
TENCENTCLOUD_SESSIONTOKEN in its environment, the TENCENTCLOUD_ prefix reserved:
https://intl.cloud.tencent.com/document/product/583/32748).
"""

import copy
import hashlib
import hmac
import json
import os
import time
import urllib.request
from datetime import datetime, timedelta, timezone

try:
    import stopcore
except ImportError:  # in the repository
    from goldenenv.clouds import stopcore

LIMIT_ENV, CURRENCY_ENV, HARD_STOP_ENV, DRY_RUN_ENV = ("GOLDENENV_LIMIT", "GOLDENENV_CURRENCY", "GOLDENENV_HARD_STOP",
                                                       "GOLDENENV_DRY_RUN")
TAG_KEY_ENV, TAG_VALUE_ENV, REGION_ENV = "GOLDENENV_TAG_KEY", "GOLDENENV_TAG_VALUE", "GOLDENENV_REGION"
PROJECT_KEY_ENV, PROJECT_VALUE_ENV = "GOLDENENV_PROJECT_KEY", "GOLDENENV_PROJECT_VALUE"
"""The stack's nodes are those carrying both its stack tag and its project tag (another project's stack of the
same name is not this one)."""
TTL_HOURS_ENV, IDLE_MINUTES_ENV = "GOLDENENV_TTL_HOURS", "GOLDENENV_IDLE_MINUTES"
CPU_NAMESPACE, CPU_METRIC = "QCE/CVM", "BaseCpuUsage"
IDLE_PERIOD_SECONDS = 300
MONITOR_VERSION = "2018-07-24"
TIMEOUT_SECONDS = 600
STATES = {"RUNNING": stopcore.LIVE, "PENDING": stopcore.STARTING, "STARTING": stopcore.STARTING,
          "REBOOTING": stopcore.STARTING, "STOPPING": stopcore.STOPPING, "STOPPED": stopcore.STOPPED,
          "SHUTDOWN": stopcore.STOPPED, "TERMINATING": stopcore.STOPPED, "LAUNCH_FAILED": stopcore.STOPPED}
"""CVM InstanceState values (tencentcloud-sdk-python-cvm Instance.InstanceState) by stopcore's state class."""
TRANSIENT = ("RequestLimitExceeded", "InternalError", "ResourceBusy")
NOT_YET = ("UnsupportedOperation.InstanceStatePending", "UnsupportedOperation.InstanceStateStarting",
           "UnsupportedOperation.InstanceStateRebooting")
"""StopInstances' refusals of an instance still starting (tencentcloud-sdk-python-cvm errorcodes.py): watched and
stopped once it runs."""
STOP_BATCH = 100
"""StopInstances takes at most 100 ids a call."""
CONFIRM_SECONDS = 60
"""Of the invocation's time, what the watch of nodes still starting leaves for reading each accepted stop's outcome
(a few looks, stopcore.POLL_SECONDS apart; how long a CVM takes to stop is unverified)."""
STOP_OPERATION = "StopInstances"


class ApiError(RuntimeError):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


def call(service, version, action, params, region, env=os.environ, opener=urllib.request.urlopen):
    host, now = f"{service}.tencentcloudapi.com", int(time.time())
    day = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d")
    payload = json.dumps(params)
    kind = "application/json; charset=utf-8"
    canonical = (f"POST\n/\n\ncontent-type:{kind}\nhost:{host}\n\ncontent-type;host\n"
                 f"{hashlib.sha256(payload.encode()).hexdigest()}")
    scope = f"{day}/{service}/tc3_request"
    text = f"TC3-HMAC-SHA256\n{now}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = ("TC3" + env["TENCENTCLOUD_SECRETKEY"]).encode()
    for part in (day, service, "tc3_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    headers = {"Authorization": f"TC3-HMAC-SHA256 Credential={env['TENCENTCLOUD_SECRETID']}/{scope}, "
                                f"SignedHeaders=content-type;host, Signature={signature}",
               "Content-Type": kind, "Host": host, "X-TC-Action": action, "X-TC-Timestamp": str(now),
               "X-TC-Version": version, "X-TC-Region": region}
    if env.get("TENCENTCLOUD_SESSIONTOKEN"):
        headers["X-TC-Token"] = env["TENCENTCLOUD_SESSIONTOKEN"]
    with opener(urllib.request.Request(f"https://{host}/", payload.encode(), headers), timeout=20) as response:
        answer = json.loads(response.read().decode()).get("Response") or {}
    if answer.get("Error"):
        raise ApiError(answer["Error"].get("Code"), answer["Error"].get("Message"))
    return answer


def spend(month, tag_key, tag_value, api):
    """The month's cost of the tag value, or None when the bill is not ready or names no such value."""
    answer = api("billing", "2018-07-09", "DescribeBillSummaryByTag",
                 {"BeginTime": month, "EndTime": month, "TagKey": tag_key, "TagValue": tag_value})
    if answer.get("Ready") != 1:
        return None
    rows = [r for r in answer.get("SummaryOverview") or [] if r.get("TagValue") == tag_value]
    return rows[0].get("RealTotalCost") if rows else None


def instances(tags, api, clock, ids=None):
    """The instances carrying every tag of ``tags`` (DescribeInstances filters tag:<key>, 100 a page); with ``ids``,
    those instances looked at again by id (the API takes InstanceIds or Filters, not both; 100 ids a call)."""
    if ids is not None:
        found = []
        for start in range(0, len(ids), 100):
            chunk = list(ids[start:start + 100])
            answer = stopcore.retry(lambda: api("cvm", "2017-03-12", "DescribeInstances",
                                                {"InstanceIds": chunk, "Limit": 100}), transient, clock)
            found += answer.get("InstanceSet") or []
        return found
    filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]

    def page(offset):
        answer = api("cvm", "2017-03-12", "DescribeInstances", {"Filters": filters, "Offset": offset or 0,
                                                                "Limit": 100})
        found = answer.get("InstanceSet") or []
        nxt = (offset or 0) + len(found)
        return found, (nxt if found and nxt < int(answer.get("TotalCount") or 0) else None)

    return stopcore.all_pages(page, clock, transient, "the listing of the stack's instances")


def transient(error):
    return isinstance(error, ApiError) and error.code in TRANSIENT or isinstance(error, OSError)


def _stop_plan(tags, api, clock):
    return stopcore.StopPlan(
        name=lambda n: n["InstanceId"], state=lambda n: STATES.get(n.get("InstanceState"), stopcore.STARTING),
        stop=lambda batch: api("cvm", "2017-03-12", "StopInstances", {
            "InstanceIds": [n["InstanceId"] for n in batch], "StopType": "SOFT_FIRST",
            "StoppedMode": "STOP_CHARGING"}),
        transient=transient, batch_size=STOP_BATCH,
        refresh=lambda waiting: instances(tags, api, clock, [n["InstanceId"] for n in waiting]),
        not_yet=lambda error: isinstance(error, ApiError) and error.code in NOT_YET)


def _reserving(clock, seconds):
    """A view of ``clock`` (the same time and jitter) whose deadline comes ``seconds`` earlier."""
    view = copy.copy(clock)
    view.deadline = max(clock.started, clock.deadline - seconds)
    return view


def _described(instance):
    return (f"InstanceState {instance.get('InstanceState')}, LatestOperation {instance.get('LatestOperation')} "
            f"{instance.get('LatestOperationState')}")


def confirm(ids, tags, api, clock, prefix):
    """Read the outcome of each accepted stop (DescribeInstances by id, every stopcore.POLL_SECONDS while the
    invocation's time allows). Returns the problems: each node whose StopInstances ended FAILED, and each whose
    stop had not finished when the time ran out. A node stopped, or gone, is done."""
    pending, last, problems = list(ids), {}, []
    while pending and clock.left() > stopcore.POLL_SECONDS:
        clock.sleep(stopcore.POLL_SECONDS)
        try:
            seen = {i["InstanceId"]: i for i in instances(tags, api, clock, pending)}
        except (ApiError, OSError, stopcore.OutOfTime) as error:
            problems += [f"{i}: its stop was accepted, but its outcome could not be read ({error})" for i in pending]
            for line in problems:
                print(f"ERROR {prefix} UNCONFIRMED {line}")
            return problems
        still = []
        for instance_id in pending:
            instance = seen.get(instance_id)
            if instance is None or STATES.get(instance.get("InstanceState")) == stopcore.STOPPED:
                continue
            if (instance.get("LatestOperation"), instance.get("LatestOperationState")) == (STOP_OPERATION, "FAILED"):
                problem = (f"{instance_id}: Tencent accepted its stop and then failed it "
                           f"({instance.get('LatestOperationErrorMsg') or 'no message'}; {_described(instance)})")
                print(f"ERROR {prefix} FAILED to stop {problem}")
                problems.append(problem)
                continue
            last[instance_id] = instance
            still.append(instance_id)
        pending = still
    for instance_id in pending:
        seen = f" ({_described(last[instance_id])})" if instance_id in last else ""
        problem = (f"{instance_id}: its stop was accepted but had not finished after {clock.elapsed():.0f} s of "
                   f"this invocation{seen}; the next run looks again")
        print(f"ERROR {prefix} UNCONFIRMED {problem}")
        problems.append(problem)
    return problems


def _stop(nodes, reason, tags, api, clock, prefix, problems=()):
    """Stop ``nodes`` and confirm each accepted stop; raise naming every node left (and every earlier problem)
    once the rest is done."""
    report = stopcore.stop_every(nodes, _stop_plan(tags, api, clock), _reserving(clock, CONFIRM_SECONDS), reason)
    for line in report.lines(prefix):
        print(line)
    accepted = [o.node for o in report.stopped]
    unconfirmed = confirm(accepted, tags, api, clock, prefix)
    left = list(problems) + report.problems() + unconfirmed
    if left:
        raise RuntimeError("; ".join(left))
    return accepted


def created(instance):
    """The instance's CreatedTime (ISO 8601, UTC) as an aware datetime; Unjudgeable when it cannot be read."""
    text = instance.get("CreatedTime")
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise stopcore.Unjudgeable(f"its CreatedTime {text!r} is not a time") from None
    if moment.tzinfo is None:
        raise stopcore.Unjudgeable(f"its CreatedTime {text!r} carries no time zone")
    return moment


def cpu_means(instance_id, minutes, now, api, clock):
    """The node's 5-minute mean BaseCpuUsage (percent) over the last ``minutes``, oldest first."""
    beijing = stopcore.BEIJING
    answer = stopcore.retry(lambda: api("monitor", MONITOR_VERSION, "GetMonitorData", {
        "Namespace": CPU_NAMESPACE, "MetricName": CPU_METRIC, "Period": IDLE_PERIOD_SECONDS,
        "StartTime": stopcore.on_clock(now - timedelta(minutes=minutes), beijing).isoformat(timespec="seconds"),
        "EndTime": stopcore.on_clock(now, beijing).isoformat(timespec="seconds"),
        "Instances": [{"Dimensions": [{"Name": "InstanceId", "Value": instance_id}]}]}), transient, clock)
    points = [p for p in answer.get("DataPoints") or []
              if {d.get("Name"): d.get("Value") for d in p.get("Dimensions") or []}.get("InstanceId") == instance_id]
    return [v for p in points for v in p.get("Values") or []]


def idle_reason(instance, minutes, now, api, clock):
    """Why a node is idle; None when it is not, or cannot be known yet (up for less than the idle time, too few
    points). An unreadable metric raises."""
    if now - created(instance) < timedelta(minutes=minutes):
        return None
    threshold = stopcore.idle_cpu_percent(int(instance.get("CPU") or 1))
    reason = stopcore.idle_due(cpu_means(instance["InstanceId"], minutes, now, api, clock), minutes,
                               IDLE_PERIOD_SECONDS / 60, threshold, " %")
    return f"{reason} ({instance.get('CPU')} vCPUs)" if reason else None


def lifecycle(env, tags, api, clock, now, prefix):
    """The time to live and the idle stop: every live node past its time or idle is stopped; a node that cannot be
    judged is named and fails the invocation after the others are done."""
    ttl, idle = stopcore.positive(env.get(TTL_HOURS_ENV)), stopcore.positive(env.get(IDLE_MINUTES_ENV))
    due, problems = {}, []
    for node in instances(tags, api, clock):
        name = node["InstanceId"]
        if STATES.get(node.get("InstanceState"), stopcore.STARTING) in (stopcore.STOPPING, stopcore.STOPPED):
            continue
        try:
            reason = stopcore.ttl_due(created(node), ttl, now, "its creation") if ttl else None
            reason = reason or (idle_reason(node, idle, now, api, clock) if idle else None)
        except stopcore.Unjudgeable as problem:
            problems.append(f"{name}: cannot be judged ({problem})")
            print(f"ERROR {prefix} SKIPPED {name}: cannot be judged ({problem})")
            continue
        except (ApiError, OSError) as error:
            problems.append(f"{name}: its CPU cannot be read ({error})")
            print(f"ERROR {prefix} SKIPPED {name}: its CPU cannot be read, so it is neither idle nor busy: {error}")
            continue
        if reason:
            due[name] = (node, reason)
        else:
            print(f"{prefix} keep {name}")
    stopped = _stop([n for n, _ in due.values()], lambda n: due[n["InstanceId"]][1], tags, api, clock, prefix,
                    problems)
    return {"stop": bool(stopped), "reason": f"{len(due)} due by time to live or idleness", "stopped": stopped}


def handler(event, context, env=os.environ, api=None, clock=None, now=None):
    """One timer run: the budget's hard stop (with it on), then, unless the budget stopped every node, the time to
    live and idle stop (with either set)."""
    region = env[REGION_ENV]
    api = api or (lambda s, v, a, p: call(s, v, a, p, region, env))
    clock = clock or stopcore.Clock(TIMEOUT_SECONDS, margin_seconds=30)
    now = now or datetime.now(timezone.utc)
    key, value = env[TAG_KEY_ENV], env[TAG_VALUE_ENV]
    tags = {key: value, env[PROJECT_KEY_ENV]: env[PROJECT_VALUE_ENV]}
    answer = {"stop": False, "reason": "the hard stop is off"}
    if stopcore.flag(env.get(HARD_STOP_ENV)):
        month = stopcore.budget_month(now, stopcore.BEIJING)
        cost = stopcore.retry(lambda: spend(month, key, value, api), transient, clock)
        verdict = stopcore.judge_spend(cost, env.get(LIMIT_ENV), currency=env.get(CURRENCY_ENV, "CNY"),
                                       cost_currency=env.get(CURRENCY_ENV, "CNY"),
                                       deployed_limit=stopcore.positive(env.get(LIMIT_ENV)),
                                       what=f"the bill of {month} for {key}={value}")
        print(("ERROR " if verdict.unreadable else "") + verdict.reason)
        answer = {"stop": False, "reason": verdict.reason}
        if verdict.stop and not stopcore.flag(env.get(DRY_RUN_ENV)):
            stopped = _stop(instances(tags, api, clock), verdict.reason, tags, api, clock, "budget:")
            return {"stop": True, "reason": verdict.reason, "stopped": stopped}
    if stopcore.positive(env.get(TTL_HOURS_ENV)) or stopcore.positive(env.get(IDLE_MINUTES_ENV)):
        found = lifecycle(env, tags, api, clock, now, "lifecycle:")
        return {**found, "reason": f"{answer['reason']}; {found['reason']}"}
    return answer
