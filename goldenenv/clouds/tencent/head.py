"""The Slurm head on Tencent Cloud, and the munge key in Tencent's secret store (SSM).

The secret is user-defined (secret_type 0), created empty by the program: the head writes the key as version
MUNGE_VERSION on its first boot (PutSecretValue, templates/node/munge-key-tencent.sh.j2) and every host reads that
version by name (a user-defined secret has no SSM_Current alias: tencentcloud-sdk-python-ssm 3.1.194
GetSecretValueRequest.VersionId), so the key is in no Pulumi state, no user data and no log.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv.clouds.tencent.nodes import ON_DEMAND, SYSTEM_DISK, HostRoleArgs, host_role, user_data
from goldenenv.nodeboot import MungeKey

MUNGE_VERSION = "munge"
RECOVERY_DAYS = 7
"""recovery_window_in_days: a destroyed stack's secret can be restored for a week (0 deletes at once)."""


def munge_key(secret_name: str) -> MungeKey:
    return MungeKey("munge-key-tencent.sh", {"secret_name": secret_name, "version_id": MUNGE_VERSION})


@dataclass(frozen=True, kw_only=True)
class SlurmHeadArgs:
    instance_type: str
    zone: pulumi.Input[str]
    image_id: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    system_disk_gib: int
    user_data: pulumi.Input[str]
    policy: pulumi.Input[str]
    role_name: str
    key_id: pulumi.Input[str] | None
    tags: dict[str, str]


class SlurmHead(pulumi.ComponentResource):
    """A small on-demand CVM running slurmctld in the golden container, private only."""

    private_ip: pulumi.Output[str]
    instance_id: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:SlurmHead", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role_name = host_role(f"{name}-identity", HostRoleArgs(role_name=args.role_name, kind="head",
                                                                document=args.policy, tags=args.tags), child)
        head = tencentcloud.instance.Instance(
            name, instance_name=name, hostname="head", availability_zone=args.zone, instance_type=args.instance_type,
            image_id=args.image_id, instance_charge_type=ON_DEMAND, vpc_id=args.vpc_id, subnet_id=args.subnet_id,
            orderly_security_groups=[args.security_group_id], allocate_public_ip=False, internet_max_bandwidth_out=0,
            system_disk_type=SYSTEM_DISK, system_disk_size=args.system_disk_gib,
            user_data=pulumi.Output.from_input(args.user_data).apply(user_data), cam_role_name=role_name,
            key_ids=[args.key_id] if args.key_id else None, force_delete=True, tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["userData"]))
        self.private_ip, self.instance_id = head.private_ip, head.id
        self.register_outputs({"private_ip": head.private_ip, "instance_id": head.id})


class MungeSecret(pulumi.ComponentResource):
    secret_name: pulumi.Output[str]

    def __init__(self, name: str, secret_name: str, tags: dict[str, str],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:MungeSecret", name, None, opts)
        secret = tencentcloud.ssm.Secret(
            f"{name}-secret", secret_name=secret_name, description="goldenenv: the stack's munge key (version "
            f"{MUNGE_VERSION}, written by the head)", secret_type=0, recovery_window_in_days=RECOVERY_DAYS,
            is_enabled=True, tags=tags, opts=pulumi.ResourceOptions(parent=self))
        self.secret_name = secret.secret_name
        self.register_outputs({"secret_name": secret.secret_name})
