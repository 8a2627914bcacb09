"""What a node needs at boot and what a launcher needs afterwards, the same on every cloud.

NodeBoot decides which units a node runs on every boot (RAID local NVMe, mount the parallel file
system, re-create the golden container) and renders them, their scripts and the launch environment
through the templates; cloud-init writes them and enables the units once, systemd runs them on every
boot after that, so a node that was stopped and started comes back whole. launch_outputs turns node
addresses into the hostfile and torchrun environment.

With the stack's scheduler (Slurm), a node's golden container runs slurmd instead of sleeping, and the stack's
head (HeadBoot) boots the same way: cloud-init delivers slurm.conf and the units, a munge unit fetches the stack's
munge key from the cloud's secret store (the head writes it there once), and the golden container, pulled by the
same digest, runs slurmctld. No key is ever in user data: each host fetches it with its own instance role.
"""

from __future__ import annotations

import base64
import gzip
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi

from goldenenv import accelerators, catalog, compat, fabrics, slurm
from goldenenv.catalog import health
from goldenenv.health import judge
from goldenenv.images import host, hostinstall
from goldenenv.render import render
from goldenenv.spec import ClusterSpec

ENV_FILE = "/etc/goldenenv/launch.env"
"""The node's launch environment as cloud-init writes it; the golden container's environment file is bound at this
path inside it too, so a Slurm job's tasks read the node's environment (templates/slurm/job.sbatch.j2)."""
CONTAINER_ENV = "/run/goldenenv/container.env"
"""The golden container's environment on a node whose fabric has env files: what they set (evaluated in the image
on every boot), then the launch environment over it."""
STEP_DIR = "/usr/local/lib/goldenenv"
"""What cloud-init runs once (runcmd): enabling the units."""
SCRIPT_DIR = "/usr/local/libexec/goldenenv"
"""What the units run on every boot."""
UNIT_DIR = "/etc/systemd/system"
SCRATCH_UNIT = "goldenenv-scratch.service"
DISK_BY_ID = "/dev/disk/by-id"
"""Where udev links each disk by its identity (the cloud's names for local NVMe among them)."""
CONTAINER_UNIT = "goldenenv-container.service"
HOST_LAYER_UNIT = "goldenenv-host-layer.service"
"""Installs the host layer the host image lacks (goldenenv.images.hostinstall), before docker and every other unit."""
HEALTH_EVIDENCE_UNIT = "goldenenv-health-evidence.service"
HOST_HEALTH_DIR = "/run/goldenenv/health"
"""Where the host writes its part of the health evidence (kernel XIDs, fabric manager); the golden container sees
it read-only at health judge's HOST_EVIDENCE_DIR."""
MASTER_PORT = 29500
READY_DIR = "/run/goldenenv"
"""Where each boot unit marks itself done; /run is emptied on every boot, so a marker never outlives it."""
CODE_FOLDER = "code"
"""The folder on the shared file system `goldenenv run --code` copies code to."""
MUNGE_UNIT = "goldenenv-munge.service"
MUNGE_KEY_FILE = "/etc/goldenenv/munge/munge.key"
"""Where a host keeps the stack's munge key (root, 0400), fetched from the cloud's secret store on every boot; the
golden container reads it at slurm.MUNGE_KEY_MOUNT."""
SLURM_CONF = f"{slurm.CONF_MOUNT}/slurm.conf"
"""The head's slurm.conf on the host, where cloud-init writes it; bound read-only into the container at the same
folder."""
HEAD_STATE_ON_ROOT = "/var/lib/goldenenv/slurm/state"
"""slurmctld's state on the head's root volume, when the stack has no shared file system."""
HEAD_STATE_ON_FS = "slurm/state"
"""slurmctld's state on the shared file system (under its mount point): the queue outlives the head."""
HEAD_DB_ON_ROOT = "/var/lib/goldenenv/slurm/db"
"""The accounting database's folder (the head container's MariaDB) on the head's root volume, when the stack has no
shared file system: beside slurmctld's state, not inside it."""
HEAD_DB_ON_FS = "slurm/db"
"""The accounting database's folder on the shared file system (under its mount point), beside slurmctld's state:
the history outlives a replaced head, as the queue does."""


def head_state_dir(spec: ClusterSpec) -> str:
    """Where slurmctld keeps its state on the head host: the shared file system when there is one, so the queue
    outlives a replaced head, else the head's root volume."""
    fs = spec.storage.parallel_fs
    return f"{fs.mount_point}/{HEAD_STATE_ON_FS}" if fs.enabled else HEAD_STATE_ON_ROOT


def head_db_dir(spec: ClusterSpec) -> str:
    """Where the head's MariaDB keeps slurmdbd's accounting database on the host: wherever slurmctld's state lives
    (head_state_dir), in a folder of its own beside it."""
    fs = spec.storage.parallel_fs
    return f"{fs.mount_point}/{HEAD_DB_ON_FS}" if fs.enabled else HEAD_DB_ON_ROOT


def jobs_folder(spec: ClusterSpec, shared: str | None = None) -> str:
    """Where a stack's jobs keep their scripts and output (and the head its exported accounting history): under the
    cloud's own shared folder where it has one (`shared`, Cloud.shared_folder: the local stack's /data), else the
    parallel file system's jobs folder, else each host's local scratch."""
    if shared:
        return f"{shared}/{slurm.JOBS_FOLDER}"
    storage = spec.storage
    if storage.parallel_fs.enabled:
        return f"{storage.parallel_fs.mount_point}/{slurm.JOBS_FOLDER}"
    return f"{storage.local_nvme.mount_point}/{slurm.JOBS_FOLDER}"


def ready_marker(unit: str) -> str:
    """The file a boot unit writes when its step is done; the golden container starts only when all are there."""
    return f"{READY_DIR}/{unit.removesuffix('.service')}.ready"


SEED_UNIT = "goldenenv-sharedfs-seed.service"
"""The head's one-shot that fills the shared file system from the bucket (SharedFs.seed)."""


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
    seed: tuple[str, dict[str, Any]] | None = None
    """A one-shot the head runs once the file system is mounted, to fill it from the bucket where the service keeps
    no standing link (Managed Lustre's import): a script template under templates/node/ (without .j2) and its
    values. The golden container does not wait for it; None: the file system needs no seeding."""


@dataclass(frozen=True)
class MungeKey:
    """How a host gets the stack's munge key from the cloud's secret store: a cloud's adapter fills it in.

    The unit runs templates/node/<script>.j2 with `key_file`, `create` (the head: write a new key when the store
    holds none yet) and `values` (which secret, where); every other host retries until the head has written it.
    """

    script: str
    """the script's template name under templates/node/ (without .j2), e.g. munge-key-aws.sh"""
    values: dict[str, Any]
    """what the script needs to find the secret (its id, the region, the API endpoint)"""


@dataclass(frozen=True)
class SlurmNode:
    """A node's part in the stack's Slurm cluster: slurmd registers with the head at `head_address`."""

    head_address: str
    munge: MungeKey


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
    encoding: str = ""
    """How cloud-init decodes `content` (gz+b64: gzipped, then base64); '' for plain text."""


@dataclass(frozen=True)
class BootUnit:
    """A systemd unit and the script it runs on every boot."""

    name: str
    script: BootFile
    unit: BootFile
    timer: BootFile | None = None
    """A systemd timer that runs the unit again on a schedule (after its run at boot)."""


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
    """How the node logs in to the cloud's registry before the pull: node/registry-login-<name>.sh.j2 in the
    cloud's templates/ folder (ecr, acr); None: an anonymous pull."""
    slurm: SlurmNode | None = None
    """The stack's scheduler: the golden container runs slurmd (as root, with the munge key) instead of sleeping;
    None: no scheduler (goldenenv:scheduler none), the container sleeps and `goldenenv run` reaches it over ssh."""

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
        runs before the golden container; the host files the fabric's NCCL setup lives in (Fabric.host_mounts) are
        bound into it read-only. A fabric's sidecars (A3 Mega's RxDM) each run in a unit after its check and before
        the container. With the scheduler, the munge key is fetched before it too. The container
        waits for every one of them (their ready markers), so it never runs without its mounts or its key; each of
        these units retries until it succeeds. Where the host image lacks part of the host layer (host.layer), its
        install step comes first, before docker and every other unit."""
        storage = self.spec.storage
        scratch = storage.local_nvme.mount_point
        owner = image_uid()
        layer = host.layer(self.spec, self._pool())
        units = [host_layer_unit(layer, [])] if layer.installs else []
        host_store = self.host_store()
        if self.local_nvme and host_store:
            units.append(boot_unit(SCRATCH_UNIT, "scratch-host-volume.sh", {
                "mount_point": scratch, "owner": owner, "source": host_store.mount, "service": host_store.unit,
            }, after=[host_store.unit]))
        elif self.local_nvme and storage.local_nvme.raid0 and (disks := local_disks(self.spec.cloud,
                                                                                 self._pool().instance_type)):
            units.append(boot_unit(SCRATCH_UNIT, "nvme-raid0.sh", {"mount_point": scratch, "owner": owner, **disks}))
        else:
            units.append(boot_unit(SCRATCH_UNIT, "scratch-root.sh", {"mount_point": scratch, "owner": owner}))
        if storage.parallel_fs.enabled and shared_fs:
            units.append(shared_fs_unit(self.spec, shared_fs, scheduler=self.slurm is not None))
        fabric = fabrics.get(self.fabric)
        if fabric and fabric.boot_check:
            unit, script = fabric.boot_check
            mtu = self._mtu(fabric)
            if mtu is None:
                raise KeyError(f"catalog fabric_mtu.csv has no {fabric.name} row: the interfaces' MTU is unknown")
            units.append(boot_unit(unit, script, {
                "mtu": mtu.mtu, "interfaces": self._instance_type().rdma_interfaces,
                "host_mounts": list(fabric.host_mounts), **fabric_host_values(fabric),
            }))
        elif fabric and (fabric.kernel_modules or fabric.devices or fabric.device_dirs):
            raise ValueError(f"fabric {fabric.name} declares kernel modules or devices but no boot check proves them")
        if fabric and fabric.sidecars:
            units += sidecar_units(fabric, self.fabric_section(), [fabric.boot_check[0]] if fabric.boot_check else [])
        if self.slurm:
            units.append(munge_unit(self.slurm.munge, create=False))
        expect = health.pool_expectations(self.spec.cloud, self._pool().instance_type, self._pool().rdma)
        if expect["gpus"]:
            units.append(health_evidence_unit(expect["nvswitch"]))
        if self.image_ref:
            mounts = [scratch]
            if storage.parallel_fs.enabled:
                mounts.append(storage.parallel_fs.mount_point)
            volumes = [f"{path}:{path}" for path in mounts]
            volumes += [f"{path}:{path}:ro" for path in (fabric.host_mounts if fabric else ())]
            family = accelerators.of_device(self._instance_type().gpu.name)
            volumes += [f"{path}:{path}:ro" for path in (family.host_mounts if family else ())]
            if expect["gpus"]:
                volumes.append(f"{HOST_HEALTH_DIR}:{judge.HOST_EVIDENCE_DIR}:ro")
            run: dict[str, Any] = {"gpus": True, "user": None, "hosts": [], "command": ["sleep", "infinity"]}
            if self.slurm:
                volumes.append(f"{MUNGE_KEY_FILE}:{slurm.MUNGE_KEY_MOUNT}:ro")
                run = {"gpus": True, "user": "root", "hosts": [f"{slurm.HEAD_HOSTNAME}:{self.slurm.head_address}"],
                       "command": slurm.node_command(self.slurm.head_address, self._instance_type().gpu_count,
                                                     [self.pool], self._spot_cloud(), expect,
                                                     (family.gres, family.gres_devices) if family
                                                     else slurm.DEFAULT_GRES)}
            units.append(container_unit(units, self.image_ref, self.registry_login, volumes, **run,
                                        fabric=fabric, accelerator=family))
        return host_layer_first(units, layer)

    def fabric_section(self) -> Any:
        """The lock's section for this node's fabric (it pins the fabric's sidecars); compat refuses a lock whose
        fabric is not the pool's at plan, so a missing section here is the program's error."""
        from goldenenv.images.lock import load

        fabric = fabrics.get(self.fabric)
        section = getattr(load(self.spec.image.lock), fabric.lock_section, None) if fabric else None
        if fabric and section is None:
            raise ValueError(f"lock {self.spec.image.lock} has no {fabric.lock_section} section, which the "
                             f"{fabric.label} nodes of pool {self.pool} need")
        return section

    def host_store(self) -> HostStore | None:
        """The host image's own instance-store volume (catalog host_images: the DLAMI's dlami-nvme.service at
        /opt/dlami/nvme), or None: a bare host, or an image the stack brings itself ({id, driver})."""
        image = compat.node_host(self.spec.cloud, self.spec.region, self._pool().host_image).image
        if image is None or not image.instance_store_unit:
            return None
        return HostStore(image.instance_store_unit, image.instance_store_mount)

    def _spot_cloud(self) -> str | None:
        """Whose spot notices this pool's nodes watch, or None (on-demand)."""
        return self.spec.cloud if self._pool().capacity.value == "spot" else None

    def _pool(self):
        return next(p for p in self.spec.nodes if p.name == self.pool)

    def _instance_type(self) -> catalog.InstanceType:
        return catalog.instance_type(self.spec.cloud, self._pool().instance_type)

    def _mtu(self, fabric: fabrics.Fabric) -> catalog.FabricMtu | None:
        """The fabric interfaces' MTU for this pool's type (eRDMA: 8500 with jumbo frames, else 1400)."""
        return fabric.mtu(self.spec.cloud, self._instance_type().name)

    def files(self, shared_fs: SharedFs | None = None) -> list[BootFile]:
        """The launch environment, each unit with its script, and the one step cloud-init runs: enable them."""
        return boot_files(self.spec, self.env(), self.units(shared_fs))

    def cloud_config(self, shared_fs: SharedFs | None = None) -> str:
        return user_data(self.spec, self.pool, self.files(shared_fs))


@dataclass(frozen=True)
class HeadBoot:
    """The stack's Slurm head: the same boot machinery as a node, on a CPU host.

    Units: the munge key (the head writes it to the secret store when the store holds none yet), the shared file
    system when the stack has one (job output lives there, and slurmctld's state), and the golden container,
    pulled by the same digest as the nodes, running MariaDB, slurmdbd and slurmctld as root without GPUs, with
    slurm.conf (written by cloud-init) and the munge key bound read-only, its state folder bound at slurm.STATE_DIR
    and the database's folder beside it at slurm.DB_DIR; the jobs folder (GOLDENENV_JOBS) is where the history is
    exported to at destroy and restored from at the next up.
    """

    spec: ClusterSpec
    image_ref: str | None
    """The exact reference the nodes pull, repository@sha256:<64 hex>; None: no golden container (no pushed image
    yet, which `up` refuses)."""
    munge: MungeKey
    slurm_conf: str
    """slurm.conf as goldenenv rendered it (goldenenv.slurm.config), delivered as it is."""
    registry_login: str | None = None

    def state_dir(self) -> str:
        """Where slurmctld keeps its state on the host (head_state_dir)."""
        return head_state_dir(self.spec)

    def db_dir(self) -> str:
        """Where the accounting database lives on the host (head_db_dir): bound at slurm.DB_DIR in the container."""
        return head_db_dir(self.spec)

    def env(self) -> dict[str, str]:
        env = {"GOLDENENV_STACK": self.spec.stack, "GOLDENENV_ROLE": slurm.HEAD_HOSTNAME}
        fs = self.spec.storage.parallel_fs
        if fs.enabled:
            env["GOLDENENV_DATASETS"] = f"{fs.mount_point}/{fs.dataset_prefix.strip('/')}"
            env["GOLDENENV_CHECKPOINTS"] = f"{fs.mount_point}/{fs.checkpoint_prefix.strip('/')}"
        env["GOLDENENV_JOBS"] = jobs_folder(self.spec)
        return env

    def units(self, shared_fs: SharedFs | None) -> list[BootUnit]:
        fs = self.spec.storage.parallel_fs
        layer = host.head_layer(self.spec)
        units = [host_layer_unit(layer, [])] if layer.installs else []
        units.append(munge_unit(self.munge, create=True))
        volumes = []
        if fs.enabled and shared_fs:
            units.append(shared_fs_unit(self.spec, shared_fs, scheduler=True, head=True))
        if fs.enabled:
            volumes.append(f"{fs.mount_point}:{fs.mount_point}")
        volumes += [f"{MUNGE_KEY_FILE}:{slurm.MUNGE_KEY_MOUNT}:ro", f"{slurm.CONF_MOUNT}:{slurm.CONF_MOUNT}:ro",
                    f"{self.state_dir()}:{slurm.STATE_DIR}", f"{self.db_dir()}:{slurm.DB_DIR}"]
        if self.image_ref:
            units.append(container_unit(units, self.image_ref, self.registry_login, volumes, gpus=False,
                                        user="root", hosts=[], command=slurm.head_command(db_dir=slurm.DB_DIR),
                                        folders=[self.state_dir(), self.db_dir()]))
        if fs.enabled and shared_fs and shared_fs.seed:
            script, values = shared_fs.seed
            units.append(boot_unit(SEED_UNIT, script, values, after=[shared_fs.unit]))
        return host_layer_first(units, layer)

    def files(self, shared_fs: SharedFs | None = None) -> list[BootFile]:
        return [compressed(SLURM_CONF, "0644", self.slurm_conf),
                *boot_files(self.spec, self.env(), self.units(shared_fs))]

    def cloud_config(self, shared_fs: SharedFs | None = None) -> str:
        return user_data(self.spec, slurm.HEAD_HOSTNAME, self.files(shared_fs), hostname=slurm.HEAD_HOSTNAME)


def slurm_conf(spec: ClusterSpec, slurmd_timeout: int) -> str:
    """The head's slurm.conf as goldenenv.slurm.config renders it, with slurmctld's state at slurm.STATE_DIR in the
    head's container (HeadBoot binds the host's state folder there)."""
    from goldenenv.slurm import config

    return config.render_conf(spec, slurmd_timeout, slurm.STATE_DIR)


def local_disks(cloud: str, instance_type: str) -> dict[str, str] | None:
    """What nvme-raid0.sh selects the local NVMe disks by, from the catalog (local_nvme_devices.csv): the model
    lsblk reports for them and their /dev/disk/by-id names, never an OS or data disk's; None where the catalog knows
    neither (scratch then stays on the root volume: a guess could stripe the OS disk)."""
    device = catalog.local_nvme_device(cloud, instance_type)
    if device is None or not device.known:
        return None
    return {"disk_model": device.lsblk_model, "disk_by_id": device.by_id_glob, "by_id_dir": DISK_BY_ID}


def boot_unit(name: str, script: str, values: dict[str, Any], after: list[str] | None = None,
              **unit_values: Any) -> BootUnit:
    """A unit and its script, rendered from templates/node/<name>.j2 and templates/node/<script>.j2."""
    path = f"{SCRIPT_DIR}/{script}"
    return BootUnit(
        name=name,
        script=BootFile(path, "0755", render(f"node/{script}.j2", ready=ready_marker(name), **values)),
        unit=BootFile(f"{UNIT_DIR}/{name}", "0644", render(
            f"node/{name}.j2", script=path, container_unit=CONTAINER_UNIT, after=after or [], **unit_values,
        )),
    )


def host_layer_unit(layer: host.HostLayer, before: list[str]) -> BootUnit:
    """The host layer's install step (the script `goldenenv host-image build` bakes with), run before docker and
    `before`; it leaves a ready marker the golden container waits for like any step's."""
    path = f"{SCRIPT_DIR}/host-layer.sh"
    script = hostinstall.install_script(layer, ready_marker(HOST_LAYER_UNIT))
    unit = render(f"node/{HOST_LAYER_UNIT}.j2", script=path, before=before, refused=hostinstall.REFUSED)
    return BootUnit(HOST_LAYER_UNIT, compressed(path, "0755", script),
                    compressed(f"{UNIT_DIR}/{HOST_LAYER_UNIT}", "0644", unit))


def compressed(path: str, mode: str, text: str) -> BootFile:
    """A file cloud-init writes decompressed (gz+b64): the host layer's script and unit, whose repositories, package
    lists and order would otherwise take a fifth of AWS's 16 KB of user data. No timestamp in it: the same script,
    the same user data."""
    return BootFile(path, mode, base64.b64encode(gzip.compress(text.encode(), 9, mtime=0)).decode(), "gz+b64")


def host_layer_first(units: list[BootUnit], layer: host.HostLayer) -> list[BootUnit]:
    """The units with the host layer's ordered before every other one (the fabric checks and the golden container
    need what it installs); unchanged when the host image carries the whole layer."""
    if not units or units[0].name != HOST_LAYER_UNIT:
        return units
    return [host_layer_unit(layer, [u.name for u in units[1:]]), *units[1:]]


def health_evidence_unit(nvswitch: bool) -> BootUnit:
    """The host's part of the health evidence, written at boot before the golden container starts and every minute
    after (a timer): the kernel log's XIDs, and the fabric manager's state on an NVSwitch board."""
    unit = boot_unit(HEALTH_EVIDENCE_UNIT, "host-evidence.sh", {"folder": HOST_HEALTH_DIR, "nvswitch": nvswitch})
    timer = HEALTH_EVIDENCE_UNIT.removesuffix(".service") + ".timer"
    return BootUnit(unit.name, unit.script, unit.unit, BootFile(f"{UNIT_DIR}/{timer}", "0644",
                                                               render(f"node/{timer}.j2")))


def shared_fs_unit(spec: ClusterSpec, shared_fs: SharedFs, scheduler: bool, head: bool = False) -> BootUnit:
    """The shared file system's mount, with the folders a host writes to made and owned by the image user: datasets,
    checkpoints and code; with the scheduler, the jobs' folder too, and on the head slurmctld's state folder."""
    fs = spec.storage.parallel_fs

    def under(folder: str) -> str:
        return f"{fs.mount_point}/{folder.strip('/')}"

    directories = [under(fs.dataset_prefix), under(fs.checkpoint_prefix), under(CODE_FOLDER)]
    if scheduler:
        directories.append(under(slurm.JOBS_FOLDER))
    if head:
        directories += [under(HEAD_STATE_ON_FS), under(HEAD_DB_ON_FS)]
    return boot_unit(shared_fs.unit, shared_fs.script, {
        "mount_point": fs.mount_point, "owner": image_uid(), **shared_fs.values, "directories": directories,
    })


def munge_unit(munge: MungeKey, create: bool) -> BootUnit:
    """The munge key from the cloud's secret store to MUNGE_KEY_FILE (root, 0400), before the golden container."""
    return boot_unit(MUNGE_UNIT, munge.script, {"key_file": MUNGE_KEY_FILE, "create": create, **munge.values})


def container_unit(steps: list[BootUnit], image_ref: str, registry_login: str | None, volumes: list[str], *,
                   gpus: bool, user: str | None, hosts: list[str], command: list[str],
                   folders: list[str] = (), fabric: fabrics.Fabric | None = None,
                   accelerator: accelerators.Accelerator | None = None) -> BootUnit:
    """The golden container, started once every step before it has left its ready marker, with what the node's
    fabric declares: its devices (`--device`), its device folders (bound read-write), its env files evaluated into
    the container's environment, and its sidecars, which the container is bound to (it stops when one stops). With
    `gpus`, the node's accelerator family gives it the devices: its container runtime's options (CUDA: --gpus all)
    and its device nodes, each pattern expanded on the node (Ascend: /dev/davinci0 ... and the manager devices)."""
    before = [u.name for u in steps]
    env_files = list(fabric.env_files) if fabric else []
    env_file = CONTAINER_ENV if env_files else ENV_FILE
    volumes = [*volumes, *(f"{path}:{path}" for path in (fabric.device_dirs if fabric else ())),
               f"{env_file}:{ENV_FILE}:ro"]
    return boot_unit(CONTAINER_UNIT, "golden-image.sh", {
        "image_ref": image_ref, "env_file": env_file, "launch_env": ENV_FILE, "volumes": volumes,
        "registry_login": registry_login, "wait_for": [(u, ready_marker(u)) for u in before],
        "runtime_options": list(accelerator.run_options) if gpus and accelerator else [],
        "device_globs": list(accelerator.devices) if gpus and accelerator else [],
        "user": user, "hosts": hosts, "command": command, "folders": list(folders),
        "devices": list(fabric.devices) if fabric else [], "env_files": [f.path for f in env_files],
        "evaluate": evaluate_env_files(env_files) if env_files else "",
    }, storage_units=before, binds_to=[sidecar_unit_name(s) for s in (fabric.sidecars if fabric else ())])


def fabric_host_values(fabric: fabrics.Fabric) -> dict[str, Any]:
    """What the fabric's boot check proves on the host: exactly the kernel modules, device nodes and device folders
    the fabric declares (templates/node/fabric-host.sh.j2)."""
    return {"kernel_modules": list(fabric.kernel_modules), "devices": list(fabric.devices),
            "device_dirs": list(fabric.device_dirs)}


def sidecar_unit_name(sidecar: fabrics.Sidecar) -> str:
    return f"goldenenv-{sidecar.name}.service"


def sidecar_units(fabric: fabrics.Fabric, section: Any, after: list[str]) -> list[BootUnit]:
    """One unit per sidecar the fabric declares: its container from the image the lock's section pins, started
    after the fabric's boot check and before the golden container, and restarted with it (PartOf)."""
    units = []
    for sidecar in fabric.sidecars:
        name = sidecar_unit_name(sidecar)
        image = sidecar.image(section)
        units.append(boot_unit(name, "sidecar.sh", {
            "name": f"goldenenv-{sidecar.name}", "label": sidecar.label, "image": image,
            "by_digest": "@sha256:" in image, "options": list(sidecar.options), "command": list(sidecar.command),
            "ready_line": sidecar.ready, "wait_for": [(u, ready_marker(u)) for u in after],
        }, after=after, label=sidecar.label, container=f"goldenenv-{sidecar.name}", ready=ready_marker(name)))
    return units


ENV_UNCHANGED = ("_", "SHLVL", "PWD", "OLDPWD")
"""Variables a shell sets itself, never part of what an env file sets."""


def evaluate_env_files(files: list[fabrics.EnvFile]) -> str:
    """A bash script run in the golden image that sources the fabric's env files (each with the variables it expects,
    e.g. NCCL_LIB_DIR) and prints what they set or changed as KEY=VALUE lines, Docker's --env-file format (a value
    on several lines cannot be one and is left out). A file missing from the image ends it with status 3."""
    skip = " ".join(ENV_UNCHANGED)
    lines = ["declare -A before",
             "while IFS= read -r -d '' kv; do before[${kv%%=*}]=${kv#*=}; done < <(env -0)",
             "set -a"]
    for file in files:
        path = shlex.quote(file.path)
        lines += [f"{name}={shlex.quote(value)}" for name, value in file.env.items()]
        lines += [f"if [ ! -r {path} ]; then echo {shlex.quote(f'no {file.path} in the image')} >&2; exit 3; fi",
                  f". {path}"]
    lines += ["set +a",
              "while IFS= read -r -d '' kv; do",
              "  k=${kv%%=*} v=${kv#*=}",
              f"  case \" {skip} \" in *\" $k \"*) continue ;; esac",
              "  [[ $v == *$'\\n'* ]] && continue",
              "  if [[ ! -v before[$k] || ${before[$k]} != \"$v\" ]]; then printf '%s=%s\\n' \"$k\" \"$v\"; fi",
              "done < <(env -0)"]
    return "\n".join(lines) + "\n"


def boot_files(spec: ClusterSpec, env: dict[str, str], units: list[BootUnit]) -> list[BootFile]:
    """The launch environment, each unit with its script, and the one step cloud-init runs: enable them."""
    files = [BootFile(ENV_FILE, "0644", render("node/launch.env.j2", stack=spec.stack, env=env))]
    for unit in units:
        files += [unit.script, unit.unit, *([unit.timer] if unit.timer else [])]
    if units:
        names = [u.name for u in units] + [u.timer.path.rsplit("/", 1)[1] for u in units if u.timer]
        files.append(BootFile(f"{STEP_DIR}/enable-units.sh", "0755", render("node/enable-units.sh.j2", units=names)))
    return files


def user_data(spec: ClusterSpec, pool: str, files: list[BootFile], hostname: str | None = None) -> str:
    """The user data: cloud-init writes the files and runs the steps under STEP_DIR once; `hostname` names the host
    (the head: Slurm's SlurmctldHost), None leaves the cloud's name."""
    steps = [f.path for f in files if f.path.startswith(f"{STEP_DIR}/")]
    return render("node/cloud-config.yaml.j2", stack=spec.stack, pool=pool, files=files, commands=steps,
                  hostname=hostname)


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
