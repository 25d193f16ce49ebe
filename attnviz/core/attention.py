"""Multi-head attention, and the per-call recorder it reports to.

Two paths chosen by one ``if`` in :meth:`MultiHeadAttention.forward`: the fused
``F.scaled_dot_product_attention`` kernel, and the explicit math (:func:`eager_attention`)
whose scores, mask and weights the module hands to a recorder. The recorder is per call:
:func:`attnviz.core.record` puts it in the context variable :data:`ACTIVE_RECORDER` for the duration
of a ``with`` block, so two threads never see each other's recorder, and no module keeps
attention on itself. Shapes: B batch, H heads, Tq/Tk query/key length, D width, Dh head width.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import masks
from .cache import KVBuffer
from .positions import apply_rotary


class AttentionHook(Protocol):
    """What a recorder hands an attention module for one call (see ``attnviz.core.record``)."""

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple: ...
    def edit_window(self, window: Tensor | None) -> Tensor | None: ...
    def edit_weights(self, weights: Tensor) -> Tensor: ...
    def edit_heads(self, head_output: Tensor) -> Tensor: ...
    def save(self, **tensors: Tensor | None) -> None: ...


class Recorder(Protocol):
    def hook_for(self, module: MultiHeadAttention) -> AttentionHook | None: ...


#: The recorder of the current thread/task, set only inside ``attnviz.core.record``.
ACTIVE_RECORDER: ContextVar[Recorder | None] = ContextVar("attnviz_recorder", default=None)


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    bias: Tensor | None = None,
    *,
    edit_weights: Callable[[Tensor], Tensor] | None = None,
    dropout: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Attention written out: the math the recorder sees, in one place.

    Args:
        q: queries ``[B, H, Tq, Dh]``; k, v: keys and values ``[B, H, Tk, Dh]``.
        mask: bool, True = blocked, broadcastable to ``[B, H, Tq, Tk]``, or None.
        scale: multiplies ``q·kᵀ`` (``1/sqrt(Dh)``; 1 for T5).
        bias: a position bias ``[1, H, Tq, Tk]`` added to the scaled scores (T5), or None.
        edit_weights: applied to the weights after the softmax, before they meet the values.
        dropout: applied to the weights that meet the values (training only).
    Returns:
        ``(head_output [B, H, Tq, Dh], weights [B, H, Tq, Tk], scores [B, H, Tq, Tk])``:
        weights after the softmax (and any edit), before dropout; scores as the softmax saw
        them, before the mask. A row with every key blocked has zero weights and output.
    """
    scores = q @ k.transpose(-2, -1)  # [B, H, Tq, Tk]
    if scale != 1.0:  # T5 does not scale
        scores = scores * scale
    if bias is not None:
        scores = scores + bias  # what the softmax sees
    # softmax in float32 even under autocast; the weights used are these, cast to V's dtype
    weights = masks.masked_softmax(scores.float(), mask).to(v.dtype)
    if edit_weights is not None:
        weights = edit_weights(weights)
    used = dropout(weights) if dropout is not None else weights
    return used @ v, weights, scores  # [B, H, Tq, Dh]


def watched_attention(
    hook: AttentionHook,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    attn_mask: Tensor | None,
    scale: float,
    position_bias: Tensor | None = None,
    *,
    dropout: Callable[[Tensor], Tensor] | None = None,
    window: Tensor | None = None,
) -> Tensor:
    """Attention that a recorder watches: its mask edits, the explicit math, its weight and
    head edits, then what it keeps. The module path and the fused cached step
    (:mod:`attnviz.core.step`) both attend through here, so what is recorded is what was used.

    Args:
        hook: the recorder's hook for this module and call.
        q: ``[B, H, Tq, Dh]``; k, v: ``[B, H, Tk, Dh]`` (key/value heads already shared).
        key_padding_mask: ``[B, Tk]`` bool, True = blocked, or None.
        attn_mask: ``[Tq, Tk]`` bool, True = blocked (the causal mask), or None.
        scale: multiplies ``q·kᵀ``; position_bias: ``[1, H, Tq, Tk]`` or None (T5).
        dropout: on the weights that meet the values (training only).
        window: ``[Tq, Tk]`` bool, the sliding-window mask of a local layer, or None; a
            stage of its own (edited by ``edit_window``, kept as ``window``), combined with
            the others into the mask applied.
    Returns:
        The heads' output ``[B, H, Tq, Dh]`` after any head edit.
    """
    window = hook.edit_window(window)
    key_padding_mask, attn_mask = hook.edit_masks(key_padding_mask, attn_mask)
    mask = masks.combine(key_padding_mask, attn_mask, window)  # [B|1, 1, Tq|1, Tk]
    z, weights, scores = eager_attention(
        q, k, v, mask, scale, position_bias, edit_weights=hook.edit_weights, dropout=dropout
    )
    z = hook.edit_heads(z)  # [B, H, Tq, Dh]
    hook.save(
        scores=scores,
        mask=mask,
        weights=weights,
        values=v,
        head_output=z,
        position_bias=position_bias,
        window=window,
    )
    return z


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with the ``nn.MultiheadAttention`` layout.

    ``in_proj_weight`` stacks the Q, K and V projections (``[3 * H * Dh, D]``, ``[3D, D]``
    unless Dh is set apart, as T5 does), so self-attention is one matmul and imported
    ``nn.Transformer`` weights copy over unchanged. ``bias=False`` drops every bias (T5);
    ``scale=False`` leaves the scores unscaled (T5) instead of dividing them by sqrt(Dh).

    Grouped-query attention (``n_kv_heads < n_heads``): K and V have ``n_kv_heads`` heads
    (``in_proj_weight`` is ``[(H + 2 * Hkv) * Dh, D]``, the cache holds Hkv heads) and query
    head ``h`` attends with key/value head ``h // (H / Hkv)``; the weights recorded stay one
    matrix per query head. ``qkv_bias`` (None: ``bias``) sets the Q/K/V biases apart from the
    output's (Qwen2). ``query_scale`` replaces ``1 / sqrt(Dh)`` (Gemma 3's
    ``query_pre_attn_scalar ** -0.5``); ``qk_norms`` (Gemma 3) are two norms over Dh applied to
    each head's queries and keys of self-attention before rotary.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float,
        kind: str,
        layer: int,
        head_dim: int | None = None,
        bias: bool = True,
        scale: bool = True,
        n_kv_heads: int | None = None,
        qkv_bias: bool | None = None,
        query_scale: float | None = None,
        qk_norms: tuple[nn.Module, nn.Module] | None = None,
    ):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.n_kv_heads = n_kv_heads or n_heads
        self.head_dim = head_dim or d_model // n_heads
        inner = self.inner = n_heads * self.head_dim  # H * Dh, D unless Dh is set apart (T5)
        self.kv_inner = self.n_kv_heads * self.head_dim  # Hkv * Dh
        self.kind, self.layer = kind, layer
        self.dropout = dropout
        self.scale = None if scale else 1.0  # None: SDPA's and the paper's 1 / sqrt(Dh)
        if query_scale is not None:
            self.scale = query_scale
        self.q_norm, self.k_norm = qk_norms if qk_norms is not None else (None, None)
        rows = inner + 2 * self.kv_inner
        self.in_proj_weight = nn.Parameter(torch.empty(rows, d_model))
        has_qkv_bias = bias if qkv_bias is None else qkv_bias
        self.in_proj_bias = nn.Parameter(torch.zeros(rows)) if has_qkv_bias else None
        self.out_proj = nn.Linear(inner, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)

    @property
    def score_scale(self) -> float:
        """What ``q·kᵀ`` is multiplied by: ``1 / sqrt(Dh)``, or 1 where scaling is off (T5)."""
        return self.scale if self.scale is not None else self.head_dim**-0.5

    def _split(self, x: Tensor) -> Tensor:
        b, t, width = x.shape
        return x.view(b, t, width // self.head_dim, self.head_dim).transpose(1, 2)  # [B, H, T, Dh]

    def _share_kv(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Grouped-query attention: each key/value head repeated for its query heads."""
        group = self.n_heads // self.n_kv_heads
        if group == 1:
            return k, v
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return k, v  # [B, H, Tk, Dh]

    def _project(self, x: Tensor, part: slice) -> Tensor:
        bias = self.in_proj_bias[part] if self.in_proj_bias is not None else None
        return F.linear(x, self.in_proj_weight[part], bias)

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``context`` ``[B, Tk, D]`` -> two ``[B, H, Tk, Dh]``."""
        kv = self._project(context, slice(self.inner, None))  # [B, Tk, 2 * Hkv * Dh]
        k, v = kv.chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        kv: tuple[Tensor, Tensor] | None = None,
        cache: KVBuffer | None = None,
        position_bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        window: Tensor | None = None,
    ) -> Tensor:
        """Attend from ``x`` to ``context`` (or to ``x`` itself).

        Args:
            x: queries' hidden states ``[B, Tq, D]``.
            context: keys' hidden states ``[B, Tk, D]``; None for self-attention.
            key_padding_mask: ``[B, Tk]`` bool, True = blocked.
            attn_mask: ``[Tq, Tk]`` bool, True = blocked (the causal mask).
            kv: precomputed keys/values ``[B, H, Tk, Dh]`` (cross-attention while decoding).
            cache: self-attention buffer; new keys/values are appended and all are attended.
            position_bias: ``[1, H, Tq, Tk]`` added to the scores before the mask (T5).
            rotary: ``(cos, sin)`` ``[Tq, R]`` of the queries' positions: queries and the new
                keys are rotated before the keys are cached (self-attention only).
            window: ``[Tq, Tk]`` bool, True = beyond the sliding window (local layers).
        Returns:
            ``[B, Tq, D]``.
        """
        b, tq, _ = x.shape
        if context is None and kv is None:
            qkv = self._project(x, slice(None))  # [B, T, (H + 2 * Hkv) * Dh]
            q, k, v = qkv.split([self.inner, self.kv_inner, self.kv_inner], dim=-1)
            q, k, v = self._split(q), self._split(k), self._split(v)  # [B, H|Hkv, T, Dh]
            if self.q_norm is not None:  # QK-norm over Dh, before rotary (Gemma 3)
                q, k = self.q_norm(q), self.k_norm(k)
            if rotary is not None:
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
            if cache is not None:
                k, v = cache.append(k, v)  # [B, Hkv, Tk, Dh]
            k, v = self._share_kv(k, v)  # [B, H, Tk, Dh]
        else:
            q = self._split(self._project(x, slice(0, self.inner)))  # [B, H, Tq, Dh]
            k, v = kv if kv is not None else self.project_kv(context)

        recorder = ACTIVE_RECORDER.get()
        hook = recorder.hook_for(self) if recorder is not None else None
        if position_bias is not None:
            position_bias = position_bias.to(q.dtype)
        if hook is None:
            mask = masks.combine(key_padding_mask, attn_mask, window)
            allowed, dead = masks.sdpa_mask(mask, position_bias)
            p = self.dropout if self.training else 0.0
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=p, scale=self.scale
            )
            if dead is not None:
                z = z.masked_fill(dead, 0.0)  # [B, H, Tq, Dh]
        else:
            z = watched_attention(
                hook, q, k, v, key_padding_mask, attn_mask, self.score_scale, position_bias,
                dropout=self.attn_dropout, window=window,
            )  # fmt: skip
        z = z.transpose(1, 2).reshape(b, tq, self.inner)  # [B, Tq, H * Dh]
        return self.out_proj(z)
