"""Plots: figures hold the recorded attention, masked cells apart; the HTML page is offline.

Build times at the default model size: ``python -m tests.unit.test_plots`` (median of 5).
"""

from __future__ import annotations

import base64
import gzip
import json
import re

import numpy as np
import plotly.io as pio
import pytest
import torch
from helpers import make_model, random_batch
from plotly.offline import get_plotlyjs

import attnviz
from attnviz.core.errors import InputError
from attnviz.render import plots, report
from attnviz.train.snapshots import Snapshots

TS, TT = 7, 6  # random_batch defaults; row 1 has PAD in source and target


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def batch(model):
    return random_batch(model, b=3, ts=TS, tt=TT)


@pytest.fixture(scope="module")
def trace(model, batch):
    with attnviz.record(model) as tr:
        model(*batch)
    return tr


def _z(fig, name=None, index=0):
    traces = [t for t in fig.data if name is None or t.name == name]
    return np.asarray(traces[index].z, dtype=float)


def _weight_traces(fig):
    return [t for t in fig.data if t.name != "masked"]


# -- heatmap -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["encoder_self", "decoder_self", "cross"])
def test_heatmap_holds_the_recorded_weights_and_keeps_masked_cells_apart(trace, kind):
    w = trace.numpy(kind, 1)[1, 2]  # padded row, head 2: [Tq, Tk]
    m = trace.numpy(kind, 1, "mask")[1, 0]
    assert m.any() and (~m).any()
    tq, tk = w.shape
    fig = plots.heatmap(
        trace.weights(kind, 1)[1, 2],
        [f"k{j}" for j in range(tk)],
        [f"q{i}" for i in range(tq)],
        mask=trace.mask(kind, 1)[1],
    )
    z = _z(fig)
    assert z.shape == (tq, tk)
    np.testing.assert_allclose(z[~m], w[~m], rtol=0, atol=0)
    assert np.isnan(z[m]).all()
    masked = _z(fig, "masked")
    assert np.array_equal(np.isfinite(masked), m)  # the grey layer covers exactly the mask
    assert fig.data[1].colorscale[0][1] == fig.data[1].colorscale[-1][1] == plots.MASKED
    assert "masked" in fig.data[1].hovertemplate
    assert fig.layout.yaxis.autorange == "reversed"
    assert fig.data[0].zmin == 0 and fig.data[0].zmax == pytest.approx(w[~m].max())
    pio.to_json(fig, validate=True)  # what the app sends to the browser


def test_heatmap_learned_zeros_are_not_masked(trace):
    w = trace.numpy("decoder_self", 0)[0, 0].copy()  # row 0 has no padding: causal only
    w[-1, 0] = 0.0  # a learned zero below the diagonal
    m = trace.numpy("decoder_self", 0, "mask")[0, 0]
    fig = plots.heatmap(w, None, None, mask=m)
    assert _z(fig)[-1, 0] == 0.0
    assert np.isnan(_z(fig, "masked")[-1, 0])
    assert np.isnan(_z(fig)[0, -1]) and _z(fig, "masked")[0, -1] == 1.0


def test_heatmap_without_mask_has_one_trace_and_takes_zmax(trace):
    w = trace.weights("encoder_self", 0)[0, 1]
    fig = plots.heatmap(w, None, None, title="t", zmax=1.0)
    assert len(fig.data) == 1 and fig.data[0].zmax == 1.0
    assert np.array_equal(_z(fig), attnviz.as_numpy(w))
    nothing = torch.zeros(w.shape, dtype=torch.bool)
    assert len(plots.heatmap(w, None, None, mask=nothing).data) == 1


def test_duplicate_tokens_get_their_own_columns_and_hover():
    w = np.array([[0.25, 0.75], [0.5, 0.5]])
    fig = plots.heatmap(w, ["l", "l"], ["h", "<pad>"])
    assert list(fig.data[0].x) == [0, 1]
    assert list(fig.layout.xaxis.tickvals) == [0, 1]
    assert list(fig.layout.xaxis.ticktext) == ["l", "l"]
    assert list(fig.layout.yaxis.ticktext) == ["h", "&lt;pad&gt;"]  # plotly reads tags
    cells = fig.data[0].customdata
    assert "key 0: l" in cells[0][0] and "key 1: l" in cells[0][1]
    assert "query 1: &lt;pad&gt;" in cells[1][0]
    assert "%{z" in fig.data[0].hovertemplate and "%{customdata}" in fig.data[0].hovertemplate
    assert list(plots.heatmap(w, [" ", ""], None).layout.xaxis.ticktext) == ["␣", "∅"]


def test_heatmap_rejects_bad_input_with_a_clear_message():
    w = np.full((2, 3), 1 / 3)
    with pytest.raises(InputError, match="x_tokens has 2 tokens"):
        plots.heatmap(w, ["a", "b"], ["a", "b"])
    with pytest.raises(InputError, match=r"\[Tq, Tk\]"):
        plots.heatmap(np.ones((2, 2, 3)), None, None)
    with pytest.raises(InputError, match="bool"):
        plots.heatmap(w, None, None, mask=np.zeros((2, 3)))
    with pytest.raises(InputError, match="does not fit"):
        plots.heatmap(w, None, None, mask=np.zeros((3, 3), bool))


# -- grids and comparisons ---------------------------------------------------------------------
def test_heads_grid_one_layer_shares_one_colour_scale(trace):
    w = trace.weights("cross", 1)[1]  # [H, Tt, Ts]
    m = trace.mask("cross", 1)[1]  # [1, Tt, Ts]
    fig = plots.heads_grid(w, None, None, mask=m)
    heads = _weight_traces(fig)
    assert len(heads) == w.shape[0] == len(fig.layout.annotations)
    assert [a.text for a in fig.layout.annotations] == ["H0", "H1", "H2", "H3"]
    assert {t.coloraxis for t in heads} == {"coloraxis"}
    assert len({t.xaxis for t in heads}) == w.shape[0]
    assert all(t.coloraxis is None for t in fig.data if t.name == "masked")
    mk = attnviz.as_numpy(m[0])
    for h, t in enumerate(heads):
        want = np.where(mk, np.nan, attnviz.as_numpy(w[h]))
        np.testing.assert_array_equal(np.asarray(t.z, dtype=float), want)
    assert fig.layout.coloraxis.cmax == pytest.approx(float(w[:, ~m[0]].max()))


def test_heads_grid_layers_by_heads(trace):
    w = torch.stack([trace.weights("decoder_self", i)[1] for i in (0, 1)])  # [L, H, Tt, Tt]
    fig = plots.heads_grid(w, None, None, mask=trace.mask("decoder_self", 0)[1])
    heads = _weight_traces(fig)
    assert len(heads) == 2 * 4 == len(fig.layout.annotations)
    assert fig.layout.annotations[7].text == "L1 H3" and heads[7].name == "L1 H3"
    assert {t.coloraxis for t in heads} == {"coloraxis"}
    assert len({t.yaxis for t in heads}) == 8
    assert all(fig.layout[f"yaxis{n}"].autorange == "reversed" for n in ("", "5", "8"))
    with pytest.raises(InputError, match="titles has 1"):
        plots.heads_grid(w, None, None, titles=["only one"])


def test_mask_comparison_difference_is_after_minus_before(model, batch):
    with attnviz.record(model) as before_tr:
        model(*batch)
    with attnviz.record(model, [attnviz.DropMask("causal")]) as after_tr:
        model(*batch)
    before = before_tr.weights("decoder_self", 0)[0, 0]
    after = after_tr.weights("decoder_self", 0)[0, 0]
    fig = plots.mask_comparison(
        before, after, None, None, before_mask=before_tr.mask("decoder_self", 0)[0]
    )
    b, a = attnviz.as_numpy(before), attnviz.as_numpy(after)
    diff = _z(fig, "after - before")
    np.testing.assert_allclose(diff, a - b, rtol=0, atol=1e-7)
    assert (np.abs(diff) > 1e-3).any()  # dropping the mask changed something
    np.testing.assert_array_equal(_z(fig, "after"), a)
    assert np.isnan(_z(fig, "before")[0, 1])  # causal cell, masked before
    ax = fig.layout.coloraxis2
    assert ax.cmin == -ax.cmax and ax.cmax == pytest.approx(np.abs(a - b).max())
    assert [t.coloraxis for t in fig.data if t.name in ("before", "after")] == ["coloraxis"] * 2
    with pytest.raises(InputError, match="differ in shape"):
        plots.mask_comparison(b, a[:, :2], None, None)


# -- decoding, attribution, statistics ---------------------------------------------------------
def test_topk_bar_from_a_real_step(model):
    stepper = attnviz.GreedyStepper(model, torch.tensor([5, 6, 7, 8]), bos_id=1, eos_id=2)
    result = stepper.step()
    tokens = [f"t{i}" for i in range(model.config.tgt_vocab_size)]
    fig = plots.topk_bar(result.probs, tokens, k=5, chosen=result.token)
    bar = fig.data[0]
    p = attnviz.as_numpy(result.probs)
    assert len(bar.x) == 5
    np.testing.assert_allclose(bar.x, np.sort(p)[::-1][:5])
    assert [int(r[1]) for r in bar.customdata] == list(np.argsort(-p)[:5])
    assert bar.marker.color[0] == plots.HIGHLIGHT  # greedy took the most likely token
    assert set(bar.marker.color[1:]) == {plots.BAR}
    assert fig.layout.yaxis.autorange == "reversed"


def test_topk_bar_adds_a_chosen_token_outside_the_top_k():
    probs = np.array([0.05, 0.4, 0.3, 0.2, 0.05])
    fig = plots.topk_bar(probs, list("abcde"), k=2, chosen=3)
    bar = fig.data[0]
    assert list(bar.x) == [0.4, 0.3, 0.2]
    assert list(bar.marker.color) == [plots.BAR, plots.BAR, plots.HIGHLIGHT]
    assert list(bar.customdata[2]) == ["d", 3, 3]  # token, id, rank
    with pytest.raises(InputError, match="outside the vocabulary"):
        plots.topk_bar(probs, list("abcde"), chosen=9)


def test_attribution_vs_attention_normalises_both():
    attr = np.array([2.0, -1.0, 1.0, 0.0])
    att = np.array([0.1, 0.2, 0.3, 0.4])
    fig = plots.attribution_vs_attention(attr, att, list("lllo"))
    a, b = fig.data
    assert (a.name, b.name) == ("attribution", "attention")
    np.testing.assert_allclose(a.y, [0.5, -0.25, 0.25, 0.0])
    np.testing.assert_allclose(np.abs(b.y).sum(), 1.0)
    assert a.customdata[1][1] == "-1"  # raw value in the hover
    assert list(fig.layout.xaxis.ticktext) == list("lllo") and len(set(a.x)) == 4
    from attnviz.analysis.attribution import spearman

    assert f"Spearman ρ = {spearman(attr, att):.2f}" in fig.layout.title.text  # as reported
    ig = plots.attribution_vs_attention(attr, att, None, names=("Integrated Gradients", "x"))
    assert ig.data[0].marker.color == plots.METHOD_COLOURS["Integrated Gradients"]


def test_long_head_roles_wrap_instead_of_clipping():
    rows = [dict(kind="cross", layer=0, head=h, entropy=1.0, role="uniform/dead head")
            for h in range(4)]  # fmt: skip
    cells = plots.head_stats_figure(rows).data[0].text
    assert cells[0][0] == "uniform/<br>dead"
    assert all(len(line) <= 10 for line in cells[0][0].split("<br>"))


def test_head_role_labels_fit_their_cells():
    """Roles as the health check writes them: at most two short lines per cell (the whole
    role in the hover); too many heads in a row and the cells carry no label at all."""
    roles = ["dead head (uniform, no effect)", "broad head (uniform-looking but needed)",
             "sharp content-based head", "previous-token head"]  # fmt: skip
    rows = [dict(kind=k, layer=0, head=h, entropy=1.0, role=roles[h])
            for k in attnviz.KINDS for h in range(4)]  # fmt: skip
    fig = plots.head_stats_figure(rows)
    for trace in fig.data:
        assert trace.texttemplate == "%{text}"
        for label, full in zip(trace.text[0], roles, strict=True):
            lines = label.split("<br>")
            assert len(lines) <= 2 and all(len(line) <= 10 for line in lines), label
            assert f"role: {full}" in trace.customdata[0][list(roles).index(full)]
    assert fig.data[0].text[0][:2].tolist() == ["dead", "broad"]
    wide = [dict(kind=k, layer=0, head=h, entropy=1.0, role="mixed head")
            for k in attnviz.KINDS for h in range(16)]  # fmt: skip
    assert {t.texttemplate for t in plots.head_stats_figure(wide).data} == {""}


def test_dark_theme_keeps_the_data():
    fig = plots.heatmap(np.eye(3), list("abc"), list("abc"), title="t")
    z = np.asarray(fig.data[0].z).copy()
    dark = plots.themed(fig, True)
    assert dark.layout.template.layout.paper_bgcolor == plots.DARK_TEMPLATE.layout.paper_bgcolor
    np.testing.assert_array_equal(np.asarray(dark.data[0].z), z)


def _head_rows():
    rows = []
    for kind in attnviz.KINDS:
        for layer in range(2):
            for head in range(4):
                e = float(len(kind) + layer * 4 + head)
                rows.append(
                    dict(
                        kind=kind,
                        layer=layer,
                        head=head,
                        entropy=e,
                        max_weight=0.5,
                        role="diagonal" if head == 0 else "mixed",
                    )
                )
    return rows


def test_head_stats_figure_and_table():
    rows = _head_rows()
    fig = plots.head_stats_figure(rows, metric="entropy")
    assert [t.name for t in fig.data] == list(attnviz.KINDS)
    assert {t.coloraxis for t in fig.data} == {"coloraxis"}
    cross = fig.data[2]
    want = next(r for r in rows if (r["kind"], r["layer"], r["head"]) == ("cross", 1, 3))
    assert np.asarray(cross.z)[1, 3] == want["entropy"]
    assert "role: mixed" in cross.customdata[1][3] and cross.text[1][0] == "diagonal"
    assert fig.layout.yaxis.autorange == "reversed"
    assert plots.head_stats_figure(rows[:8], metric="max_weight").data[0].name == "encoder_self"
    with pytest.raises(InputError, match="choose one of"):
        plots.head_stats_figure(rows, metric="nope")
    table = plots.head_stats_table(rows)
    header = [h.replace("<b>", "").replace("</b>", "") for h in table.data[0].header.values]
    assert header == ["kind", "layer", "head", "role", "entropy", "max_weight"]
    assert len(table.data[0].cells.values[0]) == len(rows)


def test_a_normalised_metric_keeps_its_zero_to_one_scale():
    """Heads that differ in the fifth digit must not span the whole colour range."""
    rows = [dict(r, norm_entropy=0.99998 + 1e-6 * i) for i, r in enumerate(_head_rows())]
    axis = plots.head_stats_figure(rows, metric="norm_entropy").layout.coloraxis
    assert (axis.cmin, axis.cmax) == (0.0, 1.0)
    assert plots.head_stats_figure(rows, metric="entropy").layout.coloraxis.cmax is None


# -- training playback -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def snaps(batch):
    src, tgt = batch[0][:1], batch[1][:1]  # one probe: Ts = 7, decoder input BOS + 5
    s = Snapshots([f"s{i}" for i in range(TS)], [f"t{i}" for i in range(TT - 1)])
    for step, seed in ((0, 3), (100, 4), (200, 5)):
        m = make_model(seed=seed)
        with attnviz.record(m, capture=("weights",)) as tr:
            m(src, tgt)
        s.add(step, tr, output=f"out{step}", loss=3.0 - step / 100)
    return s


def test_snapshot_timeline_has_one_frame_per_snapshot(snaps):
    fig = plots.snapshot_timeline(snaps, "cross", 1)
    assert len(fig.frames) == len(snaps.steps) == 3
    assert [s.label for s in fig.layout.sliders[0].steps] == ["0", "100", "200"]
    assert [list(s.args[0]) for s in fig.layout.sliders[0].steps] == [[f.name] for f in fig.frames]
    last = fig.frames[2]
    assert "step 200" in last.layout.title.text and "out200" in last.layout.title.text
    assert "loss 1.0000" in last.layout.title.text
    want = attnviz.as_numpy(snaps.weights["cross", 1][2]).mean(0)
    np.testing.assert_allclose(np.asarray(last.data[0].z, dtype=float), want, atol=1e-6)
    assert list(fig.layout.yaxis.ticktext) == ["&lt;bos&gt;", "t0", "t1", "t2", "t3", "t4"]
    assert list(fig.layout.xaxis.ticktext) == [f"s{i}" for i in range(TS)]


def test_snapshot_timeline_one_head_and_the_causal_mask(snaps):
    fig = plots.snapshot_timeline(snaps, "decoder_self", 0, head=1)
    want = attnviz.as_numpy(snaps.weights["decoder_self", 0][1][1])
    z = np.asarray(fig.frames[1].data[0].z, dtype=float)
    below = np.tril(np.ones_like(want, dtype=bool))
    np.testing.assert_allclose(z[below], want[below])
    assert np.isnan(z[~below]).all() and fig.data[1].name == "masked"
    with pytest.raises(InputError, match="hold no 'cross' layer 5"):
        plots.snapshot_timeline(snaps, "cross", 5)
    with pytest.raises(InputError, match="head must be"):
        plots.snapshot_timeline(snaps, "cross", 0, head=4)


# -- export ------------------------------------------------------------------------------------
def test_to_html_is_one_offline_page(trace):
    figs = [
        plots.heatmap(trace.weights("cross", 0)[1, 0], None, None, mask=trace.mask("cross", 0)[1]),
        plots.heads_grid(trace.weights("encoder_self", 0)[0], None, None),
        plots.topk_bar(np.full(4, 0.25), list("abcd"), k=3),
    ]
    figs[0].update_layout(title="a </script> in a title")
    page = report.to_html(figs, "attention <demo>", intro_html="<p>hello</p>")
    packed = re.search(r'<script type="application/octet-stream" id="attnviz-plotlyjs">'
                       r"([A-Za-z0-9+/=]+)</script>", page)[1]  # fmt: skip
    assert gzip.decompress(base64.b64decode(packed)).decode() == get_plotlyjs()  # the bundle, once
    assert len(page) < 0.5 * len(get_plotlyjs())  # gzipped: the page is under half its size
    assert page.startswith("<!DOCTYPE html>") and "<title>attention &lt;demo&gt;</title>" in page
    assert "<p>hello</p>" in page
    assert len(re.findall(r'class="plotly-graph-div"', page)) == 3
    assert all(f'id="attnviz-figure-{i}"' in page for i in range(3))
    rest = page.replace(packed, "")
    assert rest.count("Plotly.newPlot(") == 1 and "DecompressionStream" in rest  # one loader
    for i, fig in enumerate(figs):  # each figure's JSON, whole and parseable
        spec = re.search(rf'id="attnviz-figure-{i}-json">(.*?)</script>', page, re.S)[1]
        assert json.loads(spec)["data"][0]["type"] == fig.data[0].type
    # 3 figures, the bundle and the loader: the title's "</script>" is escaped in its JSON
    assert page.count("</script>") == 5
    # No resource is fetched from anywhere: no src/href attribute on script, link, img, iframe
    # tags, and outside the inline bundle not a single URL (no MathJax CDN, no plot.ly link).
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", page, re.I)
    assert not re.search(r"https?://", rest), re.findall(r"https?://\S{0,40}", rest)
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", rest)
    assert "MathJax.js" not in page and "https://plot.ly" not in page
    assert '"displaylogo": false' in rest and '"format": "png"' in rest


def test_playback_starts_at_the_first_snapshot_with_buttons_beside_the_slider():
    from attnviz.render.plots import player_controls

    layout = player_controls([0, 100, 200])
    slider, buttons = layout["sliders"][0], layout["updatemenus"][0]
    assert slider["active"] == 0 and [s["label"] for s in slider["steps"]] == ["0", "100", "200"]
    assert buttons["x"] + 0.15 <= slider["x"]  # the buttons end before the slider begins


def test_to_html_headings_and_config():
    fig = plots.topk_bar(np.array([0.5, 0.5]), ["a", "b"], k=2)
    page = report.to_html({"Next <token>": fig}, "t")
    assert "<h2>Next &lt;token&gt;</h2>" in page
    cfg = plots.figure_config()
    assert cfg["toImageButtonOptions"]["format"] == "png" and cfg["displaylogo"] is False
    cfg["displaylogo"] = True
    assert plots.figure_config()["displaylogo"] is False  # a fresh dict each time
    with pytest.raises(InputError, match="at least one figure"):
        report.to_html([], "empty")


# -- every figure at the default model size ----------------------------------------------------
def test_every_figure_builds_at_the_default_model_size():
    """d_model 128, 4 heads, 2+2 layers, Tq = Tk = 21 (speed is measured by ``attnviz bench``)."""
    model = make_model(src_vocab_size=30, tgt_vocab_size=30, d_model=128, d_ff=512)
    g = torch.Generator().manual_seed(0)
    src, tgt = (
        torch.randint(3, 30, (1, 21), generator=g),
        torch.randint(3, 30, (1, 21), generator=g),
    )
    with torch.no_grad(), attnviz.record(model) as tr:
        model(src, tgt)
    with torch.no_grad(), attnviz.record(model, [attnviz.DropMask("causal")]) as dropped:
        model(src, tgt)
    toks = [chr(97 + i % 26) for i in range(21)]  # repeats on purpose
    snaps = Snapshots(toks, toks[:20])
    for i in range(3):
        snaps.add(100 * i, tr, output="x" * 20, loss=1.0 / (i + 1))
    rows = [
        dict(kind=k, layer=i, head=h, entropy=1.0, max_weight=0.5, role="mixed")
        for k in attnviz.KINDS
        for i in range(2)
        for h in range(4)
    ]
    probs = torch.softmax(torch.randn(30, generator=g), 0)
    dec = torch.stack([tr.weights("decoder_self", i)[0] for i in range(2)])  # [L, H, Tt, Tt]
    mask = tr.mask("decoder_self", 0)[0]
    figs = {
        "heatmap": plots.heatmap(tr.weights("decoder_self", 0)[0, 0], toks, toks, mask),
        "heads_grid [H]": plots.heads_grid(tr.weights("cross", 1)[0], toks, toks),
        "heads_grid [L, H]": plots.heads_grid(dec, toks, toks, mask=mask),
        "mask_comparison": plots.mask_comparison(
            tr.weights("decoder_self", 0)[0, 0],
            dropped.weights("decoder_self", 0)[0, 0],
            toks,
            toks,
            before_mask=mask,
        ),
        "topk_bar": plots.topk_bar(probs, [f"t{i}" for i in range(30)], chosen=3),
        "attribution_vs_attention": plots.attribution_vs_attention(
            torch.randn(21, generator=g), tr.weights("cross", 0)[0, 0, 5], toks
        ),
        "head_stats_figure": plots.head_stats_figure(rows),
        "head_stats_table": plots.head_stats_table(rows),
        "snapshot_timeline": plots.snapshot_timeline(snaps, "decoder_self", 1),
    }
    for name, fig in figs.items():
        assert fig.data, name
        assert fig.to_json(), name
    assert "Plotly" in report.to_html(list(figs.values()), "every figure")


def test_heads_grid_without_token_hover_is_compact(trace):
    w, m = trace.weights("decoder_self", 0)[1], trace.mask("decoder_self", 0)[1]
    full = plots.heads_grid(w, None, None, mask=m)
    compact = plots.heads_grid(w, None, None, mask=m, token_hover=False)
    assert all(t.customdata is None for t in compact.data)
    assert all(
        "query %{y}, key %{x}" in t.hovertemplate for t in compact.data if t.name != "masked"
    )
    assert all(t.hoverinfo == "skip" for t in compact.data if t.name == "masked")
    for a, b in zip(full.data, compact.data, strict=True):  # same numbers, less text
        np.testing.assert_array_equal(np.asarray(a.z), np.asarray(b.z))
    assert len(compact.to_json()) < len(full.to_json()) / 2
