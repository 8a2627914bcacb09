"""The Slurm head on AWS: the munge key's secret, and a small on-demand CPU instance running slurmctld.

The munge key lives in Secrets Manager, encrypted with a key of the stack's own. The program creates the secret
empty (no SecretVersion), so the key is in no input, state or output: the head's first boot writes 1024 random
bytes as its first version (templates/node/munge-key-aws.sh.j2), and every host reads it with its instance role.
The head may describe, read and write that one secret; a node may only read it. KMS use is allowed only through
Secrets Manager in the stack's region (kms:ViaService).

The head is private (no public address, the nodes' subnet, IMDSv2 only, an encrypted root volume) and boots from
the same host image as the first pool, which carries Docker, the AWS CLI and the Lustre client. Like the nodes it
keeps the boot script it booted: a later one (a new golden image push) reaches it only when it is rolled
(`goldenenv up --roll-nodes head`), which replaces it; it is deleted before its replacement starts, so two
controllers never share slurmctld's state.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from goldenenv.clouds import access
from goldenenv.clouds.aws import privilege
from goldenenv.clouds.aws.iam import assumed_by
from goldenenv.clouds.aws.nodes import NODE_MANAGED_POLICIES
from goldenenv.nodeboot import MungeKey

HEAD_COMPONENT = "goldenenv:aws:SlurmHead"
MUNGE_COMPONENT = "goldenenv:aws:MungeSecret"
SECRETS_SERVICE = "secretsmanager"
NODE_SECRET_ACTIONS, HEAD_SECRET_ACTIONS = privilege.NODE_SECRET_ACTIONS, privilege.HEAD_SECRET_ACTIONS
NODE_KEY_ACTIONS, HEAD_KEY_ACTIONS = privilege.NODE_KEY_ACTIONS, privilege.HEAD_KEY_ACTIONS
"""What each host asks of Secrets Manager and KMS for the munge key: the least-privilege table's (aws/privilege.py)."""


@dataclass(frozen=True, kw_only=True)
class MungeSecretArgs:
    stack: str
    tags: dict[str, str]


class MungeSecret(pulumi.ComponentResource):
    """The stack's munge key secret, created empty, and the KMS key that encrypts it."""

    secret_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]

    def __init__(self, name: str, args: MungeSecretArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(MUNGE_COMPONENT, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        key = aws.kms.Key(
            f"{name}-kms", description=f"goldenenv: encrypts the Slurm munge key of stack {args.stack}",
            enable_key_rotation=True, deletion_window_in_days=7, tags=args.tags, opts=child,
        )
        # no SecretVersion: the head writes the value at its first boot. A key is worth nothing without its
        # cluster, so destroy deletes the secret at once (no recovery window: the next up may reuse the name).
        secret = aws.secretsmanager.Secret(
            f"{name}-secret", description=f"goldenenv: Slurm munge key of stack {args.stack}, written by its head",
            kms_key_id=key.arn, recovery_window_in_days=0, tags=args.tags, opts=child,
        )
        self.secret_arn = secret.arn
        self.key_arn = key.arn
        self.register_outputs({"secret_arn": secret.arn, "key_arn": key.arn})


def munge_key(secret_arn: str, region: str) -> MungeKey:
    """The munge key adapter: the stack's secret in Secrets Manager, read (and on the head written) with the AWS
    CLI and the host's instance role."""
    return MungeKey("munge-key-aws.sh", {"secret_id": secret_arn, "region": region})


def secret_policy(secret_arn: str, key_arn: str, region: str, head: bool) -> str:
    """The IAM policy a host needs for the munge key: the head describes, writes and reads it; a node reads it."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "MungeKeySecret", "Effect": "Allow",
             "Action": list(HEAD_SECRET_ACTIONS if head else NODE_SECRET_ACTIONS), "Resource": secret_arn},
            {"Sid": "MungeKeyEncryption", "Effect": "Allow",
             "Action": list(HEAD_KEY_ACTIONS if head else NODE_KEY_ACTIONS), "Resource": key_arn,
             "Condition": {"StringEquals": {"kms:ViaService": f"{SECRETS_SERVICE}.{region}.amazonaws.com"}}},
        ],
    })


@dataclass(frozen=True, kw_only=True)
class SlurmHeadArgs:
    instance_type: str
    image_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    root_volume_gib: int
    user_data: pulumi.Input[str]
    secret_policy: pulumi.Input[str]
    """The head's munge key policy (secret_policy(..., head=True))."""
    tags: dict[str, str]
    rolled: bool = False
    """Replace the head onto the boot script the program gives it now (the user asked to roll it)."""
    ssh_key: access.NodeKey | None = None
    """The key pair the head takes for ssh logins; None: none, SSM sessions only."""


class SlurmHead(pulumi.ComponentResource):
    """The head's role (SSM, ECR, its munge key secret), its key pair, and the instance."""

    instance_id: pulumi.Output[str]
    private_ip: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(HEAD_COMPONENT, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(f"{name}-role", assume_role_policy=assumed_by("ec2.amazonaws.com"), tags=args.tags,
                            opts=child)
        for i, arn in enumerate(NODE_MANAGED_POLICIES):
            aws.iam.RolePolicyAttachment(f"{name}-role-policy-{i}", role=role.name, policy_arn=arn, opts=child)
        aws.iam.RolePolicy(f"{name}-munge-key", role=role.id, policy=args.secret_policy, opts=child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=args.tags, opts=child)
        key_pair = aws.ec2.KeyPair(
            f"{name}-key", key_name=args.ssh_key.name, public_key=args.ssh_key.public_key, tags=args.tags,
            opts=child,
        ) if args.ssh_key else None
        head = aws.ec2.Instance(
            name,
            ami=args.image_id,
            instance_type=args.instance_type,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[args.security_group_id],
            associate_public_ip_address=False,
            iam_instance_profile=profile.name,
            key_name=key_pair.key_name if key_pair else None,
            metadata_options={
                "http_endpoint": "enabled", "http_tokens": "required",
                "http_put_response_hop_limit": 2, "instance_metadata_tags": "enabled",
            },
            root_block_device={
                "volume_size": args.root_volume_gib, "volume_type": "gp3", "encrypted": True,
                "delete_on_termination": True, "tags": args.tags,
            },
            user_data_base64=pulumi.Output.from_input(args.user_data).apply(
                lambda text: base64.b64encode(text.encode()).decode()),
            user_data_replace_on_change=True,
            tags={**args.tags, "Name": name},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                ignore_changes=[] if args.rolled else ["userDataBase64"],
                delete_before_replace=True,
            )),
        )
        self.instance_id = head.id
        self.private_ip = head.private_ip
        self.register_outputs({"instance_id": head.id, "private_ip": head.private_ip})
