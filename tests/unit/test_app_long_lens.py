"""Norms and rollout on long inputs: the lens payload leaves the encoder out, the page asks for
the layer and head it shows (rollout: the layer's one matrix) and gets exactly
:func:`attnviz.analysis.lens` of a recorded pass (the one promise)."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from attnviz.analysis import lens
from attnviz.analysis.words import downsample, pool_words, word_index
from attnviz.app import lenses, session, views
from attnviz.bench.app import long_text, opus_shaped_checkpoint
from attnviz.core.record import record

TS = 300


def _f32(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<f4")


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("longlens")
    shape = dict(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64)
    return str(opus_shaped_checkpoint(folder / "m", max_len=700, **shape))


@pytest.fixture(scope="module")
def stepped(long_model):
    state = session.step(session.new_state(long_model), long_text(TS)).state
    for _ in range(2):
        state = session.step(state).state
    assert len(state.src_ids) == TS and len(state.tokens) == 3
    return state


def _recorded(state):
    """A full teacher-forced pass over the decoded tokens, recorded with values."""
    ckpt = session.checkpoint_of(state)
    cfg, model = ckpt.config, ckpt.model
    src = torch.tensor([state.src_ids])
    tgt = torch.tensor([[cfg.bos_id, *state.tokens[:-1]]])
    with torch.no_grad(), record(model, capture=("weights", "mask", "values")) as trace:
        model(src, tgt)
    return model, trace


def _ask(state, what):
    return session.encoder_view(state, f"{state.sid}:{state.epoch} {what}")["enc"]


def test_the_long_lens_payload_carries_the_decoder_kinds_only(stepped):
    model, trace = _recorded(stepped)
    for name in ("norms", "rollout"):
        p = lenses.payload(stepped, name)["lens"]
        assert "error" not in p and p["long"] and set(p["kinds"]) == {"decoder_self", "cross"}
        for kind, layers in p["kinds"].items():
            for layer, e in enumerate(layers):
                want = lens(model, trace, kind, layer, name)[0]
                got = _f32(e["w"]).reshape(e["h"], e["tq"], e["tk"])
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        # far less than the encoder's every layer and head as base64 float32
        assert views.json_size({"lens": p}) < 2 * 4 * TS * TS * 4 * 4 / 3 / 4


@pytest.mark.parametrize("head", ["H2", "mean", "all heads"])
def test_an_encoder_norms_block_is_the_lens_of_the_recorded_pass(stepped, head):
    model, trace = _recorded(stepped)
    want = lens(model, trace, "encoder_self", 1, "norms")[0]  # [H, Ts, Ts]
    want = {"H2": want[2:3], "mean": want.mean(0, keepdims=True), "all heads": want}[head]
    got = _ask(stepped, f"norms 1 {head}")
    assert (got["lens"], got["layer"], got["head"], got["ts"]) == ("norms", 1, head, TS)
    np.testing.assert_allclose(_f32(got["w"]).reshape(want.shape), want, rtol=0, atol=1e-6)


def test_encoder_rollout_is_one_matrix_per_layer_whatever_head_is_asked(stepped):
    model, trace = _recorded(stepped)
    want = lens(model, trace, "encoder_self", 1, "rollout")[0, 0]
    for head in ("H1", "all heads"):
        got = _ask(stepped, f"rollout 1 {head}")
        assert (got["h"], got["head"]) == (1, "mean")
        np.testing.assert_allclose(_f32(got["w"]).reshape(TS, TS), want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(_f32(got["w"]).reshape(TS, TS).sum(-1), 1, atol=1e-5)


def test_lens_thumbnails_are_the_lens_max_pooled(stepped):
    model, trace = _recorded(stepped)
    m = trace.numpy("encoder_self", 0, "mask")[0, 0].astype(bool)
    for name, h in (("norms", 4), ("rollout", 1)):
        w = np.stack([lens(model, trace, "encoder_self", i, name)[0] for i in (0, 1)])
        z, _, blocks = downsample(w, m, 64)
        th = _ask(stepped, f"{name} thumbs")
        assert th["thumbs"] and th["lens"] == name and (th["L"], th["h"]) == (2, h)
        assert (th["bq"], th["bk"]) == blocks and th["tq"] <= 64
        np.testing.assert_allclose(_f32(th["w"]).reshape(z.shape), z, rtol=0, atol=1e-6)
    ckpt = session.checkpoint_of(stepped)
    words = word_index(stepped.src_pieces, ckpt.src_tokenizer.kind)
    w = np.stack([lens(model, trace, "encoder_self", i, "norms")[0] for i in (0, 1)])
    z, _, _ = downsample(*pool_words(w, m, words, words), 64)
    th = _ask(stepped, "norms thumbs words")
    assert th["words"]
    np.testing.assert_allclose(_f32(th["w"]).reshape(z.shape), z, rtol=0, atol=1e-6)


def test_bad_lens_requests_come_back_as_messages(stepped):
    assert "layer must be one of" in _ask(stepped, "norms 7 H0")["error"]
    assert "head must be in" in _ask(stepped, "norms 0 H9")["error"]
    assert "not a layer" in _ask(stepped, "rollout x mean")["error"]


def test_short_inputs_keep_the_whole_lens_payload(long_model):
    state = session.step(session.new_state(long_model), "hello world").state
    p = lenses.payload(state, "norms")["lens"]
    assert "long" not in p and set(p["kinds"]) == {"encoder_self", "decoder_self", "cross"}
