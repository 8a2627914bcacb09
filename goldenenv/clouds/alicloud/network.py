"""VPC for a GPU cluster on Alibaba Cloud: one vSwitch in one zone, egress by an Enhanced NAT gateway or none."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_alicloud as alicloud

from goldenenv import slurm

INNER_ACCEPT = "Accept"
"""inner_access_policy: members of the group reach each other on every port (eRDMA and NCCL need it)."""
INNER_DROP = "Drop"
"""inner_access_policy of the head's group: its members are let in by the rules alone."""
NAT_TYPE = "Enhanced"
PAY_AS_YOU_GO = "PayAsYouGo"
INTRANET = "intranet"


@dataclass(frozen=True, kw_only=True)
class GpuNetworkArgs:
    zone: pulumi.Input[str]
    cidr: ipaddress.IPv4Network
    egress: str
    """nat: Enhanced NAT gateway with an EIP and an SNAT entry; endpoints: no internet path (Alibaba's services are
    reached on their VPC-internal endpoints: OSS `oss-<region>-internal`, ACR `registry-vpc`)."""
    admin_cidrs: list[str] = field(default_factory=list)
    resource_group_id: pulumi.Input[str]
    slurm_head: bool = False
    """A Slurm head joins the cluster: its own group, reached by the nodes on slurmctld's and srun's ports only."""
    tags: dict[str, str]


class GpuNetwork(pulumi.ComponentResource):
    """A VPC, the nodes' vSwitch, a node security group open only to its members and SSH from admin networks only,
    and with Slurm a head group: slurmctld and srun from the node group, slurmd and srun on the nodes from the head
    group, no rule naming an address range."""

    vpc_id: pulumi.Output[str]
    vswitch_id: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    head_security_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:alicloud:GpuNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        nodes_cidr, nat_cidr = _split(args.cidr)

        def tags(label: str) -> dict[str, str]:
            return {**args.tags, "Name": f"{name}-{label}"}

        vpc = alicloud.vpc.Network(
            f"{name}-vpc", vpc_name=f"{name}-vpc", cidr_block=str(args.cidr),
            resource_group_id=args.resource_group_id, tags=tags("vpc"), opts=child,
        )
        nodes = alicloud.vpc.Switch(
            f"{name}-nodes", vswitch_name=f"{name}-nodes", vpc_id=vpc.id, cidr_block=str(nodes_cidr),
            zone_id=args.zone, tags=tags("nodes"), opts=child,
        )
        if args.egress == "nat":
            self._nat_egress(name, vpc, nodes, nat_cidr, args, tags, child)

        group = alicloud.ecs.SecurityGroup(
            f"{name}-nodes-sg", security_group_name=f"{name}-nodes", vpc_id=vpc.id,
            description="GPU nodes: all traffic between members (eRDMA and NCCL); no SSH from the internet",
            inner_access_policy=INNER_ACCEPT, resource_group_id=args.resource_group_id,
            tags=tags("nodes"), opts=child,
        )
        for i, cidr in enumerate(args.admin_cidrs):
            source = {"ipv6_cidr_ip": cidr} if ipaddress.ip_network(cidr).version == 6 else {"cidr_ip": cidr}
            alicloud.ecs.SecurityGroupRule(
                f"{name}-ssh-{i}", security_group_id=group.id, type="ingress", ip_protocol="tcp",
                port_range="22/22", nic_type=INTRANET, policy="accept",
                description="SSH from an admin network", opts=child, **source,
            )

        head = self._head_group(name, vpc, group, args, tags, child) if args.slurm_head else None

        self.vpc_id = vpc.id
        self.vswitch_id = nodes.id
        self.security_group_id = group.id
        self.head_security_group_id = head.id if head else None
        self.register_outputs({"vpc_id": vpc.id, "vswitch_id": nodes.id, "security_group_id": group.id,
                               "head_security_group_id": self.head_security_group_id})

    @staticmethod
    def _head_group(name, vpc, nodes, args: GpuNetworkArgs, tags, child) -> alicloud.ecs.SecurityGroup:
        """The head's group, and the rules between it and the node group (egress stays Alibaba's default: all)."""
        head = alicloud.ecs.SecurityGroup(
            f"{name}-head-sg", security_group_name=f"{name}-head", vpc_id=vpc.id,
            description="Slurm head: slurmctld and srun from the GPU nodes only; nothing from the internet",
            inner_access_policy=INNER_DROP, resource_group_id=args.resource_group_id, tags=tags("head"), opts=child,
        )
        rules = [
            ("head-slurmctld", head, nodes, (slurm.SLURMCTLD_PORT, slurm.SLURMCTLD_PORT), "slurmctld from the GPU nodes"),
            ("head-srun", head, nodes, slurm.SRUN_PORTS, "srun from the GPU nodes"),
            ("nodes-slurmd", nodes, head, (slurm.SLURMD_PORT, slurm.SLURMD_PORT), "slurmd from the Slurm head"),
            ("nodes-srun", nodes, head, slurm.SRUN_PORTS, "srun from the Slurm head"),
        ]
        for label, group, source, (lo, hi), what in rules:
            alicloud.ecs.SecurityGroupRule(
                f"{name}-{label}", security_group_id=group.id, type="ingress", ip_protocol="tcp",
                port_range=f"{lo}/{hi}", source_security_group_id=source.id, nic_type=INTRANET, policy="accept",
                description=what, opts=child,
            )
        return head

    @staticmethod
    def _nat_egress(name, vpc, nodes, nat_cidr, args: GpuNetworkArgs, tags, child) -> None:
        """An Enhanced NAT gateway in its own small vSwitch, its EIP, and SNAT for the nodes' vSwitch."""
        nat_switch = alicloud.vpc.Switch(
            f"{name}-nat", vswitch_name=f"{name}-nat", vpc_id=vpc.id, cidr_block=str(nat_cidr),
            zone_id=args.zone, tags=tags("nat"), opts=child,
        )
        nat = alicloud.vpc.NatGateway(
            f"{name}-nat-gw", nat_gateway_name=f"{name}-nat", vpc_id=vpc.id, vswitch_id=nat_switch.id,
            nat_type=NAT_TYPE, network_type="internet", payment_type=PAY_AS_YOU_GO,
            description="outbound for the GPU nodes", tags=tags("nat"), opts=child,
        )
        eip = alicloud.ecs.EipAddress(
            f"{name}-nat-eip", address_name=f"{name}-nat", payment_type=PAY_AS_YOU_GO,
            internet_charge_type="PayByTraffic", resource_group_id=args.resource_group_id,
            tags=tags("nat"), opts=child,
        )
        bound = alicloud.ecs.EipAssociation(
            f"{name}-nat-eip-nat", allocation_id=eip.id, instance_id=nat.id, instance_type="Nat", opts=child,
        )
        alicloud.vpc.SnatEntry(
            f"{name}-snat", snat_table_id=nat.snat_table_ids, source_vswitch_id=nodes.id,
            snat_ip=eip.ip_address, snat_entry_name=f"{name}-nodes",
            opts=pulumi.ResourceOptions(parent=child.parent, depends_on=[bound]),
        )


def _split(cidr: ipaddress.IPv4Network) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
    """The first half for the nodes; a small block at the end for the NAT gateway's vSwitch."""
    nodes = next(cidr.subnets(new_prefix=cidr.prefixlen + 1))
    nat = list(cidr.subnets(new_prefix=min(cidr.prefixlen + 4, 28)))[-1]
    return nodes, nat
