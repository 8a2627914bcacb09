"""The stack's budget on Azure, with a hard stop that deallocates the stack's VMs, and the time to live and idle stop
that need no laptop.

**The budget** (Microsoft.Consumption/budgets, API 2024-08-01) is created at SUBSCRIPTION scope, monthly, on actual
cost, filtered on both the stack's tags (goldenenv:stack and project: an AND of two tag expressions), so what the
stack's retained data group bills (its storage account, its registry) counts with the compute group's VMs. Action
groups (contactGroups) are allowed at subscription and resource-group scopes only; a tag filter is allowed at any
scope (azure-native consumption.Budget and its NotificationArgs, from the Budgets REST spec). One notification per
alert threshold on actual spend and one per forecast threshold, each emailing the stack's addresses; a budget takes
at most five notifications (BudgetArgs.notifications). With the hard stop on, the 100 % actual notification also
names the stack's action group, whose only receiver is the stack's function. A tag filter counts only costs Azure
records with the tag: resources of the stack carry it (spec.stack_tags); costs of untagged child resources count
only with Cost Management's tag inheritance turned on (a billing-scope setting, not a resource of the stack).

The budget's time period starts on the first day of the month it is created in ("The start date must be first of
the month ... Past start date should be selected within the timegrain period", BudgetArgs.time_period). It is
computed from ``today`` (BudgetStopArgs.today, the current UTC date when not given), so two plans in one month are
the same plan; ``timePeriod`` is in ignore_changes, so an `up` in a later month leaves the running budget alone.

**Budgets alert, they do not cap.** The stop is the stack's own Azure Functions app (stopfn/function_app.py, its
docstring says what it does and why): an HTTP function the action group calls at 100 %, and a timer every 15 minutes
that repeats the hard stop while the month is over the limit and runs the time to live and the idle stop.

**Hosting: Flex Consumption** (an FC1 plan and a ``functionAppConfig`` on the site, azure-native web 2025-05-01),
the plan Microsoft points new apps to: Linux Consumption gets no new features or language versions and retires on
30 September 2028 (learn.microsoft.com azure-functions/functions-versions, "Important"). Flex apps run from a package
by default, read from a blob container of the app's ``functionAppConfig.deployment.storage``; WEBSITE_RUN_FROM_PACKAGE
is not supported there. The program zips stopfn/ (function_app.py, host.json; standard library only, so no
requirements.txt and no build) and uploads it to that container as ``released-package.zip``, the name Flex
deployments use (a third-party IaC sample cites Microsoft's functions-infrastructure-as-code "Deployment package"
section; unverified in Microsoft's own text). The code's digest is an app setting, so new code restarts the app.

**A stop that fails alerts the budget's addresses.** The Functions host records every invocation in an
Application Insights component of the app (workspace-based, in a Log Analytics workspace of its own); a failed one
(a deallocation or listing that failed raises in the timer, and answers 500 to the action group) counts in its
``requests/failed`` metric, on which a metric alert emails the budget's addresses through an action group of its own.

**Identities.** The app's SYSTEM-assigned identity calls ARM; it holds two custom roles with only what the function
calls (COMPUTE_ACTIONS, at the compute group: list and read the scale sets, their instances and the head with their
instance views, and deallocate; with the idle stop, read metrics; BUDGET_ACTIONS, at the subscription, only with the
hard stop: read budgets). A USER-assigned identity of its own reads the package and runs the host's storage (Storage
Blob Data Owner on the app's storage account, granted before the app exists, so the first start finds its code);
the host connects with it (AzureWebJobsStorage__accountName/__credential/__clientId), never with a key.

**Secure settings.** HTTPS only, TLS 1.2 minimum for the site and its SCM endpoint, FTP disabled and basic
publishing credentials off for FTP and SCM; the storage account allows no public blob access, TLS 1.2 minimum, HTTPS
only, OAuth by default in the portal, no cross-tenant replication. Shared-key access stays on: the Pulumi provider
uploads a blob with the account key (pulumi/pulumi-azure-native#2015, open); nothing of the stack uses a key.

**Who runs `up`** needs, at the subscription: Microsoft.Consumption/budgets/write (Cost Management Contributor) and
Microsoft.Authorization/roleDefinitions/write and roleAssignments/write (Owner or User Access Administrator).
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pulumi
import pulumi_azure_native as azure

from goldenenv.clouds import stopcore
from goldenenv.clouds.azure import hardening, privilege, roles
from goldenenv.clouds.azure.naming import global_name, mock_guid, resource_name
from goldenenv.clouds.azure.stopfn import function_app as stopfn
from goldenenv.clouds.base import STOP_CORE, FunctionSource, stable_number
from goldenenv.guardrails import HOLDS_TAG
from goldenenv.hardening import EXCEPTION_KEY
from goldenenv.spec import STACK_TAG_KEY, Problem

STOPFN_DIR = Path(__file__).parent / "stopfn"
STOPFN_FILES = ("function_app.py", "host.json")
PACKAGE_CONTAINER = "app-package"
PACKAGE_BLOB = "released-package.zip"
PYTHON_VERSION = "3.12"
INSTANCE_MEMORY_MB = 2048
"""Flex Consumption's default instance size."""
MAX_INSTANCES = 40
"""The function needs one instance; 40 is the lowest maximum Flex Consumption accepted at its launch."""
APP_NAME_MAX = 32
"""The Functions host id is the app name cut to 32 characters: longer names can collide (Azure Functions docs,
"Host ID considerations")."""
STORAGE_NAME_MAX = 24
BUDGET_NAME = re.compile(r"^[-_a-zA-Z0-9]{1,63}$")
"""terraform-provider-azurerm validate.ConsumptionBudgetName: letters, digits, '-' and '_', at most 63."""
MAX_NOTIFICATIONS = 5
"""A budget takes at most five notifications (azure-native consumption BudgetArgs.notifications)."""
HARD_STOP_PERCENT = 100
ACTION_GROUP_SHORT_NAME = "goldenenv"
"""At most 12 characters (ActionGroup group_short_name)."""
STORAGE_ROLE = "Storage Blob Data Owner"
"""What the Functions host needs on its storage account with an identity, and reading the deployment container
(roles.BUILT_IN)."""
COMPUTE_ACTIONS, IDLE_ACTIONS = privilege.COMPUTE_ACTIONS, privilege.IDLE_ACTIONS
"""What the stop function calls at the compute group, and the idle stop besides: the least-privilege table's
(azure/privilege.py NEEDS)."""
BUDGET_ACTIONS = privilege.BUDGET_ACTIONS
INSIGHTS_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"
"""The app setting the Functions host sends its telemetry by (learn.microsoft.com azure-functions/
functions-app-settings)."""
FAILED_METRIC_NAMESPACE, FAILED_METRIC = "microsoft.insights/components", "requests/failed"
"""Application Insights' standard metric of failed requests; the Functions host records each invocation as a request
(learn.microsoft.com azure-monitor/essentials/metrics-supported, Microsoft.Insights/components)."""
FAILURE_EVALUATION, FAILURE_WINDOW = "PT5M", "PT15M"
"""Looked at every 5 minutes over 15, one timer period: a failed run alerts within minutes."""
FAILURE_GROUP_SHORT_NAME = "goldenenvfn"
"""At most 12 characters (ActionGroup group_short_name)."""
WORKSPACE_SKU = "PerGB2018"
WORKSPACE_NAME_MAX = 63
LOG_RETENTION_DAYS = 30
"""The hard stop reads the budget's current spend ("List the budgets by a subscription or a management group")."""


@dataclass(frozen=True, kw_only=True)
class BudgetStopArgs:
    project: str
    stack: str
    subscription_id: pulumi.Input[str]
    resource_group: pulumi.Input[str]
    """The stack's compute group: the function lives there and deallocates only its VMs."""
    location: str
    monthly_limit: float
    currency: str
    """The budget counts in the billing account's currency; the program refuses all but USD (check())."""
    thresholds: list[int]
    """Percent of the limit at which actual spend emails."""
    emails: list[str]
    hard_stop: bool
    tags: dict[str, str]
    """The stack's tags (goldenenv:stack, project, owner, cost-center...): on every taggable resource here, and what
    the budget and the function select the stack's resources by."""
    ttl_hours: float | None = None
    idle_minutes: int | None = None
    forecast_thresholds: Sequence[int] = ()
    """Percent of the limit at which forecast spend emails (the spec's budget.forecastThresholds)."""
    node_vcpus: int | None = None
    """The fewest vCPUs of the stack's node sizes, for the idle threshold min(5 %, half a core); None: 0.5 %."""
    today: date | None = None
    """The date the budget's first month is taken from; None: today (UTC)."""


class BudgetStop(pulumi.ComponentResource):
    function_name: pulumi.Output[str] | None
    budget_name: pulumi.Output[str]
    action_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: BudgetStopArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:azure:BudgetStop", name, None, opts)
        check(args)
        subscription = pulumi.Output.from_input(args.subscription_id)
        app = self._function(name, args, subscription) if stops_nodes(args) else None
        group = azure.monitor.ActionGroup(
            f"{name}-action-group",
            action_group_name=resource_name("goldenenv", args.project, args.stack, "hard-stop", limit=260),
            resource_group_name=args.resource_group,
            location="Global",
            group_short_name=ACTION_GROUP_SHORT_NAME,
            enabled=True,
            azure_function_receivers=[{
                "name": "goldenenv-hard-stop",
                "function_app_resource_id": app.id,
                "function_name": stopfn.ALERT_FUNCTION,
                "http_trigger_url": pulumi.Output.concat("https://", app.default_host_name, "/api/",
                                                         stopfn.ALERT_ROUTE),
                "use_common_alert_schema": True,
            }],
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        ) if args.hard_stop and app is not None else None
        budget = azure.consumption.Budget(
            f"{name}-budget",
            scope=subscription.apply(lambda s: f"/subscriptions/{s}"),
            budget_name=budget_name(args),
            amount=round(args.monthly_limit, 2),
            category="Cost",
            time_grain="Monthly",
            time_period={"start_date": budget_start(args.today)},
            filter=budget_filter(args),
            notifications=notifications(args, group.id if group else None),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["timePeriod"]),
        )
        self.function_name = app.name if app else None
        self.budget_name = budget.name
        self.action_group_id = group.id if group else None
        self.register_outputs({"function_name": self.function_name, "budget_name": self.budget_name,
                               "action_group_id": self.action_group_id})

    def _function(self, name: str, args: BudgetStopArgs, subscription: pulumi.Output[str]) -> azure.web.WebApp:
        """The app, its storage and package, its identities and their roles."""
        child = pulumi.ResourceOptions(parent=self)
        group_id = pulumi.Output.all(subscription, args.resource_group).apply(
            lambda v: f"/subscriptions/{v[0]}/resourceGroups/{v[1]}")
        app_name = subscription.apply(lambda s: function_app_name(args, s))
        account = azure.storage.StorageAccount(
            f"{name}-fn-storage",
            account_name=subscription.apply(lambda s: storage_account_name(args, s)),
            resource_group_name=args.resource_group,
            location=args.location,
            kind="StorageV2",
            sku={"name": "Standard_LRS"},
            allow_blob_public_access=False,
            minimum_tls_version="TLS1_2",
            enable_https_traffic_only=True,
            default_to_o_auth_authentication=True,
            allow_cross_tenant_replication=False,
            allow_shared_key_access=True,
            tags={**args.tags, HOLDS_TAG: "function-code",  # its code and host state only: no data to retain
                  EXCEPTION_KEY: hardening.FUNCTION_DEPLOYMENT_KEY},
            opts=child,
        )
        container = azure.storage.BlobContainer(
            f"{name}-fn-package", account_name=account.name, container_name=PACKAGE_CONTAINER,
            resource_group_name=args.resource_group, public_access="None", opts=child)
        package = azure.storage.Blob(
            f"{name}-fn-package-blob", account_name=account.name, container_name=container.name,
            resource_group_name=args.resource_group, blob_name=PACKAGE_BLOB, type="Block",
            content_type="application/zip", source=source_archive(), metadata={"goldenenvdigest": source_digest()},
            opts=child)
        runtime = azure.managedidentity.UserAssignedIdentity(
            f"{name}-fn-storage-identity", resource_name_=resource_name(args.project, args.stack, "stopfn-storage"),
            resource_group_name=args.resource_group, location=args.location, tags=args.tags, opts=child)
        storage_grant = roles.grant(f"{name}-fn-storage-grant", role=STORAGE_ROLE, scope=account.id,
                                    principal_id=runtime.principal_id, subscription_id=subscription, opts=child)
        insights = self._insights(name, args)
        plan = azure.web.AppServicePlan(
            f"{name}-fn-plan", name=app_name.apply(lambda n: f"{n}-plan"), resource_group_name=args.resource_group,
            location=args.location, kind="functionapp", reserved=True,
            sku={"name": "FC1", "tier": "FlexConsumption"}, tags=args.tags, opts=child)
        app = azure.web.WebApp(
            f"{name}-fn",
            name=app_name,
            resource_group_name=args.resource_group,
            location=args.location,
            kind="functionapp,linux",
            server_farm_id=plan.id,
            https_only=True,
            identity={"type": "SystemAssigned, UserAssigned", "user_assigned_identities": [runtime.id]},
            function_app_config={
                "deployment": {"storage": {
                    "type": "blobContainer",
                    "value": pulumi.Output.concat("https://", account.name, ".blob.core.windows.net/",
                                                  container.name),
                    "authentication": {"type": "UserAssignedIdentity",
                                       "user_assigned_identity_resource_id": runtime.id},
                }},
                "runtime": {"name": "python", "version": PYTHON_VERSION},
                "scale_and_concurrency": {"maximum_instance_count": MAX_INSTANCES,
                                          "instance_memory_mb": INSTANCE_MEMORY_MB},
            },
            site_config={
                "app_settings": [{"name": k, "value": v} for k, v in sorted(app_settings(
                    args, subscription, account.name, runtime.client_id, insights.connection_string).items())],
                "ftps_state": "Disabled",
                "min_tls_version": "1.2",
                "scm_min_tls_version": "1.2",
                "http20_enabled": True,
            },
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[package, storage_grant]),
        )
        self._failure_alert(name, args, insights)
        for kind, policy in (("ftp", azure.web.WebAppFtpAllowed), ("scm", azure.web.WebAppScmAllowed)):
            policy(f"{name}-fn-{kind}-basic-auth", name=app.name, resource_group_name=args.resource_group,
                   allow=False, opts=child)
        for purpose, actions, scope in (
                ("compute", compute_actions(args), group_id),
                *((("budget", BUDGET_ACTIONS, subscription.apply(lambda s: f"/subscriptions/{s}")),)
                  if args.hard_stop else ())):
            definition = azure.authorization.RoleDefinition(
                f"{name}-fn-{purpose}-role",
                scope=subscription.apply(lambda s: f"/subscriptions/{s}"),
                role_definition_id=subscription.apply(lambda s, p=purpose: role_definition_name(s, args, p)),
                role_name=subscription.apply(lambda s, p=purpose: role_title(s, args, p)),
                description=f"goldenenv: what the stop function of project {args.project} stack {args.stack} calls "
                            f"({purpose})",
                role_type="CustomRole",
                permissions=[{"actions": list(actions), "not_actions": [], "data_actions": [],
                              "not_data_actions": []}],
                assignable_scopes=[scope],
                opts=child)
            azure.authorization.RoleAssignment(
                f"{name}-fn-{purpose}-grant",
                role_assignment_name=pulumi.Output.all(subscription, app.identity.principal_id).apply(
                    lambda v, p=purpose: assignment_name(v[0], args, p, v[1])),
                scope=scope, principal_id=app.identity.principal_id, principal_type="ServicePrincipal",
                role_definition_id=definition.id, opts=child)
        return app


    def _insights(self, name: str, args: BudgetStopArgs) -> azure.applicationinsights.Component:
        """Where the Functions host records each invocation (a request, failed when the function raised or answered
        500): a workspace-based Application Insights component, and its Log Analytics workspace."""
        child = pulumi.ResourceOptions(parent=self)
        workspace = azure.operationalinsights.Workspace(
            f"{name}-fn-logs", workspace_name=resource_name("goldenenv", args.project, args.stack, "stopfn",
                                                            limit=WORKSPACE_NAME_MAX),
            resource_group_name=args.resource_group, location=args.location, sku={"name": WORKSPACE_SKU},
            retention_in_days=LOG_RETENTION_DAYS, tags=args.tags, opts=child)
        return azure.applicationinsights.Component(
            f"{name}-fn-insights", resource_name_=resource_name("goldenenv", args.project, args.stack, "stopfn"),
            resource_group_name=args.resource_group, location=args.location, kind="web", application_type="web",
            workspace_resource_id=workspace.id, ingestion_mode="LogAnalytics", tags=args.tags, opts=child)

    def _failure_alert(self, name: str, args: BudgetStopArgs,
                       insights: azure.applicationinsights.Component) -> azure.monitor.MetricAlert:
        """A stop that fails must reach a person: a metric alert on the app's failed invocations (a deallocation or
        a listing that failed fails the timer run and answers the action group 500), emailing the budget's
        addresses through an action group of their own (never the hard stop's, whose receiver deallocates)."""
        child = pulumi.ResourceOptions(parent=self)
        people = azure.monitor.ActionGroup(
            f"{name}-fn-failure-emails",
            action_group_name=resource_name("goldenenv", args.project, args.stack, "stop-failed", limit=260),
            resource_group_name=args.resource_group,
            location="Global",
            group_short_name=FAILURE_GROUP_SHORT_NAME,
            enabled=True,
            email_receivers=[{"name": f"budget-email-{n}", "email_address": email, "use_common_alert_schema": True}
                             for n, email in enumerate(dict.fromkeys(args.emails), 1)],
            tags=args.tags,
            opts=child,
        )
        return azure.monitor.MetricAlert(
            f"{name}-fn-failures",
            rule_name=resource_name("goldenenv", args.project, args.stack, "stop-failed", limit=260),
            resource_group_name=args.resource_group,
            location="global",
            description=(f"goldenenv: the function that stops the nodes of project {args.project} stack {args.stack} "
                         "failed; nodes may still be running and billing. Read its invocations in Application "
                         "Insights, and deallocate the nodes by hand or run `goldenenv destroy`."),
            severity=1,
            enabled=True,
            scopes=[insights.id],
            evaluation_frequency=FAILURE_EVALUATION,
            window_size=FAILURE_WINDOW,
            # a union type: its Args classes, since a plain dict's keys would reach ARM untranslated (all_of)
            criteria=azure.monitor.MetricAlertSingleResourceMultipleMetricCriteriaArgs(
                odata_type="Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria",
                all_of=[azure.monitor.MetricCriteriaArgs(
                    criterion_type="StaticThresholdCriterion", name="failed-invocations",
                    metric_namespace=FAILED_METRIC_NAMESPACE, metric_name=FAILED_METRIC, operator="GreaterThan",
                    threshold=0, time_aggregation="Count")]),
            auto_mitigate=True,
            actions=[{"action_group_id": people.id}],
            tags=args.tags,
            opts=child,
        )


# ---------------------------------------------------------------- checks and names

def stops_nodes(args: BudgetStopArgs) -> bool:
    return args.hard_stop or bool(args.ttl_hours) or bool(args.idle_minutes)


def notification_kinds(thresholds: Sequence[int], forecast_thresholds: Sequence[int],
                       hard_stop: bool) -> list[tuple[int, str]]:
    """(threshold, Actual|Forecasted) of every notification: each alert threshold (and 100 for the hard stop) on
    actual spend, then each forecast threshold; each pair once."""
    actual = set(thresholds) | ({HARD_STOP_PERCENT} if hard_stop else set())
    return [(t, "Actual") for t in sorted(actual)] + [(t, "Forecasted") for t in sorted(set(forecast_thresholds))]


def budget_problems(monthly_limit: float, thresholds: Sequence[int], forecast_thresholds: Sequence[int],
                    hard_stop: bool, emails: Sequence[str]) -> list[Problem]:
    """What Azure would refuse halfway through `up`, at the stack-file key to change."""
    found = []
    if not (math.isfinite(monthly_limit) and round(monthly_limit, 2) > 0):
        found.append(Problem("goldenenv:budget.monthlyLimit",
                             f"{monthly_limit!r}: an Azure budget's amount must be at least 0.01"))
    kinds = notification_kinds(thresholds, forecast_thresholds, hard_stop)
    if len(kinds) > MAX_NOTIFICATIONS:
        found.append(Problem(
            "goldenenv:budget.alertThresholds",
            f"with goldenenv:budget.forecastThresholds they make {len(kinds)} notifications"
            f"{' (the hard stop adds 100 % actual)' if hard_stop else ''}; an Azure budget takes at most "
            f"{MAX_NOTIFICATIONS}: drop some thresholds"))
    if bad := sorted({t for t, _ in kinds if not 0 < t <= 1000}):
        found.append(Problem("goldenenv:budget.alertThresholds", f"{bad}: Azure takes 1 to 1000 percent"))
    if not emails:
        found.append(Problem("goldenenv:budget.emails", "a budget needs at least one address to alert"))
    return found


def problems(budget_spec: Any) -> list[Problem]:
    """budget_problems for a spec.Budget: for the cloud's check()."""
    return budget_problems(budget_spec.monthly_limit, budget_spec.alert_thresholds,
                           budget_spec.forecast_thresholds, budget_spec.hard_stop, budget_spec.emails)


def check(args: BudgetStopArgs) -> None:
    """The component refuses what budget_problems finds (the cloud's check() reports it first)."""
    if found := budget_problems(args.monthly_limit, args.thresholds, args.forecast_thresholds, args.hard_stop,
                                args.emails):
        raise ValueError("; ".join(str(p) for p in found))


def stack_tag(args: BudgetStopArgs) -> str:
    return args.tags.get(STACK_TAG_KEY) or args.stack


def project_tag(args: BudgetStopArgs) -> str:
    return args.tags.get(stopfn.PROJECT_TAG_KEY) or args.project


def budget_name(args: BudgetStopArgs) -> str:
    """goldenenv-<project>-<stack>: letters, digits, '-' and '_', at most 63, shortened with a digest."""
    text = re.sub(r"[^-_a-zA-Z0-9]+", "-", f"goldenenv-{args.project}-{args.stack}").strip("-")
    if len(text) > 63:
        text = f"{text[:54].rstrip('-_')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    assert BUDGET_NAME.fullmatch(text), text
    return text


def budget_start(today: date | None) -> str:
    """The first of the month, 00:00 UTC, as the Budgets API takes it."""
    day = today or datetime.now(timezone.utc).date()
    return f"{day:%Y-%m}-01T00:00:00Z"


def budget_filter(args: BudgetStopArgs) -> dict[str, Any]:
    return {"and_": [
        {"tags": {"name": STACK_TAG_KEY, "operator": "In", "values": [stack_tag(args)]}},
        {"tags": {"name": stopfn.PROJECT_TAG_KEY, "operator": "In", "values": [project_tag(args)]}},
    ]}


def notifications(args: BudgetStopArgs, action_group: pulumi.Input[str] | None) -> dict[str, dict[str, Any]]:
    """One per notification_kinds, each emailing; the 100 % actual one also names the action group."""
    found = {}
    for threshold, kind in notification_kinds(args.thresholds, args.forecast_thresholds, args.hard_stop):
        notification: dict[str, Any] = {
            "enabled": True,
            "operator": "GreaterThanOrEqualTo",
            "threshold": threshold,
            "threshold_type": kind,
            "contact_emails": list(dict.fromkeys(args.emails)),
            "locale": "en-us",
        }
        if action_group is not None and (threshold, kind) == (HARD_STOP_PERCENT, "Actual"):
            notification["contact_groups"] = [action_group]
        found[f"{kind.lower()}-{threshold}-percent"] = notification
    return found


def function_app_name(args: BudgetStopArgs, subscription: str) -> str:
    """Site names are global (<name>.azurewebsites.net): a slug of the stack and a digest of the subscription,
    project and stack, at most 32 characters."""
    return global_name("fn", args.project, args.stack, subscription, APP_NAME_MAX, hyphens=True)


def storage_account_name(args: BudgetStopArgs, subscription: str) -> str:
    return global_name("stfn", args.project, args.stack, subscription, STORAGE_NAME_MAX, hyphens=False)


def role_definition_name(subscription: str, args: BudgetStopArgs, purpose: str) -> str:
    """A custom role's id is a GUID unique in the tenant: derived from the subscription, project, stack and purpose."""
    return str(uuid.uuid5(roles.NAMESPACE, f"role/{subscription}/{args.project}/{args.stack}/stopfn/{purpose}"))


def role_title(subscription: str, args: BudgetStopArgs, purpose: str) -> str:
    """A custom role's name is unique in the tenant too."""
    return f"goldenenv stop {purpose} {args.project}/{args.stack} ({subscription[:8]})"


def assignment_name(subscription: str, args: BudgetStopArgs, purpose: str, principal: str) -> str:
    return str(uuid.uuid5(roles.NAMESPACE,
                          f"assignment/{subscription}/{args.project}/{args.stack}/stopfn/{purpose}/{principal}"))


def compute_actions(args: BudgetStopArgs) -> list[str]:
    return sorted(COMPUTE_ACTIONS + (IDLE_ACTIONS if args.idle_minutes else ()))


def idle_cpu_percent(vcpus: int | None) -> float:
    """Idle: the stop core's threshold (stopcore.idle_cpu_percent); the function's default with no vCPU count."""
    return stopcore.idle_cpu_percent(vcpus) if vcpus else stopfn.DEFAULT_IDLE_CPU_PERCENT


def function_environment(args: BudgetStopArgs) -> dict[str, str]:
    """What stopfn/function_app.py reads (its *_ENV names) that the program knows as plain values."""
    env = {
        stopfn.PROJECT_ENV: project_tag(args),
        stopfn.STACK_ENV: stack_tag(args),
        stopfn.HARD_STOP_ENV: "true" if args.hard_stop else "false",
        stopfn.BUDGET_NAME_ENV: budget_name(args),
        stopfn.BUDGET_LIMIT_ENV: f"{args.monthly_limit:.2f}",
        stopfn.CURRENCY_ENV: args.currency,
        stopfn.CODE_DIGEST_ENV: source_digest(),
    }
    if args.ttl_hours:
        env[stopfn.TTL_HOURS_ENV] = f"{args.ttl_hours:.10g}"
    if args.idle_minutes:
        env[stopfn.IDLE_MINUTES_ENV] = str(int(args.idle_minutes))
        env[stopfn.IDLE_CPU_PERCENT_ENV] = f"{idle_cpu_percent(args.node_vcpus):.4g}"
    return env


def app_settings(args: BudgetStopArgs, subscription: pulumi.Input[str], account: pulumi.Input[str],
                 client_id: pulumi.Input[str],
                 insights: pulumi.Input[str] | None = None) -> dict[str, pulumi.Input[str]]:
    """The app's settings: the host's identity-based storage, where it records invocations (Application Insights'
    connection string, an address and an ingestion key Microsoft does not count as a secret), and the function's
    environment."""
    return {
        "AzureWebJobsStorage__accountName": account,
        "AzureWebJobsStorage__credential": "managedidentity",
        "AzureWebJobsStorage__clientId": client_id,
        **({INSIGHTS_SETTING: insights} if insights is not None else {}),
        stopfn.SUBSCRIPTION_ENV: subscription,
        stopfn.RESOURCE_GROUP_ENV: args.resource_group,
        **function_environment(args),
    }


STOPFN = FunctionSource(STOPFN_DIR, STOPFN_FILES, STOP_CORE)
source_archive = STOPFN.archive
source_digest = STOPFN.digest
# the digest is an app setting, so new code restarts the app


# ---------------------------------------------------------------- the offline plan

def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What ARM computes for this component's resources under the offline plan (ids, host names, the app's
    identity); None for other types. Stable per resource: the same plan twice is the same plan."""
    inputs = args.inputs
    group = inputs.get("resourceGroupName")
    sub = "/subscriptions/00000000-0000-0000-0000-000000000000"
    if args.typ == "azure-native:storage:StorageAccount":
        name = inputs.get("accountName") or args.name
        return (f"{sub}/resourceGroups/{group}/providers/Microsoft.Storage/storageAccounts/{name}",
                {"name": name, "primaryEndpoints": {"blob": f"https://{name}.blob.core.windows.net/"}})
    if args.typ == "azure-native:storage:BlobContainer":
        name = inputs.get("containerName") or args.name
        return (f"{sub}/resourceGroups/{group}/providers/Microsoft.Storage/storageAccounts/"
                f"{inputs.get('accountName')}/blobServices/default/containers/{name}", {"name": name})
    if args.typ == "azure-native:storage:Blob":
        name = inputs.get("blobName") or args.name
        url = f"https://{inputs.get('accountName')}.blob.core.windows.net/{inputs.get('containerName')}/{name}"
        return url, {"name": name, "url": url}
    if args.typ == "azure-native:web:AppServicePlan":
        name = inputs.get("name") or args.name
        return f"{sub}/resourceGroups/{group}/providers/Microsoft.Web/serverfarms/{name}", {"name": name}
    if args.typ == "azure-native:web:WebApp":
        name = inputs.get("name") or args.name
        resource_id = f"{sub}/resourceGroups/{group}/providers/Microsoft.Web/sites/{name}"
        host = f"{name}-{stable_number(resource_id) % 16**16:016x}.{inputs.get('location')}-01.azurewebsites.net"
        given = inputs.get("identity") or {}
        identity = {"type": given.get("type"), "principalId": mock_guid(resource_id, "principal"),
                    "tenantId": "11111111-1111-1111-1111-111111111111",
                    "userAssignedIdentities": {i: {"principalId": mock_guid(i, "principal"),
                                                   "clientId": mock_guid(i, "client")}
                                               for i in given.get("userAssignedIdentities") or []}}
        return resource_id, {"name": name, "defaultHostName": host, "identity": identity, "state": "Running"}
    if args.typ in ("azure-native:web:WebAppFtpAllowed", "azure-native:web:WebAppScmAllowed"):
        kind = "ftp" if args.typ.endswith("FtpAllowed") else "scm"
        return (f"{sub}/resourceGroups/{group}/providers/Microsoft.Web/sites/{inputs.get('name')}/"
                f"basicPublishingCredentialsPolicies/{kind}", {"name": kind})
    if args.typ == "azure-native:authorization:RoleDefinition":
        name = inputs.get("roleDefinitionId") or args.name
        return f"{inputs.get('scope')}/providers/Microsoft.Authorization/roleDefinitions/{name}", {"name": name}
    if args.typ == "azure-native:operationalinsights:Workspace":
        name = inputs.get("workspaceName") or args.name
        resource_id = f"{sub}/resourceGroups/{group}/providers/Microsoft.OperationalInsights/workspaces/{name}"
        return resource_id, {"name": name, "customerId": mock_guid(resource_id, "customer")}
    if args.typ == "azure-native:applicationinsights:Component":
        name = inputs.get("resourceName") or args.name
        resource_id = f"{sub}/resourceGroups/{group}/providers/Microsoft.Insights/components/{name}"
        key = mock_guid(resource_id, "instrumentation")
        location = inputs.get("location")
        return resource_id, {"name": name, "instrumentationKey": key, "connectionString": (
            f"InstrumentationKey={key};IngestionEndpoint=https://{location}-1.in.applicationinsights.azure.com/;"
            f"LiveEndpoint=https://{location}.livediagnostics.monitor.azure.com/")}
    if args.typ == "azure-native:monitor:MetricAlert":
        name = inputs.get("ruleName") or args.name
        return f"{sub}/resourceGroups/{group}/providers/Microsoft.Insights/metricAlerts/{name}", {"name": name}
    if args.typ == "azure-native:monitor:ActionGroup":
        name = inputs.get("actionGroupName") or args.name
        return f"{sub}/resourceGroups/{group}/providers/Microsoft.Insights/actionGroups/{name}", {"name": name}
    if args.typ == "azure-native:consumption:Budget":
        name = inputs.get("budgetName") or args.name
        return f"{inputs.get('scope')}/providers/Microsoft.Consumption/budgets/{name}", {"name": name}
    return None
