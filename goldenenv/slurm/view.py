"""The scheduler's view, read from Slurm's own one-line records (`scontrol show job|node -o`): the same on every
Slurm release the locks pin, with no REST or JSON plugin needed."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")
"""Job states that do not change again (NODE_FAIL is not one: with --requeue the job goes back to PENDING)."""
STEP = re.compile(r"step-(\d+)")


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

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

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
            run=_run(r.get("Comment", "")),
        ))
    return sorted(found, key=lambda j: int(j.id) if j.id.isdigit() else 0)


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


def judge(found: list[Node], expected: int, gpus: int) -> list[str]:
    """What is wrong with the scheduler's view of a cluster that should have `expected` nodes with `gpus` GPUs
    each: nodes missing, not responding, down or drained (with Slurm's reason), or offering other GRES."""
    problems = []
    if len(found) < expected:
        problems.append(f"{expected - len(found)} of {expected} nodes have not registered with slurmctld")
    for node in found:
        base = node.state.split("+")[0].rstrip("*~#%!")
        flags = node.state.split("+")[1:]
        if not node.responding or base in ("DOWN", "FAIL", "UNKNOWN") or {"DRAIN", "FAIL"} & set(flags) \
                or base in ("DRAINED", "DRAINING"):
            problems.append(f"{node.name}: {node.state}" + (f" ({node.reason})" if node.reason else ""))
        wanted = f"gpu:{gpus}" if gpus else ""
        if node.gres.split("(")[0] != wanted:
            problems.append(f"{node.name}: offers GRES {node.gres or 'none'}, the catalog says {wanted or 'none'}")
    return problems
