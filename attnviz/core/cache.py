"""Incremental decoding state: per-layer self-attention keys/values written in place
(:class:`KVBuffer`) and the cross-attention keys/values computed once (:class:`DecoderCache`).

Built by :meth:`attnviz.Transformer.init_cache`; :meth:`~attnviz.Transformer.decode` with
``cache=`` (and the fused step, :mod:`attnviz.core.step`) feeds only the new tokens.
Shapes: B batch, H heads, Ts source length, Dh head width.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from .errors import InputError


class KVBuffer:
    """Self-attention keys/values of one decoder layer, written in place, at most ``capacity``.

    Storage ``kv [2, B, H, room, Dh]`` (keys, then values) is allocated at the first write, in
    that step's dtype (bf16 under autocast), with room for :attr:`CHUNK` positions, and doubles
    when a step needs more (never past ``capacity``). So a decode whose limit is huge but which
    stops early holds only about what it used, never what its limit would need.
    """

    CHUNK = 64

    def __init__(self, batch: int, n_heads: int, capacity: int, head_dim: int):
        self.shape = (batch, n_heads, capacity, head_dim)
        self.kv: Tensor | None = None  # [2, B, H, room, Dh]
        self.length = 0

    @property
    def room(self) -> int:
        """Positions the storage holds now (grows up to ``capacity``)."""
        return 0 if self.kv is None else self.kv.shape[3]

    def reserve(self, end: int, like: Tensor) -> Tensor:
        """Make room for positions ``0..end-1`` (storage dtype/device of ``like``); the storage."""
        capacity = self.shape[2]
        if end > capacity:
            raise InputError(f"decoder cache holds {capacity} positions; step {end} is past it")
        if end > self.room:
            room = min(capacity, max(end, 2 * self.room, self.CHUNK))
            b, h, _, dh = self.shape
            grown = like.new_zeros((2, b, h, room, dh))
            if self.kv is not None:
                grown[:, :, :, : self.length] = self.kv[:, :, :, : self.length]
            self.kv = grown
        return self.kv

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``[B, H, Tnew, Dh]`` keys/values; return all of them, ``[B, H, Tk, Dh]``."""
        end = self.length + k.shape[2]
        kv = self.reserve(end, k)
        kv[0, :, :, self.length : end] = k
        kv[1, :, :, self.length : end] = v
        self.length = end
        return kv[0, :, :, :end], kv[1, :, :, :end]

    def select(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in that order), e.g. surviving beams."""
        self.shape = (len(index), *self.shape[1:])
        if self.kv is not None:
            self.kv = self.kv[:, index]


@dataclass
class DecoderCache:
    """State for incremental decoding: per-layer self-attention K/V and cross-attention K/V.

    Built by :meth:`Transformer.init_cache`; :meth:`Transformer.decode` with ``cache=`` feeds
    only the new target tokens and appends to it.
    """

    self_kv: list[KVBuffer]
    cross_kv: list[tuple[Tensor, Tensor]]  # per layer, each [B, H, Ts, Dh]
    src_pad_mask: Tensor | None  # [B, Ts]

    @property
    def length(self) -> int:
        """Target positions already fed."""
        return self.self_kv[0].length

    def truncate(self, length: int) -> None:
        """Forget positions ``length`` and later (moving back to an earlier step)."""
        if not 0 <= length <= self.length:
            raise InputError(f"cannot truncate a cache of length {self.length} to {length}")
        for buf in self.self_kv:
            buf.length = length

    def select(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search reorders and drops hypotheses)."""
        for buf in self.self_kv:
            buf.select(index)
        self.cross_kv = [(_rows(k, index), _rows(v, index)) for k, v in self.cross_kv]
        if self.src_pad_mask is not None:
            self.src_pad_mask = _rows(self.src_pad_mask, index)


def _rows(t: Tensor, index: Tensor) -> Tensor:
    """Rows ``index`` of ``t``; where every row is the same (one source shared by all beams:
    batch 1, or rows already expanded from one) a view of it, not a copy per step."""
    if t.shape[0] == 1 or t.stride(0) == 0:
        return t[:1].expand(len(index), *t.shape[1:])
    return t[index]
