"""The Slurm head on Alibaba Cloud: the munge key's KMS secret, and a small pay-as-you-go CPU instance running
slurmctld.

The secret is created with a fixed placeholder as its data, which is not secret: pulumi-alicloud reads a secret's
current version (ACSCurrent) back into the state on every refresh, so the key must never be that version. The head's
first boot writes 1024 random bytes as a new version staged MUNGE_STAGE (templates/node/munge-key-alicloud.sh.j2),
and every host reads the version of that stage with its instance RAM role: the key is in no input, state or output.
The head may list, read and write versions of that one secret; a node may only read it.

The head is private (no public bandwidth, the nodes' vSwitch, metadata tokens required, an encrypted system disk),
never spot, and boots the first pool's host image. It keeps the boot script it booted until it is rolled
(`goldenenv up --roll-nodes head`), which replaces it, the old one deleted first.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pulumi
import pulumi_alicloud as alicloud

from goldenenv.clouds import access
from goldenenv.clouds.alicloud import privilege
from goldenenv.clouds.alicloud.nodes import (
    AUTO_RELEASE_INPUT, MUNGE_READ_ACTIONS, USER_DATA_INPUT, ecs_assume_role, private_instance,
)
from goldenenv.nodeboot import MungeKey

HEAD_COMPONENT = "goldenenv:alicloud:SlurmHead"
MUNGE_COMPONENT = "goldenenv:alicloud:MungeSecret"
MUNGE_STAGE = "goldenenv-munge"
"""The version stage the munge key is written under: never ACSCurrent, which holds the placeholder."""
PLACEHOLDER = "goldenenv: not the munge key; the key is the version staged goldenenv-munge, written by the head"
KMS_API_VERSION = "2016-01-20"
NODE_SECRET_ACTIONS = MUNGE_READ_ACTIONS
HEAD_SECRET_ACTIONS = privilege.HEAD_SECRET_ACTIONS
"""RAM actions of KMS (RAM authorization for KMS): the head lists the secret's versions (is the key there?), writes
it and reads it; a node reads it. The secret is encrypted with KMS's own key for secrets, so no key action."""


def kms_endpoint(region: str) -> str:
    """KMS's endpoint inside the VPC: reached without a NAT gateway (network.egress endpoints too)."""
    return f"kms-vpc.{region}.aliyuncs.com"


def secret_arn(region: str, name: str) -> str:
    """acs:kms:<region>:*:secret/<name>: the one secret a host's RAM policy reaches (any account: the stack's)."""
    return f"acs:kms:{region}:*:secret/{name}"


def munge_key(secret_name: str, region: str) -> MungeKey:
    """The munge key adapter: the version of the stack's KMS secret staged MUNGE_STAGE, through KMS's VPC endpoint,
    signed with the host's instance RAM role (templates/node/munge-key-alicloud.sh.j2)."""
    return MungeKey("munge-key-alicloud.sh", {
        "secret_name": secret_name, "endpoint": kms_endpoint(region), "api_version": KMS_API_VERSION,
        "stage": MUNGE_STAGE,
    })


@dataclass(frozen=True, kw_only=True)
class MungeSecretArgs:
    secret_name: str
    stack: str
    tags: dict[str, str]


class MungeSecret(pulumi.ComponentResource):
    """The stack's munge key secret, created with its placeholder only."""

    secret_name: pulumi.Output[str]

    def __init__(self, name: str, args: MungeSecretArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(MUNGE_COMPONENT, name, None, opts)
        secret = alicloud.kms.Secret(
            f"{name}-secret", secret_name=args.secret_name, secret_data=PLACEHOLDER, secret_data_type="text",
            version_id="placeholder", description=f"goldenenv: Slurm munge key of stack {args.stack}, written by its "
            f"head as the version staged {MUNGE_STAGE}",
            # a key is worth nothing without its cluster: destroy deletes it at once, so the next up may reuse the name
            force_delete_without_recovery=True, tags=args.tags, opts=pulumi.ResourceOptions(parent=self),
        )
        self.secret_name = secret.secret_name
        self.register_outputs({"secret_name": secret.secret_name})


def head_policy(secret: str, mount_actions: tuple[str, ...]) -> str:
    """The head's RAM policy: its munge key secret, and the read-only calls of the shared file system's mount."""
    return json.dumps({
        "Version": "1",
        "Statement": [{"Effect": "Allow", "Action": list(HEAD_SECRET_ACTIONS), "Resource": [secret]}]
        + ([{"Effect": "Allow", "Action": list(mount_actions), "Resource": ["*"]}] if mount_actions else []),
    })


@dataclass(frozen=True, kw_only=True)
class SlurmHeadArgs:
    instance_type: str
    image_id: pulumi.Input[str]
    zone: pulumi.Input[str]
    vswitch_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    resource_group_id: pulumi.Input[str]
    system_disk_gib: int
    user_data: pulumi.Input[str]
    policy: pulumi.Input[str]
    """The head's RAM policy (head_policy)."""
    role_name: str
    tags: dict[str, str]
    auto_release_time: str | None = None
    """When Alibaba releases the head with the nodes (lifecycle.ttlHours); None: never."""
    rolled: bool = False
    ssh_key: access.NodeKey | None = None


class SlurmHead(pulumi.ComponentResource):
    """The head's RAM role, its key pair, and the instance with the role attached."""

    instance_id: pulumi.Output[str]
    private_ip: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(HEAD_COMPONENT, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = alicloud.ram.Role(
            f"{name}-role", role_name=args.role_name,
            assume_role_policy_document=ecs_assume_role(),
            description=f"goldenenv {name}: the Slurm head's munge key", tags=args.tags, opts=child,
        )
        policy = alicloud.ram.Policy(
            f"{name}-access", policy_name=args.role_name, policy_document=args.policy,
            description=f"goldenenv {name}: the munge key secret and the shared file system's mount",
            tags=args.tags, opts=child,
        )
        alicloud.ram.RolePolicyAttachment(
            f"{name}-access-attachment", role_name=role.role_name, policy_name=policy.policy_name, policy_type="Custom",
            opts=child,
        )
        key_pair = alicloud.ecs.EcsKeyPair(
            f"{name}-key", key_pair_name=args.ssh_key.name, public_key=args.ssh_key.public_key,
            resource_group_id=args.resource_group_id, tags=args.tags, opts=child,
        ) if args.ssh_key else None
        head = alicloud.ecs.Instance(
            name,
            instance_name=name,
            **private_instance(args),
            user_data=pulumi.Output.from_input(args.user_data).apply(
                lambda text: base64.b64encode(text.encode()).decode()),
            key_name=key_pair.key_pair_name if key_pair else None,
            tags={**args.tags, "Name": name},
            volume_tags=args.tags,
            auto_release_time=args.auto_release_time,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                delete_before_replace=True,
                ignore_changes=([] if args.rolled else [USER_DATA_INPUT])
                + ([AUTO_RELEASE_INPUT] if args.auto_release_time else []),
                replace_on_changes=[USER_DATA_INPUT] if args.rolled else None)),
        )
        alicloud.ecs.RamRoleAttachment(
            f"{name}-role-attachment", instance_id=head.id, ram_role_name=role.role_name, opts=child,
        )
        self.instance_id = head.id
        self.private_ip = head.private_ip
        self.register_outputs({"instance_id": head.id, "private_ip": head.private_ip})
