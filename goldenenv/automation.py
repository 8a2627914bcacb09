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


def guard(spec: ClusterSpec, creating: bool, stacks_dir: Path | None = None):
    """The offline plan's verdict before Pulumi runs: guardrails and the lock against every pool.

    `up` also refuses a stack whose nodes would have no golden image to pull (none pushed for its lock).
    """
    from goldenenv.guardrails import Severity
    from goldenenv.plan import STACKS, UNPUBLISHED, plan

    result = plan(spec.stack, stacks_dir or STACKS)
    blocking = [f for f in result.findings
                if f.severity is Severity.ERROR or (creating and f.rule == UNPUBLISHED)]
    if blocking:
        raise LifecycleError("refused before anything is created:\n" + "\n".join(
            f"  {f.rule}: {f.message}" for f in blocking))
    return result


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
    guard(spec, creating=False)
    return stack(spec).preview(on_output=log)


def up(spec: ClusterSpec, log: Callable[[str], None] = print) -> dict:
    guard(spec, creating=True)
    result = stack(spec).up(on_output=log)
    return {k: v.value for k, v in result.outputs.items()}


def image_repository(spec: ClusterSpec, log: Callable[[str], None] = print) -> str:
    """Create only the stack's image repository (a targeted up) and return its URL, so the image can be pushed
    before the nodes that pull it exist."""
    planned = guard(spec, creating=False)
    wanted = [r for r in planned.resources if r.type.startswith(("aws:ecr/", "pulumi:providers:"))]
    if not wanted:
        raise LifecycleError(f"stack {spec.stack} declares no image repository: push with --registry instead")
    by_urn = {r.urn: r for r in planned.resources}
    targets = set()
    for r in wanted:
        while r is not None:
            targets.add(r.urn)
            r = by_urn.get(r.parent_urn)
    stack(spec).up(on_output=log, target=sorted(targets))
    return ecr_repository_url(spec)


def ecr_repository_url(spec: ClusterSpec, sts=None) -> str:
    """`<account>.dkr.ecr.<region>.amazonaws.com/<name>`: the URL ECR gives the stack's repository."""
    import boto3

    from goldenenv.clouds.aws.registry import repository_name

    account = (sts or boto3.client("sts", region_name=spec.region)).get_caller_identity()["Account"]
    return f"{account}.dkr.ecr.{spec.region}.amazonaws.com/{repository_name(spec.stack, spec.image.lock)}"


def ecr_auth(registry: str, region: str, ecr=None) -> dict:
    """Docker credentials for an ECR registry, from the caller's AWS credentials."""
    import base64

    import boto3

    token = (ecr or boto3.client("ecr", region_name=region)).get_authorization_token()["authorizationData"][0]
    user, _, password = base64.b64decode(token["authorizationToken"]).decode().partition(":")
    return {"username": user, "password": password, "registry": registry.split("/", 1)[0]}


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
