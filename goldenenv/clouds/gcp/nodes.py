"""A pool of identical GPU nodes on Google Cloud: compact placement, a service account, instances with their NICs.

Each node is a `gcp.compute.Instance` (RESEARCH-3 §1.3, §1.9):
- in a COLLOCATED group placement policy of its own (catalog node_layout placement `compact`), except on a
  reservation, whose capacity Google places itself (dstack does the same). The policy sets no vmCount: with one,
  Compute Engine takes only exactly vmCount instances created together (pulumi-gcp ResourcePolicy docstring), while
  each node here is its own insert, so an added or rolled node would be refused; a compact policy without vmCount
  takes nodes one at a time (Compute Engine, "Use compact placement policies": vmCount is optional);
- on the host NICs (system VPC; and net-1 on RoCE types) and the GPU NICs its fabric lays out (network.py);
- with no external address, shielded VM on, OS Login (or the pool's sshPublicKey with project keys blocked), the
  serial port closed, and `onHostMaintenance: TERMINATE` (GPUs do not live-migrate);
- provisioned STANDARD (on-demand), SPOT (stopped when Google preempts it: the boot disk stays, the Local SSD
  scratch does not) or RESERVATION_BOUND to the reservation the pool names;
- booted by cloud-init from its metadata `user-data` (Google's Ubuntu images read it from the metadata server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from goldenenv.clouds import access
from goldenenv.clouds.gcp import hardening
from goldenenv.clouds.gcp.network import GpuNic
from goldenenv.hardening import EXCEPTION_KEY

INSTANCE = "gcp:compute/instance:Instance"
NODE_POOL = "goldenenv:gcp:GpuNodePool"
COLLOCATED = "COLLOCATED"
PROVISIONING = {"on-demand": "STANDARD", "spot": "SPOT", "capacity-reservation": "RESERVATION_BOUND"}
"""goldenenv capacity -> scheduling.provisioningModel (Compute API: STANDARD, SPOT, FLEX_START, RESERVATION_BOUND)."""
SPOT_TERMINATION = "STOP"
"""instanceTerminationAction of a spot node: STOP keeps the node (its name, boot disk and place in Slurm) for the
next start; DELETE would drop it."""
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
ROCE_DISK = "hyperdisk-balanced"
"""A3 Ultra and A4 boot from Hyperdisk only (Google's accelerator-optimized machine docs); the blueprints use
hyperdisk-balanced for A3 Mega too."""
PD_DISK = "pd-balanced"
USER_DATA_KEY = "user-data"
OS_LOGIN = "enable-oslogin"


@dataclass(frozen=True, kw_only=True)
class GpuNodePoolArgs:
    project: pulumi.Input[str]
    machine_type: str
    count: int
    zone: str
    region: str
    image: str
    """A pinned image (projects/<project>/global/images/<name>): never a family alias."""
    boot_disk_type: str
    boot_disk_gib: int
    host_subnets: list[pulumi.Input[str]]
    gpu_subnets: list[pulumi.Input[str]]
    gpu_nics: list[GpuNic]
    placement: str
    """compact | none (catalog node_layout.csv)"""
    capacity: str
    """on-demand | spot | capacity-reservation"""
    reservation: str | None = None
    user_data: pulumi.Input[str]
    service_account_id: str
    labels: dict[str, str]
    names: Any
    ssh_key: access.NodeKey | None = None
    ssh_user: str = "ubuntu"
    network_tag: str
    """The cluster's network tag: the firewalls admit traffic between hosts carrying it."""
    rolled: frozenset[int] = frozenset()
    """Indexes of the nodes to replace onto the current boot script (`goldenenv up --roll-nodes`)."""


class GpuNodePool(pulumi.ComponentResource):
    """The pool's placement policy, its service account and its nodes."""

    instance_names: pulumi.Output[list[str]]
    private_ips: pulumi.Output[list[str]]
    placement_policy: pulumi.Output[str] | None
    service_account_email: pulumi.Output[str]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(NODE_POOL, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = gcp.serviceaccount.Account(
            f"{name}-sa", account_id=args.service_account_id, project=args.project,
            display_name=f"goldenenv {name} nodes", opts=child)
        self.service_account_email = account.email

        policy = None
        if args.placement == "compact" and args.capacity != "capacity-reservation" and args.count > 1:
            policy = gcp.compute.ResourcePolicy(
                f"{name}-placement", name=args.names("placement"), project=args.project, region=args.region,
                description=f"goldenenv {name}: {args.machine_type} nodes, collocated",
                group_placement_policy={"collocation": COLLOCATED}, opts=child)
        self.placement_policy = policy.self_link if policy else None

        metadata = pulumi.Output.from_input(args.user_data).apply(lambda text: _metadata(text, args))
        nodes = []
        for i in range(args.count):
            node = gcp.compute.Instance(
                f"{name}-{i}", name=args.names(str(i)), project=args.project, zone=args.zone,
                machine_type=args.machine_type,
                **private_instance(args.image, args.boot_disk_gib, args.boot_disk_type, account.email, args.labels,
                                   args.network_tag, secure_boot=False),
                network_interfaces=_interfaces(args),
                scheduling=_scheduling(args.capacity),
                reservation_affinity=({"type": "SPECIFIC_RESERVATION", "specific_reservation": {
                    "key": RESERVATION_KEY, "values": [args.reservation]}} if args.reservation else None),
                resource_policies=policy.self_link if policy else None,
                metadata=metadata,
                # cloud-init reads user-data at the first boot only: a running node keeps the script it booted,
                # and a rolled one is replaced (deleted first: its place in the placement policy) to boot the new one
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                    ignore_changes=[] if i in args.rolled else ["metadata"],
                    replace_on_changes=["metadata"] if i in args.rolled else None,
                    delete_before_replace=True)),
            )
            nodes.append(node)
        self.instance_names = pulumi.Output.all(*[n.name for n in nodes])
        self.private_ips = pulumi.Output.all(*[n.network_interfaces[0].network_ip for n in nodes])
        self.register_outputs({"instance_names": self.instance_names, "private_ips": self.private_ips,
                               "placement_policy": self.placement_policy,
                               "service_account": self.service_account_email})


def private_instance(image: str, disk_gib: int, disk_type: str, email: pulumi.Input[str], labels: dict[str, str],
                     network_tag: str, secure_boot: bool) -> dict[str, Any]:
    """What every goldenenv host on Google Cloud shares, nodes and head: a labelled boot disk from a pinned image, its
    own service account, shielded VM (Secure Boot off only with its named reason, hardening.UNSIGNED_GPU_DRIVER, as a
    label), the labels, and the cluster's network tag (the firewalls' only member test). Its interfaces, given by the
    caller, take no access config."""
    return {
        "boot_disk": {"auto_delete": True, "initialize_params": {
            "image": image, "size": disk_gib, "type": disk_type, "labels": labels}},
        "service_account": {"email": email, "scopes": ["cloud-platform"]},
        "shielded_instance_config": {"enable_secure_boot": secure_boot, "enable_vtpm": True,
                                     "enable_integrity_monitoring": True},
        "labels": labels if secure_boot else {**labels, EXCEPTION_KEY: hardening.UNSIGNED_GPU_DRIVER},
        "tags": [network_tag], "allow_stopping_for_update": True,
    }


def _interfaces(args: GpuNodePoolArgs) -> list[dict[str, Any]]:
    """Host NICs first (nic0 on the system subnet), then the GPU NICs in the fabric's order; none has an
    access config, so none has an external address."""
    host = [{"subnetwork": subnet, "nic_type": "GVNIC"} for subnet in args.host_subnets]
    gpu = [{"subnetwork": args.gpu_subnets[nic.subnet], "nic_type": nic.nic_type} for nic in args.gpu_nics]
    return host + gpu


def _scheduling(capacity: str) -> dict[str, Any]:
    model = PROVISIONING[capacity]
    spot = model == "SPOT"
    return {"on_host_maintenance": "TERMINATE", "automatic_restart": not spot, "preemptible": spot,
            "provisioning_model": model,
            **({"instance_termination_action": SPOT_TERMINATION} if spot else {})}


def _metadata(user_data: str, args: GpuNodePoolArgs) -> dict[str, str]:
    """cloud-init's user data, and the access metadata."""
    return {USER_DATA_KEY: user_data, **access_metadata(args.ssh_key, args.ssh_user)}


def access_metadata(ssh_key: access.NodeKey | None, user: str) -> dict[str, str]:
    """OS Login, or the pool's key with project-wide keys blocked; the serial port closed."""
    metadata = {"serial-port-enable": "FALSE", "block-project-ssh-keys": "TRUE"}
    if ssh_key:
        metadata[OS_LOGIN] = "FALSE"
        metadata["ssh-keys"] = f"{user}:{ssh_key.public_key}"
    else:
        metadata[OS_LOGIN] = "TRUE"
    return metadata
