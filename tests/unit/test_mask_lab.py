"""analysis.mask_lab: what the app's mask lab shows, reproducible from Python."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import attnviz
from attnviz import analysis


@pytest.fixture(scope="module")
def reverse(models_dir):
    return attnviz.load_checkpoint(models_dir / "reverse")


def test_accuracy_is_measured_against_the_task_not_the_model(models_dir):
    """A copy model presented as a reversal model is wrong: the lab must say so."""
    copy = attnviz.load_checkpoint(models_dir / "copy")
    wrong = dataclasses.replace(copy, meta={**copy.meta, "task": "reverse"})
    exp = analysis.mask_lab(wrong, "helloworld").experiment
    assert exp.reference == "task" and exp.targets[0] == "dlrowolleh"
    assert exp.before.token_acc < 0.5 and "correct outputs" in exp.metric
    no_task = dataclasses.replace(copy, meta={k: v for k, v in copy.meta.items() if k != "task"})
    exp = analysis.mask_lab(no_task, "helloworld").experiment
    assert exp.reference == "model" and exp.before.token_acc == 1.0
    assert "agreement with the model's own output" in exp.metric and "accuracy" not in exp.metric


@pytest.mark.parametrize(
    "toggles, kind",
    [({}, "cross"), ({"causal_off": True}, "decoder_self"), ({"padding_off": True}, "encoder_self"),
     ({"block": [0, 4]}, "cross")],
)  # fmt: skip
def test_views_mark_exactly_the_recorded_mask(reverse, toggles, kind):
    lab = analysis.mask_lab(reverse, "helloworld", **toggles)
    assert lab.texts[0] == "helloworld" and len(lab.texts[1]) != len("helloworld")
    exp = lab.experiment
    for which, run in (("before", exp.before), ("after", exp.after)):
        for layer in run.trace.layers(kind):
            w, blocked = lab.view(which, kind, layer)
            recorded = run.trace.numpy(kind, layer, "mask")[lab.row, 0].astype(bool)
            keys, queries = lab.labels(kind)
            real_q = np.array([q != "<pad>" for q in queries])
            assert w.shape[1:] == blocked.shape == (len(queries), len(keys))
            np.testing.assert_array_equal(
                blocked[real_q], np.broadcast_to(recorded, blocked.shape)[real_q]
            )
            assert blocked[~real_q].all()  # filler rows of the padded batch are marked
            assert (w[:, blocked & real_q[:, None]] == 0).all()  # masked cells carry nothing
    if toggles.get("block"):
        cross = lab.view("after", "cross", 1)[1]
        assert cross[:, [0, 4]].all() and not lab.view("before", "cross", 1)[1][:11, 0].any()
        assert exp.after.outputs[0] != exp.before.outputs[0]
    if toggles.get("causal_off"):
        before, after = (lab.view(x, "decoder_self", 1)[1][:11, :11] for x in ("before", "after"))
        np.testing.assert_array_equal(before, np.triu(np.ones((11, 11), bool), 1))
        assert not after.any()  # nothing blocked among the real rows
        assert exp.after.token_acc < exp.before.token_acc  # it peeks at what it must predict


def test_padding_off_shows_the_padded_row(reverse):
    long_input = "abcdefghijklmnopqrst"  # the longest a reversal input can be
    lab = analysis.mask_lab(reverse, long_input, padding_off=True)
    assert len(lab.texts[1]) < len(long_input) and lab.row == 1 and lab.padded_rows


def test_bad_block_positions_are_refused(reverse):
    with pytest.raises(attnviz.InputError, match=r"0\.\.2"):
        analysis.mask_lab(reverse, "abc", block=[7])
    with pytest.raises(attnviz.InputError, match="cannot be combined"):
        analysis.mask_lab(reverse, "abc", block=[0], padding_off=True)
    with pytest.raises(attnviz.InputError, match="empty"):
        analysis.mask_lab(reverse, "")


def test_an_experiment_the_process_cannot_hold_is_refused_before_it_runs(monkeypatch):
    """Gemma 3's 262,144-token vocabulary on a 745-token prompt: the two runs' [B, T, V]
    scores alone are gigabytes (the app was killed at 21.7 GB); refused in one line."""
    from attnviz.analysis import masking

    gemma = attnviz.ModelConfig(src_vocab_size=262144, tgt_vocab_size=262144, arch="decoder-only",
                                n_encoder_layers=0, n_decoder_layers=18, n_heads=4, d_model=640,
                                d_head=256, max_len=2048)  # fmt: skip
    assert masking.experiment_memory(gemma, 2, 745, 745) > 8 << 30
    from helpers import MODELS

    ckpt = attnviz.load_checkpoint(MODELS / "reverse")
    monkeypatch.setattr(masking, "experiment_memory", lambda *a: 1 << 50)
    with pytest.raises(attnviz.InputError, match="would hold about .* GB .* try a shorter input"):
        masking.mask_lab(ckpt, "helloworld", causal_off=True)
