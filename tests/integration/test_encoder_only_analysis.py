"""The analyses on an encoder-only model (a tiny random BERT): health check, ablation,
Integrated Gradients, lenses, Compare, the export and the notebook view; each reads the pass
the model made over the sentence (its fillers at the mask tokens, or its prediction of each
token), and what does not apply is named or refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import tiny_bert

import attnviz
from attnviz import analysis
from attnviz.analysis import fill_mask, masked_lm
from attnviz.core.edits import ReplaceWeights
from attnviz.core.errors import InputError
from attnviz.render import report

TEXT = "the [MASK] sat on the [MASK]"
PLAIN = "the cat sat [SEP] a dog ran"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    tiny_bert(folder)
    return attnviz.load_checkpoint(folder)


def test_health_finds_no_nan_names_the_causal_leak_as_not_applying_and_reads_sinks(ckpt):
    rep = analysis.check(ckpt, texts=[TEXT, PLAIN, "my friend reads"], ablation_sample=2)
    by = {f.check: f for f in rep.findings}
    assert by["finite"].level == "ok" and by["padding"].level == "ok"
    assert by["causal"].level == "info" and "does not apply" in by["causal"].message
    assert by["sinks"].check == "sinks" and "dead heads" in by
    assert {s.kind for s in rep.stats} == {"encoder_self"} and len(rep.stats) == 8
    assert all(np.isfinite(s.sink) for s in rep.stats)  # [CLS] and [SEP] are sink keys
    assert rep.passed


def test_the_start_share_is_the_weight_on_cls(ckpt):
    """BERT's start is [CLS], not the config's bos id: "on start token" equals "on first"."""
    stats = analysis.inspect_text(ckpt, TEXT).stats
    assert stats and all(s.bos == pytest.approx(s.first) and s.bos > 0 for s in stats)


def on_cls(w):  # every query of a head on the first key, [CLS]
    out = torch.zeros_like(w)
    out[..., 0] = 1.0
    return out


def test_health_names_a_head_parked_on_cls_as_a_sink(ckpt):
    parked = [ReplaceWeights("encoder_self", 1, on_cls, head=2)]
    rep = analysis.check(ckpt, texts=[TEXT, PLAIN], edits=parked, ablation_sample=0)
    by = {f.check: f for f in rep.findings}
    assert by["sinks"].level == "info" and set(by["sinks"].details) == {"encoder_self L1 H2"}


def test_ablating_no_head_changes_nothing_and_every_head_moves_the_fillers(ckpt):
    heads = analysis.all_heads(ckpt)
    assert {k for k, _, _ in heads} == {"encoder_self"} and len(heads) == 8
    fill = fill_mask(ckpt, TEXT, k=1)
    none = analysis.ablate(ckpt, TEXT, [])
    assert none.positions == [pos for pos, _ in fill.fillers]
    assert none.baseline_tokens == [top[0][0] for _, top in fill.fillers]
    np.testing.assert_array_equal(none.prob_ablated, none.prob_baseline)
    np.testing.assert_allclose(none.prob_baseline, [top[0][1] for _, top in fill.fillers],
                               atol=1e-5)  # fmt: skip
    assert none.ablated_tokens == none.baseline_tokens and not none.changed
    every = analysis.ablate(ckpt, TEXT, heads)
    assert np.abs(every.prob_change).max() > 0 and len(every.ablated_tokens) == 2
    effects = analysis.head_effects(ckpt, [TEXT, PLAIN])
    assert len(effects) == 8 and max(e.max_prob_change for e in effects) > 0
    plain = analysis.ablate(ckpt, PLAIN, [("encoder_self", 0, 1)])  # no mask: each token
    assert plain.positions == list(range(len(ckpt.encode_source(PLAIN).ids)))
    assert plain.baseline_tokens == ckpt.encode_source(PLAIN).pieces


def test_integrated_gradients_explain_a_fillers_probability_over_every_token(ckpt):
    a = analysis.attribute(ckpt, TEXT, step=1, n_steps=64)
    fill = fill_mask(ckpt, TEXT, k=1)
    pos, top = fill.fillers[1]
    assert a.token == top[0][0] and a.prob == pytest.approx(top[0][1], abs=1e-5)
    assert a.src_tokens == fill.pieces and len(a.ig_src) == len(fill.ids)
    assert len(a.ig_tgt) == 0 and a.delta < 0.05  # the path integral converged
    want = fill.trace.numpy("encoder_self", 1)[0].mean(0)[pos]  # the mask's own row
    np.testing.assert_allclose(a.cross[1], want, atol=1e-6)
    assert {"ig~self L0", "ig~self L1", "ig~rollout", "gxi~rollout"} <= set(a.agreement)
    with pytest.raises(InputError, match=r"write \[MASK\] where"):
        analysis.attribute(ckpt, PLAIN, step=0)
    with pytest.raises(InputError, match="2 mask tokens"):
        analysis.attribute(ckpt, TEXT, step=2)


def test_compare_with_itself_differs_nowhere_and_scores_the_fillers(ckpt, models_dir):
    c = analysis.compare(ckpt, ckpt, [TEXT, PLAIN])
    assert c.divergence["encoder_self"].shape == (2, 4)
    assert c.divergence["cross"].size == 0 and c.divergence["decoder_self"].size == 0
    assert float(c.divergence["encoder_self"].max()) == 0.0 and c.agreement == 1.0
    fill = fill_mask(ckpt, TEXT, k=1)
    assert [t.token for t in c.tokens[0]] == [top[0][0] for _, top in fill.fillers]
    assert all(t.change == 0 and t.rank_a == 1 for t in c.tokens[0])
    assert c.targets[1] == ckpt.encode_source(PLAIN).ids  # no mask: each token itself
    with pytest.raises(InputError, match="A is encoder-only and B is encoder-decoder"):
        analysis.compare(ckpt, attnviz.load_checkpoint(models_dir / "reverse"), [TEXT])


def test_json_npz_report_and_notebook_view_hold_the_read_pass(ckpt, tmp_path):
    ins = analysis.inspect_text(ckpt, TEXT)
    fill = fill_mask(ckpt, TEXT, k=1)
    assert ins.positions == [pos for pos, _ in fill.fillers] and ins.tgt_tokens == []
    assert ins.out_tokens == [top[0][0] for _, top in fill.fillers]
    assert ins.probs.shape == (2, len(ins.vocab))
    analysis.write_json(ins, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert set(doc["attention"]) == {f"encoder_self.{i}.{w}" for i in (0, 1)
                                     for w in ("weights", "mask")}  # fmt: skip
    assert doc["positions"] == ins.positions and doc["src_tokens"] == fill.pieces
    npz = np.load(analysis.write_npz(ins, tmp_path / "r.npz"))
    for layer in (0, 1):
        want = fill.trace.numpy("encoder_self", layer)[0]  # [H, T, T], as recorded
        np.testing.assert_array_equal(npz[f"encoder_self.{layer}.weights"], want)
        np.testing.assert_allclose(doc["attention"][f"encoder_self.{layer}.weights"], want,
                                   atol=1e-6)  # fmt: skip
    assert npz["positions"].tolist() == ins.positions
    page = report.write_html(ins, tmp_path / "r.html", ckpt).read_text()
    assert "Self-attention" in page or "encoder self-attention" in page.lower()
    assert "Mask at position 2" in page and "Position 6: token at" in page
    assert "Fillers at every mask token" in page and "Next-token probabilities at" not in page
    assert report.report_data(page)[0]["kind"] == "encoder_self"
    view = attnviz.show(ckpt, TEXT)
    assert view.data["kind"] == "encoder_self" and "encoder_self" in view._repr_html_()
    plain = analysis.inspect_text(ckpt, PLAIN)  # no mask: each token, nothing attributed
    assert plain.positions == list(range(len(plain.src_tokens)))
    assert "Mask at position" not in report.inspection_page(plain, ckpt)


def test_lenses_read_the_encoder_stack_of_the_read_pass(ckpt):
    read = masked_lm.read_pass(ckpt, TEXT)
    for layer in (0, 1):
        roll = analysis.lens(ckpt.model, read.trace, "encoder_self", layer, "rollout")
        assert roll.shape == (1, 1, len(read.enc.ids), len(read.enc.ids))
        np.testing.assert_allclose(roll.sum(-1), 1.0, atol=1e-5)
        norms = analysis.lens(ckpt.model, read.trace, "encoder_self", layer, "norms")
        assert norms.shape == (1, 4, len(read.enc.ids), len(read.enc.ids)) and norms.min() >= 0
