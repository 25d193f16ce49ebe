"""Special ids belong to the model: the whole pipeline gives the same results when a model's
vocabulary is permuted (specials included) and its weights are permuted the same way.

Two permuted copies of the shipped reversal model:

- ``tutorial``: the PyTorch tutorial's ids (UNK 0, PAD 1, BOS 2, EOS 3), the letters in
  reverse order after them: a bijection, so every number must match, padding included;
- ``start_is_pad``: the decoder start id equals the pad id (as in T5 and Marian): the old start
  row becomes id 0, which also pads. A start token must never be taken for padding, so every
  real row matches; rows that only padding feeds (filler rows of a padded batch) may differ.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import base_fixture, case_fixture  # noqa: F401 (fixtures: base, case)

import attnviz
from attnviz import analysis
from attnviz.cli import main

TEXTS = ["helloworld", "abc", "zyxwvutsrqponmlkjihg", "a", "hello world"]  # ' ' is unknown


def _old(perm, ids):
    return [perm[i] for i in ids]


def test_the_permuted_vocabularies_are_what_they_claim(case):
    name, ckpt, perm = case
    cfg, tok = ckpt.config, ckpt.tgt_tokenizer
    assert tok.token(cfg.bos_id) == "<bos>" and tok.token(cfg.eos_id) == "<eos>"
    assert tok.token(cfg.unk_id) == "<unk>"
    if name == "start_is_pad":
        assert cfg.bos_id == cfg.pad_id == 0
    else:
        assert (cfg.unk_id, cfg.pad_id, cfg.bos_id, cfg.eos_id) == (0, 1, 2, 3)
    assert ckpt.src_tokenizer.encode("<pad>").unknown  # a spare marker is never read from text


def test_predict_and_batches_match(base, case):
    _, ckpt, perm = case
    for text in TEXTS:
        a, b = base.predict_details(text), ckpt.predict_details(text)
        assert a.text == b.text and a.source.unknown == b.source.unknown
        assert _old(perm, b.tokens) == a.tokens
    assert ckpt.predict_batch(TEXTS) == base.predict_batch(TEXTS)  # padded batch


def test_stepper_and_beam_search_match(base, case):
    _, ckpt, perm = case
    for text in ("helloworld", "abc"):
        src_a = torch.tensor(base.encode_source(text).ids)
        src_b = torch.tensor(ckpt.encode_source(text).ids)
        sa = attnviz.GreedyStepper(base.model, src_a, base.config.bos_id, base.config.eos_id)
        sb = attnviz.GreedyStepper(ckpt.model, src_b, ckpt.config.bos_id, ckpt.config.eos_id)
        sa.run()
        sb.run()
        assert _old(perm, sb.tokens) == sa.tokens
        for ra, rb in zip(sa.steps, sb.steps, strict=True):
            torch.testing.assert_close(rb.probs, ra.probs[perm], atol=1e-5, rtol=1e-4)
        ta, tb = sa.trace(), sb.trace()
        for kind, layer in ta.keys():
            torch.testing.assert_close(
                tb.weights(kind, layer), ta.weights(kind, layer), atol=1e-5, rtol=1e-4
            )
        sb.sync(sb.tokens[:3])  # rewinds and keeps the prefix
        assert _old(perm, sb.tokens) == sa.tokens[:3]
        ba = attnviz.beam_search(base.model, src_a, base.config.bos_id, base.config.eos_id)[0]
        bb = attnviz.beam_search(ckpt.model, src_b, ckpt.config.bos_id, ckpt.config.eos_id)[0]
        assert _old(perm, bb.tokens) == ba.tokens
        assert bb.score == pytest.approx(ba.score, abs=1e-4)


def test_ablation_matches(base, case):
    _, ckpt, _ = case
    heads = analysis.all_heads(base, kinds=["cross"])[:3]
    a = analysis.ablate(base, "helloworld", heads)
    b = analysis.ablate(ckpt, "helloworld", heads)
    assert (a.baseline, a.ablated, a.baseline_tokens) == (b.baseline, b.ablated, b.baseline_tokens)
    np.testing.assert_allclose(b.prob_ablated, a.prob_ablated, atol=1e-5)
    ea = analysis.head_effects(base, ["helloworld", "abc"], heads)
    eb = analysis.head_effects(ckpt, ["helloworld", "abc"], heads)
    assert [(e.site, e.changed_outputs) for e in ea] == [(e.site, e.changed_outputs) for e in eb]
    np.testing.assert_allclose(
        [e.max_prob_change for e in eb], [e.max_prob_change for e in ea], atol=1e-5
    )


@pytest.mark.parametrize("toggles", [{}, {"causal_off": True}, {"block": [0, 3]}])
def test_mask_lab_matches(base, case, toggles):
    _mask_lab_matches(base, case, toggles)


@pytest.mark.parametrize("case", ["tutorial"], indirect=True)
def test_mask_lab_matches_with_the_padding_mask_off(base, case):
    """The bijection only: where the start id is the pad id, switching the padding mask off
    reads the pad row, which is the start row there, so the two models differ by design."""
    _mask_lab_matches(base, case, {"padding_off": True})


def _mask_lab_matches(base, case, toggles):
    _, ckpt, _ = case
    a = analysis.mask_lab(base, "helloworld", **toggles).experiment
    b = analysis.mask_lab(ckpt, "helloworld", **toggles).experiment
    assert (a.before.outputs, a.after.outputs) == (b.before.outputs, b.after.outputs)
    assert a.before.token_acc == b.before.token_acc and a.after.token_acc == b.after.token_acc
    assert a.reference == b.reference == "task"
    for kind, layer in a.before.trace.keys():
        for run_a, run_b in ((a.before, b.before), (a.after, b.after)):
            wa, wb = run_a.trace.numpy(kind, layer)[0], run_b.trace.numpy(kind, layer)[0]
            ma = run_a.trace.numpy(kind, layer, "mask")[0, 0]
            mb = run_b.trace.numpy(kind, layer, "mask")[0, 0]
            np.testing.assert_array_equal(mb, ma)  # the same cells blocked
            n = 11 if kind != "encoder_self" else 10  # "<bos>" + 10 letters; 10 letters
            np.testing.assert_allclose(wb[:, :n], wa[:, :n], atol=1e-5)  # the real rows


def test_attribution_matches(base, case):
    name, ckpt, _ = case
    a = analysis.attribute(base, "helloworld", step=2, n_steps=8)
    b = analysis.attribute(ckpt, "helloworld", step=2, n_steps=8)
    assert a.token == b.token and a.src_tokens == b.src_tokens and a.tgt_tokens == b.tgt_tokens
    assert b.prob == pytest.approx(a.prob, abs=1e-5)
    if name == "tutorial":  # the pad id is the baseline: the same embedding row only here
        np.testing.assert_allclose(b.ig_src, a.ig_src, atol=1e-4)


def test_inspect_html_and_json_match(base, case, tmp_path):
    name, ckpt, _ = case
    for which, c in (("base", base), (name, ckpt)):
        assert main(["inspect", str(c.path), "--text", "helloworld",
                                 "--html", str(tmp_path / f"{which}.html"),
                                 "--json", str(tmp_path / f"{which}.json")]) == 0  # fmt: skip
    ja = json.loads((tmp_path / "base.json").read_text())
    jb = json.loads((tmp_path / f"{name}.json").read_text())
    assert ja["output"] == jb["output"] == "dlrowolleh"
    assert ja["out_tokens"] == jb["out_tokens"] and ja["src_tokens"] == jb["src_tokens"]
    html = (tmp_path / f"{name}.html").read_text()
    assert "dlrowolleh" in html


def test_an_app_session_matches(base, case):
    from attnviz.app import session

    name, ckpt, _ = case
    views = []
    for c in (base, ckpt):
        view = session.start(session.new_state(str(c.path)), "helloworld")
        view = session.step(view.state)
        assert view.output == "d", view.message
        view = session.run(view.state)
        view = session.back(view.state)
        views.append(view)
    a, b = views
    assert a.output == b.output == "dlrowolleh"  # Back from the end hides only the EOS
    assert a.info["tokens"] == b.info["tokens"]
    fa, fb = a.figures, b.figures
    for key in ("cross", "decoder_self", "encoder_self"):
        za = np.asarray(fa[key].data[0].z, dtype=float)
        zb = np.asarray(fb[key].data[0].z, dtype=float)
        np.testing.assert_allclose(zb, za, atol=1e-5, equal_nan=True)
