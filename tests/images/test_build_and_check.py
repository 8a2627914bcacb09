"""Real images, built by a real Docker engine from the repository's locks, checked by the lock's suite."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from goldenenv.checks.expectations import expectations
from goldenenv.checks.run import check_image
from goldenenv.images import pin
from goldenenv.images.base import bootstrap_tag
from goldenenv.images.build import BuildError, build
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import IMAGES, load



@pytest.fixture(scope="session")
def cpu_dev(client):
    return build(load("cpu-dev"), BuildOptions.from_environment(), client)


@pytest.fixture(scope="session")
def cuda_slim(client):
    return build(load("cuda-slim"), BuildOptions.from_environment(), client)


def copy_lock(name: str, tmp_path: Path) -> Path:
    """A scratch copy of images/<name>/ that a test may change."""
    target = tmp_path / "images" / name
    shutil.copytree(IMAGES / name, target)
    return target / "lock.yaml"


def test_cpu_dev_is_built_registry_free_and_matches_its_lock(client, cpu_dev):
    lock = load("cpu-dev")
    assert cpu_dev.tag == lock.tag
    base = client.images.get(bootstrap_tag(lock.base.bootstrap))
    assert len(base.history()) == 1, "the base is one imported rootfs, not a pulled image"
    result = check_image(lock, client=client)
    assert result.passed, result.output
    assert f"{len(expectations(lock))} passed" in result.output


def test_cuda_slim_carries_the_locked_cuda_runtime_and_nccl(client, cuda_slim):
    result = check_image(load("cuda-slim"), client=client)
    assert result.passed, result.output
    for case in ("nccl", "one-libnccl", "cuda-runtime", "package-nvidia-nccl-cu12"):
        assert re.search(rf"test_pin\[docker://[^\]]*-{case}\] PASSED", result.output), case


def test_an_image_whose_nccl_differs_from_its_lock_fails_naming_nccl_and_both_versions(client, cuda_slim, tmp_path):
    lock_file = copy_lock("cuda-slim", tmp_path)
    doc = yaml.safe_load(lock_file.read_text())
    built_nccl = doc["nccl"]
    doc["nccl"] = doc["packages"]["nvidia-nccl-cu12"]["version"] = "2.21.5"
    lock_file.write_text(yaml.safe_dump(doc))
    other = load("cuda-slim", lock_file.parent.parent)
    result = check_image(other, tag=cuda_slim.tag, lock_file=lock_file, client=client)
    assert not result.passed
    assert f"NCCL: lock pins 2.21.5, host has {built_nccl}" in result.output


def test_no_build_option_or_secret_reaches_the_image(client, cpu_dev):
    image = client.images.get(cpu_dev.tag)
    env = dict(item.split("=", 1) for item in image.attrs["Config"]["Env"])
    assert not [k for k in env if k.startswith("PIP_")]
    history = " ".join(h.get("CreatedBy", "") for h in image.history())
    assert "goldenenv-build" not in history and "PIP_INDEX_URL" not in history
    listing = client.containers.run(cpu_dev.tag, ["sh", "-c", "ls -d /tmp/goldenenv-build /opt/pip 2>&1; true"],
                                    remove=True, network_mode="none").decode()
    assert listing.count("No such file") == 2, listing


def test_rebuild_after_bumping_one_project_pin_reuses_every_earlier_layer(client, cpu_dev, tmp_path):
    lock_file = copy_lock("cpu-dev", tmp_path)
    text = lock_file.read_text()
    lock_file.write_text(text.replace("numpy==2.3.4", "numpy==2.3.5"))
    options = BuildOptions.from_environment()
    bumped = load("cpu-dev", lock_file.parent.parent)
    pin.write_packages(lock_file, pin.pin(bumped, options.wheelhouse))
    bumped = load("cpu-dev", lock_file.parent.parent)
    assert bumped.packages["numpy"].version == "2.3.5" and bumped.tag != cpu_dev.tag

    rebuilt = build(bumped, options, client)
    try:
        before = client.images.get(cpu_dev.tag).attrs["RootFS"]["Layers"]
        after = client.images.get(rebuilt.tag).attrs["RootFS"]["Layers"]
        shared = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), len(before))
        # base, user + venv and torch layers are reused; only the project layer (the last one) is new
        assert len(after) == len(before) and shared == len(before) - 1, (before, after)
        assert rebuilt.cached_steps > 0
        result = check_image(bumped, lock_file=lock_file, client=client)
        assert result.passed, result.output
    finally:
        client.images.remove(rebuilt.tag, force=True)


def test_a_failing_step_is_reported_with_its_log(client, cpu_dev, tmp_path):
    lock_file = copy_lock("cpu-dev", tmp_path)
    doc = yaml.safe_load(lock_file.read_text())
    doc["packages"]["numpy"]["sha256"] = ["0" * 64]
    lock_file.write_text(yaml.safe_dump(doc))
    with pytest.raises(BuildError) as caught:
        build(load("cpu-dev", lock_file.parent.parent), BuildOptions.from_environment(), client)
    assert "requirements-project.txt" in str(caught.value)
    assert "DO NOT MATCH THE HASHES" in caught.value.log
