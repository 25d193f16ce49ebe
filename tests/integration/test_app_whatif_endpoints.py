"""The what-if endpoints of the app through gradio_client."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import reverse_fixture, stepped_state  # noqa: F401 (fixture: ckpt)

from attnviz.analysis import attribute, what_if
from attnviz.app import session
from attnviz.app.panels import labs

TEXT = "helloworld"


def _stepped(models_dir, n: int) -> session.SessionState:
    return stepped_state(models_dir / "reverse", TEXT, n)


# -- the named endpoints --------------------------------------------------------------------------
@pytest.mark.integration
def test_endpoints_through_gradio_client(models_dir, ckpt):
    gradio_client = pytest.importorskip("gradio_client")
    from helpers import launched_app

    with launched_app() as (_, port):
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        for _ in range(3):
            client.predict(TEXT, api_name="/step")
        strip, msg, compare, *_ = client.predict("L1", ["H1"], "5", api_name="/whatif")
        direct = what_if(ckpt, TEXT, 2, layer=1, heads=[1], attend_to=5)
        assert 'data-src-pos="5"' in strip and "av-wi-chosen" in strip
        assert f"“{direct.before.text}” → “{direct.after.text}”" in compare
        assert "source position 5" in msg
        bad = client.predict("L1", ["H1"], "12", api_name="/whatif")
        assert bad[1].startswith("⚠") and "0..9" in bad[1]
        plot, caption, *_ = client.predict("", "L1", "mean", "light", api_name="/contrast")
        fig = json.loads(plot["plot"]) if isinstance(plot, dict) else json.loads(plot)
        alt = int(labs.alternatives(_stepped(models_dir, 3))[1])
        want = attribute(ckpt, TEXT, 2, n_steps=32, versus=alt).ig_src
        np.testing.assert_allclose(_ys(fig["data"][0]["y"]), want, rtol=1e-4, atol=1e-6)
        assert "Why" in caption


def _ys(y) -> np.ndarray:
    """A plotly JSON array: a list, or ``{"dtype", "bdata"}`` (base64)."""
    if isinstance(y, dict):
        import base64

        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"]))
    return np.asarray(y, float)
