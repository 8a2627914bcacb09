"""A monthly cost budget on the stack's tag, with alerts and an optional hard stop.

One notification per alert threshold on actual spend (alertThresholds) and one per threshold on forecast spend
(forecastThresholds, by default only 100 %: the month is on course to pass the limit). AWS Budgets caps the
notifications of a budget (limits.BUDGET_NOTIFICATIONS) and refuses two of one threshold and type; the defaults
make four: 50, 80 and 100 % actual, 100 % forecast.

The hard stop is the stack's own function, not a budget action: AWS Budgets' STOP_EC2_INSTANCES action takes at
most 100 instance ids and cannot stop one-time spot instances. Instead the budget's 100 % ACTUAL notification
publishes to an SNS topic of the stack, whose subscriber is a Lambda function running goldenenv/clouds/aws/reaper.py:
it stops every node of the stack (project and stack tags), terminates the one-time spot ones, in calls of at most
1,000 ids.

Budgets notifies once a month, so the function first records the month in an SSM parameter of the stack
(teardown.hard_stop_parameter, created here with the value ``none``; the function's writes are kept by later
ups). The reaper's schedule reads it and, while it holds the current month, stops every running or pending node,
so a node pending at the stop, or started again after it, is stopped within 15 minutes; the stop ends with the
month, or when the parameter is set back to ``none`` (after raising the budget). A stack with a hard stop has
that schedule even without a time to live (teardown.AutoTeardown), there only to repeat the hard stop. An
invocation that fails every retry leaves its event in an encrypted dead-letter queue, and a failed invocation
sets off the function's Errors alarm, which emails the budget's addresses through the stack's alert topic
(teardown.FunctionAlerts; never this topic, whose subscriber stops every node).

The budget filters on the stack tag, which AWS counts only once it is an active cost allocation tag. That is an
account-level step (the plan says how), not a resource of the stack: AWS lists a tag for activation
only about 24 h after its first use, so a resource created alongside the first tagged resources would fail, and a
linked (member) account cannot activate tags at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from goldenenv.clouds.aws import reaper
from goldenenv.clouds.aws.budget_kinds import ACTUAL, HARD_STOP_PERCENT, notification_kinds
from goldenenv.clouds.aws.teardown import (encrypted_topic, hard_stop_parameter, reaper_function,
                                          service_key_policy, service_may_publish)

BUDGETS_SERVICE = "budgets.amazonaws.com"


@dataclass(frozen=True, kw_only=True)
class StackBudgetArgs:
    budget_name: str
    monthly_limit_usd: float
    thresholds: list[int]
    """Percent of the limit at which actual spend alerts (the spec's alertThresholds)."""
    forecast_thresholds: list[int]
    """Percent of the limit at which forecast spend alerts (the spec's forecastThresholds)."""
    emails: list[str]
    tag_key: str
    tag_value: str
    """The stack tag's value: the stack's name, which also selects the nodes the hard stop acts on."""
    project: str
    """The project tag: with the stack it selects the nodes, since two projects may each have a stack 'dev'."""
    hard_stop: bool
    alarm_topic: pulumi.Input[str] | None = None
    """The ARN of the topic the hard-stop function's Errors alarm notifies (teardown.FunctionAlerts)."""
    tags: dict[str, str]


class StackBudget(pulumi.ComponentResource):
    budget_name: pulumi.Output[str]
    hard_stop_function: pulumi.Output[str] | None

    def __init__(self, name: str, args: StackBudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:StackBudget", name, None, opts)
        topic, ready, function = (self._hard_stop(name, args) if args.hard_stop else (None, [], None))
        budget = aws.budgets.Budget(
            f"{name}-budget",
            name=args.budget_name,
            budget_type="COST",
            limit_amount=f"{args.monthly_limit_usd:.2f}",
            limit_unit="USD",
            time_unit="MONTHLY",
            cost_filters=[{"name": "TagKeyValue", "values": [cost_filter_value(args.tag_key, args.tag_value)]}],
            notifications=notifications(args.thresholds, args.forecast_thresholds, args.emails,
                                        topic.arn if topic else None),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
        )
        self.budget_name = budget.name
        self.hard_stop_function = function.name if function else None
        self.register_outputs({"budget_name": budget.name, "hard_stop_function": self.hard_stop_function})

    def _hard_stop(self, name: str, args: StackBudgetArgs) -> tuple[aws.sns.Topic, list[pulumi.Resource],
                                                                     aws.lambda_.Function]:
        """The topic the budget publishes to at 100 %, encrypted with a key Budgets may use, and the function
        it invokes. Returns the topic, what the budget must wait for, and the function."""
        child = pulumi.ResourceOptions(parent=self)
        topic, policies = encrypted_topic(
            f"{name}-hard-stop", display_name=f"goldenenv hard stop {args.tag_value}",
            key_description=(f"goldenenv: encrypts the hard-stop topic of stack {args.tag_value}; AWS Budgets may "
                             "use it"),
            key_policy=topic_key_policy, publish_policy=budgets_may_publish, tags=args.tags, parent=self,
        )
        state = aws.ssm.Parameter(
            f"{name}-hard-stop-state", name=hard_stop_parameter(args.project, args.tag_value), type="String",
            value=reaper.NO_HARD_STOP,
            description=(f"goldenenv: the month (UTC) the hard stop of stack {args.tag_value} is in force for, "
                         f"written by its function; {reaper.NO_HARD_STOP!r} while none is"),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["value"]),
        )
        function = reaper_function(
            f"{name}-hard-stop-fn", project=args.project, stack=args.tag_value, action="stop", purpose="hard-stop",
            description=(f"goldenenv: hard stop of project {args.project} stack {args.tag_value}: stop every node "
                         "(terminate one-time spot) once actual spend passes the monthly budget"),
            tags=args.tags, parent=self, records_hard_stop=True, dead_letter_queue=True, alarm_topic=args.alarm_topic,
            budget_limit=args.monthly_limit_usd,
        )
        permission = aws.lambda_.Permission(
            f"{name}-hard-stop-invoke", action="lambda:InvokeFunction", function=function.name,
            principal="sns.amazonaws.com", source_arn=topic.arn, opts=child,
        )
        subscription = aws.sns.TopicSubscription(
            f"{name}-hard-stop-subscription", topic=topic.arn, protocol="lambda", endpoint=function.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[permission]),
        )
        return topic, [*policies, subscription, state], function


def notifications(actual: Iterable[int], forecast: Iterable[int], emails: list[str],
                  hard_stop_topic: pulumi.Input[str] | None) -> list[dict]:
    """The budget's notifications (notification_kinds), each to the emails; with a hard stop, the 100 % ACTUAL
    one also publishes to the hard-stop topic."""
    result = []
    for threshold, kind in notification_kinds(actual, forecast, hard_stop_topic is not None):
        notification = {
            "comparison_operator": "GREATER_THAN",
            "threshold": threshold,
            "threshold_type": "PERCENTAGE",
            "notification_type": kind,
            "subscriber_email_addresses": emails,
        }
        if hard_stop_topic is not None and (threshold, kind) == (HARD_STOP_PERCENT, ACTUAL):
            notification["subscriber_sns_topic_arns"] = [hard_stop_topic]
        result.append(notification)
    return result


def budgets_may_publish(topic_arn: str, partition: str, account: str) -> dict:
    """The topic policy AWS documents for budget notifications: Budgets may publish, for this account only;
    the account keeps managing its own topic."""
    return service_may_publish(topic_arn, partition, account, BUDGETS_SERVICE, "AWSBudgetsSNSPublishingPermissions",
                               f"arn:{partition}:budgets::{account}:*")


def topic_key_policy(partition: str, account: str) -> dict:
    """The account administers the key; Budgets may encrypt what it publishes to the topic. The AWS managed SNS
    key (alias/aws/sns) cannot be used: its policy cannot grant a service such as Budgets."""
    return service_key_policy(partition, account, BUDGETS_SERVICE, "BudgetsEncryptsNotifications")


def cost_filter_value(tag_key: str, tag_value: str) -> str:
    """AWS Budgets' TagKeyValue filter form for a user-defined cost allocation tag."""
    return f"user:{tag_key}${tag_value}"

