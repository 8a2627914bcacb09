"""How much of a step goes to communication: the bytes each rank moves per optimizer step for its ZeRO stage, over
the bus bandwidth of the fleet's links (NVLink or PCIe inside a node, RDMA or TCP between nodes, from the catalog),
less what overlaps with compute, gives the scaling efficiency the run's hours are divided by.

Volumes per rank (Rajbhandari et al. 2020, ZeRO, section 7: data parallelism and ZeRO-1/2 move 2Ψ, ZeRO-3 3Ψ,
Ψ the gradient or parameter bytes), as ring collectives over G ranks, each (G-1)/G of the data:
  ZeRO 0, 1, 2   an all-reduce (reduce-scatter + all-gather) of the trainable gradients per optimizer step:
                 2·S·(G-1)/G
  ZeRO 3         per micro-step, the 16-bit weights gathered for forward and backward and the gradients
                 reduce-scattered: (2·W + S)·(G-1)/G
Bus bandwidth of a ring (NCCL's busbw): inside one node, a GPU's NVLinks × the per-link rate (or PCIe x16);
across nodes, min(that, the node's fabric rate: its RDMA ports × their rate, or its network rate over TCP),
since every byte of the ring crosses each node's network once per direction.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.catalog import health

LINK_EFFICIENCY = 0.8
"""Assumption: NCCL reaches this share of a link's nominal rate (NVLink, PCIe, EFA, eRDMA)."""
TCP_EFFICIENCY = 0.4
"""Assumption: NCCL's socket transport over the kernel's TCP stack reaches this share of the instance's rate."""
OVERLAP = 0.5
"""Assumption: communication hides behind at most this share of the step's compute (DeepSpeed's overlap_comm
overlaps the gradient reduction with the backward pass, two thirds of the FLOPs)."""


@dataclass(frozen=True)
class Links:
    """The fleet's links as the catalog knows them."""

    intra_gbytes_per_s: float | None
    """Per GPU and direction, nominal: NVLinks × per-link rate, else PCIe x16; None when unknown."""
    intra: str
    inter_gbytes_per_s: float | None
    """Between nodes, nominal GB/s: the RDMA fabric's ports × rate (catalog fabric_rates.csv, what NCCL's network
    transport uses, the Ethernet front-end NIC apart) ÷ 8, or the node's whole network rate ÷ 8 over TCP; None
    when unknown."""
    rdma: bool
    inter: str

    def busbw(self, nodes: int) -> float | None:
        """Effective bus bandwidth (GB/s) of a ring over the fleet, or None when a link is unknown."""
        if self.intra_gbytes_per_s is None:
            return None
        intra = self.intra_gbytes_per_s * LINK_EFFICIENCY
        if nodes == 1:
            return intra
        if self.inter_gbytes_per_s is None:
            return None
        return min(intra, self.inter_gbytes_per_s * (LINK_EFFICIENCY if self.rdma else TCP_EFFICIENCY))


def links(cloud: str, instance_type: str) -> Links:
    it = catalog.instance_type(cloud, instance_type)
    bandwidth = catalog.gpu_bandwidth().get(it.gpu.name)
    facts = health.link_facts().get((cloud, instance_type))
    intra, how = None, "unknown"
    if bandwidth is not None:
        nvlinks = facts.nvlinks_per_gpu if facts else 0
        if nvlinks and bandwidth.nvlink_gbytes_per_s_per_link:
            intra = nvlinks * bandwidth.nvlink_gbytes_per_s_per_link
            how = f"NVLink {nvlinks} × {bandwidth.nvlink_gbytes_per_s_per_link:g} GB/s"
        else:
            intra, how = bandwidth.pcie_gbytes_per_s, f"PCIe Gen{bandwidth.pcie_generation} x16"
    if not it.has_rdma:
        inter = it.network_gbps / 8 if it.network_gbps else None
        return Links(intra, how, inter, False, f"TCP {it.network_gbps:g} Gbps")
    kind = it.rdma.upper()
    rate = catalog.fabric_rate(cloud, instance_type)
    if rate is None:
        return Links(intra, how, None, True, f"{kind}: its rate is not in the catalog (fabric_rates.csv)")
    return Links(intra, how, rate.nccl_gbps / 8, True,
                 f"{kind} {rate.nccl_gbps:g} Gbps ({rate.ports} × {rate.port_gbps:g} Gb/s {rate.link})")


def bytes_per_step(stage: int, trainable_params: float, gathered_params: float, gpus: int, grad_accum: int,
                   grad_bytes: int = 2, weight_bytes: int = 2) -> float:
    """Bytes each rank sends per optimizer step (see the module's docstring)."""
    if gpus <= 1:
        return 0.0
    share = (gpus - 1) / gpus
    grads = trainable_params * grad_bytes
    if stage == 3:
        return (2 * gathered_params * weight_bytes + grads) * share * grad_accum
    return 2 * grads * share


@dataclass(frozen=True)
class Scaling:
    efficiency: float
    compute_s: float
    """Seconds of compute per optimizer step, per GPU."""
    communication_s: float | None
    """Seconds of communication per optimizer step; None when a link is unknown."""
    exposed_s: float
    busbw_gbytes_per_s: float | None
    basis: str


def scaling(volume_bytes: float, compute_s: float, busbw: float | None, basis: str) -> Scaling:
    """Efficiency = compute / (compute + the communication that does not overlap with it)."""
    if volume_bytes == 0:
        return Scaling(1.0, compute_s, 0.0, 0.0, busbw, "one GPU: no communication")
    if busbw is None:
        return Scaling(1.0, compute_s, None, 0.0, None, f"{basis}: bandwidth unknown, perfect scaling assumed")
    comm = volume_bytes / (busbw * 1e9)
    exposed = max(0.0, comm - OVERLAP * compute_s)
    return Scaling(compute_s / (compute_s + exposed), compute_s, comm, exposed, busbw, basis)
