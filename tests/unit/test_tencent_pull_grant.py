"""The Tencent hosts' right to pull the golden image from TCR: the one-hour token a host's CAM role asks for
(CreateInstanceToken) is a TCR user account, whose pulls are checked against that identity's CAM policy
(https://www.tencentcloud.com/document/product/1051/54627), as tcr:PullRepository on
qcs::tcr:<region>:<account>:repository/<instance id>/<namespace>/<repository>
(https://www.tencentcloud.com/document/product/1051/37248). Each host's policy grants it on the stack's one
repository, and a grant beyond it, or none, is caught."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import shipped
import test_contract_pull_grants as pull_grants

from goldenenv import plan
from goldenenv.clouds.tencent import privilege

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HCC = "tencent-hccpnv5-2node"
PULL = "name/tcr:PullRepository"
REPOSITORY = "tencentcloud:Tcr/repository:Repository"


def _host_policies(resources):
    return [r for r in resources if r.type == privilege.POLICY and privilege.kind_of(r) in ("node", "head")]


def _pull_resources(policy) -> list[str]:
    return [res for s in json.loads(policy.props["document"])["statement"] if PULL in s["action"]
            for res in s["resource"]]


def test_the_head_and_every_pool_may_pull_only_the_stacks_repository():
    resources = plan.plan(HCC, shipped.STACKS).resources
    (repo,) = [r for r in resources if r.type == REPOSITORY]
    path = f"repository/{repo.props['instanceId']}/{repo.props['namespaceName']}/{repo.props['name']}"
    policies = _host_policies(resources)
    assert {privilege.kind_of(p) for p in policies} == {"node", "head"}
    for policy in policies:
        assert sorted(r.split(":", 5)[-1] for r in _pull_resources(policy)) == [path, f"{path}/*"], policy.name
        assert all(r.startswith("qcs::tcr:ap-guangzhou:") for r in _pull_resources(policy)), policy.name


def _with_pull(resources, policy, pulled: list[str] | None):
    document = json.loads(policy.props["document"])
    statements = [s for s in document["statement"] if PULL not in s["action"]]
    if pulled is not None:
        statements.append({"effect": "allow", "action": [PULL], "resource": pulled})
    changed = dataclasses.replace(policy, props={**policy.props, "document": json.dumps(
        {**document, "statement": statements})})
    return [changed if r is policy else r for r in resources], changed


@pytest.mark.parametrize("pulled", [["qcs::tcr:ap-guangzhou:uin/*:repository/*"], ["*"]])
def test_a_pull_grant_beyond_the_stacks_repository_is_caught(pulled):
    resources = list(plan.plan(HCC, shipped.STACKS).resources)
    policy = next(p for p in _host_policies(resources) if privilege.kind_of(p) == "node")
    widened, changed = _with_pull(resources, policy, pulled)
    found = list(privilege.judge(changed, SimpleNamespace(resources=widened)))
    assert len(found) == 1 and "PullRepository" in found[0] and policy.name in found[0], found


def test_a_host_whose_role_may_not_pull_is_refused_by_the_plan():
    repository, planned = pull_grants.pushed(HCC)
    resources = list(planned.resources)
    head = next(p for p in _host_policies(resources) if privilege.kind_of(p) == "head")
    bare, _ = _with_pull(resources, head, None)
    refused = [f for f in shipped.guardrail_findings(planned, bare) if f.rule == pull_grants.RULE]
    assert len(refused) == 1 and PULL in refused[0].message and head.props["name"] in refused[0].message, refused


def test_a_pull_grant_on_another_repository_does_not_count():
    repository, planned = pull_grants.pushed(HCC)
    resources = list(planned.resources)
    node = next(p for p in _host_policies(resources) if privilege.kind_of(p) == "node")
    moved, _ = _with_pull(resources, node, ["qcs::tcr:ap-guangzhou:uin/*:repository/tcr-other/ns/repo"])
    refused = [f for f in shipped.guardrail_findings(planned, moved) if f.rule == pull_grants.RULE]
    assert refused and all(PULL in f.message for f in refused), refused
