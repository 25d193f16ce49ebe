"""Word timestamps' parts: the median filter, standardisation, DTW and word grouping, each held
to an independent computation (the loops CTranslate2 and Whisper write)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.analysis.timestamps import (
    Word,
    alignment_matrix,
    dtw,
    median_filter,
    merge_punctuation,
    split_words,
    words_from_path,
)


def _median_loop(x: np.ndarray, width: int) -> np.ndarray:
    """CTranslate2's CPU median filter, written as its loop: read |j + k|, mirror past the end."""
    depth, rank = x.shape[-1], width // 2
    if depth <= rank:
        return x
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]
        for j in range(depth):
            window = []
            for k in range(-rank, rank + 1):
                read = abs(j + k)
                if read >= depth:
                    read = depth - (read - depth) - 2
                window.append(row[read])
            out[idx + (j,)] = sorted(window)[rank]
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(4, 30), st.sampled_from([3, 5, 7]), st.integers(0, 2**31))
def test_median_filter_equals_the_mirrored_loop(rows, depth, width, seed):
    x = np.random.default_rng(seed).normal(size=(rows, depth)).astype(np.float32)
    np.testing.assert_allclose(median_filter(x, width), _median_loop(x, width), rtol=0, atol=0)


def test_alignment_matrix_standardises_columns_then_averages_heads():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(3, 6, 40)).astype(np.float32)
    got = alignment_matrix(scores, num_frames=60, width=1)  # width 1: no filtering
    w = np.exp(scores[..., :30]) / np.exp(scores[..., :30]).sum(-1, keepdims=True)
    z = (w - w.mean(1, keepdims=True)) / w.std(1, keepdims=True)
    np.testing.assert_allclose(got, z.mean(0), atol=1e-5)
    assert got.shape == (6, 30)


def _dtw_brute(cost: np.ndarray) -> float:
    n, m = cost.shape
    best = np.full((n, m), np.inf)
    for i in range(n):
        for j in range(m):
            prev = (
                0.0
                if i == j == 0
                else min(
                    best[i - 1, j - 1] if i and j else np.inf,
                    best[i - 1, j] if i else np.inf,
                    best[i, j - 1] if j else np.inf,
                )
            )
            best[i, j] = cost[i, j] + prev
    return best[-1, -1]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**31))
def test_dtw_path_is_monotonic_and_of_least_cost(n, m, seed):
    cost = np.random.default_rng(seed).normal(size=(n, m))
    rows, cols = dtw(cost)
    assert (rows[0], cols[0]) == (0, 0) and (rows[-1], cols[-1]) == (n - 1, m - 1)
    steps = set(zip(np.diff(rows).tolist(), np.diff(cols).tolist(), strict=True))
    assert steps <= {(1, 1), (1, 0), (0, 1)}
    assert cost[rows, cols].sum() == pytest.approx(_dtw_brute(cost))


def test_words_group_on_spaces_and_punctuation_and_take_jump_times():
    pieces = {1: " Hello", 2: ",", 3: " wor", 4: "ld", 5: ".", 9: "<|endoftext|>"}

    def decode(ids):
        return "".join(pieces[i] for i in ids)

    words, groups = split_words([1, 2, 3, 4, 5, 9], decode, first_special=9)
    assert words == [" Hello", ",", " wor" + "ld", ".", "<|endoftext|>"]
    assert groups == [[1], [2], [3, 4], [5], [9]]
    # tokens 1, 2, 3, 4, 5, eot reached at frames 10, 20, 30, 35, 50, 60
    rows = np.array([0, 1, 2, 3, 4, 5])
    cols = np.array([10, 20, 30, 35, 50, 60])
    found = words_from_path(rows, cols, [1, 2, 3, 4, 5], [0.9, 0.8, 0.7, 0.5, 0.6], decode, 9)
    assert [w.text for w in found] == [" Hello,", " world."]
    assert (found[0].start, found[0].end) == (0.2, 0.4)  # " Hello" from frame 10 to 20 (x 20 ms)
    assert (found[1].start, found[1].end) == (0.6, 1.0)
    assert found[1].probability == pytest.approx(0.6)  # mean of " wor" and "ld"


def test_opening_punctuation_joins_the_next_word():
    words = [Word(' "', 0, 0.1, 1, [1]), Word("Hi", 0.1, 0.2, 1, [2]), Word('"', 0.2, 0.3, 1, [3])]
    assert [w.text for w in merge_punctuation(words)] == [' "Hi"']
