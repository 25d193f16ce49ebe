"""The "Why this token" tab's views (:mod:`attnviz.app.panels.why`) on the shipped models: what
they draw is the library's result, refusals are one line, and each panel goes stale when the
step changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import why_results

from attnviz import analysis
from attnviz.app import session
from attnviz.app import state as app_stamps
from attnviz.app.panels import why as wv
from attnviz.app.panels import why_routes as wr

CLEAN, CORRUPTED = "abcdefabcde", "abcdxfabcde"


@pytest.fixture(scope="module")
def stepped(models_dir):
    """models/induction with one Step taken on the clean prompt."""
    return session.step(session.new_state(str(models_dir / "induction")), CLEAN).state


def _cells(fig) -> dict[str, float]:
    """Every drawn cell of the attribution figure: part name -> value (NaN cells skipped)."""
    out = {}
    for trace in fig.data:
        z, names = np.asarray(trace.z, dtype=float), np.asarray(trace.customdata, dtype=object)
        for v, n in zip(z.ravel(), names.ravel(), strict=True):
            if n:
                assert n not in out
                out[n] = float(v)
    return out


def test_the_attribution_cells_are_the_library_parts(stepped):
    view = wv.attribution(stepped)
    ckpt = wv.shown(stepped).ckpt
    want = analysis.direct_attribution(ckpt, stepped.src_ids)
    assert want.token_id == stepped.tokens[0] == view.result.token_id
    assert _cells(view.figure) == {p.name: p.value for p in want.parts}
    assert abs(sum(_cells(view.figure).values()) - want.logit) < 1e-4
    assert json.loads(json.dumps(view.data))["values"] == [p.value for p in want.parts]


def test_why_a_and_not_b_uses_the_runner_up_candidate(stepped):
    choices, default = wv.candidates(stepped)
    assert default == choices[0][1] and default.startswith("#")
    view = wv.attribution(stepped, default)
    ckpt = wv.shown(stepped).ckpt
    want = analysis.direct_attribution(ckpt, stepped.src_ids, versus=int(default[1:]))
    assert view.result.versus_id == int(default[1:])
    assert _cells(view.figure) == {p.name: p.value for p in want.parts}
    assert "and not" in view.message


def test_the_lens_rows_are_the_library_lens(stepped):
    view = wv.lens(stepped)
    want = analysis.logit_lens(wv.shown(stepped).ckpt, stepped.src_ids)
    assert [r[0] for r in view.rows] == want.layers
    assert [r[1] for r in view.rows] == [int(r) + 1 for r in want.rank]
    grid = wv.grid(stepped)
    assert np.array_equal(np.asarray(grid.figure.data[0].z, dtype=np.float32), grid.result.prob)


@pytest.mark.parametrize("what", ["heads", "head_positions", "resid", "patterns"])
def test_the_patching_grid_shown_is_the_library_grid(stepped, what):
    view = wv.patching(stepped, CORRUPTED, "f", "#6", what)
    want = analysis.patch(wv.shown(stepped).ckpt, CLEAN, CORRUPTED, "f", 6, what, progress=False)
    z = np.asarray(view.figure.data[0].z, dtype=float)
    assert np.allclose(z, want.grid.reshape(z.shape), equal_nan=True, atol=1e-9)
    assert len(view.figure.layout.yaxis.ticktext) == z.shape[0]
    assert len(view.figure.layout.xaxis.ticktext) == z.shape[1]


def test_patching_the_previous_token_head_breaks_induction(stepped):
    """Clean 'abcdefabcde' vs corrupted 'abcdxfabcde' (answer f, wrong x), noising: the
    corrupted layer-0 previous-token head L0 H0 alone drops the metric to ~0."""
    view = wv.patching(stepped, CORRUPTED, "f", "x", "heads", "noising")
    assert view.result.clean_diff == pytest.approx(11.97, abs=0.01)
    assert view.result.grid[0, 0] == pytest.approx(0.008, abs=0.002)
    assert view.result.grid[0, 0] == np.nanmin(view.result.grid)
    assert "Most damaging: **decoder_self 0 · H0** (0.008" in view.message


def test_patching_defaults_to_the_token_produced_and_the_runner_up(stepped):
    view = wv.patching(stepped, CORRUPTED, "", "", "heads")
    _, default = wv.candidates(stepped)
    assert view.result.answer == "f"
    assert view.data["wrong"] == wv.shown(stepped).ckpt.tgt_tokenizer.token(int(default[1:]))


def test_the_flow_figure_draws_the_route(stepped):
    view = wr.flow_graph(stepped, 0.04)
    want = analysis.flow(wv.shown(stepped).ckpt, stepped.src_ids, 0.04)
    assert view.result.route == want.route
    n_lines = sum(len([x for x in t.x if x is None]) for t in view.figure.data if t.mode == "lines")
    assert n_lines == len(want.route)


def test_a_post_norm_model_is_attributed_and_routed(models_dir):
    """models/reverse-gpt norms after each block: its norms frozen, the parts still add up to
    the logit, and the route reaches the prompt."""
    state = session.step(session.new_state(str(models_dir / "reverse-gpt")), "hello").state
    view = wv.attribution(state)
    assert abs(view.result.total - view.result.logit) < 1e-4
    assert "attn norm bias" in set(view.figure.layout.xaxis2.ticktext)
    flow_view = wr.flow_graph(state)
    assert flow_view.figure is not None and flow_view.result.route


def test_an_encoder_decoder_flow_draws_the_source_and_cross_edges(models_dir):
    """models/reverse (encoder-decoder): the source's tokens label the left of the x axis,
    and cross-attention edges run from the encoder's output into the decoder."""
    state = session.step(session.new_state(str(models_dir / "reverse")), "helloworld").state
    state = session.step(state).state
    state = session.step(state).state
    view = wr.flow_graph(state, 0.0)
    res = view.result
    assert res.source_tokens == list("helloworld")
    assert view.figure.layout.xaxis.ticktext[:10] == tuple("helloworld")
    assert any(e.kind == "cross" for e in res.edges)
    assert "cross" in {t.name for t in view.figure.data}
    assert "cross-attention edge reads source position" in view.message
    # at the default threshold the route stops where layer 1's cross-attention output cancels
    # most of the residual: no part is close to the block's output, and the message says so
    pruned = wr.flow_graph(state)
    assert pruned.result.dead_ends() == ["c1_2"] and "The route stops at c1_2" in pruned.message
    xs = pruned.figure.layout.xaxis
    assert xs.range[1] > max(xs.tickvals)  # every token on the axis, not only the route's


def test_before_a_step_and_bad_patching_input_are_one_line(stepped, models_dir):
    fresh = session.new_state(str(models_dir / "induction"))
    assert wv.attribution(fresh).message.startswith("⚠")
    bad = wv.patching(stepped, "abc")  # fewer tokens
    assert bad.message.startswith("⚠") and "as many tokens" in bad.message
    assert wv.patching(stepped, "").message.startswith("⚠")


def test_every_panel_goes_stale_when_the_step_changes(stepped):
    now = app_stamps.panel_stamps(stepped)
    stamps = {k: now[k] for k in (*wv.PANELS, wv.ALT)}
    later = session.step(stepped).state
    plan = app_stamps.follow(stamps, later, "step")
    assert plan.clear == {*wv.PANELS, wv.ALT}
    shown_tab = app_stamps.follow(stamps, later, "why")  # the menu follows the tab shown
    assert shown_tab.rerun == {wv.ALT} and shown_tab.clear == set(wv.PANELS)


def test_the_json_download_holds_the_result(stepped):
    view = wv.patching(stepped, CORRUPTED, "f", "x", "head_positions")
    path = wv.write_json(view.data, "patching")
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    assert data["axes"] == ["module", "head", "position"]
    assert data["clean_diff"] == pytest.approx(view.result.clean_diff)


def test_a_grid_too_long_for_the_app_is_estimated_by_attribution_patching(stepped, monkeypatch):
    monkeypatch.setattr(wv, "BUDGET_S", 0.0)
    view = wv.patching(stepped, CORRUPTED, "f", "x", "head_positions")
    assert view.message.startswith("Exact patching would take about")
    assert view.result.grid is None and view.result.approx.shape == (2, 4, 12)
    z = np.asarray(view.figure.data[0].z, dtype=float)
    assert np.allclose(z, view.result.approx.reshape(z.shape), equal_nan=True)


def test_a_patched_cell_opens_as_its_own_run(stepped):
    grid = wv.patching(stepped, CORRUPTED, "f", "x", "heads", "noising")
    assert grid.cell == "0,0" and ("decoder_self 0 · H0", "0,0") in grid.cells
    assert len(grid.cells) == 8
    view = wr.open_cell(stepped, CORRUPTED, "f", "x", "heads", "noising", grid.cell)
    assert view.result.metric == pytest.approx(grid.result.grid[0, 0], abs=1e-5)
    assert [r[0] for r in view.rows][0] != "f" and "decoder_self 0 · H0" in view.message
    assert wr.open_cell(stepped, CORRUPTED, "f", "x", "heads", "noising", None).message.startswith(
        "⚠"
    )


def _recorded(ckpt, text, step=None):
    """The attention of the model's own forward on what the tab explains, recorded."""
    import torch

    import attnviz
    from attnviz.analysis.why import prepare

    prep = prepare(ckpt, text, step)
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        prep.last(prep.tensor(ckpt.device))
    return trace


def test_a_flow_edge_opens_its_heads_with_the_recorded_attention(stepped):
    """The edge offered first reaches the predicting position; opened, its heads are ranked by
    contribution, each drawn as the attention the model recorded beside its contribution map,
    whose cell at the edge is the head's share of it."""
    graph = wr.flow_graph(stepped, 0.04)
    res, ckpt = graph.result, wv.shown(stepped).ckpt
    assert graph.cells and all(res.edges[int(v)].site for _, v in graph.cells)
    weights = [res.edges[int(v)].weight for _, v in graph.cells]
    assert weights == sorted(weights, reverse=True)
    kept = (app_stamps.panel_stamps(stepped)["why_flow"], res)
    view = wr.open_edge(stepped, kept, graph.cell)
    e = res.edges[int(graph.cell)]
    q, k = res.nodes[e.target]["position"], res.nodes[e.source]["position"]
    assert q == res.position and k != q
    assert [r[1] for r in view.rows] == [f"H{h}" for h, _ in e.heads]
    trace = _recorded(ckpt, stepped.src_ids)
    heat = [np.asarray(t.z, dtype=float) for t in view.figure.data]
    assert len(heat) == 2 * min(3, len(e.heads))
    for n, (h, share) in enumerate(e.heads[:3]):
        want = trace.numpy(*e.site)[0, h]
        np.testing.assert_allclose(heat[2 * n], want, atol=1e-6)  # left: as recorded
        np.testing.assert_allclose(heat[2 * n + 1], res.maps[e.site].contribution[h])
        assert heat[2 * n + 1][q, k] == pytest.approx(share, abs=1e-6)
        assert view.rows[n][3] == pytest.approx(float(want[q, k]), abs=1e-4)
    np.testing.assert_allclose(view.data["heads"][0]["attention_map"], heat[0], atol=1e-7)
    later = session.step(stepped).state  # the graph kept was drawn for an earlier step
    assert "draw it again" in wr.open_edge(later, kept, graph.cell).message
    assert wr.open_edge(stepped, None, graph.cell).message.startswith("⚠")


def test_a_cross_attention_edge_opens_over_the_source(models_dir):
    """models/reverse: a cross-attention edge's heads show the cross-attention the decoder
    recorded, the source's tokens along the keys."""
    state = session.step(session.new_state(str(models_dir / "reverse")), "helloworld").state
    state = session.step(session.step(state).state).state
    graph = wr.flow_graph(state, 0.0)
    res = graph.result
    cross = next(int(v) for _, v in graph.cells if res.edges[int(v)].kind == "cross")
    kept = (app_stamps.panel_stamps(state)["why_flow"], res)
    view = wr.open_edge(state, kept, cross)
    e = res.edges[cross]
    s = wv.shown(state)
    trace = _recorded(s.ckpt, s.text, s.step)
    h = e.heads[0][0]
    np.testing.assert_allclose(np.asarray(view.figure.data[0].z), trace.numpy(*e.site)[0, h],
                               atol=1e-6)  # fmt: skip
    assert e.site[0] == "cross" and view.figure.layout.xaxis.ticktext[:10] == tuple("helloworld")
    # menus read plain text, messages escape it once: “<bos>” either way on the page
    assert any("“<bos>”" in name for name, _ in graph.cells)
    assert not any("&" in name for name, _ in graph.cells) and "&amp;" not in view.message


def test_an_opened_cell_shows_its_patched_runs_attention(stepped):
    """The cell's own head first; any head on request: the patched run's recorded weights
    beside the unpatched run's, as the library's patched_run records them."""
    from attnviz.analysis.patched_run import patched_run

    ckpt = wv.shown(stepped).ckpt
    view = wr.open_cell(stepped, CORRUPTED, "f", "x", "heads", "noising", "0,1")
    assert view.cell == "decoder_self 0 1" and len(view.cells) == 8
    run = patched_run(ckpt, CLEAN, CORRUPTED, "f", "x", "heads", [0, 1], direction="noising")
    later = wr.open_cell(stepped, CORRUPTED, "f", "x", "heads", "noising", "0,1",
                         "decoder_self 1 2")  # fmt: skip
    patched, base = (np.asarray(t.z, dtype=float) for t in later.figure.data)
    np.testing.assert_allclose(patched, run.trace.numpy("decoder_self", 1)[0, 2], atol=1e-6)
    np.testing.assert_allclose(base, run.base.numpy("decoder_self", 1)[0, 2], atol=1e-6)
    assert not np.allclose(patched, base)  # a layer-0 head's output moves layer 1's attention
    np.testing.assert_allclose(later.data["attention"]["patched"], patched, atol=1e-7)
    resid = wr.open_cell(stepped, CORRUPTED, "f", "x", "resid", "denoising", "1,4")
    assert resid.cell == "decoder_self 1 0" and resid.figure is not None


def test_the_report_holds_the_why_results_of_the_step(stepped):
    """The Export tab's HTML report: the attribution and the lens of the step shown, and the
    patching grid and flow graph the tab computed for that same step (not an earlier one's)."""
    from attnviz.app.panels import export
    from attnviz.render import report

    ckpt = wv.shown(stepped).ckpt
    kept = why_results(stepped, CORRUPTED)
    view = export.export(stepped, "html", "pieces", kept)
    page = Path(view.path).read_text(encoding="utf-8")
    specs = {d.get("name"): d for d in report.report_data(page)}
    want = analysis.direct_attribution(ckpt, stepped.src_ids)
    dla = specs["why-attribution"]["panels"]
    values = np.frombuffer(__import__("base64").b64decode(dla[1]["z"]), np.float32)
    inside = [p.value for p in want.parts if p.layer is not None]
    assert sorted(values[values != 0]) == pytest.approx(sorted(v for v in inside if v), abs=1e-5)
    patch = np.frombuffer(__import__("base64").b64decode(specs["why-patching-heads"]["panels"][0]["z"]),
                          np.float32).reshape(kept["why_patch"][1].grid.shape)  # fmt: skip
    np.testing.assert_allclose(patch, kept["why_patch"][1].grid, atol=1e-6)
    lens = analysis.logit_lens(ckpt, stepped.src_ids)
    assert "<h2>Logit lens at position" in page and page.count("<tr><td class=t>") >= len(
        lens.layers
    )
    grid = kept["why_lens"][1]  # the whole lens grid the tab showed: both heatmaps, as computed
    want_grid = analysis.why.lens_grid(ckpt, stepped.src_ids)
    np.testing.assert_allclose(grid.top_probs, want_grid.top_probs, atol=1e-6)
    heat = specs["why-lens-grid"]["panels"]
    for panel, values in zip(heat, (grid.top_probs, grid.prob), strict=True):
        z = np.frombuffer(__import__("base64").b64decode(panel["z"]), np.float32)
        np.testing.assert_allclose(z.reshape(values.shape), values, atol=1e-7)
        assert panel["yl"][0] == "embed" and len(panel["hover"]) == values.size
    assert "attnviz-logit-lens-grid.csv" in page
    assert "<h2>Information flow to position" in page and 'class="av-svg av-flow"' in page
    assert page.count("<line x1=") >= len(kept["why_flow"][1].route)
    # computed for another step: left out
    old = {k: ("earlier", v[1]) for k, v in kept.items()}
    page = Path(export.export(stepped, "html", "pieces", old).path).read_text(encoding="utf-8")
    assert "why-attribution" in page and "Information flow" not in page and "patching" not in page
    assert "why-lens-grid" not in page


def test_a_new_step_empties_the_opened_edge_and_cell(stepped):
    """The page follows a step: the flow and patching panels are emptied with what opened
    from them (the edge's heads, the cell's attention, their menus and downloads)."""
    gr = pytest.importorskip("gradio")
    from attnviz.app import ui
    from attnviz.app.pagetext import STALE
    from attnviz.app.panels import why_ui

    with gr.Blocks():
        page = ui.Page(session.new_state(None, "cpu"))
    now = app_stamps.panel_stamps(stepped)
    plan = app_stamps.follow({k: now[k] for k in wv.PANELS}, session.step(stepped).state, "step")
    out = why_ui.follow(page, stepped, plan)
    assert (
        out[page.part("why").why_flow_msg] == STALE and out[page.part("why").why_patch_msg] == STALE
    )
    for comp in (
        page.part("why").why_edge_plot,
        page.part("why").why_cell_plot,
        page.part("why").why_edge_table,
        page.part("why").why_edge_json,
    ):
        assert out[comp].visible is False
    for comp in (page.part("why").why_edge, page.part("why").why_cell_site):
        assert out[comp].choices == [] and out[comp].value in (None, [])
    assert out[page.part("why").why_edge_msg] == "" and out[page.part("why").why_cell_msg] == ""
