"""The local cluster end to end: the README's main job, and up/run/validate/destroy as a user drives them.

The local stack runs Slurm (a head container with slurmctld, slurmd in every node container): the flow submits the
training and the drill only kills a node; Slurm requeues the job and it resumes by itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from goldenenv import catalog, lifecycle
from goldenenv.clouds.local.cluster import NODE_LABEL, STACK_LABEL, LocalCluster
from goldenenv.flow import run_flow
from goldenenv.images.dockerfile import BuildOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"



@pytest.fixture(scope="module")
def spec():
    return lifecycle.load_spec("local")


@pytest.fixture(scope="module", autouse=True)
def clean_slate(spec, client):
    lifecycle.destroy(spec, purge_data=True, client=client, log=lambda m: None)
    yield
    lifecycle.destroy(spec, purge_data=True, client=client, log=lambda m: None)


def quiet(message: str) -> None:
    pass


def test_flow_builds_ups_validates_submits_drills_and_destroys_keeping_data(spec, client):
    assert spec.scheduler == "slurm", "the local stack shows the team workflow: a queue"
    report = run_flow(spec, BuildOptions.from_environment(), EXAMPLES, steps=80, console=Console(quiet=True),
                      client=client)
    assert [p.name for p in report.phases] == ["image", "up", "validate", "submit", "drill", "destroy"]
    assert report.ok, [(p.name, p.note) for p in report.phases if not p.ok]
    validation = report.value("validate")
    assert [(n.name, n.idle) for n in validation.scheduler] == [(f"node-{i}", True) for i in range(spec.nodes[0].count)]
    assert report.value("submit").state == "RUNNING"
    drill = report.value("drill")
    assert drill.restarts >= 1, "Slurm requeued the job with no command from anyone"
    assert drill.resumed_from == drill.checkpoint_before_kill > 0
    assert 0 <= drill.lost_steps <= drill.interval, drill
    assert drill.final_step == 80 > drill.step_at_kill
    assert LocalCluster(spec, client).nodes() == []
    assert LocalCluster(spec, client).data_kept(), "destroy keeps datasets and checkpoints"


def test_up_twice_gives_the_same_cluster_with_cloud_like_outputs(spec, client):
    first = lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    second = lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    assert first == second
    shape = catalog.local_shapes()[spec.nodes[0].instance_type]
    assert first["hostfile"].splitlines() == [f"{ip} slots={shape.processes_per_node}" for ip in first["nodePrivateIps"]]
    assert first["launchEnv"]["MASTER_ADDR"] == first["nodePrivateIps"][0]
    assert first["launchEnv"]["NNODES"] == str(spec.nodes[0].count)
    nodes = client.containers.list(filters={"label": [f"{STACK_LABEL}={spec.stack}", NODE_LABEL]})
    assert len(nodes) == spec.nodes[0].count
    assert {c.attrs["HostConfig"]["NetworkMode"] for c in nodes} == {f"goldenenv-{spec.stack}"}, \
        "a node is on the cluster network only"
    network = client.networks.get(f"goldenenv-{spec.stack}")
    assert network.attrs["Internal"] is True, "nodes reach each other and nothing else"


def test_run_prefixes_output_by_node_and_rank_and_fails_when_one_rank_fails(spec, client):
    lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    lines: list[tuple[str, str]] = []
    ok = lifecycle.run(spec, ["python", "-c", "import os; print('rank', os.environ['RANK'])"],
                       lambda node, text: lines.append((node, text)), client=client)
    assert ok.ok
    ranks = {text.split("rank ")[-1] for node, text in lines if "]:rank " in text}
    world = spec.nodes[0].count * catalog.local_shapes()["container"].processes_per_node
    assert ranks == {str(r) for r in range(world)}
    assert any(node == "node-1" and text.startswith("[default") for node, text in lines)

    last = str(world - 1)
    failing = lifecycle.run(spec, ["python", "-c", f"import os, sys; sys.exit(3 if os.environ['RANK'] == '{last}' else 0)"],
                            lambda node, text: None, client=client)
    assert not failing.ok and failing.first_failure == "node-1"


def test_validate_names_a_node_that_drifted_from_the_lock(spec, client):
    lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    assert lifecycle.validate(spec, client, quiet).ok
    victim = LocalCluster(spec, client).nodes()[-1]
    victim.exec_run(["sh", "-c", "rm -rf /opt/venv/lib/python3*/site-packages/numpy-*.dist-info"], user="root")
    result = lifecycle.validate(spec, client, quiet)
    assert not result.ok
    assert any("package numpy differs on " + victim.name in d for d in result.drift), result.drift
    assert "package-numpy" in result.image_checks and "FAILED" in result.image_checks
    lifecycle.destroy(spec, client=client, log=quiet)


def test_destroy_twice_and_on_a_half_created_stack_then_purge_by_name(spec, client):
    cluster = LocalCluster(spec, client)
    cluster._network()  # a stack that stopped half way: network only
    assert f"goldenenv-{spec.stack}" in lifecycle.destroy(spec, client=client, log=quiet)
    assert lifecycle.destroy(spec, client=client, log=quiet) == []
    lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    lifecycle.destroy(spec, client=client, log=quiet)
    assert cluster.data_kept()
    assert lifecycle.destroy(spec, purge_data=True, client=client, log=quiet) == [f"goldenenv-{spec.stack}-data"]
    assert not cluster.data_kept()


def test_validate_over_testinfra_hosts_the_path_cloud_nodes_take(spec, client):
    """Clouds validate through testinfra hosts (ssh://node + docker exec); here the same code on docker:// nodes."""
    outputs = lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    result = lifecycle.validate_hosts(spec.image.lock, [f"docker://trainer@{n}" for n in outputs["nodes"]], log=quiet)
    assert result.ok, (result.image_checks[-2000:], result.drift, result.allreduce_note)
    assert result.allreduce["world_size"] == len(outputs["nodes"])
    lifecycle.destroy(spec, client=client, log=quiet)
