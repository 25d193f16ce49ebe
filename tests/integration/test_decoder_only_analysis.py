"""The analyses on a decoder-only model (models/induction): health check, ablation, Integrated
Gradients, the offline report and notebook view, Compare; each reads the weights the model
used, and what does not apply is refused in one line."""

from __future__ import annotations

import json

import pytest

import attnviz
from attnviz import analysis
from attnviz.core.errors import InputError
from attnviz.render import report

TEXT = "qXb3LmZ7tRw2Kp9"


@pytest.fixture(scope="module")
def ckpt(models_dir):
    return attnviz.load_checkpoint(models_dir / "induction")


def test_health_check_passes_and_finds_no_leak(ckpt):
    rep = analysis.check(ckpt, n=12, ablation_sample=4)
    by = {f.check: f for f in rep.findings}
    assert by["causal"].level == "ok" and by["padding"].level == "ok"
    assert {s.kind for s in rep.stats} == {"decoder_self"}


def test_zeroing_the_induction_layer_breaks_the_copy_and_ablation_reads_the_continuation(ckpt):
    heads = analysis.all_heads(ckpt)
    assert {k for k, _, _ in heads} == {"decoder_self"} and len(heads) == 8
    r = analysis.ablate(ckpt, TEXT, [h for h in heads if h[1] == 1])
    assert r.baseline == TEXT and r.changed
    assert len(r.prob_baseline) == len(r.baseline_tokens) == len(TEXT) + 1  # + <eos>
    assert r.prob_baseline[1:].min() > 0.9 and r.prob_ablated[1:].max() < 0.5
    effects = analysis.head_effects(ckpt, [TEXT])
    assert len(effects) == 8 and effects[0].changed_outputs == 1


def test_integrated_gradients_split_into_prompt_and_output_and_complete(ckpt):
    a = analysis.attribute(ckpt, TEXT, step=3, n_steps=64)
    prompt = ckpt.encode_source(TEXT).pieces
    assert a.src_tokens == prompt and len(a.ig_src) == len(prompt) and len(a.ig_tgt) == 3
    assert a.delta < 0.05  # the path integral converged
    assert set(a.cross) == {0, 1} and all(len(row) == len(prompt) for row in a.cross.values())
    assert "ig~self L1" in a.agreement and "ig~rollout" in a.agreement


def test_report_json_and_notebook_view_show_one_sequence(ckpt, tmp_path):
    ins = analysis.inspect_text(ckpt, TEXT)
    n = len(ckpt.encode_source(TEXT).ids) + len(ins.out_ids) - 1
    assert len(ins.tgt_tokens) == n
    assert ins.trace.weights("decoder_self", 1).shape[-2:] == (n, n)
    report.write_html(ins, tmp_path / "r.html", ckpt)
    page = (tmp_path / "r.html").read_text()
    assert "Training playback: self-attention L1" in page and "Causal mask off" in page
    analysis.write_json(ins, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    want = {f"decoder_self.{i}.{what}" for i in (0, 1) for what in ("weights", "mask")}
    assert set(doc["attention"]) == want
    view = attnviz.show(ckpt, TEXT)
    assert "decoder_self" in view._repr_html_()


def test_compare_and_faithfulness(ckpt):
    c = analysis.compare(ckpt, ckpt, [TEXT])
    assert c.divergence["decoder_self"].shape == (2, 4) and c.divergence["cross"].size == 0
    assert float(c.divergence["decoder_self"].max()) == 0.0
    with pytest.raises(InputError, match="this one is decoder-only"):
        analysis.faithfulness(ckpt, [TEXT])
