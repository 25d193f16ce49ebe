"""Sinks: weight parked on start, end, punctuation or first tokens, in statistics and the check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz
from attnviz import analysis
from attnviz.analysis.stats import matrix_stats, punctuation_ids, sink_heads


def test_sink_share_counts_start_end_punctuation_and_first_keys():
    w = np.array([[[0.5, 0.1, 0.1, 0.3], [0.0, 0.2, 0.6, 0.2]]])  # [1, Tq=2, Tk=4]
    keys = np.array([[True, False, True, False]])  # key 0 (first) and key 2 (say, ".")
    m = matrix_stats(w, key_is={"sink": keys, "punct": np.array([[0, 0, 1, 0]], bool)})
    assert m["sink"][0] == pytest.approx(((0.5 + 0.1) + (0.0 + 0.6)) / 2)
    assert m["punct"][0] == pytest.approx((0.1 + 0.6) / 2)
    assert np.isnan(m["bos"][0])  # not measured without ids


def test_punctuation_ids_read_pieces_and_sentencepiece_marks():
    assert punctuation_ids(["<pad>", "a", ".", "▁,", "!?", "x.", "▁"]) == [2, 3, 4]


def test_a_head_forced_onto_the_first_token_is_named_a_sink(models_dir):
    ckpt = attnviz.load_checkpoint(models_dir / "reverse")

    def first_only(w: torch.Tensor) -> torch.Tensor:  # [B, Tq, Tk]: all weight on key 0
        out = torch.zeros_like(w)
        out[..., 0] = 1.0
        return out

    edit = attnviz.ReplaceWeights("cross", 0, first_only, head=2)
    report = analysis.check(ckpt, ["helloworld", "abc", "qwerty"], edits=[edit], ablation_sample=0)
    sink = next(f for f in report.findings if f.check == "sinks")
    assert sink.level == "info" and "cross L0 H2" in sink.message
    head = next(s for s in report.stats if (s.kind, s.layer, s.head) == ("cross", 0, 2))
    assert head.sink == pytest.approx(1.0) and head.first == pytest.approx(1.0)
    assert [s.head for s in sink_heads(report.stats) if s.kind == "cross" and s.layer == 0] == [2]
    plain = analysis.check(ckpt, ["helloworld", "abc", "qwerty"], ablation_sample=0)
    assert next(f for f in plain.findings if f.check == "sinks").level == "ok"


def test_inspection_measures_end_and_start_shares(models_dir):
    ckpt = attnviz.load_checkpoint(models_dir / "reverse")
    ins = analysis.inspect_text(ckpt, "helloworld")
    dec = [s for s in ins.stats if s.kind == "decoder_self"]
    assert all(np.isfinite(s.bos) and np.isfinite(s.sink) for s in dec)
    assert all(s.sink >= s.bos - 1e-9 for s in dec)  # the start token is a sink key
    assert all(np.isfinite(s.eos) for s in ins.stats)  # measured, no longer NaN


def test_a_uniform_head_on_a_short_input_is_no_sink():
    """3 sink keys of 6 get half of a uniform head's weight: that is no sink."""
    from attnviz.analysis.stats import HeadStats

    fields = {f: 0.0 for f in HeadStats.__dataclass_fields__}
    uniform = HeadStats(**{**fields, "kind": "encoder_self", "layer": 0, "head": 0,
                           "role": "", "sink": 0.5, "norm_entropy": 1.0})  # fmt: skip
    focused = HeadStats(**{**fields, "kind": "encoder_self", "layer": 0, "head": 1,
                           "role": "", "sink": 0.9, "norm_entropy": 0.2})  # fmt: skip
    assert sink_heads([uniform, focused]) == [focused]
