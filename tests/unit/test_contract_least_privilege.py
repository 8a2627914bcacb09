"""Least privilege as a contract: every identity a component creates holds what its cloud's table says it needs.

One mutation table over every cloud x shipped stack (tests/unit/shipped.py), like test_guardrail_mutations: each
stack is planned once for the module, each row copies its resources, widens one grant the way a reviewer would refuse
(Owner, Contributor, User Access Administrator or roles/editor for a node or the stop function, a wildcard or
setIamPolicy in a custom role, a node on the default compute service account, a grant to everyone, AWS `*`,
`ec2:*`, `iam:*`, `Resource: "*"`, AdministratorAccess or PowerUserAccess, Alibaba `Action: "*"` or
AdministratorAccess) and expects grant-broader-than-needed to name the resource, as an error. A row is written once
over a cloud adapter, and the first ten rows run on every cloud: each cloud has identities, roles and scopes to widen.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudfolder
import pytest
import shipped
import yaml
from test_guardrail_mutations import Plan

from goldenenv import guardrails
from goldenenv.clouds.alicloud import privilege as alicloud_privilege
from goldenenv.clouds.aws import privilege as aws_privilege
from goldenenv.clouds.azure import budget as azure_budget
from goldenenv.clouds.azure import privilege as azure_privilege
from goldenenv.clouds.gcp import budget as gcp_budget
from goldenenv.clouds.gcp import privilege as gcp_privilege
from goldenenv.guardrails import PlannedResource, Severity

RULE = "grant-broader-than-needed"
STACKS = shipped.STACKS
CASES = shipped.pulumi_stacks()


def _in(resource: PlannedResource, component: str) -> bool:
    parts = resource.urn.split("::")
    return component in parts[2].split("$")[:-1]


# ---------------------------------------------------------------- what each cloud's grants look like


class Cloud:
    """How grants look on one provider, for a cloud that builds on it (its component types carry the cloud's name)."""

    name: str
    """The adapter's name, which TABLE's rows list (Row.clouds)."""
    provider: str
    """The provider the adapter knows the grants of (cloudfolder.provider)."""
    admin: dict[str, str]
    """"owner", "editor", "access-admin" -> the cloud's broad role of that kind."""
    stop_needs_hard_stop = False
    """True where the provider's budget alerts by itself, so a stop function is planned only with budget.hardStop
    (AWS Budgets, Tencent's billing budget); otherwise the budget is the stop function and every stack plans one."""

    def __init__(self, cloud: str):
        self.cloud = cloud

    def grant(self, plan: Plan, who: str, role: str) -> None: ...
    def custom_action(self, plan: Plan, action: str) -> None: ...
    def to_everyone(self, plan: Plan) -> None: ...
    def wider_scope(self, plan: Plan) -> None: ...
    def unscoped_resource(self, plan: Plan) -> None: ...


def _policy_with(document: Any, statement: dict) -> str:
    parsed = json.loads(document) if isinstance(document, str) else dict(document)
    parsed["Statement"] = [*parsed["Statement"], statement]
    return json.dumps(parsed)


class Aws(Cloud):
    """IAM roles: a managed policy attached, or a statement added to a role's inline policy; everyone is a trust
    policy any AWS principal may assume."""

    name, provider = "aws", "aws"
    stop_needs_hard_stop = True
    admin = {"owner": "arn:aws:iam::aws:policy/AdministratorAccess",
             "editor": "arn:aws:iam::aws:policy/PowerUserAccess",
             "access-admin": "arn:aws:iam::aws:policy/IAMFullAccess"}

    def role(self, plan: Plan, who: str) -> PlannedResource:
        component = {"node": f"goldenenv:{self.cloud}:GpuNodePool", "function": f"goldenenv:{self.cloud}:StackBudget"}[who]
        return next(r for r in plan.of(aws_privilege.ROLE) if _in(r, component))

    def grant(self, plan, who, role):
        plan.add(aws_privilege.ATTACHMENT, "widened-attachment",
                 {"role": self.role(plan, who).name, "policyArn": self.admin[role]})

    def custom_action(self, plan, action):
        node_role = self.role(plan, "node")
        policy = next(r for r in plan.of(aws_privilege.ROLE_POLICY) if r.props.get("role") == node_role.id)
        plan.set(policy, policy=_policy_with(policy.props["policy"],
                                             {"Effect": "Allow", "Action": action, "Resource": "*"}))

    def to_everyone(self, plan):
        plan.set(self.role(plan, "node"), assumeRolePolicy=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}))

    def wider_scope(self, plan):
        node_role = self.role(plan, "node")
        policy = next(r for r in plan.of(aws_privilege.ROLE_POLICY) if r.props.get("role") == node_role.id
                      and "s3:GetObject" in r.props["policy"])
        document = json.loads(policy.props["policy"])
        for statement in document["Statement"]:
            statement["Resource"] = "*"
        plan.set(policy, policy=json.dumps(document))

    def unscoped_resource(self, plan):
        self.wider_scope(plan)


class Alicloud(Cloud):
    """RAM roles: a system policy attached, or a statement added to the role's custom policy; everyone is a trust
    policy any Alibaba Cloud account may assume."""

    name, provider = "alicloud", "alicloud"
    admin = {"owner": "AdministratorAccess", "editor": "AliyunECSFullAccess", "access-admin": "AliyunRAMFullAccess"}

    def role(self, plan: Plan, who: str) -> PlannedResource:
        component = {"node": f"goldenenv:{self.cloud}:GpuNodePool", "function": f"goldenenv:{self.cloud}:BudgetGuard"}[who]
        return next(r for r in plan.of(alicloud_privilege.ROLE) if _in(r, component))

    def grant(self, plan, who, role):
        plan.add(alicloud_privilege.ATTACHMENT, "widened-attachment", {
            "roleName": self.role(plan, who).props["roleName"], "policyType": "System",
            "policyName": self.admin[role]})

    def _node_policy(self, plan: Plan) -> PlannedResource:
        name = self.role(plan, "node").props["roleName"]
        return next(r for r in plan.of(alicloud_privilege.POLICY) if r.props["policyName"] == name)

    def custom_action(self, plan, action):
        policy = self._node_policy(plan)
        plan.set(policy, policyDocument=_policy_with(policy.props["policyDocument"],
                                                     {"Effect": "Allow", "Action": [action], "Resource": ["*"]}))

    def to_everyone(self, plan):
        plan.set(self.role(plan, "node"), assumeRolePolicyDocument=json.dumps({"Version": "1", "Statement": [
            {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"RAM": ["*"]}}]}))

    def wider_scope(self, plan):
        policy = self._node_policy(plan)
        document = json.loads(policy.props["policyDocument"])
        for statement in document["Statement"]:
            statement["Resource"] = ["*"]
        plan.set(policy, policyDocument=json.dumps(document))

    def unscoped_resource(self, plan):
        self.wider_scope(plan)


class Tencent(Cloud):
    """CAM roles: a preset policy attached, or a statement added to the role's custom policy; everyone is a trust
    document any principal may assume."""

    name, provider = "tencent", "tencentcloud"
    stop_needs_hard_stop = True
    admin = {"owner": "AdministratorAccess", "editor": "QcloudCVMFullAccess", "access-admin": "QcloudCamFullAccess"}

    def _privilege(self) -> Any:
        return cloudfolder.module(self.cloud, "privilege")

    def role(self, plan: Plan, who: str) -> PlannedResource:
        component = {"node": f"goldenenv:{self.cloud}:GpuNodePool", "function": f"goldenenv:{self.cloud}:BudgetGuard"}[who]
        return next(r for r in plan.of(self._privilege().ROLE) if _in(r, component))

    def grant(self, plan, who, role):
        plan.add(self._privilege().ATTACHMENT, "widened-attachment", {
            "roleId": self.role(plan, who).id, "policyId": self.admin[role]})

    def _node_policy(self, plan: Plan) -> PlannedResource:
        return next(r for r in plan.of(self._privilege().POLICY) if _in(r, f"goldenenv:{self.cloud}:GpuNodePool"))

    def custom_action(self, plan, action):
        policy = self._node_policy(plan)
        document = json.loads(policy.props["document"])
        document["statement"].append({"effect": "allow", "action": [action], "resource": ["*"]})
        plan.set(policy, document=json.dumps(document))

    def to_everyone(self, plan):
        plan.set(self.role(plan, "node"), document=json.dumps({"version": "2.0", "statement": [
            {"effect": "allow", "action": "name/sts:AssumeRole", "principal": {"qcs": ["*"]}}]}))

    def wider_scope(self, plan):
        policy = self._node_policy(plan)
        document = json.loads(policy.props["document"])
        for statement in document["statement"]:
            statement["resource"] = ["*"]
        plan.set(policy, document=json.dumps(document))

    def unscoped_resource(self, plan):
        self.wider_scope(plan)


class Huawei(Cloud):
    """IAM agencies: a system role added to the agency's project roles, or a statement added to the agency's custom
    policy (iam.Role); everyone is the agency delegated to another account (delegated_domain_name)."""

    name, provider = "huawei", "huaweicloud"
    admin = {"owner": "Tenant Administrator", "editor": "ECS FullAccess", "access-admin": "Security Administrator"}
    """Huawei's system roles of each kind (IAM's system-defined roles; names as IAM's console lists them)."""

    AGENCY, ROLE = "huaweicloud:Iam/agency:Agency", "huaweicloud:Iam/role:Role"

    def _component(self, who: str) -> str:
        return {"node": f"goldenenv:{self.cloud}:GpuNodePool", "function": f"goldenenv:{self.cloud}:BudgetGuard",
                "stop": f"goldenenv:{self.cloud}:BudgetGuard"}[who]

    def role(self, plan: Plan, who: str) -> PlannedResource:
        return next(r for r in plan.of(self.AGENCY) if _in(r, self._component(who)))

    def grant(self, plan, who, role):
        agency = self.role(plan, who)
        projects = [dict(p) for p in agency.props["projectRoles"]]
        projects[0]["roles"] = [*projects[0]["roles"], self.admin[role]]
        plan.set(agency, projectRoles=projects)

    def _node_policy(self, plan: Plan) -> PlannedResource:
        return next(r for r in plan.of(self.ROLE) if _in(r, self._component("node")))

    def custom_action(self, plan, action):
        policy = self._node_policy(plan)
        plan.set(policy, policy=_policy_with(policy.props["policy"],
                                             {"Effect": "Allow", "Action": [action], "Resource": ["*"]}))

    def to_everyone(self, plan):
        plan.set(self.role(plan, "node"), delegatedDomainName="any-other-account")

    def wider_scope(self, plan):
        policy = self._node_policy(plan)
        document = json.loads(policy.props["policy"])
        for statement in document["Statement"]:
            statement["Resource"] = ["*"]
        plan.set(policy, policy=json.dumps(document))

    def unscoped_resource(self, plan):
        self.wider_scope(plan)


class Gcp(Cloud):
    """Service accounts: a project-level IAM member; a custom role's permissions; everyone is allUsers or
    allAuthenticatedUsers on any resource's IAM."""

    name, provider = "gcp", "gcp"
    admin = {"owner": "roles/owner", "editor": "roles/editor", "access-admin": "roles/iam.securityAdmin"}

    def member(self, plan: Plan, who: str) -> str:
        component = {"node": f"goldenenv:{self.cloud}:GpuNodePool", "function": f"goldenenv:{self.cloud}:BudgetStop"}[who]
        account = next(r for r in plan.of(gcp_privilege.ACCOUNT) if _in(r, component)
                       and not r.name.endswith("-trigger-sa"))
        return f"serviceAccount:{account.outputs['email']}"

    def grant(self, plan, who, role):
        plan.add("gcp:projects/iAMMember:IAMMember", "widened-member",
                 {"project": "goldenenv-plan-000000", "role": self.admin[role], "member": self.member(plan, who)})

    def custom_action(self, plan, action):
        role = next(r for r in plan.of(gcp_privilege.CUSTOM_ROLE) if _in(r, f"goldenenv:{self.cloud}:BudgetStop"))
        plan.set(role, permissions=[*role.props["permissions"], action])

    def to_everyone(self, plan):
        plan.add("gcp:pubsub/topicIAMMember:TopicIAMMember", "everyone-publishes",
                 {"topic": "t", "role": "roles/pubsub.publisher", "member": "allAuthenticatedUsers"})

    def wider_scope(self, plan):
        plan.add("gcp:projects/iAMMember:IAMMember", "project-wide-objects",
                 {"project": "goldenenv-plan-000000", "role": "roles/storage.objectUser",
                  "member": self.member(plan, "node")})

    def unscoped_resource(self, plan):
        self.wider_scope(plan)


class Azure(Cloud):
    """Managed identities: a role assignment to the identity's principal; a custom role's actions; a broader
    principal is one the stack does not create."""

    name, provider = "azure", "azure-native"
    admin = {"owner": "Owner", "editor": "Contributor", "access-admin": "User Access Administrator"}

    def principal(self, plan: Plan, who: str) -> str:
        if who == "node":
            identity = next(r for r in plan.of(azure_privilege.IDENTITY) if r.name.endswith("-gpu-identity"))
            return identity.outputs["principalId"]
        app = next(r for r in plan.of(azure_privilege.FUNCTION_APP) if _in(r, f"goldenenv:{self.cloud}:BudgetStop"))
        return app.outputs["identity"]["principalId"]

    def _assign(self, plan: Plan, name: str, role_id: str, principal: str, scope: str) -> None:
        plan.add(azure_privilege.ASSIGNMENT, name, {
            "roleDefinitionId": f"/subscriptions/00000000-0000-0000-0000-000000000000/providers/"
                                f"Microsoft.Authorization/roleDefinitions/{role_id}",
            "principalId": principal, "principalType": "ServicePrincipal", "scope": scope})

    def grant(self, plan, who, role):
        self._assign(plan, "widened-assignment", azure_privilege.ROLE_IDS[self.admin[role]],
                     self.principal(plan, who), "/subscriptions/00000000-0000-0000-0000-000000000000")

    def custom_action(self, plan, action):
        role = next(r for r in plan.of(azure_privilege.ROLE_DEFINITION) if r.name.endswith("-compute-role"))
        permissions = [dict(p) for p in role.props["permissions"]]
        permissions[0]["actions"] = [*permissions[0]["actions"], action]
        plan.set(role, permissions=permissions)

    def to_everyone(self, plan):
        registry = next(r for r in plan.of(azure_privilege.ASSIGNMENT) if r.name.endswith("-gpu-pull"))
        self._assign(plan, "group-pulls", azure_privilege.ROLE_IDS["AcrPull"], "99999999-0000-0000-0000-000000000000",
                     registry.props["scope"])

    def wider_scope(self, plan):
        pull = next(r for r in plan.of(azure_privilege.ASSIGNMENT) if r.name.endswith("-gpu-pull"))
        plan.set(pull, scope=pull.props["scope"].split("/providers/")[0])

    def unscoped_resource(self, plan):
        grant = next(r for r in plan.of(azure_privilege.ASSIGNMENT) if r.name.endswith("-fn-compute-grant"))
        plan.set(grant, scope="/subscriptions/00000000-0000-0000-0000-000000000000")


ADAPTERS: dict[str, type[Cloud]] = {a.provider: a for a in (Aws, Alicloud, Gcp, Azure, Tencent, Huawei)}
"""Provider -> how its grants look (its adapter), for every cloud that builds on it."""
CLOUDS = sorted({c for c, _ in CASES})
"""The clouds with shipped Pulumi stacks: each is held to its own least-privilege table (clouds/<cloud>/privilege.py)."""


def adapter(cloud: str) -> Cloud:
    """The cloud's provider's adapter, for the cloud."""
    found = ADAPTERS.get(cloudfolder.provider(cloud))
    if found is None:
        pytest.fail(f"add an adapter for {cloudfolder.provider(cloud)} (the provider {cloud} builds on) to ADAPTERS "
                    "in tests/unit/test_contract_least_privilege.py: how a grant, a custom action, a grant to "
                    "everyone and a wider scope look in its resources", pytrace=False)
    return found(cloud)


def table(cloud: str) -> Any:
    """The cloud's least-privilege table: NEEDS in its folder's privilege.py."""
    return cloudfolder.module(cloud, "privilege")


# ---------------------------------------------------------------- the table

@dataclass(frozen=True)
class Row:
    id: str
    mutate: Callable[[Plan, Cloud], None]
    names: str
    """Words the message must carry (the grant, as the user would recognise it); "" for none."""
    clouds: tuple[str, ...] = ("aws", "alicloud", "gcp", "azure", "tencent", "huawei")
    """The adapters (Cloud.name) the row runs on: every cloud that builds on their providers."""
    identity: str | None = None
    """The table's row the mutation widens ("node", "stop"): the message names it as the table does. The stop's
    rows run only on stacks that plan a stop function."""
    role: str | None = None
    """The broad role granted (Cloud.admin's key): the message names it as the cloud does."""


def grant(who: str, role: str) -> Callable[[Plan, Cloud], None]:
    return lambda plan, cloud: cloud.grant(plan, "function" if who == "stop" else who, role)


def granting(row_id: str, who: str, role: str) -> Row:
    return Row(row_id, grant(who, role), "", identity=who, role=role)


def action(text: str) -> Callable[[Plan, Cloud], None]:
    return lambda plan, cloud: cloud.custom_action(plan, text)


def call(name: str) -> Callable[[Plan, Cloud], None]:
    return lambda plan, cloud: getattr(cloud, name)(plan)


def gcp_node_account(email: str | None) -> Callable[[Plan, Cloud], None]:
    def mutate(plan: Plan, cloud: Cloud) -> None:
        node = plan.nodes("gcp:compute/instance:Instance")[0]
        plan.set(node, serviceAccount={"email": email, "scopes": ["cloud-platform"]} if email else None)
    return mutate


TABLE: tuple[Row, ...] = (
    granting("owner-for-node", "node", "owner"),
    granting("editor-for-node", "node", "editor"),
    granting("access-admin-for-node", "node", "access-admin"),
    granting("owner-for-stop-function", "stop", "owner"),
    granting("editor-for-stop-function", "stop", "editor"),
    granting("access-admin-for-stop-function", "stop", "access-admin"),
    Row("action-star", action("*"), "*"),
    Row("grant-to-everyone", call("to_everyone"), ""),
    Row("wider-scope", call("wider_scope"), ""),
    Row("resource-star-where-the-table-scopes-it", call("unscoped_resource"), ""),
    Row("aws-ec2-star", action("ec2:*"), "ec2:*", clouds=("aws",)),
    Row("aws-iam-star", action("iam:*"), "iam:*", clouds=("aws",)),
    Row("aws-iam-passrole", action("iam:PassRole"), "iam:PassRole", clouds=("aws",)),
    Row("aws-administrator-in-the-roles-own-managed-policy-arns", lambda plan, cloud: plan.set(
        cloud.role(plan, "node"), managedPolicyArns=["arn:aws:iam::aws:policy/AdministratorAccess"]),
        "AdministratorAccess", clouds=("aws",)),
    Row("aws-star-in-the-roles-own-inline-policy", lambda plan, cloud: plan.set(
        cloud.role(plan, "node"), inlinePolicies=[{"name": "all", "policy": json.dumps({"Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})}]), "*", clouds=("aws",)),
    Row("aws-power-user-through-a-policy-attachment", lambda plan, cloud: plan.add(
        "aws:iam/policyAttachment:PolicyAttachment", "power", {
            "policyArn": "arn:aws:iam::aws:policy/PowerUserAccess", "roles": [cloud.role(plan, "node").name]}),
        "PowerUserAccess", clouds=("aws",)),
    Row("alicloud-ram-star", action("ram:*"), "ram:*", clouds=("alicloud",)),
    Row("gcp-owner-in-a-whole-project-policy", lambda plan, cloud: plan.add(
        "gcp:projects/iAMPolicy:IAMPolicy", "whole-policy", {"project": "p", "policyData": json.dumps(
            {"bindings": [{"role": "roles/owner", "members": [cloud.member(plan, "node")]}]})}), "roles/owner",
        clouds=("gcp",)),
    Row("gcp-set-iam-policy-in-custom-role", action("resourcemanager.projects.setIamPolicy"), "setIamPolicy",
        clouds=("gcp",)),
    Row("gcp-node-on-default-compute-account", gcp_node_account("123456789012-compute@developer.gserviceaccount.com"),
        "default compute", clouds=("gcp",)),
    Row("gcp-node-without-account-email", gcp_node_account(None), "default compute", clouds=("gcp",)),
    Row("gcp-all-users-invoke", lambda plan, cloud: plan.add(
        "gcp:cloudrunv2/serviceIamMember:ServiceIamMember", "everyone-invokes",
        {"name": "stop", "role": "roles/run.invoker", "member": "allUsers"}), "allUsers", clouds=("gcp",)),
    Row("azure-authorization-star-in-custom-role", action("Microsoft.Authorization/*"), "Microsoft.Authorization",
        clouds=("azure",)),
    Row("azure-role-assignment-write-in-custom-role", action("Microsoft.Authorization/roleAssignments/write"),
        "Microsoft.Authorization", clouds=("azure",)),
)


def _has_function(cloud: str, stack: str) -> bool:
    """Stacks that plan a stop function: with budget.hardStop where the cloud's budget alerts by itself
    (Cloud.stop_needs_hard_stop), always elsewhere (Alibaba's guard, Google Cloud's, Azure's and Huawei's stop)."""
    if not ADAPTERS[cloudfolder.provider(cloud)].stop_needs_hard_stop:
        return True
    budget = (yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text()) or {}).get("config", {}).get(
        "goldenenv:budget")
    return isinstance(budget, dict) and budget.get("hardStop") is True


def _cases() -> list[Any]:
    return [pytest.param(row, cloud, stack, id=f"{row.id}-{stack}")
            for row in TABLE for cloud, stack in CASES
            if getattr(ADAPTERS.get(cloudfolder.provider(cloud)), "name", None) in row.clouds
            and (row.identity != "stop" or _has_function(cloud, stack))]


# ---------------------------------------------------------------- the runs

def _judged(resources) -> list[guardrails.Finding]:
    """This rule's findings alone (the others are held by their own tests): a mutation costs one rule's pass."""
    rule = next(r for r in guardrails.RULES if r.id == RULE)
    return list(guardrails.check_rule(rule, guardrails.Context(tuple(resources), {})))


@pytest.fixture(scope="module")
def planned():
    """stack -> (its plan, the guardrails' findings on it as planned): shipped.planned, once for the whole run."""
    return shipped.planned


@pytest.mark.parametrize("cloud,stack", CASES)
def test_shipped_stack_holds_only_what_its_table_lists(planned, cloud, stack):
    _, found = planned(stack)
    assert [f for f in found if f.rule == RULE] == []


@pytest.mark.parametrize("row,cloud,stack", _cases())
def test_widened_grant_is_caught(planned, row, cloud, stack):
    plan, _ = planned(stack)
    copy_ = Plan(stack, plan.resources)
    before = {r.urn for r in copy_.resources}
    row.mutate(copy_, adapter(cloud))
    changed = {r.urn for r in copy_.resources if r.urn not in before} | {
        r.urn for r, old in zip(copy_.resources, plan.resources) if r.props != old.props}
    after = _judged(copy_.resources)
    assert after, f"{row.id} on {stack}: {RULE} did not fire"
    assert all(f.severity is Severity.ERROR for f in after)
    assert any(f.urn in changed or any(u.rsplit("::", 1)[-1] in f.message for u in changed) for f in after), after
    expected = [row.names] if row.names else []
    if row.identity:
        expected.append(table(cloud).NEEDS[row.identity].identity)
    if row.role:
        expected.append(adapter(cloud).admin[row.role])
    assert any(all(word in f.message for word in expected) for f in after), (expected, [f.message for f in after])


def test_message_names_the_identity_the_grant_and_what_it_needs(planned):
    """A user reading the finding learns who got what, and what it should have instead."""
    stack = next(s for c, s in CASES if c == "gcp")
    plan, _ = planned(stack)
    copy_ = Plan(stack, plan.resources)
    Gcp("gcp").grant(copy_, "node", "owner")
    messages = [f.message for f in _judged(copy_.resources)]
    assert len(messages) == 1
    assert "the GPU nodes' service account" in messages[0] and "roles/owner" in messages[0]
    assert "roles/storage.objectUser" in messages[0] and "'widened-member'" in messages[0]


def test_azure_owner_at_the_subscription_names_owner(planned):
    stack = next(s for c, s in CASES if c == "azure")
    plan, _ = planned(stack)
    copy_ = Plan(stack, plan.resources)
    Azure("azure").grant(copy_, "function", "owner")
    messages = [f.message for f in _judged(copy_.resources)]
    assert any("Owner" in m and "the stop function's identity" in m for m in messages), messages


def test_the_programs_grant_from_the_table():
    """The programs write their grants from the same constants the rule judges by: one owner of the fact."""
    from goldenenv.clouds.gcp import parts as gcp_parts
    from goldenenv.clouds.alicloud import budget as alicloud_budget
    from goldenenv.clouds.alicloud import head as alicloud_head
    from goldenenv.clouds.alicloud import storage as alicloud_storage
    from goldenenv.clouds.aws import head as aws_head
    from goldenenv.clouds.aws import nodes as aws_nodes
    from goldenenv.clouds.aws import teardown
    from goldenenv.clouds.gcp import head as gcp_head
    from goldenenv.clouds.gcp import storage as gcp_storage

    assert aws_nodes.NODE_MANAGED_POLICIES is aws_privilege.NODE_MANAGED_POLICIES
    stop = teardown.reaper_policy("p", "s", "arn:aws:logs:us-east-1:0:log-group:g", records_hard_stop=True,
                                  dead_letter_queue_arn="arn:aws:sqs:us-east-1:0:q")
    granted: set[str] = set()
    for statement in stop["Statement"]:
        granted |= {statement["Action"]} if isinstance(statement["Action"], str) else set(statement["Action"])
    assert granted == set(aws_privilege.NEEDS["stop"].actions)
    assert aws_head.HEAD_SECRET_ACTIONS is aws_privilege.HEAD_SECRET_ACTIONS
    assert alicloud_head.HEAD_SECRET_ACTIONS is alicloud_privilege.HEAD_SECRET_ACTIONS
    assert alicloud_storage.NODE_MOUNT_ACTIONS is alicloud_privilege.MOUNT_ACTIONS
    guard = alicloud_budget.guard_policy("p", "s", "cn-hangzhou", True, True, ("proj", "store"))
    granted = {a for statement in guard["Statement"] for a in statement["Action"]}
    assert granted == set(alicloud_privilege.NEEDS["stop"].actions)
    assert gcp_head.HEAD_SECRET_ROLES is gcp_privilege.HEAD_SECRET_ROLES
    assert gcp_parts.LUSTRE_IMPORT_PERMISSIONS is gcp_privilege.LUSTRE_IMPORT_PERMISSIONS
    assert gcp_storage.LUSTRE_AGENT_ROLE is gcp_privilege.BUCKET_ROLE
    assert gcp_budget.STOP_PERMISSIONS is gcp_privilege.STOP_PERMISSIONS
    assert gcp_budget.IDLE_PERMISSIONS is gcp_privilege.IDLE_PERMISSIONS
    assert azure_budget.COMPUTE_ACTIONS is azure_privilege.COMPUTE_ACTIONS
    assert azure_budget.BUDGET_ACTIONS is azure_privilege.BUDGET_ACTIONS
    assert "compute.instances.stop" in gcp_privilege.NEEDS["stop"].actions
    assert "Microsoft.Compute/virtualMachineScaleSets/deallocate/action" in azure_privilege.NEEDS["stop"].actions
    assert "ec2:StopInstances" in aws_privilege.NEEDS["stop"].actions
    assert "ecs:StopInstances" in alicloud_privilege.NEEDS["stop"].actions


@pytest.mark.parametrize("cloud", sorted({c for c, _ in CASES}))
def test_every_cloud_has_a_table_with_sources(cloud):
    needs = table(cloud).NEEDS
    assert {"node", "head", "stop"} <= set(needs), cloud
    for kind, need in needs.items():
        assert need.sources and all(s.startswith("https://") for s in need.sources), (cloud, kind)
        assert need.actions or need.roles, (cloud, kind)
        assert not any("*" in a for a in need.actions | need.roles), (cloud, kind)


def test_the_table_runs_on_every_cloud_with_stacks():
    for cloud in CLOUDS:
        assert sum(adapter(cloud).name in r.clouds for r in TABLE) >= 10, cloud
    assert Path(aws_privilege.__file__).parent.name == "aws"


# ---------------------------------------------------------------- as a policy pack sees the plan (a preview)

def _sources(resource: PlannedResource, resources: list[PlannedResource]) -> dict[str, PlannedResource]:
    """input property -> the planned resource whose output it holds (an email, a principal id, a role's id), found by
    the value `goldenenv plan` recorded: what the engine's property dependencies say in a preview."""
    props, found = resource.props, {}
    for other in resources:
        outputs = other.outputs or {}
        identity = outputs.get("identity") if isinstance(outputs.get("identity"), dict) else {}
        if props.get("member") and props["member"] == f"serviceAccount:{outputs.get('email')}":
            found["member"] = other
        if isinstance(props.get("serviceAccount"), dict) and outputs.get("email") and \
                props["serviceAccount"].get("email") == outputs.get("email"):
            found["serviceAccount"] = other
        if other.type == gcp_privilege.CUSTOM_ROLE and str(props.get("role", "")).endswith(
                f"/roles/{other.props.get('roleId')}"):
            found["role"] = other
        if props.get("role") is not None and other.type == aws_privilege.ROLE and props["role"] in (other.id,
                                                                                                   other.name):
            found["role"] = other
        if props.get("principalId") and other.type in (azure_privilege.IDENTITY, azure_privilege.FUNCTION_APP) \
                and props["principalId"] in (outputs.get("principalId"), identity.get("principalId")):
            found["principalId"] = other
        if other.type == azure_privilege.ROLE_DEFINITION and str(props.get("roleDefinitionId", "")).lower().endswith(
                str(other.props.get("roleDefinitionId")).lower()):
            found["roleDefinitionId"] = other
    return found


def as_previewed(resources: list[PlannedResource]) -> list[PlannedResource]:
    """The plan as a policy pack previews it: outputs unknown, and every input built from another resource's output
    unknown too (None), its source named by property dependencies."""
    previewed = []
    for resource in resources:
        sources = _sources(resource, resources) if resource.type != aws_privilege.ROLE else {}
        props = dict(resource.props)
        for prop in sources:
            props[prop] = {"scopes": props[prop].get("scopes")} if prop == "serviceAccount" else None
        previewed.append(dataclasses.replace(resource, props=props, outputs={},
                                             property_dependencies={p: (s.urn,) for p, s in sources.items()}))
    return previewed


@pytest.mark.parametrize("cloud,stack", CASES)
def test_a_preview_with_unknown_ids_is_judged_alike(planned, cloud, stack):
    """Pulumi CLI users run the rule as a policy pack, where emails, principal ids and role ids are not known yet:
    the shipped stack still passes, and a broad grant is still caught, through the property dependencies."""
    plan, _ = planned(stack)
    previewed = as_previewed(list(plan.resources))
    assert _judged(previewed) == []
    widened = Plan(stack, plan.resources)
    widening = adapter(cloud)
    widening.grant(widened, "node", "owner")
    caught = _judged(as_previewed(widened.resources))
    assert any(widening.admin["owner"] in f.message for f in caught), caught
