"""The GPU nodes on Tencent Cloud: a CAM role for the pool, its HPC cluster (HCC types: one per pool, in its zone),
and one CVM instance per node: no public address, the node security group, the host image pinned, the boot's user
data base64-encoded, on demand (POSTPAID_BY_HOUR) or spot (SPOTPAID, ONE-TIME, a max price).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from dataclasses import dataclass

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv.clouds.base import NodeScript, NodeUpdates
from goldenenv.clouds.tencent import privilege
from goldenenv.clouds.tencent.limits import INSTANCE

ON_DEMAND, SPOT = "POSTPAID_BY_HOUR", "SPOTPAID"
SPOT_ONE_TIME = "ONE-TIME"
SYSTEM_DISK = "CLOUD_BSSD"
"""A balanced SSD cloud disk (tencentcloud-iac-pulumi 0.2.3 instance.system_disk_type: LOCAL_BASIC, LOCAL_SSD,
CLOUD_BASIC, CLOUD_SSD, CLOUD_PREMIUM, CLOUD_BSSD, CLOUD_HSSD ...); whether every HCC type takes it is unverified."""
STOP_CHARGING = "STOP_CHARGING"

NODE_UPDATES = NodeUpdates(
    node_types=(INSTANCE,),
    script=NodeScript("userData", "goldenenv:tencent:GpuNodePool", "wantedUserData"),
    replacing=frozenset({"availabilityZone", "imageId", "hpcClusterId", "instanceChargeType", "userData",
                         "subnetId", "vpcId"}),
    restarting={"instanceType": "a stop, a resize and a start (the node's disks stay)"},
    meaning={"userData": "userData (boot script)"},
    erased="its system disk",
    note="the nodes keep the boot script they were created with; `goldenenv up --roll-nodes` replaces them onto the "
         "current one (user_data is ForceNew in the provider)")
"""Which node inputs replace a CVM instance (ForceNew in terraform-provider-tencentcloud's instance schema as the
bridge carries it; unverified input by input)."""


def user_data(cloud_config: str) -> str:
    """The cloud-config gzipped (cloud-init reads gzip-compressed user data) and base64-encoded: Tencent takes 16 KB
    after base64 (limits.USER_DATA), which an HCC node's uncompressed boot passes. mtime 0: the same boot, the same
    bytes."""
    return base64.b64encode(gzip.compress(cloud_config.encode(), mtime=0)).decode()


@dataclass(frozen=True, kw_only=True)
class HostRoleArgs:
    role_name: str
    kind: str
    """A row of privilege.NEEDS: node, head or stop."""
    document: pulumi.Input[str]
    tags: dict[str, str]


def host_role(name: str, args: HostRoleArgs, opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
    """A CAM role only its service may assume, with one custom policy of exactly what the row needs, created in the
    component that uses it (opts: a child of it), so the identity's kind is read from where it is (privilege.kind_of);
    its name."""
    role = tencentcloud.cam.Role(f"{name}-role", name=args.role_name, document=privilege.trust_document(args.kind),
                                 description=f"goldenenv {args.kind}", console_login=False, tags=args.tags, opts=opts)
    policy = tencentcloud.cam.Policy(f"{name}-policy", name=args.role_name, document=args.document,
                                     description=f"goldenenv {args.kind}: least privilege", opts=opts)
    tencentcloud.cam.RolePolicyAttachment(f"{name}-attach", role_id=role.id, policy_id=policy.id, opts=opts)
    return role.name


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    pool: str
    instance_type: str
    count: int
    zone: pulumi.Input[str]
    image_id: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    hpc_cluster: bool
    spot_max_price: str | None
    system_disk_gib: int
    user_data: pulumi.Input[str]
    policy: pulumi.Input[str]
    role_name: str
    key_id: pulumi.Input[str] | None
    tags: dict[str, str]
    rolled: frozenset[int] = frozenset()


class GpuNodePool(pulumi.ComponentResource):
    """One pool's nodes (<stack>-<pool>-<index>), in their HPC cluster where the type is an HCC one."""

    private_ips: pulumi.Output[list[str]]
    instance_ids: pulumi.Output[list[str]]
    hpc_cluster_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role_name = host_role(f"{name}-identity", HostRoleArgs(role_name=args.role_name, kind="node",
                                                                document=args.policy, tags=args.tags), child)
        cluster = None
        if args.hpc_cluster:
            cluster = tencentcloud.cvm.HpcCluster(f"{name}-hpc", zone=args.zone, name=name[:60],
                                                  remark="goldenenv: the pool's RDMA network", opts=child)
        market = {"instance_charge_type": ON_DEMAND}
        if args.spot_max_price:
            market = {"instance_charge_type": SPOT, "spot_instance_type": SPOT_ONE_TIME,
                      "spot_max_price": args.spot_max_price}
        data = pulumi.Output.from_input(args.user_data).apply(user_data)
        nodes = []
        for i in range(args.count):
            node = f"{name}-{i}"
            nodes.append(tencentcloud.instance.Instance(
                node, instance_name=node, hostname=f"{args.pool}-{i}", availability_zone=args.zone,
                instance_type=args.instance_type, image_id=args.image_id,
                hpc_cluster_id=cluster.id if cluster else None, vpc_id=args.vpc_id, subnet_id=args.subnet_id,
                orderly_security_groups=[args.security_group_id], allocate_public_ip=False,
                internet_max_bandwidth_out=0, system_disk_type=SYSTEM_DISK, system_disk_size=args.system_disk_gib,
                user_data=data, cam_role_name=role_name, key_ids=[args.key_id] if args.key_id else None,
                stopped_mode=STOP_CHARGING, force_delete=True, disable_api_termination=False, tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["userData"] if i in args.rolled else None,
                                            ignore_changes=None if i in args.rolled else ["userData"]),
                **market))
        self.private_ips = pulumi.Output.all(*[n.private_ip for n in nodes])
        self.instance_ids = pulumi.Output.all(*[n.id for n in nodes])
        self.hpc_cluster_id = cluster.id if cluster else None
        wanted = data.apply(lambda d: {f"{name}-{i}": hashlib.sha256(d.encode()).hexdigest()
                                       for i in range(args.count)})
        self.register_outputs({"private_ips": self.private_ips, "instance_ids": self.instance_ids,
                               "wantedUserData": wanted})
