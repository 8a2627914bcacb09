"""What each AWS identity goldenenv creates needs (least privilege as data), and the judge of its grants.

One row per kind of IAM role, by the component that creates it. The actions are those the role's code or boot calls,
read from the AWS Service Authorization Reference (docs.aws.amazon.com/service-authorization/latest/reference/
reference_policies_actions-resources-contextkeys.html); "unscoped" actions are the ones whose row there lists no
resource type (Describe calls), which is why they may take Resource "*". Managed policies are named by ARN from the
AWS managed policy reference (docs.aws.amazon.com/aws-managed-policy/latest/reference/policy-list.html).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.privilege import Need, component_chain, first, referenced, statement_problems, trust_problems

SERVICE_AUTHORIZATION = ("https://docs.aws.amazon.com/service-authorization/latest/reference/"
                         "reference_policies_actions-resources-contextkeys.html")
MANAGED_POLICIES = "https://docs.aws.amazon.com/aws-managed-policy/latest/reference/policy-list.html"

SSM_CORE = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
"""Session Manager on the host (docs.aws.amazon.com/systems-manager/latest/userguide/
setup-instance-permissions.html)."""
ECR_READ_ONLY = "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"
"""Pull the golden image from the stack's ECR repository (docs.aws.amazon.com/AmazonECR/latest/userguide/
ECR_on_EC2.html)."""

NODE_MANAGED_POLICIES = (SSM_CORE, ECR_READ_ONLY)
BUCKET_LIST_ACTIONS = ("s3:ListBucket", "s3:GetBucketLocation")
"""On the bucket itself."""
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
"""On the bucket's objects (bucket/*): datasets in, checkpoints out."""
NODE_SECRET_ACTIONS = ("secretsmanager:GetSecretValue",)
HEAD_SECRET_ACTIONS = ("secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue",
                       "secretsmanager:PutSecretValue")
"""What Secrets Manager needs of each host (API reference, "Actions, resources, and condition keys for AWS Secrets
Manager"): the head describes the secret (does it hold a value?), writes its first version and reads it."""
NODE_KEY_ACTIONS = ("kms:Decrypt",)
HEAD_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")
"""What Secrets Manager asks of the caller's KMS permissions for a secret under a customer managed key (Secrets
Manager user guide, "Secret encryption and decryption"): GenerateDataKey to write a version, Decrypt to read one."""
DESCRIBE_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests")
"""EC2 Describe calls support no resource-level permissions: Resource "*" is the only form."""
INSTANCE_ACTIONS = ("ec2:StopInstances", "ec2:TerminateInstances")
"""On instances carrying the stack's tags only (a condition on aws:ResourceTag)."""
LOG_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")
STOP_ACTIONS = DESCRIBE_ACTIONS + INSTANCE_ACTIONS + LOG_ACTIONS + ("ssm:GetParameter", "ssm:PutParameter",
                                                                    "sqs:SendMessage")
"""The hard stop: find the stack's instances, stop on-demand and terminate spot ones (by the stack's tags), write its
log, read and record the month it is in force for (SSM parameter), dead-letter a failed event (SQS)."""
REAPER_ACTIONS = DESCRIBE_ACTIONS + INSTANCE_ACTIONS + LOG_ACTIONS + ("ssm:GetParameter",)

NEEDS: dict[str, Need] = {
    "node": Need("the GPU nodes' role",
                 frozenset(BUCKET_LIST_ACTIONS + OBJECT_ACTIONS + NODE_SECRET_ACTIONS + NODE_KEY_ACTIONS),
                 frozenset(NODE_MANAGED_POLICIES), scope="the stack's bucket, munge secret and key",
                 sources=(SERVICE_AUTHORIZATION, MANAGED_POLICIES)),
    "head": Need("the Slurm head's role", frozenset(HEAD_SECRET_ACTIONS + HEAD_KEY_ACTIONS),
                 frozenset(NODE_MANAGED_POLICIES),
                 scope="the stack's munge secret and key", sources=(SERVICE_AUTHORIZATION, MANAGED_POLICIES)),
    "stop": Need("the hard stop function's role", frozenset(STOP_ACTIONS), unscoped=frozenset(DESCRIBE_ACTIONS),
                 scope="the stack's tagged instances, its log group, parameter and dead-letter queue",
                 sources=(SERVICE_AUTHORIZATION,)),
    "reaper": Need("the teardown reaper's role", frozenset(REAPER_ACTIONS), unscoped=frozenset(DESCRIBE_ACTIONS),
                   scope="the stack's tagged instances, its log group and parameter", sources=(SERVICE_AUTHORIZATION,)),
    "reaper-schedule": Need("the teardown schedule's role", frozenset({"lambda:InvokeFunction"}),
                            scope="the reaper function", sources=(SERVICE_AUTHORIZATION,)),
}

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
MANAGED_POLICY = "aws:iam/policy:Policy"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"


def kind_of(role: Any) -> str | None:
    """The table's row for a planned role, by the component that creates it."""
    chain = component_chain(role.urn)
    if "goldenenv:aws:GpuNodePool" in chain:
        return "node"
    if "goldenenv:aws:SlurmHead" in chain:
        return "head"
    if "goldenenv:aws:StackBudget" in chain:
        return "stop"
    if "goldenenv:aws:AutoTeardown" in chain:
        return "reaper-schedule" if role.name.endswith("-schedule-role") else "reaper"
    return None


def _role_named(value: Any, ctx: Any) -> Any:
    if value is None:
        return None
    for role in ctx.resources:
        if role.type == ROLE and value in {role.id, role.name, role.props.get("name"), role.outputs.get("name"),
                                           role.outputs.get("arn")}:
            return role
    return None


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def _managed_problem(resource: Any, arn: str, need: Need | None, who: str) -> Iterator[str]:
    if need is None or arn not in need.roles:
        what = need.describe() if need else "a row in goldenenv/clouds/aws/privilege.py NEEDS"
        yield (f"{_label(resource)} attaches {arn} to {need.identity if need else who}, which the least-privilege "
               f"table does not list for it (a managed policy grants far more than the stack uses); it needs {what}.")


def _check_role(role: Any) -> Iterator[str]:
    """A role's own trust policy, and the policies it carries inline (inlinePolicies, managedPolicyArns)."""
    for problem in first(trust_problems(role.props.get("assumeRolePolicy"))):
        yield (f"{_label(role)} {problem}: only the AWS service it exists for (ec2, lambda, scheduler) may assume a "
               f"role the stack creates.")
    need = NEEDS.get(kind_of(role) or "")
    for arn in role.props.get("managedPolicyArns") or ():
        yield from _managed_problem(role, str(arn), need, f"role {role.name!r}")
    for inline in role.props.get("inlinePolicies") or ():
        policy = inline.get("policy") if isinstance(inline, dict) else None
        if need is None:
            yield f"{_label(role)} carries an inline policy but has no row in the least-privilege table."
            continue
        problems = first(statement_problems(policy, need))
        if problems:
            yield (f"{_label(role)} carries an inline policy granting {need.identity} {'; '.join(problems)}: more "
                   f"than it needs, which is {need.describe()}.")


def judge(resource: Any, ctx: Any) -> Iterator[str]:
    """grant-broader-than-needed on AWS: the stack's roles' trust policies, inline policies and managed policy
    attachments."""
    if resource.type == ROLE:
        yield from _check_role(resource)
        return
    if resource.type == POLICY_ATTACHMENT:
        for name in resource.props.get("roles") or ():
            role = _role_named(name, ctx)
            need = NEEDS.get(kind_of(role) or "") if role is not None else None
            yield from _managed_problem(resource, str(resource.props.get("policyArn", "")), need, f"role {name!r}")
        for group in ("users", "groups"):
            if resource.props.get(group):
                yield (f"{_label(resource)} attaches {resource.props.get('policyArn')} to {group} as well: the "
                       f"stack grants its roles only, never people.")
        return
    if resource.type not in (ROLE_POLICY, ATTACHMENT):
        return
    role = _role_named(resource.props.get("role"), ctx) or referenced(resource, "role", ctx.resources, (ROLE,))
    if role is None and resource.props.get("role") is None:
        return  # a role not known yet (a preview) and named by no planned resource: nothing to judge
    kind = kind_of(role) if role is not None else None
    need = NEEDS.get(kind) if kind else None
    who = need.identity if need else f"role {resource.props.get('role')!r}"
    if resource.type == ATTACHMENT:
        yield from _managed_problem(resource, str(resource.props.get("policyArn", "")), need, who)
        return
    if need is None:
        yield (f"{_label(resource)} grants to {who}, which has no row in the least-privilege table "
               f"(goldenenv/clouds/aws/privilege.py NEEDS): say what it needs there.")
        return
    problems = first(statement_problems(resource.props.get("policy"), need))
    if problems:
        yield (f"{_label(resource)} grants {who} {'; '.join(problems)}: more than it needs, which is "
               f"{need.describe()}.")
