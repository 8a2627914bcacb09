"""`goldenenv health`: judging saved evidence (`--from`, a post-mortem), and collecting it from nodes into a saved
folder through the node's own collector, as a user runs it."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv.catalog import health
from goldenenv.cli import app
from goldenenv.health import fleet, judge

CAPTURES = Path(__file__).parent / "captures" / "health"
FAILURES = {  # recorded case -> (the rule the catalog's thresholds or XID table decide, the device it names)
    "xid79-gpu3": ("xid_79", "GPU 3"),
    "row-remap-pending-gpu5": ("row_remap_pending", "GPU 5"),
    "efa-31-of-32": ("efa_devices_below_expected", "EFA"),
    "ib-port-down": ("ib_port_not_active", "mlx5_ib5 port 1"),
    "nvlink-errors-gpu2": ("nvlink_replay_errors", "GPU 2 link 5"),
    "dcgm-l1-inforom-gpu6": ("dcgm_severity_triage", "GPU 6"),
}
runner = CliRunner()


@pytest.mark.parametrize("case, rule_device", sorted(FAILURES.items()))
def test_each_recorded_failure_is_exit_1_naming_the_gpu_or_device_and_the_rule(case, rule_device):
    result = runner.invoke(app, ["health", "--from", str(CAPTURES / case)])
    assert result.exit_code == 1, result.output
    rule, device = rule_device
    assert rule in result.output and f"{device}:" in result.output, result.output
    assert f"failing: {case}" in result.output


def test_a_healthy_p5_recording_is_exit_0():
    result = runner.invoke(app, ["health", "--from", str(CAPTURES / "healthy-p5.48xlarge")])
    assert result.exit_code == 0, result.output
    assert "1 of 1 node(s) healthy" in result.output


def test_a_folder_of_nodes_is_judged_node_by_node_and_json_says_the_drain_reason():
    result = runner.invoke(app, ["health", "--from", str(CAPTURES), "--json"])
    assert result.exit_code == 1, result.output
    verdicts = {v["node"]: v for v in json.loads(result.stdout)}
    assert not verdicts["healthy-p5.48xlarge"]["fails"] and not verdicts["healthy-ib"]["fails"]
    assert {node for node, v in verdicts.items() if v["fails"]} == set(FAILURES)
    assert "GPU 3" in verdicts["xid79-gpu3"]["drain_reason"]


def test_evidence_without_expectations_needs_a_stack_or_an_expect_file(tmp_path):
    node = tmp_path / "node-7"
    shutil.copytree(CAPTURES / "xid79-gpu3", node)
    (node / fleet.EXPECT_FILE).unlink()
    refused = runner.invoke(app, ["health", "--from", str(node)])
    assert refused.exit_code == 2 and "no expect.json" in refused.output and "-s STACK" in refused.output
    judged = runner.invoke(app, ["health", "--from", str(node), "-s", "aws-p5-2node"])
    assert judged.exit_code == 1 and "xid_79" in judged.output  # the stack's pool: a p5, from the catalog


@pytest.mark.parametrize("args, words", [
    (["--from", "/no/such/folder"], "no such folder"),
    (["--level", "forever"], "--level forever"),
    (["--from", ".", "--hosts", "ssh://a"], "--from judges saved evidence"),
])
def test_bad_input_is_exit_2_naming_it(args, words):
    result = runner.invoke(app, ["health", *args])
    assert result.exit_code == 2 and words in result.output, result.output


def tar_of(files: dict[str, bytes]) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return data.getvalue()


def test_collect_keeps_each_nodes_evidence_and_an_unreachable_node_fails(tmp_path):
    expect = health.pool_expectations("aws", "p5.48xlarge", None)
    healthy = {p.name: p.read_bytes() for p in (CAPTURES / "healthy-p5.48xlarge").iterdir() if p.name != "expect.json"}
    asked = {}

    def transport(argv, data, timeout_s):
        asked[argv[0]] = (argv, json.loads(data))
        if argv[0] == "gpu-1":
            raise RuntimeError("ssh: connect to host 10.0.0.6 port 22: Connection timed out")
        return tar_of({f"./{name}": content for name, content in healthy.items()}
                      | {"../escape.txt": b"x", "./sub/dir.txt": b"y"})

    reach = {name: (lambda command, name=name: [name, *command]) for name in ("gpu-0", "gpu-1")}
    failed = fleet.collect(reach, {"gpu-0": expect, "gpu-1": expect}, "quick", tmp_path, transport)
    assert set(failed) == {"gpu-1"} and "timed out" in failed["gpu-1"]
    assert asked["gpu-0"][1] == expect and asked["gpu-0"][0][1:] == fleet.node_command("quick")
    assert {p.name for p in (tmp_path / "gpu-0").iterdir()} == set(healthy) | {"expect.json"}
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "gpu-0" / "dir.txt").exists()
    verdicts = {v.node: v for v in fleet.judge_folder(tmp_path)}
    assert not verdicts["gpu-0"].fails and verdicts["gpu-1"].fails  # no GPU list where 8 GPUs are expected


def test_the_node_script_runs_the_images_collector_and_streams_a_tar(tmp_path):
    """The shell a node runs, with a stand-in `goldenenv-health` on PATH (the real one is tested on its own)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "goldenenv-health"
    fake.write_text('#!/bin/sh\n# collect --level L --expect /dev/stdin --out DIR\n'
                    'cat "$5" > "$7/expect-seen.json"; echo "0, 00000000:53:00.0" > "$7/nvidia_smi_gpus.csv"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(fleet.node_command("quick"), input=b'{"gpus": 1}', capture_output=True, env=env,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "node"
    out.mkdir()
    fleet._unpack(done.stdout, out)
    assert json.loads((out / "expect-seen.json").read_text()) == {"gpus": 1}
    assert (out / "nvidia_smi_gpus.csv").read_text().startswith("0,")

    # a node given a recorded state (a test's stand-in for its hardware) sends that, with its own expectations
    node_health = tmp_path / "etc-goldenenv-health"
    shutil.copytree(CAPTURES / "xid79-gpu3", node_health / "recorded")
    shutil.copy(CAPTURES / "xid79-gpu3" / "expect.json", node_health / "expect.json")
    done = subprocess.run(fleet.node_command("quick"), input=b"{}", capture_output=True, timeout=30,
                          env={**env, "GOLDENENV_NODE_HEALTH": str(node_health)})
    assert done.returncode == 0, done.stderr
    recorded = tmp_path / "recorded-node"
    recorded.mkdir()
    fleet._unpack(done.stdout, recorded)
    assert not (recorded / "expect-seen.json").exists()  # the collector did not run
    (verdict,) = fleet.judge_folder(recorded)
    assert verdict.fails and verdict.findings[0].rule == "xid_79"


def test_a_collected_folder_is_kept_per_stack_and_time(tmp_path):
    from datetime import datetime, timezone

    folder = fleet.saved_folder(tmp_path, "aws-p5-2node", datetime(2026, 12, 3, 15, 4, 5, tzinfo=timezone.utc))
    assert folder == tmp_path / ".goldenenv" / "health" / "aws-p5-2node" / "20261203T150405Z"
    assert judge.LEVELS == tuple(fleet.COLLECT_TIMEOUT_S)


def test_an_efa_node_finds_fi_info_where_the_efa_installer_puts_it_and_the_host_gives_the_kernel_log(tmp_path):
    """fi_info is off the image's PATH (/opt/amazon/efa/bin); the kernel log and the fabric manager's state come from
    the host's files (a container can read neither)."""
    healthy = CAPTURES / "healthy-p5.48xlarge"
    host = tmp_path / "host"
    host.mkdir()
    for name in ("kernel.log", "fabric_manager.txt"):
        shutil.copy(healthy / name, host / name)
    ran = []

    def runner(argv, timeout_s):
        ran.append(argv[0])
        if argv[0] == "fi_info":
            raise FileNotFoundError(argv[0])
        for spec in judge.EVIDENCE.values():
            if tuple(argv) in (spec.argv, spec.fallback):
                path = healthy / spec.file
                return (0, path.read_text(), "") if path.exists() else (127, "", f"{argv[0]}: not found")
        raise FileNotFoundError(argv[0])

    expect = health.pool_expectations("aws", "p5.48xlarge", None)
    judge.collect("quick", str(tmp_path / "out"), expect, runner, host_dir=str(host))
    assert judge.EFA_FI_INFO in ran and "journalctl" not in ran and "systemctl" not in ran
    assert judge.judge(judge.read_evidence(str(tmp_path / "out")), expect, health.rules_document(), "gpu-0") == []
