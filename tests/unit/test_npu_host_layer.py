"""An NPU pool's host layer comes from its accelerator family: a Huawei Ascend Lite Server pool boots the catalog's
Snt9B image with the NPU driver the lock pins and needs no NVIDIA driver or container toolkit; an image whose NPU
driver is below the lock's is refused naming both; a CUDA pool on the same cloud plans as before.
"""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

import shipped
from goldenenv import catalog, compat
from goldenenv.catalog import files
from goldenenv.cli import app
from goldenenv.images import host
from goldenenv.lifecycle import load_spec

NPU_STACK, GPU_STACK = "huawei-snt9b-2node", "huawei-gpu-dev"
LOCKED_DRIVER = "24.1.0.3"
"""images/ascend-910b-modelarts/lock.yaml ascend.driver (ModelArts 7.3.0's recommended Snt9B driver)."""


def test_a_lite_server_pool_needs_the_npu_driver_from_its_image_and_no_nvidia_toolkit():
    spec = load_spec(NPU_STACK)
    found = host.layer(spec, spec.nodes[0])
    assert found.base == "hce2-snt9b-24.1.0.3"
    by = {p.need: p for p in found.provided}
    assert set(by) == {host.ENGINE, "driver:ascend"}
    assert by["driver:ascend"].by == host.IMAGE and by["driver:ascend"].version == LOCKED_DRIVER
    assert not found.missing and not found.install
    (checked,) = compat.check_stack(spec)
    assert checked.host.label == f"host image hce2-snt9b-24.1.0.3 (driver {LOCKED_DRIVER})"
    assert checked.ok and checked.driver == LOCKED_DRIVER
    assert host.head_layer(spec).base == "ubuntu-2204"  # the head is an x86 ECS, never the NPU image


def test_a_gpu_pool_on_the_same_cloud_still_gets_nvidias_driver_and_toolkit():
    spec = load_spec(GPU_STACK)
    found = host.layer(spec, spec.nodes[0])
    assert found.base == "ubuntu-2204"
    assert [p.need for p in found.provided] == [host.ENGINE, host.DRIVER, host.TOOLKIT]


def test_an_image_whose_npu_driver_is_below_the_locks_fails_plan_strict_naming_both(tmp_path):
    doc = yaml.safe_load((shipped.STACKS / f"Pulumi.{NPU_STACK}.yaml").read_text())
    doc["config"]["goldenenv:nodes"]["hostImage"] = "hce2-snt9b"
    # the lock that pins a driver (Huawei's table's), without the queue its Slurm cannot run
    doc["config"].update({"goldenenv:image": {"lock": "ascend-910b-modelarts"}, "goldenenv:scheduler": "none"})
    (tmp_path / f"Pulumi.{NPU_STACK}.yaml").write_text(yaml.safe_dump(doc))
    (checked,) = compat.check_stack(load_spec(NPU_STACK, tmp_path))
    (conflict,) = [c for c in checked.conflicts if c.rule == "ascend-driver"]
    assert conflict.pins == (f"ascend.driver={LOCKED_DRIVER}", "driver=23.0.6")
    done = CliRunner().invoke(app, ["plan", "-s", NPU_STACK, "--strict", "--stacks-dir", str(tmp_path)],
                              env={"COLUMNS": "400"})
    assert done.exit_code == 1, done.output
    assert "error compat:ascend-driver" in done.output and "node's driver is 23.0.6, below it" in done.output


def test_clouds_whose_host_images_state_no_npu_driver_read_it_empty():
    assert catalog.host_images("huawei")["hce2-snt9b"].npu_driver == "23.0.6"
    for cloud in ("aws", "alicloud", "azure", "gcp", "tencent"):
        assert all(image.npu_driver == "" for image in catalog.host_images(cloud).values())


def test_a_file_may_add_columns_only_at_the_end(tmp_path, monkeypatch):
    shared, added, moved = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    shared.write_text("name,source\nx,here\n")
    added.write_text("name,source,extra\ny,there,1\n")
    moved.write_text("extra,name,source\n1,z,there\n")
    monkeypatch.setattr(files, "_parts", lambda table: [(None, shared), (("cloud", "b"), added)])
    assert files._read.__wrapped__("t") == ({"cloud": "", "name": "x", "source": "here", "extra": ""},
                                            {"cloud": "b", "name": "y", "source": "there", "extra": "1"})
    monkeypatch.setattr(files, "_parts", lambda table: [(None, shared), (("cloud", "c"), moved)])
    try:
        files._read.__wrapped__("t")
    except ValueError as e:
        assert "a file may only add columns at the end" in str(e)
    else:
        raise AssertionError("a column added before the others was read")
