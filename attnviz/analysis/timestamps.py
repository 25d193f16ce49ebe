"""Word timestamps from cross-attention, as Whisper finds them.

A few cross-attention heads of a Whisper model follow the audio closely (the folder's
``alignment_heads``). Their scores over a teacher-forced pass of the transcript are turned into
a token x frame matrix, exactly as Whisper and CTranslate2 do it:

1. keep the frames that hold audio (``num_frames // 2``: the front-end halves the frame rate),
2. softmax over those frames, per head,
3. standardise each frame's column over the tokens (mean 0, std 1; no epsilon),
4. a median filter of width 7 along the frames (mirrored at the edges),
5. the mean over the heads;

then dynamic time warping finds the monotonic token -> frame path that maximises the matrix,
and words are grouped from tokens (a piece that starts with a space or is punctuation starts a
word; punctuation is then attached to its neighbour) with the times where the path reaches
each word's first token. Frames are 20 ms apart.

The scores are the ones the model's forward pass computed (``trace.scores("cross", layer)``:
``q·kᵀ/√Dh`` before the mask and softmax): the picture behind a word's time is the attention
the model used.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

#: Audio frames per second after the front-end (16 kHz, hop 160, stride 2).
FRAMES_PER_SECOND = 50
#: Whisper's median filter width along the frames.
MEDIAN_WIDTH = 7
#: Punctuation that joins the next word / the previous word (Whisper's and faster-whisper's).
PREPEND_PUNCTUATION = "\"'“¿([{-"
APPEND_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END = ".。!！?？"


@dataclass
class Word:
    """One word of a transcript with its time in the audio (seconds) and the mean probability
    the model gave its tokens."""

    text: str
    start: float
    end: float
    probability: float
    tokens: list[int] = field(default_factory=list)


def median_filter(x: np.ndarray, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """A median filter of odd ``width`` along the last axis, the edges mirrored without
    repeating the edge value (``np.pad(mode="reflect")``), as CTranslate2 and Whisper filter.

    Args:
        x: ``[..., F]``.
    Returns:
        ``[..., F]`` float32; ``x`` itself when ``F`` is not longer than ``width // 2``.
    """
    x = np.asarray(x, dtype=np.float32)
    half = width // 2
    if x.shape[-1] <= half:
        return x
    pad = [(0, 0)] * (x.ndim - 1) + [(half, half)]
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, pad, mode="reflect"), width, -1)
    return np.median(windows, axis=-1).astype(np.float32)


def alignment_matrix(
    scores: np.ndarray, num_frames: int, width: int = MEDIAN_WIDTH
) -> np.ndarray:
    """Alignment heads' raw scores -> the token x frame matrix DTW reads.

    Args:
        scores: ``[H, Tt, Tk]`` cross-attention scores before softmax of the chosen heads, over
            a teacher-forced pass (Tk: the encoder's frames, 1500 for 30 s).
        num_frames: feature frames holding audio (100 per second, before the front-end halves
            them); the rest is padding and is left out.
    Returns:
        ``[Tt, F]`` float32 with ``F = min(num_frames // 2, Tk)``.
    """
    scores = np.asarray(scores, dtype=np.float32)
    frames = max(1, min(int(num_frames) // 2, scores.shape[-1]))
    x = scores[..., :frames]
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    x = x / x.sum(axis=-1, keepdims=True)  # softmax over the audio frames, per head and token
    mean = x.mean(axis=-2, keepdims=True)
    std = x.std(axis=-2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = (x - mean) / std  # standardise over the tokens, as Whisper (no epsilon)
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return median_filter(x, width).mean(axis=0)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The monotonic path through ``cost`` (``[N, M]``) of least total cost, Whisper's way
    (diagonal, then down, then right on ties).

    Returns:
        ``(rows, cols)``: int arrays of one length, the path from (0, 0) to (N-1, M-1).
    """
    cost = np.asarray(cost, dtype=np.float64)
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    trace = np.zeros((n + 1, m + 1), dtype=np.int8)
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
            if c0 < c1 and c0 < c2:
                best, move = c0, 0
            elif c1 < c0 and c1 < c2:
                best, move = c1, 1
            else:
                best, move = c2, 2
            total[i, j] = cost[i - 1, j - 1] + best
            trace[i, j] = move
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = trace[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    rows, cols = np.array(path[::-1]).T
    return rows, cols


def split_words(
    tokens: Sequence[int], decode: Callable[[list[int]], str], first_special: int
) -> tuple[list[str], list[list[int]]]:
    """Group tokens into words as Whisper does for space-separated languages: tokens are joined
    until they decode to whole characters; a piece that starts with a space, is punctuation or
    is a special token (id ``>= first_special``) starts a new word.

    Returns:
        ``(words, word_tokens)``, words with their leading space.
    """
    full = decode(list(tokens))
    pieces, piece_tokens, current, offset = [], [], [], 0
    for token in tokens:
        current.append(int(token))
        text = decode(current)
        bad = text.find("\ufffd")
        if bad < 0 or (offset + bad < len(full) and full[offset + bad] == "\ufffd"):
            pieces.append(text)
            piece_tokens.append(current)
            current = []
            offset += len(text)
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for piece, toks in zip(pieces, piece_tokens, strict=True):
        starts_word = (
            toks[0] >= first_special or piece.startswith(" ") or piece.strip() in string.punctuation
        )
        if starts_word or not words:
            words.append(piece)
            word_tokens.append(list(toks))
        else:
            words[-1] += piece
            word_tokens[-1].extend(toks)
    return words, word_tokens


def merge_punctuation(words: list[Word]) -> list[Word]:
    """Attach opening punctuation to the next word and closing punctuation to the previous one
    (Whisper's ``merge_punctuations``); words left empty are dropped."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        prev, nxt = words[i], words[j]
        if prev.text.startswith(" ") and prev.text.strip() in PREPEND_PUNCTUATION:
            nxt.text = prev.text + nxt.text
            nxt.tokens = prev.tokens + nxt.tokens
            prev.text, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        prev, nxt = words[i], words[j]
        if not prev.text.endswith(" ") and nxt.text in APPEND_PUNCTUATION:
            prev.text = prev.text + nxt.text
            prev.tokens = prev.tokens + nxt.tokens
            nxt.text, nxt.tokens = "", []
        else:
            i = j
        j += 1
    return [w for w in words if w.text]


def words_from_path(
    rows: np.ndarray,
    cols: np.ndarray,
    text_tokens: Sequence[int],
    token_probs: Sequence[float],
    decode: Callable[[list[int]], str],
    eot_id: int,
) -> list[Word]:
    """The DTW path over ``text_tokens + [eot]`` -> words with start and end times, grouped,
    clamped and punctuated as faster-whisper does for one segment.

    Args:
        rows / cols: the path (token index, frame index), from :func:`dtw`.
        text_tokens: the transcript's ids (no specials).
        token_probs: the model's probability of each text token.
    """
    words, word_tokens = split_words([*text_tokens, eot_id], decode, eot_id)
    if len(word_tokens) <= 1:
        return []
    bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(rows), (1, 0), constant_values=1).astype(bool)
    jump_times = cols[jumps] / FRAMES_PER_SECOND
    starts, ends = jump_times[bounds[:-1]], jump_times[bounds[1:]]
    probs = np.asarray(token_probs, dtype=np.float64)
    found = [
        Word(text, float(s), float(e), float(probs[a:b].mean()) if b > a else 0.0, list(toks))
        for text, toks, s, e, a, b in zip(
            words, word_tokens, starts, ends, bounds[:-1], bounds[1:], strict=False
        )
    ]
    durations = np.array([w.end - w.start for w in found])
    durations = durations[durations.nonzero()]
    if len(durations):
        longest = min(0.7, float(np.median(durations))) * 2
        for i in range(1, len(found)):
            if found[i].end - found[i].start > longest:
                if found[i].text in SENTENCE_END:
                    found[i].end = found[i].start + longest
                elif found[i - 1].text in SENTENCE_END:
                    found[i].start = found[i].end - longest
    for w in found:
        w.start, w.end = round(w.start, 2), round(w.end, 2)
    return merge_punctuation(found)
