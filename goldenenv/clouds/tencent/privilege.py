"""What each Tencent Cloud identity goldenenv creates needs (CAM least privilege as data), the policy documents the
program gives them, and the judge of their grants.

CAM's policy grammar is AWS's in lower case: {"version": "2.0", "statement": [{"effect": "allow", "action":
["name/cvm:RunInstances"], "resource": ["qcs::cvm:<region>:uin/<uin>:instance/<id>"], "condition": {...}}]}
(https://www.tencentcloud.com/document/product/213/10313). A tag condition keeps a grant on the stack's own
resources: {"for_any_value:string_equal": {"qcs:resource_tag": ["<key>&<value>"]}}
(https://tencentcloud.com/document/product/598/40493). Trust: {"principal": {"service": ["cvm.qcloud.com"]}} for a
node, scf.qcloud.com for the stop function (terraform-provider-tencentcloud cam_role.html.markdown).

Which CVM and billing APIs honour resource-level scoping and the tag condition is not stated per API in what was
read (unverified): Describe and billing reads are written with resource "*" (unscoped), a stop with the tag
condition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from goldenenv.privilege import Need, component_chain, first, referenced, statement_problems

CAM_POLICY_SYNTAX = "https://www.tencentcloud.com/document/product/213/10313"
CAM_TAG_CONDITION = "https://tencentcloud.com/document/product/598/40493"

NODE_BUCKET_ACTIONS = ("name/cos:GetObject", "name/cos:PutObject", "name/cos:HeadObject", "name/cos:GetBucket",
                       "name/cos:DeleteObject")
"""Datasets in, checkpoints out: the stack's bucket and its objects (COS resource qcs::cos:<region>:uid/<appid>:
<bucket>/*, tencentcloud-iac-pulumi 0.2.3 cos.BucketPolicy docstring)."""
NODE_SECRET_ACTIONS = ("name/ssm:GetSecretValue",)
HEAD_SECRET_ACTIONS = ("name/ssm:GetSecretValue", "name/ssm:PutSecretValue", "name/ssm:ListSecretVersionIds")
PULL_ACTION = "name/tcr:PullRepository"
PULL_ACTIONS = ("name/tcr:DescribeInstances", "name/tcr:CreateInstanceToken", PULL_ACTION)
"""A node's registry login and pull: the registry's id by its name, then a one-hour token
(https://cloud.tencent.com/document/api/1141/41571), then the pull itself. The token is a TCR "user account": "The
permission of the user account is controlled by the CAM permission of the associated Tencent Cloud account"
(https://www.tencentcloud.com/document/product/1051/54627), and pulling is tcr:PullRepository on the repository,
qcs::tcr:<region>:<account>:repository/<instance id>/<namespace>/<repository> (Tencent's read-only example grants it
on that path and on path/*, "the sub-account can only pull the images in the image repository":
https://www.tencentcloud.com/document/product/1051/37248; https://cloud.tencent.com/document/product/1141/40720).
Those pages speak of sub-accounts; that a CAM role's token (a CVM instance role) is checked the same way is
unverified, and what a real account proves: a node whose role lacks PullRepository is refused the pull."""
PULL_SOURCES = ("https://www.tencentcloud.com/document/product/1051/54627",
                "https://www.tencentcloud.com/document/product/1051/37248")
STOP_UNSCOPED = ("name/cvm:DescribeInstances", "name/billing:DescribeBillSummaryByTag")
IDLE_ACTIONS = ("name/monitor:GetMonitorData",)
"""The idle stop reads each node's CPU (GetMonitorData, https://tencentcloud.com/document/api/248/33881); which
Cloud Monitor reads CAM scopes to a resource is not stated (unverified): written with resource "*"."""
STOP_ACTIONS = STOP_UNSCOPED + ("name/cvm:StopInstances",)
"""The stop function: find the stack's instances (their state, CreatedTime and CPU count, for the time to live and
the idle stop too), read its month's bill by its cost-allocation tag, stop the instances (StoppedMode
STOP_CHARGING), the stop only on instances carrying the stack's tag; with the idle stop, IDLE_ACTIONS."""

NEEDS: dict[str, Need] = {
    "node": Need("the GPU nodes' CAM role", frozenset(NODE_BUCKET_ACTIONS + NODE_SECRET_ACTIONS + PULL_ACTIONS),
                 unscoped=frozenset(("name/tcr:DescribeInstances",)),
                 scope="the stack's bucket, munge secret and registry (pull: its one repository)",
                 sources=(CAM_POLICY_SYNTAX,) + PULL_SOURCES),
    "head": Need("the Slurm head's CAM role", frozenset(HEAD_SECRET_ACTIONS + PULL_ACTIONS),
                 unscoped=frozenset(("name/tcr:DescribeInstances",)),
                 scope="the stack's munge secret and registry (pull: its one repository)",
                 sources=(CAM_POLICY_SYNTAX,) + PULL_SOURCES),
    "stop": Need("the stop function's CAM role", frozenset(STOP_ACTIONS + IDLE_ACTIONS),
                 unscoped=frozenset(STOP_UNSCOPED + IDLE_ACTIONS),
                 scope="the stack's tagged instances", sources=(CAM_POLICY_SYNTAX, CAM_TAG_CONDITION)),
}

ROLE = "tencentcloud:Cam/role:Role"
POLICY = "tencentcloud:Cam/policy:Policy"
ATTACHMENT = "tencentcloud:Cam/rolePolicyAttachment:RolePolicyAttachment"
USER = "tencentcloud:Cam/user:User"
USER_ATTACHMENT = "tencentcloud:Cam/userPolicyAttachment:UserPolicyAttachment"
GROUP_MEMBERSHIP = "tencentcloud:Cam/groupMembership:GroupMembership"
"""The budget's alarm receivers are CAM users (an alarm notice reaches users, not addresses: budget.py): each may
receive mail and nothing else, so no console login, no API key, no policy and no group (a group's policies)."""
SERVICES = {"node": "cvm.qcloud.com", "head": "cvm.qcloud.com", "stop": "scf.qcloud.com"}


def trust_document(kind: str) -> str:
    return json.dumps({"version": "2.0", "statement": [{"action": "name/sts:AssumeRole", "effect": "allow",
                                                        "principal": {"service": [SERVICES[kind]]}}]})


def _statement(actions: tuple[str, ...], resources: list[str], condition: dict | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"effect": "allow", "action": list(actions), "resource": resources}
    if condition:
        found["condition"] = condition
    return found


def tag_condition(key: str, value: str) -> dict[str, Any]:
    return {"for_any_value:string_equal": {"qcs:resource_tag": [f"{key}&{value}"]}}


def repository_resources(region: str, registry_id: str, namespace: str, repository: str) -> list[str]:
    """The one repository a pull grant names: its path, and what lies under it (Tencent's example's form)."""
    path = f"qcs::tcr:{region}:uin/*:repository/{registry_id}/{namespace}/{repository}"
    return [path, f"{path}/*"]


def node_document(region: str, appid: str, bucket: str, secret: str, head: bool = False, *,
                  registry: tuple[str, str, str]) -> str:
    """The node's (or, head True, the head's) policy: its bucket (nodes only), the munge secret, the registry
    login and the pull from the stack's one repository (``registry``: the TCR instance's id, the namespace, the
    repository). The uin in resource strings is written `*` (one's own account: the role cannot be assumed outside
    it)."""
    statements = [
        _statement(HEAD_SECRET_ACTIONS if head else NODE_SECRET_ACTIONS,
                   [f"qcs::ssm:{region}:uin/*:secret/{secret}"]),
        _statement(("name/tcr:CreateInstanceToken",), [f"qcs::tcr:{region}:uin/*:instance/*"]),
        _statement(("name/tcr:DescribeInstances",), ["*"]),
        _statement((PULL_ACTION,), repository_resources(region, *registry)),
    ]
    if not head:
        statements.insert(0, _statement(NODE_BUCKET_ACTIONS, [f"qcs::cos:{region}:uid/{appid}:{bucket}/*",
                                                              f"qcs::cos:{region}:uid/{appid}:{bucket}"]))
    return json.dumps({"version": "2.0", "statement": statements})


def stop_document(tag_key: str, tag_value: str, idle: bool = False) -> str:
    """The stop function's policy; ``idle``: it reads Cloud Monitor's CPU data too."""
    return json.dumps({"version": "2.0", "statement": [
        _statement(STOP_UNSCOPED + (IDLE_ACTIONS if idle else ()), ["*"]),
        _statement(("name/cvm:StopInstances",), ["qcs::cvm::uin/*:instance/*"], tag_condition(tag_key, tag_value)),
    ]})


def as_iam(policy: Any) -> dict[str, Any]:
    """A CAM document in the capitalised grammar goldenenv.privilege reads (Statement, Effect, Action, Resource,
    Principal: {Service}), so the shared judge applies unchanged."""
    parsed = json.loads(policy) if isinstance(policy, str) else dict(policy or {})
    names = {"effect": "Effect", "action": "Action", "resource": "Resource", "principal": "Principal",
             "condition": "Condition", "notaction": "NotAction", "notresource": "NotResource"}
    statements = []
    for statement in parsed.get("statement") or parsed.get("Statement") or []:
        if not isinstance(statement, Mapping):
            continue
        converted = {names.get(k.lower(), k): v for k, v in statement.items()}
        principal = converted.get("Principal")
        if isinstance(principal, Mapping):
            converted["Principal"] = {("Service" if k.lower() == "service" else k): v for k, v in principal.items()}
        statements.append(converted)
    return {"Version": parsed.get("version"), "Statement": statements}


def kind_of(resource: Any) -> str | None:
    chain = component_chain(resource.urn)
    for component, kind in (("goldenenv:tencent:GpuNodePool", "node"), ("goldenenv:tencent:SlurmHead", "head"),
                            ("goldenenv:tencent:BudgetGuard", "stop")):
        if component in chain:
            return kind
    return None


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def _trust_problems(document: Any, kind: str | None) -> Iterator[str]:
    for statement in as_iam(document)["Statement"]:
        if str(statement.get("Effect", "")).lower() != "allow":
            continue
        principal = statement.get("Principal")
        services = principal.get("Service") if isinstance(principal, Mapping) else None
        services = [services] if isinstance(services, str) else list(services or [])
        if not isinstance(principal, Mapping) or set(principal) != {"Service"} or \
                (kind and services != [SERVICES[kind]]):
            yield f"lets {json.dumps(principal)} assume it"


def _matches(resource: Any, value: Any) -> bool:
    return value is not None and value in (resource.id, resource.props.get("name"))


def _attachment(resource: Any, ctx: Any) -> Iterator[str]:
    """A policy attached to one of the stack's roles must be the stack's own policy for it: a preset policy
    (AdministratorAccess, QcloudCVMFullAccess ...) grants a whole service or account."""
    role_id, policy_id = resource.props.get("roleId"), resource.props.get("policyId")
    role = next((r for r in ctx.resources if r.type == ROLE and _matches(r, role_id)), None) \
        or referenced(resource, "roleId", ctx.resources, (ROLE,))
    need = NEEDS.get(kind_of(role) or "") if role is not None else None
    who = need.identity if need else f"CAM role {role_id!r}"
    if any(p.type == POLICY and _matches(p, policy_id) for p in ctx.resources) \
            or referenced(resource, "policyId", ctx.resources, (POLICY,)) is not None:
        return
    yield (f"{_label(resource)} attaches the preset policy {policy_id} to {who}: a preset policy grants a whole "
           f"service or account, far more than it needs" + (f", which is {need.describe()}." if need else "."))


def _receiver(resource: Any, ctx: Any) -> Iterator[str]:
    """A CAM user the stack creates is an alarm receiver: it may sign in nowhere and hold nothing."""
    if resource.type == USER:
        ways = [what for key, what in (("consoleLogin", "console login"), ("useApi", "an API key"))
                if resource.props.get(key) not in (False, None)]
        if ways or resource.props.get("consoleLogin") is None:
            yield (f"{_label(resource)} is an alarm receiver given {' and '.join(ways) or 'a console login (unset)'}:"
                   " a receiver only receives mail; set console_login and use_api to false.")
        return
    users = [u for u in ctx.resources if u.type == USER]
    names = [resource.props.get(k) for k in ("userId", "userName")] + [
        n for k in ("userIds", "userNames") for n in resource.props.get(k) or []]
    held = [u for u in users if any(_matches(u, n) or n == u.outputs.get("uid") for n in names)] or [
        u for k in ("userId", "userName") for u in [referenced(resource, k, ctx.resources, (USER,))] if u]
    if held:
        what = "a policy" if resource.type == USER_ATTACHMENT else "a user group (and its policies)"
        yield (f"{_label(resource)} gives the alarm receiver {held[0].name!r} {what}: a receiver only receives mail "
               "and holds nothing.")


TCR_REPOSITORY = "tencentcloud:Tcr/repository:Repository"


def _pull_grants(document: Any) -> Iterator[str]:
    """The resources each Allow of PULL_ACTION in ``document`` names."""
    for statement in as_iam(document)["Statement"]:
        actions = statement.get("Action")
        actions = [actions] if isinstance(actions, str) else list(actions or [])
        if str(statement.get("Effect", "")).lower() != "allow" or PULL_ACTION not in actions:
            continue
        resources = statement.get("Resource")
        yield from ([resources] if isinstance(resources, str) else list(resources or []))


def _in_repository(granted: Any, instance_id: str, namespace: str, name: str) -> bool:
    tail = str(granted).split(":", 5)[-1] if str(granted).startswith("qcs::tcr:") else None
    return tail in (f"repository/{instance_id}/{namespace}/{name}", f"repository/{instance_id}/{namespace}/{name}/*")


def grants_pull(document: Any, repository: Any) -> bool:
    """Whether ``document`` allows pulling from the planned TCR ``repository`` (by its instance id, namespace and
    name; any pull grant while the instance id is not known yet, as in a preview)."""
    instance_id, namespace, name = (repository.props.get(k) for k in ("instanceId", "namespaceName", "name"))
    granted = list(_pull_grants(document))
    if not isinstance(instance_id, str) or not instance_id:
        return bool(granted)
    return any(_in_repository(g, instance_id, namespace, name) for g in granted)


def _pull_problems(document: Any, ctx: Any) -> Iterator[str]:
    """A pull grant names only the stack's planned repositories (each by its instance id, namespace and name, or
    what lies under it); one whose instance id is not known yet (a preview) is not judged."""
    repos = [r for r in ctx.resources if r.type == TCR_REPOSITORY]
    known = [(r.props.get("instanceId"), r.props.get("namespaceName"), r.props.get("name")) for r in repos]
    if not known or not all(isinstance(part, str) and part for parts in known for part in parts):
        return
    for granted in _pull_grants(document):
        if not any(_in_repository(granted, *parts) for parts in known):
            yield f"{PULL_ACTION} on {granted!r}, beyond the stack's repository"


def judge(resource: Any, ctx: Any) -> Iterator[str]:
    """grant-broader-than-needed on Tencent Cloud: the stack's CAM roles' trust documents and every policy
    attached to them; its alarm receivers (CAM users) hold nothing."""
    if resource.type in (USER, USER_ATTACHMENT, GROUP_MEMBERSHIP):
        yield from _receiver(resource, ctx)
        return
    if resource.type == ROLE:
        for problem in first(_trust_problems(resource.props.get("document"), kind_of(resource))):
            yield (f"{_label(resource)} {problem}: only the Tencent Cloud service it exists for (cvm, scf) may assume "
                   "a role the stack creates.")
        return
    if resource.type == ATTACHMENT:
        yield from _attachment(resource, ctx)
        return
    if resource.type != POLICY:
        return
    need = NEEDS.get(kind_of(resource) or "")
    if need is None:
        yield (f"{_label(resource)} grants to an identity with no row in the least-privilege table "
               "(goldenenv/clouds/tencent/privilege.py NEEDS): say what it needs there.")
        return
    problems = first(list(statement_problems(as_iam(resource.props.get("document")), need))
                     + list(_pull_problems(resource.props.get("document"), ctx)))
    if problems:
        yield f"{_label(resource)} gives {need.identity} {'; '.join(problems)}: more than it needs, which is " \
              f"{need.describe()}."
