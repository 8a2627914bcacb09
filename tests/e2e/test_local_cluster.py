"""The local cluster end to end: the README's main job, and up/run/validate/destroy as a user drives them.

The local stack runs Slurm (a head container with slurmctld, slurmd in every node container): the flow submits the
training and the drill only kills a node; Slurm requeues the job and it resumes by itself."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from goldenenv import catalog, lifecycle, slurm
from goldenenv.cli import app
from goldenenv.clouds.local.cluster import NODE_LABEL, RECOVERY_DELAY_S, STACK_LABEL, LocalCluster
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
    head = LocalCluster(spec, client).head()
    history = head.exec_run(["sacct", "--allusers", "--allocations", "--noheader", "--parsable2", "--starttime",
                             "2026-01-01", "--format=JobName,User,State"]).output.decode().split()
    assert "flow|trainer|COMPLETED" in history, \
        ("the flow's job, run before its destroy, is in the accounting history this up restored", history)
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


HEAD_BACK_S = 60
"""How long `goldenenv jobs` may fail after the head is killed: its reboot (RECOVERY_DELAY_S), slurmctld reading its
state and the nodes answering it again (about 10 s on a 2-core machine)."""


def test_a_killed_head_comes_back_by_itself_and_keeps_the_queue(spec, client):
    """The head is lost like a node (`docker kill`, nothing else done by anyone): it comes back by itself, the queue
    it had saved is read back from its state volume, and the running and the pending job both complete.

    slurmctld saves the queue a few seconds after a change (its state save thread), so the kill comes once the
    state file is newer than the last submission: a head lost before that would come back without that job."""
    lifecycle.up(spec, BuildOptions.from_environment(), client, quiet)
    runner = CliRunner()
    head = LocalCluster(spec, client).head()

    def cli(command: str, *args: str):
        return runner.invoke(app, [command, "-s", spec.stack, *args])

    def listed() -> dict[str, dict] | None:
        shown = cli("jobs", "--json")
        return {j["id"]: j for j in json.loads(shown.stdout)} if shown.exit_code == 0 else None

    def wait(what: str, until, timeout: float):
        deadline = time.monotonic() + timeout
        while not (found := until()):
            assert time.monotonic() < deadline, f"{what} within {timeout} s"
            time.sleep(1)
        return found

    def saved_since(moment: float) -> bool:
        done = head.exec_run(["stat", "-c", "%.9Y", f"{slurm.STATE_DIR}/job_state"])
        return done.exit_code == 0 and float(done.output) > moment

    nodes = str(spec.nodes[0].count)
    running = cli("submit", "--nodes", nodes, "--name", "through-head-loss", "--", "sleep", "20").stdout.strip()
    pending = cli("submit", "--nodes", "1", "--name", "queued-at-head-loss", "--", "true").stdout.strip()
    submitted = time.time()
    assert running.isdigit() and pending.isdigit(), (running, pending)
    wait("the first job running", lambda: (listed() or {}).get(running, {}).get("state") == "RUNNING", 60)
    assert listed()[pending]["state"] == "PENDING", "it waits for the nodes the first job holds"
    wait("slurmctld saving the queue", lambda: saved_since(submitted), 30)

    started = head.attrs["State"]["StartedAt"]
    head.kill()  # docker kill: from here on nobody does anything
    lost = time.monotonic()
    back = wait("`goldenenv jobs` answering again", listed, HEAD_BACK_S)
    assert time.monotonic() - lost >= RECOVERY_DELAY_S, "the head was down for its reboot"
    head.reload()
    assert head.status == "running" and head.attrs["State"]["StartedAt"] != started, "the same head, started again"
    assert {running, pending} <= set(back), ("the queue outlived the head", back)

    def ended() -> dict[str, dict] | None:
        now = listed() or {}
        done = all(now.get(j, {}).get("state") in ("COMPLETED", "FAILED", "CANCELLED") for j in (running, pending))
        return now if done else None

    states = wait("both jobs ending", ended, 120)
    assert [states[j]["state"] for j in (running, pending)] == ["COMPLETED", "COMPLETED"], states
    recorded = wait("both jobs in Slurm's accounting", lambda: accounted(head, running, pending), 60)
    assert recorded[running][0] == "COMPLETED" and recorded[running][1] >= 20, \
        ("the head lost mid-job lost no accounting record: the job's whole run is in sacct", recorded)
    assert recorded[pending][0] == "COMPLETED", recorded


def accounted(head, *job_ids: str) -> dict[str, tuple[str, int]] | None:
    """sacct's record of each job (state, elapsed seconds) as Slurm's accounting database holds it, once it has
    them all."""
    done = head.exec_run(["sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
                          "--format=JobID,State,ElapsedRaw", f"--jobs={','.join(job_ids)}"])
    rows = [line.split("|") for line in done.output.decode().split()] if done.exit_code == 0 else []
    found = {row[0]: (row[1], int(row[2])) for row in rows if len(row) == 3}
    return found if set(job_ids) <= set(found) else None


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
