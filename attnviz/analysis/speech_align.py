"""Which heads know the time? Every cross-attention head of a speech model scored against
words whose true times are known.

Input: a JSONL file, one clip per line: ``{"audio": "clip.wav", "words": [["hello", 0.25,
0.61], ["world", 0.86, 1.20]]}`` (paths relative to the file). Each clip is run once,
teacher-forced on its words, with the recorder on; then each head alone aligns the words
(Whisper's alignment: :mod:`attnviz.analysis.timestamps`) and is scored by

- **start error** / **end error**: mean absolute difference (seconds) between the times its
  alignment gives each word and the true ones;
- **peak in word**: the share of words whose tokens' mean attention peaks at a frame inside
  the word's true span.

The folder's published alignment heads are marked, and so is the set's own score as Whisper
uses it (all published heads together).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import InputError, shorten
from .timestamps import (
    FRAMES_PER_SECOND,
    align_pass,
    alignment_heads,
    forced_pass,
    frame_softmax,
    split_words,
    token_start_times,
)

#: Largest word-times file read, and most clips in it.
MAX_FILE_BYTES = 16 << 20
MAX_CLIPS = 10_000


@dataclass(frozen=True)
class TimedClip:
    """A clip and its words with their true ``(word, start, end)`` in seconds."""

    audio: str
    words: tuple[tuple[str, float, float], ...]


@dataclass
class HeadTiming:
    """Every head's scores (``[L, H]`` arrays) on a set of timed clips.

    Attributes:
        start_error / end_error: mean absolute error of word starts / ends, seconds.
        peak_in_word: share of words whose attention peak falls inside the word.
        published: the folder's alignment heads (``(layer, head)``).
        published_error: the start error of Whisper's alignment with all published heads.
        n_words: words scored.
    """

    start_error: np.ndarray
    end_error: np.ndarray
    peak_in_word: np.ndarray
    published: list[tuple[int, int]]
    published_error: float
    n_words: int

    @property
    def best(self) -> tuple[int, int]:
        """The head with the smallest start error."""
        layer, head = np.unravel_index(int(np.argmin(self.start_error)), self.start_error.shape)
        return int(layer), int(head)

    def text(self) -> str:
        """A table of every head, best first, published heads marked with ``*``."""
        rows = sorted(np.ndindex(self.start_error.shape), key=lambda lh: self.start_error[lh])
        lines = [
            f"{self.n_words} words; * = the folder's alignment heads "
            f"(together: start error {self.published_error:.3f} s)",
            "head      start err  end err  peak in word",
        ]
        for layer, head in rows:
            mark = "*" if (layer, head) in self.published else " "
            lines.append(
                f"L{layer} H{head} {mark}  {self.start_error[layer, head]:7.3f} s"
                f"  {self.end_error[layer, head]:6.3f} s  {self.peak_in_word[layer, head]:10.0%}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "start_error": self.start_error.tolist(),
            "end_error": self.end_error.tolist(),
            "peak_in_word": self.peak_in_word.tolist(),
            "published": [list(h) for h in self.published],
            "published_error": self.published_error,
            "n_words": self.n_words,
            "best": list(self.best),
        }


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(
            f"{where}: times are finite numbers of seconds, got {shorten(repr(value))}"
        )
    return float(value)


def read_word_times(path: str | Path) -> list[TimedClip]:
    """A JSONL file of ``{"audio": path, "words": [[word, start, end], ...]}`` lines.

    Raises:
        InputError: not a regular file, too large, bad JSON or fields (``file:line``).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"{path} is not a file of word times")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InputError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MB")
    clips = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            doc = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise InputError(f"{where}: not a JSON object") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("audio"), str):
            raise InputError(f'{where}: expected {{"audio": path, "words": [[word, start, end]]}}')
        words = doc.get("words")
        if not isinstance(words, list) or not words:
            raise InputError(f"{where}: words must be a non-empty list of [word, start, end]")
        timed = []
        for w in words:
            if not (isinstance(w, list) and len(w) == 3 and isinstance(w[0], str) and w[0].strip()):
                raise InputError(
                    f"{where}: each word is [word, start, end], got {shorten(repr(w))}"
                )
            start, end = _number(w[1], where), _number(w[2], where)
            if not 0 <= start <= end:
                raise InputError(f"{where}: {w[0]!r} must have 0 <= start <= end")
            timed.append((w[0].strip(), start, end))
        audio = Path(doc["audio"]).expanduser()
        clips.append(TimedClip(str(audio if audio.is_absolute() else path.parent / audio),
                               tuple(timed)))  # fmt: skip
        if len(clips) > MAX_CLIPS:
            raise InputError(f"{path} holds more than {MAX_CLIPS} clips")
    if not clips:
        raise InputError(f"{path} holds no clips")
    return clips


def _tokens(ckpt, words: Sequence[str]) -> list[int]:
    encode = getattr(ckpt.tgt_tokenizer, "encode_plain", None)
    if encode is None:
        raise InputError("scoring heads needs the folder's tokenizer to read the words")
    return encode(" " + " ".join(words))


def score_heads(ckpt, clips: Sequence[TimedClip]) -> HeadTiming:
    """Score every cross-attention head of a speech checkpoint on ``clips``.

    Returns:
        a :class:`HeadTiming`. Raises :class:`InputError` for a text model or bad clips.
    """
    cfg = ckpt.config
    shape = (cfg.n_decoder_layers, cfg.n_heads)
    start_err, end_err, peaks = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    published = alignment_heads(ckpt)
    published_err, n_words = 0.0, 0
    for clip in clips:
        gold = clip.words
        run = forced_pass(ckpt, clip.audio, _tokens(ckpt, [w for w, _, _ in gold]))
        words, groups = split_words([*run.text_tokens, run.eot_id], run.decode, run.eot_id)
        if len(groups) - 1 != len(gold):
            raise InputError(
                f"{clip.audio}: the tokenizer reads {len(groups) - 1} words where the file "
                f"lists {len(gold)}; give one word per entry"
            )
        bounds = np.cumsum([0, *(len(g) for g in groups[:-1])])
        true_start = np.array([s for _, s, _ in gold])
        true_end = np.array([e for _, _, e in gold])
        for layer, head in np.ndindex(shape):
            found = align_pass(run, [(layer, head)])
            got = _word_times(found, bounds)
            start_err[layer, head] += np.abs(got[:, 0] - true_start).sum()
            end_err[layer, head] += np.abs(got[:, 1] - true_end).sum()
            peaks[layer, head] += _peaks_inside(run, layer, head, bounds, true_start, true_end)
        together = _word_times(align_pass(run, published), bounds)
        published_err += np.abs(together[:, 0] - true_start).sum()
        n_words += len(gold)
    return HeadTiming(start_err / n_words, end_err / n_words, peaks / n_words, published,
                      published_err / n_words, n_words)  # fmt: skip


def _word_times(found, bounds: np.ndarray) -> np.ndarray:
    """``[W, 2]`` start and end of each word (token groups by ``bounds``) from a DTW path."""
    times = token_start_times(found.rows, found.cols)
    return np.stack([times[bounds[:-1]], times[bounds[1:]]], axis=1)


def _peaks_inside(run, layer, head, bounds, true_start, true_end) -> float:
    """How many words' mean attention (over their tokens, softmax over the audio frames)
    peaks inside their true span."""
    x = frame_softmax(run.scores[layer][head].astype(np.float64), run.num_frames)
    inside = 0
    for k in range(len(true_start)):
        peak = int(np.argmax(x[bounds[k] : bounds[k + 1]].mean(0))) / FRAMES_PER_SECOND
        inside += int(true_start[k] <= peak <= true_end[k])
    return float(inside)
