"""Marian (opus-mt): post-norm, split sinusoidal positions, the decoder starts from <pad>."""

from __future__ import annotations

from . import bart_like
from .registry import Family, register

MARIAN = register(
    Family(
        model_type="marian",
        pad_id=None,  # the last id in opus-mt; config.json always names it
        eos_id=0,
        unk_id=1,
        start_is_pad=True,
        config=lambda hf, where, tensors, ids: bart_like.config(
            hf,
            where,
            tensors,
            pre_norm=False,
            embed_norm=False,
            positions="sinusoidal_split",
            position_offset=0,
            scale_embedding=False,
        ),  # fmt: skip
        table=bart_like.table,
        lm_keys=bart_like.LM_KEYS,
    )
)
