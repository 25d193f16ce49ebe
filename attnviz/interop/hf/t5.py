"""T5 (v1.0 and v1.1 / Flan-T5): pre-norm RMS norms, relative position buckets (one bias
table per stack), no biases, unscaled attention; v1.1 has a gated feed-forward and its own
output matrix. The decoder starts from <pad>."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from .common import (
    Source,
    activation,
    attention,
    int_of,
    linear,
    opt_float,
    opt_int,
    unattention,
    unlinear,
)
from .registry import Family, register


def config(
    hf: dict, where: Path, tensors: dict[str, Tensor], ids: dict[str, int]
) -> dict[str, Any]:
    """config.json -> :class:`ModelConfig` fields: pre-norm RMS norms, relative position
    buckets, no biases, unscaled attention, gated or plain feed-forward."""
    proj = str(hf.get("feed_forward_proj", "relu"))
    gated = proj.startswith("gated-")
    act = hf.get("dense_act_fn") or proj.split("-")[-1]
    if gated and act == "gelu" and "dense_act_fn" not in hf:
        act = "gelu_new"  # transformers reads "gated-gelu" as the tanh approximation
    n_layers = int_of(hf, "num_layers", where)
    if "scale_decoder_outputs" in hf:  # transformers >= 5 writes it
        scale_out = bool(hf["scale_decoder_outputs"])
    else:  # 4.x: T5 v1.1 folders say tie_word_embeddings: false and carry their own lm_head
        scale_out = hf.get("tie_word_embeddings", True) is not False
    return dict(
        d_model=int_of(hf, "d_model", where),
        n_heads=int_of(hf, "num_heads", where),
        d_head=int_of(hf, "d_kv", where),
        n_encoder_layers=n_layers,
        n_decoder_layers=opt_int(hf, "num_decoder_layers", n_layers, where) or n_layers,
        d_ff=int_of(hf, "d_ff", where),
        activation=activation(act, where),
        gated_ff=gated,
        norm_first=True,
        final_norm=True,
        norm="rms",
        layer_norm_eps=opt_float(hf, "layer_norm_epsilon", 1e-6, where),
        bias=False,
        scale_attention=False,
        positions="relative",
        relative_buckets=opt_int(hf, "relative_attention_num_buckets", 32, where),
        relative_max_distance=opt_int(hf, "relative_attention_max_distance", 128, where),
        scale_embeddings=False,
        output_bias=False,
        scale_decoder_output=scale_out,
        max_len=max(opt_int(hf, "n_positions", 0, where), 1024),  # relative: no hard limit
    )


def weights(src: Source, cfg: ModelConfig) -> dict[str, Tensor]:
    """Blocks, RMS norms and each stack's relative position bias -> our state dict."""
    qkvo = ("q", "k", "v", "o")
    ours: dict[str, Tensor] = {}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            p, o = f"{stack}.block.{i}.layer.", f"{stack}.layers.{i}."
            ours |= attention(src, f"{p}0.SelfAttention.", f"{o}self_attn.", qkvo)
            ours |= linear(src, f"{p}0.layer_norm", f"{o}norm1")
            ff = 1
            if stack == "decoder":
                ours |= attention(src, f"{p}1.EncDecAttention.", f"{o}cross_attn.", qkvo)
                ours |= linear(src, f"{p}1.layer_norm", f"{o}norm2")
                ff = 2
            dense = f"{p}{ff}.DenseReluDense."
            if cfg.gated_ff:
                ours |= linear(src, f"{dense}wi_0", f"{o}ff.linear1")
                ours |= linear(src, f"{dense}wi_1", f"{o}ff.gate")
            else:
                ours |= linear(src, f"{dense}wi", f"{o}ff.linear1")
            ours |= linear(src, f"{dense}wo", f"{o}ff.linear2")
            ours |= linear(src, f"{p}{ff}.layer_norm", f"{o}norm{ff + 1}")
        ours |= linear(src, f"{stack}.final_layer_norm", f"{stack}.norm")
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ours[f"{stack}.position_bias.embedding.weight"] = src.take(bias)
    return ours


def export_weights(ours: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The reverse of :func:`weights`: our state dict -> T5's blocks, norms and biases."""
    qkvo = ("q", "k", "v", "o")
    hf: dict[str, Tensor] = {}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            p, o = f"{stack}.block.{i}.layer.", f"{stack}.layers.{i}."
            hf |= unattention(ours, f"{o}self_attn.", f"{p}0.SelfAttention.", qkvo)
            hf |= unlinear(ours, f"{o}norm1", f"{p}0.layer_norm")
            ff = 1
            if stack == "decoder":
                hf |= unattention(ours, f"{o}cross_attn.", f"{p}1.EncDecAttention.", qkvo)
                hf |= unlinear(ours, f"{o}norm2", f"{p}1.layer_norm")
                ff = 2
            dense = f"{p}{ff}.DenseReluDense."
            if cfg.gated_ff:
                hf |= unlinear(ours, f"{o}ff.linear1", f"{dense}wi_0")
                hf |= unlinear(ours, f"{o}ff.gate", f"{dense}wi_1")
            else:
                hf |= unlinear(ours, f"{o}ff.linear1", f"{dense}wi")
            hf |= unlinear(ours, f"{o}ff.linear2", f"{dense}wo")
            hf |= unlinear(ours, f"{o}norm{ff + 1}", f"{p}{ff}.layer_norm")
        hf |= unlinear(ours, f"{stack}.norm", f"{stack}.final_layer_norm")
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        hf[bias] = ours[f"{stack}.position_bias.embedding.weight"]
    return hf


T5 = register(
    Family(
        model_type="t5",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        start_is_pad=True,
        config=config,
        weights=weights,
        embed_prefix="",
        lm_keys=("lm_head.weight",),
        export=export_weights,
    )
)
