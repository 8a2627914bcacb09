"""The sbatch script around torchrun that `goldenenv submit` writes: one task per node, requeued after a node loss."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from goldenenv.render import render

JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
CHECKPOINT_DIR = "job-{id}"
"""A job's own checkpoint folder under the stack's checkpoints: the same on every start of the job, so a requeued
job finds what it wrote before (GOLDENENV_CHECKPOINTS inside the job)."""


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
    name: str = "train"
    gpus_per_node: int = 0
    hours: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    slurmd_timeout: int = 30

    def options(self) -> list[str]:
        options = []
        if self.gpus_per_node:
            options.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.hours:
            options.append(f"--time={max(1, round(self.hours * 60))}")
        return options

    def script(self) -> str:
        if not JOB_NAME.fullmatch(self.name):
            raise ValueError(f"job name {self.name!r}: letters, digits, . _ - (at most 64)")
        return render(
            "slurm/job.sbatch.j2", stack=self.stack, name=self.name, nodes=self.nodes, options=self.options(),
            output=f"{self.output_dir}/%j.out", checkpoints=self.checkpoints, env=self.env,
            procs=self.procs_per_node, env_file=self.env_file, master_port=self.master_port, command=self.command,
            probe_timeout=max(10, self.slurmd_timeout // 2), requeue_wait=3 * self.slurmd_timeout + 30,
        )
