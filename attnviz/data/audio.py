"""Audio in, for speech models: a clip (a file or an array) as 16 kHz mono float32, and its
log-mel features as Whisper computes them.

Files are read with ``soundfile`` (WAV, FLAC, OGG, ...), other rates resampled with ``soxr``,
several channels mixed down to one. Clips longer than :data:`MAX_SECONDS` are refused: a
Whisper encoder reads one 30 s window. Anything that is not usable audio raises one
:class:`~attnviz.core.errors.InputError` line; a header that claims more samples than its file
holds is refused before anything is allocated.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..core.errors import InputError, one_line, shorten

#: The rate every clip is brought to (Whisper's).
SAMPLING_RATE = 16_000
#: The longest clip accepted, in seconds (one Whisper window).
MAX_SECONDS = 30.0
#: Samples between two log-mel frames (Whisper's hop): 100 feature frames a second.
HOP_LENGTH = 160
#: Log-mel feature frames per second (16 kHz / hop 160).
FEATURE_FRAMES_PER_SECOND = SAMPLING_RATE // HOP_LENGTH
#: Encoder frames per second: the front-end's second convolution has stride 2, so 20 ms a
#: frame. The one home of this number: the app's time axis, word timestamps and exports ask it.
FRAMES_PER_SECOND = FEATURE_FRAMES_PER_SECOND // 2
#: Encoder frames of one window (30 s): the key axis of a speech model's attention.
ENCODER_FRAMES = int(MAX_SECONDS) * FRAMES_PER_SECOND
#: Most channels a clip may have (a file claiming more is refused before it is read).
MAX_CHANNELS = 64
#: Bytes per sample of the uncompressed ``soundfile`` subtypes (the others are compressed).
_PCM_BYTES = {
    "PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8,
    "ULAW": 1, "ALAW": 1,
}  # fmt: skip
#: Containers that store those samples as they are (FLAC stores PCM_16 compressed).
_UNCOMPRESSED = ("WAV", "WAVEX", "W64", "RF64", "AIFF", "AU", "RAW", "CAF", "NIST", "IRCAM")
SPEECH_EXTRA = "pip install 'attnviz[speech]'"


def _too_long(seconds: float) -> InputError:
    return InputError(
        f"the clip is {seconds:.1f} s long; a Whisper model reads at most {MAX_SECONDS:.0f} s "
        "at a time: cut it into pieces of 30 s or less"
    )


def _read_file(path: Path) -> tuple[np.ndarray, int]:
    """``[frames, channels]`` float32 and the file's rate; the header is checked first."""
    try:
        import soundfile
    except ImportError:
        raise InputError(f"reading audio files needs soundfile: {SPEECH_EXTRA}") from None
    name = shorten(str(path), 200)
    if not path.is_file():
        raise InputError(f"no audio file at {name}")
    size = path.stat().st_size
    try:
        info = soundfile.info(str(path))
    except Exception as exc:  # soundfile raises its own error types (and RuntimeError)
        raise InputError(
            f"{name} is not an audio file soundfile reads ({one_line(exc, 200)})"
        ) from None
    rate, channels, frames = int(info.samplerate), int(info.channels), int(info.frames)
    if rate <= 0 or not 0 < channels <= MAX_CHANNELS:
        raise InputError(
            f"{name}: a header of {channels} channels at {rate} Hz is not usable audio"
        )
    per_sample = _PCM_BYTES.get(str(info.subtype)) if info.format in _UNCOMPRESSED else None
    if per_sample is not None and frames * channels * per_sample > size:
        raise InputError(
            f"{name}: the header claims {frames:,} frames, more than the file's {size:,} bytes "
            "hold; the file is truncated or damaged"
        )
    limit = int(MAX_SECONDS * rate)
    if frames > limit + 1:
        raise _too_long(frames / rate)
    try:  # never more frames than the limit, whatever the header said
        data, rate = soundfile.read(str(path), frames=limit + 1, dtype="float32", always_2d=True)
    except Exception as exc:
        raise InputError(f"{name} could not be read as audio ({one_line(exc, 200)})") from None
    return data, int(rate)


def _as_samples(array, sampling_rate: int | None) -> tuple[np.ndarray, int]:
    """An array -> ``[frames, channels]`` float32 and its rate (default 16 kHz)."""
    if isinstance(array, Tensor):
        array = array.detach().cpu().numpy()
    try:
        data = np.asarray(array)
    except Exception as exc:
        raise InputError(
            f"audio must be a path or an array of samples ({one_line(exc, 120)})"
        ) from None
    if data.dtype.kind not in "fiu" or data.dtype.kind == "b":
        raise InputError(f"audio samples must be numbers, got an array of {data.dtype}")
    if data.dtype.kind in "iu":  # integer PCM: scale to [-1, 1]
        info = np.iinfo(data.dtype)
        data = (data.astype(np.float64) - (info.max + 1 + info.min) / 2) / (
            (info.max - info.min + 1) / 2
        )
    if data.ndim == 1:
        data = data[:, None]
    elif data.ndim == 2:
        if data.shape[0] < data.shape[1]:  # [channels, frames] -> [frames, channels]
            data = data.T
    else:
        raise InputError(
            f"audio must be [samples] or [samples, channels], got shape {list(data.shape)}"
        )
    rate = SAMPLING_RATE if sampling_rate is None else sampling_rate
    if not isinstance(rate, (int, np.integer)) or isinstance(rate, bool) or rate <= 0:
        raise InputError(f"sampling_rate must be a positive whole number of Hz, got {rate!r}")
    if data.shape[1] > MAX_CHANNELS:
        raise InputError(f"audio has {data.shape[1]} channels; at most {MAX_CHANNELS} are mixed")
    if data.shape[0] > MAX_SECONDS * rate + 1:
        raise _too_long(data.shape[0] / rate)
    return data.astype(np.float32, copy=False), int(rate)


def load_audio(path_or_array, sampling_rate: int | None = None) -> np.ndarray:
    """A clip as 16 kHz mono float32 samples.

    Args:
        path_or_array: a file soundfile reads (WAV, FLAC, OGG, ...), or samples: ``[N]`` or
            ``[N, channels]`` floats in [-1, 1] (integer PCM is scaled), a numpy array, a
            tensor or a list.
        sampling_rate: the array's rate in Hz (default 16 kHz); not used for a file.
    Returns:
        ``[N]`` float32 at :data:`SAMPLING_RATE`, N <= 30 s worth.
    Raises:
        InputError: one line: not audio, empty, NaN/inf samples, longer than 30 s, a header
            claiming more than the file holds.
    """
    if isinstance(path_or_array, (str, os.PathLike)):
        path = Path(path_or_array).expanduser()
        if sampling_rate is not None:
            raise InputError("sampling_rate is for arrays; a file says its own rate")
        data, rate = _read_file(path)
    else:
        data, rate = _as_samples(path_or_array, sampling_rate)
    if data.shape[0] == 0:
        raise InputError("the clip is empty: it holds no samples")
    if not np.isfinite(data).all():
        raise InputError("the clip holds NaN or infinite samples")
    if data.shape[0] > MAX_SECONDS * rate + 1:
        raise _too_long(data.shape[0] / rate)
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if rate != SAMPLING_RATE:
        try:
            import soxr
        except ImportError:
            raise InputError(f"resampling {rate} Hz audio needs soxr: {SPEECH_EXTRA}") from None
        mono = soxr.resample(mono, rate, SAMPLING_RATE)
    return np.ascontiguousarray(mono, dtype=np.float32)


@functools.lru_cache(maxsize=4)
def _extractor(n_mels: int):
    try:
        from transformers import WhisperFeatureExtractor
    except ImportError:
        raise InputError(
            "computing log-mel features needs transformers: pip install 'attnviz[hf]'"
        ) from None
    return WhisperFeatureExtractor(feature_size=n_mels, sampling_rate=SAMPLING_RATE)


def log_mel(audio, n_mels: int = 80, sampling_rate: int | None = None) -> Tensor:
    """Whisper's log-mel features of a clip, padded to 30 s (transformers'
    ``WhisperFeatureExtractor``, the features Whisper was trained on).

    Args:
        audio: a path or samples, as :func:`load_audio` takes them.
        n_mels: mel bins (the model's ``config.n_mels``: 80, or 128 for large-v3).
    Returns:
        ``[n_mels, 3000]`` float32.
    """
    samples = load_audio(audio, sampling_rate)
    features = _extractor(n_mels)(
        samples, sampling_rate=SAMPLING_RATE, return_tensors="np"
    ).input_features[0]
    return torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))


def feature_frames(n_samples: int) -> int:
    """Log-mel frames that hold audio for a clip of ``n_samples`` 16 kHz samples (the rest of
    the 3,000 are padding): what word timestamps align over."""
    return n_samples * FEATURE_FRAMES_PER_SECOND // SAMPLING_RATE
