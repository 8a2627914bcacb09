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

from goldenenv import catalog, clouds, jobcost, slurm
from goldenenv.clouds.owncluster import OwnCluster
from goldenenv.images.lock import load as load_lock
from goldenenv.nodeboot import CODE_FOLDER, ENV_FILE, MASTER_PORT, jobs_folder
from goldenenv.slurm import config as slurm_config, jobindex, view
from goldenenv.slurm.batch import JOB_NAME, RUN, BatchJob, job_name, run_name
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
            info.mtime = int(time.time())
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
    """The cloud's shared folder where it has one (Cloud.shared_folder), else the stack's parallel file system,
    else each node's local scratch."""
    shared = clouds.get(spec.cloud).shared_folder
    if shared:
        return Places(jobs_folder(spec, shared), f"{shared}/checkpoints", f"{shared}/{CODE_FOLDER}", True)
    storage = spec.storage
    if storage.parallel_fs.enabled:
        fs = storage.parallel_fs
        return Places(jobs_folder(spec), f"{fs.mount_point}/{fs.checkpoint_prefix.strip('/')}",
                      f"{fs.mount_point}/{CODE_FOLDER}", True)
    scratch = storage.local_nvme.mount_point
    return Places(jobs_folder(spec), f"{scratch}/checkpoints", f"{scratch}/{CODE_FOLDER}", False)


def require_slurm(spec: ClusterSpec) -> None:
    if spec.scheduler != "slurm":
        raise ConfigError([Problem("goldenenv:scheduler", f"{spec.stack} has scheduler {spec.scheduler}: set "
                                   "goldenenv:scheduler: slurm (the default) and goldenenv up, or use goldenenv run")])


def local_head(spec: ClusterSpec, client=None) -> tuple[Head, OwnCluster]:
    """The head container of a stack whose cloud goldenenv provisions itself (Cloud.own_cluster), as the image's
    user; and its cluster."""
    cluster = clouds.get(spec.cloud).own_cluster(spec, client)
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


def container_exec(spec: ClusterSpec, head: bool = False, user: str | None = None) -> str:
    """How a command reaches the golden container on a cloud stack's nodes (or its head), as the image's user (jobs
    run as that user) or as `user` (root, for the head's database): `docker exec`, through `sudo -n` where the
    cloud's login is outside the docker group."""
    from goldenenv.clouds import access

    cloud = clouds.get(spec.cloud)
    logins = [cloud.node_login(spec, None)] if head else [cloud.node_login(spec, pool) for pool in spec.nodes]
    return shlex.join([*access.docker_words(logins), "exec", "--user", user or load_lock(spec.image.lock).user,
                       "goldenenv"])


def batch_job(spec: ClusterSpec, command: list[str], nodes: int, gpus_per_node: int | None, hours: float | None,
              name: str | None, slurmd_timeout: int, resume: str | None = None) -> BatchJob:
    """The job a user asks for; with `resume`, it continues that run: the same run folder, so the same checkpoints
    (check_resume says whether the run may be continued)."""
    total = sum(p.count for p in spec.nodes)
    problems = []
    if nodes < 1 or nodes > total:
        problems.append(Problem("--nodes", f"{nodes}: the stack has {total} node(s); give 1 to {total}"))
    pool = spec.nodes[0]
    slots = catalog.node_slots(spec.cloud, pool.instance_type)
    procs, gpus = slots.processes, slots.gpus
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
    if resume is not None and not RUN.fullmatch(resume):
        problems.append(Problem("--resume", f"{resume!r}: a run's name, as `goldenenv jobs --wide` shows it "
                                "(e.g. train-20261202T050719Z-46a2)"))
    name = name or (job_name(resume) if resume and RUN.fullmatch(resume) else "train")
    if not JOB_NAME.fullmatch(name):
        problems.append(Problem("--name", f"{name!r}: letters, digits, . _ - (at most 41), e.g. llama-sft"))
    if problems:
        raise ConfigError(problems)
    where = places(spec)
    return BatchJob(
        stack=spec.stack, command=command, nodes=nodes, procs_per_node=procs, output_dir=where.jobs,
        checkpoints=where.checkpoints, env_file=ENV_FILE, master_port=MASTER_PORT, name=name,
        gpus_per_node=gpus_per_node if gpus_per_node is not None else gpus, hours=hours,
        env={"GOLDENENV_CODE": where.code}, slurmd_timeout=slurmd_timeout, run=resume or run_name(name),
        spot_cloud=spec.cloud if pool.capacity.value == "spot" else None,
    )


def known_runs(head: Head, where: Places) -> list[str]:
    """The runs on the shared file system: a folder of checkpoints, or output in the jobs folder."""
    script = 'ls -1 "$0" 2>/dev/null; cd "$1" 2>/dev/null && for f in *.out; do [ -e "$f" ] && echo "${f%.out}"; done'
    _, out = head.run(["sh", "-c", script, where.checkpoints, where.jobs])
    return sorted({r for r in out.split() if RUN.fullmatch(r)})


def check_resume(head: Head, where: Places, run: str) -> None:
    """A run may be continued when the shared file system has it and none of its jobs is still queued or running
    (two jobs writing one run folder would overwrite each other's checkpoints)."""
    runs = known_runs(head, where)
    if run not in runs:
        listed = ", ".join(runs[-10:]) if runs else "none yet"
        raise ConfigError([Problem("--resume", f"{run}: no such run in {where.checkpoints} or {where.jobs}; "
                                   f"the runs there: {listed}")])
    active = [j for j in list_jobs(head, where.checkpoints) if j.run == run and not j.done]
    if active:
        raise ConfigError([Problem("--resume", f"{run}: job {active[0].id} of that run is still "
                                   f"{active[0].state}; cancel it first (goldenenv cancel {active[0].id})")])


def submit(head: Head, job: BatchJob, jobs_dir: str) -> str:
    """Write the sbatch script on the head, queue it and add it to the job index; the job id."""
    staged = f"{jobs_dir}/submit-{uuid.uuid4().hex[:8]}.sbatch"
    head.write(staged, job.script().encode())
    out = head.check(["sbatch", "--parsable", f"--chdir={jobs_dir}", staged]).strip()
    job_id = out.splitlines()[-1].split(";")[0] if out else ""
    if not job_id.isdigit():
        raise HeadError(f"sbatch said {out!r}, not a job id")
    head.run(["mv", staged, f"{jobs_dir}/{job.run}.sbatch"])
    record = 'printf "%s\t%s\t%s\n" "$1" "$2" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$0"'
    head.run(["sh", "-c", record, f"{jobs_dir}/{jobindex.FILE}", job_id, job.run])
    return job_id


SLURM = ["env", f"TZ={view.TIME_ZONE}"]
"""Slurm's commands run with the time zone goldenenv shows: scontrol prints times in the caller's zone, unnamed."""


def list_jobs(head: Head, checkpoints: str, job_id: str | None = None, jobs_dir: str | None = None) -> list[view.Job]:
    """Slurm's jobs (finished ones for a day), each with the newest checkpoint step it wrote itself."""
    rc, out = head.run([*SLURM, "scontrol", "show", "job", "-o", *([job_id] if job_id else [])])
    if rc:
        if job_id and "Invalid job id" in out:
            raise NoSuchJob(f"JOB {job_id}: no such job on the head (jobs are listed for a day after they end; "
                            "goldenenv jobs lists them)")
        raise HeadError(f"scontrol show job failed on the head: {out.strip()[-300:]}")
    found = view.jobs(out)
    runs = sorted({j.run for j in found if j.run})
    if not runs:
        return found
    script = ('cat "$0" 2>/dev/null; echo "=="; cd "$1" 2>/dev/null || exit 0; shift; for run in "$@"; do '
              'for f in "$run"/step-*.pt; do [ -e "$f" ] && stat -c "%Y %n" "$f"; done; done')
    index = f"{jobs_dir or str(Path(checkpoints).parent / slurm.JOBS_FOLDER)}/{jobindex.FILE}"
    _, listed = head.run(["sh", "-c", script, index, checkpoints, *runs])
    known, _, stats = listed.partition("==\n")
    return [view.Job(**{**j.to_dict(), "checkpoint_step": step}) for j, step in
            zip(found, own_steps(found, jobindex.entries(known), stats))]


def own_steps(found: list[view.Job], known: list[jobindex.Entry], stats: str) -> list[int | None]:
    """Each job's newest checkpoint step: of its run folder's checkpoints (`stat -c '%Y %n'` lines), those written
    from its submission (the job index's time, else Slurm's SubmitTime) until the next job of the run was submitted
    (none yet: no end). A job's last checkpoint may come after Slurm's EndTime (the training checkpoints on the
    SIGTERM of a cancel), and no two jobs of a run overlap (submit --resume waits for the first to end), so
    everything in between is the earlier job's. Two jobs of one run each get their own; a requeue is the same job."""
    written: dict[str, list[tuple[int, int]]] = {}
    for row in stats.splitlines():
        mtime, _, path = row.partition(" ")
        step = view.checkpoint_step(path.rsplit("/", 1)[-1])
        if mtime.isdigit() and step is not None and "/" in path:
            written.setdefault(path.split("/", 1)[0], []).append((int(mtime), step))
    submitted = {(e.id, e.run): view.slurm_time(e.submitted.rstrip("Z")) for e in known}
    since = [submitted.get((j.id, j.run)) or view.slurm_time(j.submitted) for j in found]
    starts: dict[str, set[float]] = {}
    for run, moment in [(e.run, submitted[(e.id, e.run)]) for e in known] + [(j.run, t) for j, t in zip(found, since)]:
        if moment is not None:
            starts.setdefault(run, set()).add(moment.timestamp())
    steps = []
    for j, began in zip(found, since):
        first = began.timestamp() if began else float("-inf")
        until = min((t for t in starts.get(j.run, ()) if t > first), default=float("inf"))
        own = [step for mtime, step in written.get(j.run, []) if first <= mtime < until]
        steps.append(max(own) if own else None)
    return steps


@dataclass(frozen=True)
class Output:
    """Where a job's output is: its run's .out on the shared file system; `earlier` names other runs that had the
    same id in an earlier cluster."""

    path: str
    run: str
    current: bool
    earlier: list[jobindex.Entry]


def find_output(head: Head, where: Places, job_id: str) -> Output:
    """A job's output by its id: the job Slurm knows now, else the job index (and the first lines of output files
    from before the index) for jobs of an earlier cluster whose output is still on the shared file system."""
    try:
        current = list_jobs(head, where.checkpoints, job_id, where.jobs)
    except NoSuchJob:
        current = []
    known = recorded_jobs(head, where)
    if current:
        job = current[0]
        return Output(job.output, job.run, True, [e for e in jobindex.with_id(known, job_id) if e.run != job.run])
    found = jobindex.with_id(known, job_id)
    if not found:
        raise NoSuchJob(f"JOB {job_id}: no such job on the head, and no output of a job {job_id} in {where.jobs} "
                        "(goldenenv jobs lists the head's jobs)")
    if len(found) > 1:
        raise NoSuchJob(f"JOB {job_id}: {len(found)} jobs of earlier clusters had that id: "
                        + "; ".join(jobindex.describe(e) for e in found) + ". Say which with --run RUN")
    return Output(f"{where.jobs}/{found[0].run}.out", found[0].run, False, [])


def recorded_jobs(head: Head, where: Places) -> list[jobindex.Entry]:
    """The job index, then jobs from before it by their output's first line (only output files it does not list)."""
    _, text = head.run(["sh", "-c", 'cat "$0/$1" 2>/dev/null', where.jobs, jobindex.FILE])
    known = jobindex.entries(text)
    listed = {e.run for e in known}
    script = ('cd "$0" 2>/dev/null || exit 0; for f in *.out; do case " $* " in *" ${f%.out} "*) ;; '
              '*) [ -e "$f" ] && head -v -n 1 "$f" ;; esac; done')
    _, firsts = head.run(["sh", "-c", script, where.jobs, *sorted(listed)])
    return known + jobindex.first_lines(firsts)


def run_output(head: Head, where: Places, run: str) -> str:
    """The output file of a run named with --run; bad input names the flag and the runs there are."""
    runs = known_runs(head, where)
    if not RUN.fullmatch(run) or run not in runs:
        listed = ", ".join(runs[-10:]) if runs else "none yet"
        raise ConfigError([Problem("--run", f"{run}: no such run in {where.jobs}; the runs there: {listed}")])
    return f"{where.jobs}/{run}.out"


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
        try:
            found = list_jobs(head, checkpoints, job_id)
        except NoSuchJob:
            found = []
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
    return view.nodes(head.check([*SLURM, "scontrol", "show", "node", "-o"]))


def scheduler_check(spec: ClusterSpec, head: Head) -> tuple[list[view.Node], list[str]]:
    """The nodes as slurmctld sees them, and what is wrong: missing, down, drained, or GRES not the catalog's."""
    found = scheduler_nodes(head)
    gpus = catalog.node_slots(spec.cloud, spec.nodes[0].instance_type).gpus
    return found, view.judge(found, sum(p.count for p in spec.nodes), gpus, slurm_config.gres_types(spec)[0])




def accounting(head: Head, spec: ClusterSpec, window: jobcost.Window | None, now, job_ids: list[str] | None = None,
               since=None) -> list[jobcost.Priced]:
    """Slurm's accounting records of the window (or of the named jobs, those ending from `since`), priced: what
    `cost` and `jobs` show."""
    tres = slurm_config.accounting_tres(spec)
    argv = jobcost.sacct_argv(window.since if window else since, window.until if window else None, job_ids)
    records = jobcost.parse(head.check([*SLURM, *argv]), tres)
    pools: dict[str, str] = {}
    if len(spec.nodes) > 1 and any(r.constraints not in {p.name for p in spec.nodes} for r in records):
        rc, out = head.run(jobcost.SINFO_ARGV)
        pools = jobcost.node_pools(out, spec) if not rc else {}
    return jobcost.price(records, spec, window, now, pools)


def utilization(head: Head, spec: ClusterSpec, window: jobcost.Window) -> jobcost.Utilization | None:
    """The cluster's GPU-seconds allocated, idle and down in the window (sreport); None where Slurm has none."""
    tres = slurm_config.accounting_tres(spec)
    return jobcost.parse_sreport(head.check([*SLURM, *jobcost.sreport_argv(window.since, window.until, tres)]), tres)


def with_costs(head: Head, spec: ClusterSpec, found: list[view.Job], now) -> list[view.Job]:
    """The jobs with their GPU-hours and cost from Slurm's accounting records, priced as `goldenenv cost` prices
    them (the same records, the same function)."""
    from dataclasses import replace

    if not found:
        return found
    ids = sorted({j.id for j in found})
    submitted = [t for t in (view.slurm_time(j.submitted) for j in found) if t is not None]
    since = min(submitted) - jobcost.REQUEUE_LOOKBACK if submitted else None
    priced = jobcost.per_job(accounting(head, spec, None, now, ids, since))
    currency = next((p.currency for p in (jobcost.pool_gpu_price(spec, pool) for pool in spec.nodes) if p), "")
    return [replace(j, gpu_hours=priced[j.id][0], cost=priced[j.id][1], currency=currency) if j.id in priced
            else replace(j, gpu_hours=0.0 if j.pending else None, cost=0.0 if j.pending else None, currency=currency)
            for j in found]


__all__ = ["ContainerHead", "Head", "HeadError", "NoSuchJob", "Output", "SshHead", "accounting", "batch_job", "cancel",
           "check_resume", "find_output", "follow", "known_runs", "list_jobs", "places", "run_output", "submit",
           "utilization", "with_costs"]
