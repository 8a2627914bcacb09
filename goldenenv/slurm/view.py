"""The scheduler's view, read from Slurm's own one-line records (`scontrol show job|node -o`): the same on every
Slurm release the locks pin, with no REST or JSON plugin needed."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")
"""Job states that do not change again (NODE_FAIL is not one: with --requeue the job goes back to PENDING)."""
STEP = re.compile(r"step-(\d+)")
NO_END = timedelta(days=365)
"""Slurm schedules a job with no time limit (the partition's MaxTime=INFINITE, goldenenv's default) as if it ran
for a year: scontrol shows TimeLimit=365-00:00:00 and an EndTime a year after its start (captures/slurm). A pending
job's estimated start behind such a job is that made-up end, not an estimate: a year from when backfill last looked (seconds to minutes before a user
reads it), or a year from the running job's start."""
NO_END_SLACK = timedelta(days=1)
"""How much earlier than a year from now a made-up estimate may be (backfill computed it a while ago); no real
estimate is 364 days away."""
TIME_ZONE = "UTC"
"""goldenenv asks Slurm for its times in UTC (TZ=UTC on the head), whatever the head's own zone."""


def records(text: str) -> list[dict[str, str]]:
    """One dict per line of `scontrol show ... -o`: Key=Value words; a word without = belongs to the value before."""
    found = []
    for line in text.splitlines():
        record: dict[str, str] = {}
        last = None
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", key):
                record[key], last = value, key
            elif last:
                record[last] += " " + word
        if record:
            found.append(record)
    return found


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    state: str
    nodes: str
    restarts: int
    start: str
    elapsed: str
    reason: str
    output: str
    run: str = ""
    """The run folder goldenenv submit named in the job's comment ('' for a job submitted with plain sbatch)."""
    checkpoint_step: int | None = None
    """The newest checkpoint step this job wrote: of its run folder's checkpoints, those written from the job's
    submission until the next job of its run was submitted (jobs.own_steps); a resumed run keeps each job's own."""
    submitted: str = ""
    end: str = ""
    time_limit: str = ""
    user: str = ""
    """Who submitted it: the name of scontrol's UserId=name(uid), the user squeue shows."""
    gpu_hours: float | None = None
    """GPU-hours of every start so far, and their cost in `currency`, from Slurm's accounting (jobs.with_costs);
    None where accounting has no record of it or its pool has no price."""
    cost: float | None = None
    currency: str = ""

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")

    @property
    def unlimited(self) -> bool:
        """No time limit of its own: Slurm shows UNLIMITED, or a year (what it schedules INFINITE as)."""
        limit = duration(self.time_limit)
        return self.time_limit in ("UNLIMITED", "INFINITE") or (limit is not None and limit >= NO_END)

    def to_dict(self) -> dict:
        return asdict(self)


def jobs(text: str) -> list[Job]:
    found = []
    for r in records(text):
        if "JobId" not in r:
            continue
        found.append(Job(
            id=r["JobId"], name=r.get("JobName", ""), state=r.get("JobState", "UNKNOWN"),
            nodes=r.get("NodeList", "") if r.get("NodeList") != "(null)" else "", restarts=int(r.get("Restarts", 0)),
            start=r.get("StartTime", ""), elapsed=r.get("RunTime", ""),
            reason=r.get("Reason", "None") if r.get("Reason") != "None" else "", output=r.get("StdOut", ""),
            run=_run(r.get("Comment", "")), submitted=r.get("SubmitTime", ""), end=r.get("EndTime", ""),
            time_limit=r.get("TimeLimit", ""), user=r.get("UserId", "").split("(")[0],
        ))
    return sorted(found, key=lambda j: int(j.id) if j.id.isdigit() else 0)


def slurm_time(text: str) -> datetime | None:
    """A time as scontrol prints it (2026-12-02T05:07:20, in TIME_ZONE); None for Unknown, None, N/A or nothing."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def duration(text: str) -> timedelta | None:
    """A Slurm duration ([days-]hours:minutes:seconds, or minutes[:seconds]); None for UNLIMITED or anything else."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def started(job: Job) -> datetime | None:
    """When the job (its latest start) began; None while it has not."""
    return None if job.pending else slurm_time(job.start)


def start_estimate(job: Job, others: list[Job], now: datetime) -> datetime | None:
    """When Slurm expects a pending job to start, only where that is a real estimate: a time to come, before a year
    has passed, and before the made-up end of any running job with no time limit (Slurm's estimate behind such a
    job is that job's start plus a year). None where Slurm has none (Unknown) or only the start of a run before a
    requeue."""
    if not job.pending:
        return None
    estimate = slurm_time(job.start)
    if estimate is None or estimate <= now or estimate >= now + NO_END - NO_END_SLACK:
        return None
    for other in others:
        end = slurm_time(other.end)
        if other.state == "RUNNING" and other.unlimited and end is not None and estimate >= end - timedelta(minutes=1):
            return None
    return estimate


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    gres: str
    address: str
    reason: str
    cpus: str

    @property
    def idle(self) -> bool:
        return self.state.split("+")[0] == "IDLE"

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.state and not self.state.startswith("DOWN")


def nodes(text: str) -> list[Node]:
    found = []
    for r in records(text):
        if "NodeName" not in r:
            continue
        reason = r.get("Reason", "")
        found.append(Node(r["NodeName"], r.get("State", "UNKNOWN"), "" if r.get("Gres") == "(null)" else
                          r.get("Gres", ""), r.get("NodeAddr", ""), re.sub(r"\s*\[[^]]*\]$", "", reason),
                          r.get("CPUTot", "")))
    return sorted(found, key=lambda n: n.name)


def _run(comment: str) -> str:
    from goldenenv.slurm.batch import RUN_COMMENT

    run = comment[len(RUN_COMMENT):] if comment.startswith(RUN_COMMENT) else ""
    return run if re.fullmatch(r"[A-Za-z0-9._-]+", run) else ""


def checkpoint_step(latest: str) -> int | None:
    """The step a checkpoint folder's `latest` names (examples/train_ddp.py writes step-<N>.pt there)."""
    match = STEP.search(latest)
    return int(match.group(1)) if match else None


def judge(found: list[Node], expected: int, gpus: int, gres: str = "gpu") -> list[str]:
    """What is wrong with the scheduler's view of a cluster that should have `expected` nodes with `gpus` devices
    each, offered as GRES `gres` (gpu; npu on Ascend nodes): nodes missing, not responding, down or drained (with
    Slurm's reason), or offering other GRES."""
    problems = []
    if len(found) < expected:
        problems.append(f"{expected - len(found)} of {expected} nodes have not registered with slurmctld")
    for node in found:
        base = node.state.split("+")[0].rstrip("*~#%!")
        flags = node.state.split("+")[1:]
        if not node.responding or base in ("DOWN", "FAIL", "UNKNOWN") or {"DRAIN", "FAIL"} & set(flags) \
                or base in ("DRAINED", "DRAINING"):
            problems.append(f"{node.name}: {node.state}" + (f" ({node.reason})" if node.reason else ""))
        wanted = f"{gres}:{gpus}" if gpus else ""
        if node.gres.split("(")[0] != wanted:
            problems.append(f"{node.name}: offers GRES {node.gres or 'none'}, the catalog says {wanted or 'none'}")
    return problems
