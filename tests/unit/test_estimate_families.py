"""NVIDIA and Ascend offers side by side in `goldenenv estimate`: each family's cheapest offer that fits, with each
device's and node's memory, what the run needs per device, the hours at the run's scaling and the cost, prices
marked unverified where the catalog says so. Expected figures are worked by hand from the catalog's rows."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from goldenenv import catalog
from goldenenv.cli import app

runner = CliRunner()
RUN = ("--model", "llama-3.1-8b", "--tokens", "1e9", "--zero", "3")


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["estimate", *args], env={"COLUMNS": "250"})
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def doc() -> dict:
    code, out = run(*RUN, "--json")
    assert code == 0, out
    return json.loads(out)


def ascend_types() -> list[tuple[str, str]]:
    vendor = {r["gpu"]: r["vendor"] for r in catalog.rows("gpus")}
    return [(r["cloud"], r["instance_type"]) for r in catalog.rows("instance_types") if vendor[r["gpu"]] == "huawei"]


def test_every_option_names_its_family_and_its_memory_per_device_and_node(doc):
    vendor = {r["gpu"]: r["vendor"] for r in catalog.rows("gpus")}
    usable = {r["gpu"]: float(r["usable_mib"]) / 1024 for r in catalog.rows("gpu_usable_memory")}
    for o in doc["options"]:
        assert o["accelerator"] == {"nvidia": "NVIDIA CUDA", "huawei": "Huawei Ascend"}[vendor[o["gpu"]]]
        assert o["usable_gib_per_device"] == pytest.approx(usable[o["gpu"]])
        assert o["usable_gib_per_node"] == pytest.approx(usable[o["gpu"]] * o["gpus_per_node"])


@pytest.mark.skipif(not ascend_types(), reason="no Ascend instance type in the catalog")
def test_ascend_sits_beside_nvidia_with_its_hours_and_its_unverified_price(doc):
    families = {row["family"] for row in doc["side_by_side"]}
    assert {"NVIDIA CUDA", "Huawei Ascend"} <= families
    [npu] = [row for row in doc["side_by_side"] if row["family"] == "Huawei Ascend"]
    assert (npu["device_word"], npu["devices_per_node"], npu["usable_gib_per_device"]) == ("NPU", 8, 64)
    assert npu["usable_gib_per_node"] == 512 and npu["price_verified"] is False
    # 6·N·T over 8 NPUs at the catalog's peak and the default MFU 0.4, one node: perfect scaling, billed in tenths
    peak = catalog.gpu_peak_tflops()[npu["device"]].bf16_dense_tflops
    hours = 6 * doc["params"] * 1e9 / (8 * peak * 1e12 * 0.4) / 3600
    assert npu["nodes"] == 1 and npu["hours"] == pytest.approx(hours, abs=0.1)
    price = catalog.price(*ascend_types()[0], npu["price_region"])
    assert npu["cost"] == pytest.approx(price.usd_per_hour * npu["hours"])


def test_the_same_fleet_shape_needs_the_same_memory_per_device_whatever_the_family(doc):
    """Memory per device depends on the model and the fleet's device count, not on whose devices they are."""
    one_node_of_eight = {o["accelerator"]: o["needed_gib_per_device"] for o in doc["options"]
                         if o["gpus_per_node"] == 8 and o["nodes"] == 1}
    assert len(set(round(v, 6) for v in one_node_of_eight.values())) == 1


@pytest.mark.skipif(not ascend_types(), reason="no Ascend instance type in the catalog")
def test_the_cli_prints_the_families_side_by_side():
    code, out = run(*RUN)
    assert code == 0
    table = out[out.index("accelerator families side by side"):]
    assert "NVIDIA CUDA" in table and "Huawei Ascend" in table
    assert "8 x 910B3 NPU" in table and "(unverified price)" in table


def test_a_family_that_cannot_hold_the_run_says_why():
    """400 B parameters without ZeRO fit no single device's memory at any node count: each family says so."""
    code, out = run("--params", "400e9", "--tokens", "1e9", "--json")
    assert code == 0
    rows = {row["family"]: (row["cloud"], row["why_none"]) for row in json.loads(out)["side_by_side"]}
    assert rows["NVIDIA CUDA"] == (None, "the run does not fit its devices and hosts at any node count tried")
    assert all(row == rows["NVIDIA CUDA"] for row in rows.values())


def test_plan_shows_the_families_for_a_stack_that_sizes_its_run(tmp_path):
    """A stack whose goldenenv:run.estimate names a model: plan prints the same side-by-side table after its cost
    (the shipped stacks size no run, so their plans print as before)."""
    import yaml

    from goldenenv.plan import STACKS

    doc = yaml.safe_load((STACKS / "Pulumi.aws-p5-2node.yaml").read_text())
    doc["config"]["goldenenv:run"] = {"hours": 10, "estimate": {"model": "llama-3.1-8b", "tokens": 1e9, "zero": 3}}
    (tmp_path / "Pulumi.sized.yaml").write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["plan", "-s", "sized", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "250"})
    assert "accelerator families side by side" in result.output, result.output[-2000:]
    table = result.output[result.output.index("accelerator families side by side"):]
    assert "NVIDIA CUDA" in table and ("Huawei Ascend" in table) == bool(ascend_types())
