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
