"""Pieces pooled into words (sum over key pieces, mean over query pieces) and thumbnails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.analysis.align import _to_words
from attnviz.analysis.words import downsample, pool_words, word_index, word_labels
from attnviz.core.errors import InputError


@pytest.mark.parametrize(
    "pieces, kind, want",
    [
        (["▁the", "re", "▁is", "<eos>"], "unigram", [0, 0, 1, 2]),
        (["Ġhel", "lo", "Ġworld", "</s>"], "bpe", [0, 0, 1, 2]),
        (["hel", "lo</w>", "wor", "ld</w>"], "bpe", [0, 0, 1, 1]),
        (["un", "##do", "it"], None, [0, 0, 0]),
        (["[CLS]", "un", "##do", "▁it"], None, [0, 1, 1, 2]),
        (list("ab cd"), "char", [0, 0, 1, 1, 1]),
        (["a", "b", "c"], "word", [0, 1, 2]),
        ([], "char", []),
    ],
)
def test_word_index_reads_the_tokenizers_markers(pieces, kind, want):
    assert word_index(pieces, kind) == want


def test_word_labels_drop_the_markers():
    pieces = ["▁the", "re", "▁is", "<eos>"]
    assert word_labels(pieces, word_index(pieces)) == ["there", "is", "<eos>"]
    chars = list("ab cd")
    assert word_labels(chars, word_index(chars, "char")) == ["ab", "cd"]


def test_pooling_sums_keys_and_averages_queries():
    w = np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25], [0.0, 1.0, 0.0]], np.float32)
    got, m = pool_words(w, None, [0, 0, 1], [0, 0, 1])
    want = np.array([[(0.3 + 0.75) / 2, (0.7 + 0.25) / 2], [1.0, 0.0]])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not m.any()
    # the alignment module's rule, on the same matrix
    np.testing.assert_allclose(got, _to_words(w.astype(np.float64), [0, 0, 1], [0, 0, 1]), 1e-6)


def test_masked_cells_stay_masked_and_blocked_rows_are_left_out():
    # causal mask over 4 pieces grouped as words [0, 0, 1, 1]
    causal = np.triu(np.ones((4, 4), bool), 1)
    w = np.tril(np.ones((4, 4), np.float32))
    w /= w.sum(1, keepdims=True)
    got, m = pool_words(w, causal, [0, 0, 1, 1], [0, 0, 1, 1])
    # word 0's queries see only word 0's keys: word cell (0, 1) is blocked under every piece
    assert m.tolist() == [[False, True], [False, False]]
    assert got[0, 1] == 0.0
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-6)
    # a query piece whose whole row is blocked (padding) is not averaged in
    pad = np.zeros((3, 3), bool)
    pad[2] = True
    w3 = np.array([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0], [0.0, 0.0, 0.0]], np.float32)
    got3, m3 = pool_words(w3, pad, [0, 1, 1], [0, 1, 1])
    np.testing.assert_allclose(got3[1], [0.2, 0.8], rtol=1e-6)
    padded_word = pool_words(w3, pad, [0, 1, 2], [0, 1, 2])[1]
    assert padded_word[2].all()  # a word of only padded queries: a blocked row


def test_pooling_refuses_indices_that_do_not_fit():
    w = np.ones((2, 2), np.float32) / 2
    with pytest.raises(InputError, match="3 word indices for 2 pieces"):
        pool_words(w, None, [0, 0, 1], [0, 1])
    with pytest.raises(InputError, match="without gaps"):
        pool_words(w, None, [0, 2], [0, 1])


@st.composite
def _attention(draw):
    tq, tk = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    h = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    mask = rng.random((tq, tk)) < draw(st.floats(0, 0.6))
    scores = rng.normal(size=(h, tq, tk))
    scores = np.where(mask, -np.inf, scores)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(-1, keepdims=True))
        w = np.nan_to_num(e / e.sum(-1, keepdims=True))  # an all-blocked row: zeros
    qw = np.cumsum([0, *(rng.random(tq - 1) < 0.5)]).tolist()
    kw = np.cumsum([0, *(rng.random(tk - 1) < 0.5)]).tolist()
    return w.astype(np.float32), mask, qw, kw


@settings(max_examples=60, deadline=None)
@given(_attention())
def test_word_rows_sum_to_one_and_masks_pool_as_all_blocked(case):
    w, mask, qw, kw = case
    got, m = pool_words(w, mask, qw, kw)
    assert got.shape == (w.shape[0], qw[-1] + 1, kw[-1] + 1)
    live_rows = ~m.all(-1)
    np.testing.assert_allclose(got.sum(-1)[:, live_rows], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(got[:, ~live_rows], 0.0)
    assert (got[:, m] == 0).all()  # blocked word cells carry no weight
    for a in range(m.shape[0]):
        for b in range(m.shape[1]):
            under = mask[np.ix_(np.array(qw) == a, np.array(kw) == b)]
            rows_live = ~mask[np.array(qw) == a].all(-1)
            assert m[a, b] == (under[rows_live].all() if rows_live.any() else True)


@settings(max_examples=40, deadline=None)
@given(_attention(), st.integers(1, 5))
def test_downsample_keeps_the_largest_weight_of_each_block(case, size):
    w, mask, _, _ = case
    got, m, (bq, bk) = downsample(w, mask, size)
    tq, tk = w.shape[-2:]
    assert got.shape[-2] <= size and got.shape[-1] <= size
    for i in range(got.shape[-2]):
        for j in range(got.shape[-1]):
            block = (slice(i * bq, (i + 1) * bq), slice(j * bk, (j + 1) * bk))
            open_ = ~mask[block]
            assert m[i, j] == (not open_.any())
            want = w[(..., *block)][..., open_].max(-1) if open_.any() else 0.0
            np.testing.assert_array_equal(got[..., i, j], want)


def test_downsample_is_a_copy_when_it_fits():
    w = np.random.default_rng(0).random((2, 5, 7)).astype(np.float32)
    got, m, blocks = downsample(w, None, 64)
    assert blocks == (1, 1)
    np.testing.assert_array_equal(got, w)
