"""One cached decoder step, fused: the math of ``Transformer.decode(cache=...)`` for one new
token per row, written as one function over weights gathered once per decode.

A cached step of a small model is almost all per-call overhead (module calls, mask building,
id checks), not arithmetic, and on a large one every module call still costs. :class:`FusedStep`
runs the same operations on the same weights in the same order, without the module calls, with
keys/values written in place into the :class:`~attnviz.core.model.DecoderCache`. Where the
caller holds column-major copies of the weights (:mod:`attnviz.core.gemv`), it multiplies them.

Where a recorder (``attnviz.core.record``) watches or edits an attention module, the step
attends through the recorder's hook exactly as the module would
(:func:`~attnviz.core.attention.watched_attention`: its mask edits, the explicit softmax, its
weight and head edits, then what it keeps): the weights recorded are the weights that met the
values. Elsewhere it takes the fused ``scaled_dot_product_attention`` kernel. Tests hold both
to the module path: the same logits, and the same recorded tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import gemv, masks
from .attention import watched_attention
from .layers import RMSNorm, feed_forward, residual_add, sublayer_input
from .model import (
    ACTIVE_RECORDER,
    DecoderCache,
    Transformer,
    add_positions,
    embed_scale,
    output_scale,
    project_out,
)
from .positions import apply_rotary, rotary_angles, rotary_frequencies


def why_not_fused(model: Transformer) -> str | None:
    """Why the fused step cannot stand in for the module path now, or None when it can: in
    training mode (dropout), or where a PyTorch forward hook would see a module the fused step
    does not call (a probe or a steering hook on a decoder layer, the embedding or the output
    projection). The recorder's own hooks are not module hooks: the fused step runs them."""
    if model.training:
        return "the model is in training mode (dropout)"
    if global_module_hooks():
        return "a global module forward hook is registered"
    if getattr(ACTIVE_RECORDER.get(), "edits_streams", False):
        return "an edit of the residual stream is active (it is tapped on the module path)"
    for m in (model.tgt_embed, model.generator, *model.decoder.modules()):
        if m._forward_hooks or m._forward_pre_hooks:
            return f"a forward hook is registered on {type(m).__name__}"
    return None


def global_module_hooks() -> bool:
    """Whether a forward hook is registered for every module
    (``torch.nn.modules.module.register_module_forward_hook`` and its pre-hook)."""
    from torch.nn.modules import module as torch_module

    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks)


def fused_step(
    model: Transformer, cache: DecoderCache, copies: gemv.Copies | None = None
) -> FusedStep | None:
    """A :class:`FusedStep` for ``model`` and ``cache``, or None where the module path must run."""
    return None if why_not_fused(model) else FusedStep(model, cache, copies)


def _norm(module: nn.Module | None) -> Callable[[Tensor], Tensor] | None:
    """The norm as a plain function (LayerNorm through ``F.layer_norm``), None for no norm."""
    if module is None or isinstance(module, RMSNorm):
        return module
    shape, w, b, eps = module.normalized_shape, module.weight, module.bias, module.eps
    return lambda x: F.layer_norm(x, shape, w, b, eps)


def _bias_of(linear_bias: Tensor | None, part: slice) -> Tensor | None:
    return None if linear_bias is None else linear_bias[part]


def _product(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """A linear as a plain function of its (possibly column-major) weight and bias."""
    return partial(F.linear, weight=weight, bias=bias)


class FusedStep:
    """Feed one token per row through the decoder with a cache; logits of the next token.

    Args:
        model: the Transformer (eval mode; its weights are read, never copied here).
        cache: from ``model.init_cache``; keys/values of this step are appended to it, so
            the module path and this one can take turns on the same cache.
        copies: column-major copies of the weights (:class:`~attnviz.core.gemv.Copies`) that
            stand in for them where they are current: faster one-row products on the CPU.

    Call with ``tokens [B]`` (ids already checked) -> logits ``[B, V]``.
    """

    def __init__(self, model: Transformer, cache: DecoderCache, copies: gemv.Copies | None = None):
        cfg = model.config
        self.cache = cache
        self.norm_first = cfg.norm_first
        self.inner = cfg.n_heads * cfg.head_dim
        self.kv_inner = cfg.kv_heads * cfg.head_dim
        self.heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.kv_heads = cfg.kv_heads
        device = model.tgt_embed.weight.device
        self.inv_freq = rotary_frequencies(cfg, device) if cfg.rotary_width else None
        # the sliding layers' own rotary base (Gemma 3), else the same frequencies
        self.local_freq = (
            rotary_frequencies(cfg, device, local=True)
            if cfg.rotary_width and cfg.rope_local_theta is not None
            else self.inv_freq
        )
        stack = model.decoder
        self.table = model.tgt_embed.weight  # [V, D]
        self.embed_scale = embed_scale(cfg, self.table.dtype) if cfg.scale_embeddings else None
        self.offset = cfg.position_offset
        pos = model.pe  # [max_len + offset, D], a learned table, or None (T5)
        self.positions = stack.pos_embed.weight if pos is None and stack.pos_embed else pos
        self.embed_norm = _norm(stack.embed_norm)
        self.bias = stack.bias if stack.position_bias is not None else None
        self.final = _norm(stack.norm)
        self.out_scale = output_scale(cfg)
        # the same values, laid out for one-row products where the caller holds copies
        lay = copies.lay if copies is not None else lambda w: w

        self.generator = (lay(model.generator.weight), model.generator.bias)
        self.project = _product(*self.generator)
        inner = self.inner
        self.layers = []
        for layer in stack.layers:
            sa, ca, ff = layer.self_attn, layer.cross_attn, layer.ff
            self.layers.append(
                (
                    (lay(sa.in_proj_weight), sa.in_proj_bias, sa.score_scale, sa),
                    (lay(sa.out_proj.weight), sa.out_proj.bias),
                    None
                    if ca is None
                    else (ca.in_proj_weight[:inner], _bias_of(ca.in_proj_bias, slice(0, inner))),
                    None
                    if ca is None
                    else (lay(ca.out_proj.weight), ca.out_proj.bias, ca.score_scale, ca),
                    # the feed-forward's up, activation, down and gate (None: an attention-only
                    # model's layer has none; a plain one no gate)
                    None
                    if ff is None
                    else (
                        _product(lay(ff.linear1.weight), ff.linear1.bias),
                        ff.act,
                        _product(lay(ff.linear2.weight), ff.linear2.bias),
                        None if ff.gate is None else _product(lay(ff.gate.weight), ff.gate.bias),
                    ),
                    (_norm(layer.norm1), _norm(layer.norm2), _norm(layer.norm3)),
                    # Gemma 3: QK-norm, sandwich norms, the sliding window (None: every key)
                    (sa.q_norm, sa.k_norm, layer.post_norm1, layer.post_norm3, layer.window),
                )
            )
        # cross-attention mask in SDPA's convention, computed once for the whole decode
        mask = masks.combine(cache.src_pad_mask, None)  # [B, 1, 1, Ts] or None
        self.cross_allowed, self.cross_dead = None, None
        if model.encoder is None:
            return
        self.cross_allowed, dead = masks.sdpa_mask(mask)
        self.cross_dead = dead if dead is not None and bool(dead.any()) else None

    def __call__(self, tokens: Tensor) -> Tensor:
        """``tokens [B]`` at position ``cache.length`` -> next-token logits ``[B, V]``."""
        cache, b = self.cache, tokens.shape[0]
        pos = cache.length
        h_, dh, inner, hkv = self.heads, self.head_dim, self.inner, self.kv_heads
        group = h_ // hkv
        x = F.embedding(tokens, self.table)  # [B, D]
        if self.embed_scale is not None:
            x = x * self.embed_scale
        x = add_positions(x, self.positions, pos + self.offset, self.embed_norm)
        first = self.norm_first
        bias = None
        if self.bias is not None:  # T5: [1, H, 1, pos + 1], added to the scores
            bias = self.bias(1, pos + 1, pos)
        end = pos + 1
        recorder = ACTIVE_RECORDER.get()
        causal = None  # made once a hook watches a self-attention (below)
        rotary = local = None
        if self.inv_freq is not None:  # [1, R] twice
            rotary = rotary_angles(self.inv_freq, pos, 1, x.dtype)
            local = rotary
            if self.local_freq is not self.inv_freq:
                local = rotary_angles(self.local_freq, pos, 1, x.dtype)
        for i, (sa, so, cq, co, ff, norms, extra) in enumerate(self.layers):
            n1, n2, n3 = norms
            q_norm, k_norm, post1, post3, window = extra
            rot = rotary if window is None else local
            # -- masked self-attention over the cache (one query: nothing is in its future)
            h = sublayer_input(x, n1, first)
            qkv = F.linear(h, sa[0], sa[1])  # [B, (H + 2 * Hkv) * Dh]
            buf = cache.self_kv[i]
            kv = buf.reserve(end, qkv)  # [2, B, Hkv, room, Dh]
            new_kv = qkv[:, inner:].view(b, 2, hkv, dh).transpose(0, 1)  # [2, B, Hkv, Dh]
            q = qkv[:, :inner].view(b, h_, 1, dh)  # [B, H, 1, Dh]
            if q_norm is not None:  # over Dh, before rotary
                q = q_norm(q)
                new_kv = torch.stack([k_norm(new_kv[0]), new_kv[1]])
            if rot is not None:
                q = apply_rotary(q, *rot)
                new_kv = torch.stack(
                    [apply_rotary(new_kv[0][:, :, None], *rot)[:, :, 0], new_kv[1]]
                )
            kv[:, :, :, pos].copy_(new_kv)
            buf.length = end
            k, v = kv[0, :, :, :end], kv[1, :, :, :end]  # [B, Hkv, Tk, Dh]
            if group > 1:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            mask = None if bias is None else bias.to(q.dtype)
            hook = recorder.hook_for(sa[3]) if recorder is not None else None
            if hook is None:
                if window is not None and end > window:  # keys 0..pos-W are out of reach
                    mask = (torch.arange(end, device=q.device) > pos - window)[None]  # [1, Tk]
                z = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, scale=sa[2]
                )  # [B, H, 1, Dh]
            else:  # given as the module path gives it: one query's causal row (blocks nothing)
                if causal is None:
                    causal = masks.causal_mask(1, end, device=q.device)  # [1, Tk]
                win = None
                if window is not None:
                    win = masks.sliding_window_mask(1, window, end, device=q.device)  # [1, Tk]
                z = watched_attention(hook, q, k, v, None, causal, sa[2], mask, window=win)
            out = F.linear(z.reshape(b, inner), so[0], so[1])  # [B, D]
            if post1 is not None:
                out = post1(out)
            x = residual_add(x, out, n1, first)
            # -- cross-attention to the cached encoder keys/values (none in a decoder-only model)
            if cq is not None:
                h = sublayer_input(x, n2, first)
                q = F.linear(h, cq[0], cq[1]).view(b, h_, 1, dh)  # [B, H, 1, Dh]
                k, v = cache.cross_kv[i]
                hook = recorder.hook_for(co[3]) if recorder is not None else None
                if hook is not None:
                    z = watched_attention(hook, q, k, v, cache.src_pad_mask, None, co[2])
                else:
                    z = F.scaled_dot_product_attention(
                        q, k, v, attn_mask=self.cross_allowed, scale=co[2]
                    )
                    if self.cross_dead is not None:
                        z = z.masked_fill(self.cross_dead, 0.0)
                out = F.linear(z.reshape(b, inner), co[0], co[1])
                x = residual_add(x, out, n2, first)
            # -- feed-forward (none in an attention-only model)
            if ff is None:
                continue
            out = feed_forward(sublayer_input(x, n3, first), *ff)  # [B, D]
            if post3 is not None:
                out = post3(out)
            x = residual_add(x, out, n3, first)
        if self.final is not None:
            x = self.final(x)
        return project_out(x, self.out_scale, self.project)  # [B, V]
