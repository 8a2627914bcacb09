"""A stack file is read once, the same way everywhere (issue 22).

`plan` reads stack files with PyYAML (YAML 1.1 rules); `pulumi up` reads the same file with go-yaml (YAML 1.2's),
so a value the two read differently would be planned, tagged and guarded as one thing and deployed as another
(`ttlHours: 1:30`: 90 h to plan, the text "1:30" to Pulumi). Such values are refused, naming the key; values both
read alike are read as before. Only regular files are read, and a file's size in YAML nodes is capped, so no
accepted file costs seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import stackconfig
from goldenenv.cli import app
from goldenenv.plan import STACKS
from goldenenv.spec import ConfigError

STACK = STACKS / "Pulumi.aws-p5-2node.yaml"
runner = CliRunner()

READ_TWO_WAYS = {  # plain value: (YAML 1.1's reading, YAML 1.2's)
    "1:30": (90, "1:30"),  # base 60
    "1:30.5": (90.5, "1:30.5"),
    "yes": (True, "yes"),
    "No": (False, "No"),
    "on": (True, "on"),
    "OFF": (False, "OFF"),
    "y": (True, "y"),  # the YAML 1.1 spec's booleans (and go-yaml v2's), which PyYAML leaves as text
    "n": (False, "n"),
    "0755": (493, 755),  # 0-prefixed octal
    "012": (10, 12),
    "08": ("08", 8),
    "0o17": ("0o17", 15),
    "0b101": (5, "0b101"),
    "1_000": (1000, "1_000"),
    "0x_1F": (31, "0x_1F"),
    "1e3": ("1e3", 1000.0),  # an exponent without a dot or sign
    "1.5e3": ("1.5e3", 1500.0),
    "-.5": ("-.5", -0.5),
}
READ_ALIKE = {"true": True, "False": False, "12": 12, "+12": 12, "0": 0, "1.5": 1.5, "1.5e+3": 1500.0, ".5": 0.5,
              "0x1F": 31, ".inf": float("inf"), "null": None, "~": None, "'1:30'": "1:30", '"yes"': "yes",
              "2026-01-31": "2026-01-31", "Yes please": "Yes please", "10.42.0.0/16": "10.42.0.0/16"}


def stack_file(tmp_path: Path, lines: str, name: str = "Pulumi.s.yaml") -> Path:
    path = tmp_path / name
    path.write_text("config:\n" + lines, encoding="utf-8")
    return path


@pytest.mark.parametrize("text", READ_TWO_WAYS, ids=READ_TWO_WAYS)
def test_a_value_yaml_1_1_and_1_2_read_differently_is_refused_naming_the_key(tmp_path, text):
    old, new = READ_TWO_WAYS[text]
    path = stack_file(tmp_path, f"  goldenenv:lifecycle:\n    ttlHours: {text}\n")
    with pytest.raises(ConfigError) as caught:
        stackconfig.read_stack_file(path)
    [problem] = caught.value.problems
    assert problem.key == f"{path} at config.goldenenv:lifecycle.ttlHours"
    assert f"reads as {spelt(old)} by YAML 1.1 (plan) but as {spelt(new)} by YAML 1.2 (pulumi up)" in problem.message
    assert f"'{text}'" in problem.message  # how to write it as text both read alike


def spelt(value: object) -> str:
    if isinstance(value, str):
        return f"the text '{value}'"
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_values_both_read_alike_are_read_as_before_and_only_the_others_refused(tmp_path):
    lines = "".join(f"  goldenenv:v{i}: {text}\n" for i, text in enumerate(READ_ALIKE))
    read = stackconfig.read_stack_file(stack_file(tmp_path, lines))
    assert list(read.values()) == list(READ_ALIKE.values())
    with pytest.raises(ConfigError, match="goldenenv:v1"):
        stackconfig.read_stack_file(stack_file(tmp_path, "  goldenenv:v0: 12\n  goldenenv:v1: [1, 'x', yes]\n"))


@pytest.mark.parametrize("text", ["!!int 012", "!!bool yes", "!!float 1:30"])
def test_an_explicit_tag_cannot_bring_back_a_yaml_1_1_reading(tmp_path, text):
    with pytest.raises(ConfigError, match=r"config\.goldenenv:x: .* YAML 1\.1"):
        stackconfig.read_stack_file(stack_file(tmp_path, f"  goldenenv:x: {text}\n"))


@pytest.mark.parametrize("key", ["08", "1e3", "0o7"])
def test_a_key_yaml_1_2_reads_as_a_number_is_refused(tmp_path, key):
    with pytest.raises(ConfigError, match=f"key {key} is not text"):
        stackconfig.read_stack_file(stack_file(tmp_path, f"  goldenenv:tags:\n    extra:\n      {key}: x\n"))


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029"], ids=["NEL", "LS", "PS"])
def test_a_raw_yaml_1_1_line_break_is_refused_naming_the_key(tmp_path, char):
    """YAML 1.1 reads NEL, LS and PS as line breaks ("a\\x85b" is "a b"), YAML 1.2 as characters."""
    path = stack_file(tmp_path, f'  goldenenv:tags:\n    project: "llm{char}pretrain"\n')
    with pytest.raises(ConfigError) as caught:
        stackconfig.read_stack_file(path)
    [problem] = caught.value.problems
    assert problem.key == f"{path} at config.goldenenv:tags.project"
    assert f"U+{ord(char):04X}" in problem.message and "line 3" in problem.message
    escaped = stack_file(tmp_path, f'  goldenenv:tags:\n    project: "llm\\u{ord(char):04x}pretrain"\n')
    assert stackconfig.read_stack_file(escaped)["goldenenv:tags"]["project"] == f"llm{char}pretrain"


def test_plan_refuses_ttl_hours_1_30_naming_the_key_with_exit_2(tmp_path):
    """The probe's case: plan read 90 h where Pulumi reads the text "1:30"."""
    text = STACK.read_text().replace("  goldenenv:lifecycle:\n", "  goldenenv:lifecycle:\n    ttlHours: 1:30\n", 1)
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("ttlHours: 72")) + "\n"
    (tmp_path / "Pulumi.readings.yaml").write_text(text)
    result = runner.invoke(app, ["plan", "-s", "readings", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "goldenenv:lifecycle.ttlHours" in result.output and "1:30" in result.output
    assert "Traceback" not in result.output


# ---------------------------------------------------------------- only regular files, at a bounded cost

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_as_the_stack_file_exits_2_at_once_naming_it(tmp_path):
    os.mkfifo(tmp_path / "Pulumi.pipe.yaml")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", "from goldenenv.cli import app; app()", "plan", "-s", "pipe",
                               "--stacks-dir", str(tmp_path)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "300"}, cwd=Path(__file__).parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail("plan blocked on the named pipe")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Pulumi.pipe.yaml" in done.stderr and "named pipe" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def test_a_file_of_too_many_yaml_nodes_is_refused_at_the_cap(tmp_path):
    """The probe's 800 KB list of 400,000 items cost 9-23 s and 221 MB; the node cap stops it early."""
    from goldenenv.userfile import MAX_NODES

    path = stack_file(tmp_path, "  goldenenv:network:\n    adminCidrs: [" + ",".join(["1"] * 400_000) + "]\n")
    with pytest.raises(ConfigError) as caught:
        stackconfig.read_stack_file(path)
    [problem] = caught.value.problems
    assert problem.key.startswith(f"{path} at config.goldenenv:network.adminCidrs[")
    assert "10,000 values" in problem.message
    # it stops at the cap, reading no further: the item named is within the first MAX_NODES, not the 400,000th
    assert int(problem.key.rsplit("[", 1)[1].rstrip("]")) < MAX_NODES


def test_a_file_just_under_the_node_cap_reads_whole(tmp_path):
    from goldenenv.userfile import MAX_NODES

    items = MAX_NODES - 10
    path = stack_file(tmp_path, "  goldenenv:network:\n    adminCidrs: [" + ", ".join(["10.0.0.0/8"] * items) + "]\n")
    values, _ = stackconfig.namespaced(stackconfig.read_stack_file(path))
    assert len(values["network"]["adminCidrs"]) == items       # read whole, then judged by the model
    with pytest.raises(ConfigError, match="goldenenv:network.adminCidrs"):
        stackconfig.load("s", values)
    assert MAX_NODES <= 10_000
