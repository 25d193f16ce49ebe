"""The Transformer, written out by hand: encoder-decoder, decoder-only or encoder-only
(``ModelConfig.arch``): one class whose stacks are optional.

Shape legend: B batch, H heads, Tq/Tk query/key length, Ts/Tt source/target length,
D model width, Dh head width (D / H, or ``config.d_head``), V vocabulary.

Attention (:class:`MultiHeadAttention`: the fused kernel, or the explicit math that reports
to the per-call recorder) lives in :mod:`attnviz.core.attention`, the decoder's key/value cache in
:mod:`attnviz.core.cache`; both import from here too. The layers and stacks live in
:mod:`attnviz.core.layers`; this module keeps the :class:`Transformer` that ties them together.
"""

from __future__ import annotations

import math

import torch
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
from .layers import AudioFrontEnd, DecoderLayer, EncoderLayer, HeadTransform, Stack
from .positions import (
    encoder_position_table,
    position_table,
)
from .positions import sinusoidal_positions as sinusoidal_positions  # imported from here too

KINDS = ("encoder_self", "decoder_self", "cross")


def embed_scale(cfg: ModelConfig, dtype: torch.dtype) -> float | Tensor:
    """What token embeddings are multiplied by: sqrt(D), rounded to the table's ``dtype``
    first where the config says so (Gemma: 55.4256 becomes 55.5 in bfloat16)."""
    if cfg.embed_scale_in_dtype:
        return torch.tensor(cfg.d_model**0.5).to(dtype)  # as Gemma computes it
    return math.sqrt(cfg.d_model)


def add_positions(
    x: Tensor, table: Tensor | None, rows: slice | int, norm: nn.Module | None
) -> Tensor:
    """Token embeddings plus their positions' rows of ``table`` (cast to ``x``'s dtype; no
    table: none), then the stack's embedding norm where it has one: ``x [B, T, D]`` with
    ``rows`` a slice, or one step's ``[B, D]`` with ``rows`` an int."""
    if table is not None:
        x = x + table[rows].to(x.dtype)
    return x if norm is None else norm(x)


def output_scale(cfg: ModelConfig) -> float | None:
    """What the decoder's output is multiplied by before the output projection: D^-0.5 where
    ``scale_decoder_output`` (T5 v1.0 with its tied lm_head), else None."""
    return cfg.d_model**-0.5 if cfg.scale_decoder_output else None


def project_out(x: Tensor, scale: float | None, project) -> Tensor:
    """The output projection of the decoder's (final-normed) output ``[..., D]`` -> logits
    ``[..., V]``, scaled first by :func:`output_scale`."""
    return project(x if scale is None else x * scale)


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
        audio = cfg.reads_audio
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
            x = x * embed_scale(cfg, x.dtype)
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
        if table is None:
            table = self.pe if stack.pos_embed is None else stack.pos_embed.weight
        return self.emb_dropout(add_positions(x, table, rows, stack.embed_norm))

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
            src: ``[B, Ts]`` source ids; for an audio model (``config.reads_audio``)
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
        *,
        logits: bool = True,
    ) -> Tensor:
        """Run the decoder and the output projection.

        Args:
            tgt: ``[B, Tt]`` target ids (with a cache: only the new ones).
            memory: encoder output ``[B, Ts, D]``; unused (may be None) with a cache, and
                always None for a decoder-only model.
            src_pad_mask: ``[B, Ts]`` bool, True at PAD; with a cache it comes from the cache.
            tgt_pad_mask: ``[B, Tt]`` bool, True at PAD; not supported with a cache.
            cache: from :meth:`init_cache`; keys/values of earlier positions are reused.
            logits: False skips the output projection (a prompt run only to fill the cache,
                as ``generate()`` keeps only the last position's logits).
        Returns:
            logits ``[B, Tt, V]``; with ``logits=False`` the decoder's output ``[B, Tt, D]``.
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
        local = self.decoder.rotary(start, t, x, local=True)  # the sliding layers' own base
        windows: dict[int, Tensor] = {}  # sliding window -> its mask [Tt, start + Tt]
        for i, layer in enumerate(self.decoder.layers):
            self_cache = cache.self_kv[i] if cache is not None else None
            cross_kv = cache.cross_kv[i] if cache is not None and cross else None
            w = layer.window
            if w is not None and w not in windows:
                windows[w] = masks.sliding_window_mask(t, w, start + t, device=tgt.device)
            x = layer(
                x, memory, tgt_pad, src_pad, causal, self_cache, cross_kv, bias,
                rotary if w is None else local, windows.get(w),
            )  # fmt: skip
        x = self.decoder.finish(x)
        if not logits:
            return x
        return project_out(x, output_scale(self.config), self.generator)

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
        if cfg.has_cross:
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
        if cfg.decoder_only:
            if token_type_ids is not None:
                raise InputError("a decoder-only model has no token types")
            return self.decode(src, None, tgt_pad_mask=mask)
        if not cfg.lm_head:
            raise InputError("this base encoder has no output head: use model.encode(ids)")
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
