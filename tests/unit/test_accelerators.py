"""Accelerator families as a seam (goldenenv/accelerators/): CUDA and Ascend found as folders, each lock built for one
family, the Ascend locks rendered and held to Ascend's and Huawei's tables, and an image of one family refused on a
node of the other, both sides named. Expectations are written out here from the sources the catalog rows cite, never
computed by the code under test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import accelerators, compat
from goldenenv.cli import app
from goldenenv.images import dockerfile
from goldenenv.images.lock import IMAGES, load

MODELARTS = "ascend-910b-modelarts"
COMMUNITY = "ascend-910b"
TORCH_NPU_X86 = "f6e2677a847c60a0ee91ddb3c0d244f53a13480f376113cc9e3816e69a189c0c"
"""torch_npu-2.6.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl on PyPI (https://pypi.org/pypi/torch-npu/json)."""


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


@pytest.fixture
def images(tmp_path, monkeypatch) -> Path:
    """A copy of the two Ascend locks in a folder of their own, which the commands read first."""
    for name in (MODELARTS, COMMUNITY):
        shutil.copytree(IMAGES / name, tmp_path / name)
    monkeypatch.setattr("goldenenv.images.lock.IMAGES", tmp_path)
    return tmp_path


def edit(images: Path, name: str, change) -> None:
    path = images / name / "lock.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_both_families_are_folders_found_in_the_order_they_were_added():
    assert list(accelerators.ACCELERATORS) == ["cuda", "ascend"]
    assert accelerators.sections() == ("ascend",)
    assert accelerators.get("ascend").collective.name == "HCCL"
    assert accelerators.get("cuda").collective.name == "NCCL"


@pytest.mark.parametrize(("lock", "family"), [("aws-h100", "cuda"), ("alicloud-a10", "cuda"), ("cpu-dev", None),
                                               (MODELARTS, "ascend"), (COMMUNITY, "ascend")])
def test_each_lock_is_built_for_one_family_or_none(lock, family):
    found = accelerators.of_lock(load(lock))
    assert (found.name if found else None) == family


@pytest.mark.parametrize(("device", "family"), [("H100-80GB", "cuda"), ("T4", "cuda"), ("910B3", "ascend")])
def test_a_nodes_family_is_its_devices_vendor(device, family):
    assert accelerators.of_device(device).name == family


@pytest.mark.parametrize("name", [MODELARTS, COMMUNITY])
def test_the_ascend_locks_pass_check_lock(name):
    done = run("image", "check-lock", name)
    assert done.exit_code == 0, done.output
    assert f"{name} passes" in done.output and "warning" not in done.output


def test_the_modelarts_lock_follows_huaweis_table():
    lock = load(MODELARTS)
    assert (lock.ascend.cann, lock.ascend.driver, lock.ascend.firmware) == ("8.2.RC1", "24.1.0.3", "7.5.0.5.220")
    assert (lock.ascend.torch_npu, lock.torch, lock.python) == ("2.6.0", "2.6.0", "3.11")
    assert lock.packages["torch-npu"].sha256 == ["a93d65074486c41f26d664bad69924096074f434ac8aef304c47ae7525c1a446"]
    assert lock.packages["torch"].sha256 == ["ccbd0320411fe1a3b3fec7b4d3185aa7d0c52adac94480ab024b5c8f74a0bf1d"]


def test_the_community_lock_builds_from_a_digest_whose_ubuntu_ships_a_slurm_for_dynamic_nodes():
    """Ubuntu 24.04's Slurm 23.11 (images/huawei-t4/lock.yaml's noble reading) is past the 22.05 dynamic nodes need,
    and the base is pinned by the digest a public Dockerfile names, so `image build` takes it."""
    lock = load(COMMUNITY)
    assert lock.base.unverified_image is None
    assert lock.base.image == ("quay.io/ascend/triton:3.2.2-cann9.1.0-torch_npu2.7.1.post8-910b-ubuntu24.04-py3.11"
                               "@sha256:b69d14f39d47ec8f66e635f16190788e3c2b2174d0994f63090afcdf885b06f1")
    assert (lock.python, lock.slurm.version, lock.slurm.munge) == ("3.11", "23.11.4-1.2ubuntu5", "0.5.15-4ubuntu0.1")
    assert lock.packages["torch"].sha256 == ["3282d9febd1e4e476630a099692b44fdc214ee9bf8ee5377732d9d9dfe5712e4"]
    assert lock.packages["torch-npu"].sha256 == ["624ba08fb0259fcb8315a4b5bb5d7edd2d2ca927ba368c800b7f18771564e153"]
    text = dockerfile.dockerfile(lock, lock.base.ref)
    assert "UNVERIFIED" not in text and "slurmd=23.11.4-1.2ubuntu5" in text


@pytest.mark.parametrize("name", [MODELARTS, COMMUNITY])
def test_no_ascend_lock_pins_a_cuda_library(name):
    assert not [p for p in load(name).packages if p.startswith(("nvidia-", "cuda-", "triton"))]


def test_render_says_the_base_is_unverified_and_installs_torch_npu_beside_torch():
    done = CliRunner().invoke(app, ["image", "render", MODELARTS])
    assert done.exit_code == 0, done.output
    text = dockerfile.dockerfile(load(MODELARTS), load(MODELARTS).base.ref)
    assert "FROM swr.cn-south-1.myhuaweicloud.com/ascendhub/cann:8.2.rc1-910b-ubuntu22.04-py3.11 AS os" in text
    assert "# UNVERIFIED BASE: swr.cn-south-1.myhuaweicloud.com/ascendhub/cann:8.2.rc1" in text
    assert "grep -q '^version=8.2.RC1$' /usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/" \
           "ascend_toolkit_install.info" in text
    assert 'dev.goldenenv.torch-npu="2.6.0"' in text and 'dev.goldenenv.npu-driver="24.1.0.3"' in text
    assert "NVIDIA_" not in text
    requirements = dockerfile.requirements(load(MODELARTS), "torch")
    assert "torch-npu==2.6.0 --hash=sha256:a93d6507" in requirements and "torch==2.6.0 --hash" in requirements


def test_cann_9_keeps_its_version_file_under_cann():
    text = dockerfile.dockerfile(load(COMMUNITY), load(COMMUNITY).base.ref)
    assert "/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info" in text
    assert ". %s\\n' /usr/local/Ascend/cann/set_env.sh" in text


def test_a_cuda_lock_renders_no_ascend_layer():
    text = dockerfile.dockerfile(load("alicloud-a10"), "base")
    assert "Ascend" not in text and "UNVERIFIED" not in text and 'NVIDIA_REQUIRE_CUDA="cuda>=12.6"' in text


def refused(name: str, *args: str) -> str:
    done = run("image", "check-lock", name, *args)
    assert done.exit_code == 1, done.output
    assert f"{name} is refused" in done.output
    return " ".join(done.output.split())


def test_a_torch_npu_for_another_cann_is_refused_naming_both(images):
    edit(images, MODELARTS, lambda d: d["ascend"].update(cann="9.1.0"))
    out = refused(MODELARTS)
    assert "ascend-cann" in out and "torch_npu 2.6.0 is built for CANN 8.2.RC1 but ascend.cann is 9.1.0" in out


def test_a_torch_other_than_torch_npus_is_refused_naming_both(images):
    edit(images, MODELARTS, lambda d: (d.update(torch="2.5.1"), d["packages"]["torch"].update(version="2.5.1")))
    out = refused(MODELARTS)
    assert "torch_npu 2.6.0 requires torch 2.6.0 but the lock pins torch 2.5.1" in out


def test_a_torch_npu_outside_ascends_table_is_refused(images):
    edit(images, MODELARTS, lambda d: d["ascend"].update(torchNpu="2.14.0"))
    out = refused(MODELARTS)
    assert "torch_npu 2.14.0 is in no row of Ascend's table" in out and "torch_npu 2.6.0 (torch 2.6.0)" in out


def test_a_python_torch_does_not_support_is_refused(images):
    edit(images, MODELARTS, lambda d: d.update(python="3.12"))
    out = refused(MODELARTS)
    assert "supports Python 3.9 to 3.11 but python is 3.12" in out


def test_a_driver_outside_huaweis_pair_is_refused_naming_both(images):
    edit(images, MODELARTS, lambda d: d["ascend"].update(driver="25.0.rc1.1"))
    out = refused(MODELARTS)
    assert "CANN 8.2.RC1 is paired with driver 24.1.0.3 with firmware 7.5.0.5.220" in out
    assert "not driver 25.0.rc1.1" in out


def test_a_nodes_driver_is_held_to_the_pair(monkeypatch):
    npu_node(monkeypatch)
    found = [c for c in compat.can_run(load(MODELARTS), "huawei", "snt9b.test", "23.0.6") if c.severity == "error"]
    assert [c.rule for c in found] == ["ascend-driver"]
    assert found[0].pins == ("ascend.driver=24.1.0.3", "driver=23.0.6")  # below the lock's own driver
    assert "node's driver is 23.0.6, below it" in found[0].message
    found = [c for c in compat.can_run(load(MODELARTS), "huawei", "snt9b.test", "25.2.1") if c.severity == "error"]
    assert [c.rule for c in found] == ["ascend-driver"]
    assert found[0].pins == ("ascend.cann=8.2.RC1", "driver=25.2.1 with firmware 7.5.0.5.220")  # not in the pairs
    assert compat.can_run(load(MODELARTS), "huawei", "snt9b.test", "24.1.0.3") == []


def test_an_x86_64_wheel_in_an_arm64_lock_is_refused_naming_the_file(images):
    edit(images, MODELARTS, lambda d: d["packages"]["torch-npu"].update(sha256=[TORCH_NPU_X86]))
    out = refused(MODELARTS)
    assert "packages.torch-npu 2.6.0 pins torch_npu-2.6.0-cp311-cp311-manylinux_2_17_x86_64" in out
    assert "a linux/amd64 wheel, but the image is linux/arm64" in out


def test_cuda_libraries_in_an_ascend_lock_are_refused(images):
    pin = {"version": "2.27.5", "sha256": ["0" * 64], "group": "torch"}
    edit(images, COMMUNITY, lambda d: d["packages"].update({"nvidia-nccl-cu12": pin}))
    out = refused(COMMUNITY)
    assert "an Ascend image pins CUDA libraries (nvidia-nccl-cu12)" in out


def test_a_lock_with_both_families_pins_exits_2_naming_them(images):
    edit(images, MODELARTS, lambda d: d.update(cuda="12.6.3", gpuArchs=["sm_90"], torchCuda="cu126"))
    done = run("image", "check-lock", MODELARTS)
    assert done.exit_code == 2, done.output
    assert "pins of NVIDIA CUDA and Huawei Ascend" in " ".join(done.output.split())


def test_a_bad_ascend_field_exits_2_naming_the_key(images):
    edit(images, MODELARTS, lambda d: d["ascend"].update(platform="linux/riscv64"))
    done = run("image", "check-lock", MODELARTS)
    out = " ".join(done.output.split())
    assert done.exit_code == 2 and "ascend.platform" in out and "linux/arm64" in out, done.output
    assert "Traceback" not in done.output


def test_build_refuses_a_base_pinned_by_tag_only():
    from goldenenv.images.base import BaseError, ensure_base

    with pytest.raises(BaseError, match="pinned by tag only"):
        ensure_base(None, load(MODELARTS).base)


def test_a_lock_without_an_unverified_base_keeps_its_tag():
    """The base field added for Ascend leaves every existing lock's identity where it was."""
    assert load("cpu-dev").base.unverified_image is None
    assert "unverified_image" not in load("cpu-dev").model_dump(exclude_none=True)["base"]


@pytest.mark.parametrize(("lock", "instance", "cloud", "node"), [
    ("aws-h100", "p5.48xlarge", "aws", None),
])
def test_a_cuda_node_judges_a_cuda_lock_as_before(lock, instance, cloud, node):
    found = compat.can_run(load(lock), cloud, instance)
    assert not [c for c in found if c.rule == "accelerator-mismatch"]


def npu_node(monkeypatch, name: str = "snt9b.test") -> None:
    """An instance type of eight 910B3 NPUs, as the Huawei cloud folder will list ModelArts' Snt9B servers."""
    from goldenenv import catalog

    node = catalog.InstanceType(cloud="huawei", name=name, gpu=catalog.gpus()["910B3"], gpu_count=8, vcpus=192,
                                memory_gib=1536, network_cards=1, rdma="none", rdma_interfaces=0,
                                local_nvme_count=0, local_nvme_gib=0, network_gbps=0, source="test")
    real = catalog.instance_type
    monkeypatch.setattr(catalog, "instance_type", lambda c, t: node if t == name else real(c, t))


def test_a_cuda_lock_on_an_npu_pool_is_refused_naming_both(monkeypatch):
    npu_node(monkeypatch)
    found = compat.can_run(load("aws-h100"), "huawei", "snt9b.test")
    mismatch = [c for c in found if c.rule == "accelerator-mismatch"]
    assert len(mismatch) == 1 and mismatch[0].severity == "error"
    assert "aws-h100 is built for NVIDIA CUDA but snt9b.test has 8 x 910B3 (Huawei Ascend NPUs)" in mismatch[0].message
    assert not [c for c in found if c.rule == "gpu-arch-missing"]


def test_an_ascend_lock_on_a_gpu_pool_is_refused_naming_both():
    found = compat.can_run(load(MODELARTS), "aws", "p5.48xlarge")
    mismatch = [c for c in found if c.rule == "accelerator-mismatch"]
    assert len(mismatch) == 1 and mismatch[0].severity == "error"
    assert "ascend-910b-modelarts is built for Huawei Ascend but p5.48xlarge has 8 x H100-80GB (NVIDIA CUDA GPUs)" \
        in mismatch[0].message


def test_an_ascend_lock_on_an_npu_pool_passes(monkeypatch):
    npu_node(monkeypatch)
    assert [c for c in compat.can_run(load(MODELARTS), "huawei", "snt9b.test") if c.severity == "error"] == []


def test_a_discovered_folder_without_its_record_is_named(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "__init__.py").write_text("ORDER = 3\n")
    with pytest.raises((RuntimeError, ModuleNotFoundError)):
        accelerators.discover([str(tmp_path)])


def golden_container_script(family: str | None) -> str:
    from goldenenv import nodeboot

    unit = nodeboot.container_unit([], "registry.example/goldenenv/x@sha256:" + "0" * 64, None, [], gpus=True,
                                   user=None, hosts=[], command=["sleep", "infinity"],
                                   accelerator=accelerators.get(family) if family else None)
    return unit.script.content


def test_an_npu_nodes_golden_container_gets_the_npu_devices_and_no_nvidia_runtime():
    script = golden_container_script("ascend")
    assert "--gpus" not in script
    for pattern in ("/dev/davinci[0-9]*", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"):
        assert f"for d in {pattern}; do" in script


def test_a_gpu_nodes_golden_container_runs_with_the_nvidia_runtime():
    script = golden_container_script("cuda")
    assert "  --gpus all --network host --ipc host \\\n" in script and "davinci" not in script


def test_an_npu_node_offers_its_npus_to_slurm_as_npu_gres_with_one_file_each():
    from goldenenv import slurm

    family = accelerators.get("ascend")
    command = slurm.node_command("head", 8, ["snt9b"], gres=(family.gres, family.gres_devices))
    assert command[command.index("--gres") + 1] == "npu"
    assert command[command.index("--gres-devices") + 1] == "/dev/davinci"
    assert "--gres" not in slurm.node_command("head", 8, ["p5"])  # a GPU node's command is as before


def test_the_entry_point_writes_one_gres_file_per_npu(tmp_path):
    """The entry point's gres.conf loop, run by bash on stand-in device files named as Ascend's driver names them."""
    import subprocess

    from goldenenv.images.dockerfile import SLURM_TOOLS

    entry = SLURM_TOOLS["goldenenv-slurm"][0].read_text()
    loop = entry[entry.index('    for device in "$gres_prefix"'):].split("    done\n", 1)[0] + "    done\n"
    for name in ("davinci0", "davinci1", "davinci_manager"):
        (tmp_path / name).touch()
    script = f'gres=npu gres_prefix={tmp_path}/davinci gres_devices={tmp_path}/out\n: > "$gres_devices"\n{loop}'
    subprocess.run(["bash", "-c", script], check=True)
    assert (tmp_path / "out").read_text() == f"Name=npu File={tmp_path}/davinci0\nName=npu File={tmp_path}/davinci1\n"


def test_slurm_conf_names_the_gres_of_the_pools_families(monkeypatch):
    from types import SimpleNamespace

    from goldenenv.slurm import config

    npu_node(monkeypatch)
    both = SimpleNamespace(cloud="huawei", nodes=[SimpleNamespace(instance_type="snt9b.test")])
    assert config.gres_types(both) == ["npu"]
    gpus = SimpleNamespace(cloud="aws", nodes=[SimpleNamespace(instance_type="p5.48xlarge")])
    assert config.gres_types(gpus) == ["gpu"]


def test_the_scheduler_view_expects_npu_gres_on_npu_nodes():
    from goldenenv.slurm.view import Node, judge

    node = Node(name="n1", state="IDLE", gres="npu:8", address="10.0.0.5", reason="", cpus="192")
    assert judge([node], 1, 8, "npu") == []
    assert judge([node], 1, 8) == ["n1: offers GRES npu:8, the catalog says gpu:8"]


def test_pin_refuses_an_arm64_lock_rather_than_replace_its_wheels_with_amd64_ones(images):
    before = (images / MODELARTS / "lock.yaml").read_text()
    done = run("image", "pin", MODELARTS)
    out = " ".join(done.output.split())
    assert done.exit_code == 2, done.output
    assert "ascend.platform: image pin resolves for linux/amd64 only, and ascend-910b-modelarts is linux/arm64" in out
    assert (images / MODELARTS / "lock.yaml").read_text() == before


def test_an_npu_node_is_not_judged_by_nvidia_smi(monkeypatch):
    """The node judge reads nvidia-smi only: an NPU node expects no GPUs there, so it is not drained for lacking
    nvidia-smi (its NPUs' health is the Ascend judge's, not written yet)."""
    from goldenenv.catalog import health

    npu_node(monkeypatch)
    links = health.LinkFacts("huawei", "snt9b.test", 0, False, "test", None)
    monkeypatch.setattr(health, "link_facts", lambda: {("huawei", "snt9b.test"): links})
    assert health.expectations("huawei", "snt9b.test")["gpus"] == 0


def test_a_gpu_node_is_judged_by_nvidia_smi_as_before():
    from goldenenv.catalog import health

    assert health.expectations("aws", "p5.48xlarge")["gpus"] == 8


def test_a_cann_no_driver_table_pairs_is_said_unproven_and_a_cann_it_pairs_otherwise_is_refused():
    """The driver table holds ModelArts' pairs only: a CANN it has no row for (9.1.0) is a warning naming both sides,
    a CANN it pairs with another driver (8.2.RC1 with 24.1.0.3) refuses any other driver."""
    import importlib

    from goldenenv.accelerators.model import ERROR, WARNING

    rules = importlib.import_module("goldenenv.accelerators.ascend.rules")  # the package's `rules` is the record's

    community, modelarts = load(COMMUNITY).ascend, load(MODELARTS).ascend
    paired = next(r for r in rules.catalog.rows("ascend_driver") if r["cann"] == modelarts.cann)
    assert not [r for r in rules.catalog.rows("ascend_driver") if r["cann"] == community.cann], "a row now pairs it"
    (unproven,) = rules.check_node_driver(load(COMMUNITY), paired["driver"])
    assert unproven.severity == WARNING
    assert unproven.pins == (f"ascend.cann={community.cann}", f"driver={paired['driver']}")
    assert "unproven" in unproven.message
    (refused,) = rules.check_driver(load(MODELARTS), "25.2.1")
    assert refused.severity == ERROR
    assert f"driver {paired['driver']} with firmware {paired['firmware']}" in refused.message
