"""Provision the local cluster with the Docker SDK: network, data volume, node containers.

Everything carries the label `goldenenv.stack=<stack>` (the local form of the cloud's stack tag),
so `destroy` finds what belongs to a stack even after a half-finished `up`. The data volume holds
datasets/ and checkpoints/ and outlives `destroy` unless the data is purged by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import NotFound

from goldenenv import catalog
from goldenenv.nodeboot import hostfile, launch_env
from goldenenv.spec import ClusterSpec

STACK_LABEL = "goldenenv.stack"
NODE_LABEL = "goldenenv.node"
DATA = "/data"


@dataclass(frozen=True)
class Names:
    stack: str

    @property
    def network(self) -> str:
        return f"goldenenv-{self.stack}"

    @property
    def volume(self) -> str:
        return f"goldenenv-{self.stack}-data"

    def node(self, index: int) -> str:
        return f"goldenenv-{self.stack}-node-{index}"

    @staticmethod
    def hostname(index: int) -> str:
        return f"node-{index}"


class LocalCluster:
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

    def env(self) -> dict[str, str]:
        """What every process on a node sees: the storage tier's paths and the stack."""
        return {
            "GOLDENENV_STACK": self.spec.stack,
            "GOLDENENV_DATASETS": f"{DATA}/datasets",
            "GOLDENENV_CHECKPOINTS": f"{DATA}/checkpoints",
        }

    def up(self, image: str, log=print) -> dict:
        """Create what is missing, start what is stopped; the same call finishes a half-created stack."""
        network = self._network()
        self._volume(image)
        for i in range(self.count):
            self._node(i, image, network, log)
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
        try:
            self.client.volumes.get(self.names.volume)
            return
        except NotFound:
            pass
        self.client.volumes.create(self.names.volume, labels=self.labels)
        # lay out the storage tier, owned by the image's non-root user
        self.client.containers.run(
            image, ["sh", "-c", f"mkdir -p {DATA}/datasets {DATA}/checkpoints && chown -R 1000:1000 {DATA}"],
            user="root", remove=True, network_mode="none", volumes={self.names.volume: {"bind": DATA, "mode": "rw"}},
        )

    def _node(self, index: int, image: str, network, log) -> None:
        name = self.names.node(index)
        try:
            container = self.client.containers.get(name)
            if container.status != "running":
                log(f"starting {name}")
                container.start()
            return
        except NotFound:
            pass
        log(f"creating {name} from {image}")
        self.client.containers.run(
            image, ["sleep", "infinity"], name=name, hostname=self.names.hostname(index), detach=True,
            network=network.name, labels={**self.labels, NODE_LABEL: str(index)},
            environment=self.env(), volumes={self.names.volume: {"bind": DATA, "mode": "rw"}},
            nano_cpus=int(self.shape.cpus * 1e9), mem_limit=f"{int(self.shape.memory_gib * 1024)}m",
            shm_size="1g", init=True,
        )

    def nodes(self) -> list:
        """The stack's node containers, node-0 first."""
        found = self.client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={self.spec.stack}"})
        nodes = [c for c in found if NODE_LABEL in c.labels]
        return sorted(nodes, key=lambda c: int(c.labels[NODE_LABEL]))

    def outputs(self) -> dict:
        ips = []
        for container in self.nodes():
            container.reload()
            ips.append(container.attrs["NetworkSettings"]["Networks"][self.names.network]["IPAddress"])
        slots = [self.shape.processes_per_node] * len(ips)
        return {
            "nodes": [c.name for c in self.nodes()],
            "nodePrivateIps": ips,
            "hostfile": hostfile(ips, slots),
            "launchEnv": launch_env(ips, slots),
            "storage": {"volume": self.names.volume, "mount": DATA},
        }

    def destroy(self, purge_data: bool = False, log=print) -> list[str]:
        """Remove nodes and network (and the data volume only when asked); safe to repeat."""
        removed = []
        for container in self.client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={self.spec.stack}"}):
            container.remove(force=True)
            removed.append(container.name)
        for network in self.client.networks.list(names=[self.names.network]):
            if network.name == self.names.network:
                network.remove()
                removed.append(network.name)
        if purge_data:
            try:
                self.client.volumes.get(self.names.volume).remove(force=True)
                removed.append(self.names.volume)
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
