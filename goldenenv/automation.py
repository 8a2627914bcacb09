"""preview / up / destroy of Pulumi clouds through the Automation API, state in a local file backend.

The same program `pulumi up -s STACK` runs. What cannot work here (no Pulumi CLI, no cloud
credentials) is said once, with how to fix it, before anything starts.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from goldenenv.spec import ClusterSpec

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".goldenenv" / "pulumi-state"


class LifecycleError(RuntimeError):
    """A precondition is missing; the message says how to provide it."""


def preflight(spec: ClusterSpec) -> None:
    if shutil.which("pulumi") is None:
        raise LifecycleError(
            "the Pulumi CLI is not installed: install it (https://www.pulumi.com/docs/install/), or see the stack "
            f"offline with `goldenenv plan -s {spec.stack}` (no CLI, no credentials)"
        )
    if spec.cloud == "aws":
        import boto3

        if boto3.Session().get_credentials() is None:
            raise LifecycleError(
                "no AWS credentials: run `aws configure` or `aws sso login`, or set AWS_PROFILE / "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )


def stack(spec: ClusterSpec):
    """The Automation API stack for this stack file, on the user's backend or a local file backend."""
    from pulumi import automation as auto

    preflight(spec)
    env = {}
    if not os.environ.get("PULUMI_BACKEND_URL"):
        STATE.mkdir(parents=True, exist_ok=True)
        env["PULUMI_BACKEND_URL"] = f"file://{STATE}"
        env["PULUMI_CONFIG_PASSPHRASE"] = os.environ.get("PULUMI_CONFIG_PASSPHRASE", "")
    workspace = auto.LocalWorkspace(work_dir=str(ROOT), env_vars=env)
    return auto.Stack.create_or_select(spec.stack, workspace)


def outputs(spec: ClusterSpec) -> dict:
    """The stack's current outputs (node addresses, hostfile ...) from its Pulumi backend."""
    return {k: v.value for k, v in stack(spec).outputs().items()}


def preview(spec: ClusterSpec, log: Callable[[str], None] = print):
    return stack(spec).preview(on_output=log)


def up(spec: ClusterSpec, log: Callable[[str], None] = print) -> dict:
    result = stack(spec).up(on_output=log)
    return {k: v.value for k, v in result.outputs.items()}


def destroy(spec: ClusterSpec, purge_data: bool = False, log: Callable[[str], None] = print) -> list[str]:
    """Destroy the stack; the retained bucket stays unless the data is purged by name."""
    target = stack(spec)
    outputs = {k: v.value for k, v in target.outputs().items()}
    target.destroy(on_output=log)
    purged = []
    if purge_data and outputs.get("bucket"):
        purge_bucket(outputs["bucket"], spec.region, log)
        purged.append(outputs["bucket"])
    elif outputs.get("bucket"):
        log(f"kept bucket {outputs['bucket']} (datasets and checkpoints); delete it with --purge-data")
    return purged


def purge_bucket(bucket: str, region: str, log: Callable[[str], None] = print, client=None) -> int:
    """Delete every object version of a retained bucket, then the bucket: only ever asked for by name."""
    import boto3

    s3 = client or boto3.client("s3", region_name=region)
    deleted = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        batch = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                 for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        for start in range(0, len(batch), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": batch[start:start + 1000], "Quiet": True})
            deleted += len(batch[start:start + 1000])
    s3.delete_bucket(Bucket=bucket)
    log(f"purged bucket {bucket} ({deleted} object versions)")
    return deleted
