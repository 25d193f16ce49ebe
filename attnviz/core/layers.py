"""The Transformer's parts: norms, the feed-forward block, the encoder and decoder layers,
a stack's embeddings and positions, and Whisper's audio front end.

Shape legend as in :mod:`attnviz.core.model`, which ties these parts into the
:class:`~attnviz.core.model.Transformer`. Attention itself lives in :mod:`attnviz.core.attention`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import ACTIVE_RECORDER, MultiHeadAttention
from .cache import KVBuffer
from .config import ModelConfig
from .positions import RelativePositionBias, rotary_angles, rotary_frequencies


class RMSNorm(nn.Module):
    """T5's norm: scale by the root mean square (in float32; a float64 model in float64), no
    centring, no bias.

    With an ``offset`` (Gemma: 1.0) the scale is ``offset + weight``, applied in float32
    before the cast back, as Gemma computes it; the weight starts at ``1 - offset``.
    """

    def __init__(self, d_model: int, eps: float, offset: float = 0.0):
        super().__init__()
        self.eps, self.offset = eps, offset
        self.weight = nn.Parameter(torch.full((d_model,), 1.0 - offset))

    def forward(self, x: Tensor) -> Tensor:
        """``x [..., W]`` -> ``[..., W]`` (W: D, or Dh for a per-head QK-norm)."""
        wide = x.to(torch.promote_types(x.dtype, torch.float32))  # float32, float64 kept
        variance = wide.pow(2).mean(-1, keepdim=True)  # [..., 1]
        normed = wide * torch.rsqrt(variance + self.eps)  # [..., W] float32 (or float64)
        if self.offset:
            return (normed * (self.offset + self.weight.to(normed.dtype))).to(x.dtype)
        return self.weight * normed.to(x.dtype)


def tap(layer: nn.Module, point: str, x: Tensor) -> Tensor:
    """Hand the residual stream (or a sublayer's output) at ``point`` of ``layer`` to the
    active recorder, which may keep it or edit it (:meth:`attnviz.core.edits.Edit.edit_stream`);
    ``x`` itself when nothing records. Points: ``"resid_pre"`` (the layer's input),
    ``"attn"``, ``"cross"``, ``"mlp"`` (each sublayer's output, before any post-sublayer norm
    and dropout), ``"resid_post"`` (the layer's output). Shapes ``[B, T, D]``."""
    recorder = ACTIVE_RECORDER.get()
    stream = getattr(recorder, "stream", None)
    return x if stream is None else stream(layer, point, x)


def make_norm(cfg: ModelConfig, width: int | None = None) -> nn.Module:
    """The config's norm over D (or over ``width``): LayerNorm or RMSNorm."""
    width = cfg.d_model if width is None else width
    if cfg.norm == "rms":
        return RMSNorm(width, cfg.layer_norm_eps, cfg.norm_offset)
    return nn.LayerNorm(width, eps=cfg.layer_norm_eps)


def gelu_new(x: Tensor) -> Tensor:
    """The tanh GELU written out as GPT-2 and T5 v1.1 compute it (transformers' ``gelu_new``):
    the same function as ``F.gelu(approximate="tanh")``, not the same bits (up to 4.8e-7)."""
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


def gelu_fast(x: Tensor) -> Tensor:
    """transformers' ``gelu_fast``: the tanh GELU with its constants folded."""
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


#: each activation by the formula its family computes, so imports are exact to the last bit
ACTIVATION_FNS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": gelu_new,
    "gelu_fast": gelu_fast,
    "silu": F.silu,
}


# -- the layers' math as functions: the modules below and the fused step (core.step) call them
def sublayer_input(x: Tensor, norm: Callable[[Tensor], Tensor], first: bool) -> Tensor:
    """What a residual block's sublayer reads: ``norm(x)`` pre-norm (``first``), else ``x``."""
    return norm(x) if first else x


def residual_add(x: Tensor, out: Tensor, norm: Callable[[Tensor], Tensor], first: bool) -> Tensor:
    """A residual block's output from the sublayer's ``out``: ``x + out`` pre-norm
    (``first``), ``norm(x + out)`` post-norm."""
    return x + out if first else norm(x + out)


def residual(
    x: Tensor, sublayer: Callable[[Tensor], Tensor], norm: Callable[[Tensor], Tensor], first: bool
) -> Tensor:
    """One residual block around ``sublayer``: pre-norm (``first``) ``x + sublayer(norm(x))``,
    post-norm ``norm(x + sublayer(x))``. ``x [B, T, D]`` (``[B, D]`` in a fused step, which
    calls the two halves, :func:`sublayer_input` and :func:`residual_add`)."""
    return residual_add(x, sublayer(sublayer_input(x, norm, first)), norm, first)


def feed_forward(
    x: Tensor,
    up: Callable[[Tensor], Tensor],
    act: Callable[[Tensor], Tensor],
    down: Callable[[Tensor], Tensor],
    gate: Callable[[Tensor], Tensor] | None = None,
    dropout: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """The position-wise feed-forward ``down(dropout(act(up(x)) [* gate(x)]))``:
    ``[..., D]`` -> ``[..., d_ff]`` -> ``[..., D]``. ``up``, ``gate``, ``down``: the linears
    (modules, or the fused step's products with the same weights)."""
    h = act(up(x))  # [..., d_ff]
    if gate is not None:
        h = h * gate(x)
    return down(h if dropout is None else dropout(h))


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
        return feed_forward(x, self.linear1, self.act, self.linear2, self.gate, self.dropout)


def _attention(cfg: ModelConfig, kind: str, layer: int) -> MultiHeadAttention:
    query_scale = None if cfg.query_pre_attn_scalar is None else cfg.query_pre_attn_scalar**-0.5
    qk_norms = (make_norm(cfg, cfg.head_dim), make_norm(cfg, cfg.head_dim)) if cfg.qk_norm else None
    return MultiHeadAttention(
        cfg.d_model, cfg.n_heads, cfg.dropout, kind, layer,
        head_dim=cfg.head_dim, bias=cfg.bias, scale=cfg.scale_attention,
        n_kv_heads=cfg.kv_heads if kind != "cross" else None, qkv_bias=cfg.qkv_bias,
        query_scale=query_scale, qk_norms=qk_norms,
    )  # fmt: skip


class HeadTransform(nn.Module):
    """BERT's masked-LM head before the output projection: ``norm(act(dense(x)))``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.act = ACTIVATION_FNS[cfg.activation]
        self.norm = make_norm(cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))  # [B, T, D]


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual block (post- or pre-norm)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.stack, self.index = "encoder", layer
        self.self_attn = _attention(cfg, "encoder_self", layer)
        self.ff = None if cfg.attn_only else FeedForward(cfg)
        self.norm1 = make_norm(cfg)
        self.norm2 = None if cfg.attn_only else make_norm(cfg)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.dropout2 = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None,
        position_bias: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """``x [B, Ts, D]``, ``pad_mask [B, Ts]``, bias ``[1, H, Ts, Ts]`` -> ``[B, Ts, D]``."""

        def attend(h: Tensor) -> Tensor:
            out = self.self_attn(
                h, key_padding_mask=pad_mask, position_bias=position_bias, rotary=rotary
            )
            return self.dropout1(tap(self, "attn", out))

        def feed(h: Tensor) -> Tensor:
            return self.dropout2(tap(self, "mlp", self.ff(h)))

        x = residual(tap(self, "resid_pre", x), attend, self.norm1, self.norm_first)
        x = x if self.ff is None else residual(x, feed, self.norm2, self.norm_first)
        return tap(self, "resid_post", x)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, feed-forward; each a residual block.

    A decoder-only model's layers have no cross-attention (``cross_attn`` and ``norm2`` are
    None): masked self-attention, then feed-forward (``norm3``). An attention-only model's
    layers have no feed-forward (``ff`` and its norm are None). With ``sandwich_norm``
    (Gemma) ``post_norm1`` and ``post_norm3`` norm each sublayer's output before the residual
    add; ``window`` is the layer's sliding window (None: it sees every earlier key).
    """

    def __init__(self, cfg: ModelConfig, layer: int, cross: bool = True):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.stack, self.index = "decoder", layer
        self.self_attn = _attention(cfg, "decoder_self", layer)
        self.cross_attn = _attention(cfg, "cross", layer) if cross else None
        self.ff = None if cfg.attn_only else FeedForward(cfg)
        self.norm1 = make_norm(cfg)
        self.norm2 = make_norm(cfg) if cross else None
        self.norm3 = None if cfg.attn_only else make_norm(cfg)
        self.post_norm1 = make_norm(cfg) if cfg.sandwich_norm else None
        self.post_norm3 = make_norm(cfg) if cfg.sandwich_norm else None
        self.window = cfg.layer_window(layer) if not cross else None
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
        rotary: tuple[Tensor, Tensor] | None = None,
        window: Tensor | None = None,
    ) -> Tensor:
        """``x [B, Tt, D]``, ``memory [B, Ts, D]`` (None without cross-attention) ->
        ``[B, Tt, D]``; ``window [Tt, Tk]`` bool, the sliding-window mask of a local layer."""

        def self_block(h: Tensor) -> Tensor:
            out = self.self_attn(
                h,
                key_padding_mask=tgt_pad_mask,
                attn_mask=causal,
                cache=self_cache,
                position_bias=position_bias,
                rotary=rotary,
                window=window,
            )
            out = tap(self, "attn", out)
            if self.post_norm1 is not None:
                out = self.post_norm1(out)
            return self.dropout1(out)

        def cross_block(h: Tensor) -> Tensor:
            out = self.cross_attn(h, memory, key_padding_mask=src_pad_mask, kv=cross_kv)
            return self.dropout2(tap(self, "cross", out))

        def feed(h: Tensor) -> Tensor:
            out = tap(self, "mlp", self.ff(h))
            if self.post_norm3 is not None:
                out = self.post_norm3(out)
            return self.dropout3(out)

        x = residual(tap(self, "resid_pre", x), self_block, self.norm1, self.norm_first)
        if self.cross_attn is not None:
            x = residual(x, cross_block, self.norm2, self.norm_first)
        x = x if self.ff is None else residual(x, feed, self.norm3, self.norm_first)
        return tap(self, "resid_post", x)


class Stack(nn.Module):
    """A list of layers plus what the stack owns around them.

    ``norm``: a final norm (``nn.Transformer``, mBART, Pegasus, T5); ``embed_norm``: a norm on
    the embeddings (BART); ``pos_embed``: a learned position table (BART);
    ``position_bias``: T5's relative position bias, computed once per pass for all layers;
    rotary positions (:meth:`rotary`): the angles, likewise once per pass.
    """

    def __init__(self, layers: list[nn.Module], cfg: ModelConfig, decoder: bool):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList(layers)
        self.norm = make_norm(cfg) if cfg.final_norm else None
        self.embed_norm = make_norm(cfg) if cfg.embed_norm else None
        kind, length = cfg.stack_positions(decoder)
        self.pos_embed = (
            nn.Embedding(length + cfg.position_offset, cfg.d_model) if kind == "learned" else None
        )
        self.position_bias = (
            RelativePositionBias(cfg, bidirectional=not decoder) if kind == "relative" else None
        )

    def bias(self, tq: int, tk: int, start: int = 0) -> Tensor | None:
        """Relative position bias ``[1, H, Tq, Tk]`` of this stack's self-attention, or None."""
        return None if self.position_bias is None else self.position_bias(tq, tk, start)

    def rotary(
        self, start: int, length: int, like: Tensor, local: bool = False
    ) -> tuple[Tensor, Tensor] | None:
        """``(cos, sin)`` ``[T, R]`` of positions ``start..start+length-1`` (dtype of
        ``like``), or None without rotary positions; ``local``: the sliding layers' own base
        (``rope_local_theta``) where the config sets one."""
        if self.config.positions != "rotary":
            return None
        inv_freq = rotary_frequencies(self.config, like.device, local=local)
        return rotary_angles(inv_freq, start, length, like.dtype)

    def finish(self, x: Tensor) -> Tensor:
        return x if self.norm is None else self.norm(x)


class AudioFrontEnd(nn.Module):
    """Whisper's convolutional front-end: log-mel features ``[B, n_mels, 2 * Ts]`` ->
    ``[B, Ts, D]`` through two Conv1d of kernel 3 (the second of stride 2), each with GELU."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.conv1 = nn.Conv1d(cfg.n_mels, cfg.d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(cfg.d_model, cfg.d_model, kernel_size=3, stride=2, padding=1)

    def forward(self, features: Tensor) -> Tensor:
        x = F.gelu(self.conv1(features))  # [B, D, 2 * Ts]
        x = F.gelu(self.conv2(x))  # [B, D, Ts]
        return x.transpose(1, 2)  # [B, Ts, D]
