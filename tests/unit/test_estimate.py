"""`goldenenv estimate`: memory per GPU, FLOPs, time and cost, against figures worked out by hand or published."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import catalog, estimate
from goldenenv.cli import app

runner = CliRunner()
GiB = 2**30
DONE_WHEN = ["estimate", "--params", "13e9", "--tokens", "1e8", "--zero", "2", "--gpus-per-node", "8",
             "--nodes", "1", "--gpu", "H100-80GB", "--json"]


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# DeepSpeed "Memory Requirements" docs, t5-3b (2851M params, 32M largest layer), 1 node x 8 GPUs, per-GPU GB (2**30).
@pytest.mark.parametrize("zero, offload, offload_params, published_gib", [
    (2, False, False, 15.93),
    (2, True, False, 5.31),
    (3, False, False, 6.10),
    (3, True, False, 0.79),
    (3, True, True, 0.12),
])
def test_model_states_match_deepspeeds_published_estimates(zero, offload, offload_params, published_gib):
    w, g, o = estimate.model_states(2851e6, 8, zero, offload=offload, offload_params=offload_params,
                                    largest_layer_params=32e6)
    assert (w + g + o) / GiB == pytest.approx(published_gib, rel=0.01)


def test_zero_stages_by_hand_for_13b_on_8_gpus():
    n = 13e9
    assert sum(estimate.model_states(n, 8, 0)) == 208e9                    # 16 bytes/param: 2 + 2 + 12
    assert sum(estimate.model_states(n, 8, 2)) == 78e9                     # DeepSpeed: 4·N + 16·N/8
    assert sum(estimate.model_states(n, 8, 1)) == 78e9                     # one DeepSpeed estimator for stages 1-2
    assert sum(estimate.model_states(n, 8, 2, offload=True)) == 26e9       # 2·N
    assert sum(estimate.model_states(n, 8, 3, largest_layer_params=1e8)) == 4e8 + 29.25e9   # 4·L + 18·N/8
    weights, gradients, optimizer = estimate.model_states(n, 8, 0)
    assert (weights, gradients, optimizer) == (26e9, 26e9, 156e9)          # the fp32 master copy is in the 12


def test_done_when_command_reports_the_formulas():
    result = runner.invoke(app, DONE_WHEN)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["model_states_bytes"] == pytest.approx(78e9)
    assert doc["weights_bytes"] + doc["gradients_bytes"] + doc["optimizer_bytes"] == pytest.approx(78e9)
    assert doc["training_flops"] == pytest.approx(7.8e18)                  # 6 · 13e9 · 1e8
    # 7.8e18 / (8 GPUs · 989e12 · 0.4) / 3600 s
    assert doc["hours"] == pytest.approx(0.684614, rel=1e-5)
    assert doc["gpu_hours"] == pytest.approx(8 * 0.684614, rel=1e-5)
    for key in ("activations_bytes", "overhead_bytes", "fits", "cheapest", "options", "assumptions"):
        assert key in doc
    assert doc["overhead_bytes"] == 1.5 * GiB


def test_gpu_names_are_case_insensitive():
    assert run_json("--params", "1e9", "--tokens", "1e8", "--gpu", "h100-80gb")["gpu"] == "H100-80GB"


# Shape: 32 layers, hidden 4096, 32 heads, seq 2048, micro-batch 1, checkpointing (vocab 32000 by default).
# Activations: 2·s·b·h·L + s·b·h·(34 + 5·a·s/h) = 536,870,912 + 956,301,312 = 1,493,172,224 bytes.
# 80 GiB − activations − 1.5 GiB overhead = 82,795,560,960 bytes for model states.
SHAPE = ("--layers", "32", "--hidden", "4096", "--seq-len", "2048", "--micro-batch", "1", "--tokens", "1e9",
         "--gpus-per-node", "8", "--nodes", "1")


@pytest.mark.parametrize("zero, fits, too_big", [
    ("0", "5.17e9", "5.18e9"),     # 16·N ≤ 82,795,560,960 → N ≤ 5.1747e9
    ("1", "13.79e9", "13.80e9"),   # 4·N + 16·N/8 = 6·N → N ≤ 13.7993e9
    ("2", "13.79e9", "13.80e9"),
    ("3", "36.56e9", "36.57e9"),   # 4·131,072,000 + 18·N/8 → N ≤ 36.5650e9
])
def test_fit_boundary_on_an_80_gb_gpu_per_zero_stage(zero, fits, too_big):
    assert run_json("--params", fits, "--zero", zero, *SHAPE)["fits"]["H100-80GB"] is True
    assert run_json("--params", too_big, "--zero", zero, *SHAPE)["fits"]["H100-80GB"] is False


def test_activations_without_checkpointing_follow_korthikanti():
    doc = run_json("--params", "7e9", "--no-checkpointing", *SHAPE)
    assert doc["activations_bytes"] == 32 * 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)   # 30,601,641,984
    assert doc["activations_bytes"] == 30_601_641_984


def test_qlora_keeps_a_4_bit_base_and_trains_only_adapters():
    doc = run_json("--params", "7e9", "--tokens", "1e9", "--method", "qlora")
    # base 7e9 · 4.127 bits / 8 = 3,611,125,000 bytes; adapters 1 % = 7e7 params at 2 + 2 + 12 bytes
    assert doc["weights_bytes"] == pytest.approx(3_611_125_000 + 1.4e8)
    assert doc["gradients_bytes"] == pytest.approx(1.4e8)
    assert doc["optimizer_bytes"] == pytest.approx(8.4e8)
    assert doc["training_flops"] == pytest.approx(4 * 7e9 * 1e9 + 6 * 7e7 * 1e9)
    lora = run_json("--params", "7e9", "--tokens", "1e9", "--method", "lora")
    assert lora["weights_bytes"] == pytest.approx(14e9 + 1.4e8)


def test_catalog_peak_tflops_anchor_datasheet_figures():
    peaks = catalog.gpu_peak_tflops()
    assert peaks["H100-80GB"].bf16_dense_tflops == 989
    assert peaks["A100-80GB"].bf16_dense_tflops == 312
    assert set(peaks) == set(catalog.gpus())


def test_cheapest_option_meets_the_deadline_and_more_nodes_buy_time():
    relaxed = run_json("--params", "13e9", "--tokens", "2e10", "--zero", "3")
    tight = run_json("--params", "13e9", "--tokens", "2e10", "--zero", "3", "--deadline", "24")
    assert relaxed["cheapest"]["USD"]["nodes"] >= 1
    best = tight["cheapest"]["USD"]
    assert best["hours"] <= 24 and best["meets_deadline"] is True
    p5 = [o for o in tight["options"] if o["instance_type"] == "p5.48xlarge" and o["capacity"] == "on-demand"][0]
    relaxed_p5 = [o for o in relaxed["options"] if o["instance_type"] == "p5.48xlarge"][0]
    assert p5["nodes"] > relaxed_p5["nodes"]
    price = catalog.price("aws", "p5.48xlarge", "us-east-1")
    assert p5["cost"] == pytest.approx(price.usd_per_hour * p5["nodes"] * p5["hours"])
    assert all(o["cost"] >= best["cost"] for o in tight["options"]
               if o["currency"] == "USD" and o["cost"] is not None and o["meets_deadline"])


def test_multi_node_scaling_is_095_per_doubling():
    one = run_json("--params", "7e9", "--tokens", "1e10", "--gpu", "H100-80GB", "--nodes", "1")
    four = run_json("--params", "7e9", "--tokens", "1e10", "--gpu", "H100-80GB", "--nodes", "4")
    assert four["scaling_efficiency"] == pytest.approx(0.95**2)
    assert four["hours"] == pytest.approx(one["hours"] / 4 / 0.95**2)


@pytest.mark.parametrize("args, flag", [
    (["--params", "13e9", "--tokens", "-1"], "--tokens"),
    (["--params", "13e9", "--tokens", "1e8", "--gpu", "V100"], "--gpu"),
    (["--params", "13e9", "--tokens", "1e8", "--zero", "4"], "--zero"),
    (["--params", "13e9", "--tokens", "1e8", "--offload"], "--offload"),
    (["--params", "13e9", "--tokens", "1e8", "--method", "dora"], "--method"),
    (["--params", "13e9", "--tokens", "1e8", "--layers", "32"], "--hidden"),
    (["--params", "13e9", "--tokens", "1e8", "--plot", "out.pdf"], "--plot"),
    (["--tokens", "1e8"], "--params"),
])
def test_bad_input_exits_2_naming_the_flag(args, flag):
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2, result.output
    problem_lines = [line for line in result.output.splitlines() if line.strip().startswith("--")]
    assert len(problem_lines) == 1 and problem_lines[0].strip().startswith(flag), result.output


def test_zero_4_says_what_is_valid():
    result = runner.invoke(app, ["estimate", "--params", "1e9", "--tokens", "1e8", "--zero", "4"])
    assert "at most 3" in result.output


def test_spec_file_supplies_the_same_keys_and_flags_win(tmp_path):
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump({"params": 13e9, "tokens": 1e8, "zero": 2, "gpus_per_node": 8, "gpu": "h100-80gb"}))
    doc = run_json("--spec", str(spec))
    assert doc["model_states_bytes"] == pytest.approx(78e9) and doc["gpu"] == "H100-80GB"
    assert run_json("--spec", str(spec), "--zero", "0")["model_states_bytes"] == pytest.approx(208e9)
    spec.write_text(yaml.safe_dump({"params": 13e9, "tokens": 1e8, "zeroo": 2}))
    result = runner.invoke(app, ["estimate", "--spec", str(spec)])
    assert result.exit_code == 2 and "zeroo" in result.output


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<svg")])
def test_plot_writes_the_chart(tmp_path, suffix, magic):
    out = tmp_path / f"out{suffix}"
    result = runner.invoke(app, ["estimate", "--params", "13e9", "--tokens", "1e8", "--zero", "2",
                                 "--plot", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert magic in out.read_bytes()[:2000]
    assert "cheapest (USD)" in result.output and "optimizer" in result.output


def test_spot_is_offered_only_where_the_catalog_has_a_spot_figure():
    """costs.compute_price answers the on-demand price when it has no spot snapshot: that is no spot option."""
    doc = run_json("--params", "7e9", "--tokens", "1e9")
    spot = {(o["cloud"], o["instance_type"]) for o in doc["options"] if o["capacity"] == "spot"}
    for cloud, name in {(o["cloud"], o["instance_type"]) for o in doc["options"]}:
        snapshot = catalog.spot_price(cloud, name, "")
        assert ((cloud, name) in spot) == (snapshot is not None), (cloud, name)
