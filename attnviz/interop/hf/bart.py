"""BART and mBART: learned positions from row 2, a norm after the embeddings; mBART is
pre-norm with a final norm per stack. Both start decoding from </s>."""

from __future__ import annotations

from . import bart_like
from .registry import Family, register


def _config(pre_norm: bool):
    def config(hf, where, tensors, ids):
        return bart_like.config(
            hf, where, tensors, pre_norm=pre_norm, embed_norm=True, positions="learned",
            position_offset=2, scale_embedding=False,
        )  # fmt: skip

    return config


BART = register(
    Family(
        model_type="bart",
        pad_id=1,
        eos_id=2,
        unk_id=3,
        start_is_pad=False,
        config=_config(pre_norm=False),
        table=bart_like.table,
        lm_keys=bart_like.LM_KEYS,
    )  # fmt: skip
)
MBART = register(
    Family(
        model_type="mbart",
        pad_id=1,
        eos_id=2,
        unk_id=3,
        start_is_pad=False,
        config=_config(pre_norm=True),
        table=bart_like.table,
        lm_keys=bart_like.LM_KEYS,
    )  # fmt: skip
)
