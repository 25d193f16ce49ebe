"""Sliding-window attention and Gemma 3's parts, each against an independent computation:
the window mask against its definition, the ``1 + weight`` RMSNorm, the embedding scale in
the table's dtype, and a whole small model (QK-norm, sandwich norms, a rotary base per layer
type, ``query_pre_attn_scalar``, GQA) against the same math written out here in plain torch.
Cached decoding (fused step and module path) against recomputation, the recorded window
against the causal mask, and ``DropMask("sliding")``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnviz
from attnviz.core import masks
from attnviz.core.config import ModelConfig
from attnviz.core.errors import ConfigError, EditError
from attnviz.core.layers import RMSNorm
from attnviz.core.model import Transformer, embed_scale
from attnviz.core.record import DropMask, record
from attnviz.core.step import FusedStep

TYPES = ("sliding_attention", "full_attention", "sliding_attention")


def gemma_config(**overrides) -> ModelConfig:
    fields = dict(
        src_vocab_size=37, tgt_vocab_size=37, arch="decoder-only", d_model=24, n_heads=4,
        n_kv_heads=2, d_head=10, n_encoder_layers=0, n_decoder_layers=3, d_ff=36,
        dropout=0.0, activation="gelu_tanh", gated_ff=True, norm="rms", norm_first=True,
        final_norm=True, layer_norm_eps=1e-6, bias=False, output_bias=False,
        scale_embeddings=True, embed_scale_in_dtype=True, positions="rotary",
        rope_theta=1e6, rope_local_theta=1e4, max_len=64, sliding_window=3,
        layer_types=TYPES, qk_norm=True, sandwich_norm=True, norm_offset=1.0,
        query_pre_attn_scalar=7.0, tie_output=True,
    )  # fmt: skip
    return ModelConfig(**{**fields, **overrides})


def gemma_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(gemma_config(**overrides)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return model


# -- independent computations ------------------------------------------------------------------
def ref_norm(x, w, eps=1e-6):
    """Gemma's RMSNorm (``Gemma3RMSNorm``): float32, ``x * rsqrt(mean(x²) + eps) * (1 + w)``,
    cast back last."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + w.float())).to(x.dtype)


def ref_rotate(x, theta, pos):
    """Rotary ("rotate half") of ``x [B, H, T, Dh]`` at positions ``pos``, base ``theta``."""
    dh = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dh, 2).float() / dh)
    ang = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    half = dh // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def reference_forward(model: Transformer, ids: torch.Tensor):
    """The whole model written out from its parameters: logits ``[B, T, V]`` and per-layer
    attention weights ``[B, H, T, T]``."""
    cfg = model.config
    p = dict(model.named_parameters())
    b, t = ids.shape
    h, hkv, dh = cfg.n_heads, cfg.kv_heads, cfg.head_dim
    x = p["tgt_embed.weight"][ids] * torch.tensor(cfg.d_model**0.5)
    pos = torch.arange(t)
    allowed_causal = pos[None, :] <= pos[:, None]  # [Tq, Tk]
    weights = []
    for i in range(cfg.n_decoder_layers):
        pre = f"decoder.layers.{i}."
        local = cfg.layer_types[i] == "sliding_attention"
        hh = ref_norm(x, p[pre + "norm1.weight"])
        w_in = p[pre + "self_attn.in_proj_weight"]
        q = (hh @ w_in[: h * dh].T).view(b, t, h, dh).transpose(1, 2)
        k = (hh @ w_in[h * dh : (h + hkv) * dh].T).view(b, t, hkv, dh).transpose(1, 2)
        v = (hh @ w_in[(h + hkv) * dh :].T).view(b, t, hkv, dh).transpose(1, 2)
        q = ref_norm(q, p[pre + "self_attn.q_norm.weight"])
        k = ref_norm(k, p[pre + "self_attn.k_norm.weight"])
        theta = 1e4 if local else 1e6
        q, k = ref_rotate(q, theta, pos), ref_rotate(k, theta, pos)
        k, v = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
        scores = q @ k.transpose(-1, -2) * cfg.query_pre_attn_scalar**-0.5
        allowed = allowed_causal
        if local:
            allowed = allowed & (pos[:, None] - pos[None, :] < cfg.sliding_window)
        a = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
        weights.append(a)
        z = (a @ v).transpose(1, 2).reshape(b, t, h * dh)
        out = z @ p[pre + "self_attn.out_proj.weight"].T
        x = x + ref_norm(out, p[pre + "post_norm1.weight"])
        hh = ref_norm(x, p[pre + "norm3.weight"])
        gate = F.gelu(hh @ p[pre + "ff.linear1.weight"].T, approximate="tanh")
        ff = (gate * (hh @ p[pre + "ff.gate.weight"].T)) @ p[pre + "ff.linear2.weight"].T
        x = x + ref_norm(ff, p[pre + "post_norm3.weight"])
    x = ref_norm(x, p["decoder.norm.weight"])
    return x @ p["tgt_embed.weight"].T, weights


# -- the parts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("tq, tk, window", [(7, 7, 3), (1, 9, 4), (3, 10, 1), (5, 5, 9)])
def test_window_mask_matches_its_definition(tq, tk, window):
    mask = masks.sliding_window_mask(tq, window, tk)
    for r in range(tq):
        i = tk - tq + r
        for j in range(tk):
            assert bool(mask[r, j]) == (i - j >= window)
    assert not (mask & masks.causal_mask(tq, tk)).any()  # never a causal cell
    both = masks.combine(None, masks.causal_mask(tq, tk), mask)[0, 0]
    assert torch.equal(both, mask | masks.causal_mask(tq, tk))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_offset_rms_norm_is_gemmas(dtype):
    torch.manual_seed(0)
    norm = RMSNorm(12, 1e-6, offset=1.0)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(12))
    norm = norm.to(dtype)
    x = torch.randn(2, 3, 12).to(dtype)
    assert torch.equal(norm(x), ref_norm(x, norm.weight))
    assert torch.equal(RMSNorm(5, 1e-6, offset=1.0)(x[..., :5]), RMSNorm(5, 1e-6)(x[..., :5]))


def test_embedding_scale_is_rounded_to_the_tables_dtype():
    cfg = gemma_config(d_model=3072 // 128 * 128, n_heads=4)
    assert float(embed_scale(cfg, torch.bfloat16)) == 55.5  # sqrt(3072) = 55.4256...
    assert float(embed_scale(cfg, torch.float32)) == float(torch.tensor(3072**0.5))
    plain = gemma_config(embed_scale_in_dtype=False)
    assert embed_scale(plain, torch.bfloat16) == math.sqrt(24)


def test_the_whole_model_equals_the_math_written_out():
    model = gemma_model()
    ids = torch.randint(0, 37, (2, 9), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_weights = reference_forward(model, ids)
    with torch.no_grad(), record(model) as trace:
        recorded = model(ids)
        fast = model(ids)
    assert (recorded - ref_logits).abs().max() < 1e-5
    assert (fast - ref_logits).abs().max() < 1e-5
    for layer, w in enumerate(ref_weights):
        assert (trace.weights("decoder_self", layer) - w).abs().max() < 1e-6


def test_defaults_leave_other_models_unchanged_and_round_trip():
    old = {k: v for k, v in gemma_config().to_dict().items()}
    cfg = ModelConfig.from_dict(old)
    assert cfg == gemma_config() and cfg.layer_types == TYPES
    plain = ModelConfig(src_vocab_size=9, tgt_vocab_size=9)
    new = ("sliding_window", "layer_types", "rope_local_theta", "qk_norm", "sandwich_norm",
           "norm_offset", "query_pre_attn_scalar", "embed_scale_in_dtype")  # fmt: skip
    data = {k: v for k, v in plain.to_dict().items() if k not in new}
    assert ModelConfig.from_dict(data) == plain  # a config written before these fields
    model = Transformer(gemma_config())
    sizes = model.config.sizes()
    assert sizes["parameters"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(sliding_window=0), "sliding_window"),
        (dict(layer_types=("sliding_attention",)), "layer_types"),
        (dict(layer_types=("local",) * 3), "layer_types"),
        (dict(sliding_window=None), "sliding_window is not set"),
        (dict(query_pre_attn_scalar=-1.0), "query_pre_attn_scalar"),
        (dict(rope_local_theta=0.0), "rope_local_theta"),
        (dict(norm_first=False), "sandwich_norm needs norm_first"),
        (dict(qk_norm="yes"), "qk_norm"),
    ],
)
def test_bad_fields_are_refused_by_name(change, words):
    with pytest.raises(ConfigError, match=words):
        gemma_config(**change)


def test_window_fields_are_for_decoder_only_models():
    with pytest.raises(ConfigError, match="decoder-only"):
        ModelConfig(src_vocab_size=9, tgt_vocab_size=9, sliding_window=4)


# -- cache, record, edits ----------------------------------------------------------------------
def test_cached_steps_equal_recomputation_fused_and_module_path():
    model = gemma_model()
    ids = torch.randint(0, 37, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)
        for fused in (True, False):
            cache = model.init_cache(None, batch=2)
            model.decode(ids[:, :4], None, cache=cache)  # a prompt, then one token a step
            step = FusedStep(model, cache) if fused else None
            for i in range(4, 11):
                if fused:
                    logits = step(ids[:, i])
                else:
                    logits = model.decode(ids[:, i : i + 1], None, cache=cache)[:, 0]
                assert (logits - full[:, i]).abs().max() < 1e-5, (fused, i)


def test_recorded_steps_hold_the_window_rows_of_one_pass():
    model = gemma_model()
    ids = torch.randint(0, 37, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), record(model) as ref:
        model(ids)
    with torch.no_grad(), record(model) as steps:
        cache = model.init_cache(None, batch=1)
        model.decode(ids[:, :1], None, cache=cache)
        step = FusedStep(model, cache)
        for i in range(1, 9):
            step(ids[:, i])
    for layer in range(3):
        for i in range(9):
            row = steps.window("decoder_self", layer, call=i)[0, 0, -1]
            assert torch.equal(row, ref.window("decoder_self", layer)[0, 0, i, : i + 1])
            w = steps.weights("decoder_self", layer, call=i)[0, :, -1]
            assert (w - ref.weights("decoder_self", layer)[0, :, i, : i + 1]).abs().max() < 1e-6


def test_trace_tells_the_window_from_the_causal_mask():
    model = gemma_model()
    ids = torch.randint(0, 37, (1, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), record(model) as trace:
        model(ids)
    causal = masks.causal_mask(8)
    window = masks.sliding_window_mask(8, 3)
    for layer, kind in enumerate(TYPES):
        mask, win = trace.mask("decoder_self", layer)[0, 0], trace.window("decoder_self", layer)
        assert win.shape == trace.mask("decoder_self", layer).shape
        local = kind == "sliding_attention"
        assert trace.is_sliding("decoder_self", layer) == local
        assert torch.equal(win[0, 0], window if local else torch.zeros_like(window))
        assert torch.equal(mask, causal | win[0, 0])
        assert (trace.weights("decoder_self", layer)[:, :, win[0, 0]] == 0).all()
    assert "decoder.layers.0.self_attn.window" in trace.names()
    assert "decoder.layers.1.self_attn.window" not in trace.names()


def test_drop_sliding_removes_only_that_layers_window():
    model = gemma_model()
    ids = torch.randint(0, 37, (1, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), record(model) as base:
        before = model(ids)
    with torch.no_grad(), record(model, [DropMask("sliding", layers=[2])]) as trace:
        after = model(ids)
    for layer in range(3):
        same = torch.equal(trace.mask("decoder_self", layer), base.mask("decoder_self", layer))
        assert same == (layer != 2)
    assert torch.equal(trace.mask("decoder_self", 2)[0, 0], masks.causal_mask(9))
    assert not trace.is_sliding("decoder_self", 2) and trace.is_sliding("decoder_self", 0)
    assert not torch.allclose(before, after)
    # the same as a model whose layer 2 sees every key (keeping the local rotary base)
    full = gemma_model(rope_local_theta=None, rope_theta=1e4)
    with torch.no_grad(), record(full, [DropMask("sliding", layers=[2])]):
        dropped = full(ids)
    types = ("sliding_attention", "full_attention", "full_attention")
    other = gemma_model(rope_local_theta=None, rope_theta=1e4, layer_types=types)
    with torch.no_grad(), record(other):
        assert torch.equal(dropped, other(ids))


def test_drop_sliding_is_refused_where_there_is_no_window():
    model = gemma_model()
    drop = DropMask("sliding", layers=[1])
    with pytest.raises(EditError, match="see every key"), record(model, [drop]):
        pass
    plain = Transformer(gemma_config(sliding_window=None, layer_types=None)).eval()
    with (
        pytest.raises(EditError, match="no sliding-window layers"),
        record(plain, [DropMask("sliding")]),
    ):
        pass


def test_drop_causal_keeps_the_window():
    model = gemma_model()
    ids = torch.randint(0, 37, (1, 7), generator=torch.Generator().manual_seed(6))
    with torch.no_grad(), record(model, [DropMask("causal")]) as trace:
        model(ids)
    assert torch.equal(trace.mask("decoder_self", 0)[0, 0], masks.sliding_window_mask(7, 3))
    assert not trace.mask("decoder_self", 1).any()


def test_greedy_decode_runs_with_windows():
    model = gemma_model()
    ids = torch.randint(0, 37, (1, 6), generator=torch.Generator().manual_seed(7))
    fused = attnviz.greedy_decode(model, ids, None, 2, max_len=8)
    plain = attnviz.greedy_decode(model, ids, None, 2, max_len=8, fused=False)
    assert torch.equal(fused, plain)
