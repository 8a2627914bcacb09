"""The GPU-host probe programs, run for real in the cpu-dev image (CPU torch, gloo)."""

from __future__ import annotations

import docker
import pytest

from goldenenv.checks import gpu
from goldenenv.images.lock import load


@pytest.fixture(scope="module")
def image():
    engine = docker.from_env()
    tag = load("cpu-dev").tag
    try:
        engine.images.get(tag)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{tag} is not built; tests/images/test_build_and_check.py builds it (run the whole suite)")
    return engine, tag


def run(image, *args: str) -> str:
    engine, tag = image
    return engine.containers.run(tag, ["python", "-c", *args], remove=True, network_mode="none",
                                 shm_size="512m").decode()


def test_the_torch_probe_reports_the_locked_torch(image):
    probe = gpu.parse_torch_probe(run(image, gpu.TORCH_PROBE))
    lock = load("cpu-dev")
    assert probe["torch"] == lock.torch and probe["device_count"] == 0 and probe["nccl"] is None


def test_the_allreduce_probe_runs_with_gloo(image):
    result = gpu.parse_allreduce(run(image, gpu.ALLREDUCE_PROBE, "--backend", "gloo", "--world-size", "3",
                                     "--bytes", str(1 << 20), "--iters", "3", "--warmup", "1"))
    assert result["ok"] and result["world_size"] == 3 and result["busbw_gbps"] > 0
