"""Subword pieces pooled into words, and big attention matrices downsampled for thumbnails.

Words: the alignment module's rule (:mod:`attnviz.analysis.align`, Kobayashi et al. 2020) —
a word's attention is **summed over its key pieces** and **averaged over its query pieces**,
so each word row still sums to 1 where its piece rows did. Masks pool with it: a word cell
is blocked only where every piece cell under it is blocked, and a query piece whose whole
row is blocked (a padded query) is left out of its word's mean.

Word boundaries come from the tokenizer's piece markers: ``▁`` (SentencePiece / Metaspace)
or ``Ġ`` (byte-level BPE) start a word, ``</w>`` ends one, ``##`` (WordPiece) continues one;
a character tokenizer's words are split on spaces (the space starts the next word, as
``▁`` does); a word tokenizer's pieces are words. Special tokens (``<eos>``, ``</s>``,
``[CLS]`` ...) are words of their own.

Thumbnails: :func:`downsample` max-pools ``[..., Tq, Tk]`` to at most ``size x size`` (the
strongest weight of each block, so a sharp head stays visible).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from ..core.errors import InputError

#: Thumbnails of the model view are at most this many cells a side.
THUMB = 64
_SPECIAL = re.compile(r"^(<[^<>\s]+>|\[[A-Z_]+\])$")


def _is_special(piece: str) -> bool:
    return bool(_SPECIAL.match(piece))


def word_index(pieces: Sequence[str], kind: str | None = None) -> list[int]:
    """The word each piece belongs to (0-based, non-decreasing).

    Args:
        pieces: the tokenizer's pieces, markers kept (``"▁the"``, ``"Ġcat"``, ``"ca"``,
            ``"t</w>"``, ``"##s"``).
        kind: the tokenizer kind (``"char"``, ``"word"``, or a subword kind / None: read the
            markers).
    Returns:
        ``[T]`` word indices.
    """
    if kind == "word":
        return list(range(len(pieces)))
    out: list[int] = []
    w = -1
    start_next = True  # the previous piece ended a word (or there was none)
    for p in pieces:
        p = str(p)
        if _is_special(p):
            w += 1
            out.append(w)
            start_next = True
            continue
        if kind == "char":
            starts, ends = start_next or p.isspace(), False
        elif p.startswith("##"):  # WordPiece: continues the word before it
            starts, ends = False, False
        else:
            starts, ends = start_next or p.startswith(("▁", "Ġ", " ")), p.endswith("</w>")
        if starts or w < 0:
            w += 1
        out.append(w)
        start_next = ends
    return out


def piece_text(piece: str) -> str:
    """A piece's share of its word's text: markers dropped (``"▁the"`` -> ``"the"``,
    ``"##s"`` -> ``"s"``, ``"t</w>"`` -> ``"t"``); a special token stays whole."""
    p = str(piece)
    if _is_special(p):
        return p
    if p.startswith("##"):
        p = p[2:]
    return p.removesuffix("</w>").lstrip("▁Ġ")


def word_labels(pieces: Sequence[str], index: Sequence[int]) -> list[str]:
    """Each word's text: its pieces joined, markers dropped (``"▁un" "do"`` -> ``"undo"``)."""
    n = (max(index) + 1) if len(index) else 0
    parts: list[list[str]] = [[] for _ in range(n)]
    for p, w in zip(pieces, index, strict=True):
        parts[w].append(p)
    out = []
    for ps in parts:
        if len(ps) == 1 and _is_special(str(ps[0])):
            out.append(str(ps[0]))
            continue
        text = "".join(piece_text(p) for p in ps).strip()
        out.append(text or "".join(str(p) for p in ps) or "∅")
    return out


def _groups(index: Sequence[int], n: int, name: str) -> np.ndarray:
    idx = np.asarray(index, dtype=np.int64)
    if idx.shape != (n,):
        raise InputError(f"{name}: {len(idx)} word indices for {n} pieces")
    if n and (idx[0] != 0 or np.any(np.diff(idx) < 0) or np.any(np.diff(idx) > 1)):
        raise InputError(f"{name}: word indices must run 0, 0/1, ... without gaps")
    return idx


def pool_words(
    weights: np.ndarray,
    mask: np.ndarray | None,
    query_words: Sequence[int],
    key_words: Sequence[int],
) -> tuple[np.ndarray, np.ndarray]:
    """Piece attention -> word attention: summed over key pieces, averaged over query pieces.

    Args:
        weights: ``[..., Tq, Tk]`` attention weights (rows sum to 1 or are all blocked).
        mask: bool, True = blocked, broadcastable to ``[Tq, Tk]`` (None: nothing blocked).
        query_words / key_words: :func:`word_index` of the query / key pieces.
    Returns:
        ``(words [..., Wq, Wk], mask [Wq, Wk])``: a word cell is blocked where every piece
        cell under it is; query pieces whose whole row is blocked are left out of the mean
        (a word of only such pieces gets a blocked, all-zero row).
    """
    w = np.asarray(weights, dtype=np.float64)
    tq, tk = w.shape[-2:]
    qi, ki = _groups(query_words, tq, "queries"), _groups(key_words, tk, "keys")
    m = (
        np.zeros((tq, tk), bool)
        if mask is None
        else np.broadcast_to(np.asarray(mask, bool), (tq, tk))
    )
    wq, wk = (int(qi[-1]) + 1 if tq else 0), (int(ki[-1]) + 1 if tk else 0)
    keys = np.zeros((tk, wk))
    keys[np.arange(tk), ki] = 1.0  # [Tk, Wk]
    live = ~m.all(axis=1)  # [Tq] query pieces with something to attend to
    rows = np.zeros((wq, tq))
    rows[qi[live], np.arange(tq)[live]] = 1.0
    per = rows.sum(1, keepdims=True)
    rows = np.divide(rows, per, out=np.zeros_like(rows), where=per > 0)  # [Wq, Tq]
    out = rows @ w @ keys  # [..., Wq, Wk]
    open_ = (~m).astype(np.float64)
    reach = (rows > 0).astype(np.float64) @ open_ @ keys  # open piece cells under each word cell
    wmask = reach == 0
    return out.astype(np.float32), wmask


def downsample(
    weights: np.ndarray, mask: np.ndarray | None, size: int = THUMB
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Max-pool ``[..., Tq, Tk]`` to at most ``size x size`` cells (a model-view thumbnail).

    Args:
        weights: attention weights ``[..., Tq, Tk]``.
        mask: bool, True = blocked, broadcastable to ``[Tq, Tk]`` (None: nothing blocked).
        size: the most cells per side.
    Returns:
        ``(pooled [..., ceil(Tq/bq), ceil(Tk/bk)], mask, (bq, bk))``: each cell is the largest
        unblocked weight of its ``bq x bk`` block of pieces; a cell is blocked where the whole
        block is. ``bq = bk = 1`` (a copy) when the matrix already fits.
    """
    w = np.asarray(weights, dtype=np.float32)
    tq, tk = w.shape[-2:]
    m = (
        np.zeros((tq, tk), bool)
        if mask is None
        else np.broadcast_to(np.asarray(mask, bool), (tq, tk))
    )
    bq, bk = max(1, math.ceil(tq / size)), max(1, math.ceil(tk / size))
    nq, nk = math.ceil(tq / bq), math.ceil(tk / bk)
    lead = w.shape[:-2]
    padded = np.full((*lead, nq * bq, nk * bk), -np.inf, np.float32)
    padded[..., :tq, :tk] = np.where(m, -np.inf, w)
    blocks = padded.reshape(*lead, nq, bq, nk, bk).max(axis=(-3, -1))  # [..., nq, nk]
    pm = np.ones((nq * bq, nk * bk), bool)
    pm[:tq, :tk] = m
    pmask = pm.reshape(nq, bq, nk, bk).all(axis=(1, 3))
    return np.where(np.isfinite(blocks), blocks, 0.0).astype(np.float32), pmask, (bq, bk)
