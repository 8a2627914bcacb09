"""What a user reads from `goldenenv jobs`, `logs` and `submit --resume` (issue 36 item 5), against a stand-in head:
Slurm's answers are recorded `scontrol show job -o` records (captures/slurm), the shared file system is a folder
here, and goldenenv's shell snippets (the job index, checkpoint listings, first lines of output) run for real.

jobs-pending.txt is the local stack's running capture (job-running.txt) with three jobs queued behind it, written
as Slurm 22.05 writes them: behind a job with no time limit Slurm's estimated start is that job's made-up end a
year on (StartTime=2027-12-02T05:07:20); with no estimate yet, StartTime=Unknown; a job held for a later start
(sbatch --begin, Reason=BeginTime), that time."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import jobs
from goldenenv.cli import app, jobtable
from goldenenv.cli import jobs as jobs_cli
from goldenenv.slurm import jobindex, view

CAPTURES = Path(__file__).parent / "captures" / "slurm"
RUN = "capture-20261202T050719Z-46a2"
LONG = "llama-sft-ablation-warmup-2000-lr3e-4"
LATER = "2026-12-02T05:07:30"
"""A moment while the captured job runs: 10 s after it started."""


def stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


class StandInHead(jobs.Head):
    """Slurm's commands answer from recorded text; everything else (sh, cat, tail, mv) runs here."""

    def __init__(self, scontrol_jobs: str, nodes: str = "", unknown: tuple[str, ...] = ()):
        self.scontrol_jobs, self.nodes, self.unknown = scontrol_jobs, nodes, unknown
        self.submitted: list[str] = []

    def run(self, argv):
        if argv[:2] == ["env", f"TZ={view.TIME_ZONE}"]:
            argv = argv[2:]
        if argv[:3] == ["scontrol", "show", "job"]:
            wanted = argv[4:]
            if wanted and wanted[0] in self.unknown:
                return 1, "slurm_load_jobs error: Invalid job id specified\n"
            records = [r for r in self.scontrol_jobs.splitlines()
                       if not wanted or r.startswith(f"JobId={wanted[0]} ")]
            return 0, "\n".join(records) + "\n"
        if argv[:3] == ["scontrol", "show", "node"]:
            return 0, self.nodes
        if argv[0] == "sacct":  # no accounting records: the cost columns are test_cost_cli's
            return 0, ""
        if argv[0] == "sbatch":
            self.submitted.append(Path(argv[-1]).read_text())
            return 0, "5\n"
        done = subprocess.run(argv, capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr

    def write(self, path, data):
        Path(path).write_bytes(data)


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """The local stack with its shared file system here, and the console 80 columns wide."""
    where = jobs.Places(str(tmp_path / "jobs"), str(tmp_path / "checkpoints"), str(tmp_path / "code"), True)
    for folder in (where.jobs, where.checkpoints, where.code):
        Path(folder).mkdir()
    monkeypatch.setattr(jobs, "places", lambda spec: where)
    monkeypatch.setattr(jobs_cli.console, "_width", 80)
    return where


def with_head(monkeypatch, head: StandInHead) -> StandInHead:
    monkeypatch.setattr(jobs, "local_head", lambda spec: (head, None))
    return head


def invoke(*args: str, code: int = 0):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def queue_text() -> str:
    running = (CAPTURES / "job-running.txt").read_text().strip()
    return running.replace("JobName=capture", f"JobName={LONG}") + "\n" + (CAPTURES / "jobs-pending.txt").read_text()


def checkpoint(where: jobs.Places, run: str, step: int, written: str) -> None:
    folder = Path(where.checkpoints) / run
    folder.mkdir(exist_ok=True)
    path = folder / f"step-{step:08d}.pt"
    path.write_bytes(b"")
    os.utime(path, (stamp(written), stamp(written)))


def test_the_jobs_table_fits_80_columns_with_every_kept_cell_whole(shared, monkeypatch):
    with_head(monkeypatch, StandInHead(queue_text()))
    checkpoint(shared, RUN, 20, LATER)
    shown = invoke("jobs").stdout
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 80, shown
    assert "…" not in shown, shown
    header = next(line for line in lines if line.lstrip().startswith("id"))
    assert header.split() == ["id", "user", "state", "nodes", "start", "UTC", "elapsed", "step", "cost"], shown
    assert lines[lines.index(header) - 1].split() == ["name", "GPU-h"], shown
    names = header.index("user"), header.index("state")
    folded = [line[slice(*names)].strip() for line in lines[lines.index(header) + 2:][:5]]
    assert "".join(folded[:4]) == LONG and folded[4] == "trainer", shown
    row = next(line for line in lines if line.lstrip().startswith("1 "))
    assert re.search(r"RUNNING\s+node-\[0-1\]\s+12-02 05:07\s+00:00:08\s+20\s*$", row), row  # no record: no cost
    for job_id, reason in (("2", "Resources"), ("3", "Priority"), ("4", "BeginTime")):
        at = next(i for i, line in enumerate(lines) if line.split()[:1] == [job_id] and len(line.split()) > 1)
        assert "PENDING" in lines[at] and reason in " ".join(lines[at:at + 3]), shown


def test_wide_shows_every_column_on_one_line_per_job(shared, monkeypatch):
    with_head(monkeypatch, StandInHead(queue_text()))
    shown = invoke("jobs", "--wide").stdout
    header = next(line for line in shown.splitlines() if line.lstrip().startswith("id"))
    for column in ("run", "restarts", "submitted UTC", "start UTC", "checkpoint step", "reason"):
        assert column in header
    row = next(line for line in shown.splitlines() if line.lstrip().startswith("1 "))
    assert LONG in row and RUN in row and "2026-12-02 05:07:19" in row and "2026-12-02 05:07:20" in row, row
    assert "…" not in shown


def test_json_keeps_slurms_fields_for_scripts(shared, monkeypatch):
    with_head(monkeypatch, StandInHead(queue_text()))
    listed = json.loads(invoke("jobs", "--json").stdout)
    assert [j["id"] for j in listed] == ["1", "2", "3", "4"]
    assert {"id", "name", "state", "nodes", "restarts", "start", "elapsed", "reason", "output", "run",
            "checkpoint_step"} <= set(listed[0])
    assert listed[0]["start"] == "2026-12-02T05:07:20" and listed[0]["run"] == RUN


def test_a_pending_job_never_shows_the_year_ahead_stand_in_for_no_time_limit(shared, monkeypatch):
    with_head(monkeypatch, StandInHead(queue_text()))
    shown = invoke("jobs").stdout
    assert "2027" not in shown and "12-02 05:07" in shown, shown
    found = view.jobs(queue_text())
    now = datetime(2026, 12, 2, 5, 7, 30, tzinfo=timezone.utc)
    cells = {j.id: jobtable.start_cell(j, found, now, wide=False) for j in found}
    assert cells == {"1": "12-02 05:07", "2": "pending", "3": "pending", "4": "est. 12-02 07:07"}
    behind = view.Job("5", "b", "PENDING", "", 0, "2027-12-02T05:07:25", "00:00:00", "Resources", "")
    later = datetime(2026, 12, 2, 5, 7, 40, tzinfo=timezone.utc)
    assert view.start_estimate(behind, [], later) is None, "a year from when backfill looked, seconds ago"
    after = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)
    assert jobtable.start_cell(found[3], found, after, wide=False) == "pending", "an estimate gone by is none"


@pytest.mark.parametrize("limit,end,real", [
    ("365-00:00:00", "2027-12-02T05:07:20", False), ("UNLIMITED", "Unknown", True),
    ("02:00:00", "2026-12-02T07:07:20", True), ("1-00:00:00", "2026-12-03T05:07:20", True),
])
def test_an_estimate_is_real_only_behind_jobs_that_end(limit, end, real):
    running = view.Job("1", "a", "RUNNING", "node-0", 0, "2026-12-02T05:07:20", "00:00:08", "", "",
                       end=end, time_limit=limit)
    pending = view.Job("2", "b", "PENDING", "", 0, end if end != "Unknown" else "2026-12-02T06:00:00", "00:00:00",
                       "Resources", "")
    now = datetime(2026, 12, 2, 5, 7, 30, tzinfo=timezone.utc)
    assert (view.start_estimate(pending, [running, pending], now) is not None) == real


def test_each_job_of_a_resumed_run_shows_the_checkpoint_step_it_wrote(shared, monkeypatch):
    """Job 1 was cancelled after step 45 and checkpointed it on the cancel's SIGTERM, a second after Slurm's
    EndTime; job 2 resumed its run and is at step 80; job 3, requeued once, keeps the checkpoints it wrote before
    its requeue. The run folder's `latest` (80) is no job's answer but the newest."""
    first = (CAPTURES / "jobs-all.txt").read_text().strip()
    resumed = (first.replace("JobId=1 ", "JobId=2 ").replace("JobState=CANCELLED", "JobState=RUNNING")
               .replace("SubmitTime=2026-12-02T05:07:19", "SubmitTime=2026-12-02T05:10:00")
               .replace("StartTime=2026-12-02T05:07:20", "StartTime=2026-12-02T05:10:01"))
    requeued = (first.replace("JobId=1 ", "JobId=3 ").replace("JobState=CANCELLED", "JobState=RUNNING")
                .replace("Restarts=0", "Restarts=1").replace(RUN, "other-20261202T050900Z-beef")
                .replace("StartTime=2026-12-02T05:07:20", "StartTime=2026-12-02T05:12:00"))
    with_head(monkeypatch, StandInHead("\n".join([first, resumed, requeued]) + "\n"))
    for step, written in ((20, "2026-12-02T05:07:23"), (40, "2026-12-02T05:07:27"), (45, "2026-12-02T05:07:29"),
                          (60, "2026-12-02T05:10:30"),
                          (80, "2026-12-02T05:11:00")):
        checkpoint(shared, RUN, step, written)
    checkpoint(shared, "other-20261202T050900Z-beef", 100, "2026-12-02T05:11:00")
    (Path(shared.checkpoints) / RUN / "latest").write_text("step-00000080.pt")
    listed = {j["id"]: j["checkpoint_step"] for j in json.loads(invoke("jobs", "--json").stdout)}
    assert listed == {"1": 45, "2": 80, "3": 100}


def test_logs_reads_a_job_of_an_earlier_cluster_by_its_id(shared, monkeypatch):
    """destroy (data kept) and up: the new slurmctld knows no job 3, the job index and the output are still there."""
    head = with_head(monkeypatch, StandInHead("", unknown=("3", "7")))
    (Path(shared.jobs) / "goldenenv-jobs.tsv").write_text(
        "3\told-20261201T100000Z-aaaa\t2026-12-01T10:00:00Z\n")
    (Path(shared.jobs) / "old-20261201T100000Z-aaaa.out").write_text(
        "goldenenv: job 3 start 0 on node-0 at 2026-12-01T10:00:01Z\nstep 1 loss 0.5\n")
    (Path(shared.jobs) / "before-20261130T100000Z-bbbb.out").write_text(
        "goldenenv: job 7 start 0 on node-0 at 2026-11-30T10:00:01Z\nfrom before the index\n")
    done = invoke("logs", "3")
    assert "step 1 loss 0.5" in done.stdout and "earlier cluster" in done.stderr and "run old-" in done.stderr
    assert "from before the index" in invoke("logs", "7").stdout, "found by its output's first line"
    assert "no such job" in invoke("logs", "9", code=2).output
    history = invoke("jobs", "--all").stdout
    assert re.search(r"3\s+old-20261201T100000Z-aaaa\s+2026-12-01 10:00:00", history), history
    assert re.search(r"7\s+before-20261130T100000Z-bbbb", history), history
    assert head.submitted == []


def test_an_id_used_by_two_clusters_names_both_runs_and_asks_for_run(shared, monkeypatch):
    with_head(monkeypatch, StandInHead("", unknown=("3",)))
    (Path(shared.jobs) / "goldenenv-jobs.tsv").write_text(
        "3\told-20261201T100000Z-aaaa\t2026-12-01T10:00:00Z\n3\tnew-20261202T100000Z-cccc\t2026-12-02T10:00:00Z\n")
    for run in ("old-20261201T100000Z-aaaa", "new-20261202T100000Z-cccc"):
        (Path(shared.jobs) / f"{run}.out").write_text(f"goldenenv: job 3 start 0\n{run} output\n")
    said = " ".join(invoke("logs", "3", code=2).output.split())
    assert "old-20261201T100000Z-aaaa" in said and "new-20261202T100000Z-cccc" in said and "--run" in said, said
    assert "new-20261202T100000Z-cccc output" in invoke("logs", "--run", "new-20261202T100000Z-cccc").stdout
    bad = invoke("logs", "--run", "nope", code=2).output
    assert "--run" in bad and "old-20261201T100000Z-aaaa" in bad, bad


def test_submit_resume_continues_the_runs_folder_and_records_the_job(shared, monkeypatch):
    head = with_head(monkeypatch, StandInHead((CAPTURES / "jobs-all.txt").read_text()))
    (Path(shared.checkpoints) / RUN).mkdir()
    done = invoke("submit", "--nodes", "2", "--resume", RUN, "--", "python", "/data/code/train_ddp.py")
    assert done.stdout.strip() == "5" and f"resuming run {RUN}" in done.stderr
    script = head.submitted[0]
    assert f"export GOLDENENV_CHECKPOINTS={shared.checkpoints}/{RUN}\n" in script
    assert f"#SBATCH --output={shared.jobs}/{RUN}.out" in script and "#SBATCH --job-name=capture\n" in script
    index = (Path(shared.jobs) / "goldenenv-jobs.tsv").read_text()
    assert re.fullmatch(rf"5\t{RUN}\t2\d{{3}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", index), index


def test_submit_resume_of_an_unknown_run_is_exit_2_naming_the_flag_and_the_runs(shared, monkeypatch):
    with_head(monkeypatch, StandInHead((CAPTURES / "jobs-all.txt").read_text()))
    (Path(shared.checkpoints) / RUN).mkdir()
    said = invoke("submit", "--nodes", "1", "--resume", "train-20991231T000000Z-0000", "--", "true", code=2).output
    assert "--resume" in said and RUN in said and "Traceback" not in said, said
    assert "--resume" in invoke("submit", "--nodes", "1", "--resume", "../etc", "--", "true", code=2).output


def test_a_run_with_a_job_still_running_is_not_resumed_twice(shared, monkeypatch):
    with_head(monkeypatch, StandInHead((CAPTURES / "job-running.txt").read_text()))
    (Path(shared.checkpoints) / RUN).mkdir()
    said = " ".join(invoke("submit", "--nodes", "1", "--resume", RUN, "--", "true", code=2).output.split())
    assert "job 1 of that run is still RUNNING" in said and "goldenenv cancel 1" in said, said


def test_logs_of_an_id_this_cluster_knows_is_this_clusters_job_and_names_the_earlier_one(shared, monkeypatch):
    running = (CAPTURES / "job-running.txt").read_text().replace("/data/jobs", shared.jobs)
    with_head(monkeypatch, StandInHead(running))
    (Path(shared.jobs) / "goldenenv-jobs.tsv").write_text(
        f"1\told-20261201T100000Z-aaaa\t2026-12-01T10:00:00Z\n1\t{RUN}\t2026-12-02T05:07:19Z\n")
    (Path(shared.jobs) / "old-20261201T100000Z-aaaa.out").write_text("goldenenv: job 1 start 0\nthe old one\n")
    (Path(shared.jobs) / f"{RUN}.out").write_text("goldenenv: job 1 start 0\nthis one\n")
    done = invoke("logs", "1")
    assert "this one" in done.stdout and "the old one" not in done.stdout
    assert "goldenenv logs --run old-20261201T100000Z-aaaa" in " ".join(done.stderr.split()), done.stderr


def test_the_batch_scripts_first_output_line_is_what_logs_finds_old_jobs_by():
    """Jobs from before the job index are found by their output's first line: the script must print it first."""
    from goldenenv import lifecycle

    script = jobs.batch_job(lifecycle.load_spec("local"), ["python", "t.py"], 1, None, None, None, 10).script()
    first_echo = next(line for line in script.splitlines() if line.startswith("echo "))
    printed = subprocess.run(["bash", "-c", first_echo], capture_output=True, text=True,
                             env={**os.environ, "SLURM_JOB_ID": "12", "restart": "0", "SLURM_JOB_NODELIST": "node-0"})
    assert [e.id for e in jobindex.first_lines(f"==> /data/jobs/r.out <==\n{printed.stdout}")] == ["12"], printed
