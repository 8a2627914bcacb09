"""What the user asks an estimate of (``Request``: the model, the method, the hardware, the user's own figures)
and the defaults it starts from.

Below the estimate itself (estimate/__init__.py) and the readers that build a request from flags or a stack file
(inputs.py) and draw it (figure.py), which the estimate imports: none of them imports the estimate back.
"""

from __future__ import annotations

from dataclasses import dataclass

from goldenenv import catalog
from goldenenv.estimate import footprint as mem
from goldenenv.estimate import lora, shapes
from goldenenv.estimate.shapes import Shape

METHODS = ("full", "lora", "qlora")
PRECISIONS = ("bf16", "fp16", "fp32")
DEFAULT_HEADROOM = 0.10
"""Assumption: the share of a GPU's (and a host's) memory left free for the allocator's fragmentation, other
processes and spikes; a run needing more than the rest is "tight", more than all of it does not fit."""


def gpu_usable_bytes(gpu: str) -> float:
    """The GPU's memory as nvidia-smi reports it (catalog gpu_usable_memory.csv), in bytes."""
    return catalog.gpu_usable_mib()[gpu][0] * 2**20


@dataclass(frozen=True)
class Request:
    params: float | None
    tokens: float | None = None
    hours: float | None = None
    """Hours at perfect scaling the user already knows (instead of --tokens)."""
    method: str = "full"
    precision: str = "bf16"
    zero: int = 0
    offload: bool = False
    offload_params: bool = False
    zero_init: bool = True
    seq_len: int = 4096
    micro_batch: int = 1
    grad_accum: int = 1
    shape: Shape | None = None
    checkpointing: bool = True
    attention: str = "flash"
    gpu: str | None = None
    instance: catalog.InstanceType | None = None
    gpus_per_node: int = 8
    nodes: int = 1
    mfu: float | None = None
    deadline_hours: float | None = None
    trainable_fraction: float | None = None
    """The user's override of the trainable share of N for LoRA/QLoRA; None: counted from `lora`."""
    lora: lora.Adapter | None = None
    """The LoRA as PEFT describes it (rank, target modules, modules_to_save); PEFT's defaults when not given."""
    deepspeed: tuple[int, ...] | None = None
    deepspeed_from: str = "the newest formulas the catalog knows"
    headroom: float = DEFAULT_HEADROOM
    price: float | None = None
    """The user's price per GPU-hour, in `currency`."""
    currency: str = "USD"
    scaling_efficiency: float | None = None
    egress_gb: float = 0.0
    dataset_gb: float = 0.0
    checkpoint_gb: float = 0.0
    idle_hours: float = 0.0
    allow_tcp: bool = False
    """Allow multi-node ZeRO-3 fleets without RDMA among the recommended options."""

    @property
    def model_shape(self) -> Shape | None:
        if self.shape is not None:
            return self.shape if self.shape.params or not self.params else _with_params(self.shape, self.params)
        return shapes.infer(self.params) if self.params else None

    @property
    def has_model(self) -> bool:
        return self.model_shape is not None

    @property
    def total_params(self) -> float:
        return self.model_shape.total_params

    @property
    def peft(self) -> lora.Counts | None:
        """Adapter, trained-whole, frozen and quantized parameter counts of a LoRA/QLoRA run; None for full."""
        if self.method == "full" or not self.has_model:
            return None
        return lora.counts(self.lora, self.model_shape, self.method, self.trainable_fraction)

    @property
    def trainable_params(self) -> float:
        return self.total_params if self.method == "full" else self.peft.trainable

    @property
    def estimator(self) -> catalog.DeepspeedEstimator:
        return mem.estimator(self.zero, self.precision, self.offload, self.offload_params, self.zero_init,
                             self.deepspeed)


def _with_params(shape: Shape, params: float) -> Shape:
    from dataclasses import replace
    return replace(shape, params=params)
