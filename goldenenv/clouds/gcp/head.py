"""The Slurm head on Google Cloud: the munge key's secret, and a small on-demand CPU instance running slurmctld.

The munge key lives in Secret Manager, replicated in the stack's region only. The program creates the secret
empty (no version), so the key is in no input, state or output: the head's first boot adds 1024 random bytes as
its first version (templates/node/munge-key-gcp.sh.j2) and every host reads it with its service account. The head's
service account may add versions to and read that one secret; the nodes' may only read it (IAM on the secret, not
the project).

The head is private (no external address, the system subnet, shielded VM) and boots from the first pool's host
image, which carries Docker and the NVIDIA stack (unused here). cloud-init reads its user data at the first boot
only, so a later boot script reaches it only by replacing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from goldenenv.clouds.gcp import privilege
from goldenenv.clouds.gcp.nodes import PD_DISK, USER_DATA_KEY, private_instance
from goldenenv.nodeboot import MungeKey

HEAD_COMPONENT = "goldenenv:gcp:SlurmHead"
MUNGE_COMPONENT = "goldenenv:gcp:MungeSecret"
SECRET_API = "https://secretmanager.googleapis.com/v1"
NODE_SECRET_ROLE, HEAD_SECRET_ROLES = privilege.NODE_SECRET_ROLE, privilege.HEAD_SECRET_ROLES
"""Secret Manager's roles for the munge key: the least-privilege table's (gcp/privilege.py)."""


def munge_key(project: str, secret_id: str) -> MungeKey:
    """The munge key adapter: the stack's secret in Secret Manager, read (and on the head written) over its REST
    API with the host's service account token from the metadata server."""
    return MungeKey("munge-key-gcp.sh", {"secret": f"projects/{project}/secrets/{secret_id}", "api": SECRET_API})


@dataclass(frozen=True, kw_only=True)
class MungeSecretArgs:
    project: pulumi.Input[str]
    secret_id: str
    region: str
    labels: dict[str, str]


class MungeSecret(pulumi.ComponentResource):
    """The stack's munge key secret, created empty, in the stack's region only."""

    secret_id: pulumi.Output[str]

    def __init__(self, name: str, args: MungeSecretArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(MUNGE_COMPONENT, name, None, opts)
        secret = gcp.secretmanager.Secret(
            f"{name}-secret", secret_id=args.secret_id, project=args.project, labels=args.labels,
            replication={"user_managed": {"replicas": [{"location": args.region}]}},
            opts=pulumi.ResourceOptions(parent=self))
        self.secret = secret
        self.secret_id = secret.secret_id
        self.register_outputs({"secret_id": self.secret_id})

    def grant(self, name: str, member: pulumi.Input[str], roles: tuple[str, ...]) -> None:
        for role in roles:
            gcp.secretmanager.SecretIamMember(
                f"{name}-{role.rsplit('.', 1)[-1]}", project=self.secret.project, secret_id=self.secret.secret_id,
                role=role, member=member, opts=pulumi.ResourceOptions(parent=self))


@dataclass(frozen=True, kw_only=True)
class SlurmHeadArgs:
    project: pulumi.Input[str]
    machine_type: str
    zone: str
    image: str
    boot_disk_gib: int
    subnet: pulumi.Input[str]
    user_data: pulumi.Input[str]
    service_account_id: str
    instance_name: str
    labels: dict[str, str]
    metadata: dict[str, str]
    """Access metadata (OS Login or the key), as the nodes get it."""
    network_tag: str


class SlurmHead(pulumi.ComponentResource):
    """The head's service account and instance."""

    private_ip: pulumi.Output[str]
    instance_name: pulumi.Output[str]
    member: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(HEAD_COMPONENT, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = gcp.serviceaccount.Account(
            f"{name}-sa", account_id=args.service_account_id, project=args.project,
            display_name=f"goldenenv {name}", opts=child)
        self.member = account.email.apply(lambda e: f"serviceAccount:{e}")
        metadata: Any = pulumi.Output.from_input(args.user_data).apply(
            lambda text: {USER_DATA_KEY: text, **args.metadata})
        head = gcp.compute.Instance(
            f"{name}", name=args.instance_name, project=args.project, zone=args.zone,
            machine_type=args.machine_type,
            **private_instance(args.image, args.boot_disk_gib, PD_DISK, account.email, args.labels, args.network_tag,
                               secure_boot=True),
            network_interfaces=[{"subnetwork": args.subnet, "nic_type": "GVNIC"}],
            scheduling={"on_host_maintenance": "MIGRATE", "automatic_restart": True,
                        "provisioning_model": "STANDARD"},
            metadata=metadata,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["metadata"])))
        self.private_ip = head.network_interfaces[0].network_ip
        self.instance_name = head.name
        self.register_outputs({"private_ip": self.private_ip, "instance_name": self.instance_name})
