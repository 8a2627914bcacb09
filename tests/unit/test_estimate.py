"""`goldenenv estimate`: memory per GPU and host, FLOPs, time and cost, against DeepSpeed's estimator functions, the
papers' equations, the seeds' worked examples and figures worked out by hand."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import catalog, costs, estimate, project
from goldenenv.cli import app
from goldenenv.estimate import footprint, network, shapes
from goldenenv.images import lock as locks

runner = CliRunner()
GiB = 2**30


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def states(*args: str) -> float:
    return run_json("--tokens", "1e8", *args)["model_states_bytes"]


# ---------------------------------------------------------------- DeepSpeed's formulas, for the version in use

def test_zero2_is_deepspeeds_current_formula_and_zero1_keeps_the_older_shape():
    """13e9 on 8 GPUs: 2·N + 18·N/8 = 55.25e9 since DeepSpeed 0.14.3 (PR #5099); 4·N + 16·N/8 = 78.0e9 before it
    and for ZeRO-1 in every release."""
    base = ("--params", "13e9", "--gpus-per-node", "8")
    assert states(*base, "--zero", "2", "--deepspeed", "0.16.9") == 55.25e9
    assert states(*base, "--zero", "1", "--deepspeed", "0.16.9") == 78.0e9
    assert states(*base, "--zero", "2", "--deepspeed", "0.14.2") == 78.0e9
    assert states(*base, "--zero", "2", "--deepspeed", "0.14.3") == 55.25e9
    assert states(*base, "--zero", "2") == 55.25e9                        # no lock: the newest formulas known
    assert states(*base, "--zero", "0") == 208e9                          # 16 bytes/param: 2 + 2 + 12


def test_the_locks_deepspeed_pin_chooses_the_formula():
    pinned = str(locks.load("h100-torch").deepspeed)
    doc = run_json("--params", "13e9", "--tokens", "1e8", "--zero", "2", "--gpus-per-node", "8",
                   "--lock", "h100-torch")
    assert doc["deepspeed"] == pinned and pinned in doc["deepspeed_from"]
    expected = 55.25e9 if catalog.version_tuple(pinned) >= (0, 14, 3) else 78.0e9
    assert doc["model_states_bytes"] == expected


# DeepSpeed "Memory Requirements" docs (docs/code-docs/source/memory.rst), t5-3b: 2851M params, 32M largest layer,
# 1 node x 8 GPUs, "GB" = 2**30 bytes. The docs predate 0.14.3 for ZeRO-2 (its 15.93 is 4·N + 16·N/8).
@pytest.mark.parametrize("stage, offload, offload_params, zero_init, per_cpu, per_gpu", [
    (2, True, False, True, 127.48, 5.31),
    (2, False, False, True, 127.48, 15.93),
    (3, True, True, True, 71.71, 0.12),
    (3, True, True, False, 127.48, 0.12),
    (3, True, False, True, 63.74, 0.79),
    (3, True, False, False, 127.48, 0.79),
    (3, False, False, True, 1.47, 6.10),
    (3, False, False, False, 127.48, 6.10),
])
def test_rows_reproduce_deepspeeds_published_t5_3b_table(stage, offload, offload_params, zero_init, per_cpu, per_gpu):
    row = footprint.estimator(stage, "bf16", offload, offload_params, zero_init, deepspeed=(0, 9, 0))
    assert footprint.gpu_bytes(row, 2851e6, 32e6, 8) / GiB == pytest.approx(per_gpu, rel=0.01)
    assert footprint.host_bytes(row, 2851e6, 32e6, 8, 1) / GiB == pytest.approx(per_cpu, rel=0.03)


def test_the_table_shows_every_stage_and_offload_variant_with_the_host_checked():
    doc = run_json("--params", "13e9", "--tokens", "1e8", "--zero", "3", "--instance-type", "p4de.24xlarge")
    rows = doc["zero_table"]
    variants = {(r["zero"], r["offload_optimizer"], r["offload_params"], r["zero_init"]) for r in rows}
    assert {(0, False, False, True), (1, True, False, True), (2, False, False, True), (3, True, True, False)} <= variants
    assert sum(r["chosen"] for r in rows) == 1
    host = catalog.instance_type("aws", "p4de.24xlarge").memory_gib * GiB
    for r in rows:
        assert r["host_memory"] == estimate.verdict(r["host_bytes_per_node"], host, 0.10)
    # ZeRO-2 offload on 8 GPUs: DeepSpeed's host column is N·max(4·8, 16)·1.5 bytes per node
    offload = next(r for r in rows if (r["zero"], r["offload_optimizer"]) == (2, True))
    assert offload["host_bytes_per_node"] == 13e9 * 32 * 1.5


def test_host_memory_beyond_the_instance_does_not_fit():
    """ZeRO-3 with everything offloaded and zero_init off: N·max(4·gpus_per_node, 18)·1.5 per node; 70B on one
    p4de (1152 GiB) needs 70e9·32·1.5 = 3.36e12 bytes of host memory."""
    doc = run_json("--model", "llama-2-70b", "--tokens", "1e8", "--zero", "3", "--offload", "--offload-params",
                   "--no-zero-init", "--instance-type", "p4de.24xlarge")
    assert doc["host_bytes_per_node"] == int(catalog.models()["llama-2-70b"].params * 32 * 1.5)
    p4de = next(o for o in doc["options"] if o["instance_type"] == "p4de.24xlarge")
    assert p4de["host_memory"] == "no" and not p4de["fits"]


# ---------------------------------------------------------------- model shapes and activations

def test_catalog_models_count_their_published_parameters():
    """Anchors: Llama-2-7B 6,738,415,616 and Llama-2-70B 68,976,648,192 parameters counted from the shape."""
    assert shapes.from_catalog("llama-2-7b").counted_params == 6_738_415_616
    assert shapes.from_catalog("llama-2-70b").counted_params == 68_976_648_192
    for name, row in catalog.models().items():
        assert shapes.from_catalog(name).counted_params == pytest.approx(row.params, rel=0.01), name


def test_a_config_json_gives_the_same_shape_as_the_catalog(tmp_path):
    row = catalog.models()["llama-3.1-8b"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_act": "silu", "num_hidden_layers": row.layers, "hidden_size": row.hidden,
        "num_attention_heads": row.heads, "num_key_value_heads": row.kv_heads,
        "intermediate_size": row.intermediate, "vocab_size": row.vocab, "tie_word_embeddings": False}))
    by_file = run_json("--config", str(config), "--tokens", "1e9")
    by_name = run_json("--model", "llama-3.1-8b", "--tokens", "1e9")
    assert by_file["activations_bytes"] == by_name["activations_bytes"]
    assert by_file["shape"]["params"] == pytest.approx(row.params, rel=0.01)


def test_eager_attention_without_dropout_or_gqa_is_korthikantis_equation(tmp_path):
    """A GPT-style config (two-matrix GELU MLP of 4h, dropout, no grouped-query attention) with eager attention and
    no checkpointing keeps s·b·h·(34 + 5·a·s/h) bytes per layer (Korthikanti et al. 2022, eq. 1)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 32, "n_embd": 4096, "n_head": 32,
                                  "vocab_size": 50257, "resid_pdrop": 0.1, "attn_pdrop": 0.1}))
    doc = run_json("--config", str(config), "--tokens", "1e9", "--attention", "eager", "--no-checkpointing",
                   "--seq-len", "2048")
    assert doc["activations_bytes"] == 32 * 2048 * 4096 * (34 + 5 * 32 * 2048 / 4096)
    assert doc["logits_bytes"] == 6 * 2048 * 50257                           # 16-bit logits + the fp32 copy


def test_flash_attention_drops_the_quadratic_term():
    flash = run_json("--model", "llama-2-7b", "--tokens", "1e9", "--no-checkpointing")
    eager = run_json("--model", "llama-2-7b", "--tokens", "1e9", "--no-checkpointing", "--attention", "eager")
    s, b, a, layers = 4096, 1, 32, 32
    assert eager["activations_bytes"] - flash["activations_bytes"] == layers * (2 * a * s * s * b - 4 * a * s * b)
    assert eager["activations_bytes"] / flash["activations_bytes"] > 2.5     # the s² softmax output dominates


def test_grouped_query_attention_keeps_smaller_keys_and_values():
    mha = run_json("--model", "llama-2-7b", "--tokens", "1e9", "--no-checkpointing")
    gqa = run_json("--model", "llama-2-7b", "--kv-heads", "8", "--tokens", "1e9", "--no-checkpointing")
    # K and V: 4·s·b·h_kv per layer; h_kv falls from 4096 to 1024
    assert mha["activations_bytes"] - gqa["activations_bytes"] == 32 * 4 * 4096 * (4096 - 1024)


# ---------------------------------------------------------------- usable memory, headroom, tight

def test_usable_memory_is_what_nvidia_smi_reports():
    """Anchors: nvidia-smi's MiB on A10G 23028 (22.49 GiB), L40S 46068, H100 SXM 81559 (79.65 GiB), H200 143771."""
    mib = {gpu: value for gpu, (value, _) in catalog.gpu_usable_mib().items()}
    assert (mib["A10G"], mib["L40S"], mib["H100-80GB"], mib["H200-141GB"]) == (23028, 46068, 81559, 143771)
    assert set(mib) == set(catalog.gpus())
    for gpu, (value, source) in catalog.gpu_usable_mib().items():
        assert value * 2**20 < catalog.gpus()[gpu].memory_gib * 1.0e9 * 1.08 and source.strip()


def test_a_fit_at_99_percent_is_tight_and_headroom_is_a_flag():
    usable = estimate.gpu_usable_bytes("H100-80GB")
    assert estimate.verdict(0.99 * usable, usable, 0.10) == "tight"
    assert estimate.verdict(0.89 * usable, usable, 0.10) == "fits"
    assert estimate.verdict(1.01 * usable, usable, 0.10) == "no"
    assert estimate.verdict(0.99 * usable, usable, 0.0) == "fits"
    # 13e9 ZeRO-1 on 8 H100s needs about 77 GiB of 79.65: tight by default, fits with no headroom
    args = ("--params", "13e9", "--tokens", "1e8", "--zero", "1", "--gpus-per-node", "8", "--gpu", "H100-80GB")
    assert run_json(*args)["fits"]["H100-80GB"] == "tight"
    assert run_json(*args, "--headroom", "0")["fits"]["H100-80GB"] == "fits"


def test_the_a10_fleet_that_fit_at_nominal_memory_no_longer_does():
    """22.96 GiB per GPU (the issue's 7-node A10 fleet) is below the nominal 24 GB, above nvidia-smi's 22.49 GiB."""
    usable = estimate.gpu_usable_bytes("A10G")
    assert usable / GiB == pytest.approx(22.49, abs=0.005)
    assert 22.96 * GiB < catalog.gpus()["A10G"].memory_gib * GiB
    assert estimate.verdict(22.96 * GiB, usable, 0.10) == "no"
    doc = run_json("--model", "llama-2-7b", "--tokens", "1e9", "--zero", "3", "--instance-type", "g5.xlarge",
                   "--nodes", "7")
    assert doc["fits"]["A10G"] == estimate.verdict(doc["total_bytes_per_gpu"], usable, 0.10)
    g5 = next(o for o in doc["options"] if o["instance_type"] == "g5.xlarge")
    m = estimate.memory(estimate.request_from({"model": "llama-2-7b", "tokens": 1e9, "zero": 3})[0], 1, g5["nodes"])
    assert m.total <= usable * 0.9 and g5["gpu_memory"] == "fits"


# ---------------------------------------------------------------- the network and the cheapest offer

def test_multi_node_zero3_without_rdma_is_never_recommended_unless_allowed():
    args = ("--model", "llama-2-7b", "--tokens", "2e9", "--zero", "3", "--deadline", "20")
    doc = run_json(*args)
    flagged = [o for o in doc["options"] if o["tcp_zero3"]]
    assert flagged, "some option is a multi-node ZeRO-3 fleet without RDMA"
    for best in doc["cheapest"].values():
        it = catalog.instance_type(best["cloud"], best["instance_type"])
        assert best["nodes"] == 1 or it.has_rdma, best
    allowed = run_json(*args, "--allow-tcp")
    assert {o["instance_type"] for o in allowed["options"] if o["tcp_zero3"]} == {o["instance_type"] for o in flagged}
    text = runner.invoke(app, ["estimate", *args], env={"COLUMNS": "200"}).output
    assert "ZeRO-3 over TCP" in text and "--allow-tcp" in text


def test_scaling_depends_on_the_interconnect():
    """The same ZeRO-3 run on two nodes: EFA at 400 Gbps keeps more of perfect scaling than TCP at 10 Gbps, and the
    efficiency is compute ÷ (compute + communication not overlapped), from the catalog's links."""
    args = ("--model", "llama-2-7b", "--tokens", "1e9", "--zero", "3", "--nodes", "2")
    efa = run_json(*args, "--instance-type", "p4d.24xlarge")
    tcp = run_json(*args, "--instance-type", "g5.xlarge")
    assert efa["scaling_efficiency"] > 0.5 > tcp["scaling_efficiency"]
    assert "EFA 400 Gbps" in efa["scaling_basis"] and "TCP 10 Gbps" in tcp["scaling_basis"]
    # g5.xlarge: 3·N·2 bytes·(G-1)/G per step over 10 Gbps ÷ 8 × the TCP share; compute 6·N·s on one A10G
    n, s = 6_738_415_616, 4096
    comm = 3 * n * 2 * 0.5 / (10 / 8 * network.TCP_EFFICIENCY * 1e9)
    compute = 6 * n * s / (catalog.gpu_peak_tflops()["A10G"].bf16_dense_tflops * 1e12 * estimate.DEFAULT_MFU)
    exposed = max(0, comm - network.OVERLAP * compute)
    assert tcp["scaling_efficiency"] == pytest.approx(compute / (compute + exposed))


def test_modelled_bus_bandwidth_stays_below_the_measured_references():
    """nccl-tests all_reduce on 2 × p5 (catalog busbw_refs): the model is conservative but not off by more than 2x."""
    link = network.links("aws", "p5.48xlarge")
    for ref in catalog.busbw_references():
        if ref.instance_type == "p5.48xlarge" and ref.message_bytes >= 1 << 30:
            assert ref.busbw_gbytes_per_s / 2 <= link.busbw(ref.nodes) <= ref.busbw_gbytes_per_s


def test_more_nodes_buy_time_when_the_deadline_asks_for_it():
    relaxed = run_json("--params", "13e9", "--tokens", "2e10", "--zero", "3")
    tight = run_json("--params", "13e9", "--tokens", "2e10", "--zero", "3", "--deadline", "24")
    p5 = next(o for o in tight["options"] if o["instance_type"] == "p5.48xlarge" and o["capacity"] == "on-demand")
    relaxed_p5 = next(o for o in relaxed["options"] if o["instance_type"] == "p5.48xlarge")
    assert p5["nodes"] > relaxed_p5["nodes"] and p5["hours"] <= 24
    price = catalog.price("aws", "p5.48xlarge", "us-east-1")
    assert p5["cost"] == pytest.approx(price.usd_per_hour * p5["nodes"] * p5["hours"])     # re-adds by hand
    best = tight["cheapest"]["USD"]
    assert all(o["cost"] >= best["cost"] for o in tight["options"]
               if o["currency"] == "USD" and o["cost"] is not None and o["meets_deadline"] and not o["tcp_zero3"])


# ---------------------------------------------------------------- the user's own figures, four-part cost

def test_the_seeds_worked_example_to_the_unit():
    """4 × A100 at 30 CNY per card-hour, 20 h, efficiency 0.7 → 28.6 h and 3,432 CNY."""
    args = ["estimate", "--gpu", "A100-80GB", "--gpus-per-node", "4", "--hours", "20", "--price", "30",
            "--currency", "CNY", "--scaling-efficiency", "0.7"]
    doc = run_json(*args[1:])
    assert doc["hours"] == 28.6 and doc["cost"] == 3432
    text = runner.invoke(app, args, env={"COLUMNS": "200"}).output
    assert "28.6 h" in text and "3,432.00 CNY" in text


def test_estimate_prices_compute_storage_transfer_and_idle_as_plan_does():
    doc = run_json("--model", "llama-2-7b", "--tokens", "1e9", "--instance-type", "p5.48xlarge", "--dataset-gb",
                   "1000", "--egress-gb", "200", "--idle-hours", "5")
    lines = {line["kind"]: line for line in doc["cost_lines"]}
    assert set(lines) == {"compute", "storage", "network", "idle"}
    region = next(r["region"] for r in catalog.rows("prices") if r["instance_type"] == "p5.48xlarge")
    s3 = catalog.service_price(costs.STORAGE, "aws", "object-store", region, "standard").price
    egress = catalog.service_price(costs.NETWORK, "aws", "internet-egress", region).price
    hourly = catalog.price("aws", "p5.48xlarge", region).usd_per_hour
    assert lines["compute"]["amount"] == pytest.approx(doc["hours"] * hourly)
    assert lines["storage"]["amount"] == pytest.approx(1000 * s3)
    assert lines["network"]["amount"] == pytest.approx(200 * egress)
    assert lines["idle"]["amount"] == pytest.approx(5 * hourly)
    assert doc["cost"] == pytest.approx(sum(line["amount"] for line in doc["cost_lines"]))


def test_unverified_prices_are_marked_in_the_text():
    text = runner.invoke(app, ["estimate", "--params", "7e9", "--tokens", "1e9"], env={"COLUMNS": "220"}).output
    unverified = [o for o in run_json("--params", "7e9", "--tokens", "1e9")["options"]
                  if o["price_verified"] is False and o["price_per_hour"] is not None]
    assert unverified and "* unverified in the catalog" in text
    row = next(line for line in text.splitlines() if unverified[0]["instance_type"] in line
               and unverified[0]["capacity"] in line)
    assert "*" in row


# ---------------------------------------------------------------- bad input, spec files, stacks

@pytest.mark.parametrize("args, flag", [
    (["--params", "inf", "--tokens", "1e8"], "--params"),
    (["--params", "13e9", "--tokens", "inf"], "--tokens"),
    (["--params", "13e9", "--tokens", "1e8", "--seq-len", "inf"], "--seq-len"),
    (["--params", "13e9", "--tokens", "1e8", "--layers", "inf", "--hidden", "4096"], "--layers"),
    (["--params", "13e9", "--tokens", "nan"], "--tokens"),
    (["--params", "1e300", "--tokens", "1e8"], "--params"),
    (["--params", "13e9", "--tokens", "-1"], "--tokens"),
    (["--params", "13e9", "--tokens", "1e8", "--mfu", "1.5"], "--mfu"),
    (["--params", "13e9", "--tokens", "1e8", "--headroom", "1"], "--headroom"),
    (["--params", "13e9", "--tokens", "1e8", "--scaling-efficiency", "0"], "--scaling-efficiency"),
    (["--params", "13e9", "--tokens", "1e8", "--price", "-3"], "--price"),
    (["--params", "13e9", "--tokens", "1e8", "--egress-gb", "inf"], "--egress-gb"),
    (["--params", "13e9", "--tokens", "1e8", "--gpu", "V100"], "--gpu"),
    (["--params", "13e9", "--tokens", "1e8", "--instance-type", "p9.huge"], "--instance-type"),
    (["--params", "13e9", "--tokens", "1e8", "--zero", "4"], "--zero"),
    (["--params", "13e9", "--tokens", "1e8", "--offload"], "--offload"),
    (["--params", "13e9", "--tokens", "1e8", "--method", "dora"], "--method"),
    (["--params", "13e9", "--tokens", "1e8", "--attention", "sdpa"], "--attention"),
    (["--params", "13e9", "--tokens", "1e8", "--layers", "32"], "--hidden"),
    (["--params", "13e9", "--tokens", "1e8", "--deepspeed", "latest"], "--deepspeed"),
    (["--params", "13e9", "--tokens", "1e8", "--model", "gpt-5"], "--model"),
    (["--params", "13e9", "--tokens", "1e8", "--plot", "out.pdf"], "--plot"),
    (["--params", "13e9", "--tokens", "1e8", "--plot", "no/such/folder/out.png"], "--plot"),
    (["--params", "13e9", "--tokens", "1e8", "--currency", "CNY"], "--currency"),
    (["--tokens", "1e8"], "--params"),
])
def test_bad_input_exits_2_naming_the_flag(args, flag):
    result = runner.invoke(app, ["estimate", *args])
    assert result.exit_code == 2, result.output
    problem_lines = [line for line in result.output.splitlines() if line.strip().startswith("--")]
    assert len(problem_lines) == 1 and problem_lines[0].strip().startswith(flag), result.output


def test_a_bad_config_json_names_the_file_and_key(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 32, "hidden_size": 4096}))
    result = runner.invoke(app, ["estimate", "--config", str(config), "--tokens", "1e8"])
    assert result.exit_code == 2 and "num_attention_heads" in result.output and "config.json" in result.output
    config.write_text("{not json")
    assert runner.invoke(app, ["estimate", "--config", str(config), "--tokens", "1e8"]).exit_code == 2


def test_json_is_valid_at_the_edges_of_every_range():
    result = runner.invoke(app, ["estimate", "--params", "1e14", "--tokens", "1e16", "--gpu", "A10", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert math.isfinite(doc["training_flops"])


@pytest.mark.parametrize("key, value, words", [
    ("offload", "maybe", "write true or false"),
    ("checkpointing", "sometimes", "write true or false"),
    ("zero", True, "is not a whole number"),
    ("allow_tcp", [True], "write one (true or false)"),
    ("params", [1], "write one (a number)"),
])
def test_spec_values_of_the_wrong_type_exit_2_naming_the_key(tmp_path, key, value, words):
    """yes/no and quoted 'false' are booleans like true/false (tests/unit/test_estimate_inputs.py); these are not."""
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump({"params": 13e9, "tokens": 1e8, "zero": 2, key: value}))
    result = runner.invoke(app, ["estimate", "--spec", str(spec)])
    assert result.exit_code == 2, result.output
    assert f"{key}:" in result.output and words in result.output and "run.yaml" in result.output


def test_spec_file_supplies_the_same_keys_and_flags_win(tmp_path):
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump({"params": 13e9, "tokens": 1e8, "zero": 1, "gpus_per_node": 8,
                                    "gpu": "h100-80gb", "offload": False, "checkpointing": True}))
    doc = run_json("--spec", str(spec))
    assert doc["model_states_bytes"] == pytest.approx(78e9) and doc["gpu"] == "H100-80GB"
    assert run_json("--spec", str(spec), "--zero", "0")["model_states_bytes"] == pytest.approx(208e9)
    spec.write_text(yaml.safe_dump({"params": 13e9, "tokens": 1e8, "zeroo": 2}))
    result = runner.invoke(app, ["estimate", "--spec", str(spec)])
    assert result.exit_code == 2 and "zeroo" in result.output


def test_a_stack_supplies_its_pool_lock_and_run(tmp_path, monkeypatch):
    from goldenenv.plan import STACKS
    doc = yaml.safe_load((STACKS / "Pulumi.aws-p5-2node.yaml").read_text())
    doc["config"]["goldenenv:run"] = {"hours": 10, "scalingEfficiency": 0.8, "egressGb": 50,
                                      "estimate": {"model": "llama-2-13b", "tokens": 1e9, "zero": 2}}
    (tmp_path / "Pulumi.yaml").write_text("name: probe\nruntime: python\n")
    (tmp_path / "Pulumi.probe.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(project, "_current", None)  # -s makes the project found here the current one
    out = run_json("-s", "probe")
    pool = doc["config"]["goldenenv:nodes"]
    pool = pool[0] if isinstance(pool, list) else pool
    assert out["instance_type"] == pool["instanceType"] and out["nodes"] == pool["count"]
    lock = doc["config"]["goldenenv:image"]["lock"]
    assert out["deepspeed"] == str(locks.load(lock).deepspeed)
    assert out["scaling_efficiency"] == 0.8 and out["shape"]["name"] == "llama-2-13b"
    assert {line["kind"] for line in out["cost_lines"]} >= {"compute", "network"}
    doc["config"]["goldenenv:run"]["estimate"]["offload"] = "maybe"
    (tmp_path / "Pulumi.probe.yaml").write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["estimate", "-s", "probe"])
    assert result.exit_code == 2 and "goldenenv:run.estimate" in result.output and "offload" in result.output


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<svg")])
def test_plot_writes_the_chart(tmp_path, suffix, magic):
    out = tmp_path / f"out{suffix}"
    result = runner.invoke(app, ["estimate", "--params", "13e9", "--tokens", "1e8", "--zero", "2",
                                 "--plot", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert magic in out.read_bytes()[:2000]
    assert "cheapest (USD)" in result.output and "model states" in result.output


def test_spot_is_offered_only_where_the_catalog_has_a_spot_figure():
    """costs.compute_price answers the on-demand price when it has no spot snapshot in the region: that is no spot
    option."""
    doc = run_json("--params", "7e9", "--tokens", "1e9")
    spot = {(o["cloud"], o["instance_type"]) for o in doc["options"] if o["capacity"] == "spot"}
    priced = {(o["cloud"], o["instance_type"]): o["price_region"] for o in doc["options"]
              if o["capacity"] == "on-demand" and o["price_region"]}
    for (cloud, name), region in priced.items():
        assert ((cloud, name) in spot) == (catalog.spot_price(cloud, name, region) is not None), (cloud, name)


def test_training_flops_are_six_n_t_and_the_time_follows():
    doc = run_json("--params", "13e9", "--tokens", "1e8", "--gpus-per-node", "8", "--gpu", "H100-80GB")
    assert doc["training_flops"] == pytest.approx(7.8e18)
    assert doc["ideal_hours"] == pytest.approx(7.8e18 / (8 * 989e12 * 0.4) / 3600)
    assert doc["hours"] == math.ceil(doc["ideal_hours"] / doc["scaling_efficiency"] * 10) / 10


def test_qlora_trains_the_adapters_described_over_a_4_bit_base():
    """PEFT's defaults (r=8 on q_proj, v_proj) unless described; the full rule is tests/unit/test_estimate_lora.py."""
    qlora = run_json("--model", "llama-2-7b", "--tokens", "1e9", "--method", "qlora")
    assert qlora["peft"]["trainable_params"] == 4_194_304 and qlora["peft"]["assumed"]
    n = catalog.models()["llama-2-7b"].params                                # N as the catalog publishes it
    assert qlora["training_flops"] == pytest.approx(4 * n * 1e9 + 6 * 4_194_304 * 1e9)