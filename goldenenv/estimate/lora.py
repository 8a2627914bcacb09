"""LoRA and QLoRA as PEFT builds them: which modules get adapters, how many parameters each adds, which modules are
trained whole, and what bitsandbytes quantizes.

LoRA (PEFT's LoraConfig: https://huggingface.co/docs/peft/package_reference/lora): on a Linear(in, out) it adds
A (r × in) and B (out × r), r·(in + out) trainable parameters, per targeted module and layer. `target_modules`
names modules as the model's code does (q_proj, ..., down_proj), or is "all-linear": PEFT's
INCLUDE_LINEAR_LAYERS_SHORTHAND, which `_maybe_include_all_linear_layers` (peft/tuners/tuners_utils.py) expands to
every Linear except the output layer (model.get_output_embeddings()). `modules_to_save` (embed_tokens, lm_head)
are copied whole by ModulesToSaveWrapper and the copy is trained: their full parameter count is trainable, and the
original stays frozen. PEFT's print_trainable_parameters counts all of it: "all params" = base + adapters + copies.

QLoRA as bitsandbytes stores it (transformers' BitsAndBytesConfig with load_in_4bit, bnb_4bit_quant_type="nf4",
bnb_4bit_use_double_quant=True): every Linear of the transformer layers becomes Linear4bit; the embedding, the
output layer (transformers keeps lm_head out of the conversion) and the norms stay 16-bit. bitsandbytes'
quantize_4bit (bitsandbytes/functional.py) packs two 4-bit codes a byte and keeps one absmax per block of 64
weights; with compress_statistics (double quantization) those absmax are quantized again by quantize_blockwise
with blocksize=256: one byte each plus one fp32 constant per 256 of them (Dettmers et al. 2023, section 3: 0.127
bits a parameter for the constants instead of 0.5). Per-tensor extras (the 16-value code book, an fp32 offset) are
a few hundred bytes a matrix and left out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from goldenenv.estimate.shapes import Shape

ALL_LINEAR = "all-linear"
OUTPUT_LAYER = "lm_head"
SAVABLE = ("embed_tokens", "lm_head")
"""Modules a PEFT config commonly trains whole (modules_to_save): the embedding and the output layer."""
DEFAULT_RANK = 8
DEFAULT_TARGETS = ("q_proj", "v_proj")
"""PEFT's own defaults when a LoraConfig names nothing: r=8 (LoraConfig) and, for Llama-family models, q_proj and
v_proj (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING in peft/utils/constants.py)."""
NF4_BLOCK = 64
"""bitsandbytes' 4-bit block size (quantize_4bit's and BitsAndBytesConfig's default)."""
ABSMAX_BLOCK = 256
"""Double quantization: the 8-bit absmax are grouped 256 to one fp32 constant (quantize_blockwise, blocksize=256)."""


class AdapterConfigError(ValueError):
    """An adapter_config.json that cannot describe a LoRA; the message names the file and the key."""


@dataclass(frozen=True)
class Adapter:
    """A LoRA as PEFT's LoraConfig describes it; `assumed` when the user described none (PEFT's defaults)."""

    rank: int = DEFAULT_RANK
    targets: tuple[str, ...] = DEFAULT_TARGETS
    modules_to_save: tuple[str, ...] = ()
    source: str = "PEFT's defaults (no LoRA described)"
    assumed: bool = False

    def modules(self, shape: Shape) -> tuple[str, ...]:
        """The targeted module names, "all-linear" expanded as PEFT expands it (the output layer left out)."""
        if ALL_LINEAR in self.targets:
            return tuple(shape.linear_modules())
        return self.targets

    def describe(self, shape: Shape) -> str:
        saved = f", modules_to_save {', '.join(self.modules_to_save)}" if self.modules_to_save else ""
        targets = ", ".join(self.targets)
        expanded = f" ({', '.join(self.modules(shape))})" if ALL_LINEAR in self.targets else ""
        return f"r={self.rank} on {targets}{expanded}{saved}"


def valid_targets(shape: Shape) -> tuple[str, ...]:
    return (*shape.linear_modules(), OUTPUT_LAYER, ALL_LINEAR)


def adapter_params(adapter: Adapter, shape: Shape) -> int:
    """r·(in + out) per targeted Linear: every layer's for the layer modules, once for lm_head."""
    layer = shape.linear_modules()
    total = 0
    for name in adapter.modules(shape):
        if name == OUTPUT_LAYER:
            total += adapter.rank * (shape.hidden + shape.vocab)
        else:
            fan_in, fan_out = layer[name]
            total += shape.layers * adapter.rank * (fan_in + fan_out)
    return total


def saved_params(adapter: Adapter, shape: Shape) -> int:
    """The modules trained whole (a trainable copy each): vocab × hidden for embed_tokens and for lm_head."""
    return sum(shape.vocab * shape.hidden for name in adapter.modules_to_save if name in SAVABLE)


def nf4_bytes(fan_in: int, fan_out: int, double_quant: bool = True) -> float:
    """Bytes bitsandbytes keeps for one Linear4bit weight: the packed 4-bit codes, one absmax per 64 weights (fp32,
    or 8-bit plus one fp32 constant per 256 absmax with double quantization)."""
    n = fan_in * fan_out
    blocks = math.ceil(n / NF4_BLOCK)
    constants = blocks + 4 * math.ceil(blocks / ABSMAX_BLOCK) if double_quant else 4 * blocks
    return math.ceil(n / 2) + constants


def quantized_bytes(shape: Shape) -> tuple[float, float]:
    """(packed 4-bit codes, quantization constants) of every Linear in the transformer layers, in bytes."""
    codes = constants = 0.0
    for fan_in, fan_out in shape.linear_modules().values():
        total = nf4_bytes(fan_in, fan_out)
        packed = math.ceil(fan_in * fan_out / 2)
        codes += shape.layers * packed
        constants += shape.layers * (total - packed)
    return codes, constants


@dataclass(frozen=True)
class Counts:
    """Parameter counts by category, as PEFT and bitsandbytes lay the model out."""

    adapters: float
    saved: float
    frozen: float
    quantized: float
    """Frozen weights stored in 4 bits (QLoRA), else 0."""

    @property
    def trainable(self) -> float:
        return self.adapters + self.saved

    @property
    def frozen_16bit(self) -> float:
        return self.frozen - self.quantized

    @property
    def all_params(self) -> float:
        """print_trainable_parameters' "all params": the base, the adapters and the trained copies."""
        return self.frozen + self.trainable


def counts(adapter: Adapter | None, shape: Shape, method: str, trainable_fraction: float | None = None) -> Counts:
    """Counts for a LoRA/QLoRA run: the adapter's own, or `trainable_fraction` × N when the user overrides it."""
    total = frozen_params(shape)
    quantized = min(shape.layer_linear_params, total) if method == "qlora" else 0
    if trainable_fraction is not None:
        return Counts(total * trainable_fraction, 0, total, quantized)
    adapter = adapter or Adapter(assumed=True)
    return Counts(adapter_params(adapter, shape), saved_params(adapter, shape), total, quantized)


def frozen_params(shape: Shape) -> float:
    """The base's parameters: counted from the shape (exact, as PEFT counts them) where that agrees with the
    published or given N within 1 % (the catalog rounds N to three figures); N itself otherwise."""
    counted, given = shape.counted_params, shape.total_params
    return counted if abs(counted - given) <= 0.01 * given else given


def read_adapter_config(path: Path) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """(r, target_modules, modules_to_save) from a PEFT adapter_config.json on disk."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterConfigError(f"{path}: no such file (PEFT writes adapter_config.json beside the adapter's "
                                 "weights)") from None
    except IsADirectoryError:
        raise AdapterConfigError(f"{path} is a directory; give the adapter_config.json inside it") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AdapterConfigError(f"{path} cannot be read as JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise AdapterConfigError(f"{path} is not a JSON object (PEFT's adapter_config.json is)")
    kind = doc.get("peft_type", "LORA")
    if str(kind).upper() != "LORA":
        raise AdapterConfigError(f"{path}: peft_type is {kind!r}; only LoRA adapters (peft_type LORA) are modelled")
    rank = doc.get("r", DEFAULT_RANK)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 65_536:
        raise AdapterConfigError(f"{path}: r is {rank!r}; write a whole number from 1 to 65536")
    if doc.get("rank_pattern"):
        raise AdapterConfigError(f"{path}: rank_pattern gives some modules their own rank, which is not modelled; "
                                 "remove it, or estimate with the largest rank in r")
    targets = doc.get("target_modules")
    if isinstance(targets, str):
        if targets.lower() != ALL_LINEAR:
            raise AdapterConfigError(f"{path}: target_modules is the pattern {targets!r}; list the module names "
                                     "instead (e.g. [\"q_proj\", \"v_proj\"]) or write \"all-linear\"")
        targets = [ALL_LINEAR]
    if targets is None:
        raise AdapterConfigError(f"{path}: target_modules is not set (PEFT then picks by model type); list the "
                                 "module names, e.g. [\"q_proj\", \"v_proj\"]")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets) or not targets:
        raise AdapterConfigError(f"{path}: target_modules is {targets!r}; write a list of module names")
    saved = doc.get("modules_to_save") or []
    if not isinstance(saved, list) or not all(isinstance(m, str) for m in saved):
        raise AdapterConfigError(f"{path}: modules_to_save is {saved!r}; write a list of module names or null")
    return rank, tuple(targets), tuple(saved)
