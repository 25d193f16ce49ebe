"""The beam endpoints of the app through gradio_client."""

from __future__ import annotations

import re

import pytest

from attnviz.app import store
from attnviz.decode.beam import beam_predict

TEXT = "helloworld"
NODE = re.compile(r'<g class="([^"]*)" data-node-id="(\d+)"')


def _nodes(html: str) -> dict[int, set[str]]:
    """``{node id: its classes}`` of every node drawn."""
    return {int(i): set(c.split()) for c, i in NODE.findall(html)}


# -- the page's endpoints, through gradio_client -------------------------------------------------
@pytest.mark.integration
def test_the_beam_endpoints_through_gradio_client(models_dir):
    gradio_client = pytest.importorskip("gradio_client")
    from helpers import launched_app

    ckpt = store.get_checkpoint(str(models_dir / "reverse"))
    ref = beam_predict(ckpt, TEXT, 4, return_tree=True)
    with launched_app(models_dir / "reverse") as (_, port):
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        client.predict(TEXT, api_name="/step")
        tree_html, files = client.predict(TEXT, 4, api_name="/beam")
        nodes = _nodes(tree_html)
        assert len(nodes) == len(ref.tree.nodes)
        assert {i for i, c in nodes.items() if "best" in c} == set(
            [0, *(n.id for n in ref.tree.path(ref.tree.best))]
        )
        assert len(files["value"]) == 2
        node = next(n.id for n in ref.tree.nodes if n.id not in nodes or "best" not in nodes[n.id])
        html_, message, _ = client.predict(str(node), "light", api_name="/beam_node")
        assert "selected" in _nodes(html_)[node] and message.startswith(f"Node {node}:")
        _, bad, _ = client.predict("999", "light", api_name="/beam_node")
        assert bad == f"⚠ node must be in 1..{len(ref.tree.nodes) - 1}, got 999"
        out = client.predict(api_name="/beam_continue")  # continues from the selected node
        assert out[0] == ckpt.tgt_tokenizer.decode(ref.tree.tokens(node))
