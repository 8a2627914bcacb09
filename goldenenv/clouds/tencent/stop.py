"""The stack's stop function on Tencent Cloud (SCF, Python 3.9, handler stop.handler), run hourly by a timer
trigger: it reads the month's spend for the stack's cost-allocation tag (billing DescribeBillSummaryByTag: whole
months in Beijing time, a Ready flag that is 0 while Tencent prepares the bill) and, with the hard stop on, stops
every instance carrying the stack's tag (StopInstances, StoppedMode STOP_CHARGING) once the spend reaches the
limit, by stopcore's shared rules: a bill that is not ready or cannot be read counts as over the limit (fail
closed); nodes still starting are watched and stopped once they run.

Standard library only, shipped beside stopcore.py: the calls are signed here (TC3-HMAC-SHA256) with the credentials
SCF gives a function whose role it assumes (TENCENTCLOUD_SECRETID, TENCENTCLOUD_SECRETKEY,
TENCENTCLOUD_SESSIONTOKEN in its environment: unverified, read on no Tencent page here).
"""

import hashlib
import hmac
import json
import os
import time
import urllib.request
from datetime import datetime, timezone

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


def handler(event, context, env=os.environ, api=None, clock=None, now=None):
    region = env[REGION_ENV]
    api = api or (lambda s, v, a, p: call(s, v, a, p, region, env))
    clock = clock or stopcore.Clock(TIMEOUT_SECONDS, margin_seconds=30)
    month = stopcore.budget_month(now or datetime.now(timezone.utc), stopcore.BEIJING)
    key, value = env[TAG_KEY_ENV], env[TAG_VALUE_ENV]
    cost = stopcore.retry(lambda: spend(month, key, value, api), transient, clock)
    verdict = stopcore.judge_spend(cost, env.get(LIMIT_ENV), currency=env.get(CURRENCY_ENV, "CNY"),
                                   cost_currency=env.get(CURRENCY_ENV, "CNY"),
                                   deployed_limit=stopcore.positive(env.get(LIMIT_ENV)),
                                   what=f"the bill of {month} for {key}={value}")
    print(("ERROR " if verdict.unreadable else "") + verdict.reason)
    if not verdict.stop or not stopcore.flag(env.get(HARD_STOP_ENV)) or stopcore.flag(env.get(DRY_RUN_ENV)):
        return {"stop": False, "reason": verdict.reason}
    tags = {key: value, env[PROJECT_KEY_ENV]: env[PROJECT_VALUE_ENV]}
    nodes = instances(tags, api, clock)
    plan = stopcore.StopPlan(
        name=lambda n: n["InstanceId"], state=lambda n: STATES.get(n.get("InstanceState"), stopcore.STARTING),
        stop=lambda batch: api("cvm", "2017-03-12", "StopInstances", {
            "InstanceIds": [n["InstanceId"] for n in batch], "StopType": "SOFT_FIRST",
            "StoppedMode": "STOP_CHARGING"}),
        transient=transient, batch_size=STOP_BATCH,
        refresh=lambda waiting: instances(tags, api, clock, [n["InstanceId"] for n in waiting]),
        not_yet=lambda error: isinstance(error, ApiError) and error.code in NOT_YET)
    report = stopcore.stop_every(nodes, plan, clock, verdict.reason)
    for line in report.lines("budget:"):
        print(line)
    if not report.complete:
        raise RuntimeError("; ".join(report.problems()))
    return {"stop": True, "reason": verdict.reason, "stopped": [o.node for o in report.stopped]}
