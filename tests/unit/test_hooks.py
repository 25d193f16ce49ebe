"""Edits that extend: `Hook` around any function, `Edit` subclasses, and `eager_attention`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import random_batch

import attnviz
from attnviz.decode.batched import greedy_decode


def run(model, edits=()):
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model, edits, capture=None):
        return model(src, tgt, sp, tp)


def test_a_hook_zeroing_a_head_equals_head_ablation(model):
    def zero_head_2(z):
        z = z.clone()
        z[:, 2] = 0
        return z

    hooked = run(model, [attnviz.Hook("cross", 1, "heads", zero_head_2)])
    ablated = run(model, [attnviz.ZeroHeads("cross", 1, [2])])
    assert torch.equal(hooked, ablated)
    assert not torch.allclose(hooked, run(model), atol=1e-4)


def test_a_hook_replacing_weights_changes_the_output_like_replace_weights(model):
    def uniform(w):
        return torch.ones_like(w) / w.shape[-1]

    hooked = run(model, [attnviz.Hook("encoder_self", 0, "weights", uniform)])
    replaced = run(model, [attnviz.ReplaceWeights("encoder_self", 0, uniform)])
    assert torch.equal(hooked, replaced)
    assert not torch.allclose(hooked, run(model), atol=1e-4)
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model, [attnviz.Hook("encoder_self", 0, "weights", uniform)]) as trace:
        model(src, tgt, sp, tp)
    w = trace.weights("encoder_self", 0)  # the trace holds the weights the model used
    assert torch.allclose(w, torch.full_like(w, 1 / w.shape[-1]))


def test_a_mask_hook_equals_drop_mask(model):
    def no_causal(kpm, causal):
        return kpm, None

    hooked = run(model, [attnviz.Hook("decoder_self", None, "mask", no_causal)])
    dropped = run(model, [attnviz.DropMask("causal")])
    # DropMask also routes the other kinds through the written-out path: rounding may differ
    assert torch.allclose(hooked, dropped, atol=1e-6)
    assert not torch.allclose(hooked, run(model), atol=1e-4)


def test_a_probe_sees_every_call_and_changes_nothing(model):
    seen = []
    probe = attnviz.Hook("cross", None, "weights", lambda w: seen.append(tuple(w.shape)))
    # same output (a watched module takes the written-out path, so only rounding may differ)
    assert torch.allclose(run(model, [probe]), run(model), atol=1e-6)
    assert seen == [(3, 4, 6, 7), (3, 4, 6, 7)]  # both cross layers, [B, H, Tt, Ts]
    seen.clear()
    src = random_batch(model)[0][:1]
    with attnviz.record(model, [probe], capture=None):
        greedy_decode(model, src, 1, None, max_len=5)  # a watched decoder: module path
    assert len(seen) == 2 * 5 and seen[-1] == (1, 4, 1, 7)


def test_hooks_are_gone_after_the_block_even_after_an_exception(model):
    calls = []

    def zero_all(z):
        calls.append(1)
        return torch.zeros_like(z)

    src, tgt, sp, tp = random_batch(model)
    plain = model(src, tgt, sp, tp)
    hook = attnviz.Hook("cross", 0, "heads", zero_all)
    with pytest.raises(RuntimeError, match="boom"), attnviz.record(model, [hook]):
        assert not torch.allclose(model(src, tgt, sp, tp), plain, atol=1e-4)
        raise RuntimeError("boom")
    n = len(calls)
    assert n == 1
    assert torch.equal(model(src, tgt, sp, tp), plain)
    assert len(calls) == n
    assert attnviz.core.model.ACTIVE_RECORDER.get() is None


def test_a_new_edit_is_a_subclass_not_a_recorder_change(model):
    class Sharpen(attnviz.Edit):
        """Square and renormalise every weight row of decoder self-attention."""

        def matches(self, kind, layer):
            return kind == "decoder_self"

        def edit_weights(self, weights):
            w = weights**2
            return w / w.sum(-1, keepdim=True).clamp_min(1e-12)

    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model, [Sharpen()]) as trace:
        out = model(src, tgt, sp, tp)
    assert not torch.allclose(out, run(model), atol=1e-4)
    w = trace.weights("decoder_self", 1)
    assert torch.allclose(w.sum(-1)[0], torch.ones(4, 6), atol=1e-5)
    assert (w.masked_select(trace.mask("decoder_self", 1).expand_as(w)) == 0).all()
    with attnviz.record(model) as plain:  # the encoder, which the edit does not match, is as is
        model(src, tgt, sp, tp)
    assert torch.equal(trace.weights("encoder_self", 1), plain.weights("encoder_self", 1))
    assert not torch.allclose(w, plain.weights("decoder_self", 1), atol=1e-3)


@pytest.mark.parametrize(
    "hook, message",
    [
        (attnviz.Hook("cross", 0, "values", lambda v: v), "stage must be one of"),
        (attnviz.Hook("cross", 0, "heads", 3), "fn must be a function"),
        (attnviz.Hook("cross", 5, "heads", lambda z: z), "cross has layers 0..1"),
        (attnviz.Hook("crosss", 0, "heads", lambda z: z), "kind must be one of"),
    ],
)
def test_bad_hooks_are_refused_before_running(model, hook, message):
    with pytest.raises(attnviz.EditError, match=message), attnviz.record(model, [hook]):
        pass


def test_a_hook_returning_the_wrong_thing_gets_a_clear_error(model):
    src, tgt, sp, tp = random_batch(model)
    cases = [
        (attnviz.Hook("cross", 0, "heads", lambda z: z[:, :, 0, 0]),
         r"heads hook on cross layer 0 returned \[3, 4\]; expected a tensor \[3, 4, 6, 6\]"),
        (attnviz.Hook("cross", 0, "mask", lambda a, b: 0),
         r"must return \(key_padding_mask, attn_mask\)"),
    ]  # fmt: skip
    for hook, message in cases:
        with pytest.raises(attnviz.EditError, match=message), attnviz.record(model, [hook]):
            model(src, tgt, sp, tp)
    with pytest.raises(attnviz.EditError, match="unknown edit"), attnviz.record(model, [len]):
        pass


def test_eager_attention_is_sdpa_written_out():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (5, 7, 7))
    mask = torch.rand(2, 1, 5, 7, generator=g) > 0.6
    mask[1, 0, 2] = True  # a query row with every key blocked
    bias = torch.randn(1, 3, 5, 7, generator=g)
    z, weights, scores = attnviz.eager_attention(q, k, v, mask, 8**-0.5, bias)
    assert torch.allclose(scores, q @ k.transpose(-2, -1) / 8**0.5 + bias, atol=1e-6)
    additive = bias.masked_fill(mask, float("-inf"))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    live = ~mask.all(-1, keepdim=True).expand(2, 3, 5, 1)  # [B, H, Tq, 1]
    assert torch.allclose(z[live.expand_as(z)], expected[live.expand_as(z)], atol=1e-5)
    assert torch.equal(z[1, :, 2], torch.zeros(3, 8))  # blocked row: zeros, not NaN
    assert torch.equal(weights[1, :, 2], torch.zeros(3, 7))
    assert torch.allclose(weights[live.expand_as(weights)[..., 0]].sum(-1), torch.ones(1))
    assert (weights.masked_select(mask.expand_as(weights)) == 0).all()
