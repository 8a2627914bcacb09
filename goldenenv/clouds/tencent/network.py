"""VPC for a GPU cluster on Tencent Cloud: one subnet in one zone, egress by a NAT gateway (an EIP, a route table
whose default route goes to it) or none; a node security group open only to its members, a head group open only to
the nodes on Slurm's ports. Every rule names a security group or an admin network, never 0.0.0.0/0."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from goldenenv import slurm

NAT_STANDARD = 2
"""nat.Gateway nat_product_version 2: the standard NAT gateway (1 is the traditional one)."""
ALL_PORTS = "ALL"


@dataclass(frozen=True, kw_only=True)
class GpuNetworkArgs:
    zone: pulumi.Input[str]
    cidr: ipaddress.IPv4Network
    egress: str
    """nat: a NAT gateway with an EIP and the subnet's default route to it; endpoints: no internet path."""
    admin_cidrs: list[str] = field(default_factory=list)
    slurm_head: bool = False
    tags: dict[str, str]


def _rule(action: str, protocol: str, port: str, description: str, **source: pulumi.Input[str]):
    return tencentcloud.security.GroupRuleSetIngressArgs(action=action, protocol=protocol, port=port,
                                                         description=description, **source)


class GpuNetwork(pulumi.ComponentResource):
    """A VPC, the nodes' subnet, a NAT gateway for their egress, a node group open only to its members (RDMA's
    control traffic, NCCL's sockets) and to SSH from admin networks, and with Slurm a head group."""

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    head_security_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:tencent:GpuNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        nodes_cidr = next(args.cidr.subnets(new_prefix=args.cidr.prefixlen + 1))
        vpc = tencentcloud.vpc.Instance(f"{name}-vpc", name=f"{name}-vpc", cidr_block=str(args.cidr),
                                        tags=args.tags, opts=child)
        subnet = tencentcloud.subnet.Instance(
            f"{name}-nodes", name=f"{name}-nodes", vpc_id=vpc.id, availability_zone=args.zone,
            cidr_block=str(nodes_cidr), tags=args.tags, opts=child)
        if args.egress == "nat":
            self._nat_egress(name, vpc, subnet, args, child)

        group = tencentcloud.security.Group(
            f"{name}-nodes-sg", name=f"{name}-nodes",
            description="GPU nodes: every port between members (RDMA control, NCCL); SSH from admin networks only",
            tags=args.tags, opts=child)
        head = None
        if args.slurm_head:
            head = tencentcloud.security.Group(
                f"{name}-head-sg", name=f"{name}-head",
                description="Slurm head: slurmctld and srun from the GPU nodes only", tags=args.tags, opts=child)
        node_rules = [_rule("ACCEPT", ALL_PORTS, "ALL", "every port from the group's members",
                            source_security_id=group.id)]
        node_rules += [_rule("ACCEPT", "TCP", "22", "SSH from an admin network",
                             **({"ipv6_cidr_block": c} if ipaddress.ip_network(c).version == 6 else {"cidr_block": c}))
                       for c in args.admin_cidrs]
        if head is not None:
            node_rules += [
                _rule("ACCEPT", "TCP", str(slurm.SLURMD_PORT), "slurmd from the Slurm head", source_security_id=head.id),
                _rule("ACCEPT", "TCP", "{}-{}".format(*slurm.SRUN_PORTS), "srun from the Slurm head",
                      source_security_id=head.id)]
            tencentcloud.security.GroupRuleSet(f"{name}-head-rules", security_group_id=head.id, ingresses=[
                _rule("ACCEPT", "TCP", str(slurm.SLURMCTLD_PORT), "slurmctld from the GPU nodes",
                      source_security_id=group.id),
                _rule("ACCEPT", "TCP", "{}-{}".format(*slurm.SRUN_PORTS), "srun from the GPU nodes",
                      source_security_id=group.id),
            ], egresses=[tencentcloud.security.GroupRuleSetEgressArgs(
                action="ACCEPT", protocol=ALL_PORTS, port="ALL", cidr_block="0.0.0.0/0",
                description="outbound through the NAT gateway")], opts=child)
        tencentcloud.security.GroupRuleSet(f"{name}-nodes-rules", security_group_id=group.id, ingresses=node_rules,
                                           egresses=[tencentcloud.security.GroupRuleSetEgressArgs(
                                               action="ACCEPT", protocol=ALL_PORTS, port="ALL",
                                               cidr_block="0.0.0.0/0",
                                               description="outbound through the NAT gateway")], opts=child)

        self.vpc_id = vpc.id
        self.subnet_id = subnet.id
        self.security_group_id = group.id
        self.head_security_group_id = head.id if head is not None else None
        self.register_outputs({"vpc_id": vpc.id, "subnet_id": subnet.id, "security_group_id": group.id,
                               "head_security_group_id": self.head_security_group_id})

    @staticmethod
    def _nat_egress(name, vpc, subnet, args: GpuNetworkArgs, child) -> None:
        """A standard NAT gateway with one EIP, and the subnet's route table sending 0.0.0.0/0 to it."""
        eip = tencentcloud.eip.Instance(f"{name}-nat-eip", name=f"{name}-nat", tags=args.tags, opts=child)
        nat = tencentcloud.nat.Gateway(
            f"{name}-nat-gw", name=f"{name}-nat", vpc_id=vpc.id, assigned_eip_sets=[eip.public_ip],
            nat_product_version=NAT_STANDARD, zone=args.zone, tags=args.tags, opts=child)
        table = tencentcloud.route.Table(f"{name}-routes", vpc_id=vpc.id, name=f"{name}-nodes", tags=args.tags,
                                         opts=child)
        tencentcloud.route.TableEntry(
            f"{name}-default-route", route_table_id=table.id, destination_cidr_block="0.0.0.0/0",
            next_type="NAT", next_hub=nat.id, description="outbound through the NAT gateway", opts=child)
        tencentcloud.route.TableAssociation(f"{name}-routes-nodes", route_table_id=table.id, subnet_id=subnet.id,
                                            opts=child)
