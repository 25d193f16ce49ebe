"""attnviz.render.show: attention views for notebooks.

The HTML is self-contained (no URL for a script or a style, no require.js), each view has its
own ids, the weights it carries are the recorded ones, and a 20-token decode stays under
2 MB. The slow test executes a notebook with two views (nbclient) and renders its outputs in
headless Chromium with every network request refused: both views draw.
"""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
import torch
from helpers import make_model

import attnviz
from attnviz.render.show import View

IDS = re.compile(r'\bid="([^"]+)"')


@pytest.fixture(scope="module")
def reverse(models_dir):
    return attnviz.load_checkpoint(models_dir / "reverse")


def _weights(view: View, layer: int) -> np.ndarray:
    d = view.data
    w = np.frombuffer(base64.b64decode(d["layers"][layer]["w"]), dtype="<f4")
    return w.reshape(d["heads"], len(d["queries"]), len(d["keys"]))


def test_the_html_fetches_nothing(reverse):
    page = attnviz.show(reverse, "hello")._repr_html_()
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link\b", page)
    assert not re.search(r"https?://", page)
    assert "require(" not in page and "define(" not in page and "@import" not in page
    assert "window.AttnViz.drawStatic(" in page


def test_two_views_share_no_element_id(reverse):
    a, b = attnviz.show(reverse, "hello"), attnviz.show(reverse, "abc", kind="decoder_self")
    pages = [a._repr_html_(), b._repr_html_(), a._repr_html_()]  # the same view shown twice
    ids = [IDS.findall(p) for p in pages]
    assert all(len(i) == 1 for i in ids)
    flat = [x for i in ids for x in i]
    assert len(set(flat)) == len(flat)
    for page, (vid,) in zip(pages, ids, strict=True):
        assert f'getElementById("{vid}")' in page


def test_a_20_token_decode_stays_under_2_mb(reverse):
    view = attnviz.show(reverse, "abcdefghijklmnopqrst")  # 20 source tokens
    assert len(view.data["queries"]) == 21  # 20 letters and the end token
    assert len(view._repr_html_().encode()) < 2_000_000


def test_the_view_carries_the_recorded_weights(reverse):
    text = "hello"
    view = attnviz.show(reverse, text, steps=3, layer=0, head=2)
    stepper = reverse.stepper(text)
    for _ in range(3):
        stepper.step()
    trace = stepper.trace()
    assert view.data["layer"] == 0 and view.data["head"] == "H2"
    for i in trace.layers("cross"):
        np.testing.assert_array_equal(_weights(view, i), trace.numpy("cross", i)[0])
    assert view.data["keys"] == list(text)  # reverse reads characters
    assert view.data["queries"][0] == "<bos>" and len(view.data["queries"]) == 3


def test_decoder_self_marks_the_future_blocked(reverse):
    view = attnviz.show(reverse, "abcd", kind="decoder_self")
    t = len(view.data["queries"])
    m = np.array(list(view.data["layers"][0]["m"]), dtype=int).reshape(t, t)
    np.testing.assert_array_equal(m, np.triu(np.ones((t, t), dtype=int), k=1))


def test_trace_show_from_a_forward_pass():
    model = make_model()
    src, tgt = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 5, 6]])
    with attnviz.record(model) as trace:
        model(src, tgt)
    view = trace.show(list("abcd"), ["<bos>", "a", "b"], kind="decoder_self", head="all heads")
    assert view.data["kind"] == "decoder_self" and view.data["head"] == "all heads"
    np.testing.assert_array_equal(_weights(view, 1), trace.numpy("decoder_self", 1)[0])
    assert trace.show(list("abcd"), ["<bos>", "a", "b"]).data["kind"] == "cross"
    with pytest.raises(attnviz.InputError, match="3 queries but 2 tokens"):
        trace.show(list("abcd"), ["<bos>", "a"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "self"}, "kind must be one of"),
        ({"head": 9}, "head must be 0..3"),
        ({"layer": 5}, "layer must be one of"),
        ({"steps": 0}, "steps must be"),
    ],
)
def test_bad_arguments_say_what_is_allowed(reverse, kwargs, message):
    with pytest.raises(attnviz.InputError, match=message):
        attnviz.show(reverse, "hello", **kwargs)


def test_save_html_writes_a_page(reverse, tmp_path):
    path = attnviz.show(reverse, "hello").save_html(tmp_path / "v.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "drawStatic" in text


# -- a notebook, executed, then drawn in Chromium offline ------------------------------------------
# pixels of a canvas that are a heatmap colour (saturated), not the white card, text or grey
# Insert outputs the way JupyterLab does: innerHTML, then each script re-created to run it.
