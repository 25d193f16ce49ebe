"""The layout BART, mBART, Marian, Pegasus and FSMT share (``model.encoder.layers.N.fc1`` ...):
one config mapping and one weight mapping, with each family's norm and position flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from ...core.positions import position_table
from .common import Source, activation, int_of, linear, unattention, unlinear
from .common import attention as attention_weights

#: the names of the output matrix in this layout
LM_KEYS = ("lm_head.weight", "model.decoder.output_projection.weight")


def config(
    hf: dict,
    where: Path,
    tensors: dict[str, Tensor],
    *,
    pre_norm: bool,
    embed_norm: bool,
    positions: str,
    position_offset: int,
    scale_embedding: bool,
) -> dict[str, Any]:
    """config.json -> :class:`ModelConfig` fields, with the family's flags.

    Args:
        pre_norm: norms before each sublayer and a final norm per stack (mBART, Pegasus).
        embed_norm: a norm after the embeddings (BART, mBART).
        positions: ``"learned"``, ``"sinusoidal_split"`` (Marian, Pegasus), ``"fairseq"``.
        position_offset: the first position's row in the table (BART's learned table: 2).
        scale_embedding: the default of config.json's ``scale_embedding``.
    """
    heads = int_of(hf, "encoder_attention_heads", where)
    d_ff = int_of(hf, "encoder_ffn_dim", where)
    for key, value in (("decoder_attention_heads", heads), ("decoder_ffn_dim", d_ff)):
        if hf.get(key, value) != value:
            raise InteropError(
                f"{where}: {key}={str(hf[key])[:40]} differs from the encoder's {value}; "
                "attnviz models use one head count and one feed-forward width"
            )
    return dict(
        d_model=int_of(hf, "d_model", where),
        n_heads=heads,
        n_encoder_layers=int_of(hf, "encoder_layers", where),
        n_decoder_layers=int_of(hf, "decoder_layers", where),
        d_ff=d_ff,
        activation=activation(hf.get("activation_function", "gelu"), where),
        norm_first=pre_norm,
        final_norm=pre_norm,
        embed_norm=embed_norm,
        positions=positions,
        position_offset=position_offset,
        scale_embeddings=bool(hf.get("scale_embedding", scale_embedding)),
        max_len=int_of(hf, "max_position_embeddings", where),
        output_bias="final_logits_bias" in tensors,
    )


def layer_weights(src: Source, stack: str, n: int, zero_key: bool = False) -> dict[str, Tensor]:
    """The ``n`` layers of ``stack`` (``"encoder"`` / ``"decoder"``) in this layout: self- and
    (decoder) cross-attention, their norms, the feed-forward and its norm (Whisper's too;
    ``zero_key``: its key projections have no bias)."""
    qkvo = ("q_proj", "k_proj", "v_proj", "out_proj")
    ours: dict[str, Tensor] = {}
    for i in range(n):
        p, o = f"model.{stack}.layers.{i}.", f"{stack}.layers.{i}."
        ours |= attention_weights(src, f"{p}self_attn.", f"{o}self_attn.", qkvo, zero_key)
        ours |= linear(src, f"{p}self_attn_layer_norm", f"{o}norm1")
        if stack == "decoder":
            ours |= attention_weights(
                src, f"{p}encoder_attn.", f"{o}cross_attn.", qkvo, zero_key
            )
            ours |= linear(src, f"{p}encoder_attn_layer_norm", f"{o}norm2")
        ours |= linear(src, f"{p}fc1", f"{o}ff.linear1")
        ours |= linear(src, f"{p}fc2", f"{o}ff.linear2")
        last = "norm3" if stack == "decoder" else "norm2"
        ours |= linear(src, f"{p}final_layer_norm", f"{o}{last}")
    return ours


def weights(src: Source, cfg: ModelConfig) -> dict[str, Tensor]:
    """Layers, norms, learned positions and the logits bias -> our state dict."""
    ours: dict[str, Tensor] = {}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        hf_stack = f"model.{stack}."
        ours |= layer_weights(src, stack, n)
        if cfg.embed_norm:
            ours |= linear(src, f"{hf_stack}layernorm_embedding", f"{stack}.embed_norm")
        if cfg.final_norm:
            ours |= linear(src, f"{hf_stack}layer_norm", f"{stack}.norm")
        if cfg.positions == "learned":
            ours[f"{stack}.pos_embed.weight"] = src.take(f"{hf_stack}embed_positions.weight")
    if cfg.output_bias:
        ours["generator.bias"] = src.take("final_logits_bias").reshape(-1)
    return ours


def export_weights(ours: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The reverse of :func:`weights`: our state dict -> this layout's tensors, with the
    computed position tables the model uses (transformers would otherwise initialise them)."""
    qkvo = ("q_proj", "k_proj", "v_proj", "out_proj")
    table = position_table(cfg)  # [positions, D]: sinusoids, computed as the model does
    hf: dict[str, Tensor] = {}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        hf_stack = f"model.{stack}."
        for i in range(n):
            p, o = f"{hf_stack}layers.{i}.", f"{stack}.layers.{i}."
            hf |= unattention(ours, f"{o}self_attn.", f"{p}self_attn.", qkvo)
            hf |= unlinear(ours, f"{o}norm1", f"{p}self_attn_layer_norm")
            if stack == "decoder":
                hf |= unattention(ours, f"{o}cross_attn.", f"{p}encoder_attn.", qkvo)
                hf |= unlinear(ours, f"{o}norm2", f"{p}encoder_attn_layer_norm")
            hf |= unlinear(ours, f"{o}ff.linear1", f"{p}fc1")
            hf |= unlinear(ours, f"{o}ff.linear2", f"{p}fc2")
            last = "norm3" if stack == "decoder" else "norm2"
            hf |= unlinear(ours, f"{o}{last}", f"{p}final_layer_norm")
        if cfg.embed_norm:
            hf |= unlinear(ours, f"{stack}.embed_norm", f"{hf_stack}layernorm_embedding")
        if cfg.final_norm:
            hf |= unlinear(ours, f"{stack}.norm", f"{hf_stack}layer_norm")
        if cfg.positions == "learned":
            hf[f"{hf_stack}embed_positions.weight"] = ours[f"{stack}.pos_embed.weight"]
        elif table is not None:
            hf[f"{hf_stack}embed_positions.weight"] = table
    if cfg.output_bias:
        hf["final_logits_bias"] = ours["generator.bias"].reshape(1, -1)
    return hf
