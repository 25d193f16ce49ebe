"""The BERT family: BERT, RoBERTa, DistilBERT, one loader with their tensor names and position
rules as data, with their masked-LM head or without one.

Encoder-only, post-norm LayerNorms, a LayerNorm on the embeddings, learned positions (from
row ``pad_id + 1`` in RoBERTa), token types (BERT, RoBERTa), and the head: dense, GELU,
LayerNorm, then the output matrix tied to the token table, with its own bias.

A base encoder (``BertModel``, ``RobertaModel``, ``DistilBertModel``; the Transformer of a
sentence-transformers folder) keeps its tensors without the member's prefix and has no head;
it opens with ``lm_head=False`` (its states are what it gives) and its pooler, trained for
next-sentence prediction and read by nothing here, is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from .common import activation, int_of, opt_float, opt_int
from .mapping import Attention, Dropped, Linear, One, Rule, layers
from .registry import Family, register


@dataclass(frozen=True)
class Names:
    """Where one member keeps its tensors, and how its config.json names sizes."""

    prefix: str  # "bert."
    embeddings: str  # "embeddings." under the prefix
    layers: str  # "encoder.layer."
    attention: tuple[str, str, str, str]  # q, k, v, out under a layer
    norm1: str
    linear1: str
    linear2: str
    norm2: str
    head: tuple[str, str, str, str]  # dense, norm, bias, output matrix
    sizes: dict[str, str]  # our field -> config.json key
    act_key: str = "hidden_act"
    eps_key: str = "layer_norm_eps"
    offset_from_pad: bool = False  # positions start at row pad_id + 1 (RoBERTa)
    pad_id: int = 0
    unk_id: int = 100


BERT_SIZES = dict(
    d_model="hidden_size",
    n_heads="num_attention_heads",
    n_encoder_layers="num_hidden_layers",
    d_ff="intermediate_size",
)
BERT_LAYER = dict(
    layers="encoder.layer.",
    attention=(
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
    ),
    norm1="attention.output.LayerNorm",
    linear1="intermediate.dense",
    linear2="output.dense",
    norm2="output.LayerNorm",
)

NAMES = {
    "bert": Names(
        prefix="bert.",
        embeddings="embeddings.",
        head=(
            "cls.predictions.transform.dense",
            "cls.predictions.transform.LayerNorm",
            "cls.predictions.bias",
            "cls.predictions.decoder.weight",
        ),
        sizes=BERT_SIZES,
        **BERT_LAYER,
    ),
    "roberta": Names(
        prefix="roberta.",
        embeddings="embeddings.",
        head=("lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder.weight"),
        sizes=BERT_SIZES,
        offset_from_pad=True,
        pad_id=1,
        unk_id=3,
        **BERT_LAYER,
    ),
    "distilbert": Names(
        prefix="distilbert.",
        embeddings="embeddings.",
        layers="transformer.layer.",
        attention=("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin"),
        norm1="sa_layer_norm",
        linear1="ffn.lin1",
        linear2="ffn.lin2",
        norm2="output_layer_norm",
        head=(
            "vocab_transform",
            "vocab_layer_norm",
            "vocab_projector.bias",
            "vocab_projector.weight",
        ),
        sizes=dict(
            d_model="dim", n_heads="n_heads", n_encoder_layers="n_layers", d_ff="hidden_dim"
        ),
        act_key="activation",
        eps_key="",  # DistilBERT's LayerNorms use 1e-12, written nowhere
    ),
}


def is_base(n: Names, names: set[str] | Any) -> bool:
    """A base encoder's tensors: the token table without the member's prefix, and no head."""
    table = f"{n.embeddings}word_embeddings.weight"
    return table in names and f"{n.prefix}{table}" not in names


def config(
    hf: dict, where: Path, tensors: dict[str, Tensor], ids: dict[str, int]
) -> dict[str, Any]:
    """config.json -> :class:`ModelConfig` fields of a BERT, RoBERTa or DistilBERT folder."""
    names = NAMES[hf["model_type"]]
    base = is_base(names, tensors)
    prefix = "" if base else names.prefix
    kind = hf.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise InteropError(f"{where}: position_embedding_type {str(kind)[:40]!r} is not supported")
    if hf.get("is_decoder"):
        raise InteropError(f"{where}: a BERT used as a decoder (is_decoder) is not supported")
    fields: dict[str, Any] = {ours: int_of(hf, key, where) for ours, key in names.sizes.items()}
    rows = opt_int(hf, "max_position_embeddings", 512, where)
    offset = ids["pad_id"] + 1 if names.offset_from_pad else 0
    if rows <= offset:
        raise InteropError(f"{where}: max_position_embeddings={rows} leaves no position")
    types = f"{prefix}{names.embeddings}token_type_embeddings.weight"
    return dict(
        fields,
        n_decoder_layers=0,
        activation=activation(hf.get(names.act_key, "gelu"), where),
        layer_norm_eps=opt_float(hf, names.eps_key, 1e-12, where) if names.eps_key else 1e-12,
        positions="learned",
        position_offset=offset,
        max_len=rows - offset,
        embed_norm=True,
        scale_embeddings=False,
        type_vocab_size=int(tensors[types].shape[0]) if types in tensors else 0,
        head_transform=not base,
        output_bias=not base,
        lm_head=not base,
    )


def table(n: Names, cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """One member's table: embeddings' positions, types and norm, the layers, and the head
    (dense, norm, output bias; the token table and output matrix are common); a base
    encoder's without the prefix and the head, its pooler dropped."""
    if names is None and not cfg.lm_head:  # export: transformers' base classes are not written
        raise InteropError("export-hf writes BERT-family models with their masked-LM head; "
                           "this base encoder has none")  # fmt: skip
    prefix = n.prefix if cfg.lm_head else ""
    emb = f"{prefix}{n.embeddings}"
    rules: list[Rule] = [
        One("encoder.pos_embed.weight", f"{emb}position_embeddings.weight"),
        Linear("encoder.embed_norm", f"{emb}LayerNorm"),
        Dropped("", f"{emb}position_ids"),  # a buffer older folders keep
    ]
    if cfg.type_vocab_size:
        rules.append(One("type_embed.weight", f"{emb}token_type_embeddings.weight"))
    layer = (
        Attention("self_attn.", "", n.attention),
        Linear("norm1", n.norm1),
        Linear("ff.linear1", n.linear1),
        Linear("ff.linear2", n.linear2),
        Linear("norm2", n.norm2),
    )
    rules += layers(layer, cfg.n_encoder_layers, "encoder.layers.", f"{prefix}{n.layers}")
    if not cfg.lm_head:
        return rules + [Dropped("", "pooler.dense.weight"), Dropped("", "pooler.dense.bias")]
    dense, norm, bias, matrix = n.head
    rules += [Linear("head.dense", dense), Linear("head.norm", norm), One("generator.bias", bias)]
    copy = matrix.removesuffix("weight") + "bias"  # older folders: the bias twice
    if copy != bias:
        rules.append(Dropped("", copy))
    return rules


for _model_type, _names in NAMES.items():
    register(
        Family(
            model_type=_model_type,
            pad_id=_names.pad_id,
            eos_id=_names.pad_id,  # nothing is decoded: the end id is only a placeholder
            unk_id=_names.unk_id,
            start_is_pad=False,
            config=config,
            table=partial(table, _names),
            lm_keys=(_names.head[3],),
            arch="encoder-only",
            embed_keys=(
                f"{_names.prefix}{_names.embeddings}word_embeddings.weight",
                f"{_names.embeddings}word_embeddings.weight",  # a base encoder's
            ),
        )
    )
