"""The stack's budget on Tencent Cloud: a billing budget that alerts (billing.Budget has no stop action), the stack
tag made a cost-allocation tag (bills are summarised by tag only for those), and with the hard stop, a time to live
or an idle time the stop function (stop.py on SCF, hourly: a node is stopped within the hour after it is due) under
a CAM role that may stop only the stack's tagged instances (and, for the idle stop, read Cloud Monitor's data).

SCF's timer takes a 7-field cron (second minute hour day month weekday year; https://cloud.tencent.com/document/
product/583/9708); which time zone it runs in is not stated (unverified): hourly runs do not care.

A stop function that fails (it raises when a node is left running or the listing cannot be completed) alerts the
budget's addresses: a Cloud Monitor alarm policy on the function's Error metric (namespace QCE/SCF_V2, metric Error,
dimensions functionName, namespace, version, alias: https://tencentcloud.com/document/product/248/34638), bound to
the function, notifies through an alarm notice (https://tencentcloud.com/document/api/248/39304). A notice reaches
CAM users and user groups, not addresses, and a user's address receives alarms only once its owner has confirmed
it ("[Tencent Cloud] Email Receipt Verification": https://intl.cloud.tencent.com/document/product/248/6217 and the
email channel page of Cloud Monitor's alarm guide), so each address gets a CAM user of its own that can do nothing
(no console login, no API key, no policy): a receiver, held to that by privilege.judge.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv.clouds.base import STOP_CORE, FunctionSource
from goldenenv.clouds.tencent import privilege, stop
from goldenenv.clouds.tencent.nodes import HostRoleArgs, host_role

RUNTIME = "Python3.9"
HANDLER = "stop.handler"
SCHEDULE = "0 0 */1 * * * *"
MEMORY_MIB = 128
ALARM_NAMESPACE = "scf_v2"
"""The alarm policy type of SCF (CreateAlarmPolicy's Namespace, from DescribeAllNamespaces; cvm_device is the
documented example): unverified."""
ERROR_METRIC = "Error"
"""QCE/SCF_V2's count of failed invocations, the function's errors and the platform's together."""
FUNCTION_NAMESPACE = "default"
"""SCF's namespace the function is created in (scf.Function namespace defaults to default). The binding names the
function by functionName and namespace; whether Cloud Monitor also wants version ($LATEST) or alias in a binding's
dimensions is unverified."""
SOURCE = FunctionSource(Path(__file__).parent, ("stop.py",), STOP_CORE)


def package(source: FunctionSource = SOURCE) -> str:
    """The function's zip, written once per code digest to the temporary folder (the provider's zip_file is a path
    it reads)."""
    path = Path(tempfile.gettempdir()) / f"goldenenv-tencent-stop-{source.digest()}.zip"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.part")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, file in sorted(source.contents().items()):
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                archive.writestr(info, Path(file).read_bytes())
        partial.replace(path)
    return str(path)


@dataclass(frozen=True, kw_only=True)
class BudgetGuardArgs:
    name: str
    monthly_limit: float
    currency: str
    thresholds: list[int]
    hard_stop: bool
    region: str
    tag_key: str
    tag_value: str
    project_key: str
    project_value: str
    role_name: str
    tags: dict[str, str]
    emails: tuple[str, ...] = ()
    """The budget's addresses, each told when the stop function fails (once its owner confirms it)."""
    ttl_hours: float | None = None
    idle_minutes: int | None = None


class BudgetGuard(pulumi.ComponentResource):
    function_name: pulumi.Output[str] | None

    def __init__(self, name: str, args: BudgetGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:BudgetGuard", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        allocation = tencentcloud.billing.AllocationTag(f"{name}-cost-tag", tag_key=args.tag_key, opts=child)
        tencentcloud.billing.Budget(
            f"{name}-budget", budget_name=args.name, bill_type="BILL", budget_quota=f"{args.monthly_limit:.2f}",
            cycle_type="MONTH", fee_type="COST", plan_type="CYCLE", period_begin="2026-01", period_end="2099-12",
            budget_note="goldenenv: the stack's monthly limit",
            dimensions_range=tencentcloud.billing.BudgetDimensionsRangeArgs(tags=[
                tencentcloud.billing.BudgetDimensionsRangeTagArgs(tag_key=args.tag_key, tag_values=[args.tag_value])]),
            warn_jsons=[tencentcloud.billing.BudgetWarnJsonArgs(cal_type="PERCENTAGE", threshold_value=str(t),
                                                                warn_type="ACTUAL") for t in args.thresholds],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[allocation]))
        self.function_name = None
        if args.hard_stop or args.ttl_hours or args.idle_minutes:
            role_name = host_role(f"{name}-identity", HostRoleArgs(
                role_name=args.role_name, kind="stop", document=privilege.stop_document(
                    args.tag_key, args.tag_value, idle=bool(args.idle_minutes)), tags=args.tags), child)
            function = tencentcloud.scf.Function(
                f"{name}-stop", name=args.name, runtime=RUNTIME, handler=HANDLER, zip_file=package(),
                mem_size=MEMORY_MIB, timeout=stop.TIMEOUT_SECONDS, role=role_name, enable_public_net=True,
                description=f"goldenenv: stops the stack's nodes ({', '.join(stops(args))})",
                environment=environment(args),
                triggers=[tencentcloud.scf.FunctionTriggerArgs(name="hourly", type="timer", trigger_desc=SCHEDULE)],
                tags=args.tags, opts=child)
            self.function_name = function.name
            if args.emails:
                self._failure_alarm(name, args, function, child)
        self.register_outputs({"function_name": self.function_name})

    @staticmethod
    def _failure_alarm(name: str, args: BudgetGuardArgs, function: tencentcloud.scf.Function,
                       child: pulumi.ResourceOptions) -> None:
        """An alarm on the function's failed invocations, to a receiver user of each budget address."""
        receivers = [tencentcloud.cam.User(
            f"{name}-receiver-{n}", name=receiver_name(args.name, n), email=email, console_login=False,
            use_api=False, need_reset_password=False, force_delete=True, tags=args.tags,
            remark="goldenenv: receives the stop function's failure alarm; no login, no key, no policy", opts=child)
            for n, email in enumerate(dict.fromkeys(args.emails))]
        notice = tencentcloud.monitor.AlarmNotice(
            f"{name}-notice", name=f"{args.name[:50]}-stopfail", notice_type="ALL", notice_language="en-US",
            user_notices=[tencentcloud.monitor.AlarmNoticeUserNoticeArgs(
                receiver_type="USER", start_time=0, end_time=86399, notice_ways=["EMAIL"],
                user_ids=[r.uid for r in receivers], weekdays=[1, 2, 3, 4, 5, 6, 7])], opts=child)
        policy = tencentcloud.monitor.AlarmPolicy(
            f"{name}-alarm", policy_name=alarm_policy_name(args.name), monitor_type="MT_QCE",
            namespace=ALARM_NAMESPACE, enable=1, project_id=0, notice_ids=[notice.id],
            remark="goldenenv stop function failed: nodes may still bill",
            conditions=tencentcloud.monitor.AlarmPolicyConditionsArgs(is_union_rule=0, rules=[
                tencentcloud.monitor.AlarmPolicyConditionsRuleArgs(
                    metric_name=ERROR_METRIC, period=60, operator="gt", value="0", continue_period=1,
                    notice_frequency=3600, is_power_notice=0)]),
            policy_tags=[tencentcloud.monitor.AlarmPolicyPolicyTagArgs(key=k, value=v) for k, v in args.tags.items()],
            opts=child)
        tencentcloud.monitor.PolicyBindingObject(
            f"{name}-alarm-binding", policy_id=policy.id, dimensions=[
                tencentcloud.monitor.PolicyBindingObjectDimensionArgs(dimensions_json=function.name.apply(
                    lambda function_name: json.dumps({"functionName": function_name,
                                                      "namespace": FUNCTION_NAMESPACE}, sort_keys=True)))],
            opts=child)


def stops(args: BudgetGuardArgs) -> list[str]:
    """What the function stops nodes for, in words."""
    return [what for what, on in (("when the month's spend reaches the limit", args.hard_stop),
                                  (f"{args.ttl_hours:g} h after creation" if args.ttl_hours else "", args.ttl_hours),
                                  (f"after {args.idle_minutes} idle minutes", args.idle_minutes)) if on]


def environment(args: BudgetGuardArgs) -> dict[str, str]:
    env = {stop.LIMIT_ENV: f"{args.monthly_limit:g}", stop.CURRENCY_ENV: args.currency,
           stop.HARD_STOP_ENV: "true" if args.hard_stop else "false", stop.DRY_RUN_ENV: "false",
           stop.TAG_KEY_ENV: args.tag_key, stop.TAG_VALUE_ENV: args.tag_value, stop.REGION_ENV: args.region,
           stop.PROJECT_KEY_ENV: args.project_key, stop.PROJECT_VALUE_ENV: args.project_value}
    if args.ttl_hours:
        env[stop.TTL_HOURS_ENV] = f"{args.ttl_hours:.10g}"
    if args.idle_minutes:
        env[stop.IDLE_MINUTES_ENV] = str(int(args.idle_minutes))
    return env


def receiver_name(guard: str, n: int) -> str:
    """The CAM user name of the budget's n-th address."""
    return f"{guard[:52]}-alert{n}"


def alarm_policy_name(guard: str) -> str:
    """An alarm policy's name takes at most 20 characters (CreateAlarmPolicy PolicyName,
    https://tencentcloud.com/document/api/248/39326): goldenenv's mark and a digest of the guard's name."""
    return f"ge-stop-{hashlib.sha256(guard.encode()).hexdigest()[:10]}"
