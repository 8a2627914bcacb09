"""The stack's stop function on Huawei Cloud (FunctionGraph, Python 3.9, handler stop.handler), run by a timer
trigger: BSS has no budget that acts (docs/research/huawei.md §2.3: no budget API in bss v2 3.1.219; Cost Center
budgets only alert), so the function reads the month's bill itself and, with the hard stop on, stops every ECS
server carrying the stack's tag once the spend reaches the limit, by stopcore's shared rules.

The bill: BSS ListCustomerselfResourceRecords (GET /v2/bills/customer-bills/res-fee-records, the only BSS endpoint
bss.myhuaweicloud.com), the month as its `cycle` in Beijing time (UTC+8: 东八区, the SDK's docstring), every page
(offset from 0, until total_count), summing `amount` over the records whose `resource_tag` carries the stack's tag and its project's.
Fail closed: a bill that cannot be read, a page missing, a currency other than the stack's, counts as over the limit.
How `resource_tag` writes several tags is not documented (unverified): it is read as key=value or key:value pairs
separated by `;` or `,`.

The servers: ECS ListServersDetails (GET /v1/{project}/cloudservers/detail, `tags` filter, pages numbered from 1,
limit 1000), each server's own `tags` ("key=value") checked again, so a substring match of the filter never picks
another stack's server; stopped with BatchStopServers (os-stop, type SOFT, up to 1,000 a call).

The month's spend reaching the limit (or a bill that cannot be read) is published to the budget's SMN topic on
every run while it lasts, with the hard stop on or off: Huawei's own budgets only alert, so this is the stack's
alert at 100 %. With the hard stop the stack's Ascend Lite Servers are stopped too (stop_lite.py: found by name,
each outcome read back).

The same timer runs the time to live and the idle stop, as Tencent's and Google Cloud's stop functions do; ECS's own
auto_terminate_time is not used (it deletes, and the system disk with it). A server expires GOLDENENV_TTL_HOURS after
its `created` (ServerDetail.created, "2019-05-22T03:19:19Z": huaweicloudsdkecs 3.1.219; ECS keeps no last start time
there, so a server started again by hand after its time to live is stopped again by the next run; raise ttlHours and
`up` to keep it), a Lite Server after its create_at (stop_lite.py). An ECS server is idle when Cloud Eye's CPU
stayed low for the whole window (stop_idle.py); Lite Servers are not judged idle (no metric of them is read). A
server whose creation or metric cannot be read is named and fails the invocation after the rest is done, so it is
never stopped as idle and never silently kept.

Standard library only, shipped beside stopcore.py, stop_lite.py and stop_idle.py. The calls are signed
SDK-HMAC-SHA256 with the temporary credentials FunctionGraph gives a function with an agency
(context.getSecurityAccessKey, getSecuritySecretKey, getSecurityToken, and getProjectID: unverified, read on no
Huawei page here).
"""

import hashlib
import hmac
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone

try:
    import stop_idle
    import stop_lite
    import stopcore
except ImportError:  # in the repository
    from goldenenv.clouds import stopcore
    from goldenenv.clouds.huawei import stop_idle, stop_lite

LIMIT_ENV, CURRENCY_ENV, HARD_STOP_ENV, DRY_RUN_ENV = ("GOLDENENV_LIMIT", "GOLDENENV_CURRENCY", "GOLDENENV_HARD_STOP",
                                                       "GOLDENENV_DRY_RUN")
TAG_KEY_ENV, TAG_VALUE_ENV, REGION_ENV = "GOLDENENV_TAG_KEY", "GOLDENENV_TAG_VALUE", "GOLDENENV_REGION"
PROJECT_KEY_ENV, PROJECT_VALUE_ENV = "GOLDENENV_PROJECT_KEY", "GOLDENENV_PROJECT_VALUE"
"""The stack's servers carry both its stack tag and its project tag (another project's stack of the same name is
not this one)."""
ALERT_TOPIC_ENV = "GOLDENENV_ALERT_TOPIC"
"""The SMN topic (its URN) a failed run is published to: the budget's addresses subscribe to it (budget.py)."""
TTL_HOURS_ENV, IDLE_MINUTES_ENV = "GOLDENENV_TTL_HOURS", "GOLDENENV_IDLE_MINUTES"
DEVSERVER_PREFIX_ENV = stop_lite.PREFIX_ENV
LITE_SECONDS = 120
"""Of the invocation's time, what the watch of ECS servers still starting leaves for the Lite Servers."""
TIMEOUT_SECONDS = 600
BSS_HOST = "bss.myhuaweicloud.com"
BILL_PAGE = 100
SERVER_PAGE = 1000
STOP_BATCH = 1000
STATES = {"ACTIVE": stopcore.LIVE, "BUILD": stopcore.STARTING, "REBOOT": stopcore.STARTING,
          "HARD_REBOOT": stopcore.STARTING, "RESIZE": stopcore.STARTING, "VERIFY_RESIZE": stopcore.STARTING,
          "REVERT_RESIZE": stopcore.STARTING, "MIGRATING": stopcore.STARTING, "REBUILD": stopcore.STARTING,
          "SHUTOFF": stopcore.STOPPED, "DELETED": stopcore.STOPPED, "SOFT_DELETED": stopcore.STOPPED,
          "SHELVED": stopcore.STOPPED, "SHELVED_OFFLOADED": stopcore.STOPPED, "ERROR": stopcore.STOPPED,
          "PAUSED": stopcore.STOPPED, "SUSPENDED": stopcore.STOPPED}
"""ECS server statuses (huaweicloudsdkecs 3.1.219 ServerDetail.status) by stopcore's state class."""
TRANSIENT = (429, 500, 502, 503, 504)


class ApiError(RuntimeError):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


def _sign(credentials, method, url, body, now):
    parts = urllib.parse.urlsplit(url)
    date = now.strftime("%Y%m%dT%H%M%SZ")
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    query = "&".join(sorted(parts.query.split("&"))) if parts.query else ""
    signed = {"host": parts.netloc, "x-sdk-date": date}
    if credentials.get("token"):
        signed["x-security-token"] = credentials["token"]
    names = sorted(signed)
    canonical = "\n".join([method, path, query, "".join(f"{n}:{signed[n]}\n" for n in names), ";".join(names),
                           hashlib.sha256(body.encode()).hexdigest()])
    text = f"SDK-HMAC-SHA256\n{date}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(credentials["secret"].encode(), text.encode(), hashlib.sha256).hexdigest()
    headers = {"Host": parts.netloc, "X-Sdk-Date": date, "Content-Type": "application/json",
               "Authorization": f"SDK-HMAC-SHA256 Access={credentials['access']}, SignedHeaders={';'.join(names)}, "
                                f"Signature={signature}"}
    if credentials.get("token"):
        headers["X-Security-Token"] = credentials["token"]
    return headers


def call(method, host, path, body, credentials, opener=urllib.request.urlopen):
    """One signed call; the answer's JSON. A refusal raises ApiError with Huawei's error_code."""
    url = f"https://{host}{path}"
    payload = "" if body is None else json.dumps(body)
    request = urllib.request.Request(url, payload.encode() if body is not None else None,
                                     _sign(credentials, method, url, payload, datetime.now(timezone.utc)),
                                     method=method)
    try:
        with opener(request, timeout=20) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        try:
            code = json.loads(detail).get("error_code")
        except ValueError:
            code = None
        raise ApiError(e.code, code, detail) from None
    return json.loads(text) if text else {}


def transient(error):
    return isinstance(error, ApiError) and error.status in TRANSIENT or isinstance(error, OSError)


def tag_pairs(text):
    """The tags a bill record's resource_tag names: key=value or key:value pairs split on `;` or `,`."""
    pairs = {}
    for part in str(text or "").replace(",", ";").split(";"):
        for sep in ("=", ":"):
            if sep in part:
                key, value = part.split(sep, 1)
                pairs[key.strip()] = value.strip()
                break
    return pairs


def spend(month, tags, api, clock):
    """(the month's cost of the resources carrying every tag of ``tags``: the stack's and its project's, so another
    project's stack of the same name is not counted; its currency), every page read; raises when a page cannot be."""
    currencies, total = set(), 0.0

    def page(offset):
        answer = api("GET", BSS_HOST, "/v2/bills/customer-bills/res-fee-records?" + urllib.parse.urlencode(
            {"cycle": month, "offset": offset or 0, "limit": BILL_PAGE}), None)
        records = answer.get("fee_records") or []
        currencies.add(answer.get("currency"))
        nxt = (offset or 0) + len(records)
        return records, (nxt if records and nxt < int(answer.get("total_count") or 0) else None)

    for record in stopcore.all_pages(page, clock, transient, f"the bill of {month}"):
        found_tags = tag_pairs(record.get("resource_tag"))
        if all(found_tags.get(k) == v for k, v in tags.items()):
            total += stopcore.amount(record.get("amount"), "a bill record's amount")
    found = currencies - {None}
    return total, (found.pop() if len(found) == 1 else (None if not found else "/".join(sorted(found))))


def servers(tags, api, clock, region, ids=None):
    """The servers carrying every tag of ``tags`` (each server's own tags checked); with ``ids``, those only."""
    key, value = next(iter(tags.items()))

    seen = [0]

    def page(number):
        number = number or 1
        answer = api("GET", f"ecs.{region}.myhuaweicloud.com", "/v1/{project}/cloudservers/detail?" +
                     urllib.parse.urlencode({"tags": f"{key}={value}", "limit": SERVER_PAGE, "offset": number}), None)
        found = answer.get("servers") or []
        if number == 1:
            seen[0] = 0
        seen[0] += len(found)
        return found, (number + 1 if found and seen[0] < int(answer.get("count") or 0) else None)

    found = stopcore.all_pages(page, clock, transient, "the listing of the stack's servers")
    wanted = {f"{k}={v}" for k, v in tags.items()}
    found = [s for s in found if wanted <= set(s.get("tags") or [])]
    return [s for s in found if s["id"] in ids] if ids is not None else found


def _stop_plan(tags, api, clock, region):
    return stopcore.StopPlan(
        name=lambda s: s["id"], state=lambda s: STATES.get(s.get("status"), stopcore.STARTING),
        stop=lambda batch: api("POST", f"ecs.{region}.myhuaweicloud.com", "/v1/{project}/cloudservers/action",
                               {"os-stop": {"type": "SOFT", "servers": [{"id": s["id"]} for s in batch]}}),
        transient=transient, batch_size=STOP_BATCH,
        refresh=lambda waiting: servers(tags, api, clock, region, {s["id"] for s in waiting}))


def _credentials(context, env):
    """The function's temporary credentials (its agency's), and its project id."""
    if context is not None and hasattr(context, "getSecurityAccessKey"):
        return ({"access": context.getSecurityAccessKey(), "secret": context.getSecuritySecretKey(),
                 "token": context.getSecurityToken()}, context.getProjectID())
    return ({"access": env.get("HUAWEICLOUD_SDK_AK", ""), "secret": env.get("HUAWEICLOUD_SDK_SK", ""),
             "token": env.get("HUAWEICLOUD_SDK_SECURITY_TOKEN", "")}, env.get("HUAWEICLOUD_SDK_PROJECT_ID", ""))


def alert(api, region, topic, text):
    """Publish a failed run to the stack's SMN topic (SMN PublishMessage, POST /v2/{project}/notifications/topics/
    <urn>/publish: unverified path); a topic that cannot be reached is logged, the run still fails."""
    try:
        api("POST", f"smn.{region}.myhuaweicloud.com", f"/v2/{{project}}/notifications/topics/{topic}/publish",
            {"subject": "goldenenv: the stop function failed", "message": text[:10000]})
    except Exception as error:
        print(f"ERROR the failure could not be published to {topic}: {error}")


def handler(event, context, env=os.environ, api=None, clock=None, now=None):
    """One timer run: the budget's hard stop (with it on), else the time to live and idle stop (with either set).
    A failed run is published to the alert topic, then raised (FunctionGraph counts it as a failed invocation)."""
    region = env[REGION_ENV]
    if api is None:
        credentials, project = _credentials(context, env)
        def api(method, host, path, body):
            return call(method, host, path.replace("{project}", project), body, credentials)
    try:
        return _run(env, api, clock or stopcore.Clock(TIMEOUT_SECONDS, margin_seconds=30),
                    now or datetime.now(timezone.utc), region)
    except Exception as error:
        if env.get(ALERT_TOPIC_ENV):
            alert(api, region, env[ALERT_TOPIC_ENV], f"the stop function of {env.get(TAG_VALUE_ENV)} failed: {error}")
        raise


def created(server):
    """The server's `created` (ISO 8601, UTC) as an aware datetime; Unjudgeable when it cannot be read."""
    text = server.get("created")
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise stopcore.Unjudgeable(f"its created {text!r} is not a time") from None
    if moment.tzinfo is None:
        raise stopcore.Unjudgeable(f"its created {text!r} carries no time zone")
    return moment


def _judge(name, judge, problems, log):
    """(``judge()``'s reason, whether it could be judged); one that cannot is named in ``problems``, kept this run."""
    try:
        return judge(), True
    except stopcore.Unjudgeable as problem:
        problems.append(f"{name}: cannot be judged ({problem})")
    except (ApiError, OSError, stopcore.OutOfTime) as error:
        problems.append(f"{name}: its CPU cannot be read, so it is neither idle nor busy ({error})")
    log(f"ERROR lifecycle: SKIPPED {problems[-1]}")
    return None, False


def lifecycle(env, tags, api, clock, now, region, log=print):
    """The time to live and the idle stop over the stack's ECS servers and Lite Servers: every live server past its
    time or idle is stopped; one that cannot be judged is named and fails the invocation after the rest is done."""
    ttl, idle = stopcore.positive(env.get(TTL_HOURS_ENV)), stopcore.positive(env.get(IDLE_MINUTES_ENV))
    prefix = env.get(DEVSERVER_PREFIX_ENV)
    due, lite_due, problems = {}, {}, []
    ecs, lite = _listed(tags, prefix, api, clock, region, problems)
    for server in ecs:
        if STATES.get(server.get("status"), stopcore.STARTING) in (stopcore.STOPPING, stopcore.STOPPED):
            continue
        reason, judged = _judge(server["id"], lambda: (
            (stopcore.ttl_due(created(server), ttl, now, "its creation") if ttl else None)
            or (stop_idle.idle_reason(server, created(server), idle, now, api, clock, region, transient)
                if idle else None)), problems, log)
        if reason:
            due[server["id"]] = (server, reason)
        elif judged:
            log(f"lifecycle: keep {server['id']}")
    for server in lite:
        if stop_lite.STATES.get(server.get("status"), stopcore.STARTING) in (stopcore.STOPPING, stopcore.STOPPED):
            continue
        name = stop_lite.described(server)
        reason, judged = _judge(name, lambda: stopcore.ttl_due(stop_lite.created(server), ttl, now, "its creation")
                                if ttl else None, problems, log)
        if reason:
            lite_due[server["id"]] = (server, reason)
        elif judged:
            log(f"lifecycle: keep {name}" + (" (a Lite Server is not judged idle: no metric of it is read)"
                                             if idle else ""))
    stopped = _stop_both([s for s, _ in due.values()], lambda s: due[s["id"]][1],
                         [s for s, _ in lite_due.values()], lambda s: lite_due[s["id"]][1],
                         tags, prefix, api, clock, region, problems, log)
    return {"stop": bool(stopped), "reason": f"{len(due) + len(lite_due)} due by time to live or idleness",
            "stopped": stopped}


def _listed(tags, prefix, api, clock, region, problems):
    """(the stack's ECS servers, its Lite Servers): a listing that cannot be completed is named in ``problems`` and
    holds back no stop of the other kind."""
    found = []
    for what, listing in (("servers", lambda: servers(tags, api, clock, region)),
                          ("Lite Servers", lambda: _lite_servers(prefix, found[0], api, clock, region, problems))):
        try:
            found.append(listing())
        except (stopcore.ListingIncomplete, stopcore.OutOfTime) as error:
            problems.append(f"the stack's {what} could not be listed, so none of them is judged or stopped ({error})")
            print(f"ERROR {problems[-1]}")
            found.append([])
    return found[0], found[1]


def _lite_servers(prefix, ecs, api, clock, region, problems):
    """The stack's Lite Servers: named with its prefix and in its VPC (stop_lite.py); none without a prefix."""
    if not prefix:
        return []
    vpcs = stop_lite.vpcs_of(ecs)
    named = stop_lite.servers(prefix, api, clock, region, transient)
    others = [s for s in named if s.get("vpc_id") not in vpcs]
    if others and not vpcs:
        names = ", ".join(stop_lite.described(s) for s in others)
        problems.append(f"no ECS server of the stack tells its VPC, so its Lite Servers ({names}) cannot be told "
                        "from another project's stack of the same name: none of them is stopped")
        print(f"ERROR {problems[-1]}")
    for server in others if vpcs else []:
        print(f"lite server: leave {stop_lite.described(server)}: in VPC {server.get('vpc_id')}, not the stack's")
    return [s for s in named if s.get("vpc_id") in vpcs]


def _stop_both(ecs, ecs_reason, lite, lite_reason, tags, prefix, api, clock, region, problems, log):
    """Stop the ECS servers, then the Lite Servers (their outcomes read back); raise naming every server left and
    every earlier problem once the rest is done."""
    report = stopcore.stop_every(ecs, _stop_plan(tags, api, clock, region),
                                 stop_lite.reserving(clock, LITE_SECONDS if lite else 0), ecs_reason)
    for line in report.lines("ecs:"):
        log(line)
    accepted, lite_problems = (stop_lite.stop(lite, lite_reason, prefix, api, clock, region, transient, log)
                               if lite else ([], []))
    left = list(problems) + report.problems() + lite_problems
    if left:
        raise RuntimeError("the stop left servers running: " + "; ".join(left))
    return [o.node for o in report.stopped] + accepted


def _run(env, api, clock, now, region):
    key, value = env[TAG_KEY_ENV], env[TAG_VALUE_ENV]
    tags = {key: value, env[PROJECT_KEY_ENV]: env[PROJECT_VALUE_ENV]}
    month = stopcore.budget_month(now, stopcore.BEIJING)
    what = f"the bill of {month} for {key}={value}"
    try:
        cost, currency = spend(month, tags, api, clock)
    except (ApiError, OSError, stopcore.ListingIncomplete, stopcore.OutOfTime, stopcore.Unreadable) as error:
        cost, currency = f"unreadable: {error}", env.get(CURRENCY_ENV, "CNY")
    verdict = stopcore.judge_spend(cost, env.get(LIMIT_ENV), currency=env.get(CURRENCY_ENV, "CNY"),
                                   cost_currency=currency, deployed_limit=stopcore.positive(env.get(LIMIT_ENV)),
                                   what=what)
    print(("ERROR " if verdict.unreadable else "") + verdict.reason)
    if verdict.stop and env.get(ALERT_TOPIC_ENV):
        alert(api, region, env[ALERT_TOPIC_ENV], f"{what}: {verdict.reason}" + (
            "; the hard stop stops the stack's servers" if stopcore.flag(env.get(HARD_STOP_ENV)) else ""))
    if verdict.stop and stopcore.flag(env.get(HARD_STOP_ENV)) and not stopcore.flag(env.get(DRY_RUN_ENV)):
        prefix, problems = env.get(DEVSERVER_PREFIX_ENV), []
        ecs, lite = _listed(tags, prefix, api, clock, region, problems)
        stopped = _stop_both(ecs, verdict.reason, lite, verdict.reason, tags, prefix, api, clock, region, problems,
                             print)
        return {"stop": True, "reason": verdict.reason, "stopped": stopped}
    if stopcore.positive(env.get(TTL_HOURS_ENV)) or stopcore.positive(env.get(IDLE_MINUTES_ENV)):
        found = lifecycle(env, tags, api, clock, now, region)
        return {**found, "reason": f"{verdict.reason}; {found['reason']}"}
    return {"stop": False, "reason": verdict.reason}
