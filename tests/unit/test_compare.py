"""analysis.compare: per-head divergence, head matching, token probabilities of two checkpoints."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis.compare import compare, js_divergence

TEXTS = ["helloworld", "abcxyz"]


def permuted(ckpt: attnviz.Checkpoint, order: list[int]) -> attnviz.Checkpoint:
    """The same checkpoint with the heads of every attention module put in ``order``."""
    other = copy.deepcopy(ckpt)
    for mod in other.model.modules():
        if isinstance(mod, attnviz.MultiHeadAttention):
            dh, inner = mod.head_dim, mod.inner
            idx = torch.cat([torch.arange(h * dh, (h + 1) * dh) for h in order])
            with torch.no_grad():
                w = mod.in_proj_weight.view(3, inner, -1)
                mod.in_proj_weight.copy_(w[:, idx].reshape(3 * inner, -1))
                if mod.in_proj_bias is not None:
                    b = mod.in_proj_bias.view(3, inner)
                    mod.in_proj_bias.copy_(b[:, idx].reshape(-1))
                mod.out_proj.weight.copy_(mod.out_proj.weight[:, idx])
    return other


def test_js_divergence_bounds():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]])
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5], [0.0, 0.0]])
    assert js_divergence(p, q).tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_a_checkpoint_compared_with_itself_is_identical(reverse_ckpt):
    c = compare(reverse_ckpt, reverse_ckpt, TEXTS)
    assert c.agreement == 1.0
    for kind in attnviz.KINDS:
        assert np.allclose(c.divergence[kind], 0, atol=1e-9)
        assert (c.matching[kind] == np.arange(reverse_ckpt.config.n_heads)).all()
    assert all(t.change == 0 for row in c.tokens for t in row)
    assert c.targets[0][-1] == reverse_ckpt.config.eos_id


def test_permuted_heads_compare_as_identical_after_matching(reverse_ckpt):
    h = reverse_ckpt.config.n_heads
    order = list(range(1, h)) + [0]
    other = permuted(reverse_ckpt, order)
    c = compare(reverse_ckpt, other, TEXTS)
    assert c.agreement == 1.0
    for kind in attnviz.KINDS:
        assert c.divergence[kind].max() > 0.01  # head h of a is not head h of b any more
        assert np.allclose(c.matched_divergence[kind], 0, atol=1e-5)
        # a's head order[j] sits at b's j: the matching finds it
        expect = np.argsort(order)
        assert (c.matching[kind] == expect).all()


def test_given_targets_and_token_changes(reverse_ckpt):
    other = copy.deepcopy(reverse_ckpt)
    with torch.no_grad():
        other.model.decoder.layers[0].cross_attn.out_proj.weight.mul_(0.5)
    c = compare(reverse_ckpt, other, ["abc"], targets=["cba"])
    assert [t.token for t in c.tokens[0]][:3] == ["c", "b", "a"]
    assert any(abs(t.change) > 0 for t in c.tokens[0])
    big = c.largest_changes(1)[0]
    assert abs(big.change) == max(abs(t.change) for t in c.tokens[0])
    # Only what comes after decoder layer 0's cross-attention output can change.
    assert np.allclose(c.divergence["encoder_self"], 0, atol=1e-9)
    for kind in ("decoder_self", "cross"):
        assert np.allclose(c.divergence[kind][0], 0, atol=1e-9)
        assert c.divergence[kind][1].max() > 1e-4
        assert c.most_changed(kind, 1)[0][0] == 1
    assert c.to_dict()["agreement"] in (0.0, 1.0)


def test_incomparable_checkpoints_say_what_differs(reverse_ckpt):
    small = copy.copy(reverse_ckpt)
    small.config = dataclasses.replace(reverse_ckpt.config, n_heads=reverse_ckpt.config.n_heads * 2)
    with pytest.raises(attnviz.InputError, match="differ in heads"):
        compare(reverse_ckpt, small, TEXTS)
    with pytest.raises(attnviz.InputError, match="at least one input"):
        compare(reverse_ckpt, reverse_ckpt, [])


def test_keep_scores_holds_the_passes_the_divergence_came_from(reverse_ckpt):
    assert compare(reverse_ckpt, reverse_ckpt, ["abc"]).scored == []
    c = compare(reverse_ckpt, reverse_ckpt, ["abc"], keep_scores=True)
    sa, sb = c.scored[0]
    assert sa.ids == sb.ids == c.targets[0]
    again = reverse_ckpt.score("abc", c.targets[0])
    assert torch.equal(sa.trace.weights("cross", 1), again.trace.weights("cross", 1))


def test_a_refusal_says_what_differs_between_the_tokenizers():
    from attnviz.analysis.compare import tokenizer_difference
    from attnviz.data.tokenizer import Tokenizer

    abc, acb = Tokenizer("char", list("abc")), Tokenizer("char", list("acb"))
    assert tokenizer_difference(abc, acb) == (
        "both have a char tokenizer of 7 tokens, but id 5 is “b” in A and “c” in B"
    )
    assert tokenizer_difference(abc, Tokenizer("word", ["x"])) == (
        "A has a char tokenizer of 7 tokens, B has a word tokenizer of 5 tokens"
    )
