"""RULE: every cloud of the registry is held to the Cloud protocol, and every shipped stack of it to the protocol's
promises: it plans, its guardrails and its cloud's readiness rules pass, and it gives the standard outputs.

`image push -s` crashed on Google Cloud and Alibaba stacks (`'GcpCloud' object has no attribute 'registry_url'`):
shared code looked hooks up with getattr(cloud, ..., default) that the protocol did not declare, so a cloud that
lacked one failed only when a user reached that command. Here the protocol is the one list: each hook has its
default in CloudDefaults or is one a cloud must write (REQUIRED_HOOKS), a cloud provides nothing the protocol does
not declare and takes each hook's arguments as the protocol passes them, and no shared module looks a hook up by
name. A cloud added to goldenenv/clouds/ is held to all of it with no test written for it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from goldenenv import clouds
from goldenenv.clouds.base import (HEAD_OUTPUTS, REQUIRED_HOOKS, STANDARD_OUTPUTS, Capability, Cloud, CloudDefaults,
                                   HostsBy, PulumiCloud, hooks_required)
from goldenenv.guardrails import Severity
from tests.unit.shipped import planned, pulumi_stacks

PACKAGE = Path(clouds.__file__).resolve().parents[1]
CLOUD_FOLDERS = Path(clouds.__file__).resolve().parent
READINESS_ENTRY = "findings"
"""The one name of a cloud's readiness rules' entry point (readiness.py), which its Cloud.readiness calls."""
REGISTRY = CLOUD_FOLDERS / "__init__.py"
"""The registry inspects a cloud package's classes to find its Cloud (name, build) before it is one."""
HOOKS = sorted({n for n in vars(Cloud) if not n.startswith("_")} | set(Cloud.__annotations__))
METHODS = sorted(n for n in HOOKS if inspect.isfunction(vars(Cloud).get(n)))


def test_every_hook_of_the_protocol_has_a_default_or_is_required():
    required = {hook for hooks in REQUIRED_HOOKS.values() for hook in hooks}
    assert [hook for hook in HOOKS if hook not in required and not hasattr(CloudDefaults, hook)] == []
    assert required <= set(HOOKS)
    assert sorted(n for n in dir(CloudDefaults) if not n.startswith("_") and n not in HOOKS) == [], \
        "a default for a hook the protocol does not declare"
    assert "registry_url" in HOOKS and "destroy_hints" in HOOKS and "readiness" in HOOKS


def own_hooks(cloud: Cloud) -> set[str]:
    """What a cloud's own classes write, not what CloudDefaults gives it."""
    return {n for klass in type(cloud).__mro__ if klass not in (CloudDefaults, PulumiCloud, object) for n in vars(klass)}


class Spotty(PulumiCloud):
    """A cloud that declares spot capacity and a repository, and writes neither their hooks nor its program."""

    name = "spotty"
    capabilities = frozenset({Capability.SPOT})
    registry_types = ("spotty:registry/",)


def test_a_cloud_that_declares_what_it_does_not_write_is_caught():
    """The defaults would have answered for it: no way back for spot nodes, no repository to push to."""
    assert set(hooks_required(Spotty())) - own_hooks(Spotty()) == {"build", "spot_return", "registry_url",
                                                                   "registry_auth"}


@pytest.mark.parametrize("name", clouds.names())
def test_a_cloud_provides_the_protocol_and_nothing_beside_it(name):
    cloud = clouds.get(name)
    assert isinstance(cloud, CloudDefaults), f"{type(cloud).__name__} must subclass CloudDefaults (or PulumiCloud)"
    assert cloud.name == name
    missing = [hook for hook in hooks_required(cloud) if hook not in own_hooks(cloud)]
    assert missing == [], f"{name} must write its own {', '.join(missing)}"
    undeclared = sorted(n for n in dir(cloud) if not n.startswith("_") and n not in HOOKS)
    assert undeclared == [], f"{name} provides {undeclared}, which the Cloud protocol does not declare"
    assert isinstance(cloud.capabilities, frozenset) and all(isinstance(c, clouds.Capability)
                                                             for c in cloud.capabilities)


@pytest.mark.parametrize("name", clouds.names())
def test_a_clouds_hooks_take_the_protocols_arguments(name):
    """Shared code calls each hook with the protocol's arguments; a cloud may add its own only with a default."""
    cloud = clouds.get(name)
    wrong = []
    for hook in METHODS:
        if not callable(getattr(cloud, hook, None)):
            continue  # a required hook the test above names
        asked = list(inspect.signature(vars(Cloud)[hook]).parameters.values())[1:]
        given = list(inspect.signature(getattr(cloud, hook)).parameters.values())
        if [p.name for p in given[:len(asked)]] != [p.name for p in asked] or any(
                p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in given[len(asked):]):
            wrong.append(f"{hook}{inspect.signature(getattr(cloud, hook))}")
    assert wrong == [], f"{name}'s hooks do not take the protocol's arguments: {wrong}"


def shared_modules() -> list[Path]:
    """goldenenv's modules outside the cloud folders (and the registry): the code that may speak only the protocol."""
    folders = {p for p in CLOUD_FOLDERS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if path != REGISTRY and not any(path.is_relative_to(folder) for folder in folders)]


def test_no_shared_module_looks_a_hook_up_by_name():
    hooks = set(HOOKS) - {"name"}  # `name` is every object's: click commands, modules
    found = []
    for path in shared_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in hooks):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.func.id}(..., "
                             f"{node.args[1].value!r})")
    assert found == [], "ask the Cloud protocol (every hook has a default in CloudDefaults): " + "; ".join(found)


def test_the_lookup_rule_sees_a_getattr(tmp_path):
    """The walk above catches the defect it is for: a hook asked for with getattr."""
    module = tmp_path / "m.py"
    module.write_text('def url(cloud, spec):\n    return getattr(cloud, "registry_url", None)\n')
    calls = [n for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.Call)]
    assert [c.args[1].value for c in calls if isinstance(c.func, ast.Name) and c.func.id == "getattr"] == [
        "registry_url"]
    assert "registry_url" in HOOKS


@pytest.mark.parametrize("name", [n for n in clouds.names() if (CLOUD_FOLDERS / n / "readiness.py").exists()])
def test_a_clouds_readiness_rules_have_one_entry_point(name):
    module = importlib.import_module(f"goldenenv.clouds.{name}.readiness")
    assert callable(getattr(module, READINESS_ENTRY, None)), f"{module.__name__} must define {READINESS_ENTRY}()"
    assert not hasattr(module, "evaluate"), f"{module.__name__}: the entry point is {READINESS_ENTRY}, not evaluate"


@pytest.mark.parametrize("cloud, stack", pulumi_stacks())
def test_a_shipped_stack_plans_and_passes_its_guardrails_and_readiness(cloud, stack):
    plan, guarded = planned(stack)
    assert plan.resources, f"{stack} plans no resource"
    errors = [f"{f.rule}: {f.message}" for f in [*plan.findings, *guarded] if f.severity is Severity.ERROR]
    assert errors == []
    ready = clouds.get(cloud).readiness(plan.resources, plan.spec.stack_tags)
    module = CLOUD_FOLDERS / cloud / "readiness.py"
    if module.exists():
        rules = importlib.import_module(f"goldenenv.clouds.{cloud}.readiness")
        own = getattr(rules, READINESS_ENTRY)(plan.resources, plan.spec.stack_tags)
        assert {(f.rule, f.message) for f in own} <= {(f.rule, f.message) for f in ready}, \
            f"{cloud}'s Cloud.readiness leaves out its readiness rules"
    assert [f"{f.rule}: {f.message}" for f in ready if f.severity is Severity.ERROR] == []


@pytest.mark.parametrize("cloud, stack", pulumi_stacks())
def test_a_shipped_stack_gives_the_standard_outputs(cloud, stack):
    plan, _ = planned(stack)
    outputs = plan.outputs
    wanted = set(STANDARD_OUTPUTS) | (set(HEAD_OUTPUTS.values()) if plan.spec.scheduler == "slurm" else set())
    assert sorted(wanted - set(outputs)) == []
    nodes = sum(pool.count for pool in plan.spec.nodes)
    addresses = outputs["nodePrivateIps"]
    assert len(addresses) == len(set(addresses)) == nodes
    assert [line.split()[0] for line in outputs["hostfile"].splitlines()] == addresses
    assert outputs["launchEnv"]["NNODES"] == str(nodes) and outputs["launchEnv"]["MASTER_ADDR"] == addresses[0]
    if clouds.get(cloud).registry_types:
        assert outputs["imageRepository"], f"{stack} has a repository of its own: imageRepository names it"
    if plan.spec.scheduler == "slurm":
        assert outputs[HEAD_OUTPUTS[HostsBy.PRIVATE_IP]] not in addresses


def cloud_name_comparisons(path: Path, cloud_names: set[str]) -> list[str]:
    """Each comparison in a module with a literal cloud name (`spec.cloud == "local"`, `cloud in ("aws", "gcp")`):
    shared code that branches on a cloud's name rather than asking what the cloud declares."""
    def literals(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and node.value in cloud_names:
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [name for element in node.elts for name in literals(element)]
        return []

    return [f"{path.name}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Compare) and any(literals(side) for side in [node.left, *node.comparators])]


def test_no_shared_module_branches_on_a_clouds_name():
    """What differs between clouds is a fact or hook of the protocol that the cloud's folder answers (how the node
    commands reach its nodes, its shared folder) or a row of its catalog (its container shapes, its instance type
    prefix): a new cloud folder then changes no shared file."""
    found = [f"{path.relative_to(PACKAGE.parent).parent}/{hit}" for path in shared_modules()
             for hit in cloud_name_comparisons(path, set(clouds.names()))]
    assert found == [], "ask the cloud (a hook or fact of the Cloud protocol) or its catalog: " + "; ".join(found)


def test_the_cloud_name_rule_sees_a_branch(tmp_path):
    """The walk above catches the defect it is for, however the name is compared."""
    module = tmp_path / "m.py"
    module.write_text('def f(spec, cloud):\n    if spec.cloud == "local":\n        return 1\n'
                      '    return cloud in ("aws", "gcp") or "azure" != spec.cloud\n')
    assert cloud_name_comparisons(module, {"local", "aws", "gcp", "azure"}) == [
        "m.py:2 spec.cloud == 'local'", "m.py:4 cloud in ('aws', 'gcp')", "m.py:4 'azure' != spec.cloud"]


def test_the_local_clouds_facts_answer_what_the_branches_did():
    """The local cloud's nodes are containers here with one shared data folder; a container shape has one stand-in GPU and
    its own ranks; a cloud reached over ssh keeps the stack's storage and its instance types' GPUs; an Alibaba
    type written without `ecs.` is still found."""
    from goldenenv import catalog
    from goldenenv.clouds.base import NodeReach

    local = clouds.get("local")
    assert (local.reaches_nodes_by, local.shared_folder) == (NodeReach.DOCKER, "/data")
    assert (CloudDefaults.reaches_nodes_by, CloudDefaults.shared_folder) == (NodeReach.SSH, None)
    assert catalog.node_slots("local", "container") == catalog.NodeSlots(1, 2)  # one stand-in GPU, two ranks
    assert catalog.node_slots("aws", "p5.48xlarge") == catalog.NodeSlots(8, 8)
    assert catalog.instance_type("alicloud", "ebmgn8v.48xlarge").name == "ecs.ebmgn8v.48xlarge"
