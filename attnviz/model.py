"""The encoder-decoder Transformer, written out by hand.

Shape legend: B batch, H heads, Tq/Tk query/key length, Ts/Tt source/target length,
D model width, Dh head width (D / H, or ``config.d_head``), V vocabulary.

Attention has two paths chosen by one ``if`` in :meth:`MultiHeadAttention.forward`: the fused
``F.scaled_dot_product_attention`` kernel, and the explicit math (:func:`eager_attention`)
whose scores, mask and weights the module hands to a recorder. The recorder is per call: :func:`attnviz.record` puts it in the
context variable :data:`ACTIVE_RECORDER` for the duration of a ``with`` block, so two threads
never see each other's recorder, and this module never keeps attention on itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import masks
from .config import ModelConfig
from .errors import InputError
from .positions import RelativePositionBias, position_table
from .positions import sinusoidal_positions as sinusoidal_positions  # imported from here too

KINDS = ("encoder_self", "decoder_self", "cross")


class AttentionHook(Protocol):
    """What a recorder hands an attention module for one call (see ``attnviz.record``)."""

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple: ...
    def edit_weights(self, weights: Tensor) -> Tensor: ...
    def edit_heads(self, head_output: Tensor) -> Tensor: ...
    def save(self, **tensors: Tensor | None) -> None: ...


class Recorder(Protocol):
    def hook_for(self, module: MultiHeadAttention) -> AttentionHook | None: ...


#: The recorder of the current thread/task, set only inside ``attnviz.record``.
ACTIVE_RECORDER: ContextVar[Recorder | None] = ContextVar("attnviz_recorder", default=None)


class RMSNorm(nn.Module):
    """T5's norm: scale by the root mean square (in float32), no centring, no bias."""

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)  # [B, T, 1]
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


def make_norm(cfg: ModelConfig) -> nn.Module:
    """The config's norm over D: LayerNorm or RMSNorm."""
    if cfg.norm == "rms":
        return RMSNorm(cfg.d_model, cfg.layer_norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)


ACTIVATION_FNS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


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


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with the ``nn.MultiheadAttention`` layout.

    ``in_proj_weight`` stacks the Q, K and V projections (``[3 * H * Dh, D]``, ``[3D, D]``
    unless Dh is set apart, as T5 does), so self-attention is one matmul and imported
    ``nn.Transformer`` weights copy over unchanged. ``bias=False`` drops every bias (T5);
    ``scale=False`` leaves the scores unscaled (T5) instead of dividing them by sqrt(Dh).
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
    ):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = head_dim or d_model // n_heads
        inner = self.inner = n_heads * self.head_dim  # H * Dh, D unless Dh is set apart (T5)
        self.kind, self.layer = kind, layer
        self.dropout = dropout
        self.scale = None if scale else 1.0  # None: SDPA's and the paper's 1 / sqrt(Dh)
        self.in_proj_weight = nn.Parameter(torch.empty(3 * inner, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * inner)) if bias else None
        self.out_proj = nn.Linear(inner, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # [B, H, T, Dh]

    def _project(self, x: Tensor, part: slice) -> Tensor:
        bias = self.in_proj_bias[part] if self.in_proj_bias is not None else None
        return F.linear(x, self.in_proj_weight[part], bias)

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``context`` ``[B, Tk, D]`` -> two ``[B, H, Tk, Dh]``."""
        kv = self._project(context, slice(self.inner, None))  # [B, Tk, 2 * H * Dh]
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
        Returns:
            ``[B, Tq, D]``.
        """
        b, tq, _ = x.shape
        if context is None and kv is None:
            q, k, v = self._project(x, slice(None)).chunk(3, dim=-1)
            q, k, v = self._split(q), self._split(k), self._split(v)  # [B, H, T, Dh]
            if cache is not None:
                k, v = cache.append(k, v)  # [B, H, Tk, Dh]
        else:
            q = self._split(self._project(x, slice(0, self.inner)))  # [B, H, Tq, Dh]
            k, v = kv if kv is not None else self.project_kv(context)

        recorder = ACTIVE_RECORDER.get()
        hook = recorder.hook_for(self) if recorder is not None else None
        if position_bias is not None:
            position_bias = position_bias.to(q.dtype)
        if hook is None:
            mask = masks.combine(key_padding_mask, attn_mask)
            allowed, dead = masks.sdpa_mask(mask, position_bias)
            p = self.dropout if self.training else 0.0
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=p, scale=self.scale
            )
            if dead is not None:
                z = z.masked_fill(dead, 0.0)  # [B, H, Tq, Dh]
        else:
            key_padding_mask, attn_mask = hook.edit_masks(key_padding_mask, attn_mask)
            mask = masks.combine(key_padding_mask, attn_mask)  # [B|1, 1, Tq|1, Tk]
            scale = self.scale if self.scale is not None else self.head_dim**-0.5
            z, weights, scores = eager_attention(
                q, k, v, mask, scale, position_bias,
                edit_weights=hook.edit_weights, dropout=self.attn_dropout,
            )  # fmt: skip
            z = hook.edit_heads(z)  # [B, H, Tq, Dh]
            hook.save(
                scores=scores,
                mask=mask,
                weights=weights,
                values=v,
                head_output=z,
                position_bias=position_bias,
            )
        z = z.transpose(1, 2).reshape(b, tq, self.inner)  # [B, Tq, H * Dh]
        return self.out_proj(z)


class FeedForward(nn.Module):
    """Position-wise feed-forward: ``linear2(dropout(act(linear1(x)) [* gate(x)]))``.

    The gate (T5 v1.1's ``wi_1``) exists only with ``gated_ff``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, d_ff = cfg.d_model, cfg.d_ff
        self.linear1 = nn.Linear(d, d_ff, bias=cfg.bias)
        self.gate = nn.Linear(d, d_ff, bias=cfg.bias) if cfg.gated_ff else None
        self.linear2 = nn.Linear(d_ff, d, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self.act = ACTIVATION_FNS[cfg.activation]

    def forward(self, x: Tensor) -> Tensor:
        h = self.act(self.linear1(x))  # [B, T, d_ff]
        if self.gate is not None:
            h = h * self.gate(x)
        return self.linear2(self.dropout(h))  # [B, T, D]


def _attention(cfg: ModelConfig, kind: str, layer: int) -> MultiHeadAttention:
    return MultiHeadAttention(
        cfg.d_model, cfg.n_heads, cfg.dropout, kind, layer,
        head_dim=cfg.head_dim, bias=cfg.bias, scale=cfg.scale_attention,
    )  # fmt: skip


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual block (post- or pre-norm)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = _attention(cfg, "encoder_self", layer)
        self.ff = FeedForward(cfg)
        self.norm1 = make_norm(cfg)
        self.norm2 = make_norm(cfg)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.dropout2 = nn.Dropout(cfg.dropout)

    def forward(
        self, x: Tensor, pad_mask: Tensor | None, position_bias: Tensor | None = None
    ) -> Tensor:
        """``x [B, Ts, D]``, ``pad_mask [B, Ts]``, bias ``[1, H, Ts, Ts]`` -> ``[B, Ts, D]``."""

        def attend(h: Tensor) -> Tensor:
            out = self.self_attn(h, key_padding_mask=pad_mask, position_bias=position_bias)
            return self.dropout1(out)

        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + attend(x))
        return self.norm2(x + self.dropout2(self.ff(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, feed-forward; each a residual block."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = _attention(cfg, "decoder_self", layer)
        self.cross_attn = _attention(cfg, "cross", layer)
        self.ff = FeedForward(cfg)
        self.norm1 = make_norm(cfg)
        self.norm2 = make_norm(cfg)
        self.norm3 = make_norm(cfg)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.dropout2 = nn.Dropout(cfg.dropout)
        self.dropout3 = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        tgt_pad_mask: Tensor | None,
        src_pad_mask: Tensor | None,
        causal: Tensor | None,
        self_cache: KVBuffer | None = None,
        cross_kv: tuple[Tensor, Tensor] | None = None,
        position_bias: Tensor | None = None,
    ) -> Tensor:
        """``x [B, Tt, D]``, ``memory [B, Ts, D]`` -> ``[B, Tt, D]``."""

        def self_block(h: Tensor) -> Tensor:
            out = self.self_attn(
                h,
                key_padding_mask=tgt_pad_mask,
                attn_mask=causal,
                cache=self_cache,
                position_bias=position_bias,
            )
            return self.dropout1(out)

        def cross_block(h: Tensor) -> Tensor:
            out = self.cross_attn(h, memory, key_padding_mask=src_pad_mask, kv=cross_kv)
            return self.dropout2(out)

        if self.norm_first:
            x = x + self_block(self.norm1(x))
            x = x + cross_block(self.norm2(x))
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self_block(x))
        x = self.norm2(x + cross_block(x))
        return self.norm3(x + self.dropout3(self.ff(x)))


class Stack(nn.Module):
    """A list of layers plus what the stack owns around them.

    ``norm``: a final norm (``nn.Transformer``, mBART, Pegasus, T5); ``embed_norm``: a norm on
    the embeddings (BART); ``pos_embed``: a learned position table (BART);
    ``position_bias``: T5's relative position bias, computed once per pass for all layers.
    """

    def __init__(self, layers: list[nn.Module], cfg: ModelConfig, decoder: bool):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = make_norm(cfg) if cfg.final_norm else None
        self.embed_norm = make_norm(cfg) if cfg.embed_norm else None
        self.pos_embed = (
            nn.Embedding(cfg.max_len + cfg.position_offset, cfg.d_model)
            if cfg.positions == "learned"
            else None
        )
        self.position_bias = (
            RelativePositionBias(cfg, bidirectional=not decoder)
            if cfg.positions == "relative"
            else None
        )

    def bias(self, tq: int, tk: int, start: int = 0) -> Tensor | None:
        """Relative position bias ``[1, H, Tq, Tk]`` of this stack's self-attention, or None."""
        return None if self.position_bias is None else self.position_bias(tq, tk, start)

    def finish(self, x: Tensor) -> Tensor:
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):
    """Encoder-decoder Transformer ("Attention Is All You Need"), every part written out.

    ``model(src, tgt)`` gives logits ``[B, Tt, V]``; :meth:`encode` and :meth:`decode` run the
    halves separately, and :meth:`decode` with a :class:`DecoderCache` takes one new token at a
    time. Masks follow :mod:`attnviz.masks` (bool, True = blocked); the causal mask of the
    decoder is built here and is always on.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        cfg = self.config = config
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.tgt_embed = (
            self.src_embed
            if cfg.share_embeddings
            else nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        )
        self.register_buffer("pe", position_table(cfg), persistent=False)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.encoder = Stack(
            [EncoderLayer(cfg, i) for i in range(cfg.n_encoder_layers)], cfg, decoder=False
        )
        self.decoder = Stack(
            [DecoderLayer(cfg, i) for i in range(cfg.n_decoder_layers)], cfg, decoder=True
        )
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self._reset_parameters()
        if cfg.tie_output:
            self.generator.weight = self.tgt_embed.weight

    def _reset_parameters(self) -> None:
        # Xavier on every matrix, as nn.Transformer and the Annotated Transformer do; keeps the
        # sqrt(D)-scaled embeddings in the same range as the positional encoding.
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    # -- names -----------------------------------------------------------------------------
    def attention_modules(self) -> dict[str, MultiHeadAttention]:
        """Every attention module by its stable path name, in forward order.

        e.g. ``"encoder.layers.0.self_attn"``, ``"decoder.layers.1.cross_attn"``.
        """
        return {n: m for n, m in self.named_modules() if isinstance(m, MultiHeadAttention)}

    # -- input checks ----------------------------------------------------------------------
    def _check_ids(self, ids: Tensor, name: str, vocab: int, start: int = 0) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            got = list(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise InputError(f"{name} must be token ids of shape [B, T], got {got}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise InputError(f"{name} must be an integer tensor (token ids), got {ids.dtype}")
        if ids.shape[1] == 0:
            raise InputError(f"{name} is empty: give at least one token")
        if start + ids.shape[1] > self.config.max_len:
            raise InputError(
                f"{name} reaches position {start + ids.shape[1]}, past this model's "
                f"max_len={self.config.max_len}"
            )
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab:
            raise InputError(
                f"{name} holds id {lo if lo < 0 else hi}, outside the vocabulary 0..{vocab - 1}"
            )

    def _embed(
        self, table: nn.Embedding, ids: Tensor, start: int = 0, stack: Stack | None = None
    ) -> Tensor:
        """Token embeddings plus positions of one stack (default: the encoder's for the source
        table): ``[B, T]`` -> ``[B, T, D]``."""
        cfg = self.config
        if stack is None:
            stack = self.encoder if table is self.src_embed else self.decoder
        x = table(ids)  # [B, T, D]
        if cfg.scale_embeddings:
            x = x * math.sqrt(cfg.d_model)
        rows = slice(start + cfg.position_offset, start + cfg.position_offset + ids.shape[1])
        if self.pe is not None:
            x = x + self.pe[rows].to(x.dtype)
        elif stack.pos_embed is not None:
            x = x + stack.pos_embed.weight[rows].to(x.dtype)
        if stack.embed_norm is not None:
            x = stack.embed_norm(x)
        return self.emb_dropout(x)

    # -- forward ---------------------------------------------------------------------------
    def encode(self, src: Tensor, src_pad_mask: Tensor | None = None) -> Tensor:
        """Run the encoder.

        Args:
            src: ``[B, Ts]`` source ids.
            src_pad_mask: ``[B, Ts]`` bool, True at PAD (or a float additive mask).
        Returns:
            memory ``[B, Ts, D]``.
        """
        self._check_ids(src, "src", self.config.src_vocab_size)
        pad = masks.as_bool_mask(
            src_pad_mask, tuple(src.shape), "src_pad_mask", "[B, Ts]", src.device
        )
        x = self._embed(self.src_embed, src, stack=self.encoder)
        bias = self.encoder.bias(src.shape[1], src.shape[1])  # [1, H, Ts, Ts] or None
        for layer in self.encoder.layers:
            x = layer(x, pad, bias)
        return self.encoder.finish(x)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor | None,
        src_pad_mask: Tensor | None = None,
        tgt_pad_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Run the decoder and the output projection.

        Args:
            tgt: ``[B, Tt]`` target ids (with a cache: only the new ones).
            memory: encoder output ``[B, Ts, D]``; unused (may be None) with a cache.
            src_pad_mask: ``[B, Ts]`` bool, True at PAD; with a cache it comes from the cache.
            tgt_pad_mask: ``[B, Tt]`` bool, True at PAD; not supported with a cache.
            cache: from :meth:`init_cache`; keys/values of earlier positions are reused.
        Returns:
            logits ``[B, Tt, V]``.
        """
        start = 0 if cache is None else cache.length
        self._check_ids(tgt, "tgt", self.config.tgt_vocab_size, start)
        b, t = tgt.shape
        if cache is None:
            if memory is None:
                raise InputError("decode() needs the encoder memory when no cache is given")
            if memory.shape[0] != b:
                raise InputError(f"tgt has batch {b} but memory has batch {memory.shape[0]}")
            src_shape = tuple(memory.shape[:2])
            src_pad = masks.as_bool_mask(
                src_pad_mask, src_shape, "src_pad_mask", "[B, Ts]", tgt.device
            )
            tgt_pad = masks.as_bool_mask(
                tgt_pad_mask, (b, t), "tgt_pad_mask", "[B, Tt]", tgt.device
            )
        else:
            if tgt_pad_mask is not None:
                raise InputError("tgt_pad_mask is not supported with a decoder cache")
            if cache.self_kv[0].shape[0] != b:
                raise InputError(
                    f"tgt has batch {b} but the cache has batch {cache.self_kv[0].shape[0]}"
                )
            src_pad, tgt_pad = cache.src_pad_mask, None
        causal = masks.causal_mask(t, start + t, device=tgt.device)  # [Tt, start + Tt]
        x = self._embed(self.tgt_embed, tgt, start, stack=self.decoder)
        bias = self.decoder.bias(t, start + t, start)  # [1, H, Tt, start + Tt] or None
        for i, layer in enumerate(self.decoder.layers):
            self_cache = cache.self_kv[i] if cache is not None else None
            cross_kv = cache.cross_kv[i] if cache is not None else None
            x = layer(x, memory, tgt_pad, src_pad, causal, self_cache, cross_kv, bias)
        x = self.decoder.finish(x)
        if self.config.scale_decoder_output:  # T5 v1.0 rescales before its tied lm_head
            x = x * self.config.d_model**-0.5
        return self.generator(x)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_pad_mask: Tensor | None = None,
        tgt_pad_mask: Tensor | None = None,
    ) -> Tensor:
        """Teacher-forced pass: ``src [B, Ts]``, ``tgt [B, Tt]`` -> logits ``[B, Tt, V]``."""
        memory = self.encode(src, src_pad_mask)
        return self.decode(tgt, memory, src_pad_mask, tgt_pad_mask)

    def init_cache(
        self, memory: Tensor, src_pad_mask: Tensor | None = None, capacity: int | None = None
    ) -> DecoderCache:
        """Cache for incremental decoding: cross-attention K/V computed once, here.

        Args:
            memory: encoder output ``[B, Ts, D]``.
            src_pad_mask: ``[B, Ts]`` bool, True at PAD.
            capacity: most target positions to be fed (default ``config.max_len``).
        """
        cfg = self.config
        src_pad = masks.as_bool_mask(
            src_pad_mask, tuple(memory.shape[:2]), "src_pad_mask", "[B, Ts]", memory.device
        )
        capacity = min(capacity or cfg.max_len, cfg.max_len)
        b = memory.shape[0]
        return DecoderCache(
            self_kv=[KVBuffer(b, cfg.n_heads, capacity, cfg.head_dim) for _ in self.decoder.layers],
            cross_kv=[layer.cross_attn.project_kv(memory) for layer in self.decoder.layers],
            src_pad_mask=src_pad,
        )

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.to_dict().items())

    def num_parameters(self) -> int:
        """Trainable parameters, shared ones counted once."""
        return sum(p.numel() for p in self.parameters())
