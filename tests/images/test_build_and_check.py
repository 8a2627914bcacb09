"""Real images, built by a real Docker engine from the repository's locks, checked by the lock's suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from docker.errors import ImageNotFound

from goldenenv.checks.expectations import expectations
from goldenenv.checks.run import check_image
from goldenenv.images import pin
from goldenenv.images.base import bootstrap_tag
from goldenenv.images.build import BUILDERS, CLEAR_BUILDERS, BuildError, build, build_context, builder_images
from goldenenv.images.dockerfile import BuildOptions, dockerfile
from goldenenv.images.lock import IMAGES, load
from goldenenv.images.size import compressed_bytes, largest_layers, uncompressed_bytes

STAGES = """FROM scratch AS os
COPY os.txt /
FROM os AS pip
COPY pip.txt /
FROM pip AS layer-project
COPY project.txt /
FROM os AS image
COPY --from=layer-project /project.txt /
"""
"""The shape of the golden Dockerfile in miniature: builder stages on an OS stage, copied into the image."""


@pytest.fixture(scope="session")
def dangling_before(client) -> set[str]:
    """Dangling images the shared engine already had before this session built anything."""
    return {image.id for image in client.images.list(filters={"dangling": True})}


@pytest.fixture(scope="session")
def cpu_dev(client, dangling_before):
    return build(load("cpu-dev"), BuildOptions.from_environment(), client)


@pytest.fixture(scope="session")
def cuda_slim(client, dangling_before):
    return build(load("cuda-slim"), BuildOptions.from_environment(), client)


def dangling_on(client, ancestor: str, known: set[str] = frozenset()) -> list[str]:
    """Dangling images (`docker images -f dangling=true`) built on `ancestor`, leaving out `known` ones."""
    found = []
    for image in client.images.list(filters={"dangling": True}):
        parent = image.id
        while parent and parent != ancestor:
            parent = client.api.inspect_image(parent).get("Parent")
        if parent and image.id not in known:
            found.append(image.id)
    return found


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


def test_no_munge_key_is_in_the_image_or_any_of_its_layers(client, cpu_dev):
    """munge's install script makes a key; every cluster must get its own from its secret store instead. Looked at as
    root (the image's user cannot see into /etc/munge), in the image and in every layer's saved tar."""
    import io
    import tarfile

    listing = client.containers.run(cpu_dev.tag, ["ls", "-A", "/etc/munge"], user="root", remove=True)
    assert listing.decode().split() == []
    image = client.images.get(cpu_dev.tag)
    saved = io.BytesIO(b"".join(image.save()))
    with tarfile.open(fileobj=saved) as outer:
        for member in outer.getmembers():
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                    assert not [n for n in layer.getnames() if n.endswith("etc/munge/munge.key")], member.name


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
    # numpy's new pin alone: a full re-pin would also take whatever else PyPI released since the lock was pinned
    # (filelock 4.3.2 moved the torch layer once), and this test is about one pin
    repinned = pin.pin(bumped, options.wheelhouse)
    pin.write_packages(lock_file, {**bumped.packages, "numpy": repinned["numpy"]})
    bumped = load("cpu-dev", lock_file.parent.parent)
    assert bumped.packages["numpy"].version == "2.3.5" and bumped.tag != cpu_dev.tag

    rebuilt = build(bumped, options, client)
    try:
        assert rebuilt.stages["layer-torch"] == cpu_dev.stages["layer-torch"]
        if rebuilt.stages["layer-project"] != cpu_dev.stages["layer-project"]:
            with pytest.raises(ImageNotFound):  # the replaced builder stage is removed, not left dangling
                client.images.get(cpu_dev.stages["layer-project"])
        before = client.images.get(cpu_dev.tag).attrs["RootFS"]["Layers"]
        after = client.images.get(rebuilt.tag).attrs["RootFS"]["Layers"]
        shared = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), len(before))
        # base, node tools, user + venv and torch layers are reused; only the project layer (the last one) is new
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


def test_builds_keep_their_builder_stages_tagged_and_leave_no_dangling_image(client, cpu_dev, dangling_before):
    """Runs after this file's other cpu-dev builds (the pin bump, the failing step): none may leave leftovers."""
    kept = builder_images(client, "cpu-dev")
    stages = ("apt", "layer-project", "layer-torch", "os", "pip")  # apt: Slurm and munge, downloaded pinned
    assert kept == [f"{BUILDERS}/cpu-dev:{stage}" for stage in stages]
    os_stage = client.images.get(f"{BUILDERS}/cpu-dev:os").id
    assert dangling_on(client, os_stage, dangling_before) == []


def test_a_rebuild_moves_the_builder_cache_and_one_command_clears_it(client, tmp_path):
    name = f"test-stages-{uuid.uuid4().hex[:8]}"
    for part in ("os", "pip", "project"):
        (tmp_path / f"{part}.txt").write_text(part)
    (tmp_path / "Dockerfile").write_text(STAGES)
    tags = [f"goldenenv/{name}:first", f"goldenenv/{name}:bumped"]
    try:
        first = build_context(client, tmp_path, tags[0], name)
        (tmp_path / "project.txt").write_text("project, bumped")
        bumped = build_context(client, tmp_path, tags[1], name)
        assert bumped.cached_steps == 2 and bumped.stages["pip"] == first.stages["pip"]
        assert {t: client.images.get(t).id for t in builder_images(client, name)} == {
            f"{BUILDERS}/{name}:{stage}": bumped.stages[stage] for stage in ("os", "pip", "layer-project")}
        with pytest.raises(ImageNotFound):
            client.images.get(first.stages["layer-project"])

        (tmp_path / "project.txt").write_text("project, bumped twice")
        (tmp_path / "Dockerfile").write_text(STAGES.replace("COPY project.txt /", "COPY project.txt /\nCOPY gone /"))
        with pytest.raises(BuildError, match="gone"):
            build_context(client, tmp_path, f"goldenenv/{name}:failed", name)
        assert dangling_on(client, first.stages["os"]) == [], "a failed step leaves no half-built stage"

        clear = CLEAR_BUILDERS.replace(f"'{BUILDERS}/*'", f"{BUILDERS}/{name}")  # the README's command, one lock
        assert clear != CLEAR_BUILDERS
        subprocess.run(clear, shell=True, check=True, capture_output=True)
        assert builder_images(client, name) == []
        with pytest.raises(ImageNotFound):
            client.images.get(bumped.stages["layer-project"])
        assert client.images.get(tags[1]).id == bumped.image_id, "built images stay"
        assert dangling_on(client, first.stages["os"]) == []
    finally:
        for tag in [*builder_images(client, name), *tags]:
            try:
                client.images.remove(tag)
            except ImageNotFound:
                pass


def test_compressed_size_is_what_docker_save_through_gzip_1_gives(client, tmp_path):
    (tmp_path / "random").write_bytes(os.urandom(3_000_000))
    (tmp_path / "zeros").write_bytes(bytes(1_000_000))
    text = "FROM scratch\nCOPY random /random\nCOPY zeros /zeros\n"
    (tmp_path / "Dockerfile").write_text(text)
    image, _ = client.images.build(path=str(tmp_path), tag=f"goldenenv-test/size:{uuid.uuid4().hex[:8]}", rm=True)
    tag = image.tags[0]
    try:
        piped = subprocess.run(f"docker save {tag} | gzip -1 | wc -c", shell=True, check=True,
                               capture_output=True, text=True)
        measured = compressed_bytes(client, tag)
        # zlib's level 1 is not GNU gzip's byte for byte; on real images they differ by well under 1 %
        assert abs(measured - int(piped.stdout)) <= 0.01 * int(piped.stdout), (measured, piped.stdout)
        assert uncompressed_bytes(client.images.get(tag)) == 4_000_000
        assert 3_000_000 < measured < 3_100_000, "random bytes stay, zeros compress away"
        assert [(layer.size, layer.step) for layer in largest_layers(client.images.get(tag), 2, text)] == [
            (3_000_000, "COPY random /random"), (1_000_000, "COPY zeros /zeros")]
    finally:
        client.images.remove(tag)


def test_the_largest_layers_of_cpu_dev_are_named_by_their_dockerfile_lines(client, cpu_dev):
    text = dockerfile(load("cpu-dev"), "base:ref")
    layers = largest_layers(client.images.get(cpu_dev.tag), 2, text)
    assert layers[0].step == "COPY --from=layer-torch /opt/layer-torch/ /opt/venv/", layers
    assert layers[0].size > layers[1].size > 0
