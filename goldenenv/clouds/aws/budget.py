"""A monthly cost budget on the stack's tag, with alerts and an optional hard stop."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from goldenenv.clouds.aws.iam import assumed_by

STOP_DOCUMENT = "AWS-StopEC2Instance"


@dataclass(frozen=True, kw_only=True)
class StackBudgetArgs:
    budget_name: str
    monthly_limit_usd: float
    thresholds: list[int]
    emails: list[str]
    tag_key: str
    tag_value: str
    hard_stop: bool
    activate_cost_allocation_tag: bool
    instance_ids: pulumi.Input[list[str]]
    region: str
    tags: dict[str, str]


class StackBudget(pulumi.ComponentResource):
    budget_name: pulumi.Output[str]

    def __init__(self, name: str, args: StackBudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:StackBudget", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.activate_cost_allocation_tag:
            aws.costexplorer.CostAllocationTag(
                f"{name}-cost-tag", tag_key=args.tag_key, status="Active",
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
        budget = aws.budgets.Budget(
            f"{name}-budget",
            name=args.budget_name,
            budget_type="COST",
            limit_amount=f"{args.monthly_limit_usd:.2f}",
            limit_unit="USD",
            time_unit="MONTHLY",
            cost_filters=[{"name": "TagKeyValue", "values": [cost_filter_value(args.tag_key, args.tag_value)]}],
            notifications=[
                {
                    "comparison_operator": "GREATER_THAN",
                    "threshold": threshold,
                    "threshold_type": "PERCENTAGE",
                    "notification_type": kind,
                    "subscriber_email_addresses": args.emails,
                }
                for threshold in sorted(set(args.thresholds))
                for kind in ("ACTUAL", "FORECASTED")
            ],
            tags=args.tags,
            opts=child,
        )
        if args.hard_stop:
            role = self._stop_role(name, args, child)
            aws.budgets.BudgetAction(
                f"{name}-hard-stop",
                budget_name=budget.name,
                action_type="RUN_SSM_DOCUMENTS",
                approval_model="AUTOMATIC",
                notification_type="ACTUAL",
                action_threshold={"action_threshold_type": "PERCENTAGE", "action_threshold_value": 100},
                definition={"ssm_action_definition": {
                    "action_sub_type": "STOP_EC2_INSTANCES",
                    "instance_ids": args.instance_ids,
                    "region": args.region,
                }},
                execution_role_arn=role.arn,
                subscribers=[{"address": e, "subscription_type": "EMAIL"} for e in args.emails],
                tags=args.tags,
                opts=child,
            )
        self.budget_name = budget.name
        self.register_outputs({"budget_name": budget.name})

    @staticmethod
    def _stop_role(name: str, args: StackBudgetArgs, child: pulumi.ResourceOptions) -> aws.iam.Role:
        """Budgets may stop this stack's instances (by tag) through SSM, and do nothing else."""
        role = aws.iam.Role(
            f"{name}-stop-role",
            assume_role_policy=assumed_by("budgets.amazonaws.com"),
            tags=args.tags, opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-stop-policy", role=role.id,
            policy=json.dumps({
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": "ec2:StopInstances", "Resource": "*",
                     "Condition": {"StringEquals": {f"aws:ResourceTag/{args.tag_key}": args.tag_value}}},
                    {"Effect": "Allow", "Action": "ec2:DescribeInstanceStatus", "Resource": "*"},
                    {"Effect": "Allow", "Action": "ssm:StartAutomationExecution",
                     "Resource": f"arn:aws:ssm:{args.region}::automation-definition/{STOP_DOCUMENT}:*"},
                ],
            }),
            opts=child,
        )
        return role


def cost_filter_value(tag_key: str, tag_value: str) -> str:
    """AWS Budgets' TagKeyValue filter form for a user-defined cost allocation tag."""
    return f"user:{tag_key}${tag_value}"
