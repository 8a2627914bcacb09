"""A pool of identical GPU nodes: role, placement group, launch template, instances.

Update semantics, explicit. Each node pins a concrete version of its pool's launch template (the template's
latest version when the node is created), never `$Default`: terraform-provider-aws, which pulumi-aws bridges,
records the concrete version behind `$Default` and forces a replacement once the default moves, so a changed boot
script or tag would replace every GPU node after a refresh (and erase its NVMe scratch), and never reach them
without one. A new template version reaches running nodes only when the user rolls them
(`goldenenv up --roll-nodes`, or GOLDENENV_ROLL_NODES): see GpuNodePool.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from goldenenv import sshkeys
from goldenenv.clouds import access
from goldenenv.clouds.aws.efa import interface_layout
from goldenenv.clouds.aws.guardrail_facts import INSTANCE, LAUNCH_TEMPLATE
from goldenenv.clouds.aws import privilege, spot
from goldenenv.clouds.aws.iam import assumed_by
from goldenenv.clouds.base import NodeTemplate, NodeUpdates
from goldenenv.spec import ClusterSpec, Problem

NODE_MANAGED_POLICIES = privilege.NODE_MANAGED_POLICIES
"""Session Manager and pulls from the stack's ECR repository: the least-privilege table's (aws/privilege.py)."""
TAGGED_AT_LAUNCH = ("instance", "volume", "network-interface")
SPOT_REQUEST_TAGS = "spot-instances-request"
"""A spot pool's launch also creates its spot request, which takes the stack's tags too (launch template
TagSpecification resource types: instance, volume, network-interface, spot-instances-request)."""
SSH_KEY_TYPES = (sshkeys.ED25519, sshkeys.RSA)
"""What EC2 imports: "the public key from an RSA or ED25519 key pair" (EC2 API reference, ImportKeyPair); no ECDSA."""
SSM_SSH_CONFIG = ("Host i-*",
                  "ProxyCommand aws ssm start-session --target %h --document-name AWS-StartSSHSession "
                  "--parameters portNumber=%p")
"""The ssh config entry that reaches a node by its instance id through Session Manager (SSM user guide, "Allow
and control permissions for SSH connections through Session Manager"); the nodes' role has SSM's managed policy."""

NODE_UPDATES = NodeUpdates(
    node_types=(INSTANCE,),
    template=NodeTemplate(
        type=LAUNCH_TEMPLATE,
        ref="launchTemplate",
        # update_default_version makes the latest version the default too
        version_output="latestVersion",
        symbolic_versions=("$Default", "$Latest"),
        word="launch template",
    ),
    # inputs EC2 cannot change on a running instance: ForceNew in terraform-provider-aws (resource_aws_instance)
    replacing=frozenset({"ami", "availabilityZone", "subnetId", "placementGroup", "privateIp", "keyName", "tenancy"}),
    meaning={"userData": "userData (boot script)", "imageId": "imageId (host AMI)",
             "tagSpecifications": "tagSpecifications (launch tags)"},
    erased="its instance store (local NVMe scratch) and root volume",
    note="a later template change (boot script, tags, host AMI, SSH key) reaches running nodes only with "
         "`goldenenv up --roll-nodes`, which replaces them (erasing their local NVMe scratch)",
)
"""How GpuNodePool's nodes take a change: they pin a launch template version and ignore template changes."""


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    instance_type: str
    count: int
    image_id: pulumi.Input[str]
    """The pinned host AMI (a dated release from the catalog, or the stack's own): never a floating alias."""
    network_cards: int
    efa_interfaces: int
    """0 for a pool without EFA."""
    capacity: str
    """on-demand | spot | capacity-reservation; a spot pool outside a placement group launches from persistent
    requests whose nodes EC2 stops and restarts (spot.request_type)."""
    capacity_reservation_id: str | None
    zone: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_ids: list[pulumi.Input[str]]
    root_volume_gib: int
    user_data: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    tags: dict[str, str]
    rolled: frozenset[int] = frozenset()
    """Indexes of the nodes to replace onto the template's current version (the user asked to roll them)."""
    ssh_key: access.NodeKey | None = None
    """The key pair the nodes take for ssh logins (launch template key_name); None: none, SSM sessions only."""
    secret_policy: pulumi.Input[str] | None = None
    """What the nodes may do with the stack's munge key (read it: head.secret_policy); None: no scheduler."""


class GpuNodePool(pulumi.ComponentResource):
    """The pool's template and its nodes, each pinned to the template version it was created from.

    A node ignores changes to its `launchTemplate` (ignore_changes), so a new template version (boot script,
    tags, AMI) never replaces it: it keeps running the version it booted. Pulumi's ignoreChanges keeps the value
    from the state for later updates and for replacements alike, so `pulumi up --replace` would bring a node back
    on its old version (as does any replacement of an unrolled node); rolling a node therefore drops the ignore on
    that node only, and the version change then replaces it (a node already on the current version stays).
    Nodes are deleted before their replacement is created: a GPU node in a cluster placement group or a capacity
    reservation cannot be doubled while it is replaced. Replacement erases the instance store.
    """

    instance_ids: pulumi.Output[list[str]]
    private_ips: pulumi.Output[list[str]]
    placement_group: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        profile = self._instance_profile(name, args, child)
        key_pair = None
        if args.ssh_key:
            key_pair = aws.ec2.KeyPair(
                f"{name}-key", key_name=args.ssh_key.name, public_key=args.ssh_key.public_key, tags=args.tags,
                opts=child,
            )
        placement = None
        if in_placement_group(args.efa_interfaces, args.capacity):
            placement = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=args.tags, opts=child,
            )
        request = spot.request_type(args.capacity, placement is not None)
        template = aws.ec2.LaunchTemplate(
            f"{name}-template",
            description=f"goldenenv {name}: {args.instance_type}, {args.efa_interfaces} EFA",
            image_id=args.image_id,
            instance_type=args.instance_type,
            key_name=key_pair.key_name if key_pair else None,
            iam_instance_profile={"arn": profile.arn},
            metadata_options={
                "http_endpoint": "enabled", "http_tokens": "required",
                "http_put_response_hop_limit": 2, "instance_metadata_tags": "enabled",
            },
            network_interfaces=[
                {
                    "network_card_index": slot.network_card_index,
                    "device_index": slot.device_index,
                    "interface_type": slot.interface_type,
                    "subnet_id": args.subnet_id,
                    "security_groups": args.security_group_ids,
                    "associate_public_ip_address": "false",
                    "delete_on_termination": "true",
                }
                for slot in interface_layout(args.network_cards, args.efa_interfaces)
            ],
            block_device_mappings=[{
                "device_name": "/dev/sda1",
                "ebs": {
                    "volume_size": args.root_volume_gib, "volume_type": "gp3", "encrypted": "true",
                    "delete_on_termination": "true", "iops": 3000, "throughput": 250,
                },
            }],
            placement={"availability_zone": args.zone, **({"group_name": placement.name} if placement else {})},
            instance_market_options=_market_options(args.capacity, request),
            capacity_reservation_specification=_reservation(
                args.capacity_reservation_id if args.capacity in RESERVED else None),
            user_data=pulumi.Output.from_input(args.user_data).apply(
                lambda text: base64.b64encode(text.encode()).decode()
            ),
            tag_specifications=[{"resource_type": kind, "tags": args.tags}
                                for kind in TAGGED_AT_LAUNCH + ((SPOT_REQUEST_TAGS,) if request else ())],
            # the default is what a node launched by hand (console, CLI) gets: the pool's current version
            update_default_version=True,
            tags=args.tags,
            opts=child,
        )
        version = template.latest_version.apply(str)
        hooks = None
        if request == spot.PERSISTENT:
            hooks = pulumi.ResourceHookBinding(before_delete=[spot.cancel_request_hook(name)])
        nodes = [
            aws.ec2.Instance(
                f"{name}-{i}",
                launch_template={"id": template.id, "version": version},
                tags={**args.tags, "Name": f"{name}-{i}"},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                    ignore_changes=[] if i in args.rolled else ["launchTemplate"],
                    delete_before_replace=True,
                    hooks=hooks,
                )),
            )
            for i in range(args.count)
        ]
        self.instance_ids = pulumi.Output.all(*[n.id for n in nodes])
        self.private_ips = pulumi.Output.all(*[n.private_ip for n in nodes])
        self.placement_group = placement.name if placement else None
        self.register_outputs({
            "instance_ids": self.instance_ids, "private_ips": self.private_ips,
            "placement_group": self.placement_group,
        })

    @staticmethod
    def _instance_profile(name: str, args: GpuNodePoolArgs, child: pulumi.ResourceOptions) -> aws.iam.InstanceProfile:
        """SSM for access, ECR to pull the golden image, the stack's bucket and, with Slurm, reading the munge key:
        nothing else."""
        role = aws.iam.Role(f"{name}-role", assume_role_policy=assumed_by("ec2.amazonaws.com"), tags=args.tags, opts=child)
        for i, arn in enumerate(NODE_MANAGED_POLICIES):
            aws.iam.RolePolicyAttachment(f"{name}-role-policy-{i}", role=role.name, policy_arn=arn, opts=child)
        aws.iam.RolePolicy(
            f"{name}-bucket-access", role=role.id,
            policy=pulumi.Output.from_input(args.bucket_arn).apply(_bucket_policy),
            opts=child,
        )
        if args.secret_policy is not None:
            aws.iam.RolePolicy(f"{name}-munge-key", role=role.id, policy=args.secret_policy, opts=child)
        return aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=args.tags, opts=child)


def ssh_key_problems(spec: ClusterSpec) -> list[Problem]:
    """A pool key EC2 would refuse at `up` (an ECDSA key)."""
    return access.key_type_problems(spec, SSH_KEY_TYPES, "EC2 (ImportKeyPair takes RSA and ED25519 keys only)")


def login_notes(spec: ClusterSpec, user: str) -> list[str]:
    """How a user reaches the nodes, which have no public address: SSM, by instance id, with or without ssh."""
    stack = spec.stack
    through_ssm = ("The nodes have no public address: reach them by instance id through Session Manager (the AWS "
                   "CLI with its Session Manager plugin), with an ssh config (--ssh-config FILE, or ~/.ssh/config) "
                   f"holding `{SSM_SSH_CONFIG[0]}` and `{SSM_SSH_CONFIG[1]}` (and an IdentityFile line for your "
                   f"private key), then `goldenenv validate|run -s {stack} --hosts-by instance-id`; or from "
                   "network.adminCidrs (a VPN) at their private IPs, the default")
    shell_only = (f"Log in with `aws ssm start-session --region {spec.region} --target <instance id>` (stack "
                  "output ssmConnect); validate and run log in over ssh and need a key: set sshPublicKey to your "
                  ".pub line (a new key reaches running nodes with `goldenenv up --roll-nodes`)")
    return access.login_notes(spec, user, through_ssm, shell_only)


def _bucket_policy(bucket_arn: str) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": list(privilege.BUCKET_LIST_ACTIONS), "Resource": bucket_arn},
            {"Effect": "Allow", "Action": list(privilege.OBJECT_ACTIONS), "Resource": f"{bucket_arn}/*"},
        ],
    })


RESERVED = ("capacity-reservation", "capacity-block")
"""Capacity types whose nodes launch into the reservation the pool names."""
CAPACITY_BLOCK = "capacity-block"


def in_placement_group(efa_interfaces: int, capacity: str) -> bool:
    """A pool with EFA is placed in a cluster placement group, for the fabric's latency; a pool without is not, nor
    is a Capacity Block's: EC2 already places its instances close together ("no need to use a cluster placement
    group with a Capacity Block", EC2 User Guide, Work with Capacity Blocks)."""
    return efa_interfaces > 0 and capacity != CAPACITY_BLOCK


def _market_options(capacity: str, request: str | None) -> dict | None:
    """Spot (spot.market_options) or a Capacity Block's market; None for on-demand and capacity reservations."""
    if capacity == CAPACITY_BLOCK:
        return {"market_type": CAPACITY_BLOCK}
    return spot.market_options(request)


def _reservation(reservation_id: str | None) -> dict | None:
    if not reservation_id:
        return None
    return {"capacity_reservation_target": {"capacity_reservation_id": reservation_id}}
