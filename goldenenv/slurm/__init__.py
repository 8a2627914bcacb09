"""Slurm on every stack, configured and never reimplemented: what the head and the nodes run, the same on every cloud.

The golden image carries slurmd, slurmctld, the client commands and munge at the lock's pins (`slurm:`), so the
head runs the very version the nodes run and a job runs in exactly the locked environment. One entry point in the
image, `goldenenv-slurm head|node`, starts munged and then slurmctld (head) or a dynamic slurmd (node, `-Z`,
configless from the head). goldenenv writes slurm.conf (`config.py`), the sbatch script around torchrun
(`batch.py`) and reads the scheduler's view (`view.py`); Slurm queues, allocates, requeues and drains.
"""

from __future__ import annotations

SLURMCTLD_PORT = 6817
"""slurmctld: the nodes' slurmd and every client command reach the head here (and fetch the config from it)."""
SLURMD_PORT = 6818
"""slurmd on every node: the head and srun reach it here."""
SRUN_PORTS = (60001, 63000)
"""SrunPortRange: where an srun started on the head (a Slurm user's interactive step) listens for its tasks."""
HEAD_HOSTNAME = "head"
ENTRY = "/usr/local/bin/goldenenv-slurm"
HEALTH_CHECK = "/usr/local/bin/goldenenv-healthcheck"
"""Slurm's HealthCheckProgram on every node: judges the node (goldenenv-health) and drains it, with the rule as the
reason, when a rule fails."""
"""The image's entry point for the scheduler daemons: `goldenenv-slurm head` or `goldenenv-slurm node ...`."""
MUNGE_KEY_MOUNT = "/run/goldenenv-secrets/munge.key"
"""Where the golden container finds the stack's munge key (read-only; the entry copies it for munged, 0400)."""
CONF_MOUNT = "/etc/goldenenv/slurm"
"""The head container's folder holding slurm.conf as goldenenv rendered it; configless nodes fetch it from the head."""
STATE_DIR = "/var/spool/slurmctld"
"""slurmctld's StateSaveLocation inside the head container: the queue survives a head restart when it is a volume."""
SLURMD_TIMEOUT_S = 30
"""slurm.conf SlurmdTimeout on the clouds (Slurm's default is 300 s): a lost node is DOWN, and its jobs requeued,
within a minute. Each cloud's `slurmd_timeout` (clouds/base.py) is this; the local cloud's is shorter."""
HEALTH_CHECK_INTERVAL_S = 120
"""slurm.conf HealthCheckInterval on the clouds: the quick health level (seconds of work) every two minutes, on idle
and busy nodes alike; Slurm kills a check that runs longer than 60 s (slurm.conf man page)."""
HEALTH_CHECK_TIMEOUT_S = 50
"""What the node's health check allows its evidence commands in all, inside Slurm's 60 s."""
JOBS_FOLDER = "jobs"
"""On the shared file system: each job's sbatch script and its output, readable from the head (`goldenenv logs`)."""


DB_DIR = "/var/lib/goldenenv-db"
"""Where the head container's MariaDB keeps its data (slurmdbd's accounting database): a host folder bound here
outlives the container."""


def head_command(db_dir: str | None = None, db_host: str | None = None) -> list[str]:
    """What the head's golden container runs: munged, slurmdbd on its database (`db_dir`: a MariaDB the container
    runs itself with its data there; `db_host`: one elsewhere), then slurmctld in the foreground."""
    command = [ENTRY, "head"]
    if db_dir:
        command += ["--db-dir", db_dir]
    if db_host:
        command += ["--db-host", db_host]
    return command


DEFAULT_GRES = ("gpu", "/dev/nvidia")
"""The GRES name and device prefix the entry point assumes without --gres: NVIDIA GPUs."""


def node_command(conf_server: str, gpus: int, features: list[str], spot_cloud: str | None = None,
                 health: dict[str, object] | None = None, gres: tuple[str, str] = DEFAULT_GRES) -> list[str]:
    """What a node's golden container runs: munged, then a dynamic slurmd that registers with the head, fetches the
    config from it (configless) and offers its GPUs as GRES (the count comes from the catalog). On a spot pool
    (`spot_cloud`: whose notice to watch) the spot watcher drains the node on a notice. `health`: what the node
    should have (catalog.health.expectations), which its health check judges it against. `gres`: the name the
    devices are offered under and the prefix of their device files (the node's accelerator family: gpu and
    /dev/nvidia, npu and /dev/davinci)."""
    command = [ENTRY, "node", "--conf-server", conf_server]
    if health:
        command += ["--health", ",".join(f"{key}={_word(value)}" for key, value in sorted(health.items()))]
    if gpus:
        command += ["--gpus", str(gpus)]
    if gpus and gres != DEFAULT_GRES:
        command += ["--gres", gres[0], "--gres-devices", gres[1]]
    for feature in features:
        command += ["--feature", feature]
    if spot_cloud:
        command += ["--spot", spot_cloud]
    return command


def _word(value: object) -> str:
    """One expectation as the node command carries it: yes/no, a number or a plain word (no shell or comma)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
