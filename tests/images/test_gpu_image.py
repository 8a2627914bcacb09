"""The GPU training image, built here with no GPU: torch's CUDA build with NVIDIA's library wheels (one copy of
CUDA), DeepSpeed's ops compiled at build time in a builder stage, checked by the suite generated from its lock,
and held to the lock's size limit. Runs only with `-m gpu_image` (see tests/conftest.py)."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile

import pytest

from goldenenv.checks.expectations import ds_report_ops, expectations
from goldenenv.checks.probe import NO_GPU_PRELUDE
from goldenenv.checks.run import check_image
from goldenenv.images.build import build
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load
from goldenenv.images.size import compressed_bytes, shared_bytes

pytestmark = pytest.mark.gpu_image
STEM = "h100-torch"


@pytest.fixture(scope="module")
def stem(client):
    return build(load(STEM), BuildOptions.from_environment(), client)


def run(client, tag: str, command: str) -> str:
    out = client.containers.run(tag, ["sh", "-c", command], remove=True, network_mode="none")
    return out.decode()


def test_the_stem_builds_here_and_passes_every_check_of_its_lock(client, stem):
    lock = load(STEM)
    result = check_image(lock, client=client)
    assert result.passed, result.output
    assert f"{len(expectations(lock))} passed" in result.output


def test_ds_report_in_the_image_shows_the_locked_ops_installed_and_compatible(client, stem):
    """DeepSpeed's own report, run as the image checks run it: with no GPU here, Triton is hidden from DeepSpeed's
    import (which would start Triton's GPU driver); on a GPU node `ds_report` runs as is."""
    script = NO_GPU_PRELUDE + "from deepspeed.env_report import cli_main\nsys.argv = ['ds_report']\ncli_main()\n"
    out = client.containers.run(stem.tag, ["python3", "-c", script], remove=True, network_mode="none",
                                stderr=True).decode()
    listed = ds_report_ops(out)
    for op in load(STEM).deepspeed_ops.prebuilt:
        assert listed.get(op) == ("YES", "OKAY"), (op, listed.get(op))


def test_no_cuda_compiler_or_toolkit_reaches_the_image(client, stem):
    found = run(client, stem.tag, "command -v nvcc g++ c++; find / -xdev -name nvcc -o -xdev -name 'cuda-1*' "
                                  "-path '/usr/local/*' 2>/dev/null; pip list 2>/dev/null | grep -i nvcc; true")
    assert found.strip() == ""


def test_cpu_ops_are_compiled_for_the_locks_cpu_not_the_build_machines(client, stem, tmp_path):
    """cpuArch x86-64-v3: AVX2 (ymm registers) and no AVX-512 (zmm), whatever CPU built the image; an AVX-512 op
    would die with SIGILL on an AMD EPYC Milan node (p5)."""
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed here")
    assert load(STEM).deepspeed_ops.cpu_arch == "x86-64-v3"
    container = client.containers.create(stem.tag)
    ops = f"/opt/venv/lib/python{load(STEM).python}/site-packages/deepspeed/ops/adam/"
    try:
        archive, _ = container.get_archive(ops)
        tarfile.open(fileobj=io.BytesIO(b"".join(archive))).extractall(tmp_path, filter="data")
    finally:
        container.remove()
    op = next(tmp_path.glob("adam/cpu_adam_op*.so"))
    code = subprocess.run(["objdump", "-d", str(op)], capture_output=True, text=True, check=True).stdout
    assert "%ymm" in code and "%zmm" not in code


def test_the_stem_stays_under_its_compressed_size_limit(client, stem):
    lock = load(STEM)
    assert compressed_bytes(client, stem.tag) <= lock.max_compressed_gb * 1e9


def test_alicloud_h100_is_the_stem_plus_its_erdma_layer(client, stem):
    """The one extending lock whose fabric installs from Debian's packages here (the EFA installer's host is out of
    reach): built on the stem's layers, it pulls only its own layer on a node that has the stem."""
    lock = load("alicloud-h100")
    built = build(lock, BuildOptions.from_environment(), client)
    image, base = client.images.get(built.tag), client.images.get(stem.tag)
    own = image.attrs["Size"] - shared_bytes(image, base)
    assert shared_bytes(image, base) >= base.attrs["Size"] - 1_000_000  # every layer of the stem, bar metadata
    assert 0 < own < 0.05 * base.attrs["Size"], own  # rdma-core's providers: about 0.1 GB beside the stem's 6
    result = check_image(lock, client=client)
    assert result.passed, result.output
