"""The stack's budget on Huawei Cloud: BSS has no budget that acts and pulumi-huaweicloud 0.0.12 no budget resource
(docs/research/huawei.md §1.2, §2.3), so the budget is the stop function itself: stop.py on FunctionGraph, on a
timer every SCHEDULE, under an agency that may read the bill, list the servers and stop only the stack's tagged ones
(and the stack's Lite Servers, found by the name prefix GOLDENENV_DEVSERVER_PREFIX, `goldenenv-<stack>-`). A stack
with a budget always gets it; with budget.hardStop false it only reads the month's spend and, at the limit, tells the
budget's addresses (stop.py). The same timer runs the stack's time to live and idle stop (lifecycle.ttlHours,
idleMinutes): Cloud.check refuses either on a stack with no budget, which has no function to run them.

A stop function that fails (a server left running, a bill or listing it could not read) tells the budget's
addresses before it raises: it publishes to an SMN topic the stack makes, with an email subscription per address
(SMN mails each address a confirmation first: until its owner confirms, nothing reaches it). pulumi-huaweicloud
0.0.12 has no Cloud Eye alarm resource (no ces module), so a function that cannot start at all is not alerted on
(unverified: FunctionGraph's own failcount metric could be alarmed on once the provider has Cloud Eye).

FunctionGraph's Cron takes `@every N<unit>` or six fields with seconds first (https://support.huaweicloud.com/eu/
usermanual-functiongraph/functiongraph_01_0908.html): @every 1h runs it hourly, so a node is stopped within the hour
after the month's spend reaches the limit (and BSS's records themselves lag the use: unverified by how much).
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_huaweicloud as huaweicloud

from goldenenv.clouds.base import STOP_CORE, FunctionSource
from goldenenv.clouds.huawei import privilege, stop, stop_lite
from goldenenv.clouds.huawei.nodes import HostAgencyArgs, host_agency

RUNTIME = "Python3.9"
"""The newest Python runtime pulumi-huaweicloud 0.0.12 lists (functiongraph.Function runtime)."""
HANDLER = "stop.handler"
SCHEDULE = "@every 1h"
MEMORY_MB = 128
SOURCE = FunctionSource(Path(__file__).parent, ("stop.py", "stop_idle.py", "stop_lite.py"), STOP_CORE)


def package(source: FunctionSource = SOURCE) -> bytes:
    """The function's zip, the same bytes for the same code (fixed dates and modes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, file in sorted(source.contents().items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, Path(file).read_bytes())
    return buffer.getvalue()


@dataclass(frozen=True, kw_only=True)
class BudgetGuardArgs:
    name: str
    monthly_limit: float
    currency: str
    hard_stop: bool
    region: str
    tag_key: str
    tag_value: str
    project_key: str
    project_value: str
    agency_name: str
    tags: dict[str, str]
    emails: tuple[str, ...] = ()
    ttl_hours: float | None = None
    idle_minutes: int | None = None


def stops(args: BudgetGuardArgs) -> list[str]:
    """What the function stops servers for, in words."""
    return [what for what, on in (("when the month's spend reaches the limit", args.hard_stop),
                                  (f"{args.ttl_hours:g} h after creation" if args.ttl_hours else "", args.ttl_hours),
                                  (f"after {args.idle_minutes} idle minutes", args.idle_minutes)) if on]


def description(args: BudgetGuardArgs) -> str:
    if not args.ttl_hours and not args.idle_minutes:
        return "goldenenv: stops the stack's servers when the month's spend reaches the limit"
    return f"goldenenv: stops the stack's servers ({', '.join(stops(args))})"


def environment(args: BudgetGuardArgs, topic_urn: str | None = None) -> dict[str, str]:
    alert = {stop.ALERT_TOPIC_ENV: topic_urn} if topic_urn else {}
    return {**alert, stop.LIMIT_ENV: f"{args.monthly_limit:g}", stop.CURRENCY_ENV: args.currency,
            stop.HARD_STOP_ENV: "true" if args.hard_stop else "false", stop.DRY_RUN_ENV: "false",
            stop.TAG_KEY_ENV: args.tag_key, stop.TAG_VALUE_ENV: args.tag_value, stop.REGION_ENV: args.region,
            stop.PROJECT_KEY_ENV: args.project_key, stop.PROJECT_VALUE_ENV: args.project_value,
            stop.DEVSERVER_PREFIX_ENV: stop_lite.prefix(args.tag_value),
            **({stop.TTL_HOURS_ENV: f"{args.ttl_hours:.10g}"} if args.ttl_hours else {}),
            **({stop.IDLE_MINUTES_ENV: str(int(args.idle_minutes))} if args.idle_minutes else {})}


def alert_topic_name(guard: str) -> str:
    """The SMN topic of the stop function's failures (a topic name: letters, digits, - and _, at most 255)."""
    return f"{guard}-alerts"


class BudgetGuard(pulumi.ComponentResource):
    function_name: pulumi.Output[str]

    def __init__(self, name: str, args: BudgetGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:BudgetGuard", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        topic = None
        if args.emails:
            topic = huaweicloud.smn.Topic(f"{name}-alerts", name=alert_topic_name(args.name),
                                          display_name="goldenenv stop function", tags=args.tags, opts=child)
            for n, email in enumerate(dict.fromkeys(args.emails)):
                huaweicloud.smn.Subscription(f"{name}-alert-{n}", topic_urn=topic.topic_urn, protocol="email",
                                             endpoint=email, remark="goldenenv: the stop function failed",
                                             opts=child)
        agency = host_agency(f"{name}-identity", HostAgencyArgs(
            name=args.agency_name, kind="stop", policy=privilege.stop_policy(
                args.tag_key, args.tag_value, alert_topic_name(args.name) if args.emails else None,
                idle=bool(args.idle_minutes)),
            region=args.region), child)
        settings = (topic.topic_urn.apply(lambda urn: json.dumps(environment(args, urn), sort_keys=True))
                    if topic is not None else json.dumps(environment(args), sort_keys=True))
        function = huaweicloud.functiongraph.Function(
            f"{name}-stop", name=args.name, runtime=RUNTIME, handler=HANDLER, code_type="zip",
            code_filename="stop.zip", func_code=base64.b64encode(package()).decode(), memory_size=MEMORY_MB,
            timeout=stop.TIMEOUT_SECONDS, agency=agency, functiongraph_version="v2",
            description=description(args),
            user_data=settings, tags=args.tags, opts=child)
        huaweicloud.functiongraph.Trigger(
            f"{name}-timer", function_urn=function.urn, type="TIMER", status="ACTIVE",
            timer=huaweicloud.functiongraph.TriggerTimerArgs(name="hourly", schedule_type="Cron",
                                                            schedule=SCHEDULE), opts=child)
        self.function_name = function.name
        self.register_outputs({"function_name": function.name})
