"""The node health judge on an Ascend node: npu-smi's NPU count and per-NPU health words, and the error codes of
its health detail, each judged by a row of goldenenv/accelerators/ascend/catalog/health_thresholds.csv.

The evidence is what the stand-in npu-smi (tests/images/ascend-standin/npu-smi, in the shapes Ascend's npu-smi
prints: docs/research/huawei.md §4.1-4.2) prints, collected by the judge's own commands with the stand-in on PATH.
Expected rules and actions are written here from the catalog's sources (npusmi_028's words, the project's choice of
drain for Alarm, Critical and UNKNOWN, monitor for Warning), not read from the judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from goldenenv import catalog
from goldenenv.catalog import health
from goldenenv.health import judge
from goldenenv.images import bundle

STANDIN = Path(__file__).parents[1] / "images" / "ascend-standin" / "npu-smi"
NODE = "npu-node-1"
EXPECT = {"gpus": 0, "fabric": "none", "fabric_devices": 0, "nvlinks_per_gpu": 0, "nvswitch": False, "npus": 8}
"""An Atlas 800T A2's expectations: eight NPUs, no GPU for nvidia-smi to list."""
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


@pytest.fixture(scope="module")
def on_path(tmp_path_factory) -> Path:
    """A folder holding the stand-in as `npu-smi`, put first on PATH for the collector's commands."""
    folder = tmp_path_factory.mktemp("npu-bin")
    (folder / "npu-smi").symlink_to(STANDIN)
    return folder


def collected(on_path: Path, folder: Path, **standin: str) -> dict[str, str]:
    """The quick evidence the judge's collector gets from the stand-in (STANDIN_* settings as given)."""
    env = {**os.environ, "PATH": f"{on_path}:{os.environ['PATH']}", **standin}

    def runner(argv, timeout_s):
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, env=env)
        return done.returncode, done.stdout, done.stderr

    judge.collect("quick", str(folder), EXPECT, runner=runner, host_dir=str(folder / "no-host"))
    return judge.read_evidence(str(folder))


def judged(on_path: Path, folder: Path, **standin: str) -> set[tuple[str, str, str]]:
    findings = judge.judge(collected(on_path, folder, **standin), EXPECT, health.rules_document(), NODE)
    return {(f.rule, f.device, f.action) for f in findings}


def test_an_npu_node_runs_npu_smi_and_not_nvidia_smi():
    """What the collector runs on an NPU node: npu-smi's table and health detail, none of nvidia-smi's commands."""
    assert sorted(judge.evidence_for("quick", EXPECT)) == ["npu_smi_health", "npu_smi_info"]
    assert "npu_smi_info" not in judge.evidence_for("quick", {**EXPECT, "gpus": 8, "npus": 0})


def test_eight_healthy_npus_are_a_healthy_node(on_path, tmp_path):
    evidence = collected(on_path, tmp_path)
    assert "| 7     910B3" in evidence["npu_smi_info.txt"] and "NPU ID : 7" in evidence["npu_smi_health.txt"]
    assert judged(on_path, tmp_path) == set()


def test_a_missing_npu_drains_the_node_naming_the_rule(on_path, tmp_path):
    assert judged(on_path, tmp_path, STANDIN_NPUS="0 1 2 3 4 5 6") == {("npu_count_below_expected", "node", "drain")}


@pytest.mark.parametrize("word, rule, action", [
    ("Critical", "npu_health_critical", "drain"),
    ("Alarm", "npu_health_alarm", "drain"),
    ("UNKNOWN", "npu_health_unknown", "drain"),
    ("Warning", "npu_health_warning", "monitor"),
])
def test_each_health_word_takes_its_rows_action(on_path, tmp_path, word, rule, action):
    assert judged(on_path, tmp_path, STANDIN_NPU5_HEALTH=word) == {(rule, "NPU 5", action)}


def test_a_word_npu_smi_does_not_use_is_read_as_unknown():
    text = ("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
            "| 0     910B3               | Degraded      | 95.0        45                0    / 0             |\n")
    findings = judge.judge({"npu_smi_info.txt": text}, {**EXPECT, "npus": 1}, health.rules_document(), NODE)
    assert [(f.rule, f.action) for f in findings] == [("npu_health_unknown", "drain")]
    assert "Degraded" in findings[0].message and "not one of npu-smi's five words" in findings[0].message


def test_an_error_code_the_catalog_lists_takes_its_action_and_others_are_reported(on_path, tmp_path):
    found = judged(on_path, tmp_path, STANDIN_NPU2_ERROR="0x68020002", STANDIN_NPU6_ERROR="0x80E01801")
    assert found == {("npu_error_heartbeat_lost", "NPU 2", "drain"), ("npu_unlisted_error_code", "NPU 6", "monitor")}


def test_a_node_without_npu_smi_is_drained_for_the_missing_evidence():
    findings = judge.judge({"npu_smi_info.txt.error": "missing-binary: npu-smi not found"}, EXPECT,
                           health.rules_document(), NODE)
    assert [(f.rule, f.device, f.action) for f in findings] == [("evidence_missing", "npu_smi_info.txt", "drain")]


def test_the_npu_count_is_checked_like_the_gpu_count():
    assert judge.expectations_from_words("fabric=none,fabric_devices=0,gpus=0,npus=8,nvlinks_per_gpu=0,"
                                         "nvswitch=no") == EXPECT
    with pytest.raises(ValueError, match="npus must be a whole number >= 0, got 'eight'"):
        judge.check_expectations({**EXPECT, "npus": "eight"})


def test_the_bundled_judge_drains_a_critical_npu_with_the_rule_in_slurms_reason(on_path, tmp_path):
    """The image's goldenenv-health (the judge with Ascend's judge bundled in) run as Slurm runs it, standard
    library only: exit 1 and the drain reason names the rule and the NPU."""
    evidence = tmp_path / "evidence"
    collected(on_path, evidence, STANDIN_NPU3_HEALTH="Critical")
    script = tmp_path / "goldenenv-health"
    script.write_bytes(bundle.health_judge())
    (tmp_path / "expect.json").write_text(json.dumps(EXPECT))
    (tmp_path / "rules.json").write_text(json.dumps(health.rules_document()))
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-S", str(script), "--evidence", str(evidence), "--expect",
                           str(tmp_path / "expect.json"), "--rules", str(tmp_path / "rules.json"), "--node", NODE,
                           "--reason"], capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, "")
    assert "npu_health_critical" in done.stdout and "NPU 3" in done.stdout


def test_the_ascend_checks_and_the_judge_read_npu_smi_alike(on_path):
    """The node check (ascend-npu-health) reads the same table the judge reads: one Alarm fails both."""
    from goldenenv.accelerators.ascend import checks

    env = {**os.environ, "PATH": f"{on_path}:{os.environ['PATH']}", "STANDIN_NPU1_HEALTH": "Alarm"}
    out = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, env=env).stdout
    verdict = checks._npu_health({"ascend": {"npu_smi": {"rc": 0, "out": out}}})
    assert verdict == "npu-smi info: health not OK: NPU 1 (910B3) Alarm"


def test_ascends_rules_are_rows_of_its_own_folder():
    """Literal anchors: the rules Ascend's judge names are rows of goldenenv/accelerators/ascend/catalog/, read as
    Ascend's and no fabric's, so a family with rules of its own edits no shared file."""
    read = {r["check"]: (r["accelerator"], r["fabric"], r["action"]) for r in catalog.rows("health_thresholds")
            if r["check"].startswith("npu_")}
    assert read == {"npu_count_below_expected": ("ascend", "", "drain"),
                    "npu_health_warning": ("ascend", "", "monitor"), "npu_health_alarm": ("ascend", "", "drain"),
                    "npu_health_critical": ("ascend", "", "drain"), "npu_health_unknown": ("ascend", "", "drain"),
                    "npu_error_heartbeat_lost": ("ascend", "", "drain"),
                    "npu_unlisted_error_code": ("ascend", "", "monitor")}
