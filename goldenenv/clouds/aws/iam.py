"""IAM policy documents the AWS components share."""

from __future__ import annotations

import json


def assumed_by(service: str) -> str:
    """Trust policy: only this AWS service may assume the role."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    })
