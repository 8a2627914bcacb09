"""The GPU nodes on Huawei Cloud: an IAM agency for the pool, and one ECS instance per node: no public address, the
node security group, the host image pinned, the boot's cloud-config as user data, pay-per-use (postPaid). Spot is
not offered: whether Huawei sells GPU flavors as spot, and where a spot ECS reads its reclaim notice, are unverified
(docs/research/huawei.md §8), so Cloud.check refuses a spot pool.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_huaweicloud as huaweicloud

from goldenenv.clouds.base import NodeScript, NodeUpdates
from goldenenv.clouds.huawei import privilege
from goldenenv.clouds.huawei.basics import image_args
from goldenenv.clouds.huawei.limits import DEVSERVER, INSTANCE

ON_DEMAND = "postPaid"
SYSTEM_DISK = "GPSSD"
"""A general purpose SSD (ecs.Instance system_disk_type's default); whether every GPU flavor takes it is unverified."""

NODE_UPDATES = NodeUpdates(
    node_types=(INSTANCE, DEVSERVER),
    script=NodeScript("userData", "goldenenv:huawei:GpuNodePool", "wantedUserData"),
    replacing=frozenset({"availabilityZone", "imageId", "imageName", "chargingMode", "userData", "networks",
                         "flavor", "zone", "vpcId", "subnetId", "securityGroupId", "rootVolumeGib", "agencyName"}),
    restarting={"flavorId": "a stop, a resize and a start (the node's disks stay)"},
    meaning={"userData": "userData (boot script)"},
    erased="its system disk",
    note="the nodes keep the boot script they were created with; `goldenenv up --roll-nodes` replaces them onto the "
         "current one (user_data is ForceNew in the provider)")
"""Which node inputs replace an ECS instance (ForceNew in terraform-provider-huaweicloud's compute_instance schema
as 0.0.12 carries it: image and user data per its docstrings; the rest unverified input by input), and which replace a
Lite Server (flavor, zone, network, root volume, agency; devserver.REPLACING also replaces on its key pair, which
this report leaves to the ECS rule)."""


@dataclass(frozen=True, kw_only=True)
class HostAgencyArgs:
    name: str
    kind: str
    """A row of privilege.NEEDS: node, head or stop."""
    policy: pulumi.Input[str]
    region: str


def host_agency(name: str, args: HostAgencyArgs, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """An agency delegated to its service only, holding one custom policy of exactly what the row needs in the
    stack's region, created in the component that uses it (opts: a child of it), so the identity's kind is read from
    where it is (privilege.kind_of); its name."""
    role = huaweicloud.iam.Role(f"{name}-policy", name=args.name, type="XA", policy=args.policy,
                                description=f"goldenenv {args.kind}: least privilege", opts=opts)
    agency = huaweicloud.iam.Agency(
        f"{name}-agency", name=args.name, delegated_service_name=privilege.SERVICES[args.kind],
        description=f"goldenenv {args.kind}", duration="FOREVER",
        project_roles=[huaweicloud.iam.AgencyProjectRoleArgs(project=args.region, roles=[role.name])], opts=opts)
    return agency.name


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    pool: str
    flavor: str
    count: int
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
    rolled: frozenset[int] = frozenset()


class GpuNodePool(pulumi.ComponentResource):
    """One pool's nodes (<stack>-<pool>-<index>)."""

    private_ips: pulumi.Output[list[str]]
    instance_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        agency = host_agency(f"{name}-identity", HostAgencyArgs(name=args.agency_name, kind="node",
                                                                policy=args.policy, region=args.region), child)
        data = pulumi.Output.from_input(args.user_data)
        nodes = []
        for i in range(args.count):
            node = f"{name}-{i}"
            nodes.append(huaweicloud.ecs.Instance(
                node, name=node, hostname=f"{args.pool}-{i}", availability_zone=args.zone, flavor_id=args.flavor,
                networks=[huaweicloud.ecs.InstanceNetworkArgs(uuid=args.subnet_id)],
                security_group_ids=[args.security_group_id], charging_mode=ON_DEMAND,
                system_disk_type=SYSTEM_DISK, system_disk_size=args.system_disk_gib, user_data=data,
                agency_name=agency, key_pair=args.key_pair, tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["userData"] if i in args.rolled else None,
                                            ignore_changes=None if i in args.rolled else ["userData"]),
                **image_args(args.image)))
        self.private_ips = pulumi.Output.all(*[n.access_ip_v4 for n in nodes])
        self.instance_ids = pulumi.Output.all(*[n.id for n in nodes])
        wanted = data.apply(lambda d: {f"{name}-{i}": hashlib.sha256(d.encode()).hexdigest()
                                       for i in range(args.count)})
        self.register_outputs({"private_ips": self.private_ips, "instance_ids": self.instance_ids,
                               "wantedUserData": wanted})
