"""The Slurm head on Huawei Cloud, and the munge key in Huawei's secret store (DEW's CSMS).

The secret is created holding a fixed placeholder (PLACEHOLDER; dew.Secret needs a first value), the only value
Pulumi's state keeps, with its later changes ignored: the head writes the key as a new version on its first boot
(templates/node/munge-key-huawei.sh.j2) and every host reads the newest version, refusing the placeholder, so the key
is in no state, no user data and no log.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_huaweicloud as huaweicloud

from goldenenv.clouds.huawei.basics import image_args
from goldenenv.clouds.huawei.nodes import ON_DEMAND, SYSTEM_DISK, HostAgencyArgs, host_agency
from goldenenv.nodeboot import MungeKey

PLACEHOLDER = "goldenenv-munge-key-pending"
"""The secret's first version: not a key (a munge key is at least 32 bytes of binary)."""


def munge_key(secret_name: str) -> MungeKey:
    return MungeKey("munge-key-huawei.sh", {"secret_name": secret_name, "placeholder": PLACEHOLDER})


@dataclass(frozen=True, kw_only=True)
class SlurmHeadArgs:
    flavor: str
    zone: str
    image: str
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    system_disk_gib: int
    user_data: pulumi.Input[str]
    policy: pulumi.Input[str]
    agency_name: str
    region: str
    key_pair: pulumi.Input[str] | None
    tags: dict[str, str]


class SlurmHead(pulumi.ComponentResource):
    """A small pay-per-use ECS running slurmctld in the golden container, private only."""

    private_ip: pulumi.Output[str]
    instance_id: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:SlurmHead", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        agency = host_agency(f"{name}-identity", HostAgencyArgs(name=args.agency_name, kind="head",
                                                                policy=args.policy, region=args.region), child)
        head = huaweicloud.ecs.Instance(
            name, name=name, hostname="head", availability_zone=args.zone, flavor_id=args.flavor,
            networks=[huaweicloud.ecs.InstanceNetworkArgs(uuid=args.subnet_id)],
            security_group_ids=[args.security_group_id], charging_mode=ON_DEMAND, system_disk_type=SYSTEM_DISK,
            system_disk_size=args.system_disk_gib, user_data=args.user_data, agency_name=agency,
            key_pair=args.key_pair, tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["userData"]), **image_args(args.image))
        self.private_ip, self.instance_id = head.access_ip_v4, head.id
        self.register_outputs({"private_ip": head.access_ip_v4, "instance_id": head.id})


class MungeSecret(pulumi.ComponentResource):
    secret_name: pulumi.Output[str]

    def __init__(self, name: str, secret_name: str, tags: dict[str, str],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:MungeSecret", name, None, opts)
        secret = huaweicloud.dew.Secret(
            f"{name}-secret", name=secret_name, secret_text=PLACEHOLDER, secret_type="COMMON",
            description="goldenenv: the stack's munge key (a later version, written by the head)", tags=tags,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["secretText", "secretBinary"]))
        self.secret_name = secret.name
        self.register_outputs({"secret_name": secret.name})
