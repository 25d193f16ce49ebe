"""FSMT (fairseq WMT19): post-norm, fairseq sinusoidal positions counted from pad + 1,
scaled embeddings, separate source and target vocabularies; starts from </s>."""

from __future__ import annotations

from . import bart_like
from .registry import Family, register

FSMT = register(
    Family(
        model_type="fsmt",
        pad_id=1,
        eos_id=2,
        unk_id=3,
        start_is_pad=False,
        config=lambda hf, where, tensors, ids: bart_like.config(
            hf,
            where,
            tensors,
            pre_norm=False,
            embed_norm=False,
            positions="fairseq",
            position_offset=ids["pad_id"] + 1,
            scale_embedding=True,
        ),  # fmt: skip
        table=bart_like.table,
        # its own output matrix, written under FSMT's name on export
        lm_keys=tuple(reversed(bart_like.LM_KEYS)),
    )
)
