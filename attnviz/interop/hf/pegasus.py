"""Pegasus: pre-norm with a final norm per stack, split sinusoidal positions, the decoder
starts from <pad>."""

from __future__ import annotations

from . import bart_like
from .registry import Family, register

PEGASUS = register(
    Family(
        model_type="pegasus",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        start_is_pad=True,
        config=lambda hf, where, tensors, ids: bart_like.config(
            hf,
            where,
            tensors,
            pre_norm=True,
            embed_norm=False,
            positions="sinusoidal_split",
            position_offset=0,
            scale_embedding=False,
        ),  # fmt: skip
        table=bart_like.table,
        lm_keys=bart_like.LM_KEYS,
    )
)
