"""The stack's budget on Alibaba Cloud: a guard function on a timer, since the cloud has no budget resource.

Alibaba Cloud's Budget Management is console-only and alert-only, and pulumi-alicloud has no budget resource, so
the stack deploys its own guard: a Function Compute (v3) function running goldenenv/clouds/alicloud/guard.py,
shipped alone as its code, invoked by a timer trigger every 15 minutes. It reads the month's spend for the stack
tag (BSS OpenAPI DescribeSplitItemBill), alerts at each threshold once a month, and with the hard stop on stops
the stack's nodes once spend passes the limit. Its RAM role may read the bill, describe instances and security
groups, stop only instances tagged with this project and stack, tag only this stack's security groups (where the
guard remembers which alerts it sent) and, with a sender, send mail through Direct Mail.

What a user must know (the plan says it): split bills lag usage by about 48 hours and exist only once the split
bill is enabled in the Expenses and Costs console; alerts are emailed only from a Direct Mail sender address the
account has verified (alert_sender): without one, an alert fails the invocation, so it shows in the function's
error count, and its text is kept only if the function has a logstore (log_project, log_store). A failed invocation
(a stop that failed among them) reaches the budget's addresses anyway: a CloudMonitor alarm on the function's errors
notifies a contact group of them (each address confirms its activation email once).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_alicloud as alicloud

from goldenenv.clouds.alicloud import guard, privilege
from goldenenv.clouds.base import STOP_CORE, stable_number

RUNTIME = "python3.10"
HANDLER = "guard.handler"
CODE_FILE = "guard.py"
SCHEDULE = "@every 15m"
TRIGGER_CONFIG = json.dumps({"cronExpression": SCHEDULE, "enable": True})
TIMEOUT_SECONDS = guard.TIMEOUT_SECONDS
"""Room for the waits: throttled calls retried (ECS serves a throttled API again the next minute) and nodes Starting
watched until they run, within the 15-minute timer so runs never overlap."""
CPU = 0.35
MEMORY_MIB = 512
"""FC 3.0's defaults (0.35 vCPU, 512 MiB): a valid vCPU : memory ratio."""
FUNCTION_NAME_MAX = 64
ROLE_NAME_MAX = 64
FC_SERVICE = "fc.aliyuncs.com"
FC_METRIC_PROJECT, FC_ERRORS_METRIC = "acs_fc", "FunctionFunctionErrors"
"""CloudMonitor's namespace of Function Compute and its count of invocations the function's code failed (metric
names as Alibaba's FC 3.0 monitoring lists them; the statistic Average as published alicloud_cms_alarm examples on
FunctionFunctionErrors use it; the dimensions region and functionName are unverified against an account)."""
FC_ERRORS_PERIOD_SECONDS = 900
"""One guard period: an invocation that failed alerts by the next one."""
FC_ERRORS_SILENCE_SECONDS = 3600
"""An email an hour at most while the guard keeps failing."""
MOCK_ACCOUNT = "0000000000000000"
CHINA_SITE_CURRENCY = "CNY"
"""An account billed in CNY is on the China site (aliyun.com), whose BSS and Direct Mail endpoints differ from the
international site's (alibabacloud.com)."""


@dataclass(frozen=True, kw_only=True)
class BudgetGuardArgs:
    project: str
    stack: str
    monthly_limit: float
    currency: str
    thresholds: list[int]
    """Percent of the limit at which the guard alerts, each once a month."""
    emails: list[str]
    hard_stop: bool
    region: str
    resource_group_id: pulumi.Input[str] | None = None
    tags: dict[str, str]
    alert_sender: str | None = None
    """A Direct Mail sender address the account has verified; None: an alert fails the invocation instead."""
    log_project: str | None = None
    log_store: str | None = None
    """An existing Simple Log Service project and logstore to keep the guard's output in; None: FC keeps none."""


class BudgetGuard(pulumi.ComponentResource):
    function_name: pulumi.Output[str]

    def __init__(self, name: str, args: BudgetGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:alicloud:BudgetGuard", name, None, opts)
        if args.monthly_limit <= 0:
            raise ValueError(f"monthly_limit must be positive, not {args.monthly_limit}")
        child = pulumi.ResourceOptions(parent=self)
        names = resource_names(args.project, args.stack)
        log = (args.log_project, args.log_store) if args.log_project and args.log_store else None
        role = alicloud.ram.Role(
            f"{name}-role", role_name=names["role"], assume_role_policy_document=json.dumps(assumed_by(FC_SERVICE)),
            description=f"goldenenv: budget guard of project {args.project} stack {args.stack}"[:1024],
            tags=args.tags, opts=child,
        )
        policy = alicloud.ram.Policy(
            f"{name}-policy", policy_name=names["policy"],
            policy_document=json.dumps(guard_policy(
                args.project, args.stack, args.region, args.hard_stop, bool(args.alert_sender), log)),
            description=f"goldenenv: what the budget guard of {args.project}/{args.stack} may do"[:1024],
            tags=args.tags, opts=child,
        )
        attached = alicloud.ram.RolePolicyAttachment(
            f"{name}-policy-attachment", policy_name=policy.policy_name, policy_type="Custom",
            role_name=role.role_name, opts=child,
        )
        function = alicloud.fc.V3Function(
            f"{name}-function",
            function_name=names["function"],
            description=(f"goldenenv: budget guard of project {args.project} stack {args.stack}: alerts at "
                         f"{', '.join(f'{t} %' for t in sorted(set(args.thresholds)))} of "
                         f"{args.monthly_limit:,.2f} {args.currency} a month"
                         + ("; stops the nodes at 100 %" if args.hard_stop else ""))[:256],
            runtime=RUNTIME,
            handler=HANDLER,
            code={"zip_file": code_zip_base64()},
            role=role.arn,
            timeout=TIMEOUT_SECONDS,
            cpu=CPU,
            memory_size=MEMORY_MIB,
            internet_access=True,  # the BSS, ECS and Direct Mail endpoints are public
            environment_variables=guard_environment(args),
            log_config={"project": log[0], "logstore": log[1], "enable_request_metrics": True} if log else None,
            resource_group_id=args.resource_group_id,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attached]),
        )
        alicloud.fc.V3Trigger(
            f"{name}-timer",
            function_name=function.function_name,
            trigger_name="goldenenv-budget-guard",
            trigger_type="timer",
            qualifier="LATEST",
            trigger_config=TRIGGER_CONFIG,
            description=f"goldenenv: run the budget guard of {args.stack} {SCHEDULE.removeprefix('@')}",
            opts=child,
        )
        self._failure_alarm(name, args, function)
        self.function_name = function.function_name
        self.register_outputs({"function_name": self.function_name})

    def _failure_alarm(self, name: str, args: BudgetGuardArgs, function: alicloud.fc.V3Function) -> alicloud.cms.Alarm:
        """A guard that fails (a stop, a bill read or an alert that failed fails the invocation) must reach a person
        even when it cannot mail itself (no Direct Mail sender): a CloudMonitor alarm on the function's errors, to a
        contact group of the budget's addresses. Each address is a CloudMonitor contact, which Alibaba asks to
        confirm by an activation email before it receives alarms."""
        child = pulumi.ResourceOptions(parent=self)
        names = resource_names(args.project, args.stack)
        contacts = [alicloud.cms.AlarmContact(
            f"{name}-contact-{n}", alarm_contact_name=contact_name(args.project, args.stack, n),
            describe=f"goldenenv: budget contact {n} of {args.project}/{args.stack}", channels_mail=email,
            lang="en", opts=child) for n, email in enumerate(dict.fromkeys(args.emails), 1)]
        group = alicloud.cms.AlarmContactGroup(
            f"{name}-contacts", alarm_contact_group_name=names["contacts"],
            describe=f"goldenenv: the budget's addresses of {args.project}/{args.stack}",
            contacts=[c.alarm_contact_name for c in contacts], opts=child)
        return alicloud.cms.Alarm(
            f"{name}-function-errors",
            name=names["alarm"],
            project=FC_METRIC_PROJECT,
            metric=FC_ERRORS_METRIC,
            metric_dimensions=function.function_name.apply(
                lambda fn: json.dumps([{"region": args.region, "functionName": fn}])),
            period=FC_ERRORS_PERIOD_SECONDS,
            escalations_critical={"statistics": "Average", "comparison_operator": ">", "threshold": "0", "times": 1},
            contact_groups=[group.alarm_contact_group_name],
            effective_interval="00:00-23:59",
            silence_time=FC_ERRORS_SILENCE_SECONDS,
            enabled=True,
            tags=args.tags,
            opts=child,
        )


def guard_environment(args: BudgetGuardArgs) -> dict[str, str]:
    """What the guard reads at every run (guard.budget_from_env)."""
    return {
        guard.PROJECT_ENV: args.project,
        guard.STACK_ENV: args.stack,
        guard.REGION_ENV: args.region,
        guard.LIMIT_ENV: f"{args.monthly_limit:.2f}",
        guard.CURRENCY_ENV: args.currency,
        guard.THRESHOLDS_ENV: ",".join(str(t) for t in sorted(set(args.thresholds))),
        guard.HARD_STOP_ENV: "true" if args.hard_stop else "false",
        guard.EMAILS_ENV: ",".join(args.emails),
        guard.SENDER_ENV: args.alert_sender or "",
        guard.BSS_ENDPOINT_ENV: bss_endpoint(args.currency),
        guard.DM_ENDPOINT_ENV: direct_mail_endpoint(args.currency),
        guard.DRY_RUN_ENV: "false",
    }


def bss_endpoint(currency: str) -> str:
    """BSS OpenAPI's endpoint for the account's site (China site: business.aliyuncs.com)."""
    return "business.aliyuncs.com" if currency == CHINA_SITE_CURRENCY else "business.ap-southeast-1.aliyuncs.com"


def direct_mail_endpoint(currency: str) -> str:
    return "dm.aliyuncs.com" if currency == CHINA_SITE_CURRENCY else "dm.ap-southeast-1.aliyuncs.com"


def code_zip(source: Path | None = None) -> bytes:
    """guard.py with the stop core (stopcore.py) beside it, which it imports there, zipped with a fixed timestamp:
    the same bytes on every plan, so no spurious update."""
    files = {CODE_FILE: source or Path(guard.__file__), **{name: Path(path) for name, path in STOP_CORE}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, path.read_bytes())
    return buffer.getvalue()


def code_zip_base64() -> str:
    return base64.b64encode(code_zip()).decode()


def resource_names(project: str, stack: str) -> dict[str, str]:
    """Names of the function, its role and its policy: role and policy names are account-wide, so they carry the
    project and stack, shortened with a digest of both when too long or changed by the alphabet."""
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", f"{project}-{stack}").strip("-") or "stack"
    digest = hashlib.sha256(f"{project}\0{stack}".encode()).hexdigest()[:8]
    base = f"goldenenv-{slug}"
    suffix = "-budget-guard"
    room = FUNCTION_NAME_MAX - len(suffix)
    if len(base) > room or slug != f"{project}-{stack}":
        base = f"{base[:room - len(digest) - 1].rstrip('-')}-{digest}"
    return {"function": base + suffix, "role": (base + "-guard")[:ROLE_NAME_MAX],
            "policy": base + "-guard-policy", "contacts": base + "-budget", "alarm": base + "-guard-errors"}


def contact_name(project: str, stack: str, n: int) -> str:
    """A CloudMonitor contact's name (2 to 40 characters, account-wide): the stack's digest and the address's
    place in the budget's list."""
    digest = hashlib.sha256(f"{project}\0{stack}".encode()).hexdigest()[:12]
    return f"goldenenv-{digest}-{n}"


def assumed_by(service: str) -> dict:
    return {"Version": "1", "Statement": [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": [service]}}]}


def guard_policy(project: str, stack: str, region: str, hard_stop: bool, sends_mail: bool,
                 log: tuple[str, str] | None = None) -> dict:
    """Read the bill; describe instances and security groups (ECS cannot scope Describe); stop only the stack's
    instances and tag only the stack's security groups (both its tags must match); send mail and write to its
    logstore when configured."""
    owned = {"StringEquals": {f"acs:ResourceTag/{guard.STACK_TAG_KEY}": stack,
                              f"acs:ResourceTag/{guard.PROJECT_TAG_KEY}": project}}
    statements = [
        {"Effect": "Allow", "Action": list(privilege.BILL_ACTIONS), "Resource": "*"},
        {"Effect": "Allow", "Action": list(privilege.DESCRIBE_ACTIONS), "Resource": "*"},
        {"Effect": "Allow", "Action": list(privilege.TAG_ACTIONS),
         "Resource": f"acs:ecs:{region}:*:securitygroup/*", "Condition": owned},
    ]
    if hard_stop:
        statements.append({"Effect": "Allow", "Action": list(privilege.STOP_ACTIONS),
                           "Resource": f"acs:ecs:{region}:*:instance/*", "Condition": owned})
    if sends_mail:
        statements.append({"Effect": "Allow", "Action": list(privilege.MAIL_ACTIONS), "Resource": "*"})
    if log:
        statements.append({"Effect": "Allow", "Action": list(privilege.LOG_ACTIONS),
                           "Resource": f"acs:log:{region}:*:project/{log[0]}/logstore/{log[1]}"})
    return {"Version": "1", "Statement": statements}


def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What Function Compute computes for the guard's function and trigger under the offline plan; None for
    other types (the RAM role's ARN is the cloud's generic mock)."""
    n = stable_number(f"{args.typ}::{args.name}")
    if args.typ == "alicloud:fc/v3Function:V3Function":
        function = str(args.inputs.get("functionName", args.name))
        return function, {"functionArn": f"acs:fc:mock:{MOCK_ACCOUNT}:functions/{function}",
                          "functionId": f"{n % 16**32:032x}", "state": "Active"}
    if args.typ == "alicloud:fc/v3Trigger:V3Trigger":
        function, trigger = args.inputs.get("functionName", "mock"), args.inputs.get("triggerName", args.name)
        return f"{function}:{trigger}", {"triggerId": f"{n % 16**32:032x}", "status": "Enabled"}
    return None
