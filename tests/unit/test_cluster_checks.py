"""Cluster-wide checks on per-node reports, and cloud lifecycle preconditions."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from goldenenv import automation, catalog
from goldenenv.checks.cluster import busbw_verdict, drift, parse_allreduce_line
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


def test_busbw_is_judged_against_the_catalog_reference():
    ref = max((r for r in catalog.busbw_references() if r.instance_type == "p5.48xlarge" and r.nodes == 2),
              key=lambda r: r.busbw_gbytes_per_s)
    ok, message = busbw_verdict("p5.48xlarge", 2, ref.busbw_gbytes_per_s * 0.9, 0.8)
    assert ok and f"{ref.busbw_gbytes_per_s:g}" in message
    ok, message = busbw_verdict("p5.48xlarge", 2, ref.busbw_gbytes_per_s * 0.5, 0.8)
    assert not ok and "<" in message


def test_without_a_reference_the_floor_applies():
    floor = max(r.busbw_gbytes_per_s for r in catalog.busbw_references() if r.kind == "floor")
    assert busbw_verdict("g5.48xlarge", 2, floor + 1, 0.8)[0]
    assert not busbw_verdict("g5.48xlarge", 2, floor / 2, 0.8)[0]


def test_allreduce_line_is_found_among_rank_prefixed_output():
    output = 'step 1\n[default0]:{"event": "allreduce", "ok": true, "busbw_gbps": 1.5}\n'
    assert parse_allreduce_line(output)["busbw_gbps"] == 1.5
    assert parse_allreduce_line("nothing here") is None


def test_cloud_lifecycle_without_the_pulumi_cli_says_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    with pytest.raises(automation.LifecycleError, match="Pulumi CLI is not installed.*goldenenv plan -s aws-g5-dev"):
        automation.preflight(load_spec("aws-g5-dev"))
    result = CliRunner().invoke(app, ["up", "-s", "aws-g5-dev"])
    assert result.exit_code == 1
    assert "Pulumi CLI is not installed" in result.output and "Traceback" not in result.output


def test_cloud_lifecycle_without_credentials_says_how_to_fix_it(monkeypatch, tmp_path):
    monkeypatch.setattr(automation.shutil, "which", lambda name: "/usr/bin/pulumi")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(automation.LifecycleError, match="no AWS credentials"):
        automation.preflight(load_spec("aws-g5-dev"))


@mock_aws
def test_purge_data_deletes_every_version_of_the_named_bucket_only():
    s3 = boto3.client("s3", region_name="us-east-1")
    for bucket in ("stack-data", "other-team"):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        for n in range(3):
            s3.put_object(Bucket=bucket, Key="checkpoints/step-1.pt", Body=f"v{n}".encode())
    assert automation.purge_bucket("stack-data", "us-east-1", log=lambda m: None, client=s3) == 3
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert names == ["other-team"]


def test_validate_of_a_cloud_stack_without_hosts_or_cli_says_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(automation.shutil, "which", lambda name: None)
    result = CliRunner().invoke(app, ["validate", "-s", "aws-p5-2node"])
    assert result.exit_code == 1 and "Pulumi CLI is not installed" in result.output
