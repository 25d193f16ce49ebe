"""Long inputs in the app: the first Step no longer carries every encoder layer and head; the
page asks for the one it shows and gets exactly the recorded weights (the one promise)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from attnviz.app import session, views
from attnviz.app.decoders import DECODERS
from attnviz.bench.app import long_text, opus_shaped_checkpoint


def _f32(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<f4")


def _unpack(b64: str, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(base64.b64decode(b64), np.uint8))[:n].astype(bool)


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """A small random model whose positions hold 1,100 tokens (character tokenizer)."""
    folder = tmp_path_factory.mktemp("long")
    shape = dict(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64)
    return str(opus_shaped_checkpoint(folder / "m", max_len=1100, **shape))


@pytest.fixture(scope="module")
def stepped(long_model):
    view = session.step(session.new_state(long_model), long_text(512))  # as the Step button
    assert len(view.state.src_ids) == 512
    return view


def test_first_step_of_a_long_input_sends_only_the_encoder_head_shown(stepped):
    p = stepped.payload
    assert p["full"] and p["encoder"] == []  # not every layer and head: ~1/8 of one layer
    block = p["enc_block"]
    assert (block["layer"], block["head"], block["h"], block["ts"]) == (1, "mean", 1, 512)
    size = views.json_size(p)
    all_heads = 2 * 4 * 512 * 512 * 4 * 4 / 3  # every layer and head as base64 float32
    assert size < all_heads / 4, size
    with DECODERS.hold(stepped.state, session.checkpoint_of(stepped.state), 0) as stepper:
        want = stepper.encoder_trace.numpy("encoder_self", 1)[0].mean(0)
    np.testing.assert_array_equal(_f32(block["w"]).reshape(512, 512), want)
    # a later Step sends its rows only
    later = session.step(stepped.state).payload
    assert not later["full"] and "enc_block" not in later and "encoder" not in later


def test_asking_for_a_head_returns_exactly_the_recorded_weights(stepped):
    state = stepped.state
    epoch = f"{state.sid}:{state.epoch}"
    ckpt = session.checkpoint_of(state)
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        trace = stepper.encoder_trace
        w = trace.numpy("encoder_self", 0)[0]  # [H, Ts, Ts]
        m = trace.numpy("encoder_self", 0, "mask")[0, 0].astype(bool)
    got = session.encoder_view(state, f"{epoch} 0 H2")["enc"]
    assert (got["layer"], got["head"], got["h"]) == (0, "H2", 1)
    np.testing.assert_array_equal(_f32(got["w"]).reshape(512, 512), w[2])  # bit for bit
    np.testing.assert_array_equal(_unpack(got["m"], 512 * 512).reshape(512, 512), m)
    every = session.encoder_view(state, f"{epoch} 0 all heads")["enc"]
    np.testing.assert_array_equal(_f32(every["w"]).reshape(w.shape), w)


def test_thumbnails_are_downsampled_and_say_so(stepped):
    state = stepped.state
    epoch = f"{state.sid}:{state.epoch}"
    th = session.encoder_view(state, f"{epoch} thumbs")["enc"]
    assert th["thumbs"] and (th["tq"], th["tk"], th["bq"], th["bk"]) == (64, 64, 8, 8)
    z = _f32(th["w"]).reshape(2, 4, 64, 64)
    with DECODERS.hold(state, session.checkpoint_of(state), state.version) as stepper:
        w = stepper.encoder_trace.numpy("encoder_self", 1)[0, 3]  # [Ts, Ts]
    assert z[1, 3, 5, 7] == w[40:48, 56:64].max()
    words = session.encoder_view(state, f"{epoch} thumbs words")["enc"]
    assert words["words"] and words["tq"] <= 64


def test_bad_or_stale_encoder_requests_come_back_as_messages(stepped):
    state = stepped.state
    epoch = f"{state.sid}:{state.epoch}"
    assert "another decode" in session.encoder_view(state, "old:1 0 H0")["enc"]["error"]
    assert "layer must be one of" in session.encoder_view(state, f"{epoch} 7 H0")["enc"]["error"]
    assert "head must be in" in session.encoder_view(state, f"{epoch} 0 H9")["enc"]["error"]
    assert "not a layer" in session.encoder_view(state, f"{epoch} x H0")["enc"]["error"]


def test_short_inputs_still_get_every_encoder_layer_with_the_first_step(long_model):
    view = session.step(session.new_state(long_model), "hello world")
    p = view.payload
    assert len(p["encoder"]) == 2 and "enc_block" not in p
    # words for the switch: "hello world" is two words (the space starts the second)
    assert p["src_words"]["index"] == [0] * 5 + [1] * 6
    assert json.loads(json.dumps(p["tgt_words"]))["index"][0] == 0


def test_a_1024_token_input_steps_and_keeps_no_per_step_encoder_copies(long_model):
    state = session.start(session.new_state(long_model), long_text(1024)).state
    assert len(state.src_ids) == 1024
    for _ in range(3):
        view = session.step(state)
        state = view.state
    ckpt = session.checkpoint_of(state)
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        enc = stepper.encoder_trace
        for recs in stepper._records:  # what a step keeps: its own query rows, no encoder
            assert all(kind != "encoder_self" for kind, _ in recs)
            assert all(r.weights.shape[-2] == 1 for r in recs.values())
        assert enc.numpy("encoder_self", 0).shape == (1, 4, 1024, 1024)
        # no raw scores beside the weights: no view of the app reads them
        assert all(enc.get("encoder_self", i).scores is None for i in enc.layers("encoder_self"))
        assert all(r.scores is None for recs in stepper._records for r in recs.values())
        full = stepper.trace()  # the figures and exports still assemble weights and masks
        assert full.numpy("cross", 1).shape == (1, 4, 3, 1024)
