"""Cluster-wide checks on per-node reports, and cloud lifecycle preconditions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from goldenenv import automation, catalog
from goldenenv.checks.cluster import busbw_verdict, drift, parse_allreduce_line
from goldenenv.checks.gpu import parse_nccl_tests
from goldenenv.cli import app
from goldenenv.lifecycle import load_spec

CAPTURES = Path(__file__).parent / "captures"


def node_reports() -> dict[str, dict]:
    probe = json.loads((CAPTURES / "probe-cpu-dev.json").read_text())
    return {f"node-{i}": json.loads(json.dumps(probe)) for i in range(3)}


def test_identical_nodes_have_no_drift():
    assert drift(node_reports()) == []


def test_a_node_with_another_package_version_is_named_with_both_versions():
    reports = node_reports()
    reports["node-2"]["packages"]["numpy"] = "2.3.5"
    found = drift(reports)
    assert found == [f"package numpy differs on node-2: 2.3.5 (others: {reports['node-0']['packages']['numpy']})"]


def test_a_node_with_another_torch_is_named():
    reports = node_reports()
    reports["node-1"]["torch"]["version"] = "2.12.0+cpu"
    assert any(p.startswith("torch differs on node-1") for p in drift(reports))


MiB, GiB = 2**20, 2**30
P5_CAPTURE = "nccl_tests_all_reduce_2x_p5.48xlarge_srun.txt"
"""2 x p5.48xlarge, from the awsome-distributed-training nccl-tests README (captures/README.md)."""


def measured(capture: str, size_bytes: int) -> float:
    """The out-of-place busbw nccl-tests printed at this size."""
    rows = parse_nccl_tests((CAPTURES / capture).read_text())
    return next(row["out_of_place"]["busbw_gbps"] for row in rows if row["size_bytes"] == size_bytes)


def p5_reference(size_bytes: int) -> float:
    [ref] = [r for r in catalog.busbw_references() if r.kind == "reference" and r.instance_type == "p5.48xlarge"
             and r.nodes == 2 and r.message_bytes == size_bytes]
    return ref.busbw_gbytes_per_s


def test_the_p5_references_match_the_public_table():
    assert p5_reference(16 * GiB) == 487
    assert p5_reference(2 * GiB) == 443


def test_a_healthy_p5_pair_measured_at_64_mib_passes_against_the_64_mib_reference():
    busbw = measured(P5_CAPTURE, 64 * MiB)
    ok, message = busbw_verdict("p5.48xlarge", 2, busbw, 0.8, message_bytes=64 * MiB)
    assert ok, message
    assert f"busbw {busbw:.1f} GB/s at 64 MiB" in message
    assert f"catalog's {p5_reference(64 * MiB):g} GB/s for 2 x p5.48xlarge at 64 MiB" in message


def test_a_p5_pair_at_half_its_64_mib_bandwidth_fails_naming_both_figures():
    busbw = measured("nccl_tests_all_reduce_2x_p5.48xlarge_srun_degraded_64MiB.txt", 64 * MiB)
    assert busbw == 104.60
    ok, message = busbw_verdict("p5.48xlarge", 2, busbw, 0.8, message_bytes=64 * MiB)
    assert not ok
    assert "busbw 104.6 GB/s at 64 MiB <" in message
    assert f"catalog's {p5_reference(64 * MiB):g} GB/s for 2 x p5.48xlarge at 64 MiB" in message


def test_the_largest_message_is_judged_against_the_16_gib_reference():
    ok, message = busbw_verdict("p5.48xlarge", 2, measured(P5_CAPTURE, 16 * GiB), 0.8, message_bytes=16 * GiB)
    assert ok and "catalog's 487 GB/s for 2 x p5.48xlarge at 16 GiB" in message


def test_a_size_between_references_is_judged_against_the_nearest_smaller_one_and_says_so():
    ok, message = busbw_verdict("p5.48xlarge", 2, measured(P5_CAPTURE, 128 * MiB), 0.8, message_bytes=128 * MiB)
    assert ok, message
    assert f"catalog's {p5_reference(64 * MiB):g} GB/s for 2 x p5.48xlarge at 64 MiB" in message
    assert "no reference at 128 MiB" in message


def test_a_message_smaller_than_every_reference_is_not_judged_against_a_larger_one():
    ok, message = busbw_verdict("p5.48xlarge", 2, measured(P5_CAPTURE, 8 * MiB), 0.8, message_bytes=8 * MiB)
    assert ok and "not judged" in message and "start at 64 MiB" in message
    assert "487" not in message and "443" not in message


def test_without_a_reference_the_floor_applies_at_or_above_its_size():
    """AWS DLC's EFA test: >= 3 GB/s at 1 GiB, for any type (a floor, not a target)."""
    [floor] = [r for r in catalog.busbw_references() if r.kind == "floor"]
    assert (floor.instance_type, floor.message_bytes, floor.busbw_gbytes_per_s) == ("*", 1 * GiB, 3)
    ok, message = busbw_verdict("g5.48xlarge", 2, 4.0, 0.8, message_bytes=1 * GiB)
    assert ok and "floor of 3 GB/s at 1 GiB" in message
    ok, message = busbw_verdict("g5.48xlarge", 2, 1.5, 0.8, message_bytes=2 * GiB)
    assert not ok and "busbw 1.5 GB/s at 2 GiB <" in message
    ok, message = busbw_verdict("g5.48xlarge", 2, 1.5, 0.8, message_bytes=64 * MiB)
    assert ok and "not judged" in message


def test_allreduce_line_is_found_among_rank_prefixed_output():
    output = 'step 1\n[default0]:{"event": "allreduce", "ok": true, "busbw_gbps": 1.5}\n'
    assert parse_allreduce_line(output)["busbw_gbps"] == 1.5
    assert parse_allreduce_line("nothing here") is None


def test_cloud_lifecycle_without_the_pulumi_cli_says_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    with pytest.raises(automation.LifecycleError, match="Pulumi CLI is not installed.*goldenenv plan -s aws-g5-dev"):
        automation.preflight(load_spec("aws-g5-dev"))
    result = CliRunner().invoke(app, ["preview", "-s", "aws-g5-dev"])
    assert result.exit_code == 1
    assert "Pulumi CLI is not installed" in result.output
    assert isinstance(result.exception, SystemExit), result.exception


def test_cloud_lifecycle_without_credentials_says_how_to_fix_it(monkeypatch, tmp_path):
    monkeypatch.setattr(automation.shutil, "which", lambda name: "/usr/bin/pulumi")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(automation.LifecycleError, match="no AWS credentials"):
        automation.preflight(load_spec("aws-g5-dev"))


def test_validate_of_a_cloud_stack_without_hosts_or_cli_says_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    result = CliRunner().invoke(app, ["validate", "-s", "aws-p5-2node"])
    assert result.exit_code == 1 and "Pulumi CLI is not installed" in result.output
