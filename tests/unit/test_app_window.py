"""A local layer's sliding window reaches the page apart from the causal mask: each mask cell
the page gets is 0 (open), 1 (blocked) or 2 (blocked by the window), exactly where the recorded
trace's window is; the layer menu names each layer local or global."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import attnviz
from attnviz.app import session


@pytest.fixture(scope="module")
def windowed(models_dir, tmp_path_factory):
    """models/induction with a window of 3 on layer 0 (layer 1 global)."""
    base = attnviz.load_checkpoint(models_dir / "induction")
    cfg = dataclasses.replace(base.config, sliding_window=3,
                              layer_types=("sliding_attention", "full_attention"))  # fmt: skip
    model = attnviz.Transformer(cfg).eval()
    model.load_state_dict(base.model.state_dict())
    folder = tmp_path_factory.mktemp("windowed") / "induction-window3"
    attnviz.save_checkpoint(folder, model, base.src_tokenizer, base.tgt_tokenizer, base.meta)
    return folder


def _cells(m: str) -> np.ndarray:
    return np.frombuffer(m.encode(), np.uint8) - ord("0")


def test_window_cells_are_marked_apart_on_local_layers_only(windowed):
    ckpt = attnviz.load_checkpoint(windowed)
    text = ckpt.meta.get("examples", [None])[0] if ckpt.meta.get("examples") else None
    state = session.new_state(str(windowed))
    prompt = text or " ".join("abcdefgh")
    view = session.start(state, prompt)
    for _ in range(4):
        view = session.step(view.state, prompt)
    full = dataclasses.replace(view.state, page_rows=-1)  # as a page that holds nothing
    payload = session.render(full).payload.to_page()
    assert payload["windows"] == [3, 0]
    prompt_rows = payload["prompt_rows"]
    rows = payload["rows"]["decoder_self"]
    stepper = ckpt.stepper(prompt)
    for _ in range(4):
        stepper.step()
    trace = stepper.trace()
    for layer in (0, 1):
        window = trace.window("decoder_self", layer)[0, 0].numpy()  # [T, T]
        mask = trace.mask("decoder_self", layer)[0, 0].numpy()
        want = mask.astype(np.uint8) + window.astype(np.uint8)  # 0 open, 1 blocked, 2 window
        got = np.concatenate([_cells(prompt_rows[layer]["m"]), _cells(rows[layer]["m"])])
        t = want.shape[0]
        assert np.array_equal(got, np.concatenate([want[r, : r + 1] for r in range(t)]))
        assert (got == 2).any() == (layer == 0)


def test_the_mask_lab_switches_a_layers_window_off(windowed):
    """``window_off=["L0"]``: layer 0 attends past its window in the "after" run (the causal
    mask kept), the next-token bars change, and the page names what was switched off."""
    from attnviz.app.panels import labs

    prompt = " ".join("abcdefgh")
    state = session.step(
        session.start(session.new_state(str(windowed)), prompt).state, prompt
    ).state
    view = labs.mask_lab(state, window_off=["L0"])
    assert "Sliding window off" in view.message and len(view.figures) == 2
    assert "nothing is changed yet" not in view.message  # the window was changed
    assert "nothing is changed yet" in labs.mask_lab(state).message
    lab = attnviz.analysis.mask_lab(attnviz.load_checkpoint(windowed), prompt, window_off=[0])
    before, after = (lab.experiment.before.trace, lab.experiment.after.trace)
    assert before.is_sliding("decoder_self", 0) and not after.is_sliding("decoder_self", 0)
    m0, m1 = before.mask("decoder_self", 0)[0, 0], after.mask("decoder_self", 0)[0, 0]
    assert bool((m0 & ~m1).any()) and not bool((m1 & ~m0).any())  # only window cells opened
    future = np.triu(np.ones(m1.shape, bool), 1)
    assert bool(m1.numpy()[future].all())  # the causal mask kept
    with pytest.raises(attnviz.AttnvizError, match="see every key"):
        attnviz.analysis.mask_lab(attnviz.load_checkpoint(windowed), prompt, window_off=[1])


def test_a_gguf_language_model_is_offered_prompts_that_show_something(tmp_path):
    from types import SimpleNamespace

    from attnviz.app.examples import LLM_PROMPTS, examples_of

    ckpt = SimpleNamespace(task=None, masked_lm=False, meta={"format": "gguf"},
                           path=tmp_path / "model.gguf")  # fmt: skip
    out = examples_of(ckpt)
    assert out == list(LLM_PROMPTS) and len(out[-1]) > 2000  # longer than a 512-token window
    assert examples_of(SimpleNamespace(**{**vars(ckpt), "meta": {}})) == []
