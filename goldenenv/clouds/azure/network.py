"""The stack's virtual network on Azure: a private compute subnet behind an NSG, Managed Lustre's subnet, NAT egress.

Azure wires InfiniBand itself between the VMs of one scale set (RESEARCH-3 §2.2): no IB network or interface is
declared here. What is declared (RESEARCH-3 §2.10):
- one VNet over network.cidr, split in two: the compute subnet (nodes and head) in the first half, Managed Lustre's
  subnet (its prefix sized for the file system: storage.amlfs_subnet_prefix) at the start of the second;
- the compute subnet's NSG: everything from the cluster's own hosts (members of its application security group, the
  way Azure names a set of NICs, as a security group reference or a network tag does elsewhere: not the VNet's
  range, which a peering or a gateway would widen), Lustre's ports from Managed Lustre's subnet, SSH from
  network.adminCidrs only, and an explicit deny of every other inbound packet (ahead of Azure's default
  AllowVNetInBound and AllowAzureLoadBalancerInBound);
- no default outbound access on either subnet; egress `nat` adds a NAT gateway with one static public IP (the only
  public address in the stack, on the gateway, never on a host); egress `endpoints` leaves the nodes no internet
  path at all, only the service endpoints of Storage, Container Registry and Key Vault, which both modes declare.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure

NETWORK_COMPONENT = "goldenenv:azure:Network"
SERVICE_ENDPOINTS = ("Microsoft.Storage", "Microsoft.ContainerRegistry", "Microsoft.KeyVault")
"""What the nodes reach without the internet: the storage account, the registry, the munge key's vault."""
COMPUTE_PREFIX_MAX = 20
"""The compute subnet is at most a /20 (4,096 addresses: Azure keeps 5 per subnet; 100 nodes a pool at most)."""
SSH_PORT = "22"
LUSTRE_PORTS = ("988", "1019-1023")
"""Lustre's LNet port and the privileged source ports its servers connect from (Azure Managed Lustre network
prerequisites: allow TCP 988 and 1019-1023 between the file system's subnet and its clients)."""
DENY_ALL_PRIORITY = 4096
"""The lowest precedence a rule can have (NSG priorities run 100 to 4096), still ahead of Azure's default rules
(65000 and up), so nothing the defaults allow (the load balancer's probes) reaches a host."""


def subnet_ranges(cidr: ipaddress.IPv4Network, lustre_prefix: int | None) -> tuple[str, str | None]:
    """The compute subnet and Managed Lustre's subnet within the stack's range; ValueError naming the key when the
    range is too small for them."""
    if cidr.prefixlen > 28:
        raise ValueError(f"goldenenv:network.cidr {cidr} is too small: Azure needs at least a /28 for a subnet "
                         "and goldenenv splits the range in two (compute, Managed Lustre); use a /24 or larger")
    halves = list(cidr.subnets(prefixlen_diff=1))
    compute = next(halves[0].subnets(new_prefix=max(halves[0].prefixlen, COMPUTE_PREFIX_MAX)))
    if lustre_prefix is None:
        return str(compute), None
    if lustre_prefix < halves[1].prefixlen:
        raise ValueError(f"goldenenv:network.cidr {cidr} is too small: Managed Lustre of this size needs a "
                         f"/{lustre_prefix} subnet and the second half of the range is a /{halves[1].prefixlen}; "
                         f"use a /{lustre_prefix - 1} or larger")
    return str(compute), str(next(halves[1].subnets(new_prefix=lustre_prefix)))


@dataclass(frozen=True, kw_only=True)
class NetworkArgs:
    resource_group: pulumi.Input[str]
    location: str
    cidr: ipaddress.IPv4Network
    lustre_prefix: int | None
    """Managed Lustre's subnet prefix length, or None: the stack has no Lustre."""
    egress: str
    """nat | endpoints"""
    admin_cidrs: list[str]
    tags: dict[str, str]
    names: Any
    """(*parts) -> the resource name Azure shows."""
    zone: str | None = None


class Network(pulumi.ComponentResource):
    """The VNet, its subnets, the compute NSG and (egress nat) the NAT gateway."""

    compute_subnet_id: pulumi.Output[str]
    lustre_subnet_id: pulumi.Output[str] | None
    cluster_group_id: pulumi.Output[str]
    """The application security group every node's and the head's NIC joins: the NSG admits its members."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(NETWORK_COMPONENT, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        compute_range, lustre_range = subnet_ranges(args.cidr, args.lustre_prefix)
        vnet = azure.network.VirtualNetwork(
            f"{name}-vnet", virtual_network_name=args.names("vnet"), resource_group_name=args.resource_group,
            location=args.location, address_space={"address_prefixes": [str(args.cidr)]}, tags=args.tags,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["subnets"])))
        cluster = azure.network.ApplicationSecurityGroup(
            f"{name}-cluster", application_security_group_name=args.names("cluster"),
            resource_group_name=args.resource_group, location=args.location, tags=args.tags, opts=child)
        self.cluster_group_id = cluster.id
        nsg = azure.network.NetworkSecurityGroup(
            f"{name}-nsg", network_security_group_name=args.names("compute"), resource_group_name=args.resource_group,
            location=args.location, security_rules=security_rules(cluster.id, lustre_range, args.admin_cidrs),
            tags=args.tags, opts=child)
        nat = None
        if args.egress == "nat":
            address = azure.network.PublicIPAddress(
                f"{name}-nat-ip", public_ip_address_name=args.names("nat"), resource_group_name=args.resource_group,
                location=args.location, sku={"name": "Standard", "tier": "Regional"},
                public_ip_allocation_method="Static", public_ip_address_version="IPv4",
                zones=[args.zone] if args.zone else None, tags=args.tags, opts=child)
            nat = azure.network.NatGateway(
                f"{name}-nat", nat_gateway_name=args.names("nat"), resource_group_name=args.resource_group,
                location=args.location, sku={"name": "Standard"}, public_ip_addresses=[{"id": address.id}],
                idle_timeout_in_minutes=10, zones=[args.zone] if args.zone else None, tags=args.tags, opts=child)
        compute = azure.network.Subnet(
            f"{name}-compute", subnet_name="compute", resource_group_name=args.resource_group,
            virtual_network_name=vnet.name, address_prefix=compute_range,
            network_security_group={"id": nsg.id}, nat_gateway={"id": nat.id} if nat else None,
            default_outbound_access=False,
            service_endpoints=[{"service": s} for s in SERVICE_ENDPOINTS], opts=child)
        self.compute_subnet_id = compute.id
        self.lustre_subnet_id = None
        if lustre_range:
            # Managed Lustre's own subnet (it cannot be changed later): one subnet at a time, so the second waits
            lustre = azure.network.Subnet(
                f"{name}-lustre", subnet_name="lustre", resource_group_name=args.resource_group,
                virtual_network_name=vnet.name, address_prefix=lustre_range, default_outbound_access=False,
                # Managed Lustre's prerequisites ask outbound access to Azure's own services (the AzureCloud tag)
                nat_gateway={"id": nat.id} if nat else None,
                service_endpoints=[{"service": "Microsoft.Storage"}],
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[compute])))
            self.lustre_subnet_id = lustre.id
        self.compute_range = compute_range
        self.register_outputs({"compute_subnet_id": self.compute_subnet_id,
                               "lustre_subnet_id": self.lustre_subnet_id})


def security_rules(cluster_group: pulumi.Input[str], lustre_range: str | None,
                   admin_cidrs: list[str]) -> list[dict[str, Any]]:
    """Inbound: the cluster's own hosts to anything, Lustre's servers on Lustre's ports, SSH from each admin network,
    then deny everything else."""
    rules = [{**_rule("cluster-inbound", 100, "Allow", "*", "*"),
              "source_application_security_groups": [{"id": cluster_group}]}]
    if lustre_range:
        rules.append({**_rule("lustre-inbound", 105, "Allow", "Tcp", None), "source_address_prefix": lustre_range,
                      "destination_port_ranges": list(LUSTRE_PORTS)})
    rules += [{**_rule(f"ssh-admin-{i}", 110 + i, "Allow", "Tcp", SSH_PORT), "source_address_prefix": cidr}
              for i, cidr in enumerate(admin_cidrs)]
    rules.append({**_rule("deny-inbound", DENY_ALL_PRIORITY, "Deny", "*", "*"), "source_address_prefix": "*"})
    return rules


def _rule(name: str, priority: int, access: str, protocol: str, port: str | None) -> dict[str, Any]:
    """A rule to any host of the subnet; its source is the caller's. `port` None: the caller gives port ranges."""
    return {"name": name, "priority": priority, "direction": "Inbound", "access": access, "protocol": protocol,
            "source_port_range": "*", "destination_address_prefix": "*",
            **({"destination_port_range": port} if port else {})}
