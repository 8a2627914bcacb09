"""The team workflow on the local Slurm stack, through the CLI as a user types it: submit prints a job id, jobs shows
it running, a node container is killed mid-run, and with no further command Slurm requeues the job, it runs again
when the node is back, resumes from its checkpoint and completes; logs show both starts; cancel stops a job."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import lifecycle
from goldenenv.cli import app
from goldenenv.clouds.local.cluster import LocalCluster, put_files

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INTERVAL = 20
"""examples/train_ddp.py's default --checkpoint-every."""


@pytest.fixture(scope="module")
def spec():
    return lifecycle.load_spec("local")


@pytest.fixture(scope="module")
def cli(spec, client):
    runner = CliRunner()

    def invoke(*args: str, code: int = 0):
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, (args, result.output, result.exception)
        return result

    lifecycle.destroy(spec, purge_data=True, client=client, log=lambda m: None)
    invoke("up")
    yield invoke
    lifecycle.destroy(spec, purge_data=True, client=client, log=lambda m: None)


def job(cli, job_id: str) -> dict:
    return next(j for j in json.loads(cli("jobs", "--json").stdout) if j["id"] == job_id)


def wait(cli, job_id: str, until, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = job(cli, job_id)
        if until(found):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(1)


def test_a_job_survives_a_lost_node_and_completes_by_itself(cli, spec, client):
    submitted = cli("submit", "--nodes", "2", "--code", str(EXAMPLES), "--", "python", "/data/code/train_ddp.py",
                    "--steps", "160")
    job_id = submitted.stdout.strip()
    assert job_id.isdigit(), submitted.output
    running = wait(cli, job_id, lambda j: j["state"] == "RUNNING", 60)
    assert running["nodes"] == "node-[0-1]" and running["restarts"] == 0
    wait(cli, job_id, lambda j: (j["checkpoint_step"] or 0) >= INTERVAL, 120)
    victim = LocalCluster(spec, client).nodes()[-1]
    victim.kill()  # docker kill: nothing else is done by anyone from here on
    done = wait(cli, job_id, lambda j: j["state"] in ("COMPLETED", "FAILED", "CANCELLED"), 300)
    assert done["state"] == "COMPLETED" and done["restarts"] >= 1, done
    assert done["checkpoint_step"] == 160
    log = cli("logs", job_id).stdout
    first, _, second = log.partition(f"goldenenv: job {job_id} start 1 ")
    assert second, log[-2000:]
    resumed = int(re.search(r"resumed from step (\d+)", second).group(1))
    reached = max(int(s) for s in re.findall(r"^step (\d+) ", first, re.M))
    assert 0 < resumed and reached - resumed <= INTERVAL, (resumed, reached)
    assert '"final_step": 160' in second


def test_cancel_stops_a_queued_job_and_a_bad_job_id_is_exit_2(cli):
    job_id = cli("submit", "--nodes", "1", "--name", "sleeper", "--", "sleep", "600").stdout.strip()
    wait(cli, job_id, lambda j: j["state"] == "RUNNING", 60)
    assert "cancelled" in cli("cancel", job_id).stdout
    assert wait(cli, job_id, lambda j: j["state"] == "CANCELLED", 60)["name"] == "sleeper"
    assert "no such job" in cli("logs", "9999", code=2).output
    assert "--nodes" in cli("submit", "--nodes", "9", "--", "true", code=2).output


HEALTH_CAPTURES = Path(__file__).resolve().parents[1] / "unit" / "captures" / "health"


def put_evidence(node, files: dict[str, bytes]) -> None:
    """Files under the node's /etc/goldenenv/health, readable by the job's user: what its health check judges."""
    put_files(node, "/etc/goldenenv/health", files)


def recorded(capture: str) -> dict[str, bytes]:
    """A recorded node state (tests/unit/captures/health/CAPTURE) as a node's evidence and expectation."""
    folder = HEALTH_CAPTURES / capture
    return {f"recorded/{p.name}": p.read_bytes() for p in folder.iterdir() if p.name != "expect.json"} | {
        "expect.json": (folder / "expect.json").read_bytes()}


def test_a_node_in_a_failing_state_is_drained_with_its_rule_and_the_next_job_runs_on_the_others(cli, spec, client):
    """The recorded outputs of a p5 whose GPU 3 fell off the bus (XID 79) stand in for node-1's hardware: Slurm's
    health check drains it with the rule as the reason, a job lands on node-0, and once the node's evidence is
    healthy again the drain is lifted."""
    from goldenenv.catalog import health

    cluster = LocalCluster(spec, client)
    sick = cluster.nodes()[1]
    sick_name = next(n.name for n in cluster.scheduler_nodes() if n.name.endswith("1"))

    put_evidence(sick, recorded("xid79-gpu3"))
    deadline = time.monotonic() + 60
    while not (drained := [n for n in cluster.scheduler_nodes() if n.name == sick_name and "DRAIN" in n.state]):
        assert time.monotonic() < deadline, cluster.scheduler_nodes()
        time.sleep(1)
    assert "goldenenv health" in drained[0].reason and "GPU 3" in drained[0].reason, drained[0].reason
    shown = cli("jobs").stdout
    assert sick_name in shown and "xid_79" in shown, shown  # goldenenv jobs says why the node takes no job
    judged = cli("health", code=1).stdout  # the same evidence, judged from this machine
    assert f"failing: {sick.name}" in judged and "GPU 3" in judged and "xid_79" in judged, judged

    job_id = cli("submit", "--nodes", "1", "--name", "after-drain", "--", "python", "-c", "print('ran')").stdout.strip()
    done = wait(cli, job_id, lambda j: j["state"] in ("COMPLETED", "FAILED", "CANCELLED"), 120)
    assert done["state"] == "COMPLETED" and sick_name not in done["nodes"], done

    sick.exec_run(["rm", "-rf", "/etc/goldenenv/health/recorded"], user="root")
    put_evidence(sick, {"expect.json": json.dumps(health.NO_GPU).encode()})
    deadline = time.monotonic() + 60
    while any(n.name == sick_name and "DRAIN" in n.state for n in cluster.scheduler_nodes()):
        assert time.monotonic() < deadline, cluster.scheduler_nodes()
        time.sleep(1)
    assert "2 of 2 node(s) healthy" in cli("health").stdout


def test_a_cancelled_run_goes_on_with_submit_resume_and_each_job_keeps_its_own_step(cli):
    """Issue 36 item 5: a pending job's start is never Slurm's year-ahead stand-in; a run cancelled mid-way is
    continued by `submit --resume RUN` from its checkpoint, and `jobs` shows each job's own checkpoint step.
    `logs OLD_ID` after destroy (data kept) and up is held at the unit level (test_queue_view, the job index):
    destroy and up here took over a minute more."""
    train = ["--", "python", "/data/code/train_ddp.py", "--checkpoint-every", "5", "--keep", "10"]
    first_id = cli("submit", "--nodes", "1", "--name", "resumable", "--code", str(EXAMPLES), *train,
                   "--steps", "1000", "--sleep-per-step", "0.2").stdout.strip()  # runs until cancelled
    wait(cli, first_id, lambda j: j["state"] == "RUNNING" and (j["checkpoint_step"] or 0) >= 5, 120)
    blocked = cli("submit", "--nodes", "2", "--name", "blocked", "--", "true").stdout.strip()
    wait(cli, blocked, lambda j: j["start"] not in ("", "Unknown"), 30)  # backfill's estimate: a year ahead
    row = next(line for line in cli("jobs").stdout.splitlines() if line.split()[:1] == [blocked])
    assert "PENDING" in row and "pending" in row and str(time.gmtime().tm_year + 1) not in row, (
        row, cli("jobs", "--json").stdout)
    cli("cancel", blocked)
    cli("cancel", first_id)
    first = wait(cli, first_id, lambda j: j["state"] == "CANCELLED", 60)
    assert first["checkpoint_step"] >= 5, first
    goal = first["checkpoint_step"] + 15  # past the checkpoint the training writes on the cancel's SIGTERM

    assert "--resume" in cli("submit", "--nodes", "1", "--resume", "nope-20261202T000000Z-0000", "--", "true",
                             code=2).output
    second_id = cli("submit", "--nodes", "1", "--resume", first["run"], *train, "--steps", str(goal)).stdout.strip()
    second = wait(cli, second_id, lambda j: j["state"] in ("COMPLETED", "FAILED", "CANCELLED"), 180)
    assert second["state"] == "COMPLETED" and second["run"] == first["run"] and second["name"] == "resumable"
    reached = job(cli, first_id)["checkpoint_step"]  # its own, the SIGTERM's included; not the run's newest
    assert second["checkpoint_step"] == goal and first["checkpoint_step"] <= reached < goal, (reached, second)
    log = cli("logs", second_id).stdout
    assert f"resumed from step {reached}" in log and f'"final_step": {goal}' in log, log[-2000:]


# --- short trainings that finish end COMPLETED, every one (issue 36 item 2) ---
#
# A rank that aborted at exit ("terminate called without an active exception") made about one short job in ten
# FAILED although the training printed "done". Here many 2-step trainings with no sleep between steps, the case that hit
# it most, are queued one after another on the local Slurm stack, and every one must end COMPLETED with its "done" line.
#
# The suite queues DEFAULT_JOBS, what fits in about 75 s on this 2-core machine (a 2-step job took 15 s at the median of
# 100, 10 s when the machine was quiet); the bar is 100 in a row:
#
#     GOLDENENV_SOAK_JOBS=100 pytest tests/e2e/test_queue_commands.py -k short

DEFAULT_JOBS = 5
JOBS = int(os.environ.get("GOLDENENV_SOAK_JOBS", DEFAULT_JOBS))
JOB_LIMIT_S = 240
"""The most one 2-step job may take from queued to ended on a loaded 2-core machine (measured 8 to 111 s a job,
the slowest while other image builds and clusters shared the 2 cores)."""
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL")


def test_every_short_training_that_finishes_ends_completed(cli):
    started = time.monotonic()
    ids = [cli("submit", "--nodes", "2", "--name", f"short-{n}", "--code", str(EXAMPLES), "--", "python",
               "/data/code/train_ddp.py", "--steps", "2", "--log-every", "1").stdout.strip() for n in range(JOBS)]
    assert all(i.isdigit() for i in ids), ids
    deadline = started + JOB_LIMIT_S * JOBS
    while True:
        jobs = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout) if j["id"] in ids}
        if all(jobs.get(i, {}).get("state") in ENDED for i in ids):
            break
        assert time.monotonic() < deadline, {i: jobs.get(i, {}).get("state") for i in ids}
        time.sleep(2)
    took = time.monotonic() - started
    print(f"{JOBS} short jobs in {took:.0f} s, {took / JOBS:.1f} s a job")

    failed = {i: j["state"] for i, j in jobs.items() if j["state"] != "COMPLETED"}
    evidence = {i: cli("logs", i).stdout[-1500:] for i in list(failed)[:3]}
    assert not failed, f"{len(failed)} of {JOBS} short jobs did not end COMPLETED: {failed}\n{evidence}"
    for i in (ids[0], ids[-1]):
        assert '"event": "done"' in cli("logs", i).stdout


def test_a_rank_dead_on_a_contained_gpu_error_is_requeued_and_the_job_completes(cli, spec, client):
    """Issue 37 item 6, `goldenenv drill --gpu-error`: XID 94 is staged on node-1's GPU (recorded evidence, the
    catalog's restart-job) and its rank is killed; the node stays in the queue, the job's own script requeues it
    naming the node, GPU and XID, and it resumes from its last checkpoint and completes. Once the evidence is gone,
    a job that fails for its own reasons ends FAILED, never requeued."""
    cluster = LocalCluster(spec, client)
    node = cluster.nodes()[1]

    said = " ".join(cli("drill", "--gpu-error", "--steps", "60").stdout.split())
    assert re.search(r"a rank died at step \d+ on a staged GPU error \(the job's script said: node-1: GPU 0 "
                     r"\(PCI 0000:64:00\) logged XID 94", said), said
    assert re.search(r"its own script requeued job \d+ by itself \(restarts 1\)", said), said
    job_id = re.search(r"requeued job (\d+)", said).group(1)
    assert "needs a job restart (start 2 of at most 3)" in cli("logs", job_id).stdout
    assert not any("DRAIN" in n.state for n in cluster.scheduler_nodes()), cluster.scheduler_nodes()
    assert node.exec_run(["test", "-e", "/etc/goldenenv/health/recorded"]).exit_code != 0, "the drill left its evidence"

    job_id = cli("submit", "--nodes", "2", "--name", "own-fault", "--", "python", "-c",
                 "raise SystemExit(1)").stdout.strip()
    done = wait(cli, job_id, lambda j: j["state"] in ("COMPLETED", "FAILED", "CANCELLED"), 120)
    assert done["state"] == "FAILED" and done["restarts"] == 0, done
    assert "requeueing" not in cli("logs", job_id).stdout
