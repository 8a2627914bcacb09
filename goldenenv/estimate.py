"""Before renting: memory per GPU, training FLOPs, time and cost on every catalog instance type.

Pure arithmetic over the catalog (GPU memory, peak TFLOPS, instance types, prices); nothing here reads a file of
the user's or the network. Every figure that is a modelling choice rather than a published fact is a named
constant below and is listed in `ASSUMPTIONS`, which the CLI prints with each estimate.

Sources of the formulas:
- Model states (weights, gradients, optimizer) under DeepSpeed ZeRO: DeepSpeed's estimators
  `deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs` and
  `deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs` (documented in DeepSpeed's
  "Memory Requirements" page, whose t5-3b examples the tests reproduce). Per GPU, mixed precision:
    ZeRO-1/2, no offload:        4·N + 16·N/G
    ZeRO-1/2, optimizer offload: 2·N
    ZeRO-3, no offload:          4·L + 18·N/G          (L: parameters of the largest layer)
    ZeRO-3, optimizer offload:   4·L + 2·N/G
    ZeRO-3, parameters offload:  4·L
  DeepSpeed has one estimator for stages 1 and 2 (one module implements both), so ZeRO-1 and ZeRO-2 estimate alike.
  Its 16 bytes per parameter over G are the optimizer's 12 (fp32 master copy 4, Adam momentum 4, variance 4) plus
  an fp32 gradient partition (4); its 4·N are the 16-bit weights and the 16-bit gradient buffer. How the 18 bytes of
  ZeRO-3 split between gradients and optimizer is not stated by DeepSpeed: the split here (2 weights, 4 gradients,
  12 optimizer) is ours; the total is DeepSpeed's.
- ZeRO-0 (plain data parallel), which DeepSpeed does not estimate: 16·N, mixed-precision Adam's 2 (16-bit weights)
  + 2 (16-bit gradients) + 12 (fp32 master 4 + momentum 4 + variance 4), Rajbhandari et al. 2020 (ZeRO, §3.1, K=12).
  The "12 bytes per parameter" shortcut forgets the master copy.
- fp32 training (no mixed precision) has no DeepSpeed estimator: 4 (weights) + 4 (gradients) + 8 (Adam) bytes per
  parameter, partitioned as in the ZeRO paper (stage 1 the optimizer, 2 also gradients, 3 also weights).
- Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", eq. 1):
  s·b·h·(34 + 5·a·s/h) bytes per layer with 16-bit activations and no recomputation; with full activation
  checkpointing 2·s·b·h per layer (the stored layer inputs) plus one layer's full activations while it is recomputed.
  fp32 activations count twice.
- LoRA: frozen base weights at 16 bits (2 bytes per parameter, no gradients, no optimizer), the adapters' trainable
  parameters (a fraction of N) with full mixed-precision model states. QLoRA: the base in 4-bit NormalFloat with
  double-quantised constants, 4.127 bits per parameter (Dettmers et al. 2023, §3: 0.127 bits of constants).
- Training FLOPs: 6·N·T (Kaplan et al. 2020; 2·N·T is the forward pass alone, the backward pass twice that).
  LoRA and QLoRA: 4·N·T + 6·A·T (forward and activation gradients through the frozen base, full training of the A
  adapter parameters; no weight gradients for the base). Recomputation under checkpointing is not counted: MFU
  is defined on model FLOPs, so its cost shows as a lower MFU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

from goldenenv import catalog

GiB = 2**30
METHODS = ("full", "lora", "qlora")
PRECISIONS = ("bf16", "fp16", "fp32")
CAPACITIES = ("on-demand", "spot")

DEFAULT_MFU = 0.4
"""Assumption: model FLOPs utilisation when the catalog has none for the GPU (it has none yet)."""
SCALING_PER_DOUBLING = 0.95
"""Assumption: throughput per GPU falls by this factor for every doubling of nodes beyond one."""
OVERHEAD_BYTES = int(1.5 * GiB)
"""Assumption: CUDA context (~0.5 GiB) plus NCCL buffers and allocator fragmentation (~1 GiB) per GPU."""
DEFAULT_TRAINABLE_FRACTION = 0.01
"""Assumption: LoRA adapters hold 1 % of the base's parameters (r=16 on every linear layer of a 7B model ≈ 0.6 %)."""
DEFAULT_VOCAB = 32000
"""Assumption: vocabulary when no --model names it (Llama 1/2's), for the largest layer ZeRO-3 gathers."""
HEAD_DIM = 128
"""Assumption: hidden size per attention head, and hidden/layers ratio, when the shape is inferred from N."""
QLORA_BYTES_PER_PARAM = 4.127 / 8
MAX_NODES = 64
"""The largest node count the cost search tries per instance type."""

ASSUMPTIONS = (
    f"MFU {DEFAULT_MFU} unless --mfu (the catalog has no measured MFU per GPU)",
    f"multi-node scaling: x{SCALING_PER_DOUBLING} per doubling of nodes beyond one",
    f"overhead {OVERHEAD_BYTES / GiB:g} GiB per GPU (CUDA context, NCCL buffers, fragmentation)",
    "ZeRO-3 split of DeepSpeed's 18 bytes/param into weights 2, gradients 4, optimizer 12 is ours",
    "no FX rate in the catalog: costs in different currencies are not compared with each other",
)


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    vocab: int
    params: float
    inferred: bool = False

    @property
    def largest_layer_params(self) -> float:
        """The largest single module, as DeepSpeed's model_to_params counts it: the embedding or one MLP matrix."""
        return max(self.vocab * self.hidden, 4 * self.hidden**2)


MODELS: dict[str, Shape] = {
    # Touvron et al. 2023, Llama 2 paper Table 1 / the Llama 1 paper Table 2: layers, hidden, heads; vocab 32000.
    "llama-7b": Shape(32, 4096, 32, 32000, 6.74e9),
    "llama-13b": Shape(40, 5120, 40, 32000, 13.0e9),
    "llama-70b": Shape(80, 8192, 64, 32000, 68.98e9),
}


def infer_shape(params: float) -> Shape:
    """A transformer of N ≈ 12·L·h² with h/L ≈ HEAD_DIM (Llama-7B/13B: 128), heads of HEAD_DIM: an assumption."""
    hidden = max(HEAD_DIM, round((HEAD_DIM * params / 12) ** (1 / 3) / HEAD_DIM) * HEAD_DIM)
    layers = max(1, round(params / (12 * hidden**2)))
    return Shape(layers, hidden, hidden // HEAD_DIM, DEFAULT_VOCAB, params, inferred=True)


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU, by component."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.overhead


def model_states(params: float, gpus: int, zero: int, *, offload: bool = False, offload_params: bool = False,
                 precision: str = "bf16", largest_layer_params: float = 0) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for full training of `params` over `gpus` data-parallel ranks."""
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage {zero}: valid are 0, 1, 2, 3")
    if (offload or offload_params) and zero == 0:
        raise ValueError("offload needs ZeRO stage 1, 2 or 3")
    if offload_params and zero != 3:
        raise ValueError("parameter offload needs ZeRO stage 3")
    n, g = params, gpus
    if precision == "fp32":
        gathered = 4 * largest_layer_params if zero == 3 else 0
        weights = 4 * n / (g if zero == 3 else 1)
        gradients = 4 * n / (g if zero >= 2 else 1)
        optimizer = 8 * n / (g if zero >= 1 else 1)
        if offload:
            optimizer = 0
            gradients = 0 if zero >= 2 else gradients
        if offload_params:
            weights = 0
        return weights + gathered, gradients + gathered, optimizer
    if zero == 0:
        return 2 * n, 2 * n, 12 * n
    if zero in (1, 2):
        if offload:
            return 2 * n, 0, 0
        return 2 * n, 2 * n + 4 * n / g, 12 * n / g
    half_layer = 2 * largest_layer_params
    if offload_params:
        return half_layer, half_layer, 0
    if offload:
        return half_layer + 2 * n / g, half_layer, 0
    return half_layer + 2 * n / g, half_layer + 4 * n / g, 12 * n / g


def activations(shape: Shape, seq_len: int, micro_batch: int, *, checkpointing: bool, precision: str = "bf16") -> float:
    """Bytes per GPU (Korthikanti et al. 2022, no tensor or sequence parallelism)."""
    s, b, h, a = seq_len, micro_batch, shape.hidden, shape.heads
    per_layer = s * b * h * (34 + 5 * a * s / h)
    total = (2 * s * b * h * shape.layers + per_layer) if checkpointing else per_layer * shape.layers
    return total * (2 if precision == "fp32" else 1)


@dataclass(frozen=True)
class Request:
    params: float
    tokens: float
    method: str = "full"
    precision: str = "bf16"
    zero: int = 0
    offload: bool = False
    offload_params: bool = False
    seq_len: int = 4096
    micro_batch: int = 1
    shape: Shape | None = None
    checkpointing: bool = True
    gpu: str | None = None
    gpus_per_node: int = 8
    nodes: int = 1
    mfu: float | None = None
    deadline_hours: float | None = None
    trainable_fraction: float = DEFAULT_TRAINABLE_FRACTION

    @property
    def model_shape(self) -> Shape:
        return self.shape or infer_shape(self.params)

    @property
    def adapter_params(self) -> float:
        return 0.0 if self.method == "full" else self.params * self.trainable_fraction


def memory(req: Request, gpus: int) -> Memory:
    """Bytes per GPU when the run spreads over `gpus` data-parallel ranks."""
    shape = req.model_shape
    opts = dict(offload=req.offload, offload_params=req.offload_params, precision=req.precision)
    if req.method == "full":
        w, g, o = model_states(req.params, gpus, req.zero, largest_layer_params=shape.largest_layer_params, **opts)
    else:
        base_bytes = QLORA_BYTES_PER_PARAM if req.method == "qlora" else (4 if req.precision == "fp32" else 2)
        base = base_bytes * req.params / (gpus if req.zero == 3 else 1)
        w, g, o = model_states(req.adapter_params, gpus, req.zero, **opts)
        w += base
    act = activations(shape, req.seq_len, req.micro_batch, checkpointing=req.checkpointing, precision=req.precision)
    return Memory(w, g, o, act, OVERHEAD_BYTES)


def training_flops(req: Request) -> float:
    if req.method == "full":
        return 6 * req.params * req.tokens
    return 4 * req.params * req.tokens + 6 * req.adapter_params * req.tokens


def scaling_efficiency(nodes: int) -> float:
    return SCALING_PER_DOUBLING ** math.log2(nodes) if nodes > 1 else 1.0


def wall_hours(flops: float, gpus: int, nodes: int, peak_tflops: float, mfu: float) -> float:
    return flops / (gpus * peak_tflops * 1e12 * mfu * scaling_efficiency(nodes)) / 3600


def gpu_capacity_bytes(gpu: str) -> float:
    return catalog.gpus()[gpu].memory_gib * GiB


def canonical_gpu(name: str) -> str | None:
    """The catalog's spelling of a GPU name given in any case (h100-80gb → H100-80GB)."""
    return next((g for g in catalog.gpus() if g.lower() == name.lower()), None)


PriceLookup = Callable[[str, str, str], "catalog.Price | None"]


def catalog_price(cloud: str, instance_type: str, capacity: str) -> catalog.Price | None:
    """goldenenv.costs' price when that module exists, else the catalog's; in the first region the catalog prices."""
    regions = [r["region"] for r in catalog.rows("prices") if (r["cloud"], r["instance_type"]) == (cloud, instance_type)]
    region = regions[0] if regions else ""
    try:
        from goldenenv import costs
    except ImportError:
        return catalog.price(cloud, instance_type, region, capacity)
    return costs.compute_price(cloud, instance_type, region, capacity)


def run_cost(p: catalog.Price, nodes: int, hours: float) -> tuple[float | None, bool]:
    """(amount, verified) of `nodes` nodes for `hours` of wall-clock time at price `p`, through goldenenv.costs'
    run_cost (the project's one cost model) when it exists. `hours` already includes the scaling efficiency, so
    run_cost gets the perfect-scaling hours and the efficiency back."""
    try:
        from goldenenv import costs
    except ImportError:
        return p.usd_per_hour * nodes * hours, p.verified
    efficiency = scaling_efficiency(nodes)
    line = costs.run_cost(p.cloud, p.instance_type, p.region, p.capacity, nodes, hours * efficiency, efficiency)
    return line.amount, line.verified


@dataclass(frozen=True)
class Option:
    """The smallest node count of one instance type that fits memory (and meets the deadline if it can)."""

    cloud: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    capacity: str
    nodes: int | None
    fits: bool
    meets_deadline: bool | None
    hours: float | None
    gpu_hours: float | None
    price_per_hour: float | None
    currency: str | None
    cost: float | None
    price_region: str | None
    price_as_of: str | None
    price_verified: bool | None


def options(req: Request, price: PriceLookup = catalog_price) -> list[Option]:
    """Every catalog instance type of every cloud, on-demand and spot where priced."""
    flops = training_flops(req)
    mfu = req.mfu or DEFAULT_MFU
    peaks = catalog.gpu_peak_tflops()
    found: list[Option] = []
    for row in catalog.rows("instance_types"):
        it = catalog.instance_type(row["cloud"], row["instance_type"])
        nodes, hours, fits, meets = _smallest_fleet(req, it.gpu.name, it.gpu_count, flops, mfu, peaks)
        for capacity in CAPACITIES:
            p = price(it.cloud, it.name, capacity)
            if capacity == "spot" and (p is None or p.capacity != "spot"):
                continue  # costs.compute_price answers an on-demand price when it has no spot figure
            cost = verified = None
            if p is not None:
                verified = p.verified
                if nodes is not None and hours is not None:
                    cost, verified = run_cost(p, nodes, hours)
            found.append(Option(
                it.cloud, it.name, it.gpu.name, it.gpu_count, capacity, nodes, fits, meets, hours,
                hours * nodes * it.gpu_count if hours is not None and nodes else None,
                p.usd_per_hour if p else None, p.currency if p else None, cost,
                p.region if p else None, p.as_of if p else None, verified,
            ))
    return found


def _smallest_fleet(req, gpu, per_node, flops, mfu, peaks):
    capacity = gpu_capacity_bytes(gpu)
    peak = peaks.get(gpu)
    first_fit = None
    for nodes in range(1, MAX_NODES + 1):
        if memory(req, nodes * per_node).total > capacity:
            continue
        hours = wall_hours(flops, nodes * per_node, nodes, peak.bf16_dense_tflops, mfu) if peak else None
        if first_fit is None:
            first_fit = (nodes, hours)
        if req.deadline_hours is None or hours is None:
            return nodes, hours, True, None
        if hours <= req.deadline_hours:
            return nodes, hours, True, True
    if first_fit is None:
        return None, None, False, None
    return first_fit[0], first_fit[1], True, False


def cheapest(found: list[Option]) -> dict[str, Option]:
    """Per currency, the cheapest option that fits and meets the deadline (currencies are not converted)."""
    best: dict[str, Option] = {}
    for o in found:
        if o.cost is None or not o.fits or o.meets_deadline is False:
            continue
        if o.currency not in best or o.cost < best[o.currency].cost:
            best[o.currency] = o
    return best


@dataclass(frozen=True)
class Estimate:
    request: Request
    memory: Memory
    training_flops: float
    gpus: int
    hours: float | None
    gpu_hours: float | None
    mfu: float
    fits: dict[str, bool]
    options: list[Option] = field(default_factory=list)
    cheapest: dict[str, Option] = field(default_factory=dict)

    def to_json(self) -> dict:
        m, req, shape = self.memory, self.request, self.request.model_shape
        return {
            "params": req.params, "tokens": req.tokens, "method": req.method, "precision": req.precision,
            "zero": req.zero, "offload": req.offload, "offload_params": req.offload_params,
            "gpu": req.gpu, "gpus_per_node": req.gpus_per_node, "nodes": req.nodes, "gpus": self.gpus,
            "shape": {**asdict(shape), "largest_layer_params": shape.largest_layer_params},
            "seq_len": req.seq_len, "micro_batch": req.micro_batch, "checkpointing": req.checkpointing,
            "model_states_bytes": m.model_states, "weights_bytes": m.weights, "gradients_bytes": m.gradients,
            "optimizer_bytes": m.optimizer, "activations_bytes": m.activations, "overhead_bytes": m.overhead,
            "total_bytes_per_gpu": m.total,
            "training_flops": self.training_flops, "mfu": self.mfu,
            "scaling_efficiency": scaling_efficiency(req.nodes),
            "hours": self.hours, "gpu_hours": self.gpu_hours, "deadline_hours": req.deadline_hours,
            "fits": self.fits,
            "options": [asdict(o) for o in self.options],
            "cheapest": {cur: asdict(o) for cur, o in self.cheapest.items()},
            "assumptions": list(ASSUMPTIONS),
        }


def estimate(req: Request, price: PriceLookup = catalog_price) -> Estimate:
    gpus = req.gpus_per_node * req.nodes
    mem = memory(req, gpus)
    flops = training_flops(req)
    mfu = req.mfu or DEFAULT_MFU
    hours = gpu_hours = None
    peak = catalog.gpu_peak_tflops().get(req.gpu) if req.gpu else None
    if peak:
        hours = wall_hours(flops, gpus, req.nodes, peak.bf16_dense_tflops, mfu)
        gpu_hours = hours * gpus
    fits = {g: mem.total <= gpu_capacity_bytes(g) for g in catalog.gpus()}
    found = options(req, price)
    return Estimate(req, mem, flops, gpus, hours, gpu_hours, mfu, fits, found, cheapest(found))


SPEC_KEYS = ("params", "tokens", "method", "precision", "zero", "offload", "offload_params", "seq_len",
             "micro_batch", "layers", "hidden", "heads", "model", "checkpointing", "gpu", "gpus_per_node", "nodes",
             "mfu", "deadline", "trainable_fraction")


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def request_from(values: dict) -> tuple[Request | None, list[str]]:
    """A Request from flag values (keys as SPEC_KEYS, None for unset), or the problems, one per flag, naming it."""
    problems: list[str] = []

    def number(key, kind=float, *, minimum=None, above=None, maximum=None, required=False):
        raw = values.get(key)
        if raw is None:
            if required:
                problems.append(f"{flag(key)}: required (a number, e.g. 13e9)")
            return None
        try:
            value = kind(float(raw)) if kind is int and not isinstance(raw, bool) else kind(raw)
            if kind is int and float(raw) != value:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"{flag(key)}: {raw!r} is not {'a whole number' if kind is int else 'a number'}")
            return None
        if (above is not None and not value > above) or (minimum is not None and value < minimum) or (
                maximum is not None and value > maximum):
            rule = (f"above {above}" if above is not None else f"at least {minimum}") + (
                f" and at most {maximum}" if maximum is not None else "")
            problems.append(f"{flag(key)}: {raw} is out of range, valid is {rule}")
            return None
        return value

    def choice(key, valid, default):
        raw = values.get(key)
        if raw is None:
            return default
        if str(raw).lower() not in valid:
            problems.append(f"{flag(key)}: {raw!r} is not one of {', '.join(valid)}")
            return default
        return str(raw).lower()

    params = number("params", above=0, required=values.get("model") is None)
    tokens = number("tokens", above=0, required=True)
    method = choice("method", METHODS, "full")
    precision = choice("precision", PRECISIONS, "bf16")
    zero = number("zero", int, minimum=0, maximum=3)
    seq_len = number("seq_len", int, minimum=1)
    micro_batch = number("micro_batch", int, minimum=1)
    gpus_per_node = number("gpus_per_node", int, minimum=1)
    nodes = number("nodes", int, minimum=1)
    mfu = number("mfu", above=0, maximum=1)
    deadline = number("deadline", above=0)
    fraction = number("trainable_fraction", above=0, maximum=1)
    layers = number("layers", int, minimum=1)
    hidden = number("hidden", int, minimum=1)
    heads = number("heads", int, minimum=1)

    shape = None
    if values.get("model") is not None:
        shape = MODELS.get(str(values["model"]).lower())
        if shape is None:
            problems.append(f"--model: {values['model']!r} is not one of {', '.join(MODELS)}")
        elif params is None:
            params = shape.params
    if (layers is None) != (hidden is None):
        problems.append(f"{'--hidden' if layers else '--layers'}: give --layers and --hidden together")
    elif layers and hidden:
        if heads and hidden % heads:
            problems.append(f"--heads: {heads} does not divide --hidden {hidden}")
        base = shape or Shape(0, 0, 0, DEFAULT_VOCAB, params or 0)
        shape = Shape(layers, hidden, heads or max(1, hidden // HEAD_DIM), base.vocab, params or 0)

    gpu = None
    if values.get("gpu") is not None:
        gpu = canonical_gpu(str(values["gpu"]))
        if gpu is None:
            problems.append(f"--gpu: {values['gpu']!r} is not a catalog GPU; valid: {', '.join(catalog.gpus())}")

    offload, offload_params = bool(values.get("offload")), bool(values.get("offload_params"))
    stage = zero if zero is not None else 0
    if offload and stage == 0:
        problems.append("--offload: needs --zero 1, 2 or 3 (ZeRO-Offload partitions the optimizer first)")
    if offload_params and stage != 3:
        problems.append("--offload-params: needs --zero 3")
    if problems:
        return None, problems
    req = Request(
        params=params, tokens=tokens, method=method, precision=precision, zero=stage,
        offload=offload or offload_params, offload_params=offload_params,
        seq_len=seq_len or 4096, micro_batch=micro_batch or 1, shape=shape,
        checkpointing=True if values.get("checkpointing") is None else bool(values["checkpointing"]),
        gpu=gpu, gpus_per_node=gpus_per_node or 8, nodes=nodes or 1, mfu=mfu, deadline_hours=deadline,
        trainable_fraction=fraction or DEFAULT_TRAINABLE_FRACTION,
    )
    return req, []


def figure(est: Estimate):
    """A matplotlib Figure: memory per GPU by component against each catalog GPU's capacity, and cost per option.

    Building the figure writes nothing; the caller saves it. Uses the Agg backend (no display).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5.5), layout="constrained")
    mem_ax, cost_ax = fig.subplots(1, 2, width_ratios=(1, 2.2))
    m = est.memory
    bottom = 0.0
    for label, value in (("weights", m.weights), ("gradients", m.gradients), ("optimizer", m.optimizer),
                         ("activations", m.activations), ("overhead", m.overhead)):
        mem_ax.bar(["per GPU"], [value / GiB], bottom=[bottom], label=label)
        bottom += value / GiB
    for name, gpu in sorted(catalog.gpus().items(), key=lambda kv: kv[1].memory_gib):
        mem_ax.axhline(gpu.memory_gib, linestyle="--", linewidth=0.8, color="grey")
        mem_ax.annotate(name, (0.42, gpu.memory_gib), fontsize=7, va="bottom")
    mem_ax.set_ylabel("GiB per GPU")
    mem_ax.set_title(f"memory per GPU, ZeRO-{est.request.zero}, {est.gpus} GPUs")
    mem_ax.legend(fontsize=7, loc="upper left")

    priced = [o for o in est.options if o.cost is not None]
    labels = [f"{o.cloud} {o.instance_type} x{o.nodes} {o.capacity}" for o in priced]
    colours = ["tab:green" if o.meets_deadline is not False else "tab:red" for o in priced]
    cost_ax.barh(labels, [o.cost for o in priced], color=colours)
    for i, o in enumerate(priced):
        cost_ax.annotate(f" {o.cost:,.0f} {o.currency}", (o.cost, i), fontsize=7, va="center")
    if priced:
        cost_ax.set_xscale("log")
    cost_ax.set_xlabel("run cost (catalog price; USD and CNY not converted)")
    cost_ax.set_title("cost per cloud, instance type and capacity (red: misses the deadline)")
    cost_ax.tick_params(axis="y", labelsize=7)
    return fig
