"""A model's shape: by name from the catalog (data/models.csv), from a Hugging Face config.json read locally, from
--layers/--hidden, or inferred from the parameter count. The shape gives the parameter count, the largest layer that
ZeRO-3 gathers, and the activations a training step keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from goldenenv import catalog

HEAD_DIM = 128
"""Assumption: hidden size per attention head, and the hidden/layers ratio, when the shape is inferred from N."""
DEFAULT_VOCAB = 32000
"""Assumption: the vocabulary when nothing names it (Llama 1/2's)."""
GATED_MLP_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                             "phi3", "olmo", "olmo2", "granite", "cohere", "internlm2", "baichuan", "yi"})
"""config.json model_type values whose MLP is gated (gate, up and down projections: SwiGLU/GeGLU)."""
GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu", "geglu"})


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    mlp: str = "swiglu"
    """swiglu: gate, up, down matrices (Llama, Mistral, Qwen); gelu: two matrices (GPT-2, BLOOM, Korthikanti et al.)"""
    tied_embeddings: bool = False
    dropout: bool = False
    """Attention and hidden dropout on: the masks are activations too (Korthikanti et al. count them)."""
    params: float = 0.0
    """Published or given; 0 = count from the shape."""
    name: str = ""
    inferred: bool = False
    head_dim: int = 0
    """Width of one attention head; 0 = hidden / heads (config.json's head_dim where a model sets it apart)."""

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_hidden(self) -> int:
        return self.heads * self.head_width

    @property
    def kv_hidden(self) -> int:
        return self.kv_heads * self.head_width

    def linear_modules(self) -> dict[str, tuple[int, int]]:
        """Each transformer layer's Linear modules as (in_features, out_features), named as in the model's own
        code (transformers' LlamaAttention/LlamaMLP: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
        down_proj). A two-matrix MLP (GPT-2, BLOOM) is given as up_proj and down_proj."""
        h, f = self.hidden, self.intermediate
        modules = {"q_proj": (h, self.q_hidden), "k_proj": (h, self.kv_hidden), "v_proj": (h, self.kv_hidden),
                   "o_proj": (self.q_hidden, h)}
        if self.mlp == "swiglu":
            modules["gate_proj"] = (h, f)
        modules.update(up_proj=(h, f), down_proj=(f, h))
        return modules

    @property
    def layer_linear_params(self) -> int:
        """Weights of every Linear in the transformer layers, all layers: what bitsandbytes quantizes in QLoRA."""
        return self.layers * sum(i * o for i, o in self.linear_modules().values())

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """The output layer (lm_head), 0 when tied to the embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def counted_params(self) -> float:
        """Embedding (and the output layer unless tied), per layer q/k/v/o, the MLP's matrices and two norms, and
        the final norm. Llama-2-7B: 6,738,415,616."""
        h = self.hidden
        return self.embedding_params + self.head_params + self.layer_linear_params + self.layers * 2 * h + h

    @property
    def total_params(self) -> float:
        return self.params or self.counted_params

    @property
    def largest_layer_params(self) -> float:
        """The largest single module, as DeepSpeed's estimator counts it (parameters of one module, not recursive):
        the embedding or one MLP matrix."""
        return max(self.vocab * self.hidden, self.hidden * self.intermediate)


def from_catalog(name: str) -> Shape | None:
    row = catalog.models().get(name.lower())
    if row is None:
        return None
    return Shape(row.layers, row.hidden, row.heads, row.kv_heads, row.intermediate, row.vocab, row.mlp,
                 row.tied_embeddings, row.dropout, row.params, row.model)


def infer(params: float, vocab: int = DEFAULT_VOCAB) -> Shape:
    """A Llama-like transformer of N ≈ 12·L·h² with h/L ≈ HEAD_DIM (Llama-7B/13B: 128) and heads of HEAD_DIM, an
    MLP of 4·h in two matrices' worth of parameters (8/3·h gated): an assumption, said so in the output."""
    hidden = max(HEAD_DIM, round((HEAD_DIM * params / 12) ** (1 / 3) / HEAD_DIM) * HEAD_DIM)
    layers = max(1, round(params / (12 * hidden**2)))
    heads = hidden // HEAD_DIM
    return Shape(layers, hidden, heads, heads, 8 * hidden // 3, vocab, "swiglu", False, False, params,
                 inferred=True)


def with_layers(base: Shape | None, layers: int, hidden: int, heads: int | None, params: float | None) -> Shape:
    """--layers/--hidden (and --heads) over a named shape or a Llama-like default."""
    heads = heads or max(1, hidden // HEAD_DIM)
    if base is None:
        return Shape(layers, hidden, heads, heads, 8 * hidden // 3, DEFAULT_VOCAB, "swiglu", False, False,
                     params or 0.0)
    kv = base.kv_heads if base.kv_heads <= heads and heads % base.kv_heads == 0 else heads
    return replace(base, layers=layers, hidden=hidden, heads=heads, kv_heads=kv, params=params or 0.0,
                   inferred=False)


class ConfigError(ValueError):
    """A config.json that cannot give a shape; the message names the file and the key."""


_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
}


def from_config(path: Path) -> Shape:
    """A shape from a Hugging Face config.json on disk (never downloaded)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} cannot be read as JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} is not a JSON object (a Hugging Face config.json is)")
    doc = doc.get("text_config", doc) if isinstance(doc.get("text_config"), dict) else doc

    def whole(keys: tuple[str, ...], default: int | None = None) -> int:
        for key in keys:
            if key in doc:
                value = doc[key]
                if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 10_000_000:
                    raise ConfigError(f"{path}: {key} is {value!r}; a whole number from 1 to 10,000,000")
                return value
        if default is None:
            raise ConfigError(f"{path}: none of {', '.join(keys)} is set; a decoder config.json names its "
                              f"{keys[0]}")
        return default

    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        if doc.get(key):
            raise ConfigError(f"{path}: {key} is set: mixture-of-experts models are not modelled; give --params "
                              "with --layers/--hidden for a dense equivalent")
    layers, hidden, heads = (whole(_KEYS[k]) for k in ("layers", "hidden", "heads"))
    if hidden % heads:
        raise ConfigError(f"{path}: num_attention_heads {heads} does not divide hidden_size {hidden}")
    kv_heads = whole(("num_key_value_heads", "multi_query_group_num"), heads)
    if heads % kv_heads:
        raise ConfigError(f"{path}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    intermediate = whole(("intermediate_size", "n_inner", "ffn_hidden_size"), 4 * hidden)
    vocab = whole(("vocab_size", "padded_vocab_size"))
    act = str(doc.get("hidden_act") or doc.get("activation_function") or "").lower()
    gated = act in GATED_ACTIVATIONS or str(doc.get("model_type", "")).lower() in GATED_MLP_TYPES
    dropout = any(isinstance(doc.get(k), (int, float)) and not isinstance(doc.get(k), bool) and doc[k] > 0
                  for k in ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "dropout"))
    tied = doc.get("tie_word_embeddings", True)
    head_dim = whole(("head_dim",), hidden // heads) if doc.get("head_dim") is not None else 0
    return Shape(layers, hidden, heads, kv_heads, intermediate, vocab, "swiglu" if gated else "gelu",
                 tied is True, dropout, 0.0, path.name, head_dim=head_dim)
