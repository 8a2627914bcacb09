"""The stack's budget on Google Cloud, with a hard stop, and the time to live and idle stop that need no laptop.

A Cloud Billing budget on the stack's project number AND its goldenenv_stack label, in the stack's currency (it
must be the billing account's), alerts at each threshold by email (one Cloud Monitoring email channel per
address, at most five: the budget API's limit) and, with the hard stop on, publishes every update (several a day,
whatever the thresholds) to the stack's Pub/Sub topic. Budgets alert, they do not cap: the topic triggers the
stack's own function (stopfn/main.py, shipped alone, standard library only), which stops the stack's live nodes
while the month's spend is at or over the limit, fails closed on a message it cannot read, and stops nothing
twice. Like AWS's hard stop it lasts until the month ends or `up` raises the budget: the function is deployed
with the limit (GOLDENENV_BUDGET_LIMIT), and Google's messages keep saying whether the month is over it.

With a time to live or an idle time, a Cloud Scheduler job publishes to the same topic every 15 minutes with the
attribute goldenenv_mode=reaper, and the function stops the stack's nodes whose time to live has passed (counted
from the last start, as AWS's reaper does) or whose CPU stayed idle (the AWS threshold; GPU metrics would need the
Ops Agent), as the docstring of stopfn/main.py says.

A stop that fails alerts the budget's addresses: a Cloud Monitoring alert policy on the function's log entries at
ERROR (a failed stop or listing is logged so and fails the invocation) notifies the budget's email channels.

Least privilege: the function runs as a service account of its own holding one custom role with only what it
calls (list, get and stop instances, read zone operations; for the idle stop, read machine types and CPU time
series). The role is bound on the project without an IAM condition: conditions can test a resource's name, type
and Resource Manager tags, not its labels, so the stack label cannot scope it; the function itself acts only on
instances with both the stack's and the project's labels. Eventarc delivers with a second service account that may
only invoke the function's Cloud Run service; the function accepts internal traffic only. Cloud Scheduler publishes
as its service agent, which is granted Pub/Sub Publisher on this topic only. The budget's own publishing grant is
made by the Budget API when the topic is set (the caller of `up` needs pubsub.topics.setIamPolicy on it). Eventarc's
Pub/Sub delivery needs the Pub/Sub service agent to hold Service Account Token Creator, which Google grants by
itself in projects created after 8 April 2021.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_gcp as gcp

from goldenenv.clouds.base import STOP_CORE, FunctionSource
from goldenenv.clouds.gcp import labels as gcp_labels
from goldenenv.clouds.gcp import privilege
from goldenenv.guardrails import HOLDS_TAG
from goldenenv.spec import STACK_TAG_KEY

STOPFN_DIR = Path(__file__).parent / "stopfn"
STOPFN_FILES = ("main.py",)
"""Standard library only: the Python runtime's build adds functions-framework, whose decorator main.py uses when
present, so the archive needs no requirements.txt."""
RUNTIME = "python312"
ENTRY_POINT = "handle"
PUBSUB_EVENT = "google.cloud.pubsub.topic.v1.messagePublished"
RETRY_POLICY = "RETRY_POLICY_RETRY"
"""The handler is idempotent (a stopped node is not stopped again) and raises only when a listing or a stop
failed, so a retried message finishes the job."""
INGRESS = "ALLOW_INTERNAL_ONLY"
TIMEOUT_SECONDS = 540
"""The most an event-driven function may run (9 minutes, Cloud Functions 2nd gen; firebase.google.com/docs/functions
/version-comparison, "Event handling functions have a maximum timeout of 540s"): Compute Engine stops one VM per
call, so a large stack under throttling needs all of it."""
MEMORY = "256M"
SCHEDULE = "*/15 * * * *"
SCHEDULE_TIME_ZONE = "Etc/UTC"
MAX_EMAIL_CHANNELS = 5
"""A budget takes at most 5 Cloud Monitoring notification channels (Budget API, NotificationsRule)."""
DISPLAY_NAME_MAX = 60
SERVICE_ACCOUNT_ID_MAX = 30
ROLE_ID_MAX = 64
STOP_PERMISSIONS, IDLE_PERMISSIONS = privilege.STOP_PERMISSIONS, privilege.IDLE_PERMISSIONS
"""What the stop function calls, and the idle stop besides: the least-privilege table's (gcp/privilege.py NEEDS)."""
FAILURE_ALERT_PERIOD = "3600s"
"""A log-match condition needs a notification rate limit (Cloud Monitoring AlertStrategy.notificationRateLimit): an
email an hour at most while the function keeps failing, every 15 minutes with the schedule."""
FAILURE_ALERT_AUTO_CLOSE = "86400s"
"""An incident of a log-match alert stays open until closed; closed after a day without errors."""
STACK_LABEL_KEY = gcp_labels.label_key(STACK_TAG_KEY)
PROJECT_LABEL_KEY = "project"
MODE_ATTRIBUTE, REAPER_MODE = "goldenenv_mode", "reaper"
"""Equal to stopfn/main.py's (checked by a test)."""


@dataclass(frozen=True, kw_only=True)
class BudgetStopArgs:
    project: str
    stack: str
    gcp_project: pulumi.Input[str]
    """The Google Cloud project id (gcp.organizations.get_project().project_id)."""
    billing_account: pulumi.Input[str]
    """The project's billing account id, which owns the budget."""
    project_number: pulumi.Input[str]
    """The project number: a budget filters on projects/<number>, not on the id."""
    monthly_limit: float
    currency: str
    """The budget's currency, which must be the billing account's."""
    thresholds: list[int]
    """Percent of the limit at which the budget emails, on actual spend."""
    emails: list[str]
    hard_stop: bool
    region: str
    labels: dict[str, str]
    """The stack's labels (labels.labels(tags)): goldenenv_stack, project, owner, cost-center..."""
    ttl_hours: float | None = None
    idle_minutes: int | None = None


class BudgetStop(pulumi.ComponentResource):
    function_name: pulumi.Output[str] | None
    topic_name: pulumi.Output[str] | None
    scheduler_job_name: pulumi.Output[str] | None

    def __init__(self, name: str, args: BudgetStopArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:gcp:BudgetStop", name, None, opts)
        if not (math.isfinite(args.monthly_limit) and args.monthly_limit > 0):
            raise ValueError(f"monthly_limit must be a positive amount, not {args.monthly_limit!r}")
        emails = list(dict.fromkeys(args.emails))
        if len(emails) > MAX_EMAIL_CHANNELS:
            raise ValueError(f"{len(emails)} budget emails; a Google Cloud budget alerts at most "
                             f"{MAX_EMAIL_CHANNELS} notification channels")
        child = pulumi.ResourceOptions(parent=self)
        stops_nodes = args.hard_stop or bool(args.ttl_hours) or bool(args.idle_minutes)
        topic = gcp.pubsub.Topic(
            f"{name}-topic", name=stop_name(args, "stop"), project=args.gcp_project, labels=args.labels,
            opts=child) if stops_nodes else None
        function = self._function(name, args, topic) if topic else None
        job = self._schedule(name, args, topic) if topic and (args.ttl_hours or args.idle_minutes) else None
        channels = [gcp.monitoring.NotificationChannel(
            f"{name}-email-{email}", type="email", project=args.gcp_project,
            display_name=f"goldenenv budget {args.project}/{args.stack}: {email}"[:100],
            labels={"email_address": email}, user_labels=args.labels, opts=child) for email in emails]
        updates: dict[str, Any] = {"monitoring_notification_channels": [c.id for c in channels],
                                   "disable_default_iam_recipients": False}
        if args.hard_stop and topic is not None:
            updates.update(pubsub_topic=topic.id, schema_version="1.0")
        if function is not None and channels:
            self._failure_alert(name, args, channels)
        gcp.billing.Budget(
            f"{name}-budget",
            billing_account=args.billing_account,
            display_name=gcp_labels.resource_name("goldenenv", args.project, args.stack, limit=DISPLAY_NAME_MAX),
            budget_filter={
                "projects": [pulumi.Output.concat("projects/", args.project_number)],
                "labels": {STACK_LABEL_KEY: stack_label(args)},
                "credit_types_treatment": "INCLUDE_ALL_CREDITS",
                "calendar_period": "MONTH",
            },
            amount={"specified_amount": specified_amount(args.monthly_limit, args.currency)},
            threshold_rules=threshold_rules(args.thresholds),
            all_updates_rule=updates,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[function] if function else None),
        )
        self.function_name = function.name if function else None
        self.topic_name = topic.name if topic else None
        self.scheduler_job_name = job.name if job else None
        self.register_outputs({"function_name": self.function_name, "topic_name": self.topic_name,
                               "scheduler_job_name": self.scheduler_job_name})

    def _function(self, name: str, args: BudgetStopArgs, topic: gcp.pubsub.Topic) -> gcp.cloudfunctionsv2.Function:
        """The stop function, its code in a bucket of its own, its service account and role, and the trigger's
        identity, which may only invoke it."""
        child = pulumi.ResourceOptions(parent=self)
        runner = gcp.serviceaccount.Account(
            f"{name}-fn-sa", account_id=stop_name(args, "stop", limit=SERVICE_ACCOUNT_ID_MAX),
            project=args.gcp_project, display_name=f"goldenenv stop function {args.project}/{args.stack}"[:100],
            description=f"goldenenv: stops the nodes of project {args.project} stack {args.stack}", opts=child)
        role = gcp.projects.IAMCustomRole(
            f"{name}-fn-role", role_id=role_id(args), project=args.gcp_project,
            title=f"goldenenv stop {args.project}/{args.stack}"[:100],
            description=(f"goldenenv: what the stop function of project {args.project} stack {args.stack} "
                         "calls")[:256],
            permissions=stop_permissions(bool(args.idle_minutes)), stage="GA", opts=child)
        granted = gcp.projects.IAMMember(
            f"{name}-fn-role-member", project=args.gcp_project, role=role.name,
            member=pulumi.Output.concat("serviceAccount:", runner.email), opts=child)
        bucket = gcp.storage.Bucket(
            f"{name}-source", name=pulumi.Output.from_input(args.gcp_project).apply(
                lambda project_id: source_bucket_name(project_id, args.project, args.stack)),
            project=args.gcp_project, location=args.region, uniform_bucket_level_access=True,
            public_access_prevention="enforced", force_destroy=True,  # it holds only the function's code
            labels={**args.labels, HOLDS_TAG: "function-code"}, opts=child)
        source = gcp.storage.BucketObject(
            f"{name}-source-object", bucket=bucket.name, name=f"stopfn-{source_digest()}.zip",
            source=source_archive(), opts=child)
        trigger = gcp.serviceaccount.Account(
            f"{name}-trigger-sa", account_id=stop_name(args, "trigger", limit=SERVICE_ACCOUNT_ID_MAX),
            project=args.gcp_project, display_name=f"goldenenv stop trigger {args.project}/{args.stack}"[:100],
            description="goldenenv: Eventarc's identity to invoke the stop function, and nothing else",
            opts=child)
        function = gcp.cloudfunctionsv2.Function(
            f"{name}-function",
            name=stop_name(args, "stop"),
            project=args.gcp_project,
            location=args.region,
            description=(f"goldenenv: stops the nodes of project {args.project} stack {args.stack}: "
                         + "; ".join(duties(args))),
            build_config={
                "runtime": RUNTIME,
                "entry_point": ENTRY_POINT,
                "source": {"storage_source": {"bucket": bucket.name, "object": source.name}},
            },
            service_config={
                "max_instance_count": 1,
                "available_memory": MEMORY,
                "timeout_seconds": TIMEOUT_SECONDS,
                "ingress_settings": INGRESS,
                "all_traffic_on_latest_revision": True,
                "service_account_email": runner.email,
                "environment_variables": function_environment(args),
            },
            event_trigger={
                "trigger_region": args.region,
                "event_type": PUBSUB_EVENT,
                "pubsub_topic": topic.id,
                "retry_policy": RETRY_POLICY,
                "service_account_email": trigger.email,
            },
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[granted]),
        )
        gcp.cloudrunv2.ServiceIamMember(
            f"{name}-trigger-invoker", project=args.gcp_project, location=args.region, name=function.name,
            role="roles/run.invoker", member=pulumi.Output.concat("serviceAccount:", trigger.email), opts=child)
        return function

    def _failure_alert(self, name: str, args: BudgetStopArgs,
                       channels: list[gcp.monitoring.NotificationChannel]) -> gcp.monitoring.AlertPolicy:
        """A stop that fails must reach a person: an alert policy on the function's error logs (a stop or a
        listing that failed is logged at ERROR and fails the invocation, which Cloud Run logs at ERROR too),
        emailing the budget's addresses, at most once per FAILURE_ALERT_PERIOD while it keeps failing."""
        return gcp.monitoring.AlertPolicy(
            f"{name}-fn-failures",
            project=args.gcp_project,
            display_name=f"goldenenv stop function failed: {args.project}/{args.stack}"[:100],
            combiner="OR",
            conditions=[{
                "display_name": "the stop function logged an error",
                "condition_matched_log": {"filter": failure_log_filter(stop_name(args, "stop"))},
            }],
            alert_strategy={"notification_rate_limit": {"period": FAILURE_ALERT_PERIOD},
                            "auto_close": FAILURE_ALERT_AUTO_CLOSE},
            notification_channels=[c.id for c in channels],
            severity="ERROR",
            documentation={
                "mime_type": "text/markdown",
                "subject": f"goldenenv: the stop function of {args.project}/{args.stack} failed"[:255],
                "content": (f"The function that stops the nodes of project {args.project} stack {args.stack} "
                            f"({'; '.join(duties(args))}) failed: nodes may still be running and billing. Read "
                            "its logs (`gcloud functions logs read` with the function's name), and stop the nodes "
                            "by hand or run `goldenenv destroy` if the cause cannot be fixed now."),
            },
            user_labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _schedule(self, name: str, args: BudgetStopArgs, topic: gcp.pubsub.Topic) -> gcp.cloudscheduler.Job:
        """Every 15 minutes, a message that runs the time to live and the idle stop. Cloud Scheduler publishes as
        its service agent (a Pub/Sub target takes no service account of its own): it may publish to this topic."""
        publisher = gcp.pubsub.TopicIAMMember(
            f"{name}-scheduler-publisher", project=args.gcp_project, topic=topic.name, role="roles/pubsub.publisher",
            member=pulumi.Output.concat("serviceAccount:service-", args.project_number,
                                        "@gcp-sa-cloudscheduler.iam.gserviceaccount.com"),
            opts=pulumi.ResourceOptions(parent=self))
        return gcp.cloudscheduler.Job(
            f"{name}-reaper-schedule",
            name=stop_name(args, "reaper"),
            project=args.gcp_project,
            region=args.region,
            description=f"goldenenv: time to live and idle stop of project {args.project} stack {args.stack}",
            schedule=SCHEDULE,
            time_zone=SCHEDULE_TIME_ZONE,
            pubsub_target={
                "topic_name": topic.id,
                "data": base64.b64encode(json.dumps({"goldenenv": REAPER_MODE}).encode()).decode(),
                "attributes": {MODE_ATTRIBUTE: REAPER_MODE},
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[publisher]),
        )


def stack_label(args: BudgetStopArgs) -> str:
    """The goldenenv_stack label's value on the stack's resources, which the budget and the function filter on."""
    return args.labels.get(STACK_LABEL_KEY) or gcp_labels.label_value(args.stack)


def project_label(args: BudgetStopArgs) -> str:
    return args.labels.get(PROJECT_LABEL_KEY) or gcp_labels.label_value(args.project)


def stop_name(args: BudgetStopArgs, what: str, limit: int = gcp_labels.MAX_LENGTH) -> str:
    """goldenenv-<project>-<stack>-<what>, shortened with a digest when too long (labels.resource_name)."""
    return gcp_labels.resource_name("goldenenv", args.project, args.stack, what, limit=limit)


def role_id(args: BudgetStopArgs) -> str:
    """A custom role id takes letters, digits, '_' and '.' only."""
    return stop_name(args, "stop", limit=ROLE_ID_MAX).replace("-", "_")


def source_bucket_name(gcp_project: str, project: str, stack: str) -> str:
    """Bucket names are global: the Google Cloud project id makes this one the stack's alone."""
    return gcp_labels.resource_name(gcp_project, "goldenenv", project, stack, "stopfn")


def stop_permissions(idle: bool) -> list[str]:
    return sorted(STOP_PERMISSIONS + (IDLE_PERMISSIONS if idle else ()))


def duties(args: BudgetStopArgs) -> list[str]:
    found = []
    if args.hard_stop:
        found.append(f"hard stop at {args.monthly_limit:,.2f} {args.currency} a month")
    if args.ttl_hours:
        found.append(f"time to live {args.ttl_hours:g} h")
    if args.idle_minutes:
        found.append(f"idle stop after {args.idle_minutes} min")
    return found


def failure_log_filter(function: str) -> str:
    """The stop function's log entries at ERROR or above: a Cloud Functions (2nd gen) function runs as the Cloud
    Run service of its name, whose request and application logs are cloud_run_revision entries."""
    return (f'resource.type = "cloud_run_revision" AND resource.labels.service_name = "{function}" '
            f"AND severity >= ERROR")


def specified_amount(limit: float, currency: str) -> dict[str, Any]:
    """Money as the Budget API writes it: whole units (a string) and nanos."""
    cents = round(limit * 100)
    return {"currency_code": currency, "units": str(cents // 100), "nanos": (cents % 100) * 10_000_000}


def threshold_rules(thresholds: list[int]) -> list[dict[str, Any]]:
    """One rule per threshold on actual spend, as a fraction of the limit (50 -> 0.5), each once, in order."""
    return [{"threshold_percent": percent / 100, "spend_basis": "CURRENT_SPEND"}
            for percent in sorted(set(thresholds))]


def function_environment(args: BudgetStopArgs) -> dict[str, pulumi.Input[str]]:
    """What stopfn/main.py reads (its *_ENV names); the API base URLs are left to their defaults. The project number
    is the one the budget filters on: the guardrails tie the budget to the project the function stops nodes in."""
    env: dict[str, pulumi.Input[str]] = {
        "GOLDENENV_GCP_PROJECT": args.gcp_project,
        "GOLDENENV_GCP_PROJECT_NUMBER": args.project_number,
        "GOLDENENV_PROJECT": project_label(args),
        "GOLDENENV_STACK": stack_label(args),
        "GOLDENENV_HARD_STOP": "true" if args.hard_stop else "false",
        "GOLDENENV_BUDGET_LIMIT": f"{args.monthly_limit:.2f}",
        "GOLDENENV_CURRENCY": args.currency,
    }
    if args.ttl_hours:
        env["GOLDENENV_TTL_HOURS"] = f"{args.ttl_hours:.10g}"
    if args.idle_minutes:
        env["GOLDENENV_IDLE_MINUTES"] = str(int(args.idle_minutes))
    return env


STOPFN = FunctionSource(STOPFN_DIR, STOPFN_FILES, STOP_CORE)
source_archive = STOPFN.archive
source_digest = STOPFN.digest
# the object's name changes with the digest, so Cloud Functions rebuilds


def plan_mock(args: Any) -> tuple[str | None, dict[str, Any]] | None:
    """What Google computes for this component's resources under the offline plan (ids, names, emails); None for
    other types."""
    inputs = args.inputs
    project = inputs.get("project") or "goldenenv-plan-000000"
    name = inputs.get("name") or args.name
    if args.typ == "gcp:pubsub/topic:Topic":
        return f"projects/{project}/topics/{name}", {"name": name}
    if args.typ == "gcp:monitoring/notificationChannel:NotificationChannel":
        number = int(hashlib.sha256(args.name.encode()).hexdigest(), 16) % 10**19
        link = f"projects/{project}/notificationChannels/{number}"
        return link, {"name": link}
    if args.typ == "gcp:monitoring/alertPolicy:AlertPolicy":
        number = int(hashlib.sha256(args.name.encode()).hexdigest(), 16) % 10**19
        link = f"projects/{project}/alertPolicies/{number}"
        return link, {"name": link}
    if args.typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
        link = f"projects/{project}/roles/{inputs.get('roleId')}"
        return link, {"name": link}
    if args.typ == "gcp:serviceaccount/account:Account":
        email = f"{inputs.get('accountId')}@{project}.iam.gserviceaccount.com"
        return f"projects/{project}/serviceAccounts/{email}", {"email": email, "member": f"serviceAccount:{email}",
                                                               "name": f"projects/{project}/serviceAccounts/{email}"}
    if args.typ == "gcp:cloudfunctionsv2/function:Function":
        location = inputs.get("location")
        service = {**(inputs.get("serviceConfig") or {}), "service": f"projects/{project}/locations/{location}/"
                                                                     f"services/{name}"}
        return f"projects/{project}/locations/{location}/functions/{name}", {"name": name, "serviceConfig": service,
                                                                             "state": "ACTIVE"}
    if args.typ == "gcp:cloudscheduler/job:Job":
        return f"projects/{project}/locations/{inputs.get('region')}/jobs/{name}", {"name": name, "state": "ENABLED"}
    if args.typ == "gcp:billing/budget:Budget":
        return f"billingAccounts/{inputs.get('billingAccount')}/budgets/{re.sub('[^a-z0-9]', '', args.name)[:36]}", {}
    return None
