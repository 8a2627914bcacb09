"""Memory per GPU and per host, as DeepSpeed's estimators compute the model states for the DeepSpeed version in use
(catalog deepspeed_estimators.csv, one row per stage, offload variant and first release), plus the activations a
step keeps (Korthikanti et al. 2022, with flash attention's and today's shapes' terms) and a fixed overhead.

Activations, bytes per layer with 16-bit activations, for s·b tokens (sequence × micro-batch), hidden h, the key
and value width h_kv (grouped-query attention), the MLP width f and a attention heads, no tensor or sequence
parallelism (Korthikanti et al. 2022, section 4.1, whose terms these are):
  norms                      4·s·b·h          (the inputs of the two layer norms)
  attention                  s·b·(2·h + 4·h_q + 4·h_kv) (QKV input, Q, K, V, the output projection's input;
                             h_q = heads × head_dim, h unless config.json sets head_dim apart)
                             + s·b·h if dropout (the output dropout's mask)
  eager attention            + 2·a·s²·b        (the softmax output), + 3·a·s²·b if dropout (its mask and output)
  flash attention            + 4·a·s·b         (the fp32 log-sum-exp per row; no s² term: Dao et al. 2022)
  MLP, gelu                  2·s·b·h + 4·s·b·f (the input, fc1's output, the activation's output)
  MLP, swiglu                2·s·b·h + 8·s·b·f (the input, gate, SiLU(gate), up, their product)
                             + s·b·h if dropout
With h_kv = h, f = 4·h, gelu, dropout and eager attention this is Korthikanti's eq. 1, s·b·h·(34 + 5·a·s/h).
The output layer adds the logits once: 2·s·b·V (16-bit) + 4·s·b·V (the fp32 copy the loss computes from).
Full activation checkpointing keeps each layer's input, 2·s·b·h per layer, plus one layer's full activations while
it is recomputed. fp32 activations count twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.estimate import lora
from goldenenv.estimate.shapes import Shape

GiB = 2**30
OVERHEAD_BYTES = int(1.5 * GiB)
"""Assumption: CUDA context (~0.5 GiB) plus NCCL buffers and allocator fragmentation (~1 GiB) per GPU."""
ATTENTION = ("flash", "eager")


def newest_deepspeed() -> tuple[int, ...]:
    """The newest release the catalog knows a change of formula for: without a lock, estimates use its rows."""
    return max(row.since for row in catalog.deepspeed_estimators())


def estimator(stage: int, precision: str, offload: bool, offload_params: bool, zero_init: bool = True,
              deepspeed: tuple[int, ...] | None = None) -> catalog.DeepspeedEstimator:
    """The catalog row that applies: the newest release at or below `deepspeed` (the newest known when None)."""
    kind = "fp32" if precision == "fp32" else "mixed"
    version = deepspeed or newest_deepspeed()
    rows = [r for r in catalog.deepspeed_estimators()
            if (r.stage, r.precision, r.offload_optimizer, r.offload_params) == (stage, kind, offload, offload_params)
            and (r.zero_init == zero_init or stage != 3) and r.since <= version]
    if not rows:
        raise ValueError(f"no estimator for ZeRO-{stage} {kind}{' offload' if offload else ''}"
                         f"{' params offload' if offload_params else ''}")
    return max(rows, key=lambda r: r.since)


def variants(precision: str) -> list[tuple[int, bool, bool, bool]]:
    """Every (stage, offload optimizer, offload params, zero_init) the catalog estimates for a precision, in
    DeepSpeed's printing order per stage (offload first)."""
    kind = "fp32" if precision == "fp32" else "mixed"
    seen = {(r.stage, r.offload_optimizer, r.offload_params, r.zero_init)
            for r in catalog.deepspeed_estimators() if r.precision == kind}
    return sorted(seen, key=lambda v: (v[0], not v[2], not v[1], not v[3]))


def gpu_bytes(row: catalog.DeepspeedEstimator, params: float, largest_layer: float, gpus: int) -> float:
    """Model states per GPU: DeepSpeed's gpu_mem (its int() truncation included)."""
    return (params * row.gpu_per_param + int(params * row.gpu_per_param_sharded / gpus)
            + largest_layer * row.gpu_per_largest_layer_param)


def host_bytes(row: catalog.DeepspeedEstimator, params: float, largest_layer: float, gpus_per_node: int,
               nodes: int) -> float:
    """Host memory per node: DeepSpeed's cpu_mem (its int() truncation included)."""
    gpus = gpus_per_node * nodes
    spread = max(params * row.cpu_per_param_per_node_gpu * gpus_per_node, params * row.cpu_per_param_per_gpu * gpus,
                 params * row.cpu_per_param_per_node_share / nodes, params * row.cpu_per_param_floor)
    return int(row.buffer_factor * (spread + largest_layer * row.cpu_per_largest_layer_param_per_node_gpu
                                    * gpus_per_node))


def activations(shape: Shape, seq_len: int, micro_batch: int, *, checkpointing: bool, attention: str = "flash",
                precision: str = "bf16") -> tuple[float, float]:
    """(layers' activations, logits) in bytes per GPU; see the module's docstring."""
    s, b, h, a, f = seq_len, micro_batch, shape.hidden, shape.heads, shape.intermediate
    tokens = s * b
    drop = 1 if shape.dropout else 0
    per_layer = tokens * (4 * h + 2 * h + 4 * shape.q_hidden + 4 * shape.kv_hidden + drop * h)
    per_layer += tokens * (2 * h + (8 if shape.mlp == "swiglu" else 4) * f + drop * h)
    if attention == "eager":
        per_layer += (2 + 3 * drop) * a * s * s * b
    else:
        per_layer += 4 * a * s * b
    layers = (2 * tokens * h * shape.layers + per_layer) if checkpointing else per_layer * shape.layers
    scale = 2 if precision == "fp32" else 1
    return layers * scale, (2 * scale + 4) * tokens * shape.vocab


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU by component, and host bytes per node."""

    model_states: float
    activations: float
    logits: float
    overhead: float
    host_per_node: float
    estimator: catalog.DeepspeedEstimator
    parts: dict[str, float] | None = None
    """Model states per GPU by category: frozen_16bit, frozen_4bit, quantization_constants, gathered_layer (ZeRO-3's
    gathered frozen layer), trainable_states (weights, gradients and optimizer states of what is trained)."""

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.logits + self.overhead


def model_states(shape: Shape, method: str, row: catalog.DeepspeedEstimator, gpus: int, gpus_per_node: int,
                 nodes: int, precision: str, peft: lora.Counts | None = None) -> tuple[float, float, dict[str, float]]:
    """(per GPU, host per node, bytes per GPU by category) for full training, or LoRA/QLoRA: a frozen base
    (16-bit, and under QLoRA its layers' Linear weights in NF4 with their constants; partitioned under ZeRO-3,
    which then gathers its largest layer) plus the trainable parameters' states by the same estimator row."""
    params, largest = shape.total_params, shape.largest_layer_params
    if method == "full":
        states = gpu_bytes(row, params, largest, gpus)
        return states, host_bytes(row, params, largest, gpus_per_node, nodes), {"trainable_states": states}
    peft = peft or lora.counts(None, shape, method)
    wide = 4 if precision == "fp32" else 2
    codes, constants = lora.quantized_bytes(shape) if method == "qlora" else (0.0, 0.0)
    frozen = {"frozen_16bit": wide * peft.frozen_16bit, "frozen_4bit": codes, "quantization_constants": constants}
    share = gpus if row.stage == 3 else 1
    parts = {k: v / share for k, v in frozen.items()}
    parts["gathered_layer"] = wide * largest if row.stage == 3 else 0
    saved_largest = shape.vocab * shape.hidden if peft.saved else 0
    parts["trainable_states"] = gpu_bytes(row, peft.trainable, saved_largest, gpus)
    host = sum(frozen.values()) * gpus_per_node * row.buffer_factor
    return (sum(parts.values()), host + host_bytes(row, peft.trainable, saved_largest, gpus_per_node, nodes),
            parts)
