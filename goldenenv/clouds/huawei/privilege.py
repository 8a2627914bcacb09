"""What each Huawei Cloud identity goldenenv creates needs (IAM least privilege as data), the custom policies the
program gives them, and the judge of their grants.

On Huawei an ECS instance or a FunctionGraph function acts through an IAM agency (ecs.Instance agency_name,
functiongraph.Function agency): an agency delegated to the cloud service, holding roles per project. goldenenv gives
each agency one custom policy (iam.Role, type XA: region projects) of exactly what the row needs, in IAM's policy
grammar, which is AWS's: {"Version": "1.1", "Statement": [{"Effect": "Allow", "Action": ["obs:bucket:GetBucketAcl"],
"Resource": ["obs:*:*:*:*/*"], "Condition": {...}}]} (terraform-provider-huaweicloud docs/resources/identity_role.md
@a0345b8; docs/research/huawei.md §9). The shared judge reads it unchanged.

Verified action names: OBS's service:resource:action form (obs:bucket:*, obs:object:*), ecs:cloudServers:
listServersDetails, swr::createLoginSecret (SWR CreateSecret's identity-policy action,
https://support.huaweicloud.com/api-swr/swr_02_0052.html). Unverified, and to be checked on an account before the
first up: the CSMS actions (csms:secretVersion:get/create/list), ecs:cloudServers:stop, the BSS bill read
(bss:bill:view), the resource strings for CSMS secrets and the ECS tag condition key (g:ResourceTag/<key>), and
smn:topic:publish and its topic resource string, the agencies' delegated service names (op_svc_ecs for ECS, op_svc_cff for FunctionGraph),
the ModelArts Lite Server actions (modelarts:devserver:list / :stop, named after ModelArts' documented
modelarts:notebook:list / :stop:
https://support.huaweicloud.com/intl/en-us/bestpractice-modelarts/modelarts_24_0081.html)
and Cloud Eye's ces:metricData:list (the role/policy name Cloud Eye's ShowMetricData page gives as the alias of
ces:metricData:get: https://support.huaweicloud.com/intl/en-us/api-ces/ces_03_0033.html).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from goldenenv.privilege import Need, component_chain, first, statement_problems

IAM_POLICY_SYNTAX = "https://support.huaweicloud.com/intl/en-us/usermanual-iam/iam_01_0017.html"
SWR_LOGIN = "https://support.huaweicloud.com/api-swr/swr_02_0052.html"
FGS_AGENCY = "https://support.huaweicloud.com/intl/en-us/usermanual-functiongraph/functiongraph_01_0920.html"

NODE_BUCKET_ACTIONS = ("obs:object:GetObject", "obs:object:PutObject", "obs:object:DeleteObject",
                       "obs:bucket:ListBucket", "obs:bucket:HeadBucket")
"""Datasets in, checkpoints out: the stack's bucket and its objects."""
NODE_SECRET_ACTIONS = ("csms:secretVersion:get",)
HEAD_SECRET_ACTIONS = ("csms:secretVersion:get", "csms:secretVersion:create", "csms:secretVersion:list")
PULL_ACTIONS = ("swr::createLoginSecret",)
"""A host's registry login: a temporary docker login (SWR CreateSecret), which takes no resource."""
LITE_ACTIONS = ("modelarts:devserver:list", "modelarts:devserver:stop")
"""The stack's Lite Servers: found by name and stopped. A DevServer takes no tags, so no tag condition can narrow
these (unscoped; unverified names)."""
IDLE_ACTIONS = ("ces:metricData:list",)
"""The idle stop reads each server's CPU from Cloud Eye (only a stack with lifecycle.idleMinutes gets it)."""
STOP_UNSCOPED = ("ecs:cloudServers:listServersDetails", "bss:bill:view") + LITE_ACTIONS
ALERT_ACTIONS = ("smn:topic:publish",)
"""The stop function tells the budget's addresses of its failures through the stack's SMN topic (unverified name)."""
STOP_ACTIONS = STOP_UNSCOPED + ("ecs:cloudServers:stop",) + ALERT_ACTIONS + IDLE_ACTIONS
"""The stop function: find the stack's servers by tag and its Lite Servers by name, read the month's bill (and,
for the idle stop, the servers' CPU), stop the servers carrying the stack's tag and the stack's Lite Servers."""

NEEDS: dict[str, Need] = {
    "node": Need("the GPU nodes' agency", frozenset(NODE_BUCKET_ACTIONS + NODE_SECRET_ACTIONS + PULL_ACTIONS),
                 unscoped=frozenset(PULL_ACTIONS), scope="the stack's bucket, munge secret and registry login",
                 sources=(IAM_POLICY_SYNTAX, SWR_LOGIN)),
    "head": Need("the Slurm head's agency", frozenset(HEAD_SECRET_ACTIONS + PULL_ACTIONS),
                 unscoped=frozenset(PULL_ACTIONS), scope="the stack's munge secret and registry login",
                 sources=(IAM_POLICY_SYNTAX, SWR_LOGIN)),
    "stop": Need("the stop function's agency", frozenset(STOP_ACTIONS),
                 unscoped=frozenset(STOP_UNSCOPED + IDLE_ACTIONS),
                 scope="the stack's tagged servers and its Lite Servers", sources=(IAM_POLICY_SYNTAX, FGS_AGENCY)),
}

AGENCY = "huaweicloud:Iam/agency:Agency"
ROLE = "huaweicloud:Iam/role:Role"
SERVICES = {"node": "op_svc_ecs", "head": "op_svc_ecs", "stop": "op_svc_cff"}
"""The service each agency is delegated to (unverified names: docs/research/huawei.md §9)."""
COMPONENTS = (("goldenenv:huawei:GpuNodePool", "node"), ("goldenenv:huawei:SlurmHead", "head"),
              ("goldenenv:huawei:BudgetGuard", "stop"))


def _statement(actions: tuple[str, ...], resources: list[str] | None = None,
               condition: dict | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"Effect": "Allow", "Action": list(actions)}
    if resources is not None:
        found["Resource"] = resources
    if condition:
        found["Condition"] = condition
    return found


def node_policy(bucket: str, secret: str, head: bool = False) -> str:
    """The node's (or, head True, the head's) policy: its bucket (nodes only), the munge secret, the registry
    login."""
    statements = [_statement(HEAD_SECRET_ACTIONS if head else NODE_SECRET_ACTIONS, [f"csms:*:*:secret:{secret}"]),
                  _statement(PULL_ACTIONS, ["*"])]
    if not head:
        statements.insert(0, _statement(NODE_BUCKET_ACTIONS, [f"obs:*:*:bucket:{bucket}",
                                                              f"obs:*:*:object:{bucket}/*"]))
    return json.dumps({"Version": "1.1", "Statement": statements})


def tag_condition(key: str, value: str) -> dict[str, Any]:
    return {"StringEquals": {f"g:ResourceTag/{key}": [value]}}


def stop_policy(tag_key: str, tag_value: str, alert_topic: str | None = None, idle: bool = False) -> str:
    """The stop function's policy; with ``alert_topic``, it may publish its failures there; with ``idle``, it may
    read the servers' CPU."""
    statements = [_statement(STOP_UNSCOPED + (IDLE_ACTIONS if idle else ()), ["*"]),
                  _statement(("ecs:cloudServers:stop",), ["ecs:*:*:instance:*"], tag_condition(tag_key, tag_value))]
    if alert_topic:
        statements.append(_statement(ALERT_ACTIONS, [f"smn:*:*:topic:{alert_topic}"]))
    return json.dumps({"Version": "1.1", "Statement": statements})


def document_of(role: Any) -> list[Any]:
    """A custom policy's statements (its `policy` JSON text)."""
    try:
        parsed = json.loads(role.props.get("policy") or "{}")
    except (TypeError, ValueError):
        return []
    found = parsed.get("Statement") if isinstance(parsed, dict) else None
    return found if isinstance(found, list) else [found] if found else []


def kind_of(resource: Any) -> str | None:
    chain = component_chain(resource.urn)
    return next((kind for component, kind in COMPONENTS if component in chain), None)


def _label(resource: Any) -> str:
    return f"{resource.type.rsplit(':', 1)[-1]} {resource.name!r}"


def _held_roles(agency: Any) -> list[str]:
    props = agency.props
    names = [r for p in props.get("projectRoles") or [] for r in (p or {}).get("roles") or []]
    return [str(n) for n in names + list(props.get("domainRoles") or []) + list(props.get("allResourcesRoles") or [])]


def _agency(resource: Any, ctx: Any) -> Iterator[str]:
    kind = kind_of(resource)
    need = NEEDS.get(kind or "")
    props = resource.props
    if props.get("delegatedDomainName"):
        yield (f"{_label(resource)} is delegated to the account {props['delegatedDomainName']!r}: only the Huawei "
               f"Cloud service it exists for may use an agency the stack creates.")
    elif kind and props.get("delegatedServiceName") != SERVICES[kind]:
        yield (f"{_label(resource)} is delegated to {props.get('delegatedServiceName')!r}, not {SERVICES[kind]}: "
               "only the service it exists for may use it.")
    own = {r.props.get("name") for r in ctx.resources if r.type == ROLE and kind_of(r) == kind}
    for role in _held_roles(resource):
        if role not in own:
            yield (f"{_label(resource)} gives {need.identity if need else 'an agency'} the role {role!r}, not the "
                   "stack's own policy for it: a system role grants a whole service or account, far more than it "
                   "needs" + (f", which is {need.describe()}." if need else "."))


def judge(resource: Any, ctx: Any) -> Iterator[str]:
    """grant-broader-than-needed on Huawei Cloud: the stack's agencies (who may use them, which roles they hold) and
    every custom policy they hold."""
    if resource.type == AGENCY:
        yield from _agency(resource, ctx)
        return
    if resource.type != ROLE:
        return
    need = NEEDS.get(kind_of(resource) or "")
    if need is None:
        yield (f"{_label(resource)} grants to an identity with no row in the least-privilege table "
               "(goldenenv/clouds/huawei/privilege.py NEEDS): say what it needs there.")
        return
    problems = first(statement_problems(resource.props.get("policy"), need))
    if problems:
        yield f"{_label(resource)} gives {need.identity} {'; '.join(problems)}: more than it needs, which is " \
              f"{need.describe()}."
