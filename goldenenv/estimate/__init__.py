"""Before renting: memory per GPU and per host, training FLOPs, time and cost on every catalog instance type.

Arithmetic over the catalog (DeepSpeed's estimator rows, GPU memory as nvidia-smi reports it, peak TFLOPS, links,
instance types, prices) and the user's own figures (a price per GPU-hour, a scaling efficiency, GB of egress).
Memory: goldenenv.estimate.footprint; the model's shape: .shapes; communication and scaling: .network. Every figure
that is a modelling choice rather than a published fact is a named constant listed in `ASSUMPTIONS`, which the CLI
prints with each estimate.

Training FLOPs: 6·N·T (Kaplan et al. 2020; 2·N·T forward, twice that backward); LoRA and QLoRA 4·N·T + 6·A·T
(forward and activation gradients through the frozen base, full training of the A trainable parameters: the
adapters PEFT adds and any modules_to_save, counted per module from the shape by .lora).
Recomputation under checkpointing is not counted: MFU is defined on model FLOPs, so its cost shows as a lower MFU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from goldenenv import catalog, costs
from goldenenv.estimate import footprint as mem
from goldenenv.estimate import families, lora, network, timing
from goldenenv.estimate.figure import figure
from goldenenv.estimate.footprint import GiB, OVERHEAD_BYTES
from goldenenv.estimate.inputs import SPEC_KEYS, flag, request_from, spec_problems
from goldenenv.estimate.request import DEFAULT_HEADROOM, Request, gpu_usable_bytes

CAPACITIES = ("on-demand", "spot")
VERDICTS = ("fits", "tight", "no")

DEFAULT_MFU = 0.4
"""Assumption: model FLOPs utilisation when the catalog has none for the GPU (it has none yet)."""
MAX_NODES = 64
"""The largest node count the cost search tries per instance type."""

ASSUMPTIONS = (
    f"MFU {DEFAULT_MFU} unless --mfu (the catalog has no measured MFU per GPU)",
    f"headroom {DEFAULT_HEADROOM:.0%} of GPU and host memory unless --headroom; above it a fit is 'tight'",
    f"overhead {OVERHEAD_BYTES / GiB:g} GiB per GPU (CUDA context, NCCL buffers, fragmentation)",
    f"links reach {network.LINK_EFFICIENCY:.0%} of their nominal rate (NVLink, PCIe, RDMA), TCP "
    f"{network.TCP_EFFICIENCY:.0%}; communication hides behind at most {network.OVERLAP:.0%} of a step's compute",
    "the logits are kept in 16 bits and once more in fp32 for the loss",
    "hours are billed in tenths of an hour, as shown, so the cost re-adds by hand",
    "no FX rate in the catalog: costs in different currencies are not compared with each other",
)


def verdict(needed: float, capacity: float, headroom: float) -> str:
    """fits (within capacity less the headroom) | tight (within capacity) | no."""
    if needed <= capacity * (1 - headroom):
        return "fits"
    return "tight" if needed <= capacity else "no"


def canonical_gpu(name: str) -> str | None:
    """The catalog's spelling of a GPU name given in any case (h100-80gb → H100-80GB)."""
    return next((g for g in catalog.gpus() if g.lower() == name.lower()), None)


def memory(req: Request, gpus_per_node: int, nodes: int, row: catalog.DeepspeedEstimator | None = None) -> mem.Memory:
    """Bytes per GPU (and host bytes per node) of the run on `nodes` nodes of `gpus_per_node` GPUs."""
    row = row or req.estimator
    shape = req.model_shape
    states, host, parts = mem.model_states(shape, req.method, row, gpus_per_node * nodes, gpus_per_node, nodes,
                                           req.precision, req.peft)
    layers, logits = mem.activations(shape, req.seq_len, req.micro_batch, checkpointing=req.checkpointing,
                                     attention=req.attention, precision=req.precision)
    return mem.Memory(states, layers, logits, OVERHEAD_BYTES, host, row, parts)


def flops_per_token(req: Request) -> float:
    n = req.total_params
    return 6 * n if req.method == "full" else 4 * n + 6 * req.trainable_params


def training_flops(req: Request) -> float | None:
    return flops_per_token(req) * req.tokens if req.tokens is not None and req.has_model else None


def work_flops(req: Request) -> float | None:
    """The FLOPs every option is timed on: the training FLOPs from --tokens, or from --hours what the user's own
    configuration computes in them (goldenenv.estimate.timing); None when neither can be known."""
    if req.tokens is not None:
        return training_flops(req)
    gpu = req.instance.gpu.name if req.instance else req.gpu
    return timing.flops_in_hours(req.hours, gpu, req.gpus_per_node * req.nodes, req.mfu or DEFAULT_MFU)


def step_scaling(req: Request, gpu: str, gpus_per_node: int, nodes: int, link: network.Links | None,
                 mfu: float) -> network.Scaling:
    """Scaling efficiency of one fleet from its links (1.0 on one GPU; perfect when a link is unknown)."""
    gpus = gpus_per_node * nodes
    peak = catalog.gpu_peak_tflops().get(gpu)
    tokens_per_step = req.seq_len * req.micro_batch * req.grad_accum
    compute_s = flops_per_token(req) * tokens_per_step / (peak.bf16_dense_tflops * 1e12 * mfu) if peak else 1.0
    grad_bytes = 4 if req.precision == "fp32" else 2
    volume = network.bytes_per_step(req.zero, req.trainable_params, req.total_params, gpus, req.grad_accum,
                                    grad_bytes, grad_bytes)
    if link is None:
        return network.scaling(volume, compute_s, None, "no instance type")
    basis = link.intra if nodes == 1 else f"{link.intra} in a node, {link.inter} between nodes"
    return network.scaling(volume, compute_s, link.busbw(nodes), basis)


@dataclass(frozen=True)
class Option:
    """The smallest fleet of one instance type that fits memory (and meets the deadline if it can)."""

    cloud: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    capacity: str
    nodes: int | None
    fits: bool
    gpu_memory: str
    """fits | tight | no, for the fleet chosen (or the largest tried when nothing fits)."""
    host_memory: str
    meets_deadline: bool | None
    scaling_efficiency: float | None
    network: str
    tcp_zero3: bool
    """A multi-node ZeRO-3 fleet without RDMA: not recommended unless the user allows it."""
    hours: float | None
    gpu_hours: float | None
    price_per_hour: float | None
    currency: str | None
    compute: float | None
    storage: float | None
    transfer: float | None
    idle: float | None
    cost: float | None
    price_region: str | None
    price_as_of: str | None
    price_verified: bool | None
    accelerator: str | None = None
    """The device's family as people write it (NVIDIA CUDA, Huawei Ascend); None for a device no family claims."""
    usable_gib_per_device: float | None = None
    """What each device offers (catalog gpu_usable_memory: nvidia-smi's memory.total, npu-smi's HBM total)."""
    usable_gib_per_node: float | None = None
    needed_gib_per_device: float | None = None
    """What the run needs per device on the fleet chosen (or the largest tried when nothing fits)."""


def _catalog_region(cloud: str, instance_type: str) -> str:
    regions = [r["region"] for r in catalog.rows("prices")
               if (r["cloud"], r["instance_type"]) == (cloud, instance_type)]
    return regions[0] if regions else ""


def options(req: Request) -> list[Option]:
    """Every catalog instance type of every cloud, on-demand and spot where priced."""
    mfu = req.mfu or DEFAULT_MFU
    found: list[Option] = []
    for row in catalog.rows("instance_types"):
        it = catalog.instance_type(row["cloud"], row["instance_type"])
        fleet = _smallest_fleet(req, it, mfu)
        region = _catalog_region(it.cloud, it.name)
        for capacity in CAPACITIES:
            p = costs.compute_price(it.cloud, it.name, region, capacity)
            if capacity == "spot" and (p is None or p.capacity != "spot"):
                continue  # costs.compute_price answers an on-demand price when it has no spot figure
            parts = None
            if p is not None and fleet.nodes is not None and fleet.hours is not None:
                compute = costs.catalog_compute_run(it.cloud, it.name, region, capacity, fleet.nodes, fleet.hours,
                                                    fleet.efficiency)
                parts = costs.run_parts(compute, it.cloud, region, hours=fleet.hours,
                                        stored_gb=req.dataset_gb + req.checkpoint_gb, egress_gb=req.egress_gb,
                                        idle_hours=req.idle_hours)
            amounts = {part.kind: part.amount for part in parts} if parts else {}
            family = families.family_of(it.gpu.name)
            usable = gpu_usable_bytes(it.gpu.name) / GiB
            found.append(Option(
                it.cloud, it.name, it.gpu.name, it.gpu_count, capacity, fleet.nodes, fleet.fits, fleet.gpu_memory,
                fleet.host_memory, fleet.meets, fleet.efficiency, fleet.network, fleet.tcp_zero3, fleet.hours,
                fleet.hours * fleet.nodes * it.gpu_count if fleet.hours is not None and fleet.nodes else None,
                p.usd_per_hour if p else None, p.currency if p else None,
                amounts.get("compute"), amounts.get("storage"), amounts.get("network"), amounts.get("idle"),
                costs.total(parts, "run") if parts else None,
                p.region if p else None, p.as_of if p else None,
                all(part.verified for part in parts) if parts else (p.verified if p else None),
                family.label if family else None, usable, usable * it.gpu_count,
                fleet.needed_bytes / GiB if fleet.needed_bytes is not None else None,
            ))
    return found


@dataclass(frozen=True)
class Fleet:
    nodes: int | None
    hours: float | None
    fits: bool
    gpu_memory: str
    host_memory: str
    meets: bool | None
    efficiency: float | None
    network: str
    tcp_zero3: bool
    needed_bytes: float | None = None
    """Bytes per device the run needs on this fleet."""


def _smallest_fleet(req: Request, it: catalog.InstanceType, mfu: float) -> Fleet:
    usable = gpu_usable_bytes(it.gpu.name)
    host_capacity = it.memory_gib * GiB
    peak = catalog.gpu_peak_tflops().get(it.gpu.name)
    link = network.links(it.cloud, it.name)
    work = work_flops(req)
    first = last = None
    for nodes in range(1, MAX_NODES + 1):
        m = memory(req, it.gpu_count, nodes)
        gpu_fit = verdict(m.total, usable, req.headroom)
        host_fit = verdict(m.host_per_node, host_capacity, req.headroom)
        last = Fleet(None, None, False, gpu_fit, host_fit, None, None, "", False, m.total)
        if gpu_fit != "fits" or host_fit != "fits":
            continue
        s = step_scaling(req, it.gpu.name, it.gpu_count, nodes, link, mfu)
        hours = None
        if peak is not None and work is not None:
            ideal = work / (nodes * it.gpu_count * peak.bf16_dense_tflops * 1e12 * mfu) / 3600
            hours = costs.billed_hours(ideal, s.efficiency)
        tcp_zero3 = nodes > 1 and req.zero == 3 and not link.rdma
        fleet = Fleet(nodes, hours, True, gpu_fit, host_fit, None, s.efficiency,
                      link.inter if nodes > 1 else link.intra, tcp_zero3, m.total)
        first = first or fleet
        if req.deadline_hours is None or hours is None:
            return fleet
        if hours <= req.deadline_hours:
            return Fleet(**{**asdict(fleet), "meets": True})
    if first is None:
        return last
    return Fleet(**{**asdict(first), "meets": False})


def recommendable(o: Option, req: Request) -> bool:
    return (o.cost is not None and o.fits and o.meets_deadline is not False
            and (req.allow_tcp or not o.tcp_zero3))


def cheapest(found: list[Option], req: Request) -> dict[str, Option]:
    """Per currency, the cheapest option that fits, meets the deadline and would run at the speed it is priced at
    (no multi-node ZeRO-3 over TCP unless allowed); currencies are not converted."""
    best: dict[str, Option] = {}
    for o in found:
        if recommendable(o, req) and (o.currency not in best or o.cost < best[o.currency].cost):
            best[o.currency] = o
    return best


@dataclass(frozen=True)
class OwnRun:
    """The user's own configuration: its time and its four-part cost."""

    gpus: int
    ideal_hours: float | None
    efficiency: float
    efficiency_basis: str
    hours: float | None
    parts: list[costs.Line]

    @property
    def cost(self) -> float | None:
        return costs.total(self.parts, "run") if self.parts else None


def own_run(req: Request) -> OwnRun:
    gpus = req.gpus_per_node * req.nodes
    gpu = req.instance.gpu.name if req.instance else req.gpu
    mfu = req.mfu or DEFAULT_MFU
    ideal = req.hours
    peak = catalog.gpu_peak_tflops().get(gpu) if gpu else None
    if ideal is None and peak is not None and req.tokens is not None and req.has_model:
        ideal = training_flops(req) / (gpus * peak.bf16_dense_tflops * 1e12 * mfu) / 3600
    if req.scaling_efficiency is not None:
        efficiency, basis = req.scaling_efficiency, "--scaling-efficiency (yours)"
    elif req.has_model and gpu:
        link = network.links(req.instance.cloud, req.instance.name) if req.instance else None
        s = step_scaling(req, gpu, req.gpus_per_node, req.nodes, link, mfu)
        efficiency, basis = s.efficiency, s.basis
    else:
        efficiency, basis = 1.0, "perfect scaling (no model or GPU to judge communication by)"
    hours = costs.billed_hours(ideal, efficiency) if ideal is not None else None
    parts: list[costs.Line] = []
    if hours is not None and (req.price is not None or req.instance is not None):
        if req.price is not None:
            compute = costs.user_compute_run(gpus, req.price, req.currency, hours, ideal, efficiency)
            cloud = req.instance.cloud if req.instance else None
        else:
            cloud = req.instance.cloud
            compute = costs.catalog_compute_run(cloud, req.instance.name, _catalog_region(cloud, req.instance.name),
                                                "on-demand", req.nodes, hours, efficiency, ideal)
        region = _catalog_region(cloud, req.instance.name) if req.instance else ""
        parts = costs.run_parts(compute, cloud, region, hours=hours, stored_gb=req.dataset_gb + req.checkpoint_gb,
                                egress_gb=req.egress_gb, idle_hours=req.idle_hours)
    return OwnRun(gpus, ideal, efficiency, basis, hours, parts)


@dataclass(frozen=True)
class Estimate:
    request: Request
    memory: mem.Memory | None
    table: list[dict[str, Any]]
    training_flops: float | None
    mfu: float
    fits: dict[str, str]
    own: OwnRun
    options: list[Option] = field(default_factory=list)
    cheapest: dict[str, Option] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return self.own.gpus

    @property
    def families(self) -> list[families.FamilyOffer]:
        """NVIDIA's and Ascend's (each family's) recommended offer per currency, side by side."""
        return families.side_by_side(self.options, lambda o: recommendable(o, self.request))

    @property
    def hours_basis(self) -> str | None:
        """How the options' hours come from --hours; None when they come from --tokens (or are not known)."""
        req = self.request
        if req.tokens is not None:
            return None
        return timing.hours_basis(req.hours, req.instance.gpu.name if req.instance else req.gpu,
                                  self.gpus, req.instance.name if req.instance else None)

    @property
    def no_recommendation(self) -> str | None:
        """Why no option is recommended (None when one is), naming only what the user asked for."""
        if self.cheapest or not self.options:
            return None
        req = self.request
        return timing.no_recommendation(self.options, req.deadline_hours, work_flops(req) is not None,
                                        req.hours is not None, MAX_NODES)

    def to_json(self) -> dict:
        req, m = self.request, self.memory
        shape = req.model_shape
        doc: dict[str, Any] = {
            "params": req.total_params if shape else None, "tokens": req.tokens, "method": req.method,
            "precision": req.precision, "zero": req.zero, "offload": req.offload,
            "offload_params": req.offload_params, "zero_init": req.zero_init,
            "deepspeed": ".".join(map(str, req.deepspeed)) if req.deepspeed else None,
            "deepspeed_from": req.deepspeed_from,
            "gpu": req.instance.gpu.name if req.instance else req.gpu,
            "instance_type": req.instance.name if req.instance else None,
            "gpus_per_node": req.gpus_per_node, "nodes": req.nodes, "gpus": self.gpus,
            "seq_len": req.seq_len, "micro_batch": req.micro_batch, "grad_accum": req.grad_accum,
            "checkpointing": req.checkpointing, "attention": req.attention, "headroom": req.headroom,
            "shape": ({**asdict(shape), "params": shape.total_params, "largest_layer_params":
                       shape.largest_layer_params} if shape else None),
        }
        if m is not None:
            doc.update({
                "model_states_bytes": m.model_states, "activations_bytes": m.activations,
                "logits_bytes": m.logits, "overhead_bytes": m.overhead, "total_bytes_per_gpu": m.total,
                "host_bytes_per_node": m.host_per_node, "estimator_source": m.estimator.source,
                "zero_table": self.table,
                "bytes_per_gpu": {**(m.parts or {}), "activations": m.activations, "logits": m.logits,
                                  "overhead": m.overhead},
            })
        doc["peft"] = peft_json(req)
        own = self.own
        doc.update({
            "training_flops": self.training_flops, "mfu": self.mfu, "fits": self.fits,
            "ideal_hours": own.ideal_hours, "scaling_efficiency": own.efficiency,
            "scaling_basis": own.efficiency_basis, "hours": own.hours,
            "gpu_hours": own.hours * own.gpus if own.hours is not None else None,
            "deadline_hours": req.deadline_hours,
            "price_per_gpu_hour": req.price, "currency": req.currency if req.price is not None else None,
            "cost": own.cost, "cost_lines": [line.to_json() for line in own.parts],
            "options": [asdict(o) for o in self.options],
            "cheapest": {cur: asdict(o) for cur, o in self.cheapest.items()},
            "side_by_side": [row.to_json() for row in self.families],
            "hours_basis": self.hours_basis, "no_recommendation": self.no_recommendation,
            "assumptions": assumptions(req),
        })
        return finite(doc)


def peft_json(req: Request) -> dict[str, Any] | None:
    """The LoRA as estimated and its counts by category, as PEFT's print_trainable_parameters would show them."""
    counts = req.peft
    if counts is None:
        return None
    adapter = req.lora or lora.Adapter(assumed=True)
    override = req.trainable_fraction is not None
    return {
        "rank": None if override else adapter.rank,
        "target_modules": None if override else list(adapter.targets),
        "modules": None if override else list(adapter.modules(req.model_shape)),
        "modules_to_save": None if override else list(adapter.modules_to_save),
        "source": f"--trainable-fraction {req.trainable_fraction:g} (yours)" if override else adapter.source,
        "assumed": False if override else adapter.assumed,
        "adapter_params": counts.adapters, "saved_params": counts.saved, "trainable_params": counts.trainable,
        "frozen_params": counts.frozen, "quantized_params": counts.quantized,
        "frozen_16bit_params": counts.frozen_16bit, "all_params": counts.all_params,
    }


def assumptions(req: Request) -> list[str]:
    """The general assumptions, and what this estimate assumed about the user's run where they said nothing."""
    found = list(ASSUMPTIONS)
    if req.peft is not None and req.trainable_fraction is None and (req.lora is None or req.lora.assumed):
        found.append(f"no LoRA described: PEFT's defaults, r={lora.DEFAULT_RANK} on "
                     f"{', '.join(lora.DEFAULT_TARGETS)}; give --lora-rank and --lora-targets (or --adapter-config)")
    if req.method == "qlora":
        found.append("QLoRA as bitsandbytes stores it: NF4 with double quantization on the layers' Linear weights, "
                     "embeddings, output layer and norms in 16 bits (no fp32 cast of them by "
                     "prepare_model_for_kbit_training)")
    return found


def finite(value: Any) -> Any:
    """The document with every non-finite float as None: JSON has no Infinity or NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def zero_table(req: Request) -> list[dict[str, Any]]:
    """Every ZeRO stage and offload variant of the request's precision, as DeepSpeed prints its estimates: host per
    node, model states per GPU, and the total with activations and overhead against the chosen GPU."""
    gpu = req.instance.gpu.name if req.instance else req.gpu
    rows = []
    for stage, offload, offload_params, zero_init in mem.variants(req.precision):
        row = mem.estimator(stage, req.precision, offload, offload_params, zero_init, req.deepspeed)
        m = memory(req, req.gpus_per_node, req.nodes, row)
        rows.append({
            "zero": stage, "offload_optimizer": offload, "offload_params": offload_params, "zero_init": zero_init,
            "host_bytes_per_node": m.host_per_node, "model_states_bytes_per_gpu": m.model_states,
            "total_bytes_per_gpu": m.total,
            "gpu_memory": verdict(m.total, gpu_usable_bytes(gpu), req.headroom) if gpu else None,
            "host_memory": (verdict(m.host_per_node, req.instance.memory_gib * GiB, req.headroom)
                            if req.instance else None),
            "chosen": (stage, offload, offload_params, zero_init) == (req.zero, req.offload, req.offload_params,
                                                                     req.zero_init or stage != 3),
            "since": ".".join(map(str, row.since)), "source": row.source,
        })
    return rows


def estimate(req: Request) -> Estimate:
    m = memory(req, req.gpus_per_node, req.nodes) if req.has_model else None
    table = zero_table(req) if req.has_model else []
    fits = {g: verdict(m.total, gpu_usable_bytes(g), req.headroom) for g in catalog.gpus()} if m else {}
    found = options(req) if req.has_model else []
    return Estimate(req, m, table, training_flops(req), req.mfu or DEFAULT_MFU, fits, own_run(req), found,
                    cheapest(found, req))



__all__ = ["ASSUMPTIONS", "assumptions", "Estimate", "GiB", "Option", "Request", "SPEC_KEYS", "estimate", "figure", "flag",
           "request_from",
           "spec_problems", "verdict"]
