"""The Transformer, written out by hand: encoder-decoder, decoder-only or encoder-only
(``ModelConfig.arch``): one class whose stacks are optional.

Shape legend: B batch, H heads, Tq/Tk query/key length, Ts/Tt source/target length,
D model width, Dh head width (D / H, or ``config.d_head``), V vocabulary.

Attention (:class:`MultiHeadAttention`: the fused kernel, or the explicit math that reports
to the per-call recorder) lives in :mod:`attnviz.core.attention`, the decoder's key/value cache in
:mod:`attnviz.core.cache`; both import from here too. This module keeps the layers, the stacks and
the :class:`Transformer` that ties them together.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import masks
from .attention import ACTIVE_RECORDER as ACTIVE_RECORDER
from .attention import AttentionHook as AttentionHook
from .attention import MultiHeadAttention
from .attention import Recorder as Recorder
from .attention import eager_attention as eager_attention
from .cache import DecoderCache, KVBuffer
from .config import ModelConfig
from .errors import InputError
from .positions import (
    RelativePositionBias,
    encoder_position_table,
    position_table,
    rotary_angles,
    rotary_frequencies,
)
from .positions import sinusoidal_positions as sinusoidal_positions  # imported from here too

KINDS = ("encoder_self", "decoder_self", "cross")


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
        n_kv_heads=cfg.kv_heads if kind != "cross" else None, qkv_bias=cfg.qkv_bias,
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
            return self.dropout1(out)

        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x if self.ff is None else x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + attend(x))
        return x if self.ff is None else self.norm2(x + self.dropout2(self.ff(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, feed-forward; each a residual block.

    A decoder-only model's layers have no cross-attention (``cross_attn`` and ``norm2`` are
    None): masked self-attention, then feed-forward (``norm3``). An attention-only model's
    layers have no feed-forward (``ff`` and its norm are None).
    """

    def __init__(self, cfg: ModelConfig, layer: int, cross: bool = True):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.self_attn = _attention(cfg, "decoder_self", layer)
        self.cross_attn = _attention(cfg, "cross", layer) if cross else None
        self.ff = None if cfg.attn_only else FeedForward(cfg)
        self.norm1 = make_norm(cfg)
        self.norm2 = make_norm(cfg) if cross else None
        self.norm3 = None if cfg.attn_only else make_norm(cfg)
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
    ) -> Tensor:
        """``x [B, Tt, D]``, ``memory [B, Ts, D]`` (None without cross-attention) ->
        ``[B, Tt, D]``."""

        def self_block(h: Tensor) -> Tensor:
            out = self.self_attn(
                h,
                key_padding_mask=tgt_pad_mask,
                attn_mask=causal,
                cache=self_cache,
                position_bias=position_bias,
                rotary=rotary,
            )
            return self.dropout1(out)

        def cross_block(h: Tensor) -> Tensor:
            out = self.cross_attn(h, memory, key_padding_mask=src_pad_mask, kv=cross_kv)
            return self.dropout2(out)

        cross = self.cross_attn is not None
        if self.norm_first:
            x = x + self_block(self.norm1(x))
            if cross:
                x = x + cross_block(self.norm2(x))
            return x if self.ff is None else x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self_block(x))
        if cross:
            x = self.norm2(x + cross_block(x))
        return x if self.ff is None else self.norm3(x + self.dropout3(self.ff(x)))


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

    def rotary(self, start: int, length: int, like: Tensor) -> tuple[Tensor, Tensor] | None:
        """``(cos, sin)`` ``[T, R]`` of positions ``start..start+length-1`` (dtype of
        ``like``), or None without rotary positions."""
        if self.config.positions != "rotary":
            return None
        inv_freq = rotary_frequencies(self.config, like.device)
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


class Transformer(nn.Module):
    """Transformer ("Attention Is All You Need"), every part written out, in three kinds.

    Encoder-decoder: ``model(src, tgt)`` gives logits ``[B, Tt, V]``; :meth:`encode` and
    :meth:`decode` run the halves separately, and :meth:`decode` with a
    :class:`DecoderCache` takes one new token at a time. Decoder-only (no ``encoder``, no
    ``src_embed``): ``model(ids)`` = ``model.decode(ids)`` (no memory), and the cache comes
    from ``init_cache(None, batch=B)``. Encoder-only (no ``decoder``, no ``tgt_embed``):
    ``model(ids)`` gives the output projection of :meth:`encode`'s states (through
    ``head`` where the config has one). Masks follow :mod:`attnviz.core.masks` (bool, True =
    blocked); the causal mask of the decoder is built here and is always on.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        cfg = self.config = config
        d = cfg.d_model
        audio = cfg.source == "audio"
        # an audio model reads features through the front-end: it has no source table
        self.frontend = AudioFrontEnd(cfg) if audio and cfg.has_encoder else None
        self.src_embed = (
            nn.Embedding(cfg.src_vocab_size, d) if cfg.has_encoder and not audio else None
        )
        if not cfg.has_decoder:
            self.tgt_embed = None
        elif cfg.share_embeddings and self.src_embed is not None:
            self.tgt_embed = self.src_embed
        else:
            self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, d)
        self.type_embed = nn.Embedding(cfg.type_vocab_size, d) if cfg.type_vocab_size else None
        self.register_buffer("pe", position_table(cfg), persistent=False)
        # the encoder's own fixed table where its positions differ from the decoder's (Whisper)
        self.register_buffer("encoder_pe", encoder_position_table(cfg), persistent=False)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.encoder = (
            Stack([EncoderLayer(cfg, i) for i in range(cfg.n_encoder_layers)], cfg, decoder=False)
            if cfg.has_encoder
            else None
        )
        self.decoder = (
            Stack(
                [DecoderLayer(cfg, i, cross=cfg.has_encoder) for i in range(cfg.n_decoder_layers)],
                cfg,
                decoder=True,
            )
            if cfg.has_decoder
            else None
        )
        self.head = HeadTransform(cfg) if cfg.head_transform else None
        self.generator = nn.Linear(d, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self._reset_parameters()
        if cfg.tie_output:
            table = self.tgt_embed if self.tgt_embed is not None else self.src_embed
            self.generator.weight = table.weight

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
    def _check_ids(
        self, ids: Tensor, name: str, vocab: int, start: int = 0, limit: int | None = None
    ) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != 2:
            got = list(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
            raise InputError(f"{name} must be token ids of shape [B, T], got {got}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise InputError(f"{name} must be an integer tensor (token ids), got {ids.dtype}")
        if ids.shape[1] == 0:
            raise InputError(f"{name} is empty: give at least one token")
        field = "max_len" if limit is None else "max_source_len"
        limit = self.config.max_len if limit is None else limit
        if start + ids.shape[1] > limit:
            raise InputError(
                f"{name} reaches position {start + ids.shape[1]}, past this model's {field}={limit}"
            )
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab:
            raise InputError(
                f"{name} holds id {lo if lo < 0 else hi}, outside the vocabulary 0..{vocab - 1}"
            )

    def _embed(
        self,
        table: nn.Embedding,
        ids: Tensor,
        start: int = 0,
        stack: Stack | None = None,
        types: Tensor | None = None,
    ) -> Tensor:
        """Token embeddings plus positions of one stack (default: the encoder's for the source
        table), plus token types where the model has them: ``[B, T]`` -> ``[B, T, D]``."""
        cfg = self.config
        if stack is None:
            stack = self.encoder if table is self.src_embed else self.decoder
        x = table(ids)  # [B, T, D]
        if cfg.scale_embeddings:
            x = x * math.sqrt(cfg.d_model)
        if self.type_embed is not None and stack is self.encoder:
            x = x + self._types(types, ids)
        elif types is not None:
            raise InputError("token_type_ids given, but this model has no token-type embedding")
        return self._position(x, start, stack)

    def _position(self, x: Tensor, start: int, stack: Stack) -> Tensor:
        """Add the stack's positions (from ``start``) to ``x [B, T, D]``, then its embedding
        norm and dropout."""
        offset = self.config.position_offset
        rows = slice(start + offset, start + offset + x.shape[1])
        table = self.encoder_pe if stack is self.encoder and self.encoder_pe is not None else None
        if table is None and stack.pos_embed is None:
            table = self.pe
        if table is not None:
            x = x + table[rows].to(x.dtype)
        elif stack.pos_embed is not None:
            x = x + stack.pos_embed.weight[rows].to(x.dtype)
        if stack.embed_norm is not None:
            x = stack.embed_norm(x)
        return self.emb_dropout(x)

    def _check_features(self, features: Tensor) -> None:
        cfg = self.config
        frames = 2 * cfg.stack_positions(decoder=False)[1]
        want = f"[B, {cfg.n_mels}, {frames}]"
        if not isinstance(features, Tensor) or features.dim() != 3:
            got = list(features.shape) if isinstance(features, Tensor) else type(features).__name__
            raise InputError(f"an audio model encodes log-mel features {want}, got {got}")
        if not features.is_floating_point():
            raise InputError(f"audio features must be floats, got {features.dtype}")
        if tuple(features.shape[1:]) != (cfg.n_mels, frames):
            raise InputError(
                f"audio features must be {want} (30 s, padded), got {list(features.shape)}"
            )
        if not bool(torch.isfinite(features).all()):
            raise InputError("audio features hold NaN or infinite values")

    def _types(self, types: Tensor | None, ids: Tensor) -> Tensor:
        """Token-type embeddings ``[B, T, D]`` (type 0 everywhere when ``types`` is None)."""
        n = self.config.type_vocab_size
        if types is None:
            return self.type_embed.weight[0]  # [D], the same for every position
        if not isinstance(types, Tensor) or tuple(types.shape) != tuple(ids.shape):
            got = list(types.shape) if isinstance(types, Tensor) else type(types).__name__
            raise InputError(
                f"token_type_ids must have the ids' shape {list(ids.shape)}, got {got}"
            )
        if (
            types.dtype not in (torch.int64, torch.int32)
            or int(types.min()) < 0
            or int(types.max()) >= n
        ):
            raise InputError(f"token_type_ids must be integer ids in 0..{n - 1}")
        return self.type_embed(types)

    # -- forward ---------------------------------------------------------------------------
    def encode(
        self,
        src: Tensor,
        src_pad_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """Run the encoder.

        Args:
            src: ``[B, Ts]`` source ids; for an audio model (``config.source == "audio"``)
                log-mel features ``[B, n_mels, 2 * Ts]`` (Whisper: ``[B, 80, 3000]``).
            src_pad_mask: ``[B, Ts]`` bool, True at PAD (or a float additive mask).
            token_type_ids: ``[B, Ts]`` segment ids (BERT; default all 0) where the config has
                ``type_vocab_size``.
        Returns:
            memory ``[B, Ts, D]`` (an encoder-only model's last hidden states).
        """
        if self.encoder is None:
            raise InputError("a decoder-only model has no encoder: use model.decode(ids)")
        if self.frontend is not None:  # log-mel features [B, n_mels, 2 * Ts]
            self._check_features(src)
            if src_pad_mask is not None or token_type_ids is not None:
                raise InputError(
                    "an audio model takes no src_pad_mask or token_type_ids: features are "
                    "padded to 30 s"
                )
            pad = None
            weight = self.frontend.conv1.weight
            x = self._position(self.frontend(src.to(weight.dtype)), 0, self.encoder)
        else:
            limit = self.config.max_source_len  # None: max_len
            self._check_ids(src, "src", self.config.src_vocab_size, limit=limit)
            pad = masks.as_bool_mask(
                src_pad_mask, tuple(src.shape), "src_pad_mask", "[B, Ts]", src.device
            )
            x = self._embed(self.src_embed, src, stack=self.encoder, types=token_type_ids)
        t = x.shape[1]
        bias = self.encoder.bias(t, t)  # [1, H, Ts, Ts] or None
        rotary = self.encoder.rotary(0, t, x)  # [Ts, R] twice, or None
        for layer in self.encoder.layers:
            x = layer(x, pad, bias, rotary)
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
            memory: encoder output ``[B, Ts, D]``; unused (may be None) with a cache, and
                always None for a decoder-only model.
            src_pad_mask: ``[B, Ts]`` bool, True at PAD; with a cache it comes from the cache.
            tgt_pad_mask: ``[B, Tt]`` bool, True at PAD; not supported with a cache.
            cache: from :meth:`init_cache`; keys/values of earlier positions are reused.
        Returns:
            logits ``[B, Tt, V]``.
        """
        if self.decoder is None:
            raise InputError("an encoder-only model has no decoder: use model(ids) or encode()")
        start = 0 if cache is None else cache.length
        self._check_ids(tgt, "tgt", self.config.tgt_vocab_size, start)
        b, t = tgt.shape
        cross = self.encoder is not None
        if not cross and (memory is not None or src_pad_mask is not None):
            raise InputError("a decoder-only model attends to no encoder: give no memory")
        if cache is None:
            if memory is None and cross:
                raise InputError("decode() needs the encoder memory when no cache is given")
            if cross and memory.shape[0] != b:
                raise InputError(f"tgt has batch {b} but memory has batch {memory.shape[0]}")
            src_pad = None
            if cross:
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
        rotary = self.decoder.rotary(start, t, x)  # [Tt, R] twice, or None
        for i, layer in enumerate(self.decoder.layers):
            self_cache = cache.self_kv[i] if cache is not None else None
            cross_kv = cache.cross_kv[i] if cache is not None and cross else None
            x = layer(x, memory, tgt_pad, src_pad, causal, self_cache, cross_kv, bias, rotary)
        x = self.decoder.finish(x)
        if self.config.scale_decoder_output:  # T5 v1.0 rescales before its tied lm_head
            x = x * self.config.d_model**-0.5
        return self.generator(x)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor | None = None,
        src_pad_mask: Tensor | None = None,
        tgt_pad_mask: Tensor | None = None,
        *,
        pad_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """Teacher-forced pass: ``src [B, Ts]``, ``tgt [B, Tt]`` -> logits ``[B, Tt, V]``.

        A decoder-only or encoder-only model takes one id tensor: ``model(ids, pad_mask=...)``
        -> logits ``[B, T, V]`` (the next token's for decoder-only, each position's own for
        encoder-only); ``pad_mask`` ``[B, T]`` bool, True at PAD.
        """
        cfg = self.config
        if cfg.arch == "encoder-decoder":
            if tgt is None:
                raise InputError("an encoder-decoder model needs src and tgt: model(src, tgt)")
            if pad_mask is not None:
                raise InputError(
                    "pad_mask is for one-stack models; give src_pad_mask / tgt_pad_mask"
                )
            memory = self.encode(src, src_pad_mask, token_type_ids)
            return self.decode(tgt, memory, src_pad_mask, tgt_pad_mask)
        if tgt is not None:
            raise InputError(f"a {cfg.arch} model takes one id tensor: model(ids, pad_mask=...)")
        given = [m for m in (pad_mask, src_pad_mask, tgt_pad_mask) if m is not None]
        if len(given) > 1:
            raise InputError("give one padding mask (pad_mask)")
        mask = given[0] if given else None
        if cfg.arch == "decoder-only":
            if token_type_ids is not None:
                raise InputError("a decoder-only model has no token types")
            return self.decode(src, None, tgt_pad_mask=mask)
        x = self.encode(src, mask, token_type_ids)  # [B, T, D]
        if self.head is not None:
            x = self.head(x)
        return self.generator(x)

    def init_cache(
        self,
        memory: Tensor | None,
        src_pad_mask: Tensor | None = None,
        capacity: int | None = None,
        *,
        batch: int = 1,
    ) -> DecoderCache:
        """Cache for incremental decoding: cross-attention K/V computed once, here.

        Args:
            memory: encoder output ``[B, Ts, D]``; None for a decoder-only model.
            src_pad_mask: ``[B, Ts]`` bool, True at PAD.
            capacity: most target positions to be fed (default ``config.max_len``); a
                decoder-only model's prompt counts.
            batch: rows B of a decoder-only model's cache (an encoder-decoder's is memory's).
        """
        cfg = self.config
        if self.decoder is None:
            raise InputError("an encoder-only model has no decoder to cache")
        capacity = min(capacity or cfg.max_len, cfg.max_len)
        if self.encoder is None:
            if memory is not None:
                raise InputError("a decoder-only model attends to no encoder: give no memory")
            b, cross_kv, src_pad = batch, [], None
        else:
            src_pad = masks.as_bool_mask(
                src_pad_mask, tuple(memory.shape[:2]), "src_pad_mask", "[B, Ts]", memory.device
            )
            b = memory.shape[0]
            cross_kv = [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]
        return DecoderCache(
            self_kv=[
                KVBuffer(b, cfg.kv_heads, capacity, cfg.head_dim) for _ in self.decoder.layers
            ],
            cross_kv=cross_kv,
            src_pad_mask=src_pad,
        )

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.to_dict().items())

    def num_parameters(self) -> int:
        """Trainable parameters, shared ones counted once."""
        return sum(p.numel() for p in self.parameters())
