"""The networks of a GPU cluster on Google Cloud, per machine type as the catalog says.

Every stack gets a system VPC (the nodes' first NIC, the head, Cloud NAT or Private Google Access for egress).
The GPU NICs then need networks of their own, laid out by the pool's fabric (RESEARCH-3 §1.1, §1.9; Google's
"GPU network bandwidth" and "RDMA network profiles" pages; Cluster Toolkit's blueprints):

- GPUDirect-TCPXO (A3 Mega): 8 GPU VPCs, one subnet each, MTU 8244, one gVNIC per VPC;
- GPUDirect-TCPX (A3 High): 4 GPU VPCs, the same way;
- gIB / RoCE (A3 Ultra, A4): a second host VPC (net-1), and one VPC created with the zone's RoCE network profile
  (`<zone>-vpc-roce`, zone-constrained, MTU 8896) holding 8 subnets, one MRDMA NIC in each.

How many GPU NICs a type takes is the catalog's (instance_types.rdma_interfaces), its MTU catalog fabric_mtu, its
host NICs catalog instance_types.network_cards. Firewalls admit only the cluster's own hosts (the network tag
every node and the head carry: GCP's security group) and SSH from network.adminCidrs; no node has an external
address. A RoCE network's profile lets its members reach each other
(implicit allow) and nothing else.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

SUBNET_PREFIX = 20
"""Each subnet is a /20 of goldenenv:network.cidr (4,096 addresses), as Cluster Toolkit's multivpc module cuts them."""
GPU_VPC_FABRICS = frozenset({"tcpx", "tcpxo"})
"""Fabrics whose GPU NICs are gVNICs, one per GPU VPC."""
ROCE_FABRICS = frozenset({"gib"})
"""Fabrics whose GPU NICs are MRDMA NICs on subnets of one RoCE network."""
GVNIC = "GVNIC"
MRDMA = "MRDMA"
ROCE_PROFILE = "{zone}-vpc-roce"
PROFILE_URL = "https://www.googleapis.com/compute/beta/projects/{project}/global/networkProfiles/{profile}"
"""The full profile URL Cluster Toolkit gives network_profile (RESEARCH-3 §1.1, [V-code])."""
HOST_MTU = 8896
"""The host VPCs of a RoCE type (net-0, net-1) run MTU 8896 as Google's a3ultra blueprint declares them."""
DEFAULT_MTU = 1460
"""A VPC's default MTU (Compute Engine VPC docs), for stacks without a GPU network."""


@dataclass(frozen=True)
class GpuNic:
    """One GPU NIC of a node: which of the stack's GPU subnets it sits on, and its type."""

    subnet: int
    nic_type: str


def gpu_nic_layout(fabric: str, interfaces: int) -> list[GpuNic]:
    """A node's GPU NICs on a fabric: one per GPU VPC (TCPX/TCPXO, gVNIC) or one per RoCE subnet (gIB, MRDMA)."""
    if fabric in ROCE_FABRICS:
        return [GpuNic(i, MRDMA) for i in range(interfaces)]
    if fabric in GPU_VPC_FABRICS:
        return [GpuNic(i, GVNIC) for i in range(interfaces)]
    return []


def subnets(cidr: ipaddress.IPv4Network, count: int) -> list[ipaddress.IPv4Network]:
    """`count` /20 ranges of the stack's CIDR, in order; ValueError naming the size needed when it is too small."""
    if cidr.prefixlen > SUBNET_PREFIX:
        raise ValueError(f"goldenenv:network.cidr {cidr} is smaller than one /{SUBNET_PREFIX}")
    found = list(cidr.subnets(new_prefix=SUBNET_PREFIX))
    if len(found) < count:
        need = SUBNET_PREFIX - (count - 1).bit_length()
        raise ValueError(f"goldenenv:network.cidr {cidr} holds {len(found)} /{SUBNET_PREFIX} subnets; this "
                         f"cluster's networks need {count}: give a /{need} or wider")
    return found[:count]


def subnet_count(fabric: str, host_nics: int, gpu_nics: int) -> int:
    """How many /20 subnets the stack's networks take: the host NICs' and the GPU NICs'."""
    return max(1, host_nics) + (gpu_nics if fabric in GPU_VPC_FABRICS | ROCE_FABRICS else 0)


@dataclass(frozen=True, kw_only=True)
class GpuNetworkArgs:
    project: pulumi.Input[str]
    region: str
    zone: str
    cidr: ipaddress.IPv4Network
    fabric: str
    """The pools' fabric (tcpx | tcpxo | gib | none): which GPU networks to build."""
    host_nics: int
    """Host (non-GPU) NICs per node: 1 (the system VPC), 2 on RoCE types (net-0, net-1)."""
    gpu_nics: int
    gpu_mtu: int | None
    egress: str
    """nat: Cloud Router + Cloud NAT on the system subnet; endpoints: no internet path, Private Google Access only."""
    admin_cidrs: list[str] = field(default_factory=list)
    slurm_head: bool = False
    labels: dict[str, str]
    names: Any
    """labels.resource_name-like function: name parts -> a Compute Engine resource name of the stack."""


class GpuNetwork(pulumi.ComponentResource):
    """The system VPC and subnet (Private Google Access on), egress, the host and GPU networks the fabric needs,
    and the firewalls: each network admits traffic from the cluster's own ranges only, SSH from adminCidrs."""

    system_network: pulumi.Output[str]
    system_subnet: pulumi.Output[str]
    host_subnets: list[pulumi.Output[str]]
    gpu_subnets: list[pulumi.Output[str]]
    cluster_ranges: list[str]

    def __init__(self, name: str, args: GpuNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("goldenenv:gcp:GpuNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ranges = [str(r) for r in subnets(args.cidr, subnet_count(args.fabric, args.host_nics, args.gpu_nics))]
        self.cluster_ranges = ranges
        roce = args.fabric in ROCE_FABRICS
        host_mtu = HOST_MTU if roce else (args.gpu_mtu if args.fabric in GPU_VPC_FABRICS else DEFAULT_MTU)

        host_networks, self.host_subnets = [], []
        for i in range(max(1, args.host_nics)):
            label = "sys" if i == 0 else f"net-{i}"
            network = gcp.compute.Network(
                f"{name}-{label}", name=args.names(label), project=args.project, auto_create_subnetworks=False,
                mtu=host_mtu, routing_mode="REGIONAL",
                description="goldenenv: the nodes' host network" + (" (system VPC)" if i == 0 else ""), opts=child)
            subnet = gcp.compute.Subnetwork(
                f"{name}-{label}-subnet", name=args.names(label), project=args.project, region=args.region,
                network=network.id, ip_cidr_range=ranges[i], private_ip_google_access=True, opts=child)
            host_networks.append((label, network))
            self.host_subnets.append(subnet.id)
        self.system_network = host_networks[0][1].id
        self.system_network_name = host_networks[0][1].name
        self.system_subnet = self.host_subnets[0]

        gpu_networks = []
        first_gpu = max(1, args.host_nics)
        self.gpu_subnets = []
        if args.fabric in GPU_VPC_FABRICS:
            for i in range(args.gpu_nics):
                label = f"gpu-{i}"
                network = gcp.compute.Network(
                    f"{name}-{label}", name=args.names(label), project=args.project, auto_create_subnetworks=False,
                    mtu=args.gpu_mtu, routing_mode="REGIONAL", description="goldenenv: a GPU NIC's network",
                    opts=child)
                subnet = gcp.compute.Subnetwork(
                    f"{name}-{label}-subnet", name=args.names(label), project=args.project, region=args.region,
                    network=network.id, ip_cidr_range=ranges[first_gpu + i], opts=child)
                gpu_networks.append((label, network))
                self.gpu_subnets.append(subnet.id)
        elif roce:
            profile = pulumi.Output.from_input(args.project).apply(
                lambda p: PROFILE_URL.format(project=p, profile=ROCE_PROFILE.format(zone=args.zone)))
            network = gcp.compute.Network(
                f"{name}-roce", name=args.names("roce"), project=args.project, auto_create_subnetworks=False,
                mtu=args.gpu_mtu, network_profile=profile,
                description=f"goldenenv: the GPUs' RoCE network ({ROCE_PROFILE.format(zone=args.zone)})", opts=child)
            for i in range(args.gpu_nics):
                subnet = gcp.compute.Subnetwork(
                    f"{name}-roce-{i}", name=args.names(f"roce-{i}"), project=args.project, region=args.region,
                    network=network.id, ip_cidr_range=ranges[first_gpu + i], opts=child)
                self.gpu_subnets.append(subnet.id)
            # the profile's network admits its members (implicit allow, RESEARCH-3 §1.1): no firewall to write

        self.tag = args.names("cluster")
        for label, network in host_networks + gpu_networks:
            gcp.compute.Firewall(
                f"{name}-{label}-internal", name=args.names(label, "internal"), project=args.project,
                network=network.id, direction="INGRESS", priority=1000, source_tags=[self.tag],
                target_tags=[self.tag], allows=[{"protocol": "all"}],
                description="goldenenv: traffic between the cluster's own hosts (NCCL, Slurm), by network tag",
                opts=child)
        system = host_networks[0][1]
        if args.admin_cidrs:
            gcp.compute.Firewall(
                f"{name}-ssh", name=args.names("ssh"), project=args.project, network=system.id,
                direction="INGRESS", priority=1000, source_ranges=list(args.admin_cidrs),
                target_tags=[self.tag], allows=[{"protocol": "tcp", "ports": ["22"]}],
                description="goldenenv: SSH from network.adminCidrs only", opts=child)
        if args.egress == "nat":
            router = gcp.compute.Router(
                f"{name}-router", name=args.names("router"), project=args.project, region=args.region,
                network=system.id, opts=child)
            gcp.compute.RouterNat(
                f"{name}-nat", name=args.names("nat"), project=args.project, region=args.region,
                router=router.name, nat_ip_allocate_option="AUTO_ONLY",
                source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
                subnetworks=[{"name": self.system_subnet, "source_ip_ranges_to_nats": ["ALL_IP_RANGES"]}],
                log_config={"enable": True, "filter": "ERRORS_ONLY"}, opts=child)
        self.register_outputs({"systemNetwork": self.system_network, "systemSubnet": self.system_subnet,
                               "gpuSubnets": self.gpu_subnets, "clusterRanges": ranges})

