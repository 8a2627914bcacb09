"""VPC for a GPU cluster: one private subnet in one AZ, egress by NAT or endpoints only."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from goldenenv import slurm

ALL = {"protocol": "-1", "from_port": 0, "to_port": 0}
SSM_ENDPOINTS = ("ssm", "ssmmessages", "ec2messages", "ecr.api", "ecr.dkr", "sts", "logs")
SCHEDULER_ENDPOINTS = ("secretsmanager",)
"""What the head and the nodes reach besides SSM and ECR when the stack has Slurm: the munge key's secret."""
LUSTRE_PORTS = ((988, 988), (1018, 1023))


@dataclass(frozen=True, kw_only=True)
class GpuNetworkArgs:
    region: str
    zone: pulumi.Input[str]
    cidr: ipaddress.IPv4Network
    egress: str
    """nat | endpoints"""
    admin_cidrs: list[str] = field(default_factory=list)
    slurm_head: bool = False
    """A Slurm head joins the cluster: its own group, reached by the nodes on slurmctld's port only."""
    tags: dict[str, str]


class GpuNetwork(pulumi.ComponentResource):
    """Private subnet for the nodes, a node security group open only to itself, a storage group, and with Slurm a
    head group.

    Lustre traffic between the storage group and its clients (the nodes, the head) is allowed both ways by explicit
    rules (see _file_server_rules). The head's group takes slurmctld's port and srun's ports from the node group
    only, the node group slurmd's port and srun's ports from the head group only: nothing else reaches the head.
    """

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    node_security_group_id: pulumi.Output[str]
    storage_security_group_id: pulumi.Output[str]
    head_security_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: GpuNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:aws:GpuNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        private_cidr, public_cidr = _split(args.cidr)

        def tags(label: str) -> dict[str, str]:
            return {**args.tags, "Name": f"{name}-{label}"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc", cidr_block=str(args.cidr), enable_dns_hostnames=True,
            enable_dns_support=True, tags=tags("vpc"), opts=child,
        )
        subnet = aws.ec2.Subnet(
            f"{name}-private", vpc_id=vpc.id, cidr_block=str(private_cidr),
            availability_zone=args.zone, map_public_ip_on_launch=False,
            tags=tags("private"), opts=child,
        )
        private_routes = aws.ec2.RouteTable(f"{name}-private-rt", vpc_id=vpc.id, tags=tags("private"), opts=child)
        aws.ec2.RouteTableAssociation(
            f"{name}-private-rta", subnet_id=subnet.id, route_table_id=private_routes.id, opts=child
        )
        aws.ec2.VpcEndpoint(
            f"{name}-s3", vpc_id=vpc.id, service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway", route_table_ids=[private_routes.id],
            tags=tags("s3"), opts=child,
        )

        if args.egress == "nat":
            self._nat_egress(name, vpc, public_cidr, args.zone, private_routes, tags, child)

        # Created bare: its Lustre rules reference the node group, which references it (inline both ways is a cycle).
        # The description is the one it always had: changing it replaces the group, and with it the file system.
        storage = aws.ec2.SecurityGroup(
            f"{name}-storage", vpc_id=vpc.id, description="FSx for Lustre: Lustre ports from nodes and itself",
            tags=tags("storage"), opts=child,
        )
        # Created bare too: its rules name the node group, whose inline rules name it.
        head = aws.ec2.SecurityGroup(
            f"{name}-head", vpc_id=vpc.id,
            description="Slurm head: slurmctld and srun from the GPU nodes only; nothing from the internet",
            tags=tags("head"), opts=child,
        ) if args.slurm_head else None
        nodes = aws.ec2.SecurityGroup(
            f"{name}-nodes", vpc_id=vpc.id,
            description="GPU nodes: all traffic between members (EFA needs it); no SSH from the internet",
            ingress=[{**ALL, "self": True, "description": "node to node, EFA and NCCL"}]
            + [
                {"protocol": "tcp", "from_port": 22, "to_port": 22, "cidr_blocks": [c],
                 "description": "SSH from an admin network"}
                for c in args.admin_cidrs
            ]
            + [
                {"protocol": "tcp", "from_port": lo, "to_port": hi, "security_groups": [storage.id],
                 "description": "Lustre from the FSx file servers"}
                for lo, hi in LUSTRE_PORTS
            ]
            + ([
                {"protocol": "tcp", "from_port": lo, "to_port": hi, "security_groups": [head.id],
                 "description": what}
                for (lo, hi), what in _from_head()
            ] if head else []),
            egress=[
                {**ALL, "self": True, "description": "node to node, EFA and NCCL"},
            ]
            + [
                {"protocol": "tcp", "from_port": lo, "to_port": hi, "security_groups": [storage.id],
                 "description": "Lustre to the FSx file servers"}
                for lo, hi in LUSTRE_PORTS
            ]
            + [{**ALL, "cidr_blocks": ["0.0.0.0/0"], "description": "outbound through NAT or endpoints"}],
            tags=tags("nodes"), opts=child,
        )
        clients = [("nodes", nodes.id, "Lustre clients")] + ([("head", head.id, "Slurm head")] if head else [])
        lustre_rules = _file_server_rules(name, storage, clients, tags("storage"), child)
        if head:
            _head_rules(name, head, nodes, storage, tags("head"), child)
        if args.egress == "endpoints":
            self._interface_endpoints(name, vpc, subnet, args, tags, child)

        self.vpc_id = vpc.id
        self.subnet_id = subnet.id
        self.node_security_group_id = nodes.id
        self.head_security_group_id = head.id if head else None
        # FSx checks the group's Lustre rules when the file system is created: hand the group out once they exist.
        self.storage_security_group_id = pulumi.Output.all(storage.id, *[r.id for r in lustre_rules]).apply(
            lambda ids: ids[0]
        )
        self.register_outputs({
            "vpc_id": vpc.id, "subnet_id": subnet.id,
            "node_security_group_id": nodes.id, "storage_security_group_id": storage.id,
            "head_security_group_id": self.head_security_group_id,
        })

    @staticmethod
    def _nat_egress(name, vpc, public_cidr, zone, private_routes, tags, child) -> None:
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags("igw"), opts=child)
        public = aws.ec2.Subnet(
            f"{name}-public", vpc_id=vpc.id, cidr_block=str(public_cidr), availability_zone=zone,
            map_public_ip_on_launch=False, tags=tags("public-nat"), opts=child,
        )
        public_routes = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}], tags=tags("public"), opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-rta", subnet_id=public.id, route_table_id=public_routes.id, opts=child
        )
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=tags("nat"), opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat", allocation_id=eip.id, subnet_id=public.id, tags=tags("nat"),
            opts=pulumi.ResourceOptions(parent=child.parent, depends_on=[igw]),
        )
        aws.ec2.Route(
            f"{name}-private-default", route_table_id=private_routes.id,
            destination_cidr_block="0.0.0.0/0", nat_gateway_id=nat.id, opts=child,
        )

    @staticmethod
    def _interface_endpoints(name, vpc, subnet, args: GpuNetworkArgs, tags, child) -> None:
        https = aws.ec2.SecurityGroup(
            f"{name}-endpoints", vpc_id=vpc.id, description="VPC interface endpoints: HTTPS from the VPC",
            ingress=[{"protocol": "tcp", "from_port": 443, "to_port": 443,
                      "cidr_blocks": [str(args.cidr)], "description": "HTTPS from the VPC"}],
            tags=tags("endpoints"), opts=child,
        )
        for service in SSM_ENDPOINTS + (SCHEDULER_ENDPOINTS if args.slurm_head else ()):
            aws.ec2.VpcEndpoint(
                f"{name}-{service.replace('.', '-')}", vpc_id=vpc.id,
                service_name=f"com.amazonaws.{args.region}.{service}", vpc_endpoint_type="Interface",
                subnet_ids=[subnet.id], security_group_ids=[https.id], private_dns_enabled=True,
                tags=tags(service), opts=child,
            )


def _from_head() -> list[tuple[tuple[int, int], str]]:
    """What the head reaches on a node: slurmd, and the ports an srun on a node listens on for its steps."""
    return [((slurm.SLURMD_PORT, slurm.SLURMD_PORT), "slurmd from the Slurm head"),
            (slurm.SRUN_PORTS, "srun from the Slurm head")]


def _head_rules(name, head, nodes, storage, tags, child) -> None:
    """The head's group: slurmctld's port (and srun's, for an srun run on the head) from the node group, Lustre from
    the file servers, and outbound (registry, secret store, SSM) through the NAT gateway or the endpoints. No rule
    names an address range on the way in."""
    ingress = [(slurm.SLURMCTLD_PORT, slurm.SLURMCTLD_PORT, nodes.id, "slurmctld from the GPU nodes", "slurmctld"),
               (*slurm.SRUN_PORTS, nodes.id, "srun from the GPU nodes", "srun")]
    ingress += [(lo, hi, storage.id, "Lustre from the FSx file servers", f"lustre-{lo}") for lo, hi in LUSTRE_PORTS]
    for lo, hi, source, what, label in ingress:
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-head-in-{label}", security_group_id=head.id, ip_protocol="tcp", from_port=lo, to_port=hi,
            referenced_security_group_id=source, description=what, tags=tags, opts=child,
        )
    aws.vpc.SecurityGroupEgressRule(
        f"{name}-head-out", security_group_id=head.id, ip_protocol="-1", cidr_ipv4="0.0.0.0/0",
        description="outbound through NAT or endpoints", tags=tags, opts=child,
    )


def _file_server_rules(name, storage, clients, tags, child) -> list[pulumi.CustomResource]:
    """Lustre between the file servers and their clients (the nodes, and the Slurm head when there is one), both
    ways, and among the file servers.

    AWS's "Amazon VPC security groups" rules for FSx for Lustre (FSx for Lustre User Guide, "File system access
    control with Amazon VPC", https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html):
    the file system's group and the clients' group each allow TCP 988 and 1018-1023 inbound and outbound, from and
    to the other group and their own. Written out, not left to a default allow-all egress, so they hold with
    `network.egress: endpoints` too. Separate rule resources: inline, they would form a cycle with the node group.
    """
    rules: list[pulumi.CustomResource] = []
    for lo, hi in LUSTRE_PORTS:
        for peer, group_id, label in (*clients, ("self", storage.id, "file servers")):
            ports = {"ip_protocol": "tcp", "from_port": lo, "to_port": hi, "referenced_security_group_id": group_id}
            rules.append(aws.vpc.SecurityGroupIngressRule(
                f"{name}-storage-in-{peer}-{lo}", security_group_id=storage.id,
                description=f"Lustre from the {label}", tags=tags, opts=child, **ports,
            ))
            rules.append(aws.vpc.SecurityGroupEgressRule(
                f"{name}-storage-out-{peer}-{lo}", security_group_id=storage.id,
                description=f"Lustre to the {label}", tags=tags, opts=child, **ports,
            ))
    return rules


def _split(cidr: ipaddress.IPv4Network) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
    """The first half for the nodes; a small block at the end for the NAT gateway."""
    private = next(cidr.subnets(new_prefix=cidr.prefixlen + 1))
    public = list(cidr.subnets(new_prefix=min(cidr.prefixlen + 4, 28)))[-1]
    return private, public
