"""Import models built on ``torch.nn.Transformer``.

The expected state dict is that of PyTorch's "Language Translation with nn.Transformer"
tutorial (``Seq2SeqTransformer``)::

    transformer.encoder.layers.N.{self_attn.in_proj_weight, self_attn.out_proj.weight,
                                  linear1, linear2, norm1, norm2}
    transformer.decoder.layers.N.{self_attn, multihead_attn, linear1, linear2, norm1..3}
    transformer.{encoder,decoder}.norm            (nn.Transformer's final LayerNorms)
    src_tok_emb.embedding.weight, tgt_tok_emb.embedding.weight
    generator.weight, generator.bias
    positional_encoding.pos_embedding             ([max_len, 1, D], sinusoidal)

Sizes (vocabularies, width, depths, feed-forward width, max_len) are read off the shapes;
the head count, residual arrangement and activation are not in a state dict and are given.
The tutorial embeds with ``* sqrt(D)`` and adds the paper's sinusoidal table, exactly as
:class:`attnviz.Transformer` does, so logits match to float precision.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.errors import AttnvizError, CheckpointError, InteropError
from ..core.model import Transformer, sinusoidal_positions
from ..core.weights import build_model, unique_state_dict

# Tutorial names outside the nn.Transformer -> ours.
_OUTER = {
    "src_tok_emb.embedding.weight": "src_embed.weight",
    "tgt_tok_emb.embedding.weight": "tgt_embed.weight",
    "generator.weight": "generator.weight",
    "generator.bias": "generator.bias",
}
_POS = "positional_encoding.pos_embedding"
# Per-layer nn.Transformer names -> ours.
_LAYER = {
    "self_attn.in_proj_weight": "self_attn.in_proj_weight",
    "self_attn.in_proj_bias": "self_attn.in_proj_bias",
    "self_attn.out_proj.weight": "self_attn.out_proj.weight",
    "self_attn.out_proj.bias": "self_attn.out_proj.bias",
    "multihead_attn.in_proj_weight": "cross_attn.in_proj_weight",
    "multihead_attn.in_proj_bias": "cross_attn.in_proj_bias",
    "multihead_attn.out_proj.weight": "cross_attn.out_proj.weight",
    "multihead_attn.out_proj.bias": "cross_attn.out_proj.bias",
    "linear1.weight": "ff.linear1.weight",
    "linear1.bias": "ff.linear1.bias",
    "linear2.weight": "ff.linear2.weight",
    "linear2.bias": "ff.linear2.bias",
    **{f"norm{i}.{p}": f"norm{i}.{p}" for i in (1, 2, 3) for p in ("weight", "bias")},
}
_LAYER_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")


def _map_key(key: str, prefix: str) -> str | None:
    """Our name for a tutorial key, or None when it is not one we know."""
    if key in _OUTER:
        return _OUTER[key]
    if not key.startswith(prefix):
        return None
    inner = key[len(prefix) :]
    if inner in (
        "encoder.norm.weight",
        "encoder.norm.bias",
        "decoder.norm.weight",
        "decoder.norm.bias",
    ):
        return inner
    m = _LAYER_KEY.match(inner)
    if m and m.group(3) in _LAYER:
        stack, index, rest = m.groups()
        if stack == "encoder" and rest.startswith(("multihead_attn", "norm3")):
            return None
        return f"{stack}.layers.{index}.{_LAYER[rest]}"
    return None


def _find_prefix(keys: list[str]) -> str:
    for key in keys:
        if key.endswith("encoder.layers.0.self_attn.in_proj_weight"):
            return key[: -len("encoder.layers.0.self_attn.in_proj_weight")]
    raise InteropError(
        "no 'encoder.layers.0.self_attn.in_proj_weight' key: this is not the state dict of a "
        "torch.nn.Transformer-based model"
    )


def _count_layers(keys: list[str], prefix: str, stack: str) -> int:
    pat = re.compile(rf"^{re.escape(prefix)}{stack}\.layers\.(\d+)\.")
    found = {int(m.group(1)) for k in keys if (m := pat.match(k))}
    return max(found) + 1 if found else 0


def from_torch_state_dict(
    state_dict: Mapping[str, Tensor],
    n_heads: int,
    norm_first: bool = False,
    activation: str = "relu",
    pad_id: int = 1,
    bos_id: int = 2,
    eos_id: int = 3,
    unk_id: int = 0,
    dropout: float = 0.1,
    layer_norm_eps: float = 1e-5,
) -> Transformer:
    """Build an :class:`attnviz.Transformer` from a ``torch.nn.Transformer``-based state dict.

    Args:
        state_dict: e.g. ``Seq2SeqTransformer(...).state_dict()`` of the PyTorch tutorial.
        n_heads: ``nhead`` the model was built with (must divide the width).
        norm_first: ``norm_first`` the model was built with.
        activation: ``"relu"`` or ``"gelu"``, as given to ``nn.Transformer``.
        pad_id, bos_id, eos_id, unk_id: the special ids of the model's vocabulary (defaults:
            the tutorial's ``UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3``).
        dropout, layer_norm_eps: as given to ``nn.Transformer``.
    Returns:
        The model in eval mode, on CPU, in float32.
    Raises:
        InteropError: unknown or missing keys (listed), or shapes that do not fit together.
    """
    if not isinstance(state_dict, Mapping) or not all(
        isinstance(v, Tensor) for v in state_dict.values()
    ):
        raise InteropError("state_dict must map parameter names to tensors")
    keys = list(state_dict)
    prefix = _find_prefix(keys)
    unknown = sorted(k for k in keys if k != _POS and _map_key(k, prefix) is None)
    if unknown:
        raise InteropError(f"unknown keys in state dict: {', '.join(unknown)}")
    ff_key = f"{prefix}encoder.layers.0.linear1.weight"  # gives d_ff
    absent = [k for k in (*_OUTER, _POS, ff_key) if k not in state_dict]
    if absent:
        raise InteropError(f"missing keys in state dict: {', '.join(absent)}")

    src_emb = state_dict["src_tok_emb.embedding.weight"]
    tgt_emb = state_dict["tgt_tok_emb.embedding.weight"]
    pos = state_dict[_POS].detach().float().cpu()
    pos_atol = 1e-5 if state_dict[_POS].dtype == torch.float32 else 1e-2  # half precision rounds
    if pos.dim() == 3:  # the tutorial's [max_len, 1, D]
        pos = pos[:, 0]
    d_model = src_emb.shape[1]
    ff_w = state_dict[ff_key]
    final_norms = [f"{prefix}{stack}.norm.weight" in state_dict for stack in ("encoder", "decoder")]
    if final_norms[0] != final_norms[1]:
        raise InteropError(
            "only one of encoder.norm and decoder.norm is present; attnviz models have a final "
            "LayerNorm after both stacks or after neither"
        )
    try:
        config = ModelConfig(
            src_vocab_size=src_emb.shape[0],
            tgt_vocab_size=tgt_emb.shape[0],
            d_model=d_model,
            n_heads=n_heads,
            n_encoder_layers=_count_layers(keys, prefix, "encoder"),
            n_decoder_layers=_count_layers(keys, prefix, "decoder"),
            d_ff=ff_w.shape[0],
            dropout=dropout,
            activation=activation,
            norm_first=norm_first,
            final_norm=final_norms[0],
            max_len=pos.shape[0],
            pad_id=pad_id,
            bos_id=bos_id,
            eos_id=eos_id,
            unk_id=unk_id,
            layer_norm_eps=layer_norm_eps,
        )
    except AttnvizError as exc:
        raise InteropError(f"the state dict does not give a valid model: {exc}") from None
    if tuple(pos.shape) != (config.max_len, d_model) or not torch.allclose(
        pos, sinusoidal_positions(config.max_len, d_model), atol=pos_atol
    ):
        raise InteropError(
            f"{_POS} is not the sinusoidal table of the paper (shape {list(state_dict[_POS].shape)}); "
            "learned positional embeddings are not supported"
        )

    with torch.device("meta"):  # names and shapes before anything is allocated
        expected = unique_state_dict(Transformer(config))
    ours = {_map_key(k, prefix): v for k, v in state_dict.items() if k != _POS}
    missing = sorted(set(expected) - set(ours))
    if missing:
        raise InteropError(f"missing keys in state dict (our names): {', '.join(missing)}")
    wrong = [
        f"{k}: {list(v.shape)} != {list(expected[k].shape)}"
        for k, v in ours.items()
        if tuple(v.shape) != tuple(expected[k].shape)
    ]
    if wrong:
        raise InteropError(f"shapes do not match the inferred config: {'; '.join(wrong)}")
    try:  # the one weight-loading path: shapes on the meta device, load, NaN/inf check
        return build_model(config, {k: v.float() for k, v in ours.items()}, "the state dict")
    except CheckpointError as exc:
        raise InteropError(str(exc)) from None
