"""Google Cloud's plan says which tag became which label.

Google labels take lower-case letters (of any alphabet), digits, `_` and `-` only, 63 characters each: goldenenv
writes every tag that way (clouds/gcp/labels.py), and did so silently, so a team's `Équipe` tag showed up in cost
reports as `k_quipe` (its É dropped, though Google takes é) with its value lowercased and cut, and nobody had been
told. It is now `équipe`, and the plan names each rewritten key and value.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from typer.testing import CliRunner

from goldenenv import stackconfig
from goldenenv.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
LONG = "Recherche-" + "x" * 70


def plan_output(tmp_path, extra: dict[str, str]) -> str:
    config = copy.deepcopy(stackconfig.read_stack_file(REPO / "stacks" / "Pulumi.gcp-g2-dev.yaml"))
    config["goldenenv:tags"] = {**config["goldenenv:tags"], "extra": extra}
    (tmp_path / "Pulumi.labelled.yaml").write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "-s", "labelled", "--stacks-dir", str(tmp_path)], env={"COLUMNS": "400"})
    assert result.exit_code in (0, 1), result.output
    return " ".join(result.output.split())


def test_a_rewritten_tag_key_and_a_cut_value_are_named_in_the_plan(tmp_path):
    output = plan_output(tmp_path, {"Équipe": LONG})
    assert "'Équipe' -> 'équipe'" in output
    cut = LONG.lower()[:63]
    assert f"'{LONG}' -> '{cut}' (cut to 63 characters)" in output


def test_tags_that_are_labels_as_written_are_not_mentioned(tmp_path):
    output = plan_output(tmp_path, {"team": "research"})
    assert "become Google Cloud labels" not in output
