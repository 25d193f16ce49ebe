"""T5 (v1.0 and v1.1 / Flan-T5): pre-norm RMS norms, relative position buckets (one bias
table per stack), no biases, unscaled attention; v1.1 has a gated feed-forward and its own
output matrix. The decoder starts from <pad>."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from .common import activation, int_of, opt_float, opt_int
from .mapping import Attention, Linear, One, Rule, layers
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


T5_QKVO = ("q", "k", "v", "o")


def layer_rules(decoder: bool, gated: bool) -> tuple[Rule, ...]:
    """One T5 block: ours <-> theirs under ``<stack>.layers.N.`` / ``<stack>.block.N.``
    (sublayer 0 self-attention, 1 cross-attention in the decoder, then the feed-forward)."""
    rules: tuple[Rule, ...] = (
        Attention("self_attn.", "layer.0.SelfAttention.", T5_QKVO),
        Linear("norm1", "layer.0.layer_norm"),
    )
    if decoder:
        rules += (
            Attention("cross_attn.", "layer.1.EncDecAttention.", T5_QKVO),
            Linear("norm2", "layer.1.layer_norm"),
        )
    ff = 2 if decoder else 1
    dense = f"layer.{ff}.DenseReluDense."
    if gated:
        rules += (Linear("ff.linear1", f"{dense}wi_0"), Linear("ff.gate", f"{dense}wi_1"))
    else:
        rules += (Linear("ff.linear1", f"{dense}wi"),)
    return (
        *rules,
        Linear("ff.linear2", f"{dense}wo"),
        Linear(f"norm{ff + 1}", f"layer.{ff}.layer_norm"),
    )


def table(cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """Blocks, each stack's final RMS norm and its relative position bias (kept in block 0)."""
    rules: list[Rule] = []
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        layer = layer_rules(stack == "decoder", cfg.gated_ff)
        rules += layers(layer, n, f"{stack}.layers.", f"{stack}.block.")
        rules += [
            Linear(f"{stack}.norm", f"{stack}.final_layer_norm"),
            One(
                f"{stack}.position_bias.embedding.weight",
                f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            ),
        ]
    return rules


T5 = register(
    Family(
        model_type="t5",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        start_is_pad=True,
        config=config,
        table=table,
        embed_prefix="",
        lm_keys=("lm_head.weight",),
    )
)
