"""Fixtures the unit tests share: a moto EC2 in one region, with fake credentials so nothing reaches AWS."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

MOTO_REGION = "us-east-1"


@pytest.fixture
def ec2(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": MOTO_REGION}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("ec2", region_name=MOTO_REGION)


@pytest.fixture
def aws_env(monkeypatch):
    """moto's AWS in us-east-1, with fake credentials (for code that makes its own boto3 clients)."""
    for var, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": MOTO_REGION}.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        yield


@pytest.fixture
def plan_after_up(monkeypatch, tmp_path):
    """`goldenenv plan` of a stack whose last up left `last_up` (a checkpoint) in a local file backend, with the
    stack file now holding `config`: returns the command's output."""
    import json

    import yaml
    from typer.testing import CliRunner

    from goldenenv.cli import app

    def run(stack: str, last_up: dict, config: dict, *flags: str) -> str:
        monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
        path = tmp_path / ".pulumi" / "stacks" / "goldenenv" / f"{stack}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(last_up))
        stacks = tmp_path / "stacks"
        stacks.mkdir(exist_ok=True)
        (stacks / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
        return CliRunner().invoke(app, ["plan", "-s", stack, *flags, "--stacks-dir", str(stacks)]).output

    return run
