"""Lifecycle of a stack: up, run, validate, drill, destroy.

A cloud goldenenv provisions itself (the local cloud) is driven through the cluster its Cloud.own_cluster gives
(clouds/owncluster.py): this module keeps each step's order and judges its results, the cloud's folder does what
touches its nodes. Pulumi clouds go through the Automation API (`automation.py`), their nodes over ssh here. Every
step takes a `log` callable so the CLI can show progress.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from goldenenv import catalog, clouds, jobs, project, stackconfig
from goldenenv.checks import cluster as cluster_checks
from goldenenv.checks import run as image_checks
from goldenenv.checks.plugin import PROBE_SOURCE
from goldenenv.clouds.base import HostsBy
from goldenenv.clouds.owncluster import OwnCluster
from goldenenv.images.build import build
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load, lock_path
from goldenenv.nodeboot import CODE_FOLDER, MASTER_PORT
from goldenenv.plan import stack_file
from goldenenv.slurm import config as slurm_config, view as slurm_view
from goldenenv.spec import ClusterSpec, ConfigError, Problem
from goldenenv.streams import RANK_ENV, RunResult

Log = Callable[[str], None]
ALLREDUCE = Path(__file__).parent / "checks" / "allreduce_nodes.py"


def load_spec(stack: str, stacks_dir: Path | None = None) -> ClusterSpec:
    config = stackconfig.read_stack_file(stack_file(stack, stacks_dir) if stacks_dir else stack_file(stack))
    values, unknown = stackconfig.namespaced(config)
    spec = stackconfig.load(stack, values, unknown)
    clouds.validate(spec)
    return spec


def own_cluster(spec: ClusterSpec, client: docker.DockerClient | None = None) -> OwnCluster:
    """The stack's cluster, on a cloud goldenenv provisions itself (its Cloud.own_cluster); a Pulumi cloud's stack
    is refused, saying which commands drive it."""
    return clouds.get(spec.cloud).own_cluster(spec, client)


def ensure_image(spec: ClusterSpec, options: BuildOptions, client: docker.DockerClient, log: Log,
                 show: Log | None = None) -> str:
    """The golden image of the stack, built from its lock when this machine lacks it, or has it with older node
    tools (a goldenenv upgrade changes them, not the lock). A build logs a line per step with its seconds and a
    heartbeat during a long one; `show`, when given, gets the step now running (a terminal's status line)."""
    from goldenenv.images.dockerfile import LABEL_PREFIX, tools_hash
    from goldenenv.progress import Steps

    lock = load(spec.image.lock)
    try:
        found = client.images.get(lock.tag)
        if (found.labels or {}).get(f"{LABEL_PREFIX}.tools-hash") == tools_hash(lock):
            return lock.tag
        log(f"rebuilding {lock.tag}: goldenenv's node tools changed since it was built")
    except docker.errors.ImageNotFound:
        log(f"building {lock.tag} (first run only)")
    if show is None:
        return build(lock, options, client, log=log).tag
    return build(lock, options, client, log=log, steps=Steps(log, show)).tag


def up(spec: ClusterSpec, options: BuildOptions, client: docker.DockerClient | None = None, log: Log = print) -> dict:
    cluster = own_cluster(spec, client)
    image = ensure_image(spec, options, cluster.client, log)
    return cluster.up(image, log)


def destroy(spec: ClusterSpec, purge_data: bool = False, client=None, log: Log = print,
            drop_accounting: bool = False) -> list[str]:
    """The stack's own cluster removed, its accounting history exported to the kept data first; a failed export
    is a LifecycleError naming --drop-accounting, and nothing is removed."""
    from goldenenv.automation import LifecycleError
    from goldenenv.clouds.owncluster import AccountingExportError

    try:
        return own_cluster(spec, client).destroy(purge_data, log, drop_accounting)
    except AccountingExportError as e:
        raise LifecycleError(f"{e}. Nothing was removed: start the stack again (goldenenv up) and destroy, or "
                             "destroy with --drop-accounting to lose the history deliberately") from None


def run(spec: ClusterSpec, command: list[str], on_line: Callable[[str, str], None], code: Path | None = None,
        client=None) -> RunResult:
    """CMD under torchrun on every node of the stack's own cluster (the code synced to its shared storage first),
    as the image's user."""
    cluster = own_cluster(spec, client)
    if code:
        cluster.sync_code(code)
    return cluster.run(command, on_line, load(spec.image.lock).user)


STORAGE_ENV = ("GOLDENENV_STACK", "GOLDENENV_DATASETS", "GOLDENENV_CHECKPOINTS", "GOLDENENV_SCRATCH")
"""What a node's env file says about where the storage tiers are; a run passes it on, whatever the exec prefix."""


def code_dir(spec: ClusterSpec) -> tuple[str, bool]:
    """Where `run --code` puts the code on a cloud stack, and whether every node sees it there (the parallel FS)."""
    storage = spec.storage
    if storage.parallel_fs.enabled:
        return f"{storage.parallel_fs.mount_point}/{CODE_FOLDER}", True
    return f"{storage.local_nvme.mount_point}/{CODE_FOLDER}", False


def run_remote(spec: ClusterSpec, command: list[str], on_line: Callable[[str, str], None],
               hosts: list[str] | None = None, outputs: dict | None = None, ssh_config: str | None = None,
               exec_prefix: str | None = None, code: Path | None = None, resume: bool = False,
               ssh_user: str | None = None, procs: int | None = None, env: dict[str, str] | None = None,
               identity: str | None = None, log: Log = print):
    """Run CMD under torchrun on a cloud stack's nodes over ssh, the transport `validate` uses.

    Hosts are given or come from the stack outputs (nodePrivateIps, as each pool's login: the cloud's node_login);
    the exec prefix is given or reaches the golden container as that login can (jobs.container_exec); the rendezvous is
    the outputs' launchEnv, else the nodes' own addresses. Checkpoints go where the node env puts them
    (GOLDENENV_CHECKPOINTS: the parallel FS, which the stack exports to its bucket). With resume, the ranks see
    GOLDENENV_RESUME=1; examples/train_ddp.py resumes from its latest checkpoint on every start anyway.
    """
    from goldenenv import remote
    from goldenenv.clouds import access
    from goldenenv.nodeboot import NodeBoot

    cloud = clouds.get(spec.cloud)
    if not cloud.uses_pulumi:
        raise ConfigError([Problem("goldenenv:cloud", f"{spec.stack} is on the local cloud: goldenenv run -s "
                                   f"{spec.stack} without --hosts runs it on the node containers")])
    outputs = outputs or {}
    if exec_prefix is None:
        exec_prefix = jobs.container_exec(spec)
    if not hosts:
        hosts = access.node_targets(cloud, spec, outputs, ssh_user, HostsBy.PRIVATE_IP)
    if not hosts:
        raise ConfigError([Problem(f"stack {spec.stack}", "no nodes in the stack outputs: goldenenv up first, "
                                   "or name them with --hosts ssh://user@address,...")])
    ssh = remote.Ssh(ssh_config, identity)
    private = outputs.get("nodePrivateIps") or []
    if len(private) != len(hosts):
        log(f"asking {len(hosts)} nodes for their addresses")
        private = remote.private_addresses(hosts, ssh, exec_prefix)
    pool = spec.nodes[0]
    launch_env = outputs.get("launchEnv") or {}
    launch = remote.Launch(
        private[0], int(launch_env.get("MASTER_PORT", MASTER_PORT)), len(hosts),
        procs or int(launch_env.get("NPROC_PER_NODE") or catalog.instance_type(spec.cloud, pool.instance_type).gpu_count))
    variables = {k: v for k, v in NodeBoot(spec, pool.name, "none", False).env().items() if k in STORAGE_ENV}
    if code:
        dest, shared = code_dir(spec)
        written = remote.sync_code(code, hosts, dest, ssh, exec_prefix, shared)
        log(f"code synced to {dest} ({'shared file system, via ' if shared else 'on '}{', '.join(written)})")
        variables["GOLDENENV_CODE"] = dest
    if resume:
        variables["GOLDENENV_RESUME"] = "1"
    for i, host in enumerate(hosts):
        log(f"node-{i}: {host} ({private[i]})")
    spot = any(p.capacity.value == "spot" for p in spec.nodes)
    if spot:
        log("spot nodes: torchrun runs under goldenenv-spotwatch, so an interruption notice makes every rank "
            "checkpoint and exit 0; after the reclaim, goldenenv up brings the node back and run --resume continues")
    return remote.run_job(hosts, command, launch, private, on_line, ssh, exec_prefix, {**variables, **(env or {})},
                          spot_cloud=spec.cloud if spot else None)


@dataclass
class Validation:
    image_checks: str = ""
    image_ok: bool = False
    drift: list[str] = field(default_factory=list)
    allreduce: dict | None = None
    allreduce_ok: bool = False
    allreduce_note: str = ""
    scheduler: list = field(default_factory=list)
    """Slurm stacks: every node as slurmctld sees it (slurm.view.Node: state, GRES, drain reason)."""
    scheduler_problems: list[str] = field(default_factory=list)
    health: list = field(default_factory=list)
    """Every node's quick health level (health.fleet.NodeVerdict): failing rules name the node, GPU and rule."""
    host_checks: str = ""
    host_drift: dict[str, list[str]] = field(default_factory=dict)
    """Cloud stacks: node -> what its host runs apart from its pool's host layer (goldenenv.checks.host)."""

    @property
    def ok(self) -> bool:
        return self.image_ok and not self.drift and self.allreduce_ok and not self.scheduler_problems \
            and not any(v.fails for v in self.health) and not self.host_drift


def validate(spec: ClusterSpec, client=None, log: Log = print) -> Validation:
    """The stack's own cluster through the same path as cloud nodes: testinfra hosts, here docker://."""
    cluster = own_cluster(spec, client)
    nodes = cluster.node_names()
    if not nodes:
        raise ConfigError([Problem(f"stack {spec.stack}", "no nodes: run goldenenv up first")])
    user = load(spec.image.lock).user  # a Slurm node's container runs slurmd as root; jobs and checks run as the user
    slots = catalog.node_slots(spec.cloud, spec.nodes[0].instance_type)
    result = validate_hosts(spec.image.lock, [f"docker://{user}@{name}" for name in nodes], log=log,
                            procs_per_node=slots.processes)
    log("every node's health (quick level)")
    result.health = node_health(spec, cluster)
    if spec.scheduler == "slurm":
        log("the scheduler's view")
        result.scheduler = cluster.scheduler_nodes()
        result.scheduler_problems = slurm_view.judge(result.scheduler, sum(p.count for p in spec.nodes),
                                                     gpus=slots.gpus, gres=slurm_config.gres_types(spec)[0])
    return result


def node_health(spec: ClusterSpec, cluster: OwnCluster, level: str = "quick") -> list:
    """Every node container's health at `level`: collected into the stack's saved health folder, then judged
    (health.fleet), as `goldenenv health` does on any stack."""
    from goldenenv.catalog import health
    from goldenenv.health import fleet

    nodes = cluster.node_names()
    reach = {name: fleet.local_node(name) for name in nodes}
    expects = {name: health.pool_expectations(spec.cloud, spec.nodes[0].instance_type, None) for name in nodes}
    out = fleet.saved_folder(project.current().root, spec.stack)
    fleet.collect(reach, expects, level, out)
    return fleet.judge_folder(out)


@dataclass(frozen=True)
class DrillReport:
    interval: int
    checkpoint_before_kill: int
    step_at_kill: int
    resumed_from: int
    final_step: int
    job_id: str = ""
    """Slurm stacks: the job the drill submitted; requeued by Slurm, with no command from anyone."""
    restarts: int = 0
    back_after_s: float = 0.0
    """Slurm stacks: seconds from the kill until the requeued job ran again."""
    output: str = ""
    """Slurm stacks: the job's output file on the head."""
    staged: str = ""
    """The GPU-error drill: what the job's script said of the error it restarted for (node, GPU, XID)."""

    @property
    def lost_steps(self) -> int:
        return self.step_at_kill - self.resumed_from

    @property
    def ok(self) -> bool:
        return self.resumed_from == self.checkpoint_before_kill and self.lost_steps <= self.interval


STEP_LINE = re.compile(r"\bstep (\d+)\b")


def drill(spec: ClusterSpec, examples: Path, steps: int = 120, interval: int = 10, sleep: float = 0.05,
          client=None, log: Log = print, on_line=lambda node, text: None) -> DrillReport:
    """Kill a node mid-training, bring it back, resume: at most one checkpoint interval is lost.

    On a Slurm stack the drill only kills: Slurm requeues the job, the recovery container brings the node back and
    the job resumes by itself (slurm_drill)."""
    import threading

    cluster = own_cluster(spec, client)
    if spec.scheduler == "slurm":
        return slurm_drill(spec, examples, steps, interval, sleep, cluster.client, log)
    cluster.sync_code(examples)
    where = jobs.places(spec)
    run_dir = f"{where.checkpoints}/drill-{int(time.time())}"
    train = ["python", f"{where.code}/train_ddp.py", "--steps", str(steps), "--checkpoint-every", str(interval),
             "--checkpoint-dir", run_dir, "--sleep-per-step", str(sleep), "--log-every", "1"]
    seen = {"step": 0}

    def watch(node: str, text: str) -> None:
        on_line(node, text)
        match = STEP_LINE.search(text)
        if match:
            seen["step"] = max(seen["step"], int(match.group(1)))

    first = threading.Thread(target=lambda: run(spec, train, watch, client=cluster.client), daemon=True)
    first.start()
    victim = cluster.node_names()[-1]
    while _latest_step(cluster, run_dir) < 2 * interval:
        if not first.is_alive():
            raise RuntimeError("training ended before the drill could kill a node")
        time.sleep(0.2)
    log(f"killing {victim} at step ~{seen['step']}")
    cluster.kill_node(victim)
    first.join(timeout=120)
    # read after the job has died: a surviving rank may finish a checkpoint right after the kill
    checkpoint = _latest_step(cluster, run_dir)
    step_at_kill = max(seen["step"], checkpoint)
    log(f"bringing {victim} back; last checkpoint: step {checkpoint}")
    cluster.start_node(victim)
    lines: list[str] = []
    second = run(spec, train, lambda node, text: (lines.append(text), on_line(node, text)), client=cluster.client)
    if not second.ok:
        raise RuntimeError(f"training did not resume: exit codes {second.exit_codes}")
    done = done_event(lines)
    return DrillReport(interval, checkpoint, step_at_kill, done["resumed_from"], done["final_step"])


def submit_training(spec: ClusterSpec, examples: Path, steps: int, interval: int, sleep: float = 0.0,
                    client=None, log: Log = print, name: str = "train"):
    """Queue examples/train_ddp.py on every node of the local Slurm stack; (head, job id)."""
    head, cluster = jobs.local_head(spec, client)
    cluster.sync_code(examples)
    where = jobs.places(spec)
    command = ["python", f"{where.code}/train_ddp.py", "--steps", str(steps), "--checkpoint-every", str(interval),
               "--log-every", "1", *(["--sleep-per-step", str(sleep)] if sleep else [])]
    job = jobs.batch_job(spec, command, sum(p.count for p in spec.nodes), None, None, name, jobs.slurmd_timeout(spec))
    job_id = jobs.submit(head, job, where.jobs)
    log(f"submitted job {job_id}: {' '.join(command)}")
    return head, job_id


def wait_job(head, spec: ClusterSpec, job_id: str, until, timeout: float, poll: float = 0.5):
    """Poll the job until `until(job)` holds; the job, or RuntimeError naming its state after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = jobs.list_jobs(head, jobs.places(spec).checkpoints, job_id)
        job = found[0] if found else None
        if job and until(job):
            return job
        if job and job.done or time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} is {job.state if job else 'gone'}"
                               + (f" ({job.reason})" if job and job.reason else "") + " after "
                               + f"{timeout:.0f} s" * (not (job and job.done)))
        time.sleep(poll)


def slurm_drill(spec: ClusterSpec, examples: Path, steps: int = 120, interval: int = 10, sleep: float = 0.05,
                client=None, log: Log = print, job: tuple | None = None) -> DrillReport:
    """Kill a node container mid-job and only watch: Slurm requeues the job, the node comes back, the job resumes
    from its last checkpoint and completes. `job`: (head, id) of a job already queued (the flow's training)."""
    head, job_id = job or submit_training(spec, examples, steps, interval, sleep, client, log)
    cluster = own_cluster(spec, client)
    running = wait_job(head, spec, job_id, lambda j: j.state == "RUNNING" and (j.checkpoint_step or 0) >= 2 * interval,
                       timeout=180)
    victim = cluster.node_names()[-1]
    log(f"killing {victim} (docker kill) at checkpoint step {running.checkpoint_step} of job {job_id}")
    cluster.kill_node(victim)
    return _resumed(head, spec, job_id, interval, log, "Slurm requeued")


TRAINING_RANK = r"^python[0-9.]* \S*train_ddp\.py"
"""A rank of the drill's training, as pkill -f matches its command line."""
CONTAINED_XID = 94
"""The error the GPU-error drill stages: a contained ECC error, the commonest a job restart fixes (while the catalog
says so; else its first restart-job XID)."""


def gpu_error_drill(spec: ClusterSpec, examples: Path, steps: int = 120, interval: int = 10, sleep: float = 0.05,
                    client=None, log: Log = print) -> DrillReport:
    """Stage a contained GPU error mid-job: the last node's kernel log gets an XID the catalog says needs a job
    restart (CONTAINED_XID, as recorded evidence in place of a GPU: health.fleet.staged_gpu_error) and its rank
    dies, as that error kills it. The node stays in the queue; the job's own script judges its nodes, requeues it naming the node,
    GPU and XID, and it resumes from its last checkpoint. The node's own health files are put back after."""
    from datetime import datetime, timezone

    from goldenenv.catalog import health
    from goldenenv.health import fleet

    restarts = sorted(c for c, rule in health.xid_rules().items() if rule.action == "restart-job")
    code = CONTAINED_XID if CONTAINED_XID in restarts else restarts[0]
    head, job_id = submit_training(spec, examples, steps, interval, sleep, client, log)
    cluster = own_cluster(spec, client)
    running = wait_job(head, spec, job_id, lambda j: j.state == "RUNNING" and (j.checkpoint_step or 0) >= 2 * interval,
                       timeout=180)
    victim = cluster.node_names()[-1]
    with cluster.staged_files(victim, fleet.NODE_HEALTH, fleet.staged_gpu_error(code, datetime.now(timezone.utc))):
        log(f"staging XID {code} on {victim}'s GPU 0 and killing its rank at checkpoint step "
            f"{running.checkpoint_step} of job {job_id}")
        cluster.kill_processes(victim, TRAINING_RANK)
        report = _resumed(head, spec, job_id, interval, log, "the job's script requeued")
    said = re.search(rf"goldenenv: job {job_id}: (.*logged XID {code}.*)", head.check(["cat", report.output]))
    if not said:
        raise RuntimeError(f"job {job_id} was restarted, but its script did not name XID {code}")
    return dataclasses.replace(report, staged=said.group(1))


def _resumed(head, spec: ClusterSpec, job_id: str, interval: int, log: Log, who: str) -> DrillReport:
    """After the drill's blow: the job is requeued, runs again, completes; what it lost, from its log."""
    struck = time.monotonic()
    back = wait_job(head, spec, job_id, lambda j: j.restarts >= 1 and j.state in ("RUNNING", "COMPLETED"),
                    timeout=240)
    back_after = time.monotonic() - struck
    log(f"{who} job {job_id} (restarts {back.restarts}); running again {back_after:.0f} s later")
    done = wait_job(head, spec, job_id, lambda j: j.done, timeout=300)
    if done.state != "COMPLETED":
        raise RuntimeError(f"job {job_id} ended {done.state} after its requeue")
    output = jobs.job_output(done)
    log_text = head.check(["cat", output])
    before, _, after = log_text.partition(f"goldenenv: job {job_id} start 1 ")
    steps_before = [int(m.group(1)) for m in STEP_LINE.finditer(before)]
    finished = done_event(after.splitlines())
    checkpoints = [int(m.group(1)) for m in re.finditer(r"checkpoint step-(\d+)", before)]
    return DrillReport(interval, max(checkpoints, default=0), max(steps_before, default=0),
                       finished["resumed_from"] or 0, finished["final_step"], job_id, done.restarts, back_after,
                       output=output)


def _latest_step(cluster: OwnCluster, run_dir: str) -> int:
    latest = cluster.read_shared(f"{run_dir}/latest")
    match = re.search(r"step-(\d+)", latest) if latest is not None else None
    return int(match.group(1)) if match else 0


def done_event(lines: list[str]) -> dict:
    for line in reversed(lines):
        start = line.find('{"event": "done"')
        if start >= 0:
            return json.loads(line[start:])
    raise RuntimeError("the training run printed no completion line")


def validate_host_layers(spec: ClusterSpec, targets: list[str], ssh_config: str | None = None,
                         log: Log = print) -> tuple[str, dict[str, list[str]]]:
    """Every pool's host checks (its host layer: engine, toolkit, driver, modules, file-system client at the host
    lock's versions) on its nodes, which are the targets in pool order (as node_targets gives them): the suite's
    output, and node name (gpu-1) -> one line per drifted component."""
    from goldenenv.checks import host as host_checks
    from goldenenv.clouds.base import DockerReach
    from goldenenv.images import host

    cloud = clouds.get(spec.cloud)
    output, drift, start = "", {}, 0
    for number, pool in enumerate(spec.nodes):
        last = number == len(spec.nodes) - 1
        mine = targets[start:] if last else targets[start:start + pool.count]
        start += len(mine)
        if not mine:
            continue
        layer = host.layer(spec, pool)
        log(f"host checks on {len(mine)} {pool.name} node(s): the {layer.host_lock or 'host image'} layer")
        result = host_checks.check_hosts(
            layer, mine, instance_type=pool.instance_type, cloud=spec.cloud, ssh_config=ssh_config,
            sudo=cloud.node_login(spec, pool).docker is DockerReach.SUDO, golden_ref=host_checks.GOLDEN_CONTAINER,
            fabric=None if pool.rdma is not False else "none")
        output += result.output
        names = {target: f"{pool.name}-{i}" for i, target in enumerate(mine)}
        drift.update({names[target]: lines for target, lines in result.problems.items()})
    return output, drift


def validate_hosts(lock_name: str, hosts: list[str], exec_prefix: str = "", ssh_config: str | None = None,
                   instance_type: str | None = None, cloud: str | None = None, min_fraction: float = 0.8,
                   log: Log = print, procs_per_node: int | None = None, host_driver: str | None = None,
                   spec: ClusterSpec | None = None) -> Validation:
    """Validate nodes reached through testinfra (ssh:// on clouds, docker:// locally).

    On cloud nodes the golden image runs as the `goldenenv` container: pass exec_prefix=jobs.container_exec(spec)
    (`docker exec`, through `sudo -n` where the login is outside the docker group). With an instance type, the
    GPU-host checks run and the
    all-reduce's bus bandwidth is judged against the catalog's reference for that type at the size measured.
    With host_driver (the host image's pinned driver), a node whose GPUs report another driver fails. With the
    cloud stack's spec (hosts in its pools' order), every pool's host checks run too (validate_host_layers).
    The instance type is the catalog's entry of `cloud`, else of the spec's cloud: an instance type with neither
    is a ValueError, since a name alone does not say which cloud's catalog to judge the GPUs by.
    """
    import shlex
    import threading

    import testinfra

    cloud = cloud or (spec.cloud if spec else None)
    if instance_type and not cloud:
        raise ValueError(f"validate_hosts: instance type {instance_type} needs its cloud (cloud= or spec=)")
    result = Validation()
    extra = (["--exec-prefix", exec_prefix] if exec_prefix else []) + (
        ["--ssh-config", ssh_config] if ssh_config else []) + (
        ["--gpu", "--instance-type", instance_type, "--cloud", cloud] if instance_type else []) + (
        ["--host-driver", host_driver] if host_driver else [])
    log(f"image checks on {len(hosts)} nodes")
    checked = subprocess.run(image_checks.pytest_command(lock_path(lock_name), ",".join(hosts), extra),
                             capture_output=True, text=True)
    result.image_checks, result.image_ok = checked.stdout + checked.stderr, checked.returncode == 0
    remotes = [testinfra.get_host(h, ssh_config=ssh_config) for h in hosts]
    prefix = f"{exec_prefix} " if exec_prefix else ""

    def python(remote, source: str, *args: str):
        return remote.run(prefix + "python3 -c " + shlex.join([source, *args]))

    log("cross-node drift")
    reports = {}
    for remote in remotes:
        done = python(remote, PROBE_SOURCE.read_text())
        reports[remote.backend.get_hostname()] = json.loads(done.stdout) if done.rc == 0 else {"probe": "failed"}
    result.drift = cluster_checks.drift(reports)

    log("all-reduce across nodes")
    script = "/tmp/goldenenv_allreduce.py"
    writer = f"open({script!r}, 'w').write({ALLREDUCE.read_text()!r})"
    addresses = []
    for remote in remotes:
        python(remote, writer)
        addresses.append(remote.run(prefix + "hostname -I").stdout.split()[0])
    procs = procs_per_node or (catalog.instance_type(cloud, instance_type).gpu_count if instance_type else 1)
    run_id = f"validate{int(time.time())}"
    outputs: dict[int, object] = {}

    def one(index: int, remote) -> None:
        command = ["env", *[f"{k}={v}" for k, v in RANK_ENV.items()], "torchrun",
                   f"--nnodes={len(remotes)}",
                   f"--nproc-per-node={procs}", "--rdzv-backend=c10d", f"--rdzv-endpoint={addresses[0]}:29500",
                   f"--rdzv-id={run_id}", f"--local-addr={addresses[index]}", "--max-restarts=0", script]
        outputs[index] = remote.run(prefix + shlex.join(command))

    threads = [threading.Thread(target=one, args=(i, r)) for i, r in enumerate(remotes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.allreduce = cluster_checks.parse_allreduce_line("\n".join(o.stdout for o in outputs.values()))
    ran = all(o.rc == 0 for o in outputs.values())
    result.allreduce_ok = ran and bool(result.allreduce and result.allreduce["ok"])
    if result.allreduce:
        result.allreduce_note = (f"{result.allreduce['backend']} all_reduce of {result.allreduce['bytes']} B over "
                                 f"{result.allreduce['world_size']} ranks: busbw {result.allreduce['busbw_gbps']:.3f} GB/s")
        if instance_type and result.allreduce_ok:
            result.allreduce_ok, verdict = cluster_checks.busbw_verdict(
                instance_type, len(hosts), result.allreduce["busbw_gbps"], min_fraction,
                message_bytes=result.allreduce["bytes"])
            result.allreduce_note += f"; {verdict}"
    elif not ran:
        failed = next(o for o in outputs.values() if o.rc != 0)
        result.allreduce_note = f"torchrun failed: {(failed.stderr or failed.stdout).strip()[-300:]}"
    if spec is not None:
        result.host_checks, result.host_drift = validate_host_layers(spec, hosts, ssh_config, log=log)
    return result

