"""Huawei Ascend NPUs with CANN: the second accelerator family (issue 40).

A lock for Ascend writes an `ascend:` section (goldenenv.accelerators.ascend.section): CANN comes with the base image
(HCCL, the collective library, is part of CANN), torch_npu is pinned by hash in the torch layer beside torch, and the
image is linux/arm64 (Huawei's Snt9B servers are aarch64). The rules (rules.py) hold a lock to Ascend's own table
(catalog ascend_torch_npu, from Ascend/pytorch COMPATIBILITY.en.md), to Huawei's driver pairs (ascend_driver, from
the ModelArts release table) and to the platform of every wheel whose hash the family's table knows (ascend_wheels,
from PyPI). The golden container gets the NPUs as device nodes and the driver's libraries and npu-smi read-only,
as Ascend's container guides run it, so the host needs the NPU driver (catalog host_images npu_driver) and no
container runtime; the node health judge reads npu-smi's NPU count, health words and error codes
with health.py beside this file, by the rules of catalog/health_thresholds.csv here.
"""

from __future__ import annotations

from typing import Any

from goldenenv import catalog
from goldenenv.accelerators.ascend import checks, collective
from goldenenv.accelerators.ascend.rules import check_node_driver, rules
from goldenenv.accelerators.ascend.section import Ascend
from goldenenv.accelerators.model import Accelerator, Collective

ORDER = 2
ARCH = {"linux/arm64": "aarch64", "linux/amd64": "x86_64"}
"""The platform's machine name as CANN's install folders write it (<arch>-linux)."""


def cann_paths(cann: str, platform: str = "linux/arm64") -> dict[str, str]:
    """Where a CANN release keeps its version file and its set_env.sh (catalog ascend_cann_paths: the last row whose
    since_cann is at or below it; CANN 8.5 moved the toolkit from ascend-toolkit/latest to cann)."""
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in version.replace("RC", "").split("."))

    rows = [r for r in catalog.rows("ascend_cann_paths") if key(r["since_cann"]) <= key(cann)]
    if not rows:
        raise KeyError(f"CANN {cann}: catalog ascend_cann_paths has no row at or below it")
    row = max(rows, key=lambda r: key(r["since_cann"]))
    return {"install_info": row["install_info"].format(arch=ARCH[platform]), "set_env": row["set_env"]}


def _layer(lock: Any) -> dict[str, Any]:
    return {"cann": lock.ascend.cann, **cann_paths(lock.ascend.cann, lock.ascend.platform)}


def _pin_labels(lock: Any) -> dict[str, str]:
    return {"cann": lock.ascend.cann, "hccl": lock.ascend.cann, "torch-npu": lock.ascend.torch_npu}


def _target_labels(lock: Any) -> dict[str, str]:
    return {"npu-chip": lock.ascend.chip, "platform": lock.ascend.platform, "npu-driver": lock.ascend.driver,
            "npu-firmware": lock.ascend.firmware}


ACCELERATOR = Accelerator(
    name="ascend", label="Huawei Ascend", vendor="huawei", device_word="NPU",
    uses=lambda lock: lock.ascend is not None,
    collective=Collective("HCCL", "CANN hccl_test all_reduce_test", "busbw_refs", collective.command,
                          collective.parse),
    lock_section="ascend", section=Ascend,
    tables=("ascend_torch_npu", "ascend_driver", "ascend_wheels", "ascend_cann_paths"),
    requirements=lambda lock: {"torch": [f"torch-npu=={lock.ascend.torch_npu}"]},
    pin_labels=_pin_labels, target_labels=_target_labels,
    image_layer="image/layer-ascend.j2", layer_values=_layer, rules=rules, driver_rules=check_node_driver,
    owns_torch=True,
    host_needs=("driver:ascend",), host_driver="npu_driver", driver_label="Ascend NPU driver",
    devices=("/dev/davinci[0-9]*", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"),
    host_mounts=("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi"),
    health="npu-smi", gres="npu", gres_devices="/dev/davinci", platform=lambda lock: lock.ascend.platform,
    deepspeed_accelerator="npu",
    image_checks=lambda lock: checks.image_checks(lock, _layer(lock)["install_info"]),
    node_checks=checks.node_checks,
)

__all__ = ["Ascend"]
