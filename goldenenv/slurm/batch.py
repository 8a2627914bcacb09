"""The sbatch script around torchrun that `goldenenv submit` writes: one task per node, requeued after a node loss
or a rank's death on an error the catalog says needs a job restart."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone

from goldenenv.render import render

JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,40}$")
RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}")
"""A run folder's name, as run_name makes it or --resume names it: one path word, never a path."""
RUN_SUFFIX = re.compile(r"-\d{8}T\d{6}Z-(?:[0-9a-f]{8}|[0-9a-f]{4})$")
"""Runs made before 2026-12-07 end in 4 hex digits, later ones in 8."""
RESTART_LIMIT = 3
"""Starts a job gets in all (SLURM_RESTART_COUNT below 2 requeues it again) when a rank dies on an error the catalog
says needs a job restart: a GPU whose contained errors keep coming back ends the job FAILED instead of looping."""
NODE_HEALTH = "/etc/goldenenv/health"
"""A node's expect.json and, in tests, its recorded evidence (as goldenenv/slurm/healthcheck.sh reads them)."""
HEALTH_RULES = "/usr/local/share/goldenenv/health-rules.json"
"""The catalog's health rules in the golden image (images/dockerfile.HEALTH_RULES)."""
HEALTH_TIMEOUT_S = 90
"""For every node of the job to collect its quick health evidence (50 s at most, as the health check) and judge it."""
RUN_COMMENT = "goldenenv-run="
"""The job's Slurm comment names its run: `goldenenv jobs` finds the run's checkpoints by it."""


def run_name(name: str, now: datetime | None = None) -> str:
    """A job's run folder: its name, when it was submitted and a random word. Checkpoints and output go to
    <checkpoints>/<run> and <jobs>/<run>.out, the same on every start of the job, so a requeued job finds what it
    wrote; never another job's, even when a new cluster's Slurm numbers its jobs from 1 again. Eight hex digits: two
    submissions of one name in one second (a script's loop) share a folder about once in four billion pairs."""
    now = now or datetime.now(timezone.utc)
    return f"{name}-{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def job_name(run: str) -> str:
    """The name a run was submitted under (train for train-20261202T050719Z-46a2): a resumed run keeps its name."""
    name = RUN_SUFFIX.sub("", run)
    return name if name != run and JOB_NAME.fullmatch(name) else "train"


@dataclass(frozen=True)
class BatchJob:
    """What a user asks of one training job; paths and the rendezvous come from the stack."""

    stack: str
    command: list[str]
    nodes: int
    procs_per_node: int
    output_dir: str
    """On the shared file system: <output_dir>/<job id>.out, appended to by every start of the job."""
    checkpoints: str
    env_file: str
    """The node's fabric and storage environment (/etc/goldenenv/launch.env), sourced by each task where it exists."""
    master_port: int
    run: str
    """The run folder's name (run_name): where this job's checkpoints and output go on every start, and those of a
    later job that resumes the run (`goldenenv submit --resume RUN`): its output is appended to the same file."""
    name: str = "train"
    gpus_per_node: int = 0
    hours: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    slurmd_timeout: int = 30
    spot_cloud: str | None = None
    """A spot pool's cloud: each torchrun runs under goldenenv-spotwatch, which checkpoints and requeues on a notice."""

    def options(self) -> list[str]:
        options = []
        if self.gpus_per_node:
            options.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.hours:
            options.append(f"--time={max(1, round(self.hours * 60))}")
        return options

    def script(self) -> str:
        if not JOB_NAME.fullmatch(self.name):
            raise ValueError(f"job name {self.name!r}: letters, digits, . _ - (at most 41)")
        return render(
            "slurm/job.sbatch.j2", stack=self.stack, name=self.name, nodes=self.nodes, options=self.options(),
            output=f"{self.output_dir}/{self.run}.out", comment=f"{RUN_COMMENT}{self.run}",
            checkpoints=f"{self.checkpoints}/{self.run}", env=self.env,
            procs=self.procs_per_node, env_file=self.env_file, master_port=self.master_port, command=self.command,
            spot_cloud=self.spot_cloud, probe_timeout=max(10, self.slurmd_timeout // 2), requeue_wait=3 * self.slurmd_timeout + 30,
            restart_limit=RESTART_LIMIT, node_health=NODE_HEALTH, health_rules=HEALTH_RULES,
            health_timeout=HEALTH_TIMEOUT_S,
        )
