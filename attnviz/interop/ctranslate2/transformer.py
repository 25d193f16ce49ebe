"""CTranslate2's ``TransformerSpec`` (text encoder-decoders: Marian / opus-mt, OpenNMT-py,
OpenNMT-tf, fairseq, BART-likes converted by ``ctranslate2.converters``) -> our
:class:`~attnviz.ModelConfig` and state dict.

The table from CTranslate2's variable names to ours (``E``/``D`` = ``encoder``/``decoder``)::

    E/embeddings_0/weight                   src_embed.weight
    D/embeddings/weight                     tgt_embed.weight
    D/projection/{weight,bias}              generator.{weight,bias}
    {E,D}/position_encodings/encodings      our sinusoids, or {E,D}.pos_embed.weight (a file
                                            without the table: CTranslate2's sinusoids)
    {E,D}/layernorm_embedding/{gamma,beta}  {E,D}.embed_norm.{weight,bias}
    {E,D}/layer_norm/{gamma,beta}           {E,D}.norm.{weight,bias}   (pre-norm stacks)
    {E,D}/layer_N/self_attention/linear_0   {E,D}.layers.N.self_attn.in_proj_*  (q, k, v fused)
    {E,D}/layer_N/self_attention/linear_1   {E,D}.layers.N.self_attn.out_proj
    {E,D}/layer_N/self_attention/layer_norm {E,D}.layers.N.norm1
    D/layer_N/attention/linear_0 + linear_1 D.layers.N.cross_attn.in_proj_*  (q; k, v fused)
    D/layer_N/attention/linear_2            D.layers.N.cross_attn.out_proj
    D/layer_N/attention/layer_norm          D.layers.N.norm2
    {E,D}/layer_N/ffn/linear_0, linear_1    {E,D}.layers.N.ff.linear1, ff.linear2
    {E,D}/layer_N/ffn/linear_0_noact        {E,D}.layers.N.ff.gate  (GLU feed-forwards)
    {E,D}/layer_N/ffn/layer_norm            E.layers.N.norm2 / D.layers.N.norm3

plus scalars that say the rest (``num_heads``, ``pre_norm``, ``activation``,
``scale_embeddings``, ``start_from_zero_embedding``, ...). A variable or a flag this table
does not cover (relative positions, ALiBi, rotary, RMS norms, several source
embeddings, multi-query attention, ...) is refused in one line rather than ignored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...core.errors import InteropError
from ...core.memory import BYTES_PER_NUMBER, MEMORY_FRACTION, available_memory
from ...core.positions import half_sinusoids, sinusoidal_positions, split_sinusoidal_positions
from ..hf.common import Source
from .variables import (
    ACTIVATIONS,
    DECODER_LAYER_VARIABLES,
    ENCODER_LAYER_VARIABLES,
    count_layers,
    flag,
    linear,
    norm,
    put,
    scalar,
)

#: flags that must hold these values (what attnviz's Transformer computes)
_NEUTRAL_FLAGS = {
    "decoder/alibi": 0,
    "decoder/alibi_use_positive_positions": 0,
    "decoder/scale_alibi": 0,
    "encoder/multi_query_attention": 0,
    "encoder/embeddings_merge": None,  # meaningless with one source embedding
    "decoder/alignment_layer": None,  # which cross-attention CTranslate2 returns as alignment
    "decoder/alignment_heads": None,
}
#: rows of the position table built where the file carries none (CTranslate2 computes it)
COMPUTED_POSITIONS = 1024
#: copies of a position table alive while it is computed and compared (float64 temporaries)
TABLE_COPIES = 6


def computed_positions(rows: int, d_model: int) -> Tensor:
    """The sinusoids CTranslate2 computes where a file has no position table: position p
    (from 0) takes angles ``(p + 1) * 10000 ** (-i / (D/2 - 1))``, sines then cosines.

    Returns:
        ``[rows, D]`` float32.
    """
    return half_sinusoids(torch.arange(1, rows + 1), d_model)


def check_table(rows: int, d_model: int, where: Path, what: str) -> None:
    """Refuse to compute a ``[rows, d_model]`` position table this process has no memory for
    (its sizes come from the file: an empty table may claim 2^29 rows).

    Raises:
        InteropError: one line with the sizes and the budget.
    """
    needed = TABLE_COPIES * BYTES_PER_NUMBER * rows * max(d_model, 1)
    if needed > (256 << 20) and needed > available_memory() * MEMORY_FRACTION:
        raise InteropError(
            f"{where}: {what} of {rows:,} x {d_model:,} would need {needed / 2**30:.1f} GB, "
            "more than this process can use; the file's sizes are not a model's"
        )


def _positions(src: Source, where: Path, d_model: int) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Config fields and weights for the position tables (one per stack, maybe one tensor)."""
    tables = {
        stack: src.take(f"{stack}/position_encodings/encodings")
        for stack in ("encoder", "decoder")
        if src.has(f"{stack}/position_encodings/encodings")
    }
    if not tables:  # CTranslate2 computes them: loaded as a table, the numbers it uses
        check_table(COMPUTED_POSITIONS, d_model, where, "the computed position table")
        table = computed_positions(COMPUTED_POSITIONS, d_model)
        weights = {"encoder.pos_embed.weight": table, "decoder.pos_embed.weight": table.clone()}
        return {"positions": "learned", "max_len": COMPUTED_POSITIONS}, weights
    if len(tables) == 1:
        raise InteropError(f"{where}: only the {next(iter(tables))} has a position table")
    # a float16 / bfloat16 file holds our sinusoids rounded: compare within its precision
    atol = max(1e-4, torch.finfo(tables["encoder"].dtype).eps)
    enc, dec = tables["encoder"].float(), tables["decoder"].float()
    if enc.dim() != 2 or enc.shape != dec.shape or enc.shape[1] != d_model:
        raise InteropError(
            f"{where}: position tables {list(enc.shape)} and {list(dec.shape)} do not fit "
            f"d_model={d_model}"
        )
    rows = enc.shape[0]
    check_table(rows, d_model, where, "the position table")
    for kind, make in (("sinusoidal_split", split_sinusoidal_positions),
                       ("sinusoidal", sinusoidal_positions)):  # fmt: skip
        table = make(rows, d_model)
        if torch.allclose(enc, table, atol=atol) and torch.allclose(dec, table, atol=atol):
            return {"positions": kind, "max_len": rows}, {}
    weights = {"encoder.pos_embed.weight": enc, "decoder.pos_embed.weight": dec}
    return {"positions": "learned", "max_len": rows}, weights


def _scale_embeddings(src: Source, where: Path, d_model: int) -> bool:
    """CTranslate2's ``scale_embeddings`` (a flag: multiply by sqrt(D); or the factor)."""
    found = set()
    for stack in ("encoder", "decoder"):
        name = f"{stack}/scale_embeddings"
        t = src.take(name) if src.has(name) else torch.tensor(True)
        value = float(t.reshape(-1)[0]) if t.numel() == 1 else math.nan
        if not t.is_floating_point():
            found.add(bool(value))
        elif math.isclose(value, math.sqrt(d_model), rel_tol=1e-6):
            found.add(True)
        elif value == 1.0:
            found.add(False)
        else:
            raise InteropError(
                f"{where}: {name}={value:g} is neither 1 nor sqrt(d_model); attnviz scales "
                "token embeddings by sqrt(d_model) or not at all"
            )
    if len(found) > 1:
        raise InteropError(f"{where}: the encoder and decoder scale their embeddings differently")
    return found.pop()


def _same(values: dict[str, float | None], where: Path, what: str) -> float | None:
    distinct = {v for v in values.values() if v is not None}
    if len(distinct) > 1:
        shown = ", ".join(f"{k}={v:g}" for k, v in values.items() if v is not None)
        raise InteropError(f"{where}: attnviz models use one {what} for both stacks ({shown})")
    return distinct.pop() if distinct else None


def convert_transformer(
    tensors: dict[str, Tensor], where: Path, layer_norm_eps: float
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A ``TransformerSpec``'s variables -> ModelConfig fields (all but the vocabulary sizes
    and special ids) and our state dict (without the token embeddings and output matrix,
    which :func:`vocabulary_weights` returns, as the folder's vocabulary may add a row).

    Raises:
        InteropError: a flag or variable attnviz does not implement, or weights that
            disagree with one another.
    """
    src = Source(tensors, where)
    for name, neutral in _NEUTRAL_FLAGS.items():
        value = scalar(src, name)
        if neutral is not None and value is not None and value != neutral:
            raise InteropError(f"{where}: {name}={value:g} is not implemented in attnviz")
    heads = _same({s: scalar(src, f"{s}/num_heads") for s in ("encoder", "decoder")}, where,
                  "head count")  # fmt: skip
    pre_norm = _same({s: flag(src, f"{s}/pre_norm", 1) for s in ("encoder", "decoder")}, where,
                     "norm placement")  # fmt: skip
    act = _same({s: flag(src, f"{s}/activation", 0) for s in ("encoder", "decoder")}, where,
                "activation")  # fmt: skip
    if heads is None:
        raise InteropError(f"{where}: the weights lack encoder/num_heads")
    if int(act) not in ACTIVATIONS:
        raise InteropError(f"{where}: activation id {act:g} is not implemented in attnviz")
    start_from_zero = bool(flag(src, "decoder/start_from_zero_embedding", 0))
    n_enc = count_layers(tensors, "encoder", where, ENCODER_LAYER_VARIABLES)
    n_dec = count_layers(tensors, "decoder", where, DECODER_LAYER_VARIABLES)
    if not n_enc or not n_dec:
        raise InteropError(f"{where}: a TransformerSpec needs encoder and decoder layers")
    emb = src.tensors.get("decoder/embeddings/weight")
    if emb is None or emb.dim() != 2:
        raise InteropError(f"{where}: the weights lack decoder/embeddings/weight")
    d_model = int(emb.shape[1])
    if not d_model or not emb.shape[0]:
        raise InteropError(f"{where}: decoder/embeddings/weight {list(emb.shape)} is empty")
    ours: dict[str, Tensor] = {}
    biases: set[bool] = set()
    gates: set[bool] = set()
    for stack, n in (("encoder", n_enc), ("decoder", n_dec)):
        for i in range(n):
            p, o = f"{stack}/layer_{i}/", f"{stack}.layers.{i}."
            w, b = linear(src, f"{p}self_attention/linear_0")
            put(ours, f"{o}self_attn.in_proj", w, b)
            biases.add(b is not None)
            w, b = linear(src, f"{p}self_attention/linear_1")
            put(ours, f"{o}self_attn.out_proj", w, b)
            ours |= norm(src, f"{p}self_attention/layer_norm", f"{o}norm1")
            if stack == "decoder":
                (wq, bq), (wkv, bkv) = (linear(src, f"{p}attention/linear_{j}") for j in (0, 1))
                bias = None if bq is None or bkv is None else torch.cat([bq, bkv])
                put(ours, f"{o}cross_attn.in_proj", torch.cat([wq, wkv]), bias)
                put(ours, f"{o}cross_attn.out_proj", *linear(src, f"{p}attention/linear_2"))
                ours |= norm(src, f"{p}attention/layer_norm", f"{o}norm2")
            for j in (0, 1):
                w, b = linear(src, f"{p}ffn/linear_{j}")
                put(ours, f"{o}ff.linear{j + 1}", w, b)
                biases.add(b is not None)
            gates.add(src.has(f"{p}ffn/linear_0_noact/weight"))
            if src.has(f"{p}ffn/linear_0_noact/weight"):  # GLU: act(linear_0 x) * linear_0_noact x
                put(ours, f"{o}ff.gate", *linear(src, f"{p}ffn/linear_0_noact"))
            ours |= norm(
                src, f"{p}ffn/layer_norm", f"{o}{'norm3' if stack == 'decoder' else 'norm2'}"
            )
    if len(biases) > 1:
        raise InteropError(f"{where}: some linears have biases and some do not")
    if len(gates) > 1:
        raise InteropError(f"{where}: some feed-forwards are gated (GLU) and some are not")
    finals = {s: src.has(f"{s}/layer_norm/gamma") for s in ("encoder", "decoder")}
    embed_norms = {s: src.has(f"{s}/layernorm_embedding/gamma") for s in ("encoder", "decoder")}
    for what, flags in (("final norm", finals), ("embedding norm", embed_norms)):
        if len(set(flags.values())) > 1:
            raise InteropError(f"{where}: only one stack has a {what}; attnviz needs both or none")
    for stack in ("encoder", "decoder"):
        if finals[stack]:
            ours |= norm(src, f"{stack}/layer_norm", f"{stack}.norm")
        if embed_norms[stack]:
            ours |= norm(src, f"{stack}/layernorm_embedding", f"{stack}.embed_norm")
    position_fields, position_weights = _positions(src, where, d_model)
    ours |= position_weights
    fields = dict(
        d_model=d_model,
        n_heads=int(heads),
        n_encoder_layers=n_enc,
        n_decoder_layers=n_dec,
        d_ff=int(ours["encoder.layers.0.ff.linear1.weight"].shape[0]),
        dropout=0.0,
        activation=ACTIVATIONS[int(act)],
        norm_first=bool(pre_norm),
        final_norm=finals["encoder"],
        embed_norm=embed_norms["encoder"],
        scale_embeddings=_scale_embeddings(src, where, d_model),
        bias=biases.pop(),
        gated_ff=gates.pop(),
        layer_norm_eps=layer_norm_eps,
        **position_fields,
    )
    vocab = {
        "src": src.take("encoder/embeddings_0/weight"),
        "tgt": src.take("decoder/embeddings/weight"),
        "lm": src.take("decoder/projection/weight"),
        "lm_bias": src.take("decoder/projection/bias") if src.has("decoder/projection/bias")
        else None,
        "start_from_zero": start_from_zero,
    }  # fmt: skip
    left = src.leftovers()
    if left:
        more = f" and {len(left) - 4} more" if len(left) > 4 else ""
        raise InteropError(
            f"{where}: variables attnviz does not implement: {', '.join(left[:4])}{more}"
        )
    return fields | {"vocab": vocab}, ours
