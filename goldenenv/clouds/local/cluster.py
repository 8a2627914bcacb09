"""Provision the local cluster with the Docker SDK: network, data volume, node containers, and with Slurm a head.

Everything carries the label `goldenenv.stack=<stack>` (the local form of the cloud's stack tag),
so `destroy` finds what belongs to a stack even after a half-finished `up`. The data volume holds
datasets/ and checkpoints/ (and the Slurm jobs' output) and outlives `destroy` unless the data is purged by name.

With `scheduler: slurm` the head container runs slurmctld and slurmdbd, a database container MariaDB on a volume of
its own, and every node container a dynamic slurmd, all from the stack's golden image. The munge key is made inside a
volume of the engine (mode 0400) and never passes through goldenenv (the database's password is derived from it in
the containers); the recovery container plays the cloud's part when a node, the head or the database is lost
(clouds/local/recovery.py). `destroy` exports the accounting history to the data volume before it removes anything,
and the next `up` restores it.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import NotFound

from goldenenv import catalog, headhistory, slurm, team
from goldenenv.catalog import health
from goldenenv.clouds.local.run import NODE_ENV, run_on_nodes
from goldenenv.clouds.owncluster import AccountingExportError
from goldenenv.clouds.local.settings import DATA, SLURMD_TIMEOUT_S
from goldenenv.nodeboot import CODE_FOLDER, hostfile, launch_env
from goldenenv.slurm import config as slurm_config
from goldenenv.slurm import view
from goldenenv.spec import ClusterSpec, ConfigError, Problem
from goldenenv.streams import Line, RunResult

STACK_LABEL = "goldenenv.stack"
NODE_LABEL = "goldenenv.node"
ROLE_LABEL = "goldenenv.role"
REQUEUE_DELAY_S = 5
"""How long a requeued job waits before it may start again (Slurm's cred_expire, 120 s by default): containers
launch a job's steps in well under that."""
RECOVERY_DELAY_S = 3
"""How long a lost node or head stays down before the recovery container starts it again (its "reboot")."""
HEALTH_INTERVAL_S = 15
"""Seconds between two health checks of a node container: a node given a failing state is drained within them."""
DB_HOSTNAME = "db"
"""The database container's name on the cluster network: the head's slurmdbd reaches MariaDB there."""
TEAM_WAIT_S = 120
ENGINE_SOCKET = "/var/run/docker.sock"
RECOVERY_SCRIPT = Path(__file__).with_name("recovery.py")


@dataclass(frozen=True)
class Names:
    stack: str

    @property
    def network(self) -> str:
        return f"goldenenv-{self.stack}"

    @property
    def volume(self) -> str:
        return f"goldenenv-{self.stack}-data"

    @property
    def munge(self) -> str:
        return f"goldenenv-{self.stack}-munge"

    @property
    def slurm_state(self) -> str:
        return f"goldenenv-{self.stack}-slurm"

    @property
    def head(self) -> str:
        return f"goldenenv-{self.stack}-head"

    @property
    def db(self) -> str:
        """The accounting database's container."""
        return f"goldenenv-{self.stack}-db"

    @property
    def accounting(self) -> str:
        """The accounting database's volume (MariaDB's files)."""
        return f"goldenenv-{self.stack}-accounting"

    @property
    def recovery(self) -> str:
        return f"goldenenv-{self.stack}-recovery"

    def node(self, index: int) -> str:
        return f"goldenenv-{self.stack}-node-{index}"

    @staticmethod
    def hostname(index: int) -> str:
        return f"node-{index}"


class LocalCluster:
    """The local stack's containers on this machine's Docker engine: the local cloud's OwnCluster
    (goldenenv.clouds.owncluster), which the shared steps drive."""

    def __init__(self, spec: ClusterSpec, client: docker.DockerClient | None = None,
                 state_dir: Path | None = None):
        self.spec = spec
        self.client = client or docker.from_env()
        self.names = Names(spec.stack)
        self.shape = catalog.local_shapes()[spec.nodes[0].instance_type]
        self.count = spec.nodes[0].count
        if state_dir is None:
            from goldenenv import project

            state_dir = project.current().local_state
        self.state_file = state_dir / spec.stack / "outputs.json"

    @property
    def labels(self) -> dict[str, str]:
        tags = {f"goldenenv.{k.replace(':', '.')}": v for k, v in self.spec.stack_tags.items()}
        return {**tags, STACK_LABEL: self.spec.stack}

    @property
    def slurm(self) -> bool:
        return self.spec.scheduler == "slurm"

    def env(self) -> dict[str, str]:
        """What every process on a node sees: the storage tier's paths and the stack."""
        return {
            "GOLDENENV_STACK": self.spec.stack,
            "GOLDENENV_DATASETS": f"{DATA}/datasets",
            "GOLDENENV_CHECKPOINTS": f"{DATA}/checkpoints",
            "GOLDENENV_JOBS": f"{DATA}/{slurm.JOBS_FOLDER}",
        }

    def up(self, image: str, log=print) -> dict:
        """Create what is missing, start what is stopped; the same call finishes a half-created stack."""
        network = self._network()
        self._volume(image)
        if self.slurm:
            self._munge_key(image)
            self._team_file(image)
            self._db(image, network, log)
            self._head(image, network, log)
        for i in range(self.count):
            self._node(i, image, network, log)
        if self.slurm:
            self._recovery(image, log)
            self.wait_registered(log)
            self.wait_team(log)
        outputs = self.outputs()
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(outputs, indent=2))
        return outputs

    def _network(self):
        try:
            return self.client.networks.get(self.names.network)
        except NotFound:
            # internal: the nodes talk to each other and to nothing else
            return self.client.networks.create(self.names.network, driver="bridge", internal=True,
                                               labels=self.labels)

    def _volume(self, image: str) -> None:
        """The data volume, laid out for the image's non-root user; a kept volume gains what a newer layout adds."""
        try:
            self.client.volumes.get(self.names.volume)
        except NotFound:
            self.client.volumes.create(self.names.volume, labels=self.labels)
        folders = " ".join(f"{DATA}/{f}" for f in ("datasets", "checkpoints", "code", slurm.JOBS_FOLDER))
        self.client.containers.run(
            image, ["sh", "-c", f"mkdir -p {folders} && chown 1000:1000 {DATA} {folders}"],
            user="root", remove=True, network_mode="none", volumes={self.names.volume: {"bind": DATA, "mode": "rw"}},
        )

    def _munge_key(self, image: str) -> None:
        """The stack's munge key, made in a volume of the engine by the engine (1024 random bytes, mode 0400)."""
        try:
            self.client.volumes.get(self.names.munge)
            return
        except NotFound:
            pass
        self.client.volumes.create(self.names.munge, labels=self.labels)
        key = Path(slurm.MUNGE_KEY_MOUNT)
        self.client.containers.run(
            image, ["sh", "-c", f"umask 077 && head -c 1024 /dev/urandom > {key} && chmod 0400 {key}"],
            user="root", remove=True, network_mode="none",
            volumes={self.names.munge: {"bind": str(key.parent), "mode": "rw"}},
        )

    def _team_file(self, image: str) -> None:
        """The team file on the data volume (goldenenv.team), which every container applies: written before the
        containers start so they find it at once."""
        self._write_volume(image, team.team_path(self.spec), team.team_file(self.spec).encode())

    def _write_volume(self, image: str, path: str, data: bytes) -> None:
        """A file onto the data volume, owned by the image's user, through a container that exits at once."""
        container = self.client.containers.create(
            image, ["sh", "-c", 'mkdir -p "$(dirname "$1")" && chown 1000:1000 "$(dirname "$1")"', "sh", path],
            user="root", network_mode="none", volumes={self.names.volume: {"bind": DATA, "mode": "rw"}},
        )
        try:
            container.start()
            container.wait()
            container.put_archive(str(Path(path).parent), _archive({Path(path).name: data}, uid=1000))
        finally:
            container.remove(force=True)

    def wait_team(self, log, timeout: float = TEAM_WAIT_S) -> None:
        """Until the head has applied the team file (users, associations, limits): a job submitted before would be
        refused for want of an association."""
        head = self.head()
        marker = team.applied_path(self.spec)
        want = team.digest(team.team_file(self.spec))
        deadline = time.monotonic() + timeout
        log("waiting for the head to apply the team (users, Slurm associations and limits)")
        while time.monotonic() < deadline:
            done = head.exec_run(["cat", marker]) if head else None
            if done is not None and done.exit_code == 0:
                digest, _, rest = done.output.decode(errors="replace").strip().partition("\t")
                outcome, _, message = rest.partition("\t")
                if digest == want and outcome == "ok":
                    return
                if digest == want:
                    raise ConfigError([Problem("goldenenv:team", f"the head could not apply the team: {message}")])
            time.sleep(1)
        log(f"the head had not applied the team within {timeout:.0f} s (docker logs {self.names.head})")

    def _db(self, image: str, network, log) -> None:
        """MariaDB for the head's slurmdbd, in a container of its own on a volume of its own (the history)."""
        if self._existing(self.names.db, log):
            return
        log(f"creating {self.names.db} (the accounting database) from {image}")
        try:
            self.client.volumes.get(self.names.accounting)
        except NotFound:
            self.client.volumes.create(self.names.accounting, labels=self.labels)
        container = self.client.containers.create(
            image, slurm.db_command(), name=self.names.db, hostname=DB_HOSTNAME, user="root",
            labels={**self.labels, ROLE_LABEL: "db"}, volumes={**self._secrets(),
                                                               self.names.accounting: {"bind": "/var/lib/mysql",
                                                                                      "mode": "rw"}},
            restart_policy={"Name": "unless-stopped"}, init=True, detach=True, **self._on_network(network, DB_HOSTNAME),
        )
        container.start()

    def _secrets(self) -> dict:
        return {self.names.munge: {"bind": str(Path(slurm.MUNGE_KEY_MOUNT).parent), "mode": "ro"}}

    def _existing(self, name: str, log):
        """The container if it exists (started when it was stopped), else None."""
        try:
            container = self.client.containers.get(name)
        except NotFound:
            return None
        if container.status != "running":
            log(f"starting {name}")
            container.start()
        return container

    def _head(self, image: str, network, log) -> None:
        """slurmctld in a head container: the rendered slurm.conf, its state in a volume, job output on /data."""
        if self._existing(self.names.head, log):
            return
        log(f"creating {self.names.head} (slurmctld) from {image}")
        try:
            self.client.volumes.get(self.names.slurm_state)
        except NotFound:
            self.client.volumes.create(self.names.slurm_state, labels=self.labels)
        container = self.client.containers.create(
            image, slurm.head_command(db_host=DB_HOSTNAME), name=self.names.head, hostname=slurm.HEAD_HOSTNAME,
            user="root",
            labels={**self.labels, ROLE_LABEL: "head"}, environment={**self.env(), **NODE_ENV},
            volumes={self.names.volume: {"bind": DATA, "mode": "rw"}, **self._secrets(),
                     self.names.slurm_state: {"bind": slurm.STATE_DIR, "mode": "rw"}},
            restart_policy={"Name": "unless-stopped"}, init=True, detach=True,
            **self._on_network(network, slurm.HEAD_HOSTNAME),
        )
        conf = slurm_config.render_conf(self.spec, SLURMD_TIMEOUT_S, cred_expire=REQUEUE_DELAY_S,
                                        health_interval=HEALTH_INTERVAL_S)
        container.put_archive("/", _archive({f"{slurm.CONF_MOUNT.lstrip('/')}/slurm.conf": conf.encode()}))
        container.start()

    def _on_network(self, network, alias: str) -> dict:
        """Create arguments: only on the cluster network, reachable there by its host name (Slurm's peers and
        torchrun's rendezvous resolve it)."""
        endpoint = self.client.api.create_endpoint_config(aliases=[alias])
        return {"network": network.name, "networking_config": {network.name: endpoint}}

    def _node(self, index: int, image: str, network, log) -> None:
        name = self.names.node(index)
        if self._existing(name, log):
            return
        log(f"creating {name} from {image}")
        hostname = self.names.hostname(index)
        command, user, extra, devices = ["sleep", "infinity"], None, {}, []
        if self.slurm:
            command = slurm.node_command(slurm.HEAD_HOSTNAME, self.shape.standin_gpus, [self.spec.nodes[0].name],
                                         health=health.pool_expectations("local", self.spec.nodes[0].instance_type,
                                                                         None))
            user, extra = "root", self._secrets()
            # stand-in GPUs: /dev/null at /dev/nvidia<n>, so slurmd offers Gres=gpu:<n> and Slurm accounts GPU time
            devices = [f"/dev/null:/dev/nvidia{n}:rwm" for n in range(self.shape.standin_gpus)]
        container = self.client.containers.create(
            image, command, name=name, hostname=hostname, detach=True, user=user,
            labels={**self.labels, NODE_LABEL: str(index)},
            environment={**self.env(), **(NODE_ENV if self.slurm else {})},
            volumes={self.names.volume: {"bind": DATA, "mode": "rw"}, **extra},
            nano_cpus=int(self.shape.cpus * 1e9), mem_limit=f"{int(self.shape.memory_gib * 1024)}m",
            shm_size="1g", init=True, devices=devices, **self._on_network(network, hostname),
        )
        container.start()

    def _recovery(self, image: str, log) -> None:
        """The stand-in for the cloud's recovery of a lost instance: starts an exited node or head container again.

        The head is watched like a node, not left to its restart policy: Docker ignores the policy after `docker
        kill`, and a cloud recovers its head the way it recovers a node (README, "What survives what")."""
        if self._existing(self.names.recovery, log):
            return
        script = "/usr/local/libexec/goldenenv-recovery.py"
        container = self.client.containers.create(
            image, ["python3", script, "--stack", self.spec.stack, "--delay", str(RECOVERY_DELAY_S),
                    "--watch", NODE_LABEL, "--watch", f"{ROLE_LABEL}=head", "--watch", f"{ROLE_LABEL}=db",
                    "--stack-label", STACK_LABEL],
            name=self.names.recovery, user="root", network_mode="none", detach=True, init=True,
            labels={**self.labels, ROLE_LABEL: "recovery"}, restart_policy={"Name": "unless-stopped"},
            volumes={ENGINE_SOCKET: {"bind": ENGINE_SOCKET, "mode": "rw"}},
        )
        container.put_archive("/", _archive({script.lstrip("/"): RECOVERY_SCRIPT.read_bytes()}))
        container.start()

    def head(self):
        """The head container, or None (no Slurm, or not up)."""
        try:
            return self.client.containers.get(self.names.head) if self.slurm else None
        except NotFound:
            return None

    def scheduler_nodes(self) -> list[view.Node]:
        head = self.head()
        if head is None or head.status != "running":
            return []
        done = head.exec_run(["scontrol", "show", "node", "-o"])
        return view.nodes(done.output.decode(errors="replace")) if done.exit_code == 0 else []

    def wait_registered(self, log, timeout: float = 90) -> list[view.Node]:
        """Until every node has registered with slurmctld and is idle (or the timeout: the nodes as they are)."""
        deadline = time.monotonic() + timeout
        log(f"waiting for {self.count} nodes to register with slurmctld")
        while True:
            found = self.scheduler_nodes()
            if sum(n.idle for n in found) >= self.count or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    def nodes(self) -> list:
        """The stack's node containers, node-0 first (not the head)."""
        found = self.client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={self.spec.stack}"})
        nodes = [c for c in found if NODE_LABEL in c.labels]
        return sorted(nodes, key=lambda c: int(c.labels[NODE_LABEL]))

    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes()]

    def sync_code(self, folder: Path) -> None:
        """Copy a folder to /data/code on the data volume, where every node sees it."""
        nodes = self.nodes()
        if not nodes:
            raise ConfigError([Problem(f"stack {self.spec.stack}", "no nodes: run goldenenv up first")])
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in sorted(folder.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    info = tar.gettarinfo(str(path), arcname=str(Path(CODE_FOLDER) / path.relative_to(folder)))
                    info.uid = info.gid = 1000
                    with path.open("rb") as f:
                        tar.addfile(info, f)
        nodes[0].put_archive(DATA, buffer.getvalue())

    def run(self, command: list[str], on_line: Line, user: str) -> RunResult:
        """`docker exec` of torchrun on every node container, all started at once (clouds/local/run.py)."""
        nodes = self.nodes()
        if not nodes or any(n.status != "running" for n in nodes):
            raise ConfigError([Problem(f"stack {self.spec.stack}", "not every node is running: goldenenv up first")])
        return run_on_nodes(self.client, nodes, self.outputs()["nodePrivateIps"], self.shape.processes_per_node,
                            command, self.env(), on_line, user=user)

    def read_shared(self, path: str) -> str | None:
        done = self.nodes()[0].exec_run(["cat", path])
        return done.output.decode() if done.exit_code == 0 else None

    def kill_node(self, name: str) -> None:
        """`docker kill`: the container's processes get SIGKILL; the recovery container (Slurm stacks) starts it
        again after RECOVERY_DELAY_S."""
        self.client.containers.get(name).kill()

    def start_node(self, name: str) -> None:
        self.client.containers.get(name).start()

    @contextmanager
    def staged_files(self, name: str, folder: str, files: dict[str, bytes]) -> Iterator[None]:
        """The folder is saved first; after, what the files added is removed and the saved folder put back."""
        node = self.client.containers.get(name)
        kept = node.get_archive(folder)[0]
        try:
            put_files(node, folder, files)
            yield
        finally:
            added = sorted({Path(path).parts[0] for path in files})
            node.exec_run(["rm", "-rf", *(f"{folder}/{top}" for top in added)], user="root")
            node.put_archive(str(Path(folder).parent), b"".join(kept))

    def kill_processes(self, name: str, pattern: str) -> None:
        self.client.containers.get(name).exec_run(["pkill", "-9", "-f", pattern], user="root")

    def outputs(self) -> dict:
        ips = []
        for container in self.nodes():
            container.reload()
            ips.append(container.attrs["NetworkSettings"]["Networks"][self.names.network]["IPAddress"])
        slots = [self.shape.processes_per_node] * len(ips)
        outputs = {
            "nodes": [c.name for c in self.nodes()],
            "nodePrivateIps": ips,
            "hostfile": hostfile(ips, slots),
            "launchEnv": launch_env(ips, slots),
            "storage": {"volume": self.names.volume, "mount": DATA},
            "scheduler": self.spec.scheduler,
        }
        if self.slurm:
            outputs["head"] = self.names.head
        return outputs

    def export_accounting(self, log=print) -> bool:
        """The accounting history to the data volume (ACCOUNTING_EXPORT), from the running head; False when there
        is no head running to export it (nothing to lose: a stack never up, or already destroyed)."""
        head = self.head()
        if head is None or head.status != "running":
            return False
        where = headhistory.export_path(self.spec)
        done = head.exec_run(headhistory.export_command(self.spec), user="root")
        if done.exit_code:
            raise AccountingExportError(
                f"could not export the accounting history of {self.spec.stack} to {where}: "
                f"{done.output.decode(errors='replace').strip()[-400:]}")
        log(f"exported the accounting history to {where} (the data volume; the next up restores it)")
        return True

    def destroy(self, purge_data: bool = False, log=print, drop_accounting: bool = False) -> list[str]:
        """Remove nodes and network (and the data volume only when asked); safe to repeat. The accounting history
        is exported to the data volume first; a failed export stops the destroy unless `drop_accounting`."""
        if self.slurm and not drop_accounting:
            self.export_accounting(log)
        removed = []
        for container in self.client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={self.spec.stack}"}):
            container.remove(force=True)
            removed.append(container.name)
        for network in self.client.networks.list(names=[self.names.network]):
            if network.name == self.names.network:
                network.remove()
                removed.append(network.name)
        doomed = [self.names.munge, self.names.slurm_state, self.names.accounting]
        doomed += [self.names.volume] if purge_data else []
        for volume in doomed:  # key, queue and database go with the cluster (the history exported); data when asked
            try:
                self.client.volumes.get(volume).remove(force=True)
                removed.append(volume)
            except NotFound:
                pass
        if self.state_file.exists():
            self.state_file.unlink()
        for name in removed:
            log(f"removed {name}")
        return removed

    def data_kept(self) -> bool:
        try:
            self.client.volumes.get(self.names.volume)
            return True
        except NotFound:
            return False


def put_files(container, folder: str, files: dict[str, bytes]) -> None:
    """Files (paths relative to `folder`) into a running container, readable by every user there (a job's user
    reads a node's health files)."""
    container.put_archive(folder, _archive(files))
    container.exec_run(["chmod", "-R", "a+rX", folder], user="root")


def _archive(files: dict[str, bytes], uid: int = 0) -> bytes:
    """A tar of files (paths relative to /, or to where put_archive puts them), for put_archive into a container."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
