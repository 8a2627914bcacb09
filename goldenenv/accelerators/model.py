"""What an accelerator family is: the Accelerator record every folder under goldenenv/accelerators/ fills in.

A family (NVIDIA CUDA, Huawei Ascend) brings what goldenenv must know to lock, build, run and check an image for its
devices: which pins of a lock are its own, the Python distributions they ask for, the image's runtime environment
and labels, the catalog tables its compatibility rules read (in its own catalog/ folder), the rules themselves,
what the golden container needs from the host (devices, runtime options, read-only mounts), its collective library
and where that library's bus-bandwidth reference is, the device family the node health judge reads, and what a
node's host needs beneath the container (its driver, the catalog column stating an image's, a container runtime).
Shared code asks the registry (goldenenv.accelerators) for these; it never asks `if cuda` or `if ascend`.

The rules return Refusal records rather than goldenenv.compat's Conflict, so that this module and the family folders
sit below the lock model and the solver and import neither (the lock's model reads the families' sections).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from goldenenv.spec import Model

ERROR = "error"
WARNING = "warning"


class Refusal(NamedTuple):
    """One thing wrong between a lock's pins and the family's tables, naming both sides (goldenenv.compat turns it
    into a Conflict)."""

    rule: str
    pins: tuple[str, ...]
    """Both sides, as "field=value"."""
    message: str
    severity: str = ERROR


class Collective(NamedTuple):
    """The family's collective-communication library and how its bus bandwidth is measured."""

    name: str
    """As people write it: NCCL, HCCL."""
    test: str
    """The benchmark that measures its all-reduce bus bandwidth (nccl-tests' all_reduce_perf, CANN's hccl_test)."""
    busbw_table: str
    """The catalog table of reference bus bandwidths a measured all-reduce is compared with."""
    command: Callable[..., tuple[str, ...]] | None = None
    """The benchmark's argv for (nodes, devices per node), where the family gives one (Ascend's hccl_test); None:
    the cluster check's torch all-reduce (goldenenv/checks/allreduce_nodes.py) is the measure."""
    parse: Callable[[str, int], list[Any]] | None = None
    """Reads the benchmark's output for a number of ranks into rows with their bus bandwidth (busbw_gbytes)."""


@dataclass(frozen=True)
class Accelerator:
    name: str
    """As locks and the catalog write it: cuda | ascend (the folder's name)."""
    label: str
    """As people write it: NVIDIA CUDA | Huawei Ascend."""
    vendor: str
    """The vendor column of catalog gpus.csv: a node whose device has this vendor needs an image of this family."""
    device_word: str
    """What one device is called in messages: GPU | NPU."""
    uses: Callable[[Any], bool]
    """Whether a lock is built for this family (its pins are set)."""
    collective: Collective
    lock_section: str | None = None
    """The lock's section holding the family's pins (ascend: {cann, torchNpu, ...}); None: the family's pins are
    top-level fields of the lock (CUDA's cuda, cudnn, nccl, torchCuda, gpuArchs predate the registry and stay where
    every lock writes them)."""
    section: type[Model] | None = None
    """The pydantic model of that section."""
    tables: tuple[str, ...] = ()
    """The catalog tables its compatibility rules read, in its own catalog/ folder."""
    requirements: Callable[[Any], dict[str, list[str]]] = lambda lock: {}
    """What each Python layer (cuda, torch, project) asks for beyond torch, from the family's pins."""
    env: Callable[[Any], dict[str, str]] = lambda lock: {}
    """The image's runtime environment for the family's devices."""
    pin_labels: Callable[[Any], dict[str, str]] = lambda lock: {}
    """Image labels (dev.goldenenv.<name>) of the family's software pins, listed after torch's."""
    target_labels: Callable[[Any], dict[str, str]] = lambda lock: {}
    """Image labels of the devices and host the image targets (architectures, driver floor), listed last."""
    image_layer: str | None = None
    """The family's image layer template under its templates/ (None: the family adds no layer of its own)."""
    layer_values: Callable[[Any], dict[str, Any]] = lambda lock: {}
    """What that template renders from the lock."""
    rules: Callable[[Any], list[Refusal]] = lambda lock: []
    """Everything wrong with a lock's family pins on their own, against the family's tables."""
    image_checks: Callable[[Any], list[tuple[str, Callable[[dict], str | None]]]] = lambda lock: []
    """The family's own checks of an image built from the lock, each (id, verify(probe) -> None or what differs),
    beside the ones goldenenv.checks.expectations writes for every lock."""
    node_checks: Callable[[Any], list[tuple[str, Callable[[dict], str | None]]]] = lambda lock: []
    """Its checks that only a node with its devices and driver passes."""
    owns_torch: bool = False
    """Its rules hold the lock's torch to its own table (Ascend: the torch its torch_npu requires), so CUDA's torch
    table (catalog torch_builds, CUDA variants and NCCL) does not judge the lock's torch."""
    driver_rules: Callable[[Any, str], list[Refusal]] = lambda lock, driver: []
    """What is wrong between a lock of this family and a node's device driver (the version `check-lock --driver`
    names)."""
    host_needs: tuple[str, ...] = ("driver", "toolkit")
    """What a node's host needs beneath the golden container for the family's devices, as goldenenv.images.host
    names needs: CUDA's NVIDIA driver and NVIDIA Container Toolkit (`driver`, `toolkit`); Ascend's NPU driver only
    (`driver:ascend`: the container gets the NPUs as device nodes and read-only mounts, no container runtime). A
    family's driver need is `driver` or `driver:<family>`, so that a host lock's NVIDIA driver never stands in for
    another vendor's."""
    host_driver: str = "nvidia_driver"
    """The catalog host_images column stating the family's driver an image carries (nvidia_driver, npu_driver)."""
    driver_label: str = "NVIDIA driver"
    """The family's driver in messages: NVIDIA driver | Ascend NPU driver."""
    run_options: tuple[str, ...] = ()
    """`docker run` options that give the golden container the family's devices through its container runtime."""
    devices: tuple[str, ...] = ()
    """Device nodes the golden container gets (`--device`), each a path or a glob of numbered devices."""
    host_mounts: tuple[str, ...] = ()
    """Host paths the golden container gets read-only at the same path (the driver's libraries and tools)."""
    health: str = ""
    """The device family the node health judge reads (nvidia-smi and XIDs; npu-smi health and error codes)."""
    gres: str = "gpu"
    """The Slurm GRES name a node offers its devices under (gpu, npu): slurm.conf's GresTypes, the node's Gres=."""
    gres_devices: str = "/dev/nvidia"
    """The device files each device is, numbered after this prefix (/dev/nvidia0, /dev/davinci0): the node's
    gres.conf gives Slurm one File= per device."""
    platform: Callable[[Any], str] = lambda lock: "linux/amd64"
    """The image's platform (OCI os/architecture)."""
    deepspeed_accelerator: str | None = None
    """DeepSpeed's DS_ACCELERATOR for the family (cuda, npu): an image with DeepSpeed never falls back to its CPU
    accelerator unnoticed."""

    def labels_of(self, lock: Any) -> tuple[dict[str, str], dict[str, str]]:
        """(pin labels, target labels) of a lock of this family."""
        return self.pin_labels(lock), self.target_labels(lock)
