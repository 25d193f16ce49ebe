"""Gemma 3 text models (``Gemma3ForCausalLM``, ``model_type`` ``gemma3_text``).

Decoder-only, like Llama, with Gemma's own parts, each a :class:`ModelConfig` field: local
(sliding-window) and global layers by ``layer_types`` (or the older ``sliding_window_pattern``:
every N-th layer global), a rotary base per layer type (``rope_parameters`` per type in
transformers 5, or ``rope_theta`` / ``rope_local_base_freq`` / ``rope_scaling``; a scaling
applies to the global layers only), QK-norm, four norms per layer (a norm before and after
each sublayer), RMSNorms scaling by ``1 + weight`` in float32, the sqrt(D) embedding scale
rounded to the table's dtype, scores scaled by ``query_pre_attn_scalar ** -0.5``, GeGLU with
the tanh GELU, tied embeddings. Soft-capping and bidirectional attention are refused.

The multimodal wrapper (``model_type`` ``gemma3``, ``Gemma3ForConditionalGeneration``) is not
opened: its text model sits under ``text_config`` beside a vision tower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import LAYER_TYPES, ModelConfig
from ...core.errors import InteropError
from .common import int_of, opt_float, opt_int
from .llama import rms_stack, rope_fields
from .mapping import Attention, Linear, One, Rule, layers
from .registry import Family, register

#: one layer: ours under ``decoder.layers.N.``, theirs under ``model.layers.N.``
LAYER = (
    Attention("self_attn.", "self_attn.", ("q_proj", "k_proj", "v_proj", "o_proj")),
    One("self_attn.q_norm.weight", "self_attn.q_norm.weight"),
    One("self_attn.k_norm.weight", "self_attn.k_norm.weight"),
    Linear("ff.linear1", "mlp.gate_proj"),
    Linear("ff.gate", "mlp.up_proj"),
    Linear("ff.linear2", "mlp.down_proj"),
    One("norm1.weight", "input_layernorm.weight"),
    One("post_norm1.weight", "post_attention_layernorm.weight"),
    One("norm3.weight", "pre_feedforward_layernorm.weight"),
    One("post_norm3.weight", "post_feedforward_layernorm.weight"),
)

#: transformers' defaults (``Gemma3TextConfig.default_theta``)
GLOBAL_THETA, LOCAL_THETA = 1_000_000.0, 10_000.0


def layer_types(hf: dict, n: int, where: Path) -> tuple[str, ...]:
    """Per layer ``"sliding_attention"`` or ``"full_attention"``: ``layer_types``, else every
    ``sliding_window_pattern``-th layer global (default 6, as transformers reads it)."""
    types = hf.get("layer_types")
    if types is None:
        pattern = opt_int(hf, "sliding_window_pattern", 6, where)
        if pattern < 1:
            raise InteropError(f"{where}/config.json: sliding_window_pattern must be positive")
        return tuple(
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)
        )
    if not isinstance(types, list) or len(types) != n or any(t not in LAYER_TYPES for t in types):
        raise InteropError(
            f"{where}/config.json: layer_types must list one of {LAYER_TYPES} per layer ({n})"
        )
    return tuple(types)


def rope_per_type(hf: dict, where: Path) -> tuple[dict, dict]:
    """``(global, local)`` rotary settings, each ``{"rope_theta", "rope_type", ...}``."""
    params = hf.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise InteropError(f"{where}/config.json: rope_parameters must be an object")
    if params and set(params) <= set(LAYER_TYPES):  # transformers 5: one entry per type
        full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
    else:  # older folders: one set for the global layers, rope_local_base_freq for the local
        legacy = hf.get("rope_scaling") or {}
        if not isinstance(legacy, dict):
            raise InteropError(f"{where}/config.json: rope_scaling must be an object")
        full, local = {**legacy, **(params or {})}, {}
    if not isinstance(full, dict) or not isinstance(local, dict):
        raise InteropError(f"{where}/config.json: rope_parameters per layer type must be objects")
    full = {"rope_theta": hf.get("rope_theta", GLOBAL_THETA), **full}
    local = {"rope_theta": hf.get("rope_local_base_freq", LOCAL_THETA), **local}
    kind = local.get("rope_type", local.get("type", "default"))
    if kind != "default":
        raise InteropError(
            f"{where}: rotary scaling {str(kind)[:40]!r} on the sliding layers is not supported"
        )
    return full, local


def config(
    hf: dict, where: Path, tensors: dict[str, Tensor], ids: dict[str, int]
) -> dict[str, Any]:
    """config.json -> :class:`ModelConfig` fields of a Gemma 3 text folder."""
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if hf.get(key) is not None:
            raise InteropError(f"{where}: soft-capping ({key}) is not supported")
    if hf.get("use_bidirectional_attention"):
        raise InteropError(f"{where}: use_bidirectional_attention is not supported")
    if hf.get("attention_bias"):
        raise InteropError(f"{where}: attention_bias is not supported")
    heads = int_of(hf, "num_attention_heads", where)
    head_dim = opt_int(hf, "head_dim", 256, where)
    n = int_of(hf, "num_hidden_layers", where)
    types = layer_types(hf, n, where)
    window = hf.get("sliding_window")
    local_layers = "sliding_attention" in types
    if local_layers and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise InteropError(f"{where}/config.json: sliding_window must be a positive integer")
    full, local = rope_per_type(hf, where)
    rope = rope_fields({"rope_parameters": full}, head_dim, where)
    if rope.get("rotary_dim") is not None:
        raise InteropError(f"{where}: partial rotary is not supported for Gemma 3")
    local_theta = local["rope_theta"]
    if isinstance(local_theta, bool) or not isinstance(local_theta, int | float):
        raise InteropError(f"{where}/config.json: the sliding layers' rope_theta must be a number")
    act = hf.get("hidden_activation", hf.get("hidden_act", "gelu_pytorch_tanh"))
    return dict(
        **rms_stack(hf, where, heads, head_dim, act),
        bias=False,
        output_bias=False,
        scale_embeddings=True,
        embed_scale_in_dtype=True,
        max_len=opt_int(hf, "max_position_embeddings", 131_072, where),
        sliding_window=window if local_layers else None,
        layer_types=types,
        rope_local_theta=float(local_theta),
        qk_norm=True,
        sandwich_norm=True,
        norm_offset=1.0,
        query_pre_attn_scalar=opt_float(hf, "query_pre_attn_scalar", 256.0, where),
        **rope,
    )


def table(cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """Layers and the final norm (token table and output matrix are common)."""
    return [One("decoder.norm.weight", "model.norm.weight"),
            *layers(LAYER, cfg.n_decoder_layers, "decoder.layers.", "model.layers.")]  # fmt: skip


register(
    Family(
        model_type="gemma3_text",
        pad_id=0,
        eos_id=1,
        unk_id=3,
        start_is_pad=False,
        config=config,
        table=table,
        lm_keys=("lm_head.weight",),
        arch="decoder-only",
        embed_keys=("model.embed_tokens.weight",),
    )
)
