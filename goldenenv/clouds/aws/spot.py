"""Spot nodes that EC2 brings back by itself, and the request that must go with them when they are deleted.

A spot node launched from a *persistent* request with interruption behaviour *stop* is stopped when EC2 reclaims
the capacity, keeps its EBS root volume, private address and instance id, and is started again by EC2 when capacity
returns in its zone ("Stop interrupted Spot Instances", EC2 User Guide): its boot (cloud-init, then the systemd
units) runs again and slurmd registers with the head, so the queue gets the node back with no command from anyone.

Two facts of EC2 shape where this can be used and what deleting such a node needs:

- EC2 refuses a placement group with interruption behaviour stop ("The parameter GroupName within placement
  information cannot be specified when instanceInterruptionBehavior is set to 'STOP'", the RunInstances error
  quoted in hashicorp/terraform-provider-aws PR #20372). A pool in a cluster placement group (every EFA pool)
  therefore stays on one-time requests: a reclaimed node is terminated and the next `goldenenv up` creates it again.
- Terminating an instance of a persistent request opens the request again, and EC2 launches a new instance for it
  (EC2 User Guide, "Terminate a Spot Instance": cancel the request first). The instance resource of
  terraform-provider-aws, which pulumi-aws bridges, does not cancel it (hashicorp/terraform-provider-aws #38142):
  `pulumi destroy` would leave a GPU node that nobody tracks on the bill. Each such node therefore carries a
  Pulumi `before_delete` resource hook that cancels its request; Pulumi refuses a `destroy` that does not run the
  program when a resource has a delete hook (pulumi/pulumi PR #19933), so the hook cannot be skipped by accident.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

PERSISTENT = "persistent"
ONE_TIME = "one-time"
GONE_REQUEST = "InvalidSpotInstanceRequestID.NotFound"
"""EC2's error code for a request id it no longer knows: nothing is left to cancel."""


def request_type(capacity: str, in_placement_group: bool) -> str | None:
    """The spot request a pool's nodes launch from: persistent (EC2 stops and later restarts the same node) wherever
    EC2 allows it, one-time (terminated on interruption) in a placement group; None for a pool that is not spot."""
    if capacity != "spot":
        return None
    return ONE_TIME if in_placement_group else PERSISTENT


def market_options(request: str | None) -> dict[str, Any] | None:
    """The launch template's instanceMarketOptions for a request type from `request_type`."""
    if request is None:
        return None
    behaviour = "stop" if request == PERSISTENT else "terminate"
    return {"market_type": "spot",
            "spot_options": {"spot_instance_type": request, "instance_interruption_behavior": behaviour}}


def cancel_request_hook(name: str) -> pulumi.ResourceHook:
    """A named before_delete hook for the nodes of a persistent-spot pool: it cancels the node's spot request, so
    the deleted node is not launched again. Named per pool: the engine finds a delete hook by its name when the
    program runs again for the delete (`up` replacing a node, `destroy --run-program`)."""
    return pulumi.ResourceHook(f"{name}-cancel-spot-request", cancel_request)


def cancel_request(args: pulumi.ResourceHookArgs, client: Callable[[str], Any] | None = None) -> None:
    """Cancel the spot request of the instance about to be deleted (its old outputs name the request and region).

    A request EC2 no longer knows is fine; any other error stops the delete, which is better than a node that comes
    back untracked. Cancelling a request never stops a running instance; the delete that follows terminates it."""
    outputs = args.old_outputs or {}
    request_id = outputs.get("spotInstanceRequestId") or outputs.get("spot_instance_request_id")
    if not request_id:
        return
    region = outputs.get("region") or _arn_region(str(outputs.get("arn", "")))
    ec2 = (client or _ec2)(region)
    try:
        ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[request_id])
    except Exception as error:  # botocore's ClientError, read by its code without importing botocore here
        if getattr(error, "response", {}).get("Error", {}).get("Code") != GONE_REQUEST:
            raise
    pulumi.log.info(f"cancelled persistent spot request {request_id} of {args.id}, so EC2 does not launch the "
                    "node again once it is deleted")


def _arn_region(arn: str) -> str | None:
    parts = arn.split(":")
    return parts[3] if len(parts) > 3 and parts[3] else None


def _ec2(region: str | None) -> Any:
    import boto3

    return boto3.client("ec2", region_name=region)
