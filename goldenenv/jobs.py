"""The team's commands on a Slurm stack: submit, jobs, logs, cancel. Thin: Slurm queues, allocates and requeues.

Each command reaches the head node the way validate reaches nodes: `docker exec` into the local head container, or
ssh to a cloud head (ssh config / SSM) and `docker exec` into its golden container there, as the image's user, so
jobs run as that user on every node. Job scripts and output live on the shared file system, so they outlive the
laptop, a lost node and a restarted head.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from goldenenv import catalog, clouds, slurm
from goldenenv.images.lock import load as load_lock
from goldenenv.nodeboot import CODE_FOLDER, ENV_FILE, MASTER_PORT
from goldenenv.slurm import view
from goldenenv.slurm.batch import JOB_NAME, BatchJob, run_name
from goldenenv.spec import ClusterSpec, ConfigError, Problem

Log = Callable[[str], None]


class NoSuchJob(ValueError):
    """A job id the head does not know."""


class HeadError(RuntimeError):
    """The head node could not be reached, or a Slurm command on it failed; the message says which and why."""


class Head:
    """A Slurm client on the head node: run a command there, write a file there."""

    def run(self, argv: list[str]) -> tuple[int, str]:
        raise NotImplementedError

    def write(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def check(self, argv: list[str]) -> str:
        rc, out = self.run(argv)
        if rc:
            raise HeadError(f"{shlex.join(argv)} on the head failed (exit {rc}): {out.strip()[-500:]}")
        return out


class ContainerHead(Head):
    """The local stack's head container, through the Docker SDK."""

    def __init__(self, container, user: str):
        self.container, self.user = container, user

    def run(self, argv: list[str]) -> tuple[int, str]:
        done = self.container.exec_run(argv, user=self.user)
        return done.exit_code, done.output.decode(errors="replace")

    def write(self, path: str, data: bytes) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(Path(path).name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, 1000, 1000
            tar.addfile(info, io.BytesIO(data))
        if not self.container.put_archive(str(Path(path).parent), buffer.getvalue()):
            raise HeadError(f"could not write {path} on the head")


class SshHead(Head):
    """A cloud head over ssh (the stack's ssh config, a bastion or SSM), into its golden container."""

    def __init__(self, host: str, ssh, exec_prefix: str):
        self.host, self.ssh, self.exec_prefix = host, ssh, exec_prefix

    def _argv(self, argv: list[str], stdin: bool = False) -> list[str]:
        from goldenenv import remote

        return self.ssh.argv(self.host, shlex.join([*remote.prefix_words(self.exec_prefix, stdin), *argv]))

    def run(self, argv: list[str]) -> tuple[int, str]:
        try:
            done = subprocess.run(self._argv(argv), capture_output=True, text=True, timeout=120,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise HeadError(f"{self.host}: no answer within 120 s to {shlex.join(argv)}") from e
        if done.returncode == 255:
            raise HeadError(f"{self.host}: ssh failed: {done.stderr.strip()[-300:]}")
        return done.returncode, done.stdout + done.stderr

    def write(self, path: str, data: bytes) -> None:
        done = subprocess.run(self._argv(["sh", "-c", 'cat > "$1"', "sh", path], stdin=True), input=data,
                              capture_output=True, timeout=120)
        if done.returncode:
            raise HeadError(f"{self.host}: could not write {path}: {done.stderr.decode(errors='replace')[-300:]}")


@dataclass(frozen=True)
class Places:
    """Where a stack's jobs keep their scripts, output, checkpoints and code: on the shared file system."""

    jobs: str
    checkpoints: str
    code: str
    shared: bool


def places(spec: ClusterSpec) -> Places:
    if spec.cloud == "local":
        from goldenenv.clouds.local.cluster import DATA

        return Places(f"{DATA}/{slurm.JOBS_FOLDER}", f"{DATA}/checkpoints", f"{DATA}/{CODE_FOLDER}", True)
    storage = spec.storage
    if storage.parallel_fs.enabled:
        fs = storage.parallel_fs
        return Places(f"{fs.mount_point}/{slurm.JOBS_FOLDER}",
                      f"{fs.mount_point}/{fs.checkpoint_prefix.strip('/')}", f"{fs.mount_point}/{CODE_FOLDER}", True)
    scratch = storage.local_nvme.mount_point
    return Places(f"{scratch}/{slurm.JOBS_FOLDER}", f"{scratch}/checkpoints", f"{scratch}/{CODE_FOLDER}", False)


def require_slurm(spec: ClusterSpec) -> None:
    if spec.scheduler != "slurm":
        raise ConfigError([Problem("goldenenv:scheduler", f"{spec.stack} has scheduler {spec.scheduler}: set "
                                   "goldenenv:scheduler: slurm (the default) and goldenenv up, or use goldenenv run")])


def local_head(spec: ClusterSpec, client=None) -> tuple[Head, object]:
    from goldenenv.clouds.local.cluster import LocalCluster

    cluster = LocalCluster(spec, client)
    container = cluster.head()
    if container is None or container.status != "running":
        raise ConfigError([Problem(f"stack {spec.stack}", "the head container is not running: goldenenv up first")])
    return ContainerHead(container, load_lock(spec.image.lock).user), cluster


def cloud_head(spec: ClusterSpec, host: str | None, ssh_config: str | None, identity: str | None,
               ssh_user: str | None, hosts_by, exec_prefix: str | None) -> Head:
    from goldenenv import automation, remote

    from goldenenv.clouds import access

    cloud = clouds.get(spec.cloud)
    if not host:
        outputs = automation.outputs(spec)
        found = cloud.head_host(spec, outputs, access.login_name(cloud.node_login(spec, None), ssh_user), hosts_by)
        if not found:
            raise ConfigError([Problem(f"stack {spec.stack}", "no head node in the stack outputs: goldenenv up "
                                       "first, or name it with --head ssh://user@address")])
        host = found
    return SshHead(host, remote.Ssh(ssh_config, identity), exec_prefix or container_exec(spec, head=True))


def slurmd_timeout(spec: ClusterSpec) -> int:
    """The stack's SlurmdTimeout, as its slurm.conf has it (the cloud's)."""
    return clouds.get(spec.cloud).slurmd_timeout


def container_exec(spec: ClusterSpec, head: bool = False) -> str:
    """How a command reaches the golden container on a cloud stack's nodes (or its head), as the image's user (jobs
    run as that user): `docker exec`, through `sudo -n` where the cloud's login is outside the docker group."""
    from goldenenv.clouds import access

    cloud = clouds.get(spec.cloud)
    logins = [cloud.node_login(spec, None)] if head else [cloud.node_login(spec, pool) for pool in spec.nodes]
    return shlex.join([*access.docker_words(logins), "exec", "--user", load_lock(spec.image.lock).user, "goldenenv"])


def batch_job(spec: ClusterSpec, command: list[str], nodes: int, gpus_per_node: int | None, hours: float | None,
              name: str, slurmd_timeout: int) -> BatchJob:
    total = sum(p.count for p in spec.nodes)
    problems = []
    if nodes < 1 or nodes > total:
        problems.append(Problem("--nodes", f"{nodes}: the stack has {total} node(s); give 1 to {total}"))
    pool = spec.nodes[0]
    if spec.cloud == "local":
        procs, gpus = catalog.local_shapes()[pool.instance_type].processes_per_node, 0
    else:
        gpus = catalog.instance_type(spec.cloud, pool.instance_type).gpu_count
        procs = gpus or 1
    if gpus_per_node is not None:
        if gpus_per_node < 0 or gpus_per_node > gpus:
            problems.append(Problem("--gpus-per-node", f"{gpus_per_node}: {pool.instance_type} has {gpus} GPU(s); "
                                    f"give 0 to {gpus}" if gpus else f"{gpus_per_node}: the nodes have no GPUs"))
        else:
            procs = gpus_per_node or procs
    if hours is not None and hours <= 0:
        problems.append(Problem("--time", f"{hours}: hours, more than 0 (e.g. 12 or 0.5)"))
    if not command:
        problems.append(Problem("CMD", "nothing to run: goldenenv submit ... -- python train.py ..."))
    if not JOB_NAME.fullmatch(name):
        problems.append(Problem("--name", f"{name!r}: letters, digits, . _ - (at most 41), e.g. llama-sft"))
    if problems:
        raise ConfigError(problems)
    where = places(spec)
    return BatchJob(
        stack=spec.stack, command=command, nodes=nodes, procs_per_node=procs, output_dir=where.jobs,
        checkpoints=where.checkpoints, env_file=ENV_FILE, master_port=MASTER_PORT, name=name,
        gpus_per_node=gpus_per_node if gpus_per_node is not None else gpus, hours=hours,
        env={"GOLDENENV_CODE": where.code}, slurmd_timeout=slurmd_timeout, run=run_name(name),
        spot_cloud=spec.cloud if pool.capacity.value == "spot" else None,
    )


def submit(head: Head, job: BatchJob, jobs_dir: str) -> str:
    """Write the sbatch script on the head and queue it; the job id."""
    staged = f"{jobs_dir}/submit-{uuid.uuid4().hex[:8]}.sbatch"
    head.write(staged, job.script().encode())
    out = head.check(["sbatch", "--parsable", f"--chdir={jobs_dir}", staged]).strip()
    job_id = out.splitlines()[-1].split(";")[0] if out else ""
    if not job_id.isdigit():
        raise HeadError(f"sbatch said {out!r}, not a job id")
    head.run(["mv", staged, f"{jobs_dir}/{job.run}.sbatch"])
    return job_id


def list_jobs(head: Head, checkpoints: str, job_id: str | None = None) -> list[view.Job]:
    """Slurm's jobs (finished ones for a day), each with the step of its latest checkpoint."""
    rc, out = head.run(["scontrol", "show", "job", "-o", *([job_id] if job_id else [])])
    if rc:
        if job_id and "Invalid job id" in out:
            raise NoSuchJob(f"JOB {job_id}: no such job on the head (jobs are listed for a day after they end; "
                            "goldenenv jobs lists them)")
        raise HeadError(f"scontrol show job failed on the head: {out.strip()[-300:]}")
    found = view.jobs(out)
    if not found:
        return []
    runs = sorted({j.run for j in found if j.run})
    steps = {}
    if runs:
        script = 'for run in "$@"; do printf "%s " "$run"; cat "$0/$run/latest" 2>/dev/null; echo; done'
        _, latest = head.run(["sh", "-c", script, checkpoints, *runs])
        for line in latest.splitlines():
            words = line.split(maxsplit=1)
            if words:
                steps[words[0]] = view.checkpoint_step(words[1] if len(words) > 1 else "")
    return [view.Job(**{**j.to_dict(), "checkpoint_step": steps.get(j.run)}) for j in found]


def job_output(job: view.Job) -> str:
    return job.output

def follow(head: Head, path: str, job_id: str, checkpoints: str, poll: float = 2.0,
           follow_on: bool = True) -> Iterator[str]:
    """The job's output from its start; with follow_on, new output as it comes until the job has ended."""
    offset = 0
    while True:
        rc, out = head.run(["tail", "-c", f"+{offset + 1}", path])
        if rc == 0 and out:
            offset += len(out.encode())
            yield out
        if not follow_on:
            return
        found = list_jobs(head, checkpoints, job_id)
        if not found or found[0].done:
            rc, out = head.run(["tail", "-c", f"+{offset + 1}", path])
            if rc == 0 and out:
                yield out
            return
        time.sleep(poll)


def cancel(head: Head, job_id: str) -> None:
    rc, out = head.run(["scancel", job_id])
    if rc:
        raise HeadError(f"scancel {job_id}: {out.strip() or 'failed'}")


def scheduler_nodes(head: Head) -> list[view.Node]:
    return view.nodes(head.check(["scontrol", "show", "node", "-o"]))


def scheduler_check(spec: ClusterSpec, head: Head) -> tuple[list[view.Node], list[str]]:
    """The nodes as slurmctld sees them, and what is wrong: missing, down, drained, or GRES not the catalog's."""
    found = scheduler_nodes(head)
    gpus = 0 if spec.cloud == "local" else catalog.instance_type(spec.cloud, spec.nodes[0].instance_type).gpu_count
    return found, view.judge(found, sum(p.count for p in spec.nodes), gpus)


__all__ = ["ContainerHead", "Head", "HeadError", "NoSuchJob", "SshHead", "batch_job", "cancel", "follow",
           "list_jobs", "places", "submit"]
