"""What a node needs at boot and what a launcher needs afterwards, the same on every cloud.

NodeBoot decides which boot steps a node runs (RAID local NVMe, mount the parallel file
system, write the launch environment, start the golden image) and renders them through the
templates. launch_outputs turns node addresses into the hostfile and torchrun environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from goldenenv import catalog
from goldenenv.render import render
from goldenenv.spec import ClusterSpec

ENV_FILE = "/etc/goldenenv/launch.env"
STEP_DIR = "/usr/local/lib/goldenenv"
MASTER_PORT = 29500


@dataclass(frozen=True)
class BootFile:
    path: str
    mode: str
    content: str


@dataclass(frozen=True)
class NodeBoot:
    spec: ClusterSpec
    pool: str
    fabric: str
    """efa | erdma | none"""
    local_nvme: bool

    def env(self) -> dict[str, str]:
        """Fabric settings from the catalog, and where the storage tiers are on this node."""
        storage = self.spec.storage
        env = {"GOLDENENV_STACK": self.spec.stack, "GOLDENENV_POOL": self.pool}
        if self.fabric != "none":
            env.update(catalog.fabric_env(self.fabric))
        if storage.parallel_fs.enabled:
            root = storage.parallel_fs.mount_point
            env["GOLDENENV_DATASETS"] = f"{root}/{storage.parallel_fs.dataset_prefix.strip('/')}"
            env["GOLDENENV_CHECKPOINTS"] = f"{root}/{storage.parallel_fs.checkpoint_prefix.strip('/')}"
        env["GOLDENENV_SCRATCH"] = storage.local_nvme.mount_point
        return env

    def files(self, fsx_dns_name: str | None, fsx_mount_name: str | None) -> list[BootFile]:
        storage = self.spec.storage
        files = [BootFile(ENV_FILE, "0644", render("node/launch.env.j2", stack=self.spec.stack, env=self.env()))]
        if self.local_nvme and storage.local_nvme.raid0:
            files.append(BootFile(f"{STEP_DIR}/10-nvme-raid0.sh", "0755",
                                  render("node/nvme-raid0.sh.j2", mount_point=storage.local_nvme.mount_point)))
        if storage.parallel_fs.enabled and fsx_dns_name:
            fs = storage.parallel_fs
            files.append(BootFile(f"{STEP_DIR}/20-fsx-mount.sh", "0755", render(
                "node/fsx-mount.sh.j2", mount_point=fs.mount_point, dns_name=fsx_dns_name,
                mount_name=fsx_mount_name, directories=[fs.dataset_prefix.strip("/"), fs.checkpoint_prefix.strip("/")],
            )))
        if self.spec.image.ref:
            mounts = [storage.local_nvme.mount_point]
            if storage.parallel_fs.enabled:
                mounts.append(storage.parallel_fs.mount_point)
            files.append(BootFile(f"{STEP_DIR}/30-golden-image.sh", "0755", render(
                "node/golden-image.sh.j2", image_ref=self.spec.image.ref, env_file=ENV_FILE, mounts=mounts,
            )))
        return files

    def cloud_config(self, fsx_dns_name: str | None = None, fsx_mount_name: str | None = None) -> str:
        files = self.files(fsx_dns_name, fsx_mount_name)
        steps = [f.path for f in files if f.path.startswith(STEP_DIR)]
        return render("node/cloud-config.yaml.j2", stack=self.spec.stack, pool=self.pool,
                      files=files, commands=steps)


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
