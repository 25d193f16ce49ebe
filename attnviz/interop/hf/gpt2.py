"""GPT-2: decoder-only, pre-norm LayerNorms with a final one, learned positions, tanh GELU,
the output tied to the token table. Its linears are ``Conv1D`` (weight ``[in, out]``), so
every matrix is transposed on import; ``c_attn`` stacks Q, K and V as our ``in_proj`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from .common import activation, int_of, opt_float, opt_int
from .mapping import Dropped, Linear, One, Rule, layers
from .registry import Family, register


def prefix(names: set[str] | None) -> str:
    """``transformer.`` (GPT2LMHeadModel, as save_pretrained writes it, and what export
    writes) or none (a GPT2Model folder)."""
    return "" if names is not None and "transformer.wte.weight" not in names else "transformer."


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


#: one block: ours under ``decoder.layers.N.``, theirs under ``h.N.``; every matrix is a
#: ``Conv1D`` (transposed both ways), ``c_attn`` is q, k, v stacked as our ``in_proj``
LAYER = (
    Linear("self_attn.in_proj", "attn.c_attn", conv1d=True),
    Linear("self_attn.out_proj", "attn.c_proj", conv1d=True),
    Linear("ff.linear1", "mlp.c_fc", conv1d=True),
    Linear("ff.linear2", "mlp.c_proj", conv1d=True),
    Linear("norm1", "ln_1"),
    Linear("norm3", "ln_2"),
    Dropped("", "attn.bias"),  # older folders keep the causal mask (a buffer, not a weight)
    Dropped("", "attn.masked_bias"),
)


def table(cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """Blocks, the final norm and the learned positions (token table and output matrix are
    common)."""
    p = prefix(names)
    return [
        One("decoder.pos_embed.weight", f"{p}wpe.weight"),
        Linear("decoder.norm", f"{p}ln_f"),
        *layers(LAYER, cfg.n_decoder_layers, "decoder.layers.", f"{p}h."),
    ]


GPT2 = register(
    Family(
        model_type="gpt2",
        pad_id=None,
        eos_id=50256,
        unk_id=50256,
        start_is_pad=False,
        config=config,
        table=table,
        lm_keys=("lm_head.weight",),
        arch="decoder-only",
        embed_keys=("transformer.wte.weight", "wte.weight"),
    )
)
