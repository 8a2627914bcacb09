"""`goldenenv estimate` for LoRA and QLoRA as PEFT builds them and bitsandbytes stores them: adapter counts per
module from the model's shape, against PEFT's own print_trainable_parameters output, and a QLoRA footprint whose
embeddings and output layer stay 16-bit."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from goldenenv.cli import app

runner = CliRunner()
SEVEN = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", "--tokens", "1e8", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def bad(*args: str) -> str:
    result = runner.invoke(app, ["estimate", "--tokens", "1e8", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.output


# ---------------------------------------------------------------- PEFT's own counts

@pytest.mark.parametrize("model, rank, targets, trainable, all_params", [
    # Llama-2-7b, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]): Meta's llama-recipes quickstart notebook
    # prints "trainable params: 4194304 || all params: 6742609920 || trainable%: 0.06220594176090199"
    # https://github.com/meta-llama/llama-recipes/blob/6f7383600a0a0125cab7b31b3edf7c31f93502a6/examples/quickstart.ipynb
    ("llama-2-7b", "8", "q_proj,v_proj", 4_194_304, 6_742_609_920),
    # Llama-3(.1)-8B, r=16 on the seven projections: "trainable params: 41,943,040 || all params: 8,072,204,288 ||
    # trainable%: 0.5196", printed verbatim in public PEFT tutorials (ten copies found by the GitHub code index);
    # the base's 8,030,261,248 is NVIDIA-NeMo/Automodel's count of Llama-3.1-8B,
    # https://github.com/NVIDIA-NeMo/Automodel/pull/1354
    ("llama-3.1-8b", "16", SEVEN, 41_943_040, 8_072_204_288),
    # Llama-2-7b in 4-bit, LoraConfig(r=16, target_modules="all-linear"): "trainable params: 39,976,960 || all
    # params: 6,778,392,576 || trainable%: 0.5898" (public QLoRA tutorials in the GitHub code index): all-linear
    # is the seven projections, the output layer left out
    ("llama-2-7b", "16", "all-linear", 39_976_960, 6_778_392_576),
])
def test_trainable_and_all_params_are_peft_print_trainable_parameters(model, rank, targets, trainable, all_params):
    peft = run_json("--model", model, "--method", "lora", "--lora-rank", rank, "--lora-targets", targets)["peft"]
    assert peft["trainable_params"] == trainable
    assert peft["all_params"] == all_params
    assert not peft["assumed"]


def test_the_issues_13b_case_counts_four_times_fewer_adapters_than_the_old_one_percent():
    """r=16 on the attention projections of Llama-2-13B: 40 layers × 4 modules × 16 × (5120 + 5120) = 26,214,400,
    a fifth of the 1 % (130 M) the estimate used to assume."""
    peft = run_json("--model", "llama-2-13b", "--method", "lora", "--lora-rank", "16", "--lora-targets",
                    "q_proj,k_proj,v_proj,o_proj")["peft"]
    assert peft["trainable_params"] == 40 * 4 * 16 * (5120 + 5120) == 26_214_400
    assert peft["trainable_params"] < 0.01 * peft["frozen_params"] / 4


def test_all_linear_leaves_the_output_layer_out_and_naming_it_adds_it():
    seven = run_json("--model", "mistral-7b", "--method", "lora", "--lora-targets", SEVEN)["peft"]
    shorthand = run_json("--model", "mistral-7b", "--method", "lora", "--lora-targets", "all-linear")["peft"]
    head = run_json("--model", "mistral-7b", "--method", "lora", "--lora-targets", SEVEN + ",lm_head")["peft"]
    assert shorthand["trainable_params"] == seven["trainable_params"]
    assert shorthand["modules"] == SEVEN.split(",")
    assert head["trainable_params"] - seven["trainable_params"] == 8 * (4096 + 32000)     # r·(hidden + vocab)


def test_an_adapter_config_json_counts_like_the_flags_and_modules_to_save_train_whole(tmp_path):
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"],
                                  "modules_to_save": ["lm_head"], "task_type": "CAUSAL_LM"}))
    by_file = run_json("--model", "llama-2-7b", "--method", "lora", "--adapter-config", str(config))
    by_flags = run_json("--model", "llama-2-7b", "--method", "lora", "--lora-rank", "8", "--lora-targets",
                        "q_proj,v_proj", "--modules-to-save", "lm_head")
    assert by_file["peft"]["trainable_params"] == by_flags["peft"]["trainable_params"]
    assert by_file["model_states_bytes"] == by_flags["model_states_bytes"]
    # lm_head trained whole: 32000 × 4096 = 131,072,000 on top of the adapters; PEFT's all params count the copy
    assert by_file["peft"]["saved_params"] == 131_072_000
    assert by_file["peft"]["trainable_params"] == 4_194_304 + 131_072_000
    assert by_file["peft"]["all_params"] == 6_742_609_920 + 131_072_000
    assert str(config) in by_file["peft"]["source"]


def test_lora_memory_is_the_16_bit_base_plus_the_trained_parameters_states():
    """ZeRO-0, bf16: the frozen base at 2 bytes a parameter, the 4,194,304 adapter parameters at DeepSpeed's
    16 bytes (weight, gradient, fp32 master and Adam's two moments)."""
    doc = run_json("--model", "llama-2-7b", "--method", "lora", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj")
    parts = doc["bytes_per_gpu"]
    assert parts["frozen_16bit"] == 2 * 6_738_415_616
    assert parts["trainable_states"] == 16 * 4_194_304
    assert doc["model_states_bytes"] == 2 * 6_738_415_616 + 16 * 4_194_304
    assert parts["frozen_4bit"] == 0 and parts["quantization_constants"] == 0


# ---------------------------------------------------------------- QLoRA as bitsandbytes stores it

def test_qlora_quantizes_the_layers_linear_weights_and_keeps_embeddings_and_head_16_bit():
    """Llama-3.1-8B in 4-bit: NVIDIA-NeMo/Automodel counted 1,050,939,392 parameters outside Linear4bit (embedding
    525,336,576 + lm_head 525,336,576 + norms 266,240) and 4,540,600,320 in all with each Params4bit counted at half
    its weights, so 2 × (4,540,600,320 − 1,050,939,392) = 6,979,321,856 quantized weights
    (https://github.com/NVIDIA-NeMo/Automodel/pull/1354)."""
    doc = run_json("--model", "llama-3.1-8b", "--method", "qlora", "--lora-rank", "16", "--lora-targets", SEVEN)
    peft, parts = doc["peft"], doc["bytes_per_gpu"]
    assert peft["frozen_16bit_params"] == 1_050_939_392
    assert peft["quantized_params"] == 2 * (4_540_600_320 - 1_050_939_392) == 6_979_321_856
    assert parts["frozen_16bit"] == 2 * 1_050_939_392                        # 1.96 GiB: not counted at 4 bits
    assert parts["frozen_4bit"] == 6_979_321_856 / 2                          # two NF4 codes a byte
    # double quantization: per matrix ceil(n/64) 8-bit absmax + one fp32 per 256 of them; per layer
    # q, o: 262,144 + 4·1,024; k, v: 65,536 + 4·256; gate, up, down: 917,504 + 4·3,584 bytes
    per_layer = 2 * (262_144 + 4 * 1_024) + 2 * (65_536 + 4 * 256) + 3 * (917_504 + 4 * 3_584)
    assert parts["quantization_constants"] == 32 * per_layer == 110_755_840
    assert parts["quantization_constants"] / peft["quantized_params"] == pytest.approx((1 + 4 / 256) / 64, rel=1e-6)


def test_a_152k_vocabulary_keeps_over_a_gib_more_than_a_4_bit_count_would():
    """Qwen2.5-7B: embedding and output layer 2 × 152,064 × 3,584 parameters; 16-bit they are 2.18 GB where the old
    4-bit count gave 0.56 GB."""
    doc = run_json("--model", "qwen2.5-7b", "--method", "qlora")
    embeddings = 2 * 152_064 * 3_584
    assert doc["bytes_per_gpu"]["frozen_16bit"] >= 2 * embeddings
    assert doc["bytes_per_gpu"]["frozen_16bit"] - embeddings * 4.127 / 8 > 2**30


def test_the_table_shows_counts_and_bytes_per_category():
    args = ["estimate", "--model", "llama-3.1-8b", "--tokens", "1e8", "--method", "qlora", "--lora-rank", "16",
            "--lora-targets", "all-linear", "--gpu", "A10G", "--gpus-per-node", "1"]
    text = runner.invoke(app, args, env={"COLUMNS": "200"}).output
    assert "trainable params: 41,943,040" in text and "all params: 8,072,204,288" in text
    assert "4-bit 6,979,321,856" in text and "16-bit 1,050,939,392" in text
    for row in ("frozen, 16-bit (embeddings, output layer, norms)", "frozen, 4-bit NF4", "NF4 constants",
                "trained: weights + gradients + optimizer states"):
        assert row in text, row


# ---------------------------------------------------------------- what is assumed, said so

def test_without_a_lora_described_peft_defaults_are_used_and_said():
    doc = run_json("--model", "llama-2-7b", "--method", "lora")
    assert doc["peft"]["assumed"] and doc["peft"]["rank"] == 8 and doc["peft"]["target_modules"] == ["q_proj", "v_proj"]
    assert any("no LoRA described" in a for a in doc["assumptions"])
    text = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--tokens", "1e8", "--method", "lora"],
                         env={"COLUMNS": "200"}).output
    assert "no LoRA described: PEFT's defaults, r=8 on q_proj, v_proj" in text


def test_trainable_fraction_is_an_explicit_override_labelled_yours():
    doc = run_json("--model", "llama-2-7b", "--method", "lora", "--trainable-fraction", "0.01")
    assert doc["peft"]["trainable_params"] == pytest.approx(0.01 * 6_738_415_616)
    assert "yours" in doc["peft"]["source"] and not any("no LoRA described" in a for a in doc["assumptions"])


# ---------------------------------------------------------------- bad LoRA input

@pytest.mark.parametrize("args, flag, words", [
    (["--lora-targets", "qproj"], "--lora-targets", "valid: q_proj"),
    (["--lora-targets", "all-linear,q_proj"], "--lora-targets", "all-linear stands alone"),
    (["--lora-rank", "0"], "--lora-rank", "out of range"),
    (["--lora-rank", "eight"], "--lora-rank", "not a whole number"),
    (["--modules-to-save", "norm"], "--modules-to-save", "valid: embed_tokens, lm_head"),
    (["--lora-rank", "8", "--trainable-fraction", "0.01"], "--trainable-fraction", "not both"),
    (["--method", "full", "--lora-rank", "8"], "--lora-rank", "add --method lora or qlora"),
])
def test_bad_lora_input_names_the_flag_once(args, flag, words):
    out = bad("--model", "llama-2-7b", *args)
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("--")]
    assert len(lines) == 1 and lines[0].startswith(flag) and words in out, out


@pytest.mark.parametrize("doc, words", [
    ({"r": 8, "target_modules": ".*(q|v)_proj"}, "list the module names"),
    ({"r": "8", "target_modules": ["q_proj"]}, "r is '8'; write a whole number"),
    ({"r": 8, "target_modules": ["q_proj"], "rank_pattern": {"v_proj": 4}}, "rank_pattern"),
    ({"peft_type": "PREFIX_TUNING"}, "only LoRA adapters"),
    ({"r": 8}, "target_modules is not set"),
])
def test_a_bad_adapter_config_names_the_file_and_key(tmp_path, doc, words):
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps(doc))
    out = bad("--model", "llama-2-7b", "--method", "lora", "--adapter-config", str(config))
    assert "--adapter-config" in out and "adapter_config.json" in out and words in out, out


def test_a_config_json_with_its_own_head_dim_counts_like_the_checkpoint(tmp_path):
    """Gemma-7B (https://huggingface.co/google/gemma-7b/blob/main/config.json): 16 heads of head_dim 256 over a
    hidden size of 3072, so q_proj is Linear(3072, 4096), not 3072 × 3072. Counted from that shape: 8,537,680,896
    parameters, the figure google/gemma-7b's safetensors metadata gives; r=8 on q_proj and v_proj:
    28 layers × 2 × 8 × (3072 + 4096) = 3,211,264."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "gemma", "hidden_act": "gelu", "hidden_size": 3072, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576,
        "vocab_size": 256000}))
    doc = run_json("--config", str(config), "--method", "lora", "--lora-targets", "q_proj,v_proj")
    assert doc["shape"]["params"] == 8_537_680_896
    assert doc["peft"]["trainable_params"] == 3_211_264


OPEN_LLAMA_3B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                 "hidden_size": 3200, "intermediate_size": 8640, "num_attention_heads": 32, "num_hidden_layers": 26,
                 "tie_word_embeddings": False, "vocab_size": 32000}
"""openlm-research/open_llama_3b's config.json (https://huggingface.co/openlm-research/open_llama_3b, the same
shapes as EasyLM's LLaMAConfig "3b", the code it was trained with)."""


@pytest.mark.parametrize("targets, trainable, all_params", [
    ("all-linear", 12_712_960, 3_439_186_560),
    ("q_proj,v_proj", 2_662_400, 3_429_136_000),
])
def test_a_config_json_reproduces_a_maintainers_printed_count(tmp_path, targets, trainable, all_params):
    """PEFT's print_trainable_parameters for OpenLLaMA 3B at r=8, posted by axolotl's maintainer when it gained
    lora_target_linear (https://github.com/axolotl-ai-cloud/axolotl/pull/65, 2023-05-26): "trainable params:
    12712960 || all params: 3439186560" with every linear layer, "trainable params: 2662400 || all params:
    3429136000" with q_proj and v_proj."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(OPEN_LLAMA_3B))
    peft = run_json("--config", str(config), "--method", "lora", "--lora-rank", "8", "--lora-targets",
                    targets)["peft"]
    assert (peft["trainable_params"], peft["all_params"]) == (trainable, all_params)
