"""What a node needs at boot and what a launcher needs afterwards, the same on every cloud.

NodeBoot decides which units a node runs on every boot (RAID local NVMe, mount the parallel file
system, re-create the golden container) and renders them, their scripts and the launch environment
through the templates; cloud-init writes them and enables the units once, systemd runs them on every
boot after that, so a node that was stopped and started comes back whole. launch_outputs turns node
addresses into the hostfile and torchrun environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from goldenenv import catalog, compat, fabrics
from goldenenv.render import render
from goldenenv.spec import ClusterSpec

ENV_FILE = "/etc/goldenenv/launch.env"
STEP_DIR = "/usr/local/lib/goldenenv"
"""What cloud-init runs once (runcmd): enabling the units."""
SCRIPT_DIR = "/usr/local/libexec/goldenenv"
"""What the units run on every boot."""
UNIT_DIR = "/etc/systemd/system"
SCRATCH_UNIT = "goldenenv-scratch.service"
CONTAINER_UNIT = "goldenenv-container.service"
MASTER_PORT = 29500
READY_DIR = "/run/goldenenv"
"""Where each boot unit marks itself done; /run is emptied on every boot, so a marker never outlives it."""
CODE_FOLDER = "code"
"""The folder on the shared file system `goldenenv run --code` copies code to."""


def ready_marker(unit: str) -> str:
    """The file a boot unit writes when its step is done; the golden container starts only when all are there."""
    return f"{READY_DIR}/{unit.removesuffix('.service')}.ready"


@dataclass(frozen=True)
class SharedFs:
    """How a node mounts the stack's shared file system on every boot: a cloud's mount adapter fills it in.

    The unit runs templates/node/<script>.j2 (with mount_point, directories and `values`) from the unit
    templates/node/<unit>.j2; the golden container starts after it.
    """

    unit: str
    """systemd unit name, e.g. goldenenv-fsx.service"""
    script: str
    """the mount script's template name under templates/node/ (without .j2), e.g. fsx-mount.sh"""
    values: dict[str, Any]
    """what the script needs besides mount_point and directories (e.g. source_path)"""


@dataclass(frozen=True)
class HostStore:
    """A host image's own service that claims the instance-store disks at boot, and where it mounts them."""

    unit: str
    mount: str


@dataclass(frozen=True)
class BootFile:
    path: str
    mode: str
    content: str


@dataclass(frozen=True)
class BootUnit:
    """A systemd unit and the script it runs on every boot."""

    name: str
    script: BootFile
    unit: BootFile


@dataclass(frozen=True)
class NodeBoot:
    spec: ClusterSpec
    pool: str
    fabric: str
    """efa | erdma | none"""
    local_nvme: bool
    image_ref: str | None = None
    """The exact reference nodes pull, repository@sha256:<64 hex>; None: no golden container."""
    registry_login: str | None = None
    """How the node logs in to the cloud's registry before the pull: templates/node/registry-login-<name>.sh.j2
    (ecr, acr); None: an anonymous pull."""

    def env(self) -> dict[str, str]:
        """Fabric settings from the catalog, and where the storage tiers are on this node."""
        storage = self.spec.storage
        env = {"GOLDENENV_STACK": self.spec.stack, "GOLDENENV_POOL": self.pool}
        fabric = fabrics.get(self.fabric)
        if fabric:
            env.update(fabric.env())
            mtu = self._mtu(fabric)
            if mtu and mtu.nccl_proto:
                env["NCCL_PROTO"] = mtu.nccl_proto
        if storage.parallel_fs.enabled:
            env["GOLDENENV_DATASETS"] = self._fs_path(storage.parallel_fs.dataset_prefix)
            env["GOLDENENV_CHECKPOINTS"] = self._fs_path(storage.parallel_fs.checkpoint_prefix)
        env["GOLDENENV_SCRATCH"] = storage.local_nvme.mount_point
        return env

    def _fs_path(self, prefix: str) -> str:
        return f"{self.spec.storage.parallel_fs.mount_point}/{prefix.strip('/')}"

    def units(self, shared_fs: SharedFs | None) -> list[BootUnit]:
        """The units a node runs on every boot, storage first: a stop/start wipes instance store and unmounts all.

        Scratch is always a unit: the host image's own instance-store volume reused (the DLAMI's), the bare disks
        striped, or a folder on the root volume; each way the image user owns it, so the golden container never
        gets a bind source Docker made as root. Where the fabric has a boot check (eRDMA: driver, devices, MTU), it
        runs before the golden container. The container waits for every one of them (their ready markers), so it
        never runs without its mounts; each of these units retries until it succeeds."""
        storage = self.spec.storage
        scratch = storage.local_nvme.mount_point
        owner = image_uid()
        units = []
        host_store = self.host_store()
        if self.local_nvme and host_store:
            units.append(self._unit(SCRATCH_UNIT, "scratch-host-volume.sh", {
                "mount_point": scratch, "owner": owner, "source": host_store.mount, "service": host_store.unit,
            }, after=[host_store.unit]))
        elif self.local_nvme and storage.local_nvme.raid0:
            units.append(self._unit(SCRATCH_UNIT, "nvme-raid0.sh", {"mount_point": scratch, "owner": owner}))
        else:
            units.append(self._unit(SCRATCH_UNIT, "scratch-root.sh", {"mount_point": scratch, "owner": owner}))
        if storage.parallel_fs.enabled and shared_fs:
            fs = storage.parallel_fs
            units.append(self._unit(shared_fs.unit, shared_fs.script, {
                "mount_point": fs.mount_point, "owner": owner, **shared_fs.values,
                "directories": [self._fs_path(fs.dataset_prefix), self._fs_path(fs.checkpoint_prefix),
                                self._fs_path(CODE_FOLDER)],
            }))
        fabric = fabrics.get(self.fabric)
        if fabric and fabric.boot_check:
            unit, script = fabric.boot_check
            mtu = self._mtu(fabric)
            if mtu is None:
                raise KeyError(f"catalog fabric_mtu.csv has no {fabric.name} row: the interfaces' MTU is unknown")
            units.append(self._unit(unit, script, {
                "mtu": mtu.mtu, "interfaces": self._instance_type().rdma_interfaces,
            }))
        if self.image_ref:
            mounts = [scratch]
            if storage.parallel_fs.enabled:
                mounts.append(storage.parallel_fs.mount_point)
            before = [u.name for u in units]
            units.append(self._unit(CONTAINER_UNIT, "golden-image.sh", {
                "image_ref": self.image_ref, "env_file": ENV_FILE, "mounts": mounts,
                "registry_login": self.registry_login, "wait_for": [(u, ready_marker(u)) for u in before],
            }, storage_units=before))
        return units

    def host_store(self) -> HostStore | None:
        """The host image's own instance-store volume (catalog host_images: the DLAMI's dlami-nvme.service at
        /opt/dlami/nvme), or None: a bare host, or an image the stack brings itself ({id, driver})."""
        image = compat.node_host(self.spec.cloud, self.spec.region, self._pool().host_image).image
        if image is None or not image.instance_store_unit:
            return None
        return HostStore(image.instance_store_unit, image.instance_store_mount)

    def _pool(self):
        return next(p for p in self.spec.nodes if p.name == self.pool)

    def _instance_type(self) -> catalog.InstanceType:
        return catalog.instance_type(self.spec.cloud, self._pool().instance_type)

    def _mtu(self, fabric: fabrics.Fabric) -> catalog.FabricMtu | None:
        """The fabric interfaces' MTU for this pool's type (eRDMA: 8500 with jumbo frames, else 1400)."""
        return fabric.mtu(self.spec.cloud, self._instance_type().name)

    @staticmethod
    def _unit(name: str, script: str, values: dict[str, Any], after: list[str] | None = None,
              **unit_values: Any) -> BootUnit:
        path = f"{SCRIPT_DIR}/{script}"
        return BootUnit(
            name=name,
            script=BootFile(path, "0755", render(f"node/{script}.j2", ready=ready_marker(name), **values)),
            unit=BootFile(f"{UNIT_DIR}/{name}", "0644", render(
                f"node/{name}.j2", script=path, container_unit=CONTAINER_UNIT, after=after or [], **unit_values,
            )),
        )

    def files(self, shared_fs: SharedFs | None = None) -> list[BootFile]:
        """The launch environment, each unit with its script, and the one step cloud-init runs: enable them."""
        units = self.units(shared_fs)
        files = [BootFile(ENV_FILE, "0644", render("node/launch.env.j2", stack=self.spec.stack, env=self.env()))]
        for unit in units:
            files += [unit.script, unit.unit]
        if units:
            files.append(BootFile(f"{STEP_DIR}/enable-units.sh", "0755",
                                  render("node/enable-units.sh.j2", units=[u.name for u in units])))
        return files

    def cloud_config(self, shared_fs: SharedFs | None = None) -> str:
        files = self.files(shared_fs)
        steps = [f.path for f in files if f.path.startswith(f"{STEP_DIR}/")]
        return render("node/cloud-config.yaml.j2", stack=self.spec.stack, pool=self.pool,
                      files=files, commands=steps)


def image_uid() -> int:
    """The golden image's unprivileged user: it owns the shared folders it writes checkpoints and code to."""
    from goldenenv.images.dockerfile import UID

    return UID


def hostfile(ips: list[str], slots: list[int]) -> str:
    """DeepSpeed / MPI hostfile: one line per node, slots = its GPUs."""
    return "".join(f"{ip} slots={n}\n" for ip, n in zip(ips, slots, strict=True))


def launch_env(ips: list[str], slots: list[int]) -> dict[str, str]:
    """torchrun's rendezvous environment; the first node is the master."""
    return {
        "MASTER_ADDR": ips[0],
        "MASTER_PORT": str(MASTER_PORT),
        "NNODES": str(len(ips)),
        "NPROC_PER_NODE": str(slots[0]),
    }


def launch_outputs(ips: pulumi.Output[list[str]], slots: list[int]) -> dict[str, Any]:
    return {
        "nodePrivateIps": ips,
        "hostfile": ips.apply(lambda v: hostfile(v, slots)),
        "launchEnv": ips.apply(lambda v: launch_env(v, slots)),
    }
