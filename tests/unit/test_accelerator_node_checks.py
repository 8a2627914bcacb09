"""An accelerator family's checks wired into the node checks: the host-layer suite (goldenenv.checks.host) counts an
NPU node's device files instead of asking the NVIDIA toolkit, and the image suite on a node (`--gpu`) runs the lock's
family's node checks (Ascend: driver, npu-smi health, torch_npu) instead of nvidia-smi's."""

from __future__ import annotations

import subprocess

from goldenenv import lifecycle
from goldenenv.checks import host as host_checks
from goldenenv.checks import plugin
from goldenenv.images import host
from goldenenv.images.lock import load

SNT9B = "modelarts.bm.npu.arm.8snt9b2.d"


def _cases(instance_type: str, golden_ref: str | None = None) -> dict[str, host_checks.HostCase]:
    spec = lifecycle.load_spec("huawei-gpu-dev")
    pool = spec.nodes[0]
    return {c.id: c for c in host_checks.host_cases(host.layer(spec, pool), cloud="huawei",
                                                     instance_type=instance_type, golden_ref=golden_ref)}


def test_an_npu_node_counts_its_davinci_devices_and_asks_no_nvidia_toolkit():
    cases = _cases(SNT9B, golden_ref=host_checks.GOLDEN_CONTAINER)
    assert cases["ascend-devices"] == host_checks.HostCase("ascend-devices", host_checks.DEVICE_FILES,
                                                           "NPUs /dev/davinci<n>", "/dev/davinci", "8")
    assert not {"gpus-all", "driver-loaded"} & set(cases)


def test_a_gpu_node_keeps_its_toolkit_case():
    cases = _cases("pi2.2xlarge.4", golden_ref=host_checks.GOLDEN_CONTAINER)
    assert cases["gpus-all"].kind == host_checks.GPUS and "ascend-devices" not in cases


def test_the_device_files_are_counted_on_the_host(tmp_path):
    """The command as the suite runs it, on a folder standing in for /dev: davinci<n> are the NPUs, davinci_manager
    is not one (Ascend's container guides: docs/research/huawei.md §4.6)."""
    for name in [f"davinci{n}" for n in range(8)] + ["davinci_manager"]:
        (tmp_path / name).touch()
    case = host_checks.HostCase("ascend-devices", host_checks.DEVICE_FILES, "NPUs /dev/davinci<n>",
                                f"{tmp_path}/davinci", "8")

    def ran():
        done = subprocess.run(host_checks.command(case, sudo=True), shell=True, capture_output=True, text=True)
        return host_checks.judge(case, done.returncode, done.stdout)

    assert ran() is None
    (tmp_path / "davinci5").unlink()
    assert ran().startswith("NPUs /dev/davinci<n>: 7 present (") and ran().endswith("the instance type has 8")


def test_the_image_suite_runs_the_locks_family_node_checks():
    assert [ident for ident, _ in plugin.node_checks(load("ascend-910b-modelarts"))] == [
        "ascend-driver", "ascend-npu-health", "torch-npu"]
    assert plugin.node_checks(load("huawei-t4")) == []
