"""Explicit update semantics: a new launch template version never replaces a running GPU node unless rolled.

Each scenario plans the shipped p5 stack, turns the plan into the deployment an `up` would leave, changes the
stack and plans again against that deployment, as `goldenenv plan` does against the stack's last deployment.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from goldenenv import stackconfig
from goldenenv.clouds.base import ROLL_NODES_ENV
from goldenenv.plan import offline_context, plan_config, stack_file
from goldenenv.updates import Deployment, last_deployment, node_changes, pinning_note, roll, stale_nodes

STACK = "aws-p5-2node"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"


def config(**storage_nvme) -> dict:
    values = copy.deepcopy(stackconfig.read_stack_file(stack_file(STACK)))
    values["goldenenv:storage"]["localNvme"].update(storage_nvme)
    return values


def rolling(first, *nodes):
    """The offline context of the first plan, asking to roll these nodes."""
    return dataclasses.replace(offline_context(first.spec), roll_nodes=frozenset(nodes))


def template(p):
    (found,) = p.of_type(LT)
    return found


def gpu_nodes(resources) -> list:
    """The pool's nodes: the instances pinning the launch template (the Slurm head is an instance of its own)."""
    return [r for r in resources if r.type == INSTANCE and "launchTemplate" in (r.props if hasattr(r, "props")
                                                                               else r.inputs)]


def actions(changes) -> list[str]:
    return [c.action for c in changes]


@pytest.fixture(scope="module")
def first():
    return plan_config(STACK, config())


@pytest.fixture(scope="module")
def deployed(first):
    return Deployment.from_plan(first)


@pytest.fixture(scope="module")
def new_boot_script():
    """The stack with its NVMe scratch mounted elsewhere: only the nodes' boot script changes."""
    return config(mountPoint="/nvme")


def test_nodes_pin_a_concrete_template_version_and_are_deleted_before_replacement(first):
    nodes = gpu_nodes(first.resources)
    assert len(nodes) == 2
    for node in nodes:
        assert node.props["launchTemplate"] == {"id": template(first).id, "version": "1"}
        assert node.ignore_changes == ("launchTemplate",)
        assert node.delete_before_replace is True
    assert template(first).props["updateDefaultVersion"] is True
    assert "version 1" in pinning_note(first.resources) and "--roll-nodes" in pinning_note(first.resources)


def test_first_plan_creates_every_node(first):
    changes = node_changes(None, first.resources)
    assert [(c.node, c.pool, c.action) for c in changes] == [("gpu-0", "gpu", "create"), ("gpu-1", "gpu", "create")]


def test_unchanged_replan_keeps_template_version_1_and_every_node(first, deployed):
    again = plan_config(STACK, config(), prior=deployed)
    assert template(again).outputs["latestVersion"] == 1
    assert template(again).id == template(first).id
    def addresses(p):  # by name: resources register in no fixed order
        return {n.name: (n.id, n.outputs["privateIp"]) for n in p.of_type(INSTANCE)}

    assert addresses(again) == addresses(first)
    changes = node_changes(deployed, again.resources)
    assert actions(changes) == ["keep", "keep"]
    assert all(c.version == "1" and c.template_version == "1" for c in changes)


def test_a_new_boot_script_moves_the_template_but_replaces_no_node(first, deployed, new_boot_script):
    changed = plan_config(STACK, new_boot_script, prior=deployed)
    assert template(changed).props["userData"] != template(first).props["userData"]
    assert template(changed).outputs["latestVersion"] == 2
    changes = node_changes(deployed, changed.resources)
    assert actions(changes) == ["keep", "keep"]
    for c in changes:
        assert (c.version, c.template_version) == ("1", "2")
        assert "version 1" in c.reason and "version 2" in c.reason
        assert "userData" in c.reason
        assert f"--roll-nodes {c.node}" in c.reason


def test_rolling_all_nodes_replaces_both_onto_version_2(first, deployed, new_boot_script):
    rolled = plan_config(STACK, new_boot_script, prior=deployed, context=rolling(first, "all"))
    assert all(n.ignore_changes == () for n in rolled.of_type(INSTANCE))
    changes = node_changes(deployed, rolled.resources)
    assert actions(changes) == ["replace", "replace"]
    for c in changes:
        assert c.version == "2" and c.erases_scratch
        assert "NVMe" in c.reason and "userData" in c.reason


def test_rolling_one_node_replaces_exactly_that_node(first, deployed, new_boot_script):
    rolled = plan_config(STACK, new_boot_script, prior=deployed, context=rolling(first, "gpu-0"))
    changes = {c.node: c for c in node_changes(deployed, rolled.resources)}
    assert [n for n, c in changes.items() if c.action == "replace"] == ["gpu-0"]
    assert changes["gpu-1"].action == "keep" and changes["gpu-1"].version == "1"


def test_rolling_without_a_template_change_replaces_nothing(first, deployed):
    again = plan_config(STACK, config(), prior=deployed, context=rolling(first, "all"))
    assert actions(node_changes(deployed, again.resources)) == ["keep", "keep"]


def test_a_tag_change_updates_nodes_in_place_and_names_the_template_change(first, deployed):
    values = config()
    values["goldenenv:lifecycle"]["ttlHours"] = 24  # the ttl is a node tag, launch tags included
    changed = plan_config(STACK, values, prior=deployed)
    changes = node_changes(deployed, changed.resources)
    assert actions(changes) == ["update", "update"]
    for c in changes:
        assert "tags" in c.reason and "tagSpecifications" in c.reason
        assert (c.version, c.template_version) == ("1", "2")


def checkpoint(deployment: Deployment, stack: str) -> dict:
    """The file backend's stack checkpoint for a deployment, with the engine's bookkeeping keys (a copy: assets
    become text)."""
    return json.loads(json.dumps({"version": 3, "checkpoint": {"stack": f"organization/goldenenv/{stack}", "latest": {
        "manifest": {"time": "2025-01-01T00:00:00Z", "magic": "", "version": "v3.200.0"},
        "resources": [
            {"urn": f"urn:pulumi:{stack}::goldenenv::pulumi:pulumi:Stack::goldenenv-{stack}", "custom": False,
             "type": "pulumi:pulumi:Stack"},
            *({"urn": r.urn, "custom": True, "id": r.id, "type": r.type,
               "inputs": {**r.inputs, "__defaults": []}, "outputs": r.outputs}
              for r in deployment.resources.values()),
        ]}}}, default=str))


def test_file_backend_checkpoint_is_read_and_answers_like_the_deployed_stack(tmp_path, first, deployed,
                                                                             new_boot_script):
    path = tmp_path / ".pulumi" / "stacks" / "goldenenv" / f"{STACK}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(checkpoint(deployed, STACK)))

    loaded = Deployment.load(STACK, tmp_path)
    assert loaded is not None and loaded.stack == STACK
    assert loaded.get(LT, template(first).name).outputs["latestVersion"] == 1
    assert len(gpu_nodes(loaded.of_type(INSTANCE))) == 2
    assert Deployment.load("never-deployed", tmp_path) is None

    changed = plan_config(STACK, new_boot_script, prior=loaded)
    assert template(changed).outputs["latestVersion"] == 2
    assert actions(node_changes(loaded, changed.resources)) == ["keep", "keep"]


def test_older_checkpoint_layout_and_the_local_backend_are_read(tmp_path, monkeypatch, deployed):
    path = tmp_path / ".pulumi" / "stacks" / f"{STACK}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(checkpoint(deployed, STACK)))
    assert len(gpu_nodes(Deployment.load(STACK, tmp_path).of_type(INSTANCE))) == 2

    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
    found, note = last_deployment(STACK)
    assert found is not None and str(tmp_path) in note
    found, note = last_deployment("never-deployed")
    assert found is None and "never deployed" in note


def test_a_remote_backend_is_not_read_offline(monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://state-bucket/goldenenv")
    found, note = last_deployment(STACK)
    assert found is None
    assert "s3://state-bucket/goldenenv" in note and "not read" in note


def test_stale_nodes_are_those_behind_their_template(tmp_path, deployed):
    data = checkpoint(deployed, STACK)
    for r in data["checkpoint"]["latest"]["resources"]:
        if r["type"] == LT:
            r["outputs"]["latestVersion"] = 2
        if r["type"] == INSTANCE and r["urn"].endswith("gpu-1"):
            r["inputs"]["launchTemplate"]["version"] = "2"
    path = tmp_path / f"{STACK}.json"
    path.write_text(json.dumps(data))
    assert stale_nodes(Deployment.from_checkpoint(path)) == ["gpu-0"]
    assert stale_nodes(deployed) == []


class FakeStack:
    """An Automation API stack as roll() uses it: one `up`, the roll variable its program would see."""

    def __init__(self, env, fail_at=None):
        self.workspace = type("Workspace", (), {"env_vars": env})()
        self.seen: list[str | None] = []
        self.fail_at = fail_at

    def up(self, on_output=None):
        self.seen.append(self.workspace.env_vars.get(ROLL_NODES_ENV))
        on_output("Resources: 1 replaced")
        if len(self.seen) == self.fail_at:
            raise RuntimeError("up failed")


def test_roll_runs_one_up_per_node_and_restores_the_environment():
    env = {"PULUMI_BACKEND_URL": "file:///state"}
    target, lines = FakeStack(env), []
    assert roll(target, ["gpu-0", "gpu-1"], lines.append) == ["gpu-0", "gpu-1"]
    assert target.seen == ["gpu-0", "gpu-1"]
    assert env == {"PULUMI_BACKEND_URL": "file:///state"}
    assert any("gpu-0" in line and "1/2" in line for line in lines)
    assert "Resources: 1 replaced" in lines


def test_roll_all_at_once_and_after_a_failure_restores_what_was_set():
    env = {ROLL_NODES_ENV: "gpu-9"}
    target = FakeStack(env)
    assert roll(target, ["gpu-0", "gpu-1"], lambda line: None, one_at_a_time=False) == ["gpu-0", "gpu-1"]
    assert target.seen == ["gpu-0,gpu-1"]
    assert env == {ROLL_NODES_ENV: "gpu-9"}

    failing = FakeStack({}, fail_at=2)
    with pytest.raises(RuntimeError):
        roll(failing, ["gpu-0", "gpu-1"], lambda line: None)
    assert failing.seen == ["gpu-0", "gpu-1"]
    assert failing.workspace.env_vars == {}
    assert roll(FakeStack({}), [], lambda line: None) == []


# ---------------------------------------------------------------- `goldenenv up --roll-nodes` and `goldenenv plan`

class UpStack(FakeStack):
    """A stack automation.up drives: its outputs after the ups."""

    def outputs(self):
        return {"nodePrivateIps": type("Out", (), {"value": ["10.42.0.10", "10.42.0.11"]})()}

    def up(self, on_output=None, **options):
        super().up(on_output)
        return type("Result", (), {"outputs": self.outputs()})()


def _stale_deployment(tmp_path, deployed, *stale):
    data = checkpoint(deployed, STACK)
    for r in data["checkpoint"]["latest"]["resources"]:
        if r["type"] == LT:
            r["outputs"]["latestVersion"] = 2
        if r["type"] == INSTANCE and "launchTemplate" in r["inputs"] and not any(r["urn"].endswith(n) for n in stale):
            r["inputs"]["launchTemplate"]["version"] = "2"
    path = tmp_path / ".pulumi" / "stacks" / "goldenenv" / f"{STACK}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return Deployment.load(STACK, tmp_path)


@pytest.mark.parametrize("requested,rolled", [
    (["all"], ["gpu-0", "gpu-1"]), (["gpu"], ["gpu-0", "gpu-1"]), (["gpu-1"], ["gpu-1"]), ([], []),
])
def test_up_roll_nodes_replaces_the_named_stale_nodes_one_up_each(monkeypatch, tmp_path, deployed, requested, rolled):
    from goldenenv import automation

    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
    _stale_deployment(tmp_path, deployed, "gpu-0", "gpu-1")
    monkeypatch.setattr(automation, "guard", lambda spec, creating, **_: None)
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)
    target = UpStack({})
    automation.up(first_spec(), log=lambda line: None, roll_nodes=requested, target=target)
    assert target.seen == [None] + rolled  # the plain up first: templates move, no node is replaced


def test_up_without_roll_nodes_runs_one_plain_up(monkeypatch):
    from goldenenv import automation

    monkeypatch.setattr(automation, "guard", lambda spec, creating, **_: None)
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)
    target = UpStack({})
    automation.up(first_spec(), log=lambda line: None, target=target)
    assert target.seen == [None]


def test_roll_nodes_names_a_node_the_stack_does_not_have(deployed):
    from goldenenv import automation

    with pytest.raises(automation.LifecycleError, match="gpu-7 is not a node of aws-p5-2node; valid: all, gpu, gpu-0"):
        automation.roll_targets(first_spec(), ["gpu-7"], deployed)


def test_plan_against_the_last_deployment_says_which_nodes_an_up_replaces(plan_after_up, tmp_path, deployed):
    doc = json.loads(plan_after_up(STACK, checkpoint(deployed, STACK), config(mountPoint="/nvme"), "--json"))
    assert str(tmp_path) in doc["updateNotes"][0] and doc["updateNotes"][1] == "2 to keep"
    assert [n["action"] for n in doc["nodes"]] == ["keep", "keep"]
    assert all("userData" in n["reason"] and "--roll-nodes gpu-" in n["reason"] for n in doc["nodes"])


def first_spec():
    from goldenenv.lifecycle import load_spec

    return load_spec(STACK)
