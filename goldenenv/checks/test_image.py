"""The golden-image suite: run by `goldenenv image check` on docker://IMAGE, and on nodes with ssh://.

One case per pinned component of the lock (see expectations.py), and a GPU-host part with --gpu
(driver, GPU model and count, torch on every GPU, target archs, an all-reduce, a DeepSpeed FusedAdam step; on a
lock of another accelerator family, that family's node checks instead: test_node);
with --host-driver, every GPU must report the driver the node's host image pins.
"""

from __future__ import annotations

import pytest

from goldenenv import accelerators, compat
from goldenenv.checks import gpu
from goldenenv.checks.plugin import lock_from, run_python


def test_pin(probe, expectation):
    problem = expectation.verify(probe)
    assert problem is None, problem


def test_node(probe, node_check):
    """The lock's accelerator family's own checks of a node with its devices (with --gpu)."""
    _, verify = node_check
    problem = verify(probe)
    assert problem is None, problem


@pytest.fixture
def gpu_host(request):
    if not request.config.getoption("--gpu"):
        pytest.skip("GPU-host checks run with --gpu")
    lock = lock_from(request.config)
    family = accelerators.of_lock(lock)
    if family is not None and family.health != "nvidia-smi":
        pytest.skip(f"{family.label}: no nvidia-smi on its nodes; test_node runs its family's checks")
    return lock


def _assert_findings(findings):
    failed = [f.message for f in findings if not f.ok]
    assert not failed, "; ".join(failed)


def test_driver_and_gpus_suit_the_lock(host, gpu_host, request):
    instance_type = request.config.getoption("--instance-type")
    assert instance_type, "--instance-type names the catalog entry to compare the GPUs with"
    smi = host.run(" ".join(gpu.NVIDIA_SMI_QUERY))
    assert smi.rc == 0, smi.stderr or smi.stdout
    gpus = gpu.parse_nvidia_smi(smi.stdout)
    _assert_findings(gpu.check_gpus(gpus, request.config.getoption("--cloud"), instance_type,
                                    compat.min_driver(gpu_host.cuda)))


def test_driver_is_the_one_the_host_image_pins(host, request):
    pinned = request.config.getoption("--host-driver")
    if not pinned:
        pytest.skip("the host-image driver check runs with --host-driver")
    smi = host.run(" ".join(gpu.NVIDIA_SMI_QUERY))
    assert smi.rc == 0, smi.stderr or smi.stdout
    _assert_findings([gpu.check_host_driver(gpu.parse_nvidia_smi(smi.stdout), host.backend.get_hostname(), pinned)])


def test_torch_sees_every_gpu_with_the_locked_archs(host, gpu_host, request):
    smi = gpu.parse_nvidia_smi(host.run(" ".join(gpu.NVIDIA_SMI_QUERY)).stdout)
    done = run_python(host, request.config, gpu.TORCH_PROBE)
    assert done.rc == 0, done.stderr
    _assert_findings(gpu.check_torch_gpu(gpu.parse_torch_probe(done.stdout), len(smi), gpu_host.gpu_archs))


def test_allreduce_over_local_gpus(host, gpu_host, request):
    done = run_python(host, request.config, gpu.ALLREDUCE_PROBE, "--backend", "nccl")
    assert done.rc == 0, done.stderr[-1000:]
    result = gpu.parse_allreduce(done.stdout)
    assert result["ok"], result


def test_deepspeed_fused_adam_steps_on_the_gpu(host, gpu_host, request):
    if not gpu_host.deepspeed:
        pytest.skip(f"{gpu_host.name} pins no DeepSpeed")
    done = run_python(host, request.config, gpu.FUSED_ADAM_PROBE)
    assert done.rc == 0, done.stderr[-1000:]
    _assert_findings([gpu.check_fused_adam(done.stdout)])
