"""Nothing shown misleads: figures grey exactly the cells the recorded mask blocked, exports
are strict JSON, the report numbers steps as the app does, and the health check fails a
model that does not do its task.

Figures are read back from their plotly JSON (what the page draws), not from the objects
that built them.
"""

from __future__ import annotations

import base64
import dataclasses
import json

import numpy as np
import pytest
import torch
from helpers import make_model, random_batch

import attnviz
from attnviz.analysis import export, health, masking
from attnviz.cli import main
from attnviz.core.devices import as_numpy
from attnviz.core.record import DropMask
from attnviz.render import plots, report
from attnviz.train.snapshots import Snapshots


# -- reading figures back ----------------------------------------------------------------------
def _array(value) -> np.ndarray:
    """A plotly JSON array (a list with null, or ``{dtype, bdata, shape}``) as float numpy."""
    if isinstance(value, dict) and "bdata" in value:
        a = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = [int(n) for n in str(value.get("shape", len(a))).split(",")]
        return a.reshape(shape).astype(float)
    return np.array([[np.nan if v is None else v for v in row] for row in value], float)


def panels(fig) -> dict[str, dict[str, np.ndarray]]:
    """Heatmap panels by x axis (``"x"``, ``"x2"``, ...): ``{"weights": z, "masked": bool}``;
    ``"masked"`` is the cells the grey layer draws (absent when it draws none)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for trace in json.loads(fig.to_json())["data"]:
        if trace.get("type") != "heatmap":
            continue
        panel = out.setdefault(trace.get("xaxis", "x"), {})
        z = _array(trace["z"])
        if trace.get("name") == "masked":
            panel["masked"] = ~np.isnan(z)
        else:
            panel["weights"] = z
    return out


def assert_marks(panel: dict[str, np.ndarray], blocked, where: str) -> None:
    """The grey cells of a panel are exactly ``blocked`` (True = blocked) and no weight is
    drawn under them."""
    blocked = np.asarray(as_numpy(blocked) if torch.is_tensor(blocked) else blocked)
    marked = panel.get("masked", np.zeros(blocked.shape, bool))
    assert marked.shape == blocked.shape, where
    np.testing.assert_array_equal(marked, blocked, err_msg=f"{where}: grey cells != mask")
    assert np.isnan(panel["weights"][blocked]).all(), f"{where}: a weight drawn on a masked cell"
    assert not np.isnan(panel["weights"][~blocked]).any(), f"{where}: an allowed cell is blank"


def has_masked_cells(fig) -> bool:
    return any("masked" in p for p in panels(fig).values())


# -- the report --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inspected(reverse_ckpt):
    ins = export.inspect_text(reverse_ckpt, "helloworld")
    return ins, report.inspection_figures(ins), report.experiment_figures(reverse_ckpt, ins)


def test_every_report_figure_greys_exactly_the_recorded_mask(reverse_ckpt, inspected):
    ins, figs, experiments = inspected
    checked = set()
    n_heads = reverse_ckpt.config.n_heads
    for kind, title in plots.KIND_TITLES.items():
        heading = f"{title}: layers x heads"
        by_axis = panels(figs[heading])
        for layer in ins.trace.layers(kind):
            blocked = ins.trace.mask(kind, layer)[0, 0]  # [Tq, Tk], the mask the model used
            for head in range(n_heads):
                n = layer * n_heads + head + 1
                axis = "x" if n == 1 else f"x{n}"
                assert_marks(by_axis[axis], blocked, f"{heading} L{layer} H{head}")
        checked.add(heading)
    # the decoder's causal mask is really there to be drawn (the check above is not vacuous)
    assert has_masked_cells(figs["Decoder masked self-attention: layers x heads"])

    # causal mask off: "before" greys the future the model was blocked from, "after" nothing
    exp = masking.causal_experiment(reverse_ckpt, [ins.text], [ins.output])
    last = reverse_ckpt.config.n_decoder_layers - 1
    (heading,) = [h for h in experiments if h.startswith("Causal mask off")]
    by_axis = panels(experiments[heading])
    before = exp.before.trace.mask("decoder_self", last)[0, 0]
    after = exp.after.trace.mask("decoder_self", last)[0, 0]
    assert before.any() and not after.any()
    assert_marks(by_axis["x"], before, "causal mask off: before")
    assert_marks(by_axis["x2"], after, "causal mask off: after")
    assert "masked" not in by_axis["x3"]  # the difference panel marks nothing
    checked.add(heading)

    unchecked = [h for h, f in {**figs, **experiments}.items() if h not in checked]
    assert not [h for h in unchecked if has_masked_cells({**figs, **experiments}[h])]


def test_report_numbers_steps_from_one_like_the_app(inspected):
    ins, figs, experiments = inspected
    steps = [h for h in figs if h.startswith("Step ")]
    assert len(steps) == len(ins.out_ids) == 11
    assert steps[0] == "Step 1: next token after <bos>"
    assert steps[-1].startswith("Step 11: next token after <bos> d l r o w o l l e h")
    assert not any(h.startswith("Step 0") for h in {**figs, **experiments})
    # attribution explains the newest token shown, as the app's Attribution tab does
    assert any(h.startswith("Step 11 (<eos>): Integrated Gradients") for h in experiments)


def test_report_head_table_headings_are_whole_words(inspected):
    _, figs, _ = inspected
    (table,) = json.loads(figs["Head statistics: every head"].to_json())["data"]
    headings = [h.replace("<b>", "").replace("</b>", "") for h in table["header"]["values"]]
    assert headings == [report.STAT_HEADINGS[k] for k in ["kind", "layer", "head", "role",
                        *(m for m in attnviz.analysis.METRICS)]]  # fmt: skip
    assert "normalised<br>entropy" in headings and "on anti-<br>diagonal" in headings
    widths = table["columnwidth"]
    # the role column is the widest; every metric column has room for its longest line
    assert widths[3] == max(widths) and min(widths[4:]) >= 80
    cells = dict(zip(headings, table["cells"]["values"], strict=True))
    assert not any(str(v) == "nan" for col in cells.values() for v in col)  # "n/a", never "nan"
    assert {float(v) for v in cells["on EOS"]} == {0.0}  # measured: no key here is an end token


# -- every figure function that draws a mask ----------------------------------------------------
def test_plot_functions_grey_exactly_the_recorded_mask():
    model = make_model()
    src, tgt, src_pad, tgt_pad = random_batch(model, b=3, ts=7, tt=6)
    with torch.no_grad(), attnviz.record(model) as trace:
        model(src, tgt, src_pad, tgt_pad)
    with torch.no_grad(), attnviz.record(model, [DropMask("padding")]) as dropped:
        model(src, tgt, src_pad, tgt_pad)
    for kind, layer in trace.keys():
        w = trace.weights(kind, layer)  # [B, H, Tq, Tk]
        m = trace.mask(kind, layer)  # [B, 1, Tq, Tk]
        for b in range(w.shape[0]):
            where = f"{kind} L{layer} batch item {b}"
            assert_marks(panels(plots.heatmap(w[b, 1], None, None, mask=m[b]))["x"], m[b, 0],
                         f"heatmap {where}")  # fmt: skip
            grid = panels(plots.heads_grid(w[b], None, None, mask=m[b]))
            for h in range(w.shape[1]):
                assert_marks(grid["x" if h == 0 else f"x{h + 1}"], m[b, 0], f"grid {where} H{h}")
            after_m = dropped.mask(kind, layer)[b, 0]
            cmp = panels(
                plots.mask_comparison(w[b].mean(0), dropped.weights(kind, layer)[b].mean(0),
                                      None, None, before_mask=m[b, 0], after_mask=after_m)
            )  # fmt: skip
            assert_marks(cmp["x"], m[b, 0], f"comparison before {where}")
            assert_marks(cmp["x2"], after_m, f"comparison after {where}")
    # all layers at once ([L, H, Tq, Tk] with an [L, 1, Tq, Tk] mask)
    layers = trace.layers("decoder_self")
    w = torch.stack([trace.weights("decoder_self", i)[1] for i in layers])
    m = torch.stack([trace.mask("decoder_self", i)[1] for i in layers])
    grid = panels(plots.heads_grid(w, None, None, mask=m))
    assert len(grid) == len(layers) * model.config.n_heads
    for n, axis in enumerate(grid):
        assert_marks(grid[axis], m[n // model.config.n_heads, 0], f"all-layer grid panel {n}")
    assert m[:, 0].any(-1).all()  # item 1 has padding and the causal mask: cells to grey


def test_training_playback_greys_the_mask_the_probe_was_run_with(reverse_ckpt, models_dir):
    snaps = Snapshots.load(models_dir / "reverse")
    cfg = reverse_ckpt.config
    src = torch.tensor([reverse_ckpt.src_tokenizer.encode("".join(snaps.probe_src)).ids])
    tgt = torch.tensor([[cfg.bos_id, *reverse_ckpt.tgt_tokenizer.encode(
        "".join(snaps.probe_tgt)).ids]])  # fmt: skip
    with torch.no_grad(), attnviz.record(reverse_ckpt.model) as trace:
        reverse_ckpt.model(src, tgt)
    for kind in ("decoder_self", "cross"):
        fig = plots.snapshot_timeline(snaps, kind, 0)
        blocked = as_numpy(trace.mask(kind, 0)[0, 0])
        assert_marks(panels(fig)["x"], blocked, f"playback {kind}")
        frames = json.loads(fig.to_json())["frames"]
        assert len(frames) == len(snaps.steps) > 1
        for frame in frames:  # every training step keeps the weights off the grey cells
            np.testing.assert_array_equal(np.isnan(_array(frame["data"][0]["z"])), blocked)


# -- strict JSON -------------------------------------------------------------------------------
def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: bare {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_exports_are_strict_json(reverse_ckpt, tmp_path, models_dir):
    ins = export.inspect_text(reverse_ckpt, "hello")
    # a statistic can be undefined (NaN: e.g. "previous" with a single query row): null in JSON
    ins.stats[1] = dataclasses.replace(ins.stats[1], eos=float("nan"), previous=float("inf"))
    data = _strict(export.write_json(ins, tmp_path / "t.json").read_text())
    assert data["head_stats"][1]["eos"] is None and data["head_stats"][1]["previous"] is None
    assert data["head_stats"][0]["eos"] == pytest.approx(ins.stats[0].eos)
    assert data["head_stats"][0]["entropy"] == pytest.approx(ins.stats[0].entropy)
    out = tmp_path / "cli.json"
    assert (
        main(["inspect", str(models_dir / "reverse"), "--text", "hello", "--json", str(out)]) == 0
    )
    assert _strict(out.read_text())["output"] == "olleh"
    check = health.check(reverse_ckpt, n=8, ablation_sample=0)
    check.stats[0] = dataclasses.replace(check.stats[0], eos=float("nan"))
    assert _strict(check.to_json())["head_stats"][0]["eos"] is None
    assert _strict(export.dumps({"a": [np.float32("nan"), float("inf"), 1.5]})) == {
        "a": [None, None, 1.5]
    }
