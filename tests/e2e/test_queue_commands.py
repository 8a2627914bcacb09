"""The team workflow on the local Slurm stack, through the CLI as a user types it: submit prints a job id, jobs shows
it running, a node container is killed mid-run, and with no further command Slurm requeues the job, it runs again
when the node is back, resumes from its checkpoint and completes; logs show both starts; cancel stops a job.

The stack is a copy of the shipped local stack in a project of its own, with a team of two (`goldenenv team add`):
each member is a user with their uid in every container, Slurm holds a member's job PENDING past their GPU-hours
and runs it when `goldenenv team set` raises them, fair share orders two members' queued jobs, and `goldenenv cost`
is sacct's GPU-seconds at the catalog's rate. All on the real slurmdbd and MariaDB."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import lifecycle, project
from goldenenv.cli import app
from goldenenv.clouds.local.cluster import LocalCluster, put_files

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INTERVAL = 20
"""examples/train_ddp.py's default --checkpoint-every."""


ADA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAJylII5SYp7jiSZy/hJe+CKj5SpQQsUda/ox067abwO ada@laptop"
BOB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjvMS5p2EOYp2nhAjqUXA2xGRbqGj1STvddY7BDrCMh bob@laptop"
ADA_GPU_HOURS = "0.01"
"""Ada's limit: 0.6 GPU-minutes, which the team file writes as one (a limit is whole minutes, never 0)."""
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def team_project(tmp_path_factory):
    """A project of its own holding a copy of the shipped local stack, so the team commands edit the copy."""
    root = tmp_path_factory.mktemp("team-project")
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (root / "stacks").mkdir()
    (root / "stacks" / "Pulumi.local.yaml").write_text((REPO / "stacks" / "Pulumi.local.yaml").read_text())
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setattr(project, "_current", None)
        yield root


@pytest.fixture(scope="module")
def cli(team_project, client):
    runner = CliRunner()

    def invoke(*args: str, code: int = 0):
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, (args, result.output, result.exception)
        return result

    lifecycle.destroy(lifecycle.load_spec("local"), purge_data=True, client=client, log=lambda m: None)
    assert "next" in invoke("team", "add", "ada", "--key", ADA, "--uid", "2001", "--gpu-hours", ADA_GPU_HOURS).output
    invoke("up")
    invoke("team", "add", "bob", "--key", BOB, "--uid", "2002")  # the cluster is up: applied at once
    yield invoke
    lifecycle.destroy(lifecycle.load_spec("local"), purge_data=True, client=client, log=lambda m: None)


@pytest.fixture(scope="module")
def spec(cli):
    return lifecycle.load_spec("local")


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
# The suite queues DEFAULT_JOBS, what fits in about 30 s on this 2-core machine (a 2-step job took 15 s at the median of
# 100, 10 s when the machine was quiet); the bar is 100 in a row:
#
#     GOLDENENV_SOAK_JOBS=100 pytest tests/e2e/test_queue_commands.py -k short

DEFAULT_JOBS = 2
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


# --- a team of two on one cluster: users, GPU-hour limits, fair share, cost (issue 41) ---

def member_job(head, user: str, seconds: int, nodes: int = 2) -> str:
    """A member's own job, as they submit it logged in to the head: sbatch, asking for every node's GPU."""
    done = head.exec_run(["sbatch", f"--nodes={nodes}", "--gpus-per-node=1", "--output=/dev/null",
                          f"--job-name={user}-{seconds}s", "--wrap", f"sleep {seconds}"],
                         user=user, workdir=f"/data/home/{user}" if user != "trainer" else "/home/trainer")
    found = re.search(r"Submitted batch job (\d+)", done.output.decode())
    assert done.exit_code == 0 and found, done.output
    return found.group(1)


def queued(head, job_id: str) -> tuple[str, str]:
    """(state, reason) as squeue shows them; ("GONE", "") once it no longer lists the job."""
    out = head.exec_run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%T|%r"]).output.decode().strip()
    return tuple(out.split("|", 1)) if "|" in out else ("GONE", "")


def until(what: str, check, timeout: float):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(1)
    return found


def sacct(head, *fields: str, jobs: list[str] | None = None) -> list[list[str]]:
    argv = ["sacct", "--allusers", "--duplicates", "--allocations", "--noheader", "--parsable2",
            f"--format={','.join(fields)}", "--starttime", "2026-01-01"]
    done = head.exec_run(argv + ([f"--jobs={','.join(jobs)}"] if jobs else []))
    assert done.exit_code == 0, done.output
    return [line.split("|") for line in done.output.decode().splitlines() if line]


def used_minutes(head, user: str) -> int:
    """The member's GPU-minutes this month as slurmctld counts them against their limit (GrpTRESMins=LIMIT(USED))."""
    out = head.exec_run(["scontrol", "show", "assoc_mgr", f"users={user}", "account=team", "flags=assoc"])
    found = re.search(r"UserName=" + user + r"\(.*?GrpTRESMins=[^\n]*?gres/gpu=[^(\s]*\((\d+)\)",
                      out.output.decode(), re.S)
    return int(found.group(1)) if found else 0


def test_each_member_is_a_user_with_their_uid_everywhere_and_their_key_in_their_home(cli, spec, client):
    cluster = LocalCluster(spec, client)
    for container in [cluster.head(), *cluster.nodes()]:
        for name, uid in (("ada", 2001), ("bob", 2002)):
            done = container.exec_run(["id", "-u", name])
            assert done.output.decode().strip() == str(uid), (container.name, name, done.output)
    keys = cluster.head().exec_run(["cat", "/data/home/bob/.ssh/authorized_keys"], user="bob")
    assert keys.output.decode().strip() == BOB, "bob, added while the cluster ran, has his key as his login"
    listed = {m["name"]: m for m in json.loads(cli("team", "list", "--json").stdout)["members"]}
    assert listed["ada"]["gpuHours"] == float(ADA_GPU_HOURS) and listed["bob"]["gpuHours"] is None


def test_a_member_past_their_gpu_hours_waits_pending_until_raised_and_fair_share_orders_the_queue(cli, spec, client):
    """Ada's first job uses 62 GPU-seconds of her one GPU-minute (the database container is killed while it runs: its
    record survives); her next job is held PENDING with Slurm's reason. Behind a job that holds both nodes, bob (no GPU
    time this month) and ada (over her share of it) queue; `goldenenv team set` raises her limit; bob's job starts
    first, then hers."""
    cluster = LocalCluster(spec, client)
    head = cluster.head()
    first = member_job(head, "ada", 31)
    until("ada's first job running", lambda: queued(head, first)[0] == "RUNNING", 60)
    client.containers.get(cluster.names.db).kill()  # the accounting database lost mid-job; recovery restarts it
    until("ada's first job ending", lambda: queued(head, first)[0] == "GONE", 90)
    until("ada's GPU time counted against her limit", lambda: used_minutes(head, "ada") >= 1, 120)

    held = member_job(head, "ada", 1)
    until("ada's next job held by her limit", lambda: queued(head, held) == ("PENDING", "AssocGrpGRESMinutes"), 30)
    blocker = member_job(head, "trainer", 15)
    until("the blocker running", lambda: queued(head, blocker)[0] == "RUNNING", 60)
    bobs = member_job(head, "bob", 1)
    cli("team", "set", "ada", "--gpu-hours", "10")
    until("ada's job released from her limit", lambda: queued(head, held)[1] != "AssocGrpGRESMinutes", 30)
    until("both queued jobs ending", lambda: queued(head, held)[0] == queued(head, bobs)[0] == "GONE", 120)

    records = {row[0]: row for row in sacct(head, "JobID", "User", "State", "Start", "End", "ElapsedRaw", "AllocTRES",
                                            jobs=[first, held, bobs])}
    assert records[first][1:3] == ["ada", "COMPLETED"] and int(records[first][5]) >= 31, \
        ("killing the database mid-job lost none of the job's record", records[first])
    assert "gres/gpu=2" in records[first][6], "two nodes of one stand-in GPU each"
    assert records[bobs][3] <= records[held][3], ("fair share: bob, with no GPU time this month, starts before ada",
                                                  records[bobs], records[held])
    assert records[held][2] == "COMPLETED"


def test_cost_is_sacct_gpu_seconds_at_the_catalogs_rate_and_jobs_shows_who_ran_what(cli, spec, client):
    from goldenenv import catalog

    head = LocalCluster(spec, client).head()
    rate = catalog.local_shapes()["container"].notional_price_per_gpu_hour
    assert rate == 2.0, "local_shapes.csv's notional rate per stand-in GPU-hour"
    gpu_seconds: dict[str, int] = {}
    for job_id, elapsed, tres in sacct(head, "JobID", "ElapsedRaw", "AllocTRES"):
        found = re.search(r"gres/gpu=(\d+)", tres)
        gpu_seconds[job_id] = gpu_seconds.get(job_id, 0) + int(elapsed) * (int(found.group(1)) if found else 0)
    report = json.loads(cli("cost", "--by", "job", "--json").stdout)
    rows = {row["job"]: row for row in report["rows"]}
    assert {job for job, seconds in gpu_seconds.items() if seconds} <= set(rows) <= set(gpu_seconds), \
        (rows, gpu_seconds)
    for job_id in rows:
        seconds = gpu_seconds[job_id]
        assert rows[job_id]["gpu_hours"] == round(seconds / 3600, 3), (job_id, rows[job_id], seconds)
        assert rows[job_id]["cost"] == round(seconds / 3600 * rate, 2), (job_id, rows[job_id], seconds)
    assert report["total"]["cost"] == round(sum(row["cost"] for row in rows.values()), 2), "the total re-adds"
    by_user = {row["user"]: row for row in json.loads(cli("cost", "--by", "user", "--json").stdout)["rows"]}
    assert {"ada", "bob", "trainer"} <= set(by_user)
    shown = {j["id"]: j for j in json.loads(cli("jobs", "--json").stdout)}
    ada_jobs = [j for j in shown.values() if j["user"] == "ada"]
    assert ada_jobs and all(round(j["cost"], 2) == rows[j["id"]]["cost"] for j in ada_jobs), \
        ("jobs --json carries the exact figure, cost rounds it once", ada_jobs, rows)
