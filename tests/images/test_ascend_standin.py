"""The Ascend checks generated from a lock, run for real against a stand-in Ascend base: the project's bootstrapped
Debian base (built from distribution packages, like the other bases) carrying the files CANN and the NPU driver
install, with the lock's versions, and a stand-in npu-smi (tests/images/ascend-standin/npu-smi). No NPU, CANN or
driver is here: what the stand-in proves is that the checks read those files and that table, pass when they say the
lock's versions and fail by name when one differs. That torch_npu sees NPUs on CANN 8.2.RC1 only a real Ascend
host proves; here the check says torch_npu is not installed."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import docker
import pytest

from goldenenv.accelerators import get
from goldenenv.checks import probe
from goldenenv.images.base import ensure_base
from goldenenv.images.lock import load

STANDIN = Path(__file__).parent / "ascend-standin"
LOCK = "ascend-910b-modelarts"
TOOLKIT_INFO = "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"
DRIVER_INFO = "/usr/local/Ascend/driver/version.info"


def files(cann: str, driver: str) -> dict[str, tuple[bytes, int]]:
    """CANN's and the driver's version files as their install guides name them (docs/research/huawei.md §4.3),
    holding only the keys the sources show, and the stand-in npu-smi."""
    return {TOOLKIT_INFO: (f"version={cann}\n".encode(), 0o644),
            DRIVER_INFO: (f"Version={driver}\npackage_version={driver}\n".encode(), 0o644),
            "/usr/local/bin/npu-smi": ((STANDIN / "npu-smi").read_bytes(), 0o755)}


@pytest.fixture(scope="module")
def standin():
    engine = docker.from_env()
    lock = load(LOCK)
    base = ensure_base(engine, load("cpu-dev").base)
    content = files(lock.ascend.cann, lock.ascend.driver)
    dockerfile = f"FROM {base}\n" + "".join(f"COPY f{i} {path}\n" for i, path in enumerate(content))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for i, (name, (data, mode)) in enumerate([("Dockerfile", (dockerfile.encode(), 0o644)),
                                                  *((f"f{i}", item) for i, item in enumerate(content.values()))]):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    tag = "goldenenv-test/ascend-standin:" + hashlib.sha256(buffer.getvalue()).hexdigest()[:12]
    buffer.seek(0)
    engine.images.build(fileobj=buffer, custom_context=True, tag=tag, rm=True)
    yield engine, tag
    engine.images.remove(tag, force=True)


def probed(standin, environment=None, volumes=None) -> dict:
    engine, tag = standin
    source = Path(probe.__file__).read_text()
    out = engine.containers.run(tag, ["python3", "-c", source], remove=True, network_mode="none",
                                environment=environment or {}, volumes=volumes or {})
    return json.loads(out.decode())


def results(lock, facts: dict) -> dict[str, str | None]:
    family = get("ascend")
    return {ident: verify(facts) for ident, verify in family.image_checks(lock) + family.node_checks(lock)}


def test_the_checks_pass_on_the_standin_but_torch_npu_which_only_a_real_host_proves(standin):
    found = results(load(LOCK), probed(standin))
    assert found == {"ascend-cann": None, "ascend-driver": None, "ascend-npu-health": None,
                     "torch-npu": "torch_npu: lock pins 2.6.0, not installed where the probe ran"}


def test_a_cann_other_than_the_locks_fails_by_name(standin, tmp_path):
    other = tmp_path / "info"
    other.write_text("version=8.1.RC1\n")
    found = results(load(LOCK), probed(standin, volumes={str(other): {"bind": TOOLKIT_INFO, "mode": "ro"}}))
    assert found["ascend-cann"] == "CANN: lock pins 8.2.RC1, host has 8.1.RC1"
    assert found["ascend-driver"] is None


def test_a_driver_other_than_the_locks_fails_by_name(standin, tmp_path):
    other = tmp_path / "version.info"
    other.write_text("Version=23.0.6\n")
    found = results(load(LOCK), probed(standin, volumes={str(other): {"bind": DRIVER_INFO, "mode": "ro"}}))
    assert found["ascend-driver"] == "NPU driver: lock pins 24.1.0.3, host has 23.0.6"
    assert found["ascend-cann"] is None


def test_an_npu_whose_health_is_not_ok_fails_by_name(standin):
    found = results(load(LOCK), probed(standin, environment={"STANDIN_NPU3_HEALTH": "Alarm"}))
    assert found["ascend-npu-health"] == "npu-smi info: health not OK: NPU 3 (910B3) Alarm"
