"""Locks, rendering and lock-generated expectations, without a Docker engine."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from goldenenv import compat
from goldenenv.checks.expectations import expectations
from goldenenv.images import build, dockerfile, size
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import GROUPS, IMAGES, Lock, load, names, release_of
from goldenenv.spec import ConfigError

CAPTURES = Path(__file__).parent / "captures"
LOCKS = names()
FABRIC_LAYER_MARKS = {"efa": "efa_installer.sh", "erdma": "ibverbs-providers",
                      "tcpx": "gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v",
                      "tcpxo": "gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v",
                      "gib": "--no-install-recommends nccl-gib=",
                      "ib": "ibverbs-providers infiniband-diags", "hcc": "ibverbs-providers libibverbs1 librdmacm1"}
"""A line of each fabric's image layer: what shows the layer is in a rendered Dockerfile."""


def lock_doc(name: str) -> dict:
    return yaml.safe_load((IMAGES / name / "lock.yaml").read_text())


def test_the_promised_images_have_locks():
    assert {"cpu-dev", "cuda-slim", "aws-h100", "alicloud-h100", "gcp-h100", "gcp-h200", "azure-h100",
            "azure-t4"} <= set(LOCKS)


@pytest.mark.parametrize("name", LOCKS)
def test_every_lock_is_pinned_and_passes_check_lock(name):
    lock = load(name)
    assert lock.unpinned() == []
    assert all(pin.sha256 for pin in lock.packages.values())
    errors = [c.message for c in compat.check_lock(lock) if c.severity == "error"]
    assert errors == []


@pytest.mark.parametrize("name", LOCKS)
def test_every_lock_renders_with_layers_from_rare_to_frequent(name):
    lock = load(name)
    text = dockerfile.dockerfile(lock, "base:ref")
    image_stage = text.split("FROM os AS image", 1)[1]
    copies = [line.split()[1].removeprefix("--from=layer-") for line in image_stage.splitlines()
              if line.startswith("COPY --from=layer-")]
    assert copies == [g for g in GROUPS if lock.group(g)]
    if lock.fabric != "none":  # the fabric layer comes after every Python layer: the stem below it is shared
        last_copy = image_stage.rindex("COPY --from=layer-")
        assert image_stage.index(FABRIC_LAYER_MARKS[lock.fabric]) > last_copy
    assert f'"{lock.content_hash}"' in image_stage
    assert image_stage.rstrip().endswith(f"WORKDIR /home/{lock.user}")
    assert f"USER {lock.user}" in image_stage


def test_gpu_image_refuses_too_old_drivers_through_the_container_runtime():
    lock = load("aws-h100")
    env = dockerfile.env(lock)
    assert env["NVIDIA_REQUIRE_CUDA"] == "cuda>=" + ".".join(lock.cuda.split(".")[:2])
    labels = dockerfile.labels(lock)
    assert labels["dev.goldenenv.min-driver"] == compat.min_driver(lock.cuda)
    assert labels["dev.goldenenv.nccl"] == lock.nccl


def test_build_options_stay_out_of_the_image_stage_and_the_identity(tmp_path):
    lock = load("cpu-dev")
    secret_index = "https://user:s3cret@pypi.internal/simple"
    ca = tmp_path / "proxy-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    options = BuildOptions(ca_cert=ca, pip_index_url=secret_index, apt_mirror="http://mirror.internal/debian")
    context = dockerfile.write_context(lock, "base:ref", options, tmp_path / "ctx")
    text = (context / "Dockerfile").read_text()
    assert "s3cret" not in text, "index credentials go in as a build argument of builder stages only"
    image_stage = text.split("FROM os AS image", 1)[1]
    assert "PIP_CERT" not in image_stage and "goldenenv-build" not in image_stage
    assert "PIP_INDEX_URL" not in image_stage
    assert dockerfile.build_args(options)["PIP_INDEX_URL"] == secret_index
    assert "MIIB" in (context / "build" / "ca-bundle.pem").read_text()
    assert load("cpu-dev").content_hash == lock.content_hash  # options never change the tag


def test_the_apt_mirror_reaches_only_the_apt_builder_stage():
    """Build args show in `docker history`: the site mirror (maybe with credentials) is declared by no image stage."""
    doc = lock_doc("cuda-slim")
    doc["base"]["osPackages"] = ["less"]
    text = dockerfile.dockerfile(Lock.model_validate(doc), "base:ref",
                                 BuildOptions(apt_mirror="http://user:s3cret@mirror.internal/debian"))
    assert build.stages(text)[:2] == ["apt", "os"]
    stages = {stage.split()[2]: stage for stage in text.split("\nFROM ")[1:]}
    assert [name for name, stage in stages.items() if "APT_MIRROR" in stage] == ["apt"]
    assert "COPY --from=apt /debs/" in stages["os"] and "apt-get update" not in stages["os"]
    assert "s3cret" not in text
    bare = lock_doc("cuda-slim")
    bare.pop("slurm")  # Slurm and munge are OS packages too
    assert build.stages(dockerfile.dockerfile(Lock.model_validate(bare), "base:ref"))[0] == "os", \
        "no apt stage without OS packages"


def test_requirements_pin_every_distribution_by_hash():
    lock = load("aws-h100")
    for group in GROUPS:
        lines = [ln for ln in dockerfile.requirements(lock, group).splitlines() if not ln.startswith("#")]
        assert len(lines) == len(lock.group(group))
        assert all("==" in ln and "--hash=sha256:" in ln for ln in lines)
    assert {n for n, p in lock.packages.items() if n.startswith("nvidia-")} <= set(lock.group("cuda"))


def test_bumping_a_project_pin_changes_only_the_project_layer_inputs(tmp_path):
    lock = load("cpu-dev")
    doc = copy.deepcopy(lock.model_dump(mode="json", by_alias=True))
    doc["packages"]["numpy"]["version"] = "2.3.5"
    bumped = Lock.model_validate(doc)
    assert bumped.content_hash != lock.content_hash
    for group in GROUPS:
        same = dockerfile.requirements(lock, group) == dockerfile.requirements(bumped, group)
        assert same == (group != "project"), group  # byte-identical inputs keep the Docker cache
    before = dockerfile.dockerfile(lock, "base:ref").split("FROM os AS image")[0]
    after = dockerfile.dockerfile(bumped, "base:ref").split("FROM os AS image")[0]
    assert before.splitlines()[1:] == after.splitlines()[1:], "builder stages are unchanged but for the header"


def test_wheelhouse_copies_only_pinned_wheels(tmp_path):
    lock = load("cpu-dev")
    house = tmp_path / "wheels"
    house.mkdir()
    pinned = house / f"torch-{lock.packages['torch'].version.replace('+', '%2B')}-cp311-cp311-linux_x86_64.whl"
    other = house / "torch-0.0.1-cp311-cp311-linux_x86_64.whl"
    pinned.write_bytes(b"x")
    other.write_bytes(b"y")
    context = dockerfile.write_context(lock, "base:ref", BuildOptions(wheelhouse=house), tmp_path / "ctx")
    assert sorted(p.name for p in (context / "build" / "wheelhouse").iterdir()) == [pinned.name]


def test_lock_errors_name_the_field_and_what_to_change(tmp_path):
    doc = lock_doc("cpu-dev")
    doc["torch"] = "2.12.0+cpu"
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "lock.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as caught:
        load("broken", tmp_path)
    message = str(caught.value)
    assert "torch is 2.12.0+cpu but packages.torch is" in message and "goldenenv image pin" in message

    doc = lock_doc("cpu-dev")
    doc["base"]["image"] = "debian@sha256:" + "0" * 64
    (tmp_path / "broken" / "lock.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="exactly one of image"):
        load("broken", tmp_path)

    with pytest.raises(ConfigError, match="images with a lock: .*cpu-dev"):
        load("no-such-image")


def test_release_of_names_the_driver_table_row():
    assert release_of("12.6.3") == ("12.6", "U3")
    assert release_of("12.8.0") == ("12.8", "GA")


@pytest.mark.parametrize("name", ["cpu-dev", "cuda-slim"])
def test_expectations_pass_on_the_captured_probe_of_the_built_image(name):
    probe = json.loads((CAPTURES / f"probe-{name}.json").read_text())
    failures = [(e.id, e.verify(probe)) for e in expectations(load(name))]
    assert [f for f in failures if f[1]] == []


def test_an_image_whose_nccl_differs_from_its_lock_is_named_with_both_versions():
    lock = load("cuda-slim")
    probe = json.loads((CAPTURES / "probe-cuda-slim.json").read_text())
    probe["nccl"] = "2.21.5"
    problems = {e.id: e.verify(probe) for e in expectations(lock)}
    assert problems["nccl"] == f"NCCL: lock pins {lock.nccl}, host has 2.21.5"


def test_two_nccl_libraries_fail_the_one_libnccl_check():
    probe = json.loads((CAPTURES / "probe-cuda-slim.json").read_text())
    probe["library_files"]["libnccl.so"].append("/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3")
    problems = {e.id: e.verify(probe) for e in expectations(load("cuda-slim"))}
    assert "found 2" in problems["one-libnccl"]


def test_an_unlocked_package_or_root_user_is_caught():
    probe = json.loads((CAPTURES / "probe-cpu-dev.json").read_text())
    probe["packages"]["requests"] = "2.32.0"
    probe["user"] = {"name": "root", "uid": 0}
    problems = {e.id: e.verify(probe) for e in expectations(load("cpu-dev"))}
    assert "requests" in problems["no-unlocked-packages"]
    assert "root" in problems["non-root-user"]


def test_every_stage_before_the_image_stage_is_kept_as_builder_cache():
    """Each builder stage is tagged by its name (goldenenv-builder/LOCK:STAGE): every stage is named, once."""
    stages = build.stages(dockerfile.dockerfile(load("cpu-dev"), "base:ref"))
    assert stages[-1] == "image" and len(set(stages)) == len(stages)
    assert not [s for s in stages if s.isdigit()]
    assert {"apt", "os", "pip", "layer-torch", "layer-project"} <= set(stages[:-1])


def test_compressed_bytes_are_counted_on_the_stream_as_gzip_level_1():
    data = b"goldenenv " * 50_000 + bytes(range(256)) * 400
    chunks = (data[i:i + 4096] for i in range(0, len(data), 4096))
    assert size.gzip_bytes(chunks) == len(gzip.compress(data, compresslevel=1, mtime=0))


MINI_DOCKERFILE = """FROM base:ref AS os
ARG APT_MIRROR=
RUN apt-get update && apt-get install -y procps \\
 && rm -rf /var/lib/apt/lists/*
FROM os AS layer-torch
RUN pip install --prefix /opt/layer torch
FROM os AS image
COPY --from=layer-torch /opt/layer/ /opt/venv/
ENV GOLDENENV_IMAGE=mini
"""
MINI_HISTORY = [  # newest first, as the engine answers `docker history`
    {"CreatedBy": "/bin/sh -c #(nop)  ENV GOLDENENV_IMAGE=mini", "Size": 0, "Comment": ""},
    {"CreatedBy": "/bin/sh -c #(nop) COPY dir:8d1c0e in /opt/venv/ ", "Size": 700_000_000, "Comment": ""},
    {"CreatedBy": "|1 APT_MIRROR= /bin/sh -c apt-get update && apt-get install -y procps  && rm -rf "
                  "/var/lib/apt/lists/*", "Size": 5_000_000, "Comment": ""},
    {"CreatedBy": "/bin/sh -c #(nop)  ARG APT_MIRROR=", "Size": 0, "Comment": ""},
    {"CreatedBy": "", "Size": 170_000_000, "Comment": "Imported from -"},
]


def test_largest_layers_name_the_dockerfile_step_that_made_them():
    image = SimpleNamespace(history=lambda: MINI_HISTORY)
    assert [(layer.size, layer.step) for layer in size.largest_layers(image, 2)] == [
        (700_000_000, "COPY dir:8d1c0e in /opt/venv/"), (170_000_000, "(base) Imported from -")]
    assert [(layer.size, layer.step) for layer in size.largest_layers(image, 3, MINI_DOCKERFILE)] == [
        (700_000_000, "COPY --from=layer-torch /opt/layer/ /opt/venv/"),
        (170_000_000, "(base) Imported from -"),
        (5_000_000, "RUN apt-get update && apt-get install -y procps && rm -rf /var/lib/apt/lists/*"),
    ]
    other = MINI_DOCKERFILE.replace("COPY --from=layer-torch", "ADD --from=layer-torch")
    assert size.largest_layers(image, 1, other)[0].step == "COPY dir:8d1c0e in /opt/venv/", \
        "a Dockerfile that does not line up with the history is not used to name its layers"
