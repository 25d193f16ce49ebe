"""GPT-2: decoder-only, pre-norm LayerNorms with a final one, learned positions, tanh GELU,
the output tied to the token table. Its linears are ``Conv1D`` (weight ``[in, out]``), so
every matrix is transposed on import; ``c_attn`` stacks Q, K and V as our ``in_proj`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from .common import Source, activation, int_of, opt_float, opt_int
from .registry import Family, register


def _prefix(tensors: dict[str, Tensor]) -> str:
    """``transformer.`` (GPT2LMHeadModel, as save_pretrained writes it) or none (GPT2Model)."""
    return "transformer." if "transformer.wte.weight" in tensors else ""


def config(
    hf: dict, where: Path, tensors: dict[str, Tensor], ids: dict[str, int]
) -> dict[str, Any]:
    """config.json -> :class:`ModelConfig` fields; what GPT-2 variants add that attnviz does
    not follow is refused by name."""
    for key, neutral in (
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
        ("scale_attn_weights", True),
    ):
        if hf.get(key, neutral) != neutral:
            raise InteropError(f"{where}: GPT-2 with {key}={hf[key]!r} is not supported")
    d = int_of(hf, "n_embd", where)
    return dict(
        d_model=d,
        n_heads=int_of(hf, "n_head", where),
        n_encoder_layers=0,
        n_decoder_layers=int_of(hf, "n_layer", where),
        d_ff=opt_int(hf, "n_inner", 4 * d, where),
        activation=activation(hf.get("activation_function", "gelu_new"), where),
        norm_first=True,
        final_norm=True,
        layer_norm_eps=opt_float(hf, "layer_norm_epsilon", 1e-5, where),
        positions="learned",
        max_len=int_of(hf, "n_positions", where),
        scale_embeddings=False,
        output_bias=False,
    )


def weights(src: Source, cfg: ModelConfig) -> dict[str, Tensor]:
    """GPT-2's tensors -> our state dict (token table and output matrix are common)."""
    p = _prefix(src.tensors)
    out = {"decoder.pos_embed.weight": src.take(f"{p}wpe.weight")}
    for name, ours in (("ln_f", "decoder.norm"),):
        out[f"{ours}.weight"] = src.take(f"{p}{name}.weight")
        out[f"{ours}.bias"] = src.take(f"{p}{name}.bias")
    for i in range(cfg.n_decoder_layers):
        h, o = f"{p}h.{i}.", f"decoder.layers.{i}."
        for theirs, ours in (("attn.c_attn", "self_attn.in_proj"), ("attn.c_proj", "self_attn.out_proj"),
                             ("mlp.c_fc", "ff.linear1"), ("mlp.c_proj", "ff.linear2")):  # fmt: skip
            weight = src.take(f"{h}{theirs}.weight").T.contiguous()  # Conv1D [in, out] -> [out, in]
            sep = "_" if ours.endswith("in_proj") else "."
            out[f"{o}{ours}{sep}weight"] = weight
            out[f"{o}{ours}{sep}bias"] = src.take(f"{h}{theirs}.bias")
        for theirs, ours in (("ln_1", "norm1"), ("ln_2", "norm3")):
            out[f"{o}{ours}.weight"] = src.take(f"{h}{theirs}.weight")
            out[f"{o}{ours}.bias"] = src.take(f"{h}{theirs}.bias")
        for buffer in ("attn.bias", "attn.masked_bias"):  # older folders keep the causal mask
            if src.has(f"{h}{buffer}"):  # a buffer, not a weight (the biases are c_*.bias)
                src.take(f"{h}{buffer}")
    return out


GPT2 = register(
    Family(
        model_type="gpt2",
        pad_id=None,
        eos_id=50256,
        unk_id=50256,
        start_is_pad=False,
        config=config,
        weights=weights,
        lm_keys=("lm_head.weight",),
        arch="decoder-only",
        embed_keys=("transformer.wte.weight", "wte.weight"),
    )
)
