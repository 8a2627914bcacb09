"""AWS provider limits as data: what AWS refuses only at `up`, written once, each with where AWS documents it.

Pulumi's mock runtime (the offline plan) accepts any name length, tag count or notification count; AWS does not.
Code and checks read these values (``check_spec`` on the configuration, ``readiness`` on the planned resources)
instead of typing numbers of their own. No work at import time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from goldenenv.clouds.aws.budget_kinds import ACTUAL, HARD_STOP_PERCENT, notification_kinds
from goldenenv.clouds.aws.guardrail_facts import INSTANCE, LAUNCH_TEMPLATE
from goldenenv.clouds.base import UserDataLimit, VcpuAsk
from goldenenv.spec import ClusterSpec, Problem


@dataclass(frozen=True)
class Limit:
    """One number AWS enforces."""

    value: int
    source: str
    """Where AWS documents it."""
    note: str = ""


@dataclass(frozen=True)
class NameLimit:
    """How long the text an input property holds may be, for one resource type (by Pulumi type token)."""

    type: str
    property: str
    """The input property holding the physical name (camelCase, as the engine receives it)."""
    max_length: int
    source: str
    min_length: int = 1
    autonamed: bool = True
    """Pulumi derives the name from the resource name (plus AUTONAME_SUFFIX) when the property is unset."""
    what: str = "name"
    """What the text is, in messages: "name", "description"."""

    @property
    def kind(self) -> str:
        """The resource type's class, for messages ("Role")."""
        return self.type.rsplit(":", 1)[-1]


# ---------------------------------------------------------------- AWS Budgets

_BUDGETS_API = "https://docs.aws.amazon.com/aws-cost-management/latest/APIReference"

BUDGET_NOTIFICATIONS = Limit(
    5, f"{_BUDGETS_API}/API_budgets_Notification.html",
    note="AWS's Budgets API reference for Notification now says \"A budget can have up to ten notifications\"; "
         "older AWS Budgets user-guide text said five. goldenenv stays within five until ten is verified on a "
         "live account: a budget refused halfway through `up` leaves the stack without its alerts.",
)
"""Notifications per budget: the actual and forecast alerts and the hard stop's 100 % actual alert together."""

EMAILS_PER_NOTIFICATION = Limit(10, f"{_BUDGETS_API}/API_budgets_NotificationWithSubscribers.html")
SNS_TOPICS_PER_NOTIFICATION = Limit(1, f"{_BUDGETS_API}/API_budgets_NotificationWithSubscribers.html")

BUDGET_ACTION_INSTANCE_IDS = Limit(
    100, f"{_BUDGETS_API}/API_budgets_SsmActionDefinition.html",
    note="SsmActionDefinition.InstanceIds of a STOP_EC2_INSTANCES (or STOP_RDS_INSTANCES) budget action: 1 to 100 "
         "items. goldenenv's hard stop is the stack's own function for that reason.",
)

# ---------------------------------------------------------------- tags

_TAGGING = "https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html"

TAGS_PER_RESOURCE = Limit(
    50, _TAGGING, note="User tags; tags AWS creates (the aws: prefix) do not count, and users cannot create them.",
)
USER_DATA = UserDataLimit(
    16 * 1024, {LAUNCH_TEMPLATE: "userData", INSTANCE: "userDataBase64"}, base64=True,
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html: \"User data is "
           "limited to 16 KB, in raw form, before it is base64-encoded\"")
"""The GPU nodes' launch template and the head instance carry cloud-init's user data, base64-encoded."""
TAG_KEY_LENGTH = Limit(128, _TAGGING, note="Unicode characters.")
TAG_VALUE_LENGTH = Limit(256, _TAGGING, note="Unicode characters.")
AWS_TAG_PREFIX = "aws:"

# ---------------------------------------------------------------- physical names

AUTONAME_SUFFIX = 8
"""Pulumi auto-naming: with the name property unset, the physical name is the resource name plus "-" and 7 random
characters (https://www.pulumi.com/docs/iac/concepts/resources/names/#autonaming), so an auto-named resource's
physical name is len(resource name) + 8 characters long."""

NAME_PREFIX_SUFFIX = 26
"""With a namePrefix instead of a name, the provider (Terraform's helper/id.PrefixedUniqueId) appends 26
characters: a timestamp and a counter."""

S3_BUCKET_NAMING = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"
S3_BUCKET_NAME_MIN = 3
S3_BUCKET_NAME_MAX = 63
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
"""Suffixes S3 keeps for access point aliases, Object Lambda, Multi-Region Access Points, directory buckets and
table buckets."""

S3_BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")

_IAM_QUOTAS = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html"
_EC2_API = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference"

NAME_LIMITS: Mapping[str, NameLimit] = {limit.type: limit for limit in (
    *(NameLimit(token, "bucket", S3_BUCKET_NAME_MAX, S3_BUCKET_NAMING, min_length=S3_BUCKET_NAME_MIN)
      for token in S3_BUCKET_TYPES),
    NameLimit("aws:iam/role:Role", "name", 64, _IAM_QUOTAS),
    NameLimit("aws:iam/instanceProfile:InstanceProfile", "name", 128, _IAM_QUOTAS),
    NameLimit("aws:iam/rolePolicy:RolePolicy", "name", 128, _IAM_QUOTAS),
    NameLimit("aws:lambda/function:Function", "name", 64,
              "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html"),
    NameLimit("aws:cloudwatch/logGroup:LogGroup", "name", 512,
              "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html"),
    NameLimit("aws:cloudwatch/metricAlarm:MetricAlarm", "name", 255,
              "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html"),
    NameLimit("aws:budgets/budget:Budget", "name", 100, f"{_BUDGETS_API}/API_budgets_Budget.html"),
    NameLimit("aws:sns/topic:Topic", "name", 256, "https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html"),
    NameLimit("aws:ecr/repository:Repository", "name", 256,
              "https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_CreateRepository.html", min_length=2),
    NameLimit("aws:ec2/launchTemplate:LaunchTemplate", "name", 128, f"{_EC2_API}/API_CreateLaunchTemplate.html",
              min_length=3),
    NameLimit("aws:ec2/placementGroup:PlacementGroup", "name", 255, f"{_EC2_API}/API_CreatePlacementGroup.html"),
    NameLimit("aws:scheduler/schedule:Schedule", "name", 64,
              "https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html"),
    NameLimit("aws:ec2/securityGroup:SecurityGroup", "name", 255, f"{_EC2_API}/API_CreateSecurityGroup.html"),
    NameLimit("aws:kms/key:Key", "description", 8192,
              "https://docs.aws.amazon.com/kms/latest/APIReference/API_CreateKey.html", min_length=0,
              autonamed=False, what="description"),
)}
"""Per Pulumi type token, for the resource types goldenenv creates."""

# ---------------------------------------------------------------- partitions and ARNs

PARTITIONS = frozenset({"aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b", "aws-iso-e", "aws-iso-f", "aws-eusc"})
ARN_FORMAT = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference-arns.html"

_REGION_PARTITIONS = (("cn-", "aws-cn"), ("us-gov-", "aws-us-gov"), ("us-isob-", "aws-iso-b"),
                      ("us-isof-", "aws-iso-f"), ("eu-isoe-", "aws-iso-e"), ("us-iso-", "aws-iso"))


def partition(region: str) -> str:
    """The partition ARNs in ``region`` carry: aws-cn for cn-*, aws-us-gov for us-gov-*, the ISO partitions for
    their regions, aws elsewhere."""
    return next((p for prefix, p in _REGION_PARTITIONS if region.startswith(prefix)), "aws")


ARN_ACCOUNT_NONE = frozenset({"s3", "route53", "apigateway"})
"""Services whose ARNs leave the account field empty (arn:aws:s3:::bucket/key). S3 access points, batch jobs and
Storage Lens are the exception: they carry a region and an account (ARN_S3_WITH_ACCOUNT)."""

ARN_S3_WITH_ACCOUNT = ("accesspoint/", "job/", "storage-lens/", "storage-lens-group/", "async-request/",
                       "access-grants/")

ARN_ACCOUNT_OPTIONAL: Mapping[str, tuple[str, ...]] = {
    "ec2": ("image/", "snapshot/"),
    "ssm": ("document/", "parameter/"),
}
"""Resource types whose ARNs may leave the account empty: public or AWS-owned images, snapshots, SSM documents and
parameters (arn:aws:ssm:us-east-1::document/AWS-RunShellScript). Every other SSM ARN, such as an automation
definition, needs the account: arn:aws:ssm:us-east-1:*:automation-definition/NAME:$DEFAULT."""

ARN_ACCOUNT_WORDS: Mapping[str, frozenset[str]] = {"iam": frozenset({"aws"})}
"""Account fields that are not account ids: AWS managed policies are arn:aws:iam::aws:policy/NAME."""

AUTOMATE_ACTIONS = frozenset({"stop", "terminate", "reboot", "recover"})
AUTOMATE_ARN = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html"
"""arn:aws:automate:REGION:ec2:ACTION, the alarm actions that act on an instance: a pseudo ARN with no account."""


# ---------------------------------------------------------------- the configuration, before any plan

BUDGET_KEY = "goldenenv:budget"


def check_spec(spec: ClusterSpec) -> list[Problem]:
    """What the configuration asks of AWS beyond its limits, one problem per key, before anything is planned.

    Names goldenenv derives from the stack and pool names are judged on the planned resources
    (readiness: strict:name-length), where every derived name is known exactly.
    """
    problems = []
    budget = spec.budget
    if budget is not None:
        kinds = notification_kinds(budget.alert_thresholds, budget.forecast_thresholds, budget.hard_stop)
        limit = BUDGET_NOTIFICATIONS.value
        if len(kinds) > limit:
            actual = sum(1 for _, kind in kinds if kind == ACTUAL)
            stop = (f" (with the hard stop's {HARD_STOP_PERCENT} % actual alert)"
                    if budget.hard_stop and HARD_STOP_PERCENT not in budget.alert_thresholds else "")
            problems.append(Problem(
                f"{BUDGET_KEY}.alertThresholds",
                f"the budget would have {len(kinds)} notifications: {actual} on actual spend{stop} and "
                f"{len(kinds) - actual} on forecast spend ({BUDGET_KEY}.forecastThresholds); AWS Budgets allows "
                f"{limit} per budget: keep alertThresholds and forecastThresholds together within {limit}, "
                f"e.g. alertThresholds: [50, 80, 100] and forecastThresholds: [100]",
            ))
    return problems


def vcpu_quota_lines(asks: Sequence[VcpuAsk], region: str | None) -> list[str]:
    """Per EC2 vCPU quota (one per family group and market, per region: catalog aws_vcpu_quotas.csv), the pools that
    count against it, the vCPUs they need and the command that reads the account's value; a pool whose quota the
    catalog lacks is said on its own."""
    from goldenenv import catalog

    lines: list[str] = []
    by_quota: dict[str, tuple[catalog.VcpuQuota, list[VcpuAsk]]] = {}
    for ask in asks:
        quota = catalog.vcpu_quota(ask.instance_type, ask.market)
        if quota is None:
            lines.append(f"{ask.pool}: the catalog has no {ask.market} vCPU quota for {ask.instance_type} (catalog "
                         "aws_vcpu_quotas.csv): check its family's EC2 quotas in the Service Quotas console")
            continue
        by_quota.setdefault(quota.code, (quota, []))[1].append(ask)
    where = f" --region {region}" if region else ""
    for quota, members in by_quota.values():
        nodes = " + ".join(f"{a.pool}: {a.count} x {a.instance_type}" for a in members)
        code = quota.code if quota.verified else f"{quota.code}, unverified"
        lines.append(f"{nodes} needs {sum(a.count * a.vcpus for a in members)} vCPU of {quota.name} ({code}); check "
                     f"with `aws service-quotas get-service-quota --service-code ec2 --quota-code {quota.code}{where}`")
    return lines
