"""The offline HTML report (``attnviz inspect --html``) without a browser: the numbers the page
draws are the recorded ones (decoded from the page itself), it needs nothing from a network,
and it is small. The browser side is tests/browser/test_report_browser.py."""

from __future__ import annotations

import base64
import csv
import io
import re

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import export, masking
from attnviz.render import report
from attnviz.train.snapshots import Snapshots


def _f32(b64: str, shape) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<f4").reshape(shape)


def _bits(s: str, shape) -> np.ndarray:
    return (np.frombuffer(s.encode("ascii"), np.uint8) == ord("1")).reshape(shape)


@pytest.fixture(scope="module")
def inspected(reverse_ckpt):
    ins = export.inspect_text(reverse_ckpt, "helloworld")
    return ins, report.inspection_page(ins, reverse_ckpt)


def test_the_page_draws_the_recorded_weights(reverse_ckpt, inspected):
    """The one promise: every weight decoded from the page equals the trace of the decode that
    produced the output, and a separate recorded teacher-forced pass of the same tokens."""
    ins, page = inspected
    specs = {s["kind"]: s for s in report.report_data(page) if s["type"] == "attention"}
    assert sorted(specs) == sorted(ins.trace.kinds()) == ["cross", "decoder_self", "encoder_self"]
    ckpt, cfg = reverse_ckpt, reverse_ckpt.config
    src = torch.tensor([ckpt.encode_source(ins.text).ids])
    tgt = torch.tensor([[cfg.bos_id, *ins.out_ids[:-1]]])  # what each step fed the decoder
    with torch.no_grad(), attnviz.record(ckpt.model) as again:
        ckpt.model(src, tgt)
    for kind, spec in specs.items():
        tq, tk, heads = len(spec["queries"]), len(spec["keys"]), spec["heads"]
        assert len(spec["layers"]) == len(ins.trace.layers(kind))
        for layer, block in enumerate(spec["layers"]):
            shown = _f32(block["w"], (heads, tq, tk))
            np.testing.assert_array_equal(shown, ins.trace.numpy(kind, layer)[0])
            blocked = np.broadcast_to(ins.trace.numpy(kind, layer, "mask")[0, 0], (tq, tk))
            np.testing.assert_array_equal(_bits(block["m"], (tq, tk)), blocked)
            np.testing.assert_allclose(shown, again.numpy(kind, layer)[0], atol=1e-5)
            assert (shown[:, blocked] == 0).all()  # a grey cell is a zero weight
    assert _bits(specs["decoder_self"]["layers"][0]["m"], (11, 11)).sum() == 55  # causal: drawn
    n = len(ins.out_ids)
    assert specs["cross"]["queries"][0] == "<bos>" and len(specs["cross"]["queries"]) == n


def test_the_experiments_draw_their_own_recorded_weights(reverse_ckpt, inspected):
    ins, page = inspected
    specs = report.report_data(page)
    (mask_off,) = [s for s in specs if s.get("name") == "causal-mask-off"]
    exp = masking.causal_experiment(reverse_ckpt, [ins.text])
    last = reverse_ckpt.config.n_decoder_layers - 1
    before, after, diff = mask_off["panels"]
    shape = (before["tq"], before["tk"])
    for panel, run in ((before, exp.before), (after, exp.after)):
        want = run.trace.numpy("decoder_self", last)[0].mean(0)  # [Tt, Tt], head mean
        np.testing.assert_allclose(_f32(panel["z"], shape), want, atol=1e-6)
        blocked = report.recorded_mask(run.trace, "decoder_self", last)
        got = _bits(panel["m"], shape) if panel["m"] else np.zeros(shape, bool)
        np.testing.assert_array_equal(got, blocked)
    assert _bits(before["m"], shape).any()
    assert not _bits(after["m"], shape).any()  # switched off: nothing blocked
    assert diff["signed"] and not before["signed"]
    np.testing.assert_allclose(
        _f32(diff["z"], shape), _f32(after["z"], shape) - _f32(before["z"], shape), atol=1e-6
    )
    (play,) = [s for s in specs if s["type"] == "playback"]
    snaps = Snapshots.load(reverse_ckpt.path)
    stack = np.stack([w.float().numpy() for w in snaps.weights["cross", last]])  # [S, H, Tq, Tk]
    np.testing.assert_array_equal(_f32(play["w"], stack.shape), stack)
    assert [f["step"] for f in play["frames"]] == snaps.steps
    assert play["frames"][0]["title"].startswith(f"cross layer {last} · step {snaps.steps[0]}")


def test_the_page_fetches_nothing_and_is_small(inspected):
    ins, page = inspected
    assert "dlrowolleh" in page and page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", page, re.I)
    assert not re.search(r"https?://|//cdn|require\(", page)
    assert "Plotly" not in page and "plotly" not in page.lower()
    assert (
        page.count("window.AttnViz.drawReport(") == 1
        and page.count("(() => {\n  if (window.AttnViz) return;") == 1
    )  # the renderer, once
    # measured: 187 KB for "helloworld" on models/reverse (the plotly page: 2.13 MB)
    assert len(page.encode()) < 400_000


def test_every_section_is_there_in_order(inspected):
    ins, page = inspected
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert headings[:3] == [
        "Encoder self-attention: every layer and head",
        "Decoder masked self-attention: every layer and head",
        "Cross-attention: every layer and head",
    ]
    assert "Head statistics: every head" in headings
    assert any(h.startswith("Causal mask off (decoder self-attention L1") for h in headings)
    # attribution explains the newest token shown, as the app's Attribution tab does
    assert any(h.startswith("Step 11 (&lt;eos&gt;): Integrated Gradients") for h in headings)
    assert headings[-1] == "Training playback: cross-attention L1 on the probe input"
    # one next-token card per step, numbered from 1 like the app
    steps = re.findall(r"<p>Step (\d+): next token after", page)
    assert steps == [str(i) for i in range(1, len(ins.out_ids) + 1)]
    # every canvas figure has its element, in page order
    ids = [s["id"] for s in report.report_data(page)]
    assert ids == re.findall(r'<div class="av-fig" id="([^"]+)"', page)


def test_the_csv_downloads_hold_the_numbers(inspected):
    ins, page = inspected
    links = dict(re.findall(r'download="attnviz-([a-z-]+)\.csv" href="data:text/csv;base64,([^"]+)"',
                            page))  # fmt: skip
    assert sorted(links) == ["attribution", "head-statistics", "next-tokens"]
    rows = list(csv.DictReader(io.StringIO(base64.b64decode(links["head-statistics"]).decode())))
    assert len(rows) == len(ins.stats) == 24
    first = ins.stats[0].to_dict()
    assert float(rows[0]["norm_entropy"]) == pytest.approx(first["norm_entropy"])
    tops = list(csv.DictReader(io.StringIO(base64.b64decode(links["next-tokens"]).decode())))
    chosen = [r for r in tops if r["chosen"] == "1"]
    assert [int(r["id"]) for r in chosen] == ins.out_ids
    assert float(chosen[0]["probability"]) == pytest.approx(float(ins.probs[0, ins.out_ids[0]]))


def test_a_page_needs_a_section():
    with pytest.raises(attnviz.AttnvizError, match="at least one section"):
        report.page_html([], "empty")
    with pytest.raises(attnviz.AttnvizError, match="no attnviz report data"):
        report.report_data("<html></html>")
