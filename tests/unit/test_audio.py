"""Audio in (attnviz.data.audio): files and arrays to 16 kHz mono, and one-line refusals of
everything that is not usable audio."""

from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest

from attnviz.core.errors import InputError
from attnviz.data.audio import MAX_SECONDS, SAMPLING_RATE, load_audio

soundfile = pytest.importorskip("soundfile")


def _tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


@pytest.mark.parametrize("fmt, subtype", [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("OGG", "VORBIS")])
def test_files_become_16k_mono(tmp_path, fmt, subtype):
    stereo = np.stack([_tone(1.0, 22050), -_tone(1.0, 22050) * 0.5], axis=1)
    path = tmp_path / f"clip.{fmt.lower()}"
    soundfile.write(path, stereo, 22050, format=fmt, subtype=subtype)
    samples = load_audio(path)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(len(samples) - SAMPLING_RATE) <= 2
    assert 0.1 < np.abs(samples).max() < 0.5  # the mix of +1 and -0.5 of the tone


def test_arrays_are_resampled_mixed_and_scaled():
    tone = _tone(0.5, 8000)
    assert len(load_audio(tone, sampling_rate=8000)) == SAMPLING_RATE // 2
    assert np.array_equal(load_audio(tone[:100]), tone[:100])  # 16 kHz by default
    pcm = (tone * 32767).astype(np.int16)
    assert np.allclose(
        load_audio(pcm, sampling_rate=8000), load_audio(tone, sampling_rate=8000), atol=1e-3
    )
    both = np.stack([tone, tone])  # [channels, frames] is read as such
    assert len(load_audio(both, sampling_rate=8000)) == SAMPLING_RATE // 2


@pytest.mark.parametrize(
    "audio, rate, message",
    [
        (np.zeros(0, dtype=np.float32), None, "empty"),
        (np.array([0.1, np.nan], dtype=np.float32), None, "NaN or infinite"),
        (np.array([0.1, np.inf]), None, "NaN or infinite"),
        (np.zeros((2, 3, 4), dtype=np.float32), None, "shape"),
        (np.array(["a", "b"]), None, "numbers"),
        (np.zeros(int((MAX_SECONDS + 1) * 8000), dtype=np.float32), 8000, "31.0 s long"),
        (np.zeros(10, dtype=np.float32), 0, "sampling_rate"),
        (np.zeros(10, dtype=np.float32), 44.1, "sampling_rate"),
        (np.zeros(10, dtype=bool), None, "numbers"),
    ],
)
def test_bad_arrays_get_one_line(audio, rate, message):
    with pytest.raises(InputError, match=message) as info:
        load_audio(audio, sampling_rate=rate)
    assert "\n" not in str(info.value)


def test_bad_files_get_one_line(tmp_path):
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio\n" * 10)
    empty = tmp_path / "empty.wav"
    soundfile.write(empty, np.zeros(0, dtype=np.float32), 16000)
    long = tmp_path / "long.flac"
    soundfile.write(long, np.zeros(int(31 * 8000), dtype=np.float32), 8000)
    for path, message in (
        (text, "not an audio file"),
        (empty, "empty"),
        (long, "31.0 s long"),
        (tmp_path / "missing.wav", "no audio file"),
    ):
        with pytest.raises(InputError, match=message) as info:
            load_audio(path)
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="sampling_rate is for arrays"):
        load_audio(long, sampling_rate=8000)


def test_a_header_claiming_2_31_frames_allocates_nothing_of_the_kind(tmp_path):
    path = tmp_path / "lie.wav"
    soundfile.write(path, _tone(0.1, 16000), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    chunk = data.find(b"data")
    struct.pack_into("<I", data, chunk + 4, 2**32 - 16)  # 2^31 frames of 16-bit samples
    struct.pack_into("<I", data, 4, 2**32 - 8)
    path.write_bytes(bytes(data))
    tracemalloc.start()
    try:
        try:
            samples = load_audio(path)
        except InputError as exc:  # refused from the header: fine too
            assert "\n" not in str(exc)
            samples = None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20
    if samples is not None:  # read as what the file holds, never as what the header says
        assert len(samples) <= 1600
