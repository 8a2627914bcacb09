"""Auto-teardown that works with the laptop off: a scheduled reaper for the time to live, alarms for idleness.

Time to live: an EventBridge Scheduler schedule invokes a small Lambda function (goldenenv/clouds/aws/reaper.py,
shipped as is) every 15 minutes; it stops, or terminates, the stack's nodes whose launch time plus their
``goldenenv:ttl-hours`` tag has passed (one-time spot nodes, which EC2 cannot stop, are terminated). Stopping
keeps the disks; storage and the network keep billing until ``pulumi destroy``. The budget's hard stop runs the
same file in a function of its own (``reaper_function``), so both decide stop or terminate the same way. The hard
stop records its month in an SSM parameter of the stack (``hard_stop_parameter``); each scheduled run of the reaper
reads it and, while it holds the current month, stops every running or pending node of the stack instead, so a
node started again after the hard stop, or pending when it ran, is stopped within one schedule period. The
schedule therefore exists whenever the stack has a time to live or a hard stop: without a time to live its nodes
carry no ``goldenenv:ttl-hours`` tag, the reaper keeps them, and its runs only repeat a recorded hard stop.

Failures: each function (the reaper, the hard stop) has a CloudWatch alarm on its AWS/Lambda Errors (Sum >= 1 over
15 minutes) that notifies the stack's alert topic (``FunctionAlerts``), to which the budget's emails subscribe. The
topic is not the budget's hard-stop topic: that one invokes the hard-stop function, so an alarm published there
would stop every node. It is encrypted with a key of its own that CloudWatch may use (the AWS managed SNS key
cannot grant a service).

Idleness: one CloudWatch alarm per node stops it (EC2 alarm action, no role needed) when its average CPU stays
under ``idle_cpu_percent`` for ``idle_minutes``. CPU is the proxy for GPU use because EC2 publishes
CPUUtilization for every instance at no cost, whereas GPU utilisation reaches CloudWatch only through the
CloudWatch agent's NVIDIA plugin, which the nodes do not run. A training job keeps its rank and data-loader
processes busy, so an idle CPU is a fair sign of an idle node; but on an instance with many vCPUs a GPU-bound
job can average only a few percent (one busy core per GPU on a p5.48xlarge is 8 of 192 vCPUs, about 4 %):
check a real job's CPUUtilization before trusting the threshold.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from goldenenv.clouds.aws import privilege, reaper
from goldenenv.clouds.aws.iam import assumed_by
from goldenenv.clouds import stopcore
from goldenenv.clouds.aws.limits import partition
from goldenenv.clouds.base import STOP_CORE

REAPER_RATE = "rate(15 minutes)"
REAPER_RUNTIME = "python3.12"
REAPER_FILE = "reaper.py"
REAPER_HANDLER = "reaper.handler"
REAPER_TIMEOUT_SECONDS = reaper.TIMEOUT_SECONDS
"""Room for a stack of thousands of nodes: calls of 1,000 ids, one call per node when a call fails, throttled calls
retried and pending nodes watched until they run (the reaper's own deadline is the time Lambda says is left)."""
LOG_RETENTION_DAYS = 30
DEAD_LETTER_RETENTION_SECONDS = 14 * 24 * 3600
"""SQS's longest: two weeks to find a lost hard-stop notification."""
ALARM_PERIOD_SECONDS = 300
"""EC2 basic monitoring publishes CPUUtilization every 5 minutes."""
ERRORS_PERIOD_SECONDS = 900
"""A function's Errors alarm sums its failed invocations over 15 minutes, one schedule period."""
CLOUDWATCH_SERVICE = "cloudwatch.amazonaws.com"


@dataclass(frozen=True, kw_only=True)
class AutoTeardownArgs:
    stack: str
    project: str
    """The project tag: with the stack it selects the nodes, since two projects may each have a stack 'dev'."""
    region: str
    ttl_hours: float | None
    idle_minutes: int | None
    instance_ids: Mapping[str, pulumi.Input[str]]
    """Node name -> instance id; the name names the node's idle alarm, so it must not change between runs."""
    action: str = "stop"
    """What the time to live does to expired nodes: stop (disks kept) or terminate. Idle alarms follow it."""
    one_time_spot_nodes: frozenset[str] = frozenset()
    """Nodes on one-time spot requests: EC2 cannot stop them, so their idle alarm terminates them (a persistent
    spot node is stopped like an on-demand one, and stays stopped until started: its request is then disabled)."""
    idle_cpu_percent: float = 5.0
    """Below this average CPU a node is idle; see idle_cpu_threshold for the cluster's value."""
    hard_stop: bool = False
    """The budget's hard stop is on: the reaper's schedule repeats it, so the reaper exists without a ttl too."""
    alarm_topic: pulumi.Input[str] | None = None
    """The ARN of the topic the reaper's Errors alarm notifies (FunctionAlerts); None: no such alarm."""
    budget_limit: float | None = None
    """The monthly budget with a hard stop: a limit raised above the one the stop recorded ends the stop."""
    tags: dict[str, str]


class AutoTeardown(pulumi.ComponentResource):
    reaper_function: pulumi.Output[str] | None
    idle_alarms: list[pulumi.Output[str]]

    def __init__(self, name: str, args: AutoTeardownArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:AutoTeardown", name, None, opts)
        if args.action not in reaper.ACTIONS:
            raise ValueError(f"action {args.action!r} is not one of {', '.join(reaper.ACTIONS)}")
        child = pulumi.ResourceOptions(parent=self)
        self.reaper_function = self._reaper(name, args, child).name if args.ttl_hours or args.hard_stop else None
        self.idle_alarms = [
            self._idle_alarm(name, node, instance_id, args, child).name
            for node, instance_id in args.instance_ids.items()
        ] if args.idle_minutes else []
        self.register_outputs({"reaper_function": self.reaper_function, "idle_alarms": self.idle_alarms})

    def _reaper(self, name: str, args: AutoTeardownArgs, child: pulumi.ResourceOptions) -> aws.lambda_.Function:
        """The reaper function, its role, log group and Errors alarm, and the schedule that invokes it: one per
        stack, for the time to live and the hard stop alike."""
        does = [f"{args.action} the nodes of project {args.project} stack {args.stack} when their time to live "
                "ends"] if args.ttl_hours else []
        if args.hard_stop:
            does.append(f"stop every node of project {args.project} stack {args.stack} while the budget's hard stop "
                        "is in force")
        function = reaper_function(
            f"{name}-reaper", project=args.project, stack=args.stack, action=args.action, purpose="reaper",
            description="goldenenv: " + "; ".join(does), tags=args.tags, parent=self, alarm_topic=args.alarm_topic,
            budget_limit=args.budget_limit,
        )
        invoker = aws.iam.Role(
            f"{name}-schedule-role", assume_role_policy=assumed_by("scheduler.amazonaws.com"),
            tags=args.tags, opts=child,
        )
        invoke = aws.iam.RolePolicy(
            f"{name}-schedule-policy", role=invoker.id,
            policy=function.arn.apply(lambda arn: json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": arn}],
            })),
            opts=child,
        )
        aws.scheduler.Schedule(
            f"{name}-reaper-schedule",
            description=f"goldenenv: run the reaper of stack {args.stack}",
            schedule_expression=REAPER_RATE,
            flexible_time_window={"mode": "OFF"},
            target={"arn": function.arn, "role_arn": invoker.arn},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[invoke]),
        )
        return function

    def _idle_alarm(self, name: str, node: str, instance_id: pulumi.Input[str], args: AutoTeardownArgs,
                    child: pulumi.ResourceOptions) -> aws.cloudwatch.MetricAlarm:
        act = "terminate" if args.action == "terminate" or node in args.one_time_spot_nodes else "stop"
        return aws.cloudwatch.MetricAlarm(
            f"{name}-idle-{node}",
            name=f"goldenenv-{name_part(args.project)}-{args.stack}-{node}-idle",
            alarm_description=(f"goldenenv: {act} {node} after {args.idle_minutes} minutes under "
                               f"{args.idle_cpu_percent:g} % CPU (CPU stands in for GPU use)"),
            namespace="AWS/EC2",
            metric_name="CPUUtilization",
            dimensions={"InstanceId": instance_id},
            statistic="Average",
            period=ALARM_PERIOD_SECONDS,
            evaluation_periods=idle_periods(args.idle_minutes),
            datapoints_to_alarm=idle_periods(args.idle_minutes),
            comparison_operator="LessThanThreshold",
            threshold=args.idle_cpu_percent,
            treat_missing_data="notBreaching",
            alarm_actions=[f"arn:{partition(args.region)}:automate:{args.region}:ec2:{act}"],
            tags=args.tags,
            opts=child,
        )


def ttl_tags(ttl_hours: float | None) -> dict[str, str]:
    """The tag the reaper reads a node's time to live from; none without a time to live."""
    return {reaper.TTL_TAG_KEY: f"{ttl_hours:.10g}"} if ttl_hours else {}


def idle_periods(idle_minutes: int) -> int:
    """Alarm periods covering at least idle_minutes."""
    return math.ceil(idle_minutes * 60 / ALARM_PERIOD_SECONDS)


def reaper_function(name: str, *, project: str, stack: str, action: str, purpose: str, description: str,
                    tags: dict[str, str], parent: pulumi.Resource, records_hard_stop: bool = False,
                    dead_letter_queue: bool = False, alarm_topic: pulumi.Input[str] | None = None,
                    budget_limit: float | None = None) -> aws.lambda_.Function:
    """A Lambda function running goldenenv/clouds/aws/reaper.py for one stack of one project, with its role and log group.

    Children are named from ``name`` (``-role``, ``-logs``, ``-policy``, ``-dlq``, ``-errors``) and parented to
    ``parent``; ``purpose`` names the log group and the alarm, so the time to live and the hard stop log and alarm
    apart. Every such function reads the stack's hard-stop parameter; ``records_hard_stop`` lets it write the
    parameter too (the budget's function). ``dead_letter_queue`` keeps the events of invocations that failed every
    retry in an encrypted queue. ``alarm_topic`` (an SNS topic ARN) is notified when the function fails.
    """
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(f"{name}-role", assume_role_policy=assumed_by("lambda.amazonaws.com"), tags=tags, opts=child)
    logs = aws.cloudwatch.LogGroup(
        f"{name}-logs", name=f"/goldenenv/{name_part(project)}/{stack}/{purpose}",
        retention_in_days=LOG_RETENTION_DAYS, tags=tags, opts=child,
    )
    queue = aws.sqs.Queue(
        f"{name}-dlq", sqs_managed_sse_enabled=True, message_retention_seconds=DEAD_LETTER_RETENTION_SECONDS,
        tags=tags, opts=child,
    ) if dead_letter_queue else None
    policy = aws.iam.RolePolicy(
        f"{name}-policy", role=role.id,
        policy=pulumi.Output.all(logs.arn, queue.arn if queue else None).apply(
            lambda arns: json.dumps(reaper_policy(project, stack, arns[0], records_hard_stop=records_hard_stop,
                                                  dead_letter_queue_arn=arns[1]))),
        opts=child,
    )
    function = aws.lambda_.Function(
        name,
        description=description[:256],
        runtime=REAPER_RUNTIME,
        handler=REAPER_HANDLER,
        code=reaper_archive(),
        role=role.arn,
        timeout=REAPER_TIMEOUT_SECONDS,
        memory_size=128,
        environment={"variables": {
            reaper.PROJECT_ENV: project, reaper.STACK_ENV: stack, reaper.ACTION_ENV: action,
            reaper.DRY_RUN_ENV: "false", reaper.HARD_STOP_PARAMETER_ENV: hard_stop_parameter(project, stack),
            **({reaper.BUDGET_LIMIT_ENV: f"{budget_limit:.2f}"} if budget_limit is not None else {}),
        }},
        dead_letter_config={"target_arn": queue.arn} if queue else None,
        logging_config={"log_format": "Text", "log_group": logs.name},
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[policy]),
    )
    if alarm_topic is not None:
        errors_alarm(name, function, project=project, stack=stack, purpose=purpose, topic=alarm_topic, tags=tags,
                     parent=parent)
    return function


def reaper_archive() -> pulumi.AssetArchive:
    """The function's package: reaper.py with the stop core (stopcore.py) beside it, which it imports there."""
    return pulumi.AssetArchive({REAPER_FILE: pulumi.FileAsset(reaper.__file__),
                                **{name: pulumi.FileAsset(path) for name, path in STOP_CORE}})


def errors_alarm(name: str, function: aws.lambda_.Function, *, project: str, stack: str, purpose: str,
                 topic: pulumi.Input[str], tags: dict[str, str], parent: pulumi.Resource) -> aws.cloudwatch.MetricAlarm:
    """``{name}-errors``: alarms, and notifies ``topic``, once the function fails at least once in 15 minutes (a
    node it could not stop or judge, a hard stop it could not record or read, a crash). No data is no failure."""
    return aws.cloudwatch.MetricAlarm(
        f"{name}-errors",
        name=f"goldenenv-{name_part(project)}-{stack}-{purpose}-errors",
        alarm_description=(f"goldenenv: the {purpose} function of project {project} stack {stack} failed; its log "
                           f"group /goldenenv/{name_part(project)}/{stack}/{purpose} names the nodes or the error"),
        namespace="AWS/Lambda",
        metric_name="Errors",
        dimensions={"FunctionName": function.name},
        statistic="Sum",
        period=ERRORS_PERIOD_SECONDS,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        comparison_operator="GreaterThanOrEqualToThreshold",
        threshold=1,
        treat_missing_data="notBreaching",
        alarm_actions=[topic],
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


@dataclass(frozen=True, kw_only=True)
class FunctionAlertsArgs:
    stack: str
    project: str
    emails: list[str]
    """Who is told a function failed: the budget's emails (each must confirm AWS's subscription email)."""
    tags: dict[str, str]


class FunctionAlerts(pulumi.ComponentResource):
    """The stack's topic for its functions' Errors alarms, with an email subscription per address, encrypted with a
    key of its own that CloudWatch may use. Not the budget's hard-stop topic, whose subscriber stops every node."""

    topic_arn: pulumi.Output[str]

    def __init__(self, name: str, args: FunctionAlertsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:FunctionAlerts", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        topic, _ = encrypted_topic(
            name, display_name=f"goldenenv alerts {args.stack}",
            key_description=(f"goldenenv: encrypts the function alert topic of stack {args.stack}; CloudWatch may "
                             "use it"),
            key_policy=alert_key_policy, publish_policy=alarms_may_publish, tags=args.tags, parent=self,
            topic_waits_for_key=True,
        )
        for email in dict.fromkeys(args.emails):
            aws.sns.TopicSubscription(f"{name}-email-{email}", topic=topic.arn, protocol="email", endpoint=email,
                                      opts=child)
        self.topic_arn = topic.arn
        self.register_outputs({"topic_arn": topic.arn})


def _partition_and_account(arn: str) -> tuple[str, str]:
    parts = arn.split(":")
    return parts[1], parts[4]


def encrypted_topic(name: str, *, display_name: str, key_description: str, key_policy, publish_policy,
                    tags: dict[str, str], parent: pulumi.Resource,
                    topic_waits_for_key: bool = False) -> tuple[aws.sns.Topic, list[pulumi.Resource]]:
    """An SNS topic ``name`` encrypted with a rotated KMS key of its own (``{name}-key``), whose policy is
    ``key_policy(partition, account)`` (``{name}-key-policy``: the service that publishes may use the key), and the
    topic's policy ``publish_policy(topic_arn, partition, account)`` (``{name}-policy``). Returns the topic and the
    two policies, which whatever publishes to it must wait for."""
    child = pulumi.ResourceOptions(parent=parent)
    key = aws.kms.Key(f"{name}-key", description=key_description, enable_key_rotation=True, tags=tags, opts=child)
    key_policy_resource = aws.kms.KeyPolicy(
        f"{name}-key-policy", key_id=key.id,
        policy=key.arn.apply(lambda arn: json.dumps(key_policy(*_partition_and_account(arn)))), opts=child,
    )
    topic = aws.sns.Topic(
        name, display_name=display_name[:100], kms_master_key_id=key.arn, tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[key_policy_resource]) if topic_waits_for_key else child,
    )
    policy = aws.sns.TopicPolicy(
        f"{name}-policy", arn=topic.arn,
        policy=topic.arn.apply(lambda arn: json.dumps(publish_policy(arn, *_partition_and_account(arn)))), opts=child,
    )
    return topic, [key_policy_resource, policy]


def alarms_may_publish(topic_arn: str, partition: str, account: str) -> dict:
    """The account manages its topic; CloudWatch may publish to it, for this account's alarms only."""
    return service_may_publish(topic_arn, partition, account, CLOUDWATCH_SERVICE, "CloudWatchAlarmsPublish",
                               f"arn:{partition}:cloudwatch:*:{account}:alarm:*")


def alert_key_policy(partition: str, account: str) -> dict:
    """The account administers the key; CloudWatch may encrypt the alarm notifications it publishes to the topic."""
    return service_key_policy(partition, account, CLOUDWATCH_SERVICE, "CloudWatchEncryptsNotifications")


def service_may_publish(topic_arn: str, partition: str, account: str, service: str, sid: str,
                        source_arn: str) -> dict:
    """A topic policy: the account manages its topic; `service` may publish to it, from `source_arn` of this
    account only."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountManagesTopic", "Effect": "Allow",
             "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
             "Action": ["SNS:GetTopicAttributes", "SNS:SetTopicAttributes", "SNS:AddPermission",
                        "SNS:RemovePermission", "SNS:DeleteTopic", "SNS:Subscribe", "SNS:ListSubscriptionsByTopic",
                        "SNS:Publish"],
             "Resource": topic_arn},
            {"Sid": sid, "Effect": "Allow", "Principal": {"Service": service}, "Action": "SNS:Publish",
             "Resource": topic_arn,
             "Condition": {"StringEquals": {"aws:SourceAccount": account}, "ArnLike": {"aws:SourceArn": source_arn}}},
        ],
    }


def service_key_policy(partition: str, account: str, service: str, sid: str) -> dict:
    """A key policy: the account administers the key; `service` may encrypt what it publishes to the topic."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountAdministersKey", "Effect": "Allow",
             "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"}, "Action": "kms:*", "Resource": "*"},
            {"Sid": sid, "Effect": "Allow", "Principal": {"Service": service},
             "Action": ["kms:GenerateDataKey*", "kms:Decrypt"], "Resource": "*"},
        ],
    }


def name_part(text: str) -> str:
    """A tag value made safe for log group and alarm names (letters, digits, '.', '_', '-')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "-"


def hard_stop_parameter(project: str, stack: str) -> str:
    """The SSM parameter the stack's hard stop records its month in (one name per project and stack)."""
    return f"/goldenenv/{name_part(project)}/{stack}/hard-stop"


def reaper_policy(project: str, stack: str, log_group_arn: str, *, records_hard_stop: bool = False,
                  dead_letter_queue_arn: str | None = None) -> dict:
    """List every instance and spot request (EC2 cannot scope Describe), stop or terminate only the instances
    tagged with both this project and this stack, log to its own group; read (and, for the budget's function,
    write) only the stack's hard-stop parameter, and only while it carries the stack's tags; send only to its own
    dead-letter queue."""
    partition = log_group_arn.split(":")[1]
    stack_tags = {"StringEquals": {f"aws:ResourceTag/{reaper.STACK_TAG_KEY}": stack,
                                   f"aws:ResourceTag/{reaper.PROJECT_TAG_KEY}": project}}
    extra = [{"Effect": "Allow", "Action": ["ssm:GetParameter", "ssm:PutParameter"] if records_hard_stop
              else ["ssm:GetParameter"],
              "Resource": f"arn:{partition}:ssm:*:*:parameter{hard_stop_parameter(project, stack)}",
              "Condition": stack_tags}]
    if dead_letter_queue_arn:
        extra.append({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": dead_letter_queue_arn})
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": list(privilege.DESCRIBE_ACTIONS), "Resource": "*"},
            {"Effect": "Allow", "Action": list(privilege.INSTANCE_ACTIONS),
             "Resource": f"arn:{log_group_arn.split(':')[1]}:ec2:*:*:instance/*",  # the stack's partition
             "Condition": {"StringEquals": {f"aws:ResourceTag/{reaper.STACK_TAG_KEY}": stack,
                                            f"aws:ResourceTag/{reaper.PROJECT_TAG_KEY}": project}}},
            {"Effect": "Allow", "Action": list(privilege.LOG_ACTIONS),
             "Resource": f"{log_group_arn}:*"},
            *extra,
        ],
    }


def idle_cpu_threshold(vcpus: int) -> float:
    """The idle alarm's CPU threshold: the stop core's rule on every cloud (stopcore.idle_cpu_percent)."""
    return stopcore.idle_cpu_percent(vcpus)
