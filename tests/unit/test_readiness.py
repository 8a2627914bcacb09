"""Deploy readiness (`plan --strict`): each rule catches what AWS would refuse and passes what it accepts, on
resources built by hand in engine (camelCase) form; AWS's limits are anchored by a few literals from its docs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from goldenenv import stackconfig
from goldenenv.clouds.aws import limits, readiness
from goldenenv.clouds.aws.readiness import findings as readiness_findings
from goldenenv.guardrails import PlannedResource, Severity
from goldenenv.plan import plan

REPO = Path(__file__).resolve().parents[2]
STACK = "demo"
TAGS = {"project": "llm", "owner": "ml", "cost-center": "r-1", "goldenenv:stack": STACK}

BUDGET = "aws:budgets/budget:Budget"
BUDGET_ACTION = "aws:budgets/budgetAction:BudgetAction"
PROVIDER = "pulumi:providers:aws"
ROLE = "aws:iam/role:Role"
FUNCTION = "aws:lambda/function:Function"
BUCKET = "aws:s3/bucket:Bucket"
VPC = "aws:ec2/vpc:Vpc"
INSTANCE = "aws:ec2/instance:Instance"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def res(type_: str, name: str, props: dict | None = None, custom: bool = True, **kwargs) -> PlannedResource:
    """A resource as `goldenenv plan` records it under mocks (id = f"{name}-id"; options it did not set are False)."""
    kwargs.setdefault("retain_on_delete", False)
    return PlannedResource(urn=f"urn:pulumi:{STACK}::goldenenv::{type_}::{name}", type=type_, name=name,
                           props=props or {}, id=f"{name}-id" if custom else None, custom=custom, **kwargs)


def found(resources: list[PlannedResource], rule: str, tags: dict = TAGS) -> list[str]:
    return [f.message for f in readiness_findings(resources, tags) if f.rule == rule]


# ---------------------------------------------------------------- the limits, anchored to AWS's documentation

def test_limits_match_awss_documentation():
    assert limits.BUDGET_NOTIFICATIONS.value == 5
    assert "ten" in limits.BUDGET_NOTIFICATIONS.note and "five" in limits.BUDGET_NOTIFICATIONS.note
    assert (limits.EMAILS_PER_NOTIFICATION.value, limits.SNS_TOPICS_PER_NOTIFICATION.value) == (10, 1)
    assert limits.BUDGET_ACTION_INSTANCE_IDS.value == 100
    assert limits.TAGS_PER_RESOURCE.value == 50
    assert (limits.TAG_KEY_LENGTH.value, limits.TAG_VALUE_LENGTH.value) == (128, 256)
    bucket, role = limits.NAME_LIMITS[BUCKET], limits.NAME_LIMITS[ROLE]
    assert (bucket.property, bucket.min_length, bucket.max_length) == ("bucket", 3, 63)
    assert (role.property, role.max_length) == ("name", 64)
    assert limits.NAME_LIMITS[FUNCTION].max_length == 64
    assert limits.NAME_LIMITS["aws:scheduler/schedule:Schedule"].max_length == 64
    assert limits.NAME_LIMITS[BUDGET].max_length == 100
    assert limits.AUTONAME_SUFFIX == 8, "Pulumi appends '-' and 7 random characters"


def test_every_limit_says_where_aws_documents_it():
    values = [v for v in vars(limits).values() if isinstance(v, limits.Limit)] + list(limits.NAME_LIMITS.values())
    assert len(values) > 20
    for value in values:
        assert value.source.startswith("https://docs.aws.amazon.com/"), value


@pytest.mark.parametrize(("region", "partition"), [
    ("us-east-1", "aws"), ("eu-central-1", "aws"), ("cn-north-1", "aws-cn"), ("cn-northwest-1", "aws-cn"),
    ("us-gov-west-1", "aws-us-gov"),
])
def test_partition_of_a_region(region, partition):
    assert limits.partition(region) == partition


def test_strict_rules_are_named_apart_from_the_guardrails():
    ids = [rule.id for rule in readiness.RULES]
    assert len(ids) == len(set(ids)) and all(i.startswith("strict:") for i in ids)


# ---------------------------------------------------------------- strict:budget-notifications

def notification(threshold: float, kind: str = "ACTUAL", emails: int = 1, topics: int = 0) -> dict:
    note = {"comparisonOperator": "GREATER_THAN", "threshold": threshold, "thresholdType": "PERCENTAGE",
            "notificationType": kind, "subscriberEmailAddresses": [f"a{i}@example.com" for i in range(emails)]}
    if topics:
        note["subscriberSnsTopicArns"] = [f"arn:aws:sns:us-east-1:123456789012:t{i}" for i in range(topics)]
    return note


def test_six_notifications_are_more_than_a_budget_may_have():
    six = [notification(t, k) for t in (50.0, 80.0, 100.0) for k in ("ACTUAL", "FORECASTED")]
    (message,) = found([res(BUDGET, "budget", {"notifications": six})], "strict:budget-notifications")
    assert "6 notifications" in message and "allows 5" in message
    assert "alertThresholds" in message and "forecastThresholds" in message


def test_four_notifications_pass():
    four = [notification(50.0), notification(80.0), notification(100.0, topics=1), notification(100.0, "FORECASTED")]
    assert found([res(BUDGET, "budget", {"notifications": four})], "strict:budget-notifications") == []


def test_a_notification_takes_ten_emails_and_one_topic():
    crowded = [notification(50.0, emails=11), notification(100.0, topics=2), notification(80.0, emails=10, topics=1)]
    messages = found([res(BUDGET, "budget", {"notifications": crowded})], "strict:budget-notifications")
    assert len(messages) == 2
    assert "50 % ACTUAL" in messages[0] and "11 email" in messages[0] and "allows 10" in messages[0]
    assert "100 % ACTUAL" in messages[1] and "2 SNS" in messages[1] and "allows 1" in messages[1]


def test_a_threshold_and_type_twice_is_refused():
    twice = [notification(100.0), notification(100.0)]
    (message,) = found([res(BUDGET, "budget", {"notifications": twice})], "strict:budget-notifications")
    assert "two notifications at 100 % ACTUAL" in message


# ---------------------------------------------------------------- strict:budget-action-instances

def stop_action(count: int) -> PlannedResource:
    return res(BUDGET_ACTION, "stop", {"actionType": "RUN_SSM_DOCUMENTS", "definition": {"ssmActionDefinition": {
        "actionSubType": "STOP_EC2_INSTANCES", "region": "us-east-1",
        "instanceIds": [f"i-{n:017x}" for n in range(count)]}}})


def test_a_budget_action_stops_at_most_100_instances():
    (message,) = found([stop_action(101)], "strict:budget-action-instances")
    assert "STOP_EC2_INSTANCES lists 101 instance ids" in message and "at most 100" in message
    assert found([stop_action(100)], "strict:budget-action-instances") == []


# ---------------------------------------------------------------- strict:tag-limits

def provider(tags: dict) -> PlannedResource:
    """The aws provider as the plan records it: its defaultTags in JSON text."""
    return res(PROVIDER, "aws", {"region": "us-east-1", "defaultTags": json.dumps({"tags": tags})}, custom=False)


def test_the_providers_default_tags_count_toward_fifty():
    own = {f"team-{i}": "x" for i in range(47)}
    vpc = res(VPC, "vpc", {"tags": own})
    (message,) = found([provider(TAGS), vpc], "strict:tag-limits")
    assert "51 tags" in message and "4 from the defaultTags of provider 'aws'" in message and "50" in message
    assert found([provider({"team-0": "x", "team-1": "x"}), vpc], "strict:tag-limits") == []  # overridden: 47
    assert found([vpc], "strict:tag-limits") == []


def test_tags_aws_creates_do_not_count():
    tags = {**{f"team-{i}": "x" for i in range(50)}, "aws:cloudformation:stack-name": "s"}
    assert found([res(VPC, "vpc", {"tags": tags})], "strict:tag-limits") == []


def test_tag_keys_hold_128_and_values_256_characters():
    too_long = res(VPC, "vpc", {"tags": {"k" * 129: "v", "key": "v" * 257}})
    messages = found([too_long], "strict:tag-limits")
    assert len(messages) == 2
    assert "129 characters" in messages[0] and "allows 128" in messages[0]
    assert "257 characters" in messages[1] and "allows 256" in messages[1]
    assert found([res(VPC, "vpc", {"tags": {"k" * 128: "v" * 256}})], "strict:tag-limits") == []


def test_what_a_launch_template_launches_is_counted_too():
    template = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", {"tags": {"a": "b"}, "tagSpecifications": [
        {"resourceType": "instance", "tags": {f"t{i}": "x" for i in range(51)}}]})
    (message,) = found([template], "strict:tag-limits")
    assert "tagSpecifications 'instance'" in message and "51 tags" in message


# ---------------------------------------------------------------- strict:name-length

def test_an_explicit_role_name_holds_64_characters():
    (message,) = found([res(ROLE, "role", {"name": "r" * 65})], "strict:name-length")
    assert "64 characters" in message and "is 65" in message
    assert found([res(ROLE, "role", {"name": "r" * 64})], "strict:name-length") == []


def test_an_auto_named_function_counts_pulumis_suffix():
    (message,) = found([res(FUNCTION, "f" * 57)], "strict:name-length")
    assert "auto-named" in message and "65 characters" in message and "allows 64" in message
    assert found([res(FUNCTION, "f" * 56)], "strict:name-length") == []


def test_a_name_prefix_counts_the_providers_26_characters():
    (message,) = found([res(ROLE, "role", {"namePrefix": "p" * 39})], "strict:name-length")
    assert "namePrefix" in message and "65" in message
    assert found([res(ROLE, "role", {"namePrefix": "p" * 38})], "strict:name-length") == []


def test_a_long_name_names_the_stack_and_pool_that_make_it_long():
    stack = "s" * 50
    pool = res("goldenenv:aws:GpuNodePool", f"{stack}-trainers", custom=False)
    role = res(ROLE, f"{stack}-trainers-role")
    (message,) = found([pool, role], "strict:name-length", {**TAGS, "goldenenv:stack": stack})
    assert "the stack name" in message and "goldenenv:nodes.name ('trainers')" in message


def test_an_imported_resource_keeps_its_own_name():
    assert found([res(FUNCTION, "f" * 60, import_id="existing")], "strict:name-length") == []


# ---------------------------------------------------------------- strict:s3-bucket-name

@pytest.mark.parametrize(("name", "why"), [
    ("ab", "2 characters"), ("a" * 64, "64 characters"), ("My_Bucket", "characters S3 refuses: 'BM_'"),
    ("-bucket", "begin and end"), ("bucket-", "begin and end"), ("bucket..data", "adjacent dots"),
    ("192.168.5.4", "IP address"), ("xn--bucket", "'xn--'"), ("sthree-bucket", "'sthree-'"),
    ("amzn-s3-demo-bucket", "'amzn-s3-demo-'"), ("bucket-s3alias", "'-s3alias'"), ("bucket--ol-s3", "'--ol-s3'"),
    ("bucket.mrap", "'.mrap'"), ("bucket--x-s3", "'--x-s3'"),
])
def test_bucket_names_s3_refuses(name, why):
    (message,) = found([res(BUCKET, "data", {"bucket": name}, retain_on_delete=True)], "strict:s3-bucket-name")
    assert why in message and "3-63 lowercase letters" in message


@pytest.mark.parametrize("name", ["abc", "a" * 63, "llm-demo-123456789012-us-east-1", "data.v2-1"])
def test_bucket_names_s3_accepts(name):
    assert found([res(BUCKET, "data", {"bucket": name}, retain_on_delete=True)], "strict:s3-bucket-name") == []


def test_a_retained_bucket_needs_an_explicit_name():
    (message,) = found([res(BUCKET, "data", retain_on_delete=True)], "strict:s3-bucket-name")
    assert "no explicit bucket name" in message and "orphaned" in message
    assert found([res(BUCKET, "scratch")], "strict:s3-bucket-name") == []  # not retained: destroy deletes it


# ---------------------------------------------------------------- strict:launch-template-version

@pytest.mark.parametrize("version", ["$Default", "$Latest", None])
def test_a_node_follows_a_moving_template_version(version):
    template = {"id": "lt-id"} if version is None else {"id": "lt-id", "version": version}
    (message,) = found([res(INSTANCE, "gpu-0", {"launchTemplate": template})], "strict:launch-template-version")
    assert "replaces the node" in message and "version number" in message
    assert (repr(version) if version else "no version (the template's default)") in message


@pytest.mark.parametrize("version", ["1", "12", 3])
def test_a_node_pinned_to_a_template_version_passes(version):
    node = res(INSTANCE, "gpu-0", {"launchTemplate": {"id": "lt-id", "version": version}})
    assert found([node], "strict:launch-template-version") == []


# ---------------------------------------------------------------- strict:fsx-final-backup

def lustre(**props) -> PlannedResource:
    return res(LUSTRE, "lustre", {"deploymentType": "PERSISTENT_2", "storageCapacity": 1200, **props})


def link(file_system_id: str = "lustre-id") -> PlannedResource:
    return res(ASSOCIATION, "link", {"fileSystemId": file_system_id, "dataRepositoryPath": "s3://data/"})


@pytest.mark.parametrize("skip", [None, False])
def test_a_lustre_file_system_linked_to_s3_must_skip_its_final_backup(skip):
    fs = lustre() if skip is None else lustre(skipFinalBackup=skip)
    (message,) = found([fs, link()], "strict:fsx-final-backup")
    assert "linked to S3 (DataRepositoryAssociation 'link')" in message and "skipFinalBackup=True" in message
    assert "not linked to a data repository" in message


def test_a_linked_file_system_that_skips_its_final_backup_passes():
    assert found([lustre(skipFinalBackup=True), link()], "strict:fsx-final-backup") == []


def test_an_unlinked_file_system_may_take_its_final_backup():
    assert found([lustre(skipFinalBackup=False), link("another-fs-id")], "strict:fsx-final-backup") == []


def test_a_link_by_the_output_id_or_by_import_path_counts():
    by_output = PlannedResource(urn="urn:lustre", type=LUSTRE, name="lustre", props={}, outputs={"id": "fs-0123"})
    assert found([by_output, link("fs-0123")], "strict:fsx-final-backup")
    assert found([lustre(importPath="s3://data/")], "strict:fsx-final-backup")


# ---------------------------------------------------------------- strict:iam-arn

def role_policy(*resources: str) -> PlannedResource:
    return res(ROLE_POLICY, "policy", {"role": "role-id", "policy": json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "Use", "Effect": "Allow", "Action": "*", "Resource": list(resources)}]})})


def test_an_empty_account_where_the_service_has_one_says_what_aws_shows():
    (message,) = found([role_policy("arn:aws:ssm:us-east-1::automation-definition/NAME:$DEFAULT")], "strict:iam-arn")
    assert "statement Use" in message and "empty account" in message
    assert "arn:aws:ssm:us-east-1:*:automation-definition/NAME:$DEFAULT" in message


@pytest.mark.parametrize(("arn", "why"), [
    ("arn:aws:s3::123456789012:data", "s3 ARNs like it have none: write arn:aws:s3:::data"),
    ("arn:aws:sns:us-east-1:topic", "5 colon-separated fields"),
    ("arn:amazon:s3:::data", "partition 'amazon'"),
    ("arn:aws:lambda:us-east-1:12345:function:f", "12-digit account"),
    ("data-bucket", "neither an ARN"),
])
def test_malformed_arns_are_caught(arn, why):
    (message,) = found([role_policy(arn)], "strict:iam-arn")
    assert why in message


def test_well_formed_arns_pass():
    policy = role_policy(
        "*", "arn:aws:s3:::data", "arn:aws:s3:::data/*", "arn:aws:ec2:*:*:instance/*",
        "arn:aws:lambda:us-east-1:123456789012:function:reaper",
        "arn:aws-cn:logs:cn-north-1:123456789012:log-group:x:*",
        "arn:aws:iam::aws:policy/ReadOnlyAccess", "arn:aws:ssm:us-east-1::document/AWS-RunShellScript",
        "arn:aws:ssm:us-east-1:*:automation-definition/NAME:$DEFAULT",
        "arn:aws:s3:us-east-1:123456789012:accesspoint/ap", "arn:aws:budgets::123456789012:budget/b",
    )
    key = res(KEY_POLICY, "key-policy", {"policy": json.dumps({"Statement": {"Effect": "Allow", "Resource": "*"}})})
    assert found([policy, key], "strict:iam-arn") == []


def test_alarm_actions_are_checked_and_automate_arns_carry_no_account():
    good = res(ALARM, "idle", {"alarmActions": ["arn:aws:automate:us-east-1:ec2:stop"]})
    bad = res(ALARM, "idle-2", {"alarmActions": ["arn:aws:automate:us-east-1:123456789012:ec2:stop"]})
    assert found([good], "strict:iam-arn") == []
    (message,) = found([bad], "strict:iam-arn")
    assert "no account" in message and "arn:aws:automate:us-east-1:ec2:ACTION" in message


# ---------------------------------------------------------------- the shipped stacks, and the configuration

def aws_stacks() -> list[str]:
    stacks = []
    for path in sorted((REPO / "stacks").glob("Pulumi.*.yaml")):
        if stackconfig.read_stack_file(path).get("goldenenv:cloud") == "aws":
            stacks.append(path.name.removeprefix("Pulumi.").removesuffix(".yaml"))
    return stacks


def test_there_are_shipped_aws_stacks():
    assert len(aws_stacks()) >= 3


@pytest.mark.parametrize("stack", aws_stacks())
def test_the_shipped_aws_stacks_are_ready_to_deploy(stack):
    planned = plan(stack)
    findings = readiness_findings(planned.resources, planned.spec.stack_tags)
    assert [(f.rule, f.message) for f in findings if f.severity is Severity.ERROR] == []
    assert {f.rule for f in findings} <= {"strict:vcpu-quota"}  # what to check before up, said per pool


def spec_of(**budget):
    config = copy.deepcopy(stackconfig.read_stack_file(REPO / "stacks" / "Pulumi.aws-p5-2node.yaml"))
    config["goldenenv:budget"] = {"monthlyLimit": 1000, "emails": ["ml@example.com"], **budget}
    values, unknown = stackconfig.namespaced(config)
    return stackconfig.load("aws-p5-2node", values, unknown)


def test_the_default_budget_is_within_the_limit():
    spec = spec_of()
    assert spec.budget.alert_thresholds == [50, 80, 100] and spec.budget.forecast_thresholds == [100]
    assert limits.check_spec(spec) == []
    assert limits.check_spec(spec_of(hardStop=True)) == []


def test_four_alerts_and_two_forecasts_are_refused_naming_the_keys():
    (problem,) = limits.check_spec(spec_of(alertThresholds=[25, 50, 75, 100], forecastThresholds=[80, 100]))
    assert problem.key == "goldenenv:budget.alertThresholds"
    assert "goldenenv:budget.forecastThresholds" in problem.message
    assert "6 notifications" in problem.message and "allows 5" in problem.message


def test_the_hard_stops_alert_counts_toward_the_limit():
    (problem,) = limits.check_spec(spec_of(alertThresholds=[50, 70, 80, 90], forecastThresholds=[100], hardStop=True))
    assert "5 on actual spend (with the hard stop's 100 % actual alert)" in problem.message
    assert limits.check_spec(spec_of(alertThresholds=[50, 70, 80, 90], forecastThresholds=[], hardStop=True)) == []
