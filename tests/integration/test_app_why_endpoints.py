"""The "Why this token" endpoints of the app through gradio_client, on models/induction after
one Step of ``abcdefabcde`` (the model answers ``f``): each endpoint's figure, table and JSON
download hold the library's result for the same prediction, and bad input is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnviz
from attnviz import analysis

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

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).reshape(
            v.get("shape", [-1]) if isinstance(v.get("shape"), list) else -1
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
        plot, cell, _, _, msg, path = client.predict(CORRUPTED, "f", "x", "heads", "noising",
                                                     "light", api_name="/why_patch")  # fmt: skip
        want = analysis.patch(ckpt, CLEAN, CORRUPTED, "f", "x", "heads", direction="noising")
        got = np.asarray(_json(path)["grid"], dtype=float)
        np.testing.assert_allclose(got, want.grid, atol=1e-9)
        drawn = _array(_fig(plot)["data"][0]["z"]).reshape(got.shape)
        np.testing.assert_allclose(drawn, want.grid, atol=1e-9)
        assert "Most damaging" in msg
        # the most damaging cell is offered first; opened, it is that patched run
        assert _value(cell) == "0,0"
        table, said = client.predict(CORRUPTED, "f", "x", "heads", "noising", "0,0",
                                     api_name="/why_cell")  # fmt: skip
        rows = _value(table)["data"]
        assert rows[0][0] != "f" and "decoder_self 0 · H0" in said
        bad = client.predict("abc", "f", "x", "heads", "noising", "light", api_name="/why_patch")
        assert bad[4].startswith("⚠") and "as many tokens" in bad[4] and "\n" not in bad[4]

        # information flow at a threshold: the route is the library's
        plot, msg, path = client.predict(0.04, "light", api_name="/why_flow")
        assert _json(path)["route"] == analysis.flow(ckpt, prompt, 0.04).route
        assert "remain on the route" in msg
