"""Mask helpers and the attention invariants they guarantee (property tests)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnviz
from attnviz import masks
from attnviz.core.model import MultiHeadAttention


def test_causal_mask_square_and_shifted():
    m = masks.causal_mask(3)
    assert m.dtype == torch.bool and m.shape == (3, 3)
    assert m.tolist() == [[False, True, True], [False, False, True], [False, False, False]]
    # two new queries at positions 3 and 4 of five keys
    assert masks.causal_mask(2, 5).tolist() == [[False] * 4 + [True], [False] * 5]
    assert not masks.causal_mask(1, 9).any()  # a cached step sees every earlier key
    with pytest.raises(attnviz.MaskError, match="at least as many keys"):
        masks.causal_mask(4, 2)


def test_padding_mask_marks_pad():
    ids = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert masks.padding_mask(ids, 0).tolist() == [[False, False, True], [False, True, True]]


def test_float_mask_converts_and_bad_masks_explain_themselves():
    f = torch.tensor([[0.0, float("-inf")], [-1e9, 0.0]])
    assert masks.as_bool_mask(f, (2, 2), "m", "[B, T]").tolist() == [[False, True], [True, False]]
    with pytest.raises(attnviz.MaskError, match=r"shape \[B, Ts\] = \[2, 3\], got \[2, 4\]"):
        masks.as_bool_mask(torch.zeros(2, 4, dtype=torch.bool), (2, 3), "src_pad_mask", "[B, Ts]")
    with pytest.raises(attnviz.MaskError, match="torch.bool"):
        masks.as_bool_mask(torch.ones(2, 3, dtype=torch.long), (2, 3), "src_pad_mask", "[B, Ts]")
    with pytest.raises(attnviz.MaskError, match="only 0"):
        masks.as_bool_mask(torch.full((2, 3), 0.5), (2, 3), "src_pad_mask", "[B, Ts]")
    with pytest.raises(attnviz.MaskError, match="torch.Tensor"):
        masks.as_bool_mask([[True]], (1, 1), "src_pad_mask", "[B, Ts]")


def test_model_accepts_float_padding_mask_like_bool(model):
    src = torch.randint(3, 20, (2, 6))
    tgt = torch.randint(3, 19, (2, 4))
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[0, 4:] = True
    additive = torch.zeros(2, 6).masked_fill(pad, float("-inf"))
    assert torch.equal(model(src, tgt, pad), model(src, tgt, additive))
    with pytest.raises(attnviz.MaskError, match=r"\[B, Ts\] = \[2, 6\]"):
        model(src, tgt, pad[:, :5])


@st.composite
def attention_case(draw):
    b = draw(st.integers(1, 3))
    h = draw(st.sampled_from([1, 2, 4]))
    dh = draw(st.integers(1, 5))
    tq = draw(st.integers(1, 6))
    tk = draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    kpm = None
    if draw(st.booleans()):
        p = draw(st.sampled_from([0.2, 0.6, 1.0]))  # 1.0: every key blocked
        kpm = torch.rand(b, tk, generator=g) < p
    attn = None
    if draw(st.booleans()):
        attn = torch.rand(tq, tk, generator=g) < draw(st.sampled_from([0.3, 0.9]))
    scale = draw(st.sampled_from([0.1, 1.0, 30.0]))  # large scale: near one-hot softmax
    return b, h, dh, tq, tk, seed, kpm, attn, scale


@settings(max_examples=150, deadline=None)
@given(attention_case())
def test_attention_invariants(case):
    b, h, dh, tq, tk, seed, kpm, attn, scale = case
    torch.manual_seed(seed)
    mha = MultiHeadAttention(h * dh, h, 0.0, "cross", 0)
    torch.nn.init.normal_(mha.in_proj_weight, std=scale / math.sqrt(h * dh))
    x = torch.randn(b, tq, h * dh)
    ctx = torch.randn(b, tk, h * dh)

    fast = mha(x, ctx, key_padding_mask=kpm, attn_mask=attn)

    class OneModule:  # record() looks the modules up by name; no edits, so no config needed
        def attention_modules(self):
            return {"attn": mha}

    with attnviz.record(OneModule()) as trace:
        slow = mha(x, ctx, key_padding_mask=kpm, attn_mask=attn)
    w = trace.weights("cross", 0)
    mask = trace.mask("cross", 0).expand_as(w)
    z = trace.head_output("cross", 0)

    assert not torch.isnan(w).any() and not torch.isnan(fast).any() and not torch.isnan(slow).any()
    assert torch.all(w[mask] == 0)  # blocked cells exactly zero
    dead = mask.all(-1)  # [B, H, Tq]
    sums = w.sum(-1)
    assert torch.allclose(sums[~dead], torch.ones_like(sums[~dead]), atol=1e-5)
    assert torch.all(w[dead] == 0) and torch.all(z[dead] == 0)  # fully blocked rows: zero
    # fused path == recording path; relative too, since scale 30 gives outputs near 50 and
    # near-one-hot softmaxes of logits in the hundreds, where fp32 rounding is ~6e-5 relative
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)
    assert torch.allclose(w @ trace.values("cross", 0), z, atol=1e-6)


def test_mask_on_another_device_is_named(model):
    src = torch.randint(3, 20, (2, 6))
    tgt = torch.randint(3, 19, (2, 4))
    elsewhere = torch.zeros(2, 6, dtype=torch.bool, device="meta")
    with pytest.raises(
        attnviz.MaskError, match="src_pad_mask is on meta but the token ids are on cpu"
    ):
        model(src, tgt, elsewhere)
