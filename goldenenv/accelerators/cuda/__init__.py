"""NVIDIA CUDA: the family every golden image had before the registry.

Its pins are top-level fields of the lock (cuda, cudnn, nccl, torchCuda, gpuArchs), where every lock already writes
them, so no lock's file or identity moves. Its compatibility tables (catalog/: cuda_min_driver, minor_compat,
arch_min_cuda, torch_builds) are read by goldenenv.compat, which still holds CUDA's rules themselves (listed in
docs/research/accelerators-status.md as left to move). The container gets the GPUs through the NVIDIA Container
Toolkit (`--gpus all`); NCCL is the collective, measured with nccl-tests against catalog busbw_refs; the node health
judge reads nvidia-smi and the kernel's XIDs.
"""

from __future__ import annotations

from typing import Any

from goldenenv.accelerators.cuda.driver import min_driver
from goldenenv.accelerators.model import Accelerator, Collective

ORDER = 1


def _uses(lock: Any) -> bool:
    return bool(lock.cuda or lock.cudnn or lock.nccl or lock.gpu_archs or lock.torch_cuda not in (None, "cpu"))


def _requirements(lock: Any) -> dict[str, list[str]]:
    """NCCL and cuDNN from their pip wheels, in the rarely changing cuda layer."""
    return {"cuda": [f"nvidia-nccl-cu12=={lock.nccl}"] * bool(lock.nccl)
            + [f"nvidia-cudnn-cu12=={lock.cudnn}"] * bool(lock.cudnn)}


def _env(lock: Any) -> dict[str, str]:
    """What the NVIDIA Container Toolkit reads: the driver floor it enforces, the GPUs and the driver's parts."""
    if not lock.cuda:
        return {}
    major_minor = ".".join(lock.cuda.split(".")[:2])
    return {"NVIDIA_REQUIRE_CUDA": f"cuda>={major_minor}", "NVIDIA_VISIBLE_DEVICES": "all",
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def _pin_labels(lock: Any) -> dict[str, str]:
    return {"cuda": lock.cuda, "cudnn": lock.cudnn, "nccl": lock.nccl}


def _target_labels(lock: Any) -> dict[str, str]:
    return {"gpu-archs": " ".join(lock.gpu_archs) or None, "min-driver": min_driver(lock.cuda) if lock.cuda else None}


ACCELERATOR = Accelerator(
    name="cuda", label="NVIDIA CUDA", vendor="nvidia", device_word="GPU", uses=_uses,
    collective=Collective("NCCL", "nccl-tests all_reduce_perf", "busbw_refs"),
    tables=("cuda_min_driver", "minor_compat", "arch_min_cuda", "torch_builds"),
    requirements=_requirements, env=_env, pin_labels=_pin_labels, target_labels=_target_labels,
    run_options=("--gpus", "all"), health="nvidia-smi",
    deepspeed_accelerator="cuda",
)

__all__: list[str] = []
