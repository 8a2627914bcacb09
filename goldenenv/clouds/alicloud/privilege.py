"""What each Alibaba Cloud identity goldenenv creates needs (least privilege as data), and the judge of its grants.

One row per kind of RAM role, by the component that creates it. Actions are read from the RAM authorization
reference of each service (help.aliyun.com/zh/ram/developer-reference/ram-authorization: ECS, OSS, KMS, NAS, BSS
OpenAPI, DirectMail, Log Service); ECS and NAS Describe calls take no resource-level scope (Resource "*").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from goldenenv.privilege import Need, component_chain, first, statement_problems, trust_problems

RAM_REFERENCE = "https://help.aliyun.com/zh/ram/developer-reference/ram-authorization"
SYSTEM_POLICIES = "https://help.aliyun.com/zh/ram/user-guide/system-policy-reference"

BUCKET_LIST_ACTIONS = ("oss:ListObjects", "oss:GetBucketInfo")
"""On the bucket itself."""
OBJECT_ACTIONS = ("oss:GetObject", "oss:PutObject", "oss:DeleteObject", "oss:AbortMultipartUpload", "oss:ListParts")
"""On the bucket's objects: datasets in, checkpoints out."""
BUCKET_ACTIONS = BUCKET_LIST_ACTIONS + OBJECT_ACTIONS
NODE_SECRET_ACTIONS = ("kms:GetSecretValue",)
"""What a node may do with the stack's munge key secret (RAM authorization for KMS): read it, nothing else."""
HEAD_SECRET_ACTIONS = ("kms:GetSecretValue", "kms:ListSecretVersionIds", "kms:PutSecretValue")
MOUNT_ACTIONS = ("nas:DescribeProtocolMountTarget",)
"""What a host's RAM role needs to mount CPFS: the export's domain is looked up at boot."""
BILL_ACTIONS = ("bssapi:DescribeSplitItemBill",)
DESCRIBE_ACTIONS = ("ecs:DescribeInstances", "ecs:DescribeSecurityGroups")
"""ECS cannot scope Describe calls: Resource "*"."""
TAG_ACTIONS = ("ecs:TagResources",)
STOP_ACTIONS = ("ecs:StopInstances",)
MAIL_ACTIONS = ("dm:SingleSendMail",)
LOG_ACTIONS = ("log:PostLogStoreLogs",)
GUARD_UNSCOPED = BILL_ACTIONS + DESCRIBE_ACTIONS + MAIL_ACTIONS
GUARD_ACTIONS = GUARD_UNSCOPED + TAG_ACTIONS + STOP_ACTIONS + LOG_ACTIONS
"""The budget guard: read the split bill, find the stack's instances and security groups, stop the instances and
tag the groups (both only with the stack's tags), send mail and write its logstore when configured."""

NEEDS: dict[str, Need] = {
    "node": Need("the GPU nodes' RAM role", frozenset(BUCKET_ACTIONS + NODE_SECRET_ACTIONS + MOUNT_ACTIONS),
                 unscoped=frozenset(MOUNT_ACTIONS), scope="the stack's bucket and munge secret",
                 sources=(RAM_REFERENCE,)),
    "head": Need("the Slurm head's RAM role", frozenset(HEAD_SECRET_ACTIONS + MOUNT_ACTIONS),
                 unscoped=frozenset(MOUNT_ACTIONS), scope="the stack's munge secret", sources=(RAM_REFERENCE,)),
    "stop": Need("the budget guard's RAM role", frozenset(GUARD_ACTIONS), unscoped=frozenset(GUARD_UNSCOPED),
                 scope="the stack's tagged instances and security groups, its logstore",
                 sources=(RAM_REFERENCE,)),
}

ROLE = "alicloud:ram/role:Role"
POLICY = "alicloud:ram/policy:Policy"
ATTACHMENT = "alicloud:ram/rolePolicyAttachment:RolePolicyAttachment"


def kind_of(role: Any) -> str | None:
    chain = component_chain(role.urn)
    if "goldenenv:alicloud:GpuNodePool" in chain:
        return "node"
    if "goldenenv:alicloud:SlurmHead" in chain:
        return "head"
    if "goldenenv:alicloud:BudgetGuard" in chain:
        return "stop"
    return None


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def judge(resource: Any, ctx: Any) -> Iterator[str]:
    """grant-broader-than-needed on Alibaba Cloud: the stack's RAM roles' trust policies and every policy attached
    to them."""
    if resource.type == ROLE:
        for problem in first(trust_problems(resource.props.get("assumeRolePolicyDocument"))):
            yield (f"{_label(resource)} {problem}: only the Alibaba Cloud service it exists for (ecs, fc) may assume "
                   f"a role the stack creates.")
        return
    if resource.type != ATTACHMENT:
        return
    role_name = resource.props.get("roleName")
    role = next((r for r in ctx.resources if r.type == ROLE and r.props.get("roleName") == role_name), None)
    need = NEEDS.get(kind_of(role) or "") if role is not None else None
    who = need.identity if need else f"RAM role {role_name!r}"
    policy_name = resource.props.get("policyName")
    if str(resource.props.get("policyType", "")).lower() == "system":
        yield (f"{_label(resource)} attaches the system policy {policy_name} to {who}: a system policy grants a "
               f"whole service or account, far more than it needs"
               + (f", which is {need.describe()}." if need else "."))
        return
    if need is None:
        yield (f"{_label(resource)} grants to {who}, which has no row in the least-privilege table "
               f"(goldenenv/clouds/alicloud/privilege.py NEEDS): say what it needs there.")
        return
    policy = next((p for p in ctx.resources if p.type == POLICY and p.props.get("policyName") == policy_name), None)
    if policy is None:
        yield (f"{_label(resource)} attaches {policy_name!r} to {who}, a policy the stack does not plan (it cannot be "
               f"judged); it needs {need.describe()}.")
        return
    problems = first(statement_problems(policy.props.get("policyDocument"), need))
    if problems:
        yield (f"{_label(resource)} gives {who} {policy_name!r}, allowing {'; '.join(problems)}: more than it "
               f"needs, which is {need.describe()}.")
