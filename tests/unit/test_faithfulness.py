"""Faithfulness of attention views: comprehensiveness and sufficiency curves per method."""

from __future__ import annotations

import numpy as np
import pytest

import attnviz
from attnviz.analysis.faithful import METHODS, faithfulness, rankings


def test_blocking_every_source_token_is_the_same_for_every_method(models_dir):
    """At k = Ts every method blocks (or keeps) the whole source: the curves meet there."""
    ckpt = attnviz.load_checkpoint(models_dir / "reverse")
    report = faithfulness(ckpt, ["abc", "hello"], k_max=6, ig_steps=4)
    assert report.n == 2 and report.k == 6
    last = {m: report.comprehensiveness[m][-1] for m in METHODS}
    assert np.allclose(list(last.values()), last["random"], atol=1e-6)
    for m in METHODS:
        assert report.sufficiency[m][-1] == pytest.approx(0.0, abs=1e-6)  # all kept: no change
        assert (np.abs(report.comprehensiveness[m]) <= 1).all()
    assert set(report.aopc()) == set(METHODS) and "comprehensiveness" in report.text()
    # blocking works: one blocked token already moves the probability (if blocking did nothing,
    # every curve would be 0 and the equalities above would hold all the same)
    first = {m: report.comprehensiveness[m][0] for m in METHODS}
    assert all(v > 1e-3 for v in first.values()), first
    assert first["weights"] > 0.5, first  # reverse hangs on the one token it attends to


def test_rankings_cover_every_source_token(models_dir):
    ckpt = attnviz.load_checkpoint(models_dir / "copy")
    tokens = ckpt.predict_details("hello").tokens
    scores = rankings(ckpt, "hello", 2, tokens, ig_steps=4)
    assert set(scores) == set(METHODS)
    for m, s in scores.items():
        assert s.shape == (5,) and np.isfinite(s).all(), m
    assert int(np.argmax(scores["weights"])) == 2  # copy attends to the letter it copies


def test_bad_arguments_are_refused(models_dir):
    ckpt = attnviz.load_checkpoint(models_dir / "copy")
    with pytest.raises(attnviz.InputError, match="at least one input"):
        faithfulness(ckpt, [])
    with pytest.raises(attnviz.InputError, match="k_max must be at least 1"):
        faithfulness(ckpt, ["abc"], k_max=0)
    with pytest.raises(attnviz.InputError, match="method"):
        faithfulness(ckpt, ["abc"], methods=["tea leaves"])
