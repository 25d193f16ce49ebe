"""The layout BART, mBART, Marian, Pegasus and FSMT share (``model.encoder.layers.N.fc1`` ...):
one config mapping and one weight table (import and export), with each family's norm and
position flags."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from ...core.positions import position_table
from .common import activation, int_of
from .mapping import Attention, Computed, Linear, One, Rule, layers

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


#: one encoder layer of this layout: ours <-> theirs, under ``encoder.layers.N.`` /
#: ``model.encoder.layers.N.``
ENCODER_LAYER = (
    Attention("self_attn.", "self_attn."),
    Linear("norm1", "self_attn_layer_norm"),
    Linear("ff.linear1", "fc1"),
    Linear("ff.linear2", "fc2"),
    Linear("norm2", "final_layer_norm"),
)
#: one decoder layer: the same, with cross-attention and its norm
DECODER_LAYER = (
    Attention("self_attn.", "self_attn."),
    Linear("norm1", "self_attn_layer_norm"),
    Attention("cross_attn.", "encoder_attn."),
    Linear("norm2", "encoder_attn_layer_norm"),
    Linear("ff.linear1", "fc1"),
    Linear("ff.linear2", "fc2"),
    Linear("norm3", "final_layer_norm"),
)


def stack_layers(cfg: ModelConfig, zero_key: bool = False) -> list[Rule]:
    """Both stacks' layers in this layout (Whisper's too; ``zero_key``: its key projections
    have no bias)."""
    rules: list[Rule] = []
    for stack, layer, n in (("encoder", ENCODER_LAYER, cfg.n_encoder_layers),
                            ("decoder", DECODER_LAYER, cfg.n_decoder_layers)):  # fmt: skip
        if zero_key:
            layer = tuple(
                replace(r, zero_key=True) if isinstance(r, Attention) else r for r in layer
            )
        rules += layers(layer, n, f"{stack}.layers.", f"model.{stack}.layers.")
    return rules


def table(cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """Layers, norms, positions (learned, or computed: written on export so transformers does
    not initialise them) and the logits bias ``[1, V]`` (ours ``[V]``)."""
    rules = stack_layers(cfg)
    for stack in ("encoder", "decoder"):
        theirs = f"model.{stack}."
        if cfg.embed_norm:
            rules.append(Linear(f"{stack}.embed_norm", f"{theirs}layernorm_embedding"))
        if cfg.final_norm:
            rules.append(Linear(f"{stack}.norm", f"{theirs}layer_norm"))
        if cfg.positions == "learned":
            rules.append(One(f"{stack}.pos_embed.weight", f"{theirs}embed_positions.weight"))
        else:  # [positions, D]: sinusoids, computed as the model does
            rules.append(
                Computed("", f"{theirs}embed_positions.weight", partial(position_table, cfg))
            )
    if cfg.output_bias:
        rules.append(One("generator.bias", "final_logits_bias",
                         load=lambda t: t.reshape(-1), save=lambda t: t.reshape(1, -1)))  # fmt: skip
    return rules
