"""Rule, on every cloud: destroy completes on a stack whose storage is up, rolled and resized pools included.

What stops a teardown, or a pool's resize or roll, is planned: a private-services peering Google keeps while Managed
Lustre holds it (its network then cannot be deleted), a placement fixed to a number of instances while each node is
its own insert (an added or rolled node is refused). Each cloud says which of its resources block
(ProviderFacts.teardown_blocker); every shipped stack is planned as shipped, with each pool one node larger, and
with every node rolled (GOLDENENV_ROLL_NODES=all), and none may hold a blocker. Independently of what the clouds
say, the pools' own resources other than their nodes (placement groups and policies, roles, accounts) must not
change when a pool grows or rolls: a placement replaced under running nodes is one the cloud refuses (issue 33
items 5 and 6).
"""

from __future__ import annotations

import functools

import pytest

import shipped
from goldenenv import clouds, guardrails, plan, stackconfig
from goldenenv.guardrails import PlannedResource

STACKS = shipped.STACKS
RULE = "teardown-blocked"


SHIPPED = shipped.pulumi_stacks()


def config(stack: str) -> dict:
    return stackconfig.read_stack_file(plan.stack_file(stack, STACKS))


def grown(values: dict) -> dict:
    """The stack with every pool one node larger."""
    nodes = values["goldenenv:nodes"]
    bigger = [{**p, "count": int(p.get("count", 1)) + 1} for p in (nodes if isinstance(nodes, list) else [nodes])]
    return {**values, "goldenenv:nodes": bigger if isinstance(nodes, list) else bigger[0]}


@functools.cache
def variants(stack: str) -> dict[str, plan.Plan]:
    values = config(stack)
    spec = stackconfig.load(stack, *stackconfig.namespaced(values))
    rolled = clouds.BuildContext(lookup=plan.offline_context(spec).lookup, roll_nodes=frozenset({"all"}))
    return {"as shipped": plan.plan_config(stack, values, strict=True),
            "each pool one node larger": plan.plan_config(stack, grown(values), strict=True),
            "every node rolled": plan.plan_config(stack, values, context=rolled, strict=True)}


def pool_fixtures(found: plan.Plan) -> dict[str, PlannedResource]:
    """The pools' resources that are not nodes (nor what a node boots from): by URN."""
    pools = {r.urn for r in found.resources if not r.custom and r.type.endswith(":GpuNodePool")}
    facts = guardrails.provider_facts()
    return {r.urn: r for r in found.resources
            if r.parent_urn in pools and r.custom
            and not any(r.type in f.instances or f.boot_script(r) for f in facts)}


def placed(resource: PlannedResource) -> dict:
    """A resource's inputs but its description: free text, which Alibaba's deployment set takes in place
    (ModifyDeploymentSetAttribute) and which names the pool's count there."""
    return {k: v for k, v in resource.props.items() if k != "description"}


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_nothing_planned_blocks_destroy_resize_or_roll(cloud, stack):
    for variant, found in variants(stack).items():
        blocked = [f.message for f in found.findings if f.rule == RULE or "placement" in f.rule]
        assert blocked == [], variant


@pytest.mark.parametrize("cloud,stack", SHIPPED)
def test_a_pools_placement_does_not_change_when_it_grows_or_rolls(cloud, stack):
    planned = variants(stack)
    before = pool_fixtures(planned["as shipped"])
    assert before or cloud == "azure", "a pool has resources of its own beside its nodes"
    for variant in ("each pool one node larger", "every node rolled"):
        after = pool_fixtures(planned[variant])
        changed = [after[urn].name for urn, r in before.items()
                   if urn in after and placed(after[urn]) != placed(r)]
        assert changed == [], variant


PEERING = "gcp:servicenetworking/connection:Connection"
PLACEMENT = "gcp:compute/resourcePolicy:ResourcePolicy"


@pytest.mark.parametrize("blocker", [
    PlannedResource("urn:peering", PEERING, "lustre-peering", {"service": "servicenetworking.googleapis.com"}),
    PlannedResource("urn:abandon", PEERING, "lustre-peering", {"deletionPolicy": "ABANDON"}),
    PlannedResource("urn:placement", PLACEMENT, "gpu-placement",
                    {"groupPlacementPolicy": {"collocation": "COLLOCATED", "vmCount": 2}}),
])
def test_what_blocks_teardown_on_google_cloud_is_refused(blocker):
    """The forms Google's destroy and resize refuse: a connection deleted as is (the default DELETE) or abandoned
    (the peering stays on the network), and a COLLOCATED policy fixed to vmCount."""
    findings = guardrails.evaluate([blocker], {}, budget_opt_out=True)
    assert [f.urn for f in findings if f.rule == RULE] == [blocker.urn]


def test_google_peering_is_removed_on_destroy():
    """Literal anchor: pulumi-gcp 10.2.0's Connection docstring, REMOVE_PEERING removes the peering from the network
    so that the network can be deleted."""
    found = variants("gcp-a3mega-2node")["as shipped"]
    assert [r.props.get("deletionPolicy") for r in found.of_type(PEERING)] == ["REMOVE_PEERING"]
