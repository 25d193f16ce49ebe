"""The speech part of the app without a model: time labels, the spectrogram strip, clip checks."""

from __future__ import annotations

import base64
import io
import time
from pathlib import Path

import numpy as np
import pytest

from attnviz.app import speech
from attnviz.core.errors import InputError
from attnviz.data import audio
from attnviz.data.audio import SAMPLING_RATE, log_mel


def test_time_labels_are_twenty_ms_frames():
    assert [speech.time_label(k) for k in (0, 1, 50, 1499)] == ["0.00s", "0.02s", "1.00s", "29.98s"]
    assert speech.ENCODER_FRAMES == 30 * speech.FRAMES_PER_SECOND
    # one home: the app's time axis is the audio module's numbers
    assert speech.FRAMES_PER_SECOND is audio.FRAMES_PER_SECOND == 50
    assert audio.feature_frames(SAMPLING_RATE) == 2 * audio.FRAMES_PER_SECOND


def test_spectrogram_is_mels_by_encoder_frames():
    rng = np.random.default_rng(0)
    clip = (0.1 * rng.standard_normal(SAMPLING_RATE)).astype(np.float32)  # 1 s
    spec = speech.spectrogram(log_mel(clip))  # the features a stepper encodes
    assert spec.shape == (80, speech.ENCODER_FRAMES) and spec.dtype == np.uint8
    assert spec.min() == 0 and spec.max() == 255
    # the second after the clip is Whisper's padding: one level, below the noise
    assert spec[:, 60:].std() == 0 and spec[:, 60:].max() < spec[:, :45].mean()


def test_the_clip_plays_as_the_samples_kept():
    import soundfile

    clip = np.linspace(-0.5, 0.5, 800, dtype=np.float32)
    url = speech.wav_data_url(clip)
    assert url.startswith("data:audio/wav;base64,")
    back, rate = soundfile.read(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert rate == SAMPLING_RATE and np.abs(back - clip).max() < 1e-4


@pytest.mark.parametrize(
    "clip, says",
    [
        ("", "no clip"),
        ("/etc/hostname", "upload one, record one or pick an example"),
        (np.zeros(0, np.float32), "empty"),
        (np.full(100, np.nan, np.float32), "NaN"),
        (np.zeros(31 * SAMPLING_RATE, np.float32), "30 s"),
        (np.array(["a", "b"]), "numbers"),
    ],
)
def test_bad_clips_are_one_line(clip, says):
    with pytest.raises(InputError, match=says) as err:
        speech.store_clip(clip)
    assert "\n" not in str(err.value)


def test_a_file_that_is_not_audio_is_refused(tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("not a wave")
    with pytest.raises(InputError, match="not an audio file"):
        speech.store_clip(str(bad))


def test_a_clip_is_kept_once_by_content(tmp_path):
    clip = np.sin(np.arange(4000) / 10).astype(np.float32)
    a, seconds = speech.store_clip(clip)
    b, _ = speech.store_clip(clip.copy())
    assert a == b and seconds == 0.25
    assert np.array_equal(np.load(a), clip)


def test_one_clip_given_by_many_sessions_at_once_is_kept_once(monkeypatch):
    """Sixteen sessions storing the same new clip together: each gets the one kept file (a
    shared temporary name made all but the first fail, "No such file or directory")."""
    from concurrent.futures import ThreadPoolExecutor

    clip = np.cos(np.arange(48000) / 7).astype(np.float32)  # new: not kept before
    real_save = np.save

    def slow_save(path, arr):  # the writers overlap, as under load
        time.sleep(0.01)
        real_save(path, arr)

    monkeypatch.setattr(speech.np, "save", slow_save)
    with ThreadPoolExecutor(16) as pool:
        kept = list(pool.map(lambda _: speech.store_clip(clip)[0], range(16)))
    assert len(set(kept)) == 1 and np.array_equal(np.load(kept[0]), clip)
    assert not list(Path(kept[0]).parent.glob("*.tmp.npy"))  # no temporary file left


def test_examples_are_offered():
    names = [speech.example_name(p) for p in speech.examples()]
    assert {"hello world", "quick brown fox", "weather report"} <= set(names)
