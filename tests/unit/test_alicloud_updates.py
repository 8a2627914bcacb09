"""What an `up` does to running Alibaba Cloud nodes, said per node like on AWS (test_node_updates.py).

Alibaba's GPU nodes are ecs.Instance resources without a launch template: each carries its boot script and host
image itself. Which input changes replace a node and which restart it comes from the cloud's node update facts
(clouds/alicloud/nodes.py NODE_UPDATES, from terraform-provider-alicloud's ForceNew schema). The boot script (user
data, naming the golden image by digest) is held as on AWS: a running node keeps its own until rolled, and a rolled
node is replaced so the new node runs the new script. Each scenario plans the shipped ebmgn8v stack, turns the plan
into the deployment an `up` would leave, changes the stack and plans again against that deployment, as `goldenenv
plan` does against the stack's last deployment.
"""

from __future__ import annotations

import ast
import base64
import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import pulumi_alicloud
import pytest

from goldenenv import clouds, plan, stackconfig
from goldenenv.clouds.alicloud.nodes import NODE_UPDATES, boot_script_news
from goldenenv.plan import offline_context, plan_config, stack_file
from goldenenv.updates import Deployment, node_changes, pinning_note, stale_nodes

STACK = "alicloud-ebmgn8v-2node"
INSTANCE = "alicloud:ecs/instance:Instance"
NODE_POOL = "goldenenv:alicloud:GpuNodePool"
ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "registry.cn-wulanchabu.aliyuncs.com/llm-pretrain/alicloud-h100"
IMAGE_A = f"{REPOSITORY}@sha256:{'a' * 64}"
IMAGE_B = f"{REPOSITORY}@sha256:{'b' * 64}"
"""Two pushes of the golden image: the second moves only the digest the nodes' boot script pulls."""


def gpu_nodes(p) -> list:
    """The pools' nodes: every instance but the Slurm head (<stack>-head)."""
    return [r for r in p.of_type(INSTANCE) if not r.name.endswith("-head")]


def config() -> dict:
    return copy.deepcopy(stackconfig.read_stack_file(stack_file(STACK)))


def changed(**values) -> dict:
    """The stack with `goldenenv:<key>` set (dotted keys reach into a section)."""
    found = config()
    for key, value in values.items():
        section, _, field = key.partition("__")
        if field:
            found[f"goldenenv:{section}"][field] = value
        else:
            found[f"goldenenv:{section}"] = value
    return found


def pushed(ref: str) -> dict:
    """The stack with its golden image pinned to this digest (image.ref), as after `goldenenv image push`."""
    return changed(image={**config()["goldenenv:image"], "ref": ref})


def actions(changes) -> list[str]:
    return [c.action for c in changes]


def rolling(p, *nodes):
    """The offline context of a plan, asking to roll these nodes (what --roll-nodes / GOLDENENV_ROLL_NODES give)."""
    return dataclasses.replace(offline_context(p.spec), roll_nodes=frozenset(nodes))


@pytest.fixture(scope="module")
def first():
    return plan_config(STACK, config())


@pytest.fixture(scope="module")
def deployed(first):
    return Deployment.from_plan(first)


def replan(deployed, values, context=None):
    again = plan_config(STACK, values, prior=deployed, context=context)
    return again, node_changes(deployed, again.resources)


@pytest.fixture(scope="module")
def on_image_a():
    """The stack deployed with golden image A."""
    return plan_config(STACK, pushed(IMAGE_A))


@pytest.fixture(scope="module")
def deployed_a(on_image_a):
    return Deployment.from_plan(on_image_a)


def test_the_cloud_says_how_its_nodes_take_a_change_and_updates_knows_no_cloud():
    assert clouds.get("alicloud").node_updates is NODE_UPDATES
    assert NODE_UPDATES.template is None and NODE_UPDATES.node_types == (INSTANCE,)
    assert clouds.get("aws").node_updates.template.type == "aws:ec2/launchTemplate:LaunchTemplate"
    source = (ROOT / "goldenenv" / "updates.py").read_text()
    imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith(("goldenenv.clouds.aws", "goldenenv.clouds.alicloud"))}
    assert "aws:" not in source and "alicloud:" not in source


def test_the_replacing_and_restarting_inputs_are_inputs_of_the_installed_provider():
    """Every input named is one pulumi-alicloud's ecs.Instance takes (engine names), so none is a typo."""
    args = pulumi_alicloud.ecs.InstanceArgs
    inputs = {getattr(p.fget, "_pulumi_name", None) for p in vars(args).values() if isinstance(p, property)}
    assert NODE_UPDATES.replacing <= inputs, sorted(NODE_UPDATES.replacing - inputs)
    assert set(NODE_UPDATES.restarting) <= inputs, sorted(set(NODE_UPDATES.restarting) - inputs)
    assert not NODE_UPDATES.replacing & set(NODE_UPDATES.restarting)
    assert {"availabilityZone", "networkInterfaces", "spotStrategy", "systemDiskCategory"} <= NODE_UPDATES.replacing
    assert {"userData", "imageId", "instanceType", "vswitchId"} <= set(NODE_UPDATES.restarting)


def test_nodes_pin_no_template_hold_their_boot_script_and_are_deleted_before_replacement(first):
    nodes = gpu_nodes(first)
    assert len(nodes) == 2
    for node in nodes:
        assert node.delete_before_replace is True
        assert "launchTemplateId" not in node.props and "userData" in node.props
        assert node.ignore_changes == ("userData",)  # the stack sets no ttl: nothing else is ignored
    note = pinning_note(first.resources)
    assert note == pinning_note(first.resources, NODE_UPDATES) and note in first.update_notes
    assert "no launch template" in note and "only with `goldenenv up --roll-nodes`" in note
    assert "restarting" in note  # a new instance type or vSwitch still restarts them


def test_the_pool_records_the_boot_script_each_node_gets_now(first):
    (pool,) = first.of_type(NODE_POOL)
    digests = {n.name: hashlib.sha256(n.props["userData"].encode()).hexdigest() for n in gpu_nodes(first)}
    assert pool.outputs["boot_scripts"] == digests
    assert set(digests) == {f"{STACK}-gpu-0", f"{STACK}-gpu-1"}


def test_a_rolled_node_replaces_on_a_new_boot_script_and_the_others_ignore_it(monkeypatch, on_image_a):
    """What the engine gets: ignoreChanges on the held nodes, replaceOnChanges on the rolled one only."""
    registered = {}
    record = plan._RecordingMonitor.RegisterResource

    def register(self, request):
        if request.type == INSTANCE and not request.name.endswith("-head"):
            registered[request.name] = (tuple(request.ignoreChanges), tuple(request.replaceOnChanges))
        return record(self, request)

    monkeypatch.setattr(plan._RecordingMonitor, "RegisterResource", register)
    plan_config(STACK, pushed(IMAGE_B), context=rolling(on_image_a, "gpu-0"))
    assert registered == {f"{STACK}-gpu-0": ((), ("userData",)), f"{STACK}-gpu-1": (("userData",), ())}

    registered.clear()
    plan_config(STACK, changed(lifecycle={"ttlHours": 24}), context=rolling(on_image_a, "gpu"))
    assert set(registered.values()) == {(("autoReleaseTime",), ("userData",))}


def test_first_plan_creates_every_node(first):
    changes = node_changes(None, first.resources)
    assert [(c.node, c.pool, c.action) for c in changes] == [("gpu-0", "gpu", "create"), ("gpu-1", "gpu", "create")]
    assert all(c.version is None and c.template_version is None for c in changes)


def test_unchanged_replan_keeps_every_node_at_its_id_and_address(first, deployed):
    again, changes = replan(deployed, config())

    def addresses(p):
        return {n.name: (n.id, n.outputs["privateIp"]) for n in gpu_nodes(p)}

    assert addresses(again) == addresses(first)
    assert actions(changes) == ["keep", "keep"]
    assert all(c.reason == "unchanged" for c in changes)
    assert again.update_notes == ["2 to keep"]


def test_a_new_zone_replaces_every_node_and_erases_its_system_disk(deployed):
    again, changes = replan(deployed, changed(zone="cn-wulanchabu-a"))
    assert actions(changes) == ["replace", "replace"]
    for c in changes:
        assert c.erases_scratch
        assert "availabilityZone" in c.reason and "cannot change in place" in c.reason
        assert "deleted before its replacement is created" in c.reason and "system disk" in c.reason
    assert again.update_notes == ["2 to replace"]


def test_a_type_with_another_eri_layout_replaces_the_nodes(deployed):
    _, changes = replan(deployed, changed(nodes__instanceType="ecs.gn8is-8x.32xlarge"))  # one ERI, not two
    assert actions(changes) == ["replace", "replace"]
    assert all("networkInterfaces" in c.reason for c in changes)


def test_a_type_with_the_same_eri_layout_is_changed_in_place_with_a_restart(deployed):
    _, changes = replan(deployed, changed(nodes__instanceType="ecs.ebmgn7ex.32xlarge"))
    assert actions(changes) == ["update", "update"]
    for c in changes:
        assert "instanceType" in c.reason and "stops the node" in c.reason and "starts it again" in c.reason


def test_spot_capacity_replaces_the_nodes(deployed):
    _, changes = replan(deployed, changed(nodes__capacity="spot"))
    assert actions(changes) == ["replace", "replace"]
    assert all("spotStrategy" in c.reason for c in changes)


def test_a_new_golden_image_neither_restarts_nor_replaces_a_node_by_default(on_image_a, deployed_a):
    again, changes = replan(deployed_a, pushed(IMAGE_B))
    (before,), (after,) = ({n.props["userData"] for n in gpu_nodes(p)} for p in (on_image_a, again))
    assert before != after  # the program gives the nodes a new boot script
    assert actions(changes) == ["keep", "keep"]  # 0 to replace, 0 to update (restart)
    assert again.update_notes == ["2 to keep"]
    for c in changes:
        assert c.reason == (
            "keeps its boot script (a newer one is planned: the golden image moved from sha256:aaaaaaaaaaaa to "
            "sha256:bbbbbbbbbbbb): nodes ignore boot script changes, so it is neither restarted nor replaced; "
            f"`goldenenv up --roll-nodes {c.node}` replaces it, and the new node runs the new boot script")
        assert not c.erases_scratch


def test_rolling_one_node_replaces_exactly_that_node_onto_the_new_boot_script(on_image_a, deployed_a):
    again, changes = replan(deployed_a, pushed(IMAGE_B), rolling(on_image_a, "gpu-0"))
    assert [(c.node, c.action) for c in changes] == [("gpu-0", "replace"), ("gpu-1", "keep")]
    assert again.update_notes == ["1 to keep, 1 to replace"]
    rolled, kept = changes
    assert rolled.erases_scratch and rolled.reason == (
        "replaced onto the new boot script (the golden image moved from sha256:aaaaaaaaaaaa to "
        "sha256:bbbbbbbbbbbb) because it is rolled: deleted before its replacement is created, which erases its "
        "system disk; keep checkpoints in the bucket or the parallel file system")
    assert kept.reason.startswith("keeps its boot script") and "--roll-nodes gpu-1" in kept.reason


def test_rolling_without_a_new_boot_script_replaces_nothing(on_image_a, deployed_a):
    _, changes = replan(deployed_a, pushed(IMAGE_A), rolling(on_image_a, "all"))
    assert actions(changes) == ["keep", "keep"] and all(c.reason == "unchanged" for c in changes)


def test_any_boot_script_change_is_held_and_plan_names_the_files_it_changes(first, deployed):
    values = config()
    values["goldenenv:storage"]["parallelFs"]["checkpointPrefix"] = "checkpoints-v2/"
    _, changes = replan(deployed, values)
    assert actions(changes) == ["keep", "keep"]
    for c in changes:
        assert "keeps its boot script (a newer one is planned: changed " in c.reason
        assert "launch.env" in c.reason and "golden image" not in c.reason
        assert "stops the node" not in c.reason


def test_a_type_change_the_user_asked_for_still_restarts_while_the_boot_script_is_held(deployed_a):
    values = pushed(IMAGE_B)
    values["goldenenv:nodes"]["instanceType"] = "ecs.ebmgn7ex.32xlarge"
    _, changes = replan(deployed_a, values)
    assert actions(changes) == ["update", "update"]
    for c in changes:
        assert c.reason.startswith("updated in place (instanceType): Alibaba stops the node, changes its type")
        assert "keeps its boot script (a newer one is planned: the golden image moved" in c.reason


def test_a_node_replaced_unrolled_says_it_boots_its_old_boot_script(deployed_a):
    values = pushed(IMAGE_B)
    values["goldenenv:zone"] = "cn-wulanchabu-a"
    _, changes = replan(deployed_a, values)
    assert actions(changes) == ["replace", "replace"]
    for c in changes:
        assert "because availabilityZone (zone) cannot change in place (the new node boots the boot script this " \
               "one has, not the planned one: the golden image moved" in c.reason
        assert f"`goldenenv up --roll-nodes {c.node}` then replaces it" in c.reason


def test_boot_script_news_reads_the_golden_image_and_the_files_from_the_user_data():
    def user_data(ref: str | None, env: str = "A=1") -> str:
        files = [{"path": "/etc/goldenenv/launch.env", "content": env}]
        if ref:
            files.append({"path": "/opt/goldenenv/golden-image.sh", "content": f"set -e\nimage='{ref}'\nrun\n"})
        text = "#cloud-config\n" + json.dumps({"write_files": files})
        return base64.b64encode(text.encode()).decode()

    assert boot_script_news(user_data(IMAGE_A), user_data(IMAGE_B)) == \
        "the golden image moved from sha256:aaaaaaaaaaaa to sha256:bbbbbbbbbbbb"
    other = f"registry.cn-hangzhou.aliyuncs.com/x/y@sha256:{'c' * 64}"
    assert boot_script_news(user_data(IMAGE_A), user_data(other, "A=2")) == (
        f"the golden image moved from {REPOSITORY}@sha256:aaaaaaaaaaaa to "
        "registry.cn-hangzhou.aliyuncs.com/x/y@sha256:cccccccccccc; changed launch.env")
    assert boot_script_news(user_data(None), user_data(IMAGE_A)) == \
        f"the golden image is now {REPOSITORY}@sha256:aaaaaaaaaaaa (none before); changed golden-image.sh"
    assert boot_script_news(user_data(IMAGE_A), user_data(IMAGE_A)) == ""
    assert boot_script_news({"4dabf18193072939515e22adb298388d": "x", "ciphertext": "..."}, user_data(IMAGE_A)) == ""


def test_a_new_host_image_replaces_the_system_disk_in_place(deployed):
    _, changes = replan(deployed, changed(nodes__hostImage={"id": "m-abcdefgh12345678", "driver": "570.86.15"}))
    assert actions(changes) == ["update", "update"]
    assert all("imageId (host image)" in c.reason and "replaces its system disk" in c.reason for c in changes)


def test_a_tag_change_updates_the_nodes_in_place_without_a_restart(deployed):
    values = config()
    values["goldenenv:tags"]["owner"] = "another-team"
    _, changes = replan(deployed, values)
    assert actions(changes) == ["update", "update"]
    for c in changes:
        assert c.reason == "updated in place (tags, volumeTags)"


def checkpoint(plan, stack: str, components: bool = True) -> dict:
    """The file backend's stack checkpoint an `up` of this plan leaves: components (not custom) included, as the
    Pulumi CLI writes them, with the engine's bookkeeping keys."""
    return json.loads(json.dumps({"version": 3, "checkpoint": {"stack": f"organization/goldenenv/{stack}", "latest": {
        "resources": [
            {"urn": f"urn:pulumi:{stack}::goldenenv::pulumi:pulumi:Stack::goldenenv-{stack}", "custom": False,
             "type": "pulumi:pulumi:Stack"},
            *({"urn": r.urn, "custom": r.custom, "id": r.id, "type": r.type,
               "inputs": {**r.props, "__defaults": []}, "outputs": dict(r.outputs)}
              for r in plan.resources if r.custom or components),
        ]}}}, default=str))


@pytest.mark.parametrize("components", [True, False])
def test_a_file_backend_checkpoint_names_its_cloud_and_answers_like_the_deployed_stack(tmp_path, first, components):
    path = tmp_path / ".pulumi" / "stacks" / "goldenenv" / f"{STACK}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(checkpoint(first, STACK, components)))
    loaded = Deployment.load(STACK, tmp_path)
    assert loaded is not None and loaded.cloud == "alicloud"  # from goldenenv:alicloud:*, else alicloud:* tokens
    assert len(gpu_nodes(loaded)) == 2

    changes = node_changes(loaded, plan_config(STACK, changed(zone="cn-wulanchabu-b"), prior=loaded).resources)
    assert actions(changes) == ["replace", "replace"]
    assert stale_nodes(loaded) == []  # every node runs the boot script its pool gives it
    assert (len(loaded.components_of_type(NODE_POOL)) == 1) is components


def after_plain_up(before, now, stack: str = STACK, *rolled: str) -> dict:
    """The checkpoint a plain `up` of plan `now` leaves over the deployment of plan `before` when only the boot
    script moved: the nodes keep their user data (ignored; the rolled ones are replaced onto the new one), the pool
    records the new one."""
    data = checkpoint(before, stack, components=False)
    resources = data["checkpoint"]["latest"]["resources"]
    new_scripts = {n.urn: n.props["userData"] for n in gpu_nodes(now)}
    for r in resources:
        if r["type"] == INSTANCE and r["urn"].endswith(rolled or ("-none-",)):
            r["inputs"]["userData"] = new_scripts[r["urn"]]
    resources += [r for r in checkpoint(now, stack)["checkpoint"]["latest"]["resources"] if r["custom"] is False
                  and r["type"] != "pulumi:pulumi:Stack"]
    return data


def test_stale_nodes_are_those_whose_boot_script_is_not_the_one_their_pool_gives_now(tmp_path, on_image_a):
    moved = plan_config(STACK, pushed(IMAGE_B))
    path = tmp_path / f"{STACK}.json"
    path.write_text(json.dumps(after_plain_up(on_image_a, moved)))
    assert stale_nodes(Deployment.from_checkpoint(path)) == ["gpu-0", "gpu-1"]
    path.write_text(json.dumps(after_plain_up(on_image_a, moved, STACK, "gpu-1")))
    assert stale_nodes(Deployment.from_checkpoint(path)) == ["gpu-0"]
    path.write_text(json.dumps(checkpoint(on_image_a, STACK, components=False)))  # pools recorded nothing
    assert stale_nodes(Deployment.from_checkpoint(path)) == []


class UpStack:
    """An Automation API stack as automation.up drives it: the ups it ran, the roll variable each saw."""

    def __init__(self):
        self.workspace = type("Workspace", (), {"env_vars": {}})()
        self.seen: list[str | None] = []

    def outputs(self):
        return {"nodePrivateIps": type("Out", (), {"value": ["10.42.0.10", "10.42.0.11"]})()}

    def up(self, on_output=None, **options):
        from goldenenv.clouds.base import ROLL_NODES_ENV

        self.seen.append(self.workspace.env_vars.get(ROLL_NODES_ENV))
        return type("Result", (), {"outputs": self.outputs()})()


def roll_up(monkeypatch, tmp_path, left: dict, requested: list[str]) -> tuple[UpStack, list[str]]:
    """`goldenenv up --roll-nodes` over a stack whose plain up leaves this checkpoint: the ups it runs."""
    from goldenenv import automation
    from goldenenv.lifecycle import load_spec

    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
    path = tmp_path / ".pulumi" / "stacks" / "goldenenv" / f"{STACK}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(left))
    monkeypatch.setattr(automation, "guard", lambda spec, creating, **_: None)
    monkeypatch.setattr(automation, "_before_up", lambda spec, log: None)
    target, lines = UpStack(), []
    automation.up(load_spec(STACK), log=lines.append, roll_nodes=requested, target=target)
    return target, lines


def test_up_roll_nodes_rolls_no_alibaba_node_that_runs_its_pools_boot_script(monkeypatch, tmp_path, first):
    target, lines = roll_up(monkeypatch, tmp_path, checkpoint(first, STACK), ["all"])
    assert target.seen == [None]  # the plain up only
    assert any("no node to roll" in line for line in lines)


@pytest.mark.parametrize("requested,rolled", [
    (["all"], ["gpu-0", "gpu-1"]), (["gpu"], ["gpu-0", "gpu-1"]), (["gpu-1"], ["gpu-1"]), ([], []),
])
def test_up_roll_nodes_replaces_the_named_nodes_behind_their_boot_script_one_up_each(
        monkeypatch, tmp_path, on_image_a, requested, rolled):
    left = after_plain_up(on_image_a, plan_config(STACK, pushed(IMAGE_B)))
    target, _ = roll_up(monkeypatch, tmp_path, left, requested)
    assert target.seen == [None] + rolled  # the plain up first: it restarts and replaces no node


def test_plan_against_the_last_deployment_says_which_alibaba_nodes_an_up_replaces(plan_after_up, tmp_path, first):
    doc = json.loads(plan_after_up(STACK, checkpoint(first, STACK), changed(zone="cn-wulanchabu-a"), "--json"))
    assert str(tmp_path) in doc["updateNotes"][0] and doc["updateNotes"][1] == "2 to replace"
    assert [(n["node"], n["action"]) for n in doc["nodes"]] == [("gpu-0", "replace"), ("gpu-1", "replace")]
    assert all("availabilityZone" in n["reason"] and n["version"] is None for n in doc["nodes"])


def test_plan_after_an_image_push_says_every_alibaba_node_keeps_its_boot_script(plan_after_up, on_image_a):
    output = plan_after_up(STACK, checkpoint(on_image_a, STACK), pushed(IMAGE_B))
    shown = " ".join(output.split())  # as read, whatever the terminal's width
    assert "nodes: 2 to keep" in shown
    assert ("keep gpu-0: keeps its boot script (a newer one is planned: the golden image moved from "
            "sha256:aaaaaaaaaaaa to sha256:bbbbbbbbbbbb)") in shown
    assert "`goldenenv up --roll-nodes gpu-1` replaces it" in shown and "replace gpu-" not in shown
