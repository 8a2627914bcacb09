"""The stop function's Ascend Lite Servers (ModelArts DevServers): found by name, stopped, each outcome read back.

A DevServer takes no tags (terraform-provider-huaweicloud docs/resources/modelarts_devserver.md@a0345b8: no tags
argument; docs/research/huawei.md §1.4), so the stack's DevServers are those whose name starts with the prefix in
the function's setting GOLDENENV_DEVSERVER_PREFIX (`goldenenv-<stack>-`; the servers are named
`goldenenv-<stack>-<pool>-<n>`) and that sit in the stack's VPC. The name carries no project, so another project's
stack of the same name shares the prefix; its servers sit in its own VPC. The stack's VPC is read from the stack's
own ECS servers, found by its stack and project tags (the Slurm head is always one): each ECS server's metadata
carries its vpc_id (ServerDetail.metadata, huaweicloudsdkecs 3.1.219), each DevServer its vpc_id (ServerResponse).
With no ECS server of the stack to read it from, no DevServer is judged or stopped, and the run fails saying so.

The calls, as huaweicloudsdkmodelarts 3.1.219 (v1/modelarts_client.py) makes them:
- ListDevServers, GET /v1/{project_id}/dev-servers?limit&offset: `offset` counts records from 0, `limit` 0 to 1024
  (default 10); the answer's data[] (ServerResponse: id, name, status, create_at an int) and total. Every page is
  read (offset += the page's length until total): a listing that cannot be completed fails the run, never "none".
- BatchDevServersAction, POST /v1/{project_id}/dev-servers/action with {"type": "STOP", "servers": [{"id"}]}
  (DevServerBatchRequest; the SDK gives no largest batch: STOP_BATCH is ours). The call accepts the batch; each
  server's outcome is read back from the listing afterwards: STOPPED is done, STOP_FAILED is named, one still
  STOPPING when the invocation's time runs out is named too. Either fails the invocation (the alert tells the
  budget's addresses) and the next run stops it again.
- The endpoint: modelarts.<region>.myhuaweicloud.com, except the regions the SDK's region table
  (v1/region/modelarts_region.py) serves under myhuaweicloud.cn.

The time to live counts from `create_at`, an int the SDK documents as the creation time without its unit: read as
milliseconds since the epoch when it is that large, else seconds (unverified). The idle stop does not judge a Lite
Server: no Cloud Eye metric of a DevServer's CPU or NPUs was read (unverified), so it is logged as kept, by name.

Standard library only, shipped beside stop.py and stopcore.py.
"""

import copy
import urllib.parse
from datetime import datetime, timezone

try:
    import stopcore
except ImportError:  # in the repository
    from goldenenv.clouds import stopcore

PREFIX_ENV = "GOLDENENV_DEVSERVER_PREFIX"
PAGE = 100
STOP_BATCH = 50
CONFIRM_SECONDS = 60
"""Of the invocation's time, what is kept for reading each accepted stop's outcome (how long a Lite Server takes
to stop is unverified)."""
CN_DOMAIN_REGIONS = ("ap-southeast-1",)
"""The regions huaweicloudsdkmodelarts 3.1.219's region table serves under myhuaweicloud.cn."""
STATES = {"RUNNING": stopcore.LIVE, "STOP_FAILED": stopcore.LIVE, "REBOOT_FAILED": stopcore.LIVE,
          "CHANGINGOS_FAILED": stopcore.LIVE, "REINSTALLINGOS_FAILED": stopcore.LIVE, "ERROR": stopcore.LIVE,
          "CREATING": stopcore.STARTING, "STARTING": stopcore.STARTING, "REBOOTING": stopcore.STARTING,
          "CHANGINGOS": stopcore.STARTING, "REINSTALLINGOS": stopcore.STARTING,
          "STOPPING": stopcore.STOPPING, "DELETING": stopcore.STOPPING,
          "STOPPED": stopcore.STOPPED, "DELETED": stopcore.STOPPED, "CREATE_FAILED": stopcore.STOPPED,
          "START_FAILED": stopcore.STOPPED, "DELETE_FAILED": stopcore.STOPPED}
"""ServerResponse.status values (huaweicloudsdkmodelarts 3.1.219) by stopcore's state class. A server whose stop,
reboot or OS change failed, or in ERROR, may still bill (unverified): it is stopped again, and a refusal is named."""
STOP_FAILED = "STOP_FAILED"


def prefix(stack):
    """The start of the name of every Lite Server of the stack (`goldenenv-<stack>-<pool>-<n>`)."""
    return f"goldenenv-{stack}-"


def host(region):
    domain = "myhuaweicloud.cn" if region in CN_DOMAIN_REGIONS else "myhuaweicloud.com"
    return f"modelarts.{region}.{domain}"


def servers(prefix, api, clock, region, transient, ids=None, vpcs=None):
    """The DevServers whose name starts with ``prefix``, every page read; with ``ids``, those only; with ``vpcs``,
    those in one of these VPCs only."""
    def page(offset):
        answer = api("GET", host(region), "/v1/{project}/dev-servers?" + urllib.parse.urlencode(
            {"limit": PAGE, "offset": offset or 0}), None)
        found = answer.get("data") or []
        nxt = (offset or 0) + len(found)
        return found, (nxt if found and nxt < int(answer.get("total") or 0) else None)

    found = [s for s in stopcore.all_pages(page, clock, transient, "the listing of the stack's Lite Servers")
             if str(s.get("name") or "").startswith(prefix)]
    found = [s for s in found if s.get("vpc_id") in vpcs] if vpcs is not None else found
    return [s for s in found if s.get("id") in ids] if ids is not None else found


def vpcs_of(ecs_servers):
    """The VPCs the stack's ECS servers sit in (metadata.vpc_id)."""
    return {(s.get("metadata") or {}).get("vpc_id") for s in ecs_servers} - {None, ""}


def created(server):
    """The DevServer's creation time (create_at, ms or s since the epoch); Unjudgeable when it cannot be read."""
    value = server.get("create_at")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise stopcore.Unjudgeable(f"its create_at {value!r} is not a time")
    return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, timezone.utc)


def described(server):
    return f"{server.get('name')} ({server.get('id')})"


def _plan(prefix, api, clock, region, transient):
    return stopcore.StopPlan(
        name=lambda s: s["id"], state=lambda s: STATES.get(s.get("status"), stopcore.STARTING),
        stop=lambda batch: api("POST", host(region), "/v1/{project}/dev-servers/action",
                               {"type": "STOP", "servers": [{"id": s["id"]} for s in batch]}),
        transient=transient, batch_size=STOP_BATCH,
        refresh=lambda waiting: servers(prefix, api, clock, region, transient, {s["id"] for s in waiting}))


def reserving(clock, seconds):
    """A view of ``clock`` (the same time and jitter) whose deadline comes ``seconds`` earlier."""
    view = copy.copy(clock)
    view.deadline = max(clock.started, clock.deadline - seconds)
    return view


def confirm(ids, prefix, api, clock, region, transient, log):
    """Read each accepted stop's outcome every stopcore.POLL_SECONDS while the invocation's time allows. Returns
    the problems: each server whose stop ended STOP_FAILED, each not stopped yet when the time ran out."""
    pending, problems = list(ids), []
    while pending and clock.left() > stopcore.POLL_SECONDS:
        clock.sleep(stopcore.POLL_SECONDS)
        try:
            seen = {s["id"]: s for s in servers(prefix, api, clock, region, transient, set(pending))}
        except (stopcore.ListingIncomplete, stopcore.OutOfTime) as error:
            problems += [f"{i}: its stop was accepted, but its outcome could not be read ({error})" for i in pending]
            for line in problems:
                log(f"ERROR UNCONFIRMED {line}")
            return problems
        still = []
        for server_id in pending:
            server = seen.get(server_id)
            if server is None or STATES.get(server.get("status")) == stopcore.STOPPED:
                continue
            if server.get("status") == STOP_FAILED:
                problems.append(f"{described(server)}: ModelArts accepted its stop and then failed it "
                                f"(status {STOP_FAILED})")
                log(f"ERROR FAILED to stop {problems[-1]}")
                continue
            still.append(server_id)
        pending = still
    for server_id in pending:
        problems.append(f"{server_id}: its stop was accepted but had not finished after {clock.elapsed():.0f} s of "
                        "this invocation; the next run looks again")
        log(f"ERROR UNCONFIRMED {problems[-1]}")
    return problems


def stop(found, reason, prefix, api, clock, region, transient, log):
    """Stop ``found`` and read each accepted stop back. Returns (the ids whose stop was accepted, the problems)."""
    report = stopcore.stop_every(found, _plan(prefix, api, clock, region, transient),
                                 reserving(clock, CONFIRM_SECONDS), reason)
    for line in report.lines("lite server:"):
        log(line)
    accepted = [o.node for o in report.stopped]
    return accepted, report.problems() + confirm(accepted, prefix, api, clock, region, transient, log)
