"""The Llama family: Llama, Mistral and Qwen2, one loader with their differences as data.

Decoder-only, pre-norm RMS norms with a final one, rotary positions (Llama 3's scaling where
the folder says so), grouped-query attention, a gated SiLU feed-forward (``gate_proj`` is our
``linear1``, ``up_proj`` our ``gate``), no biases but Qwen2's on Q/K/V. Sliding-window
attention (Mistral: every layer; Qwen2, where ``use_sliding_window`` is on: the layers its
``layer_types`` names, or those from ``max_window_layers`` on) is the model's own window mask
(``ModelConfig.sliding_window`` / ``layer_types``), with transformers' convention: a query
at ``i`` sees keys ``j`` with ``i - j < sliding_window``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from .common import activation, int_of, opt_float, opt_int
from .mapping import Attention, Linear, One, Rule, layers
from .registry import Family, register

#: one layer: ours under ``decoder.layers.N.``, theirs under ``model.layers.N.``
LAYER = (
    Attention("self_attn.", "self_attn.", ("q_proj", "k_proj", "v_proj", "o_proj")),
    Linear("ff.linear1", "mlp.gate_proj"),
    Linear("ff.gate", "mlp.up_proj"),
    Linear("ff.linear2", "mlp.down_proj"),
    One("norm1.weight", "input_layernorm.weight"),
    One("norm3.weight", "post_attention_layernorm.weight"),
)


@dataclass(frozen=True)
class Variant:
    """What sets one member of the family apart.

    Attributes:
        qkv_bias: Q/K/V projections carry biases (Qwen2) whatever config.json says.
        sliding: the family has a sliding window (``sliding_window``); ``sliding_switch``
            names the switch where there is one (Qwen2's ``use_sliding_window``), and
            ``window_layers`` the key of the first local layer where not every layer is local
            (Qwen2's ``max_window_layers``: layers from that index on).
    """

    qkv_bias: bool = False
    sliding: bool = False
    sliding_switch: str | None = None
    window_layers: str | None = None


VARIANTS = {
    "llama": Variant(),
    "mistral": Variant(sliding=True),
    "qwen2": Variant(
        qkv_bias=True,
        sliding=True,
        sliding_switch="use_sliding_window",
        window_layers="max_window_layers",
    ),
}

ROPE_TYPES = {"default": "none", "llama3": "llama3", "linear": "linear"}


def rope_fields(hf: dict, head_dim: int, where: Path) -> dict[str, Any]:
    """Rotary settings from ``rope_parameters`` (transformers 5) or ``rope_theta`` and
    ``rope_scaling`` (older folders); a scaling attnviz does not compute is refused."""
    params = dict(hf.get("rope_parameters") or {})
    legacy = hf.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(legacy, dict):
        raise InteropError(f"{where}/config.json: rope_parameters must be an object")
    params = {**legacy, **params}
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise InteropError(
            f"{where}: rotary scaling {str(kind)[:40]!r} is not supported "
            f"(attnviz computes {', '.join(ROPE_TYPES)})"
        )
    fields: dict[str, Any] = dict(positions="rotary", rope_theta=float(theta))
    fields["rope_scaling"] = ROPE_TYPES[kind]
    if kind != "default":
        fields["rope_factor"] = float(params.get("factor", 1.0))
    if kind == "llama3":
        fields["rope_low_freq_factor"] = float(params.get("low_freq_factor", 1.0))
        fields["rope_high_freq_factor"] = float(params.get("high_freq_factor", 4.0))
        fields["rope_original_max_len"] = int(params.get("original_max_position_embeddings", 8192))
    partial = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        fields["rotary_dim"] = int(head_dim * float(partial))
    return fields


def config(
    hf: dict, where: Path, tensors: dict[str, Tensor], ids: dict[str, int]
) -> dict[str, Any]:
    """config.json -> :class:`ModelConfig` fields of a Llama, Mistral or Qwen2 folder."""
    variant = VARIANTS[hf["model_type"]]
    d, heads = int_of(hf, "hidden_size", where), int_of(hf, "num_attention_heads", where)
    head_dim = opt_int(hf, "head_dim", d // heads, where)
    attention_bias, mlp_bias = bool(hf.get("attention_bias")), bool(hf.get("mlp_bias"))
    if attention_bias != mlp_bias:
        raise InteropError(
            f"{where}: attention_bias={attention_bias} with mlp_bias={mlp_bias} is not supported"
        )
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if hf.get(key) is not None:
            raise InteropError(f"{where}: soft-capping ({key}) is not supported")
    n = int_of(hf, "num_hidden_layers", where)
    return dict(
        **rms_stack(hf, where, heads, head_dim, hf.get("hidden_act", "silu")),
        bias=attention_bias,
        qkv_bias=True if variant.qkv_bias else None,
        output_bias=False,
        scale_embeddings=False,
        max_len=opt_int(hf, "max_position_embeddings", 2048, where),
        **window_fields(hf, variant, n, where),
        **rope_fields(hf, head_dim, where),
    )


def rms_stack(hf: dict, where: Path, heads: int, head_dim: int, act: Any) -> dict[str, Any]:
    """What every pre-norm RMS decoder-only family (Llama, Mistral, Qwen2, Gemma 3) reads
    alike: sizes, grouped-query heads, the gated feed-forward and its activation, the norms."""
    return dict(
        d_model=int_of(hf, "hidden_size", where),
        n_heads=heads,
        n_kv_heads=opt_int(hf, "num_key_value_heads", heads, where),
        d_head=head_dim,
        n_encoder_layers=0,
        n_decoder_layers=int_of(hf, "num_hidden_layers", where),
        d_ff=int_of(hf, "intermediate_size", where),
        activation=activation(act, where),
        gated_ff=True,
        norm="rms",
        norm_first=True,
        final_norm=True,
        layer_norm_eps=opt_float(hf, "rms_norm_eps", 1e-6, where),
    )


def window_fields(hf: dict, variant: Variant, n: int, where: Path) -> dict[str, Any]:
    """``sliding_window`` and ``layer_types`` of a Mistral or Qwen2 folder (none for Llama,
    nor where the folder's window is off), as transformers reads them."""
    window = hf.get("sliding_window")
    switched_on = variant.sliding_switch is None or bool(hf.get(variant.sliding_switch))
    if not variant.sliding or window is None or not switched_on:
        return {}
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise InteropError(f"{where}/config.json: sliding_window must be a positive integer")
    if variant.window_layers is None:  # every layer local (Mistral)
        return dict(sliding_window=window)
    types = hf.get("layer_types")
    if types is None:
        first_local = opt_int(hf, variant.window_layers, 28, where)
        types = ["sliding_attention" if i >= first_local else "full_attention" for i in range(n)]
    if (
        not isinstance(types, list)
        or len(types) != n
        or any(t not in ("sliding_attention", "full_attention") for t in types)
    ):
        raise InteropError(f"{where}/config.json: layer_types must name one type per layer ({n})")
    return dict(sliding_window=window, layer_types=tuple(types))


def table(cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """Layers and the final norm (token table and output matrix are common)."""
    return [One("decoder.norm.weight", "model.norm.weight"),
            *layers(LAYER, cfg.n_decoder_layers, "decoder.layers.", "model.layers.")]  # fmt: skip


for _model_type in VARIANTS:
    register(
        Family(
            model_type=_model_type,
            pad_id=None,
            eos_id=2,
            unk_id=0,
            start_is_pad=False,
            config=config,
            table=table,
            lm_keys=("lm_head.weight",),
            arch="decoder-only",
            embed_keys=("model.embed_tokens.weight",),
        )
    )
