"""The head's slurm.conf, from the spec: the one config the cluster has (configless nodes fetch it)."""

from __future__ import annotations

import re

from goldenenv import accelerators, catalog, slurm
from goldenenv.render import render
from goldenenv.spec import ClusterSpec

PARTITION = "gpu"
"""The one partition: every node; a pool is a node feature (`--constraint=<pool>`)."""
MIN_JOB_AGE = 24 * 3600
MIN_MAX_NODE_COUNT = 2
"""slurmctld 22.05.8 (Debian 12's, the image's pin) segfaults registering a dynamic node under MaxNodeCount=1, so a
one-node stack's head never stays up: MaxNodeCount is at least 2."""


def cluster_name(stack: str) -> str:
    """Slurm's ClusterName: lower case, letters, digits and underscores (stack names may hold . and -)."""
    return re.sub(r"[^a-z0-9_]", "_", stack.lower())[:40]


def render_conf(spec: ClusterSpec, slurmd_timeout: int, state_dir: str = slurm.STATE_DIR,
                head_hostname: str = slurm.HEAD_HOSTNAME, cred_expire: int | None = None,
                health_interval: int = slurm.HEALTH_CHECK_INTERVAL_S) -> str:
    """cred_expire: seconds a job credential lives, and so how long a requeued job waits (None: Slurm's 120 s);
    health_interval: seconds between two runs of every node's health check."""
    return render(
        "slurm/slurm.conf.j2", stack=spec.stack, cluster_name=cluster_name(spec.stack), head_hostname=head_hostname,
        slurmctld_port=slurm.SLURMCTLD_PORT, slurmd_port=slurm.SLURMD_PORT, srun_ports=slurm.SRUN_PORTS,
        state_dir=state_dir, max_nodes=max(MIN_MAX_NODE_COUNT, sum(p.count for p in spec.nodes)),
        slurmd_timeout=slurmd_timeout, min_job_age=MIN_JOB_AGE, partition=PARTITION, cred_expire=cred_expire,
        health_check=slurm.HEALTH_CHECK, health_interval=health_interval, gres_types=",".join(gres_types(spec)),
        slurmdbd_port=slurm.SLURMDBD_PORT, accounting_tres=",".join(f"gres/{g}" for g in gres_types(spec)),
    )


def accounting_tres(spec: ClusterSpec) -> str:
    """The TRES the team's GPU-minute limits and job costs count: gres/gpu, or gres/npu on an Ascend stack."""
    return f"gres/{gres_types(spec)[0]}"


def gres_types(spec: ClusterSpec) -> list[str]:
    """The GRES names the cluster's nodes offer their devices under (its pools' accelerator families: gpu, npu);
    gpu when no pool's device names a family, as every cluster had before the families."""
    found = []
    for pool in spec.nodes:
        try:
            device = catalog.instance_type(spec.cloud, pool.instance_type).gpu.name
        except KeyError:
            continue
        family = accelerators.of_device(device)
        if family and family.gres not in found:
            found.append(family.gres)
    return found or [slurm.DEFAULT_GRES[0]]


