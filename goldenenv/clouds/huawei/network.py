"""VPC for a GPU cluster on Huawei Cloud: one subnet in one zone, egress by a NAT gateway (an EIP and an SNAT rule
for the subnet) or none; a node security group open only to its members, a head group open only to the nodes on
Slurm's ports. The groups are created without Huawei's default rules (delete_default_rules), so every rule is one
goldenenv wrote: each names a security group or an admin network, never 0.0.0.0/0 inbound."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_huaweicloud as huaweicloud

from goldenenv import slurm

NAT_SPEC = "1"
"""nat.Gateway spec 1: the small gateway, 10,000 SNAT connections (pulumi-huaweicloud 0.0.12)."""
EIP_TYPE = "5_bgp"
"""vpc.Eip publicip type: dynamic BGP (5_bgp; 5_sbgp is static BGP)."""
EIP_MBIT = 100
"""The NAT gateway's EIP bandwidth in Mbit/s, billed by traffic (charge_mode traffic): 1 to 300 (0.0.12)."""


@dataclass(frozen=True, kw_only=True)
class GpuNetworkArgs:
    zone: str
    cidr: ipaddress.IPv4Network
    egress: str
    """nat: a NAT gateway with an EIP and an SNAT rule for the subnet; endpoints: no internet path."""
    admin_cidrs: list[str] = field(default_factory=list)
    slurm_head: bool = False
    tags: dict[str, str]


def gateway_ip(network: ipaddress.IPv4Network) -> str:
    """A Huawei subnet names its gateway (vpc.Subnet gateway_ip, required): the first address of the range."""
    return str(next(network.hosts()))


class GpuNetwork(pulumi.ComponentResource):
    """A VPC, the nodes' subnet, a NAT gateway for their egress, a node group open only to its members (NCCL's
    sockets) and to SSH from admin networks, and with Slurm a head group."""

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    head_security_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:huawei:GpuNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        nodes_cidr = next(args.cidr.subnets(new_prefix=args.cidr.prefixlen + 1))
        vpc = huaweicloud.vpc.Vpc(f"{name}-vpc", name=f"{name}-vpc", cidr=str(args.cidr), tags=args.tags, opts=child)
        subnet = huaweicloud.vpc.Subnet(
            f"{name}-nodes", name=f"{name}-nodes", vpc_id=vpc.id, availability_zone=args.zone,
            cidr=str(nodes_cidr), gateway_ip=gateway_ip(nodes_cidr), tags=args.tags, opts=child)
        if args.egress == "nat":
            self._nat_egress(name, vpc, subnet, args, child)

        group = huaweicloud.vpc.Secgroup(
            f"{name}-nodes-sg", name=f"{name}-nodes", delete_default_rules=True,
            description="GPU nodes: every port between members (NCCL); SSH from admin networks only",
            tags=args.tags, opts=child)
        self._rule(f"{name}-nodes-members", group, "every port from the group's members", remote_group_id=group.id)
        for n, cidr in enumerate(args.admin_cidrs):
            self._rule(f"{name}-nodes-ssh-{n}", group, "SSH from an admin network", protocol="tcp", ports="22",
                       remote_ip_prefix=cidr, ethertype="IPv6" if ipaddress.ip_network(cidr).version == 6 else "IPv4")
        self._egress(f"{name}-nodes-egress", group)
        head = None
        if args.slurm_head:
            head = huaweicloud.vpc.Secgroup(
                f"{name}-head-sg", name=f"{name}-head", delete_default_rules=True,
                description="Slurm head: slurmctld and srun from the GPU nodes only", tags=args.tags, opts=child)
            self._rule(f"{name}-head-slurmctld", head, "slurmctld from the GPU nodes", protocol="tcp",
                       ports=str(slurm.SLURMCTLD_PORT), remote_group_id=group.id)
            self._rule(f"{name}-head-srun", head, "srun from the GPU nodes", protocol="tcp",
                       ports="{}-{}".format(*slurm.SRUN_PORTS), remote_group_id=group.id)
            self._rule(f"{name}-nodes-slurmd", group, "slurmd from the Slurm head", protocol="tcp",
                       ports=str(slurm.SLURMD_PORT), remote_group_id=head.id)
            self._rule(f"{name}-nodes-srun", group, "srun from the Slurm head", protocol="tcp",
                       ports="{}-{}".format(*slurm.SRUN_PORTS), remote_group_id=head.id)
            self._egress(f"{name}-head-egress", head)

        self.vpc_id = vpc.id
        self.subnet_id = subnet.id
        self.security_group_id = group.id
        self.head_security_group_id = head.id if head is not None else None
        self.register_outputs({"vpc_id": vpc.id, "subnet_id": subnet.id, "security_group_id": group.id,
                               "head_security_group_id": self.head_security_group_id})

    def _rule(self, name: str, group: huaweicloud.vpc.Secgroup, description: str, *, ethertype: str = "IPv4",
              **rule: pulumi.Input[str]) -> None:
        """One inbound rule; a rule with no protocol covers every protocol and port (SecgroupRuleInitArgs)."""
        huaweicloud.vpc.SecgroupRule(name, direction="ingress", ethertype=ethertype, security_group_id=group.id,
                                     description=description, action="allow",
                                     opts=pulumi.ResourceOptions(parent=self), **rule)

    def _egress(self, name: str, group: huaweicloud.vpc.Secgroup) -> None:
        huaweicloud.vpc.SecgroupRule(name, direction="egress", ethertype="IPv4", security_group_id=group.id,
                                     remote_ip_prefix="0.0.0.0/0", action="allow",
                                     description="outbound through the NAT gateway",
                                     opts=pulumi.ResourceOptions(parent=self))

    @staticmethod
    def _nat_egress(name, vpc, subnet, args: GpuNetworkArgs, child) -> None:
        """A NAT gateway in the subnet, one EIP, and an SNAT rule sending the subnet out through it."""
        eip = huaweicloud.vpc.Eip(
            f"{name}-nat-eip", name=f"{name}-nat", publicip=huaweicloud.vpc.EipPublicipArgs(type=EIP_TYPE),
            bandwidth=huaweicloud.vpc.EipBandwidthArgs(share_type="PER", name=f"{name}-nat", size=EIP_MBIT,
                                                       charge_mode="traffic"),
            tags=args.tags, opts=child)
        nat = huaweicloud.nat.Gateway(f"{name}-nat-gw", name=f"{name}-nat", spec=NAT_SPEC, vpc_id=vpc.id,
                                      subnet_id=subnet.id, tags=args.tags, opts=child)
        huaweicloud.nat.SnatRule(f"{name}-snat", nat_gateway_id=nat.id, floating_ip_id=eip.id, subnet_id=subnet.id,
                                 source_type=0, opts=child)
