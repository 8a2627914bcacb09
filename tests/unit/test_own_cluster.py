"""RULE: a cloud goldenenv provisions itself (uses_pulumi False) hands the shared steps a cluster that is the whole
OwnCluster protocol (goldenenv/clouds/owncluster.py), each method taking the arguments the steps pass; a stack of a
Pulumi cloud is refused by those steps with the commands that drive it.

up, destroy, run, validate, health, the drills and the queue commands had imported the local cloud's LocalCluster
and drove its containers themselves; now they ask Cloud.own_cluster, so these are the promises they rely on. Every
cloud of the registry and every shipped stack of it is held to them, with no Docker engine (the cluster is only
made, never started).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import clouds, lifecycle, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.owncluster import OwnCluster
from goldenenv.spec import ConfigError
from goldenenv.streams import RunResult
from tests.unit.shipped import STACKS, pulumi_stacks

MEMBERS = sorted(n for n in {*vars(OwnCluster), *OwnCluster.__annotations__} if not n.startswith("_"))


def own_stacks() -> list[tuple[str, str]]:
    """(cloud, stack) of every shipped stack of a registered cloud goldenenv provisions itself."""
    found = []
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        cloud = stackconfig.read_stack_file(path).get("goldenenv:cloud")
        if cloud in clouds.names() and not clouds.get(cloud).uses_pulumi:
            found.append((cloud, path.name.removeprefix("Pulumi.").removesuffix(".yaml")))
    return found


class StandInEngine:
    """A Docker client that is never called: making a cluster must not reach the engine."""

    def __getattr__(self, name):
        raise AssertionError(f"the engine was asked for {name} while the cluster was only made")


def test_there_is_a_stack_to_hold_to_the_rule():
    assert ("local", "local") in own_stacks()


@pytest.mark.parametrize("cloud,stack", own_stacks())
def test_a_self_provisioned_clouds_cluster_is_the_whole_protocol(cloud, stack):
    engine = StandInEngine()
    cluster = clouds.get(cloud).own_cluster(lifecycle.load_spec(stack, STACKS), engine)
    assert cluster.client is engine, "ensure_image builds the golden image on the engine the cluster runs on"
    missing = [name for name in MEMBERS if not hasattr(cluster, name)]
    assert missing == [], f"{cloud}'s own cluster lacks {missing} of OwnCluster"
    wrong = []
    for name in MEMBERS:
        if not inspect.isfunction(vars(OwnCluster).get(name)):
            continue
        asked = [p.name for p in list(inspect.signature(vars(OwnCluster)[name]).parameters.values())[1:]]
        given = list(inspect.signature(getattr(cluster, name)).parameters.values())
        if [p.name for p in given[:len(asked)]] != asked or any(p.default is p.empty for p in given[len(asked):]):
            wrong.append(f"{name}{inspect.signature(getattr(cluster, name))}")
    assert wrong == [], f"{cloud}'s own cluster does not take the arguments the shared steps pass: {wrong}"


def one_stack_per_cloud() -> list[tuple[str, str]]:
    return list({cloud: (cloud, stack) for cloud, stack in reversed(pulumi_stacks())}.values())


@pytest.mark.parametrize("cloud,stack", one_stack_per_cloud())
def test_a_pulumi_clouds_stack_is_refused_by_the_steps_on_own_clusters(cloud, stack):
    with pytest.raises(ConfigError) as refused:
        lifecycle.own_cluster(lifecycle.load_spec(stack, STACKS), StandInEngine())
    assert refused.value.problems[0].key == "goldenenv:cloud"
    assert refused.value.problems[0].message == (f"this step runs on the local cloud; {stack} is on {cloud}: use "
                                                 "goldenenv up/destroy, which drive Pulumi")


def test_the_drill_on_a_cloud_stack_says_so_and_exits_1():
    cloud, stack = pulumi_stacks()[0]
    result = CliRunner().invoke(app, ["drill", "-s", stack])
    assert result.exit_code == 1, (result.output, result.exception)
    assert f"{stack} is on {cloud}: use goldenenv up/destroy, which drive Pulumi" in " ".join(result.output.split())


class RecordingCluster:
    """The OwnCluster calls lifecycle.run makes, in order."""

    def __init__(self, client):
        self.client, self.calls = client, []

    def sync_code(self, folder: Path) -> None:
        self.calls.append(("sync_code", folder.name))

    def run(self, command: list[str], on_line, user: str) -> RunResult:
        self.calls.append(("run", command, user))
        on_line("node-0", "hello")
        return RunResult({"node-0": 0})


def test_run_syncs_the_code_first_then_runs_as_the_images_user(monkeypatch, tmp_path):
    spec = lifecycle.load_spec("local", STACKS)
    cluster = RecordingCluster(StandInEngine())
    monkeypatch.setattr(type(clouds.get("local")), "own_cluster", lambda self, spec, client=None: cluster)
    lines = []
    result = lifecycle.run(spec, ["python", "/data/code/train_ddp.py"], lambda node, text: lines.append((node, text)),
                           code=tmp_path)
    assert result.ok and lines == [("node-0", "hello")]
    assert cluster.calls == [("sync_code", tmp_path.name), ("run", ["python", "/data/code/train_ddp.py"], "trainer")]
