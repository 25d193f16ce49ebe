"""The app's beam panel: the tree drawn, a node's hypothesis and continuing the step view from it.

Checked against independent computations: the tree and the winning path against
:func:`attnviz.decode.beam.beam_predict` (``return_tree=True``) and ``Checkpoint.beam``, a node's
attention rows against a teacher-forced recorded forward written here, and the continued step
view against greedy choices made by a fresh stepper.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.app import session, store, views
from attnviz.app import state as app_stamps
from attnviz.app.decoders import DECODERS
from attnviz.app.panels import beam as beamview
from attnviz.decode.beam import beam_predict

TEXT = "helloworld"
NODE = re.compile(r'<g class="([^"]*)" data-node-id="(\d+)"')


@pytest.fixture(scope="module")
def done(models_dir) -> session.SessionState:
    return session.run(session.new_state(str(models_dir / "reverse")), TEXT).state


@pytest.fixture(scope="module")
def shown(done) -> session.BeamView:
    return session.beam_view(done, 4)


def _nodes(html: str) -> dict[int, set[str]]:
    """``{node id: its classes}`` of every node drawn."""
    return {int(i): set(c.split()) for c, i in NODE.findall(html)}


def _off_path(panel: beamview.BeamPanel) -> int:
    """A node off the winning path whose hypothesis greedy decoding would not produce."""
    best = set(panel.best_path)
    return next(n.id for n in panel.tree.nodes if n.id not in best and n.step >= 2)


def test_the_tree_has_one_node_per_tree_node_and_the_winning_path_highlighted(done, shown):
    ckpt = store.get_checkpoint(done.model)
    ref = beam_predict(ckpt, TEXT, 4, return_tree=True)  # the library's own search
    nodes = _nodes(shown.html)
    assert sorted(nodes) == list(range(len(ref.tree.nodes)))
    assert [n.token for n in shown.panel.tree.nodes] == [n.token for n in ref.tree.nodes]
    best = {i for i, c in nodes.items() if "best" in c}
    assert best == {0, *(n.id for n in ref.tree.path(ref.tree.best))}
    assert ref.tree.tokens(ref.tree.best) == ckpt.beam(TEXT, 4).tokens  # the best hypothesis
    finished = {i for i, c in nodes.items() if "finished" in c}
    assert finished == {n.id for n in ref.tree.nodes if n.finished} and finished
    # token and log-prob on each node, full values in the tooltip
    first = ref.tree.nodes[1]
    label = ckpt.tgt_tokenizer.token(first.token)
    assert f"“{label}” · log p {first.logp:.3f}" in shown.html
    assert "“helloworld”: <b>dlrowolleh</b>" in shown.html  # the summary line stays
    # each node also shows its hypothesis's score (a bad one adding −0.00 is still far down)
    groups = dict(re.findall(r'data-node-id="(\d+)"[^>]*>(.*?)</g>', shown.html))
    score = re.compile(r'<text class="score"[^>]*>([^<]*)</text>')
    assert score.findall(groups["0"]) == []  # the start token has none
    for n in ref.tree.nodes[1:]:
        assert score.findall(groups[str(n.id)]) == [f"Σ {n.score:.2f}".replace("-", "−")]


def test_the_layout_is_step_by_rank_and_never_overlaps(shown):
    tree = shown.panel.tree
    pos = beamview.layout(tree)
    assert len(set(pos.values())) == len(tree.nodes)
    for n in tree.nodes:
        assert pos[n.id][0] == n.step + 1
        same = sorted((m for m in tree.nodes if m.step == n.step), key=lambda m: -m.score)
        assert pos[n.id][1] == [m.id for m in same].index(n.id)  # rank 0 = the best score


def test_a_long_search_scrolls_sideways_at_a_readable_size(models_dir):
    state = session.new_state(str(models_dir / "reverse"))
    text = "abcdefghij" * 4  # 40 source letters: 40 steps and the end token
    v = session.beam_view(state, 4, text=text)
    assert v.panel is not None, v.html
    steps = max(n.step for n in v.panel.tree.nodes) + 1
    assert steps >= 40
    width = int(re.search(r'<svg[^>]* width="(\d+)"', v.html).group(1))
    assert width >= steps * beamview.COL_W  # a fixed column per step, not squeezed
    assert "overflow-x:auto" in v.html


def test_the_files_hold_the_svg_and_the_tree(shown):
    svg, js = shown.files
    assert svg.endswith(".svg") and js.endswith(".json")
    root = ET.parse(svg).getroot()  # well-formed XML: opens in a browser or an editor
    ns = "{http://www.w3.org/2000/svg}"
    groups = [g for g in root.iter(f"{ns}g") if g.get("data-node-id") is not None]
    assert len(groups) == len(shown.panel.tree.nodes)
    data = json.loads(Path(js).read_text(encoding="utf-8"))
    assert data["best"] == shown.panel.tree.best and data["beam_size"] == 4
    assert data["nodes"] == shown.panel.tree.to_dict()["nodes"]
    assert data["hypotheses"][0]["tokens"] == shown.panel.best_tokens


@pytest.mark.parametrize("bad", [0, 9, 2.5, "four", ""])
def test_a_bad_beam_size_is_one_line(done, bad):
    v = session.beam_view(done, bad)
    assert v.panel is None and v.files == []
    assert v.html.startswith("⚠ the beam size must be a whole number 1..8") and "\n" not in v.html


def test_a_node_shows_its_hypothesis_cross_attention(done, shown):
    ckpt = store.get_checkpoint(done.model)
    node = _off_path(shown.panel)
    v = session.beam_node(done, shown.panel, str(node))
    assert v.panel.selected == node and "selected" in _nodes(v.html)[node]
    tokens = shown.panel.tree.tokens(node)
    # independent: the hypothesis teacher-forced through a recorded forward written here
    cfg = ckpt.config
    src = torch.tensor([ckpt.encode_source(TEXT).ids])
    tgt = torch.tensor([[cfg.bos_id, *tokens[:-1]]])
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        ckpt.model(src, tgt)
    layer, _ = views.view_of(done, ckpt, "cross")
    want = trace.weights("cross", layer)[0].mean(0).numpy()  # [n, Ts], the mean over heads
    got = np.asarray(v.figure.data[0].z, dtype=float)
    assert got.shape == (len(tokens), len(TEXT))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert f"hypothesis <b>{ckpt.tgt_tokenizer.decode(tokens)}</b>" in v.message
    # rows labelled as the step view labels them: by the token fed at that step
    fed = [views.display_token(ckpt.tgt_tokenizer.token(t)) for t in [cfg.bos_id, *tokens[:-1]]]
    assert list(v.figure.layout.yaxis.ticktext) == [html.escape(t) for t in fed]  # plotly: HTML
    one = session.beam_node(dataclasses.replace(done, view={"cross": [0, "H2"]}), shown.panel, node)
    np.testing.assert_allclose(
        np.asarray(one.figure.data[0].z, dtype=float),
        trace.weights("cross", 0)[0, 2].numpy(),
        atol=1e-5,
    )


@pytest.mark.parametrize(
    ("node", "says"),
    [("99999", "node must be in 1..52, got 99999"), ("x", "not a node id: 'x'"),
     ("0", "node 0 is the start token"), ("", "click a node of the tree first")],
)  # fmt: skip
def test_a_bad_node_is_one_line_and_the_panel_is_kept(done, shown, node, says):
    chosen = session.beam_node(done, shown.panel, 5).panel
    v = session.beam_node(done, chosen, node)
    assert v.message.startswith("⚠") and says in v.message.replace("&#x27;", "'")
    assert "\n" not in v.message
    assert v.panel == chosen and v.panel.selected == 5 and v.figure is None and v.html == ""


def test_continuing_from_a_node_puts_the_step_view_at_its_hypothesis(done, shown):
    ckpt = store.get_checkpoint(done.model)
    node = _off_path(shown.panel)
    chosen = session.beam_node(done, shown.panel, node).panel
    tokens = chosen.tree.tokens(node)
    view, panel = session.continue_beam(done, chosen, node)
    state = view.state
    assert not view.message.startswith("⚠"), view.message
    assert state.tokens == tokens and state.step == len(tokens)
    assert view.output == ckpt.tgt_tokenizer.decode(tokens)
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        assert stepper.tokens == tokens  # the session's own stepper holds the prefix
    # forced exactly where greedy decoding, fed the hypothesis so far, chooses another token
    greedy = [greedy_after(ckpt, tokens[:i]) for i in range(len(tokens))]
    assert state.forced == [i for i, t in enumerate(tokens) if greedy[i] != t] and state.forced
    assert view.payload["forced"] == state.forced  # the output line marks them
    assert panel.stamp == app_stamps.panel_stamps(state)["beam"]  # the tree stays current
    # later Steps continue greedily; Back over the forced token undoes it
    nxt = session.step(state)
    assert nxt.state.tokens == [*tokens, greedy_after(ckpt, tokens)]
    undone = state
    while undone.forced:
        undone = session.back(undone).state
    assert undone.tokens == tokens[: undone.step]


def greedy_after(ckpt, prefix: list[int]) -> int:
    probe = ckpt.stepper(TEXT)
    probe.sync(prefix)
    return probe.step().token


def test_continuing_starts_the_panels_input_when_the_step_view_shows_another(done, models_dir):
    fresh = session.new_state(str(models_dir / "reverse"))
    v = session.beam_view(fresh, 3, text="abc")  # the typed input, not started yet
    view, panel = session.continue_beam(fresh, v.panel, v.panel.tree.best)
    assert view.state.text == "abc" and view.state.tokens == v.panel.best_tokens
    assert panel.stamp == app_stamps.panel_stamps(view.state)["beam"]


def test_continuing_on_an_input_the_model_warns_about_is_not_refused(models_dir):
    """A long input's view carries a warning (⚠ longer than trained on): still continued."""
    state = session.new_state(str(models_dir / "reverse"))
    v = session.beam_view(state, 4, text="abcdefghij" * 3)
    node = len(v.panel.tree.nodes) - 1
    view, panel = session.continue_beam(state, v.panel, node)
    assert "longer than anything" in view.message and panel is not None
    assert panel.stamp == app_stamps.panel_stamps(view.state)["beam"]  # continued, not refused
    assert view.state.tokens == v.panel.tree.tokens(node)


def test_a_stale_tree_is_cleared_and_refuses_clicks(done, shown):
    stamps = {"beam": app_stamps.panel_stamps(done)["beam"]}
    assert not app_stamps.stale_panels(stamps, session.back(done).state)  # a step keeps the tree
    other = session.start(done, "abc").state
    assert app_stamps.follow(stamps, other, "step").clear == {"beam"}
    assert app_stamps.follow(stamps, other, "attr").clear == {"beam"}  # from another tab too
    refused = session.beam_node(other, shown.panel, 5)
    assert "changed since this tree was drawn" in refused.message and refused.figure is None
    view, kept = session.continue_beam(other, shown.panel, 5)
    assert "changed since this tree was drawn" in view.message and kept is None
    assert view.state.tokens == other.tokens  # the step view is kept
    assert session.beam_node(done, None, 5).message.startswith("⚠ press “Decode with beam")
