"""A long input's encoder self-attention for the page: the layer and head it shows, asked for
when shown, and the model view's thumbnails.

A short input's every encoder layer and head comes with its first Step
(:func:`attnviz.app.views.payload`); past :data:`ENCODER_INLINE_BYTES` (50 MB at 512 tokens on
opus-mt's shape) the first Step carries only the layer and head shown
(:func:`encoder_block`), the page asks for others through
:func:`attnviz.app.encoder_requests.encoder_view`, and the model view draws max-pooled thumbnails
(:func:`encoder_thumbs`). Every block is the decoder's recorded weights, never recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..analysis.words import THUMB, downsample, pool_words
from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import Trace
from ..render.arrays import b64_f32, packed_bits
from .state import SessionState

#: The encoder's every layer and head comes with the first Step while it weighs at most this
#: (float32): layer/head changes then redraw from the page. Above it (a long input: 50 MB at
#: 512 tokens on opus-mt's shape) the page asks for the layer and head it shows
#: (:func:`encoder_block`) and the model view gets thumbnails (:func:`encoder_thumbs`).
ENCODER_INLINE_BYTES = 1 << 20


def encoder_inline(ckpt: Checkpoint, ts: int) -> bool:
    """Whether all of the encoder's self-attention comes with the first Step for ``ts`` tokens."""
    cfg = ckpt.config
    return cfg.n_encoder_layers * cfg.n_heads * ts * ts * 4 <= ENCODER_INLINE_BYTES


def encoder_block(state: SessionState, encoder: Trace, layer: int, head: str) -> dict[str, Any]:
    """One layer's encoder self-attention for the page, as the decoder recorded it.

    Args:
        encoder: the decoder's encoder trace (batch 1).
        layer: 0-based; head: ``"H<h>"`` (that head), ``"mean"`` (the heads' mean) or
            ``"all heads"``.
    Returns:
        ``{"epoch", "layer", "head", "h", "ts", "w", "m"}``: ``w`` base64 float32 ``[h, Ts, Ts]``
        (``h`` = 1 for one head or the mean, H for all heads: the recorded weights, not a copy
        recomputed), ``m`` the recorded mask, one bit per cell (:func:`packed`).
    """
    layers = encoder.layers("encoder_self")
    if layer not in layers:
        raise InputError(f"encoder layer must be one of {layers}, got {layer}")
    w = encoder.numpy("encoder_self", layer)[0]  # [H, Ts, Ts]
    m = encoder.numpy("encoder_self", layer, "mask")[0, 0]  # [Ts, Ts]
    return block_of(state, w, m, layer, head)


def block_of(state: SessionState, w: np.ndarray, m: np.ndarray, layer: int, head: str) -> dict:
    """:func:`encoder_block`'s dict of one layer's ``w`` ``[H, Ts, Ts]`` (weights or a lens;
    H = 1 for rollout: every head reads it) and mask ``m`` ``[Ts, Ts]``."""
    if head == "all heads" or w.shape[0] == 1:
        z = w
    elif head == "mean":
        z = w.mean(0, keepdims=True)
    else:
        try:
            h = int(str(head).removeprefix("H"))
        except ValueError:
            raise InputError(f"not a head: {head!r}; heads read like 'H2'") from None
        if not 0 <= h < w.shape[0]:
            raise InputError(f"head must be in H0..H{w.shape[0] - 1}, got {head!r}")
        z = w[h : h + 1]
    return {
        "epoch": f"{state.sid}:{state.epoch}", "layer": layer, "head": str(head),
        "h": int(z.shape[0]), "ts": int(w.shape[-1]), "w": b64_f32(z), "m": packed_bits(m),
    }  # fmt: skip


def encoder_thumbs(
    state: SessionState, encoder: Trace, words: Sequence[int] | None = None, size: int = THUMB
) -> dict[str, Any]:
    """Every layer and head of the encoder's self-attention max-pooled to at most
    ``size x size`` (:func:`attnviz.analysis.words.downsample`), for the model view.

    Args:
        words: the word of each source piece: pool pieces into words first (words mode).
    Returns:
        ``{"epoch", "thumbs": True, "words", "L", "h", "tq", "tk", "bq", "bk", "w", "m"}``:
        ``w`` base64 float32 ``[L, H, tq, tk]``, ``m`` the pooled mask ``[tq, tk]`` (one bit
        per cell) and ``bq x bk`` the pieces (or words) per cell.
    """
    layers = encoder.layers("encoder_self")
    w = np.stack([encoder.numpy("encoder_self", i)[0] for i in layers])  # [L, H, Ts, Ts]
    m = encoder.numpy("encoder_self", layers[0], "mask")[0, 0].astype(bool)  # [Ts, Ts]
    return thumbs_of(state, w, m, words, size)


def thumbs_of(
    state: SessionState, w: np.ndarray, m: np.ndarray, words: Sequence[int] | None, size: int
) -> dict[str, Any]:
    """:func:`encoder_thumbs`'s dict of ``w`` ``[L, H, Ts, Ts]`` (weights or a lens) and mask
    ``m`` ``[Ts, Ts]``: pooled into words when ``words`` is given, then max-pooled."""
    if words is not None:
        w, m = pool_words(w, m, words, words)  # [L, H, Ws, Ws]
    z, zm, (bq, bk) = downsample(w, m, size)
    return {
        "epoch": f"{state.sid}:{state.epoch}", "thumbs": True, "words": words is not None,
        "L": int(w.shape[0]), "h": int(w.shape[1]), "tq": int(z.shape[-2]), "tk": int(z.shape[-1]),
        "bq": bq, "bk": bk, "w": b64_f32(z), "m": packed_bits(zm),
    }  # fmt: skip
