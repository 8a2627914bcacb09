"""One set of rules for `goldenenv estimate`'s spec files and flags (issue 37 item 5): the same value reads the same
from either, and each problem is one line naming the key and what to write, in the project's words."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from goldenenv.cli import app

runner = CliRunner()
BASE = "tokens: 1e8\nzero: 2\ngpus_per_node: 8\n"


def spec_json(tmp_path, text: str, *args: str) -> dict:
    spec = tmp_path / "run.yaml"
    spec.write_text(text)
    result = runner.invoke(app, ["estimate", "--spec", str(spec), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def spec_problems(tmp_path, text: str) -> list[str]:
    spec = tmp_path / "run.yaml"
    spec.write_text(text)
    result = runner.invoke(app, ["estimate", "--spec", str(spec)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line.strip() for line in result.output.splitlines()[1:] if line.strip()]


def flag_json(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_params_13e9_in_a_spec_reads_as_the_flag_does(tmp_path):
    """YAML 1.1 reads 13e9 (no dot) as text; the flags' parser reads it as 1.3e10 either way."""
    by_spec = spec_json(tmp_path, "params: 13e9\n" + BASE)
    by_flag = flag_json("--params", "13e9", "--tokens", "1e8", "--zero", "2", "--gpus-per-node", "8")
    assert by_spec["params"] == by_flag["params"] == 13e9
    assert by_spec["model_states_bytes"] == by_flag["model_states_bytes"] == 55.25e9


@pytest.mark.parametrize("written, meant", [
    ("no", False), ("'no'", False), ("yes", True), ("off", False), ("On", True), ("true", True), ("False", False),
])
def test_offload_written_as_yaml_1_1_or_quoted_is_the_boolean_meant(tmp_path, written, meant):
    doc = spec_json(tmp_path, "params: 13e9\n" + BASE + f"offload: {written}\n")
    assert doc["offload"] is meant


@pytest.mark.parametrize("text, key", [
    ("params: 13e9\n" + BASE + "offload: maybe\n", "offload"),
    ("params: thirteen\n" + BASE, "params"),
    ("params: 13e9\n" + BASE.replace("zero: 2", "zero: two"), "zero"),
    ("params: 13e9\n" + BASE + "lora_rank: x\nmethod: lora\n", "lora_rank"),
    ("params: 13e9\n" + BASE + "checkpointing: [true]\n", "checkpointing"),
])
def test_a_bad_spec_value_is_one_line_naming_the_key_in_the_projects_words(tmp_path, text, key):
    problems = spec_problems(tmp_path, text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(str(tmp_path / "run.yaml")) and f"{key}:" in problems[0], problems
    assert "write" in problems[0], problems
    for foreign in ("Input should", "validation error", "pattern", "^", "pydantic", "String should"):
        assert foreign not in problems[0], problems


def test_a_spec_that_cannot_be_read_adds_no_false_required_lines(tmp_path):
    problems = spec_problems(tmp_path, "params: 13e9\ntokens: [1e8\n")
    assert len(problems) == 1 and problems[0].startswith("--spec:") and "not valid YAML" in problems[0], problems
    assert not any("required" in p for p in problems)
    missing = tmp_path / "missing.yaml"
    result = runner.invoke(app, ["estimate", "--spec", str(missing)], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "no such estimate spec" in result.output
    assert "required" not in result.output


def test_nothing_given_still_says_what_is_required():
    result = runner.invoke(app, ["estimate", "--gpu", "A10G"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "--tokens: required" in result.output and "--params: required" in result.output


def test_a_misspelt_key_gets_the_near_one(tmp_path):
    problems = spec_problems(tmp_path, "params: 13e9\n" + BASE + "ofload: true\n")
    assert len(problems) == 1 and "unknown key 'ofload'; did you mean offload?" in problems[0], problems


def test_a_spec_and_the_flags_describe_the_same_lora(tmp_path):
    by_spec = spec_json(tmp_path, "model: llama-2-7b\ntokens: 1e8\nmethod: lora\nlora_rank: 16\n"
                                  "lora_targets: [q_proj, k_proj, v_proj, o_proj]\n")
    by_flag = flag_json("--model", "llama-2-7b", "--tokens", "1e8", "--method", "lora", "--lora-rank", "16",
                        "--lora-targets", "q_proj,k_proj,v_proj,o_proj")
    assert by_spec["peft"]["trainable_params"] == by_flag["peft"]["trainable_params"] == 32 * 4 * 16 * 8192


def test_anchors_and_aliases_stay_refused_in_a_spec(tmp_path):
    problems = spec_problems(tmp_path, "params: &n 13e9\ntokens: *n\n")
    assert len(problems) == 1 and "anchors and aliases are not allowed" in problems[0], problems


def test_a_stacks_offload_no_is_refused_with_advice_that_then_works(tmp_path, monkeypatch):
    """A stack file is read by plan (YAML 1.1) and pulumi up (YAML 1.2), so an unquoted `no` is refused there; the
    advice it gives, 'no' quoted, is then the boolean false by the estimate's rules, not a second refusal."""
    import yaml

    from goldenenv import project
    from goldenenv.plan import STACKS

    doc = yaml.safe_load((STACKS / "Pulumi.aws-p5-2node.yaml").read_text())
    doc["config"]["goldenenv:run"] = {"hours": 10, "estimate": {"model": "llama-2-13b", "tokens": 1e9, "zero": 2,
                                                                "offload": "OFFLOAD"}}
    (tmp_path / "Pulumi.yaml").write_text("name: probe\nruntime: python\n")
    text = yaml.safe_dump(doc).replace("'OFFLOAD'", "OFFLOAD")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(project, "_current", None)
    (tmp_path / "Pulumi.probe.yaml").write_text(text.replace("OFFLOAD", "no"))
    refused = runner.invoke(app, ["estimate", "-s", "probe"], env={"COLUMNS": "300"})
    assert refused.exit_code == 2 and "write false or 'no'" in refused.output, refused.output
    (tmp_path / "Pulumi.probe.yaml").write_text(text.replace("OFFLOAD", "'no'"))
    monkeypatch.setattr(project, "_current", None)
    followed = runner.invoke(app, ["estimate", "-s", "probe", "--json"])
    assert followed.exit_code == 0, followed.output
    assert json.loads(followed.output)["offload"] is False


def test_a_missing_adapter_config_says_so_in_one_line(tmp_path):
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--tokens", "1e8", "--method", "lora",
                                 "--adapter-config", str(tmp_path / "adapter_config.json")], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip().startswith("--")]
    assert len(lines) == 1 and "--adapter-config" in lines[0] and "no such file" in lines[0], result.output


def test_a_spec_value_of_the_wrong_shape_is_its_one_line_not_also_required(tmp_path):
    problems = spec_problems(tmp_path, "params: [13e9]\n" + BASE)
    assert len(problems) == 1 and "params:" in problems[0] and "write one (a number)" in problems[0], problems
