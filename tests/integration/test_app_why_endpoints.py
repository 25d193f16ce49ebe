"""The "Why this token" endpoints of the app through gradio_client, on models/induction after
one Step of ``abcdefabcde`` (the model answers ``f``): each endpoint's figure, table and JSON
download hold the library's result for the same prediction, and bad input is one line. An
opened patching cell shows the attention its patched run recorded (the library's
:func:`~attnviz.analysis.patched_run.patched_run`); an opened flow edge shows its heads ranked,
each head's attention map equal to the model's recorded forward beside its contribution map."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnviz
from attnviz import analysis
from attnviz.analysis.patched_run import patched_run

pytestmark = pytest.mark.integration
CLEAN, CORRUPTED = "abcdefabcde", "abcdxfabcde"


def _value(out):
    """An output as the client gets it: a component update ``{"value": ...}`` or the value."""
    return out["value"] if isinstance(out, dict) and "__type__" in out else out


def _fig(plot) -> dict:
    """A gr.Plot output as plotly JSON."""
    plot = _value(plot)
    return json.loads(plot["plot"] if isinstance(plot, dict) else plot)


def _array(v) -> np.ndarray:
    """A plotly JSON array: a list, or ``{"dtype", "bdata"}`` (base64)."""
    if isinstance(v, dict):
        import base64

        shape = v.get("shape", [-1])
        if isinstance(shape, str):  # "12, 12"
            shape = [int(n) for n in shape.split(",")]
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).reshape(
            shape
        )
    return np.asarray(v, dtype=float)


def _json(path) -> dict:
    with open(_value(path), encoding="utf-8") as f:
        return json.load(f)


def test_why_endpoints_through_gradio_client(models_dir):
    gradio_client = pytest.importorskip("gradio_client")
    from helpers import launched_app

    ckpt = attnviz.load_checkpoint(models_dir / "induction")
    prompt = list(ckpt.encode_source(CLEAN).ids)
    with launched_app(models_dir / "induction") as (_, port):
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        client.predict(CLEAN, api_name="/step")

        # direct attribution, "f and not x": the drawn cells add up to the model's logit
        plot, msg, path = client.predict("x", "light", api_name="/why_attribution")
        want = analysis.direct_attribution(ckpt, prompt, versus="x")
        data = _json(path)
        assert data["values"] == pytest.approx([p.value for p in want.parts])
        assert data["token"] == "f" and data["versus"] == "x"
        cells = np.concatenate([_array(t["z"]).ravel() for t in _fig(plot)["data"]])
        assert np.nansum(cells) == pytest.approx(want.logit, abs=1e-4)
        assert "and not" in msg

        # the logit lens at the position, then the whole grid
        table, grid_plot, msg, path = client.predict("light", api_name="/why_lens")
        lens = analysis.logit_lens(ckpt, prompt)
        assert [row[0] for row in _value(table)["data"]] == lens.layers
        assert [int(row[1]) for row in _value(table)["data"]] == [int(r) + 1 for r in lens.rank]
        assert _json(path)["target"] == "f"
        table, grid_plot, msg, path = client.predict("light", api_name="/why_grid")
        z = _array(_fig(grid_plot)["data"][0]["z"]).reshape(len(lens.layers), -1)
        assert z[:, -1] == pytest.approx(lens.prob, abs=1e-6)

        # patching the heads (noising): the layer-0 previous-token head kills the answer
        plot, cell, _, _, _, _, msg, path = client.predict(
            CORRUPTED, "f", "x", "heads", "noising", "light", api_name="/why_patch"
        )
        want = analysis.patch(ckpt, CLEAN, CORRUPTED, "f", "x", "heads", direction="noising")
        got = np.asarray(_json(path)["grid"], dtype=float)
        np.testing.assert_allclose(got, want.grid, atol=1e-9)
        drawn = _array(_fig(plot)["data"][0]["z"]).reshape(got.shape)
        np.testing.assert_allclose(drawn, want.grid, atol=1e-9)
        assert "Most damaging" in msg
        # the most damaging cell is offered first; opened, it is that patched run
        prev = int(analysis.induction_scores(ckpt, n=20).prev_token[0].argmax())
        assert _value(cell) == f"0,{prev}"
        table, site, cell_plot, said = client.predict(
            CORRUPTED, "f", "x", "heads", "noising", f"0,{prev}", None, "light",
            api_name="/why_cell",
        )  # fmt: skip
        rows = _value(table)["data"]
        assert rows[0][0] != "f" and f"decoder_self 0 · H{prev}" in said
        # its attention: first the cell's own head (the patched run's, beside the clean run's)
        run = patched_run(ckpt, CLEAN, CORRUPTED, "f", "x", "heads", [0, prev],
                          direction="noising")  # fmt: skip
        assert _value(site) == f"decoder_self 0 {prev}"
        shown = _heat(cell_plot)
        np.testing.assert_allclose(shown[0], run.trace.numpy("decoder_self", 0)[0, prev], atol=1e-6)
        # a later head, whose attention the patch changes: the patched run's recorded weights
        for h in range(ckpt.config.n_heads):
            table, site, cell_plot, said = client.predict(
                CORRUPTED, "f", "x", "heads", "noising", f"0,{prev}", f"decoder_self 1 {h}",
                "light", api_name="/why_cell",
            )  # fmt: skip
            patched, base = _heat(cell_plot)
            want = run.trace.numpy("decoder_self", 1)[0, h]
            np.testing.assert_allclose(patched, want, atol=1e-6)
            np.testing.assert_allclose(base, run.base.numpy("decoder_self", 1)[0, h], atol=1e-6)
            assert f"decoder_self 1 · H{h}" in said and _value(site) == f"decoder_self 1 {h}"
        # the patch acts there: the patched run's attention is not the clean run's
        assert not np.allclose(
            run.trace.numpy("decoder_self", 1), run.base.numpy("decoder_self", 1)
        )
        bad = client.predict("abc", "f", "x", "heads", "noising", "light", api_name="/why_patch")
        assert bad[6].startswith("⚠") and "as many tokens" in bad[6] and "\n" not in bad[6]

        # information flow at a threshold: the route is the library's
        plot, edge, _, _, _, _, msg, path = client.predict(0.04, "light", api_name="/why_flow")
        flow = analysis.flow(ckpt, prompt, 0.04)
        assert _json(path)["route"] == flow.route
        assert "remain on the route" in msg
        # the edge offered first: an attention edge into the predicting position
        first = _value(edge)
        e = flow.edges[int(first)]
        assert e.site is not None and flow.nodes[e.target]["position"] == flow.position
        # opened: its heads ranked, each with the attention the run recorded beside its
        # contribution map
        edge, table, heads_plot, path, said = client.predict(first, "light", api_name="/why_edge")
        data = _json(path)
        rows = _value(table)["data"]
        assert [r[1] for r in rows] == [f"H{h}" for h, _ in e.heads]
        assert [float(r[2]) for r in rows] == pytest.approx([w for _, w in e.heads], abs=1e-4)
        recorded = _recorded(ckpt, prompt)
        q, k = flow.nodes[e.target]["position"], flow.nodes[e.source]["position"]
        maps = _heat(heads_plot)
        assert len(maps) == 2 * min(3, len(e.heads))
        kind, layer = e.site
        for n, h in enumerate(data["heads"]):
            want = recorded.numpy(kind, layer)[0, h["head"]]
            np.testing.assert_allclose(h["attention_map"], want, atol=1e-6)
            np.testing.assert_allclose(maps[2 * n], want, atol=1e-6)  # drawn: left
            np.testing.assert_allclose(maps[2 * n + 1], h["contribution_map"], atol=1e-6)
            assert h["contribution_map"][q][k] == pytest.approx(h["contribution"], abs=1e-6)
            assert h["attention"] == pytest.approx(float(want[q, k]), abs=1e-6)
        assert "heads carry it" in said
        bad = client.predict("999", "light", api_name="/why_edge")
        assert bad[4].startswith("⚠") and "not an attention edge" in bad[4] and "\n" not in bad[4]
        client.predict(CLEAN, api_name="/step")  # another step: the graph kept is an earlier one
        stale = client.predict(first, "light", api_name="/why_edge")
        assert stale[4].startswith("⚠") and "draw it again" in stale[4]


def _heat(plot) -> list[np.ndarray]:
    """The heatmaps of a plot, in order, as ``[Tq, Tk]`` arrays."""
    out = []
    for t in _fig(plot)["data"]:
        if t.get("type") == "heatmap":
            z = t["z"]
            out.append(_array(z) if isinstance(z, dict) else np.asarray(z, dtype=float))
    return out


def _recorded(ckpt, ids):
    """The attention of the model's own forward on ``ids``, recorded by the library."""
    import torch

    from attnviz.analysis.why import prepare

    prep = prepare(ckpt, ids, None)
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        prep.last(prep.tensor(ckpt.device))
    return trace
