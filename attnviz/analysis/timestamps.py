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

from ..data.audio import FRAMES_PER_SECOND as FRAMES_PER_SECOND

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


def frame_softmax(scores: np.ndarray, num_frames: int) -> np.ndarray:
    """Raw cross-attention scores ``[..., Tk]`` -> a softmax over the frames that hold audio
    (``num_frames // 2`` of them: the front-end halves the 100 feature frames a second), in
    the scores' own float dtype: ``[..., F]``."""
    frames = max(1, min(int(num_frames) // 2, scores.shape[-1]))
    x = scores[..., :frames]
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return x / x.sum(axis=-1, keepdims=True)


def token_start_times(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Seconds at which a DTW path (:func:`dtw`) first reaches each token row: ``[N]``."""
    jumps = np.pad(np.diff(rows), (1, 0), constant_values=1).astype(bool)
    return cols[jumps] / FRAMES_PER_SECOND


def alignment_matrix(scores: np.ndarray, num_frames: int, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """Alignment heads' raw scores -> the token x frame matrix DTW reads.

    Args:
        scores: ``[H, Tt, Tk]`` cross-attention scores before softmax of the chosen heads, over
            a teacher-forced pass (Tk: the encoder's frames, 1500 for 30 s).
        num_frames: feature frames holding audio (100 per second, before the front-end halves
            them); the rest is padding and is left out.
    Returns:
        ``[Tt, F]`` float32 with ``F = min(num_frames // 2, Tk)``.
    """
    x = frame_softmax(np.asarray(scores, dtype=np.float32), num_frames)  # per head and token
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
    jump_times = token_start_times(rows, cols)
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


# -- on a checkpoint ---------------------------------------------------------------------------
@dataclass
class Alignment:
    """A transcript aligned to its audio through the alignment heads' cross-attention.

    Attributes:
        text_tokens: the transcript's ids (no specials).
        rows / cols: the DTW path, token index (``len(text_tokens)`` = the end token) and
            frame index (20 ms each).
        token_probs: the model's probability of each text token (softmax over text ids).
        matrix: ``[len(text_tokens) + 1, F]`` what DTW read (see :func:`alignment_matrix`).
        heads: the ``(layer, head)`` pairs used.
        words: the words with their times.
    """

    text_tokens: list[int]
    rows: np.ndarray
    cols: np.ndarray
    token_probs: np.ndarray
    matrix: np.ndarray
    heads: list[tuple[int, int]]
    words: list[Word]


def alignment_heads(ckpt) -> list[tuple[int, int]]:
    """The folder's published alignment heads (CTranslate2's ``config.json`` or a Hugging Face
    generation config's ``alignment_heads``), else every head of the last half of the decoder
    layers (Whisper's default)."""
    meta = ckpt.meta or {}
    for doc in (meta.get("ct2_config"), meta.get("generation_config")):
        heads = (doc or {}).get("alignment_heads")
        if heads:
            return [(int(layer), int(head)) for layer, head in heads]
    cfg = ckpt.config
    return [(layer, head) for layer in range(cfg.n_decoder_layers // 2, cfg.n_decoder_layers)
            for head in range(cfg.n_heads)]  # fmt: skip


def check_heads(ckpt, heads) -> list[tuple[int, int]]:
    """``(layer, head)`` pairs of this checkpoint's cross-attention, checked (one line each)."""
    from ..core.errors import InputError

    cfg = ckpt.config
    out = []
    for pair in heads:
        try:
            layer, head = (int(x) for x in pair)
        except (TypeError, ValueError):
            raise InputError(f"alignment heads are (layer, head) pairs, got {pair!r}") from None
        if not (0 <= layer < cfg.n_decoder_layers and 0 <= head < cfg.n_heads):
            raise InputError(
                f"no cross-attention head L{layer} H{head}: this model has "
                f"{cfg.n_decoder_layers} decoder layers of {cfg.n_heads} heads"
            )
        out.append((layer, head))
    if not out:
        raise InputError("give at least one (layer, head) pair")
    return out


@dataclass
class ForcedPass:
    """One teacher-forced pass of a transcript over a clip, as the alignment reads it.

    Attributes:
        text_tokens: the transcript's ids (no specials).
        scores: ``{layer: [H, len(text_tokens) + 1, Tk]}`` cross-attention scores before the
            softmax, query rows from ``<|notimestamps|>`` on (each predicts the next token).
        token_probs: ``[len(text_tokens)]`` the model's probability of each text token.
        num_frames: feature frames holding audio (100 per second).
        decode: the tokenizer's raw decode (pieces as they spell, specials kept).
        eot_id: the end id.
    """

    text_tokens: list[int]
    scores: dict[int, np.ndarray]
    token_probs: np.ndarray
    num_frames: int
    decode: Callable[[list[int]], str]
    eot_id: int


def forced_pass(
    ckpt, audio, text_tokens=None, sampling_rate: int | None = None, memory=None
) -> ForcedPass:
    """Run a speech checkpoint on ``audio`` teacher-forced on ``text_tokens`` (default: its own
    greedy transcript) with the recorder on, as Whisper aligns: the start tokens,
    ``<|notimestamps|>``, the text, the end.

    Args:
        memory: the encoder's output for this clip ``[1, Ts, D]`` when the caller holds it
            (the app's stepper does): the decoder reads it and the encoder is not run again
            (``text_tokens`` must then be given).

    Raises:
        InputError: not a speech model, no tokenizer, ids outside the text vocabulary, bad audio.
    """
    import torch

    from ..core.errors import InputError
    from ..core.record import record
    from ..data.audio import feature_frames, load_audio, log_mel

    if not getattr(ckpt, "is_audio", False):
        raise InputError("word timestamps are for speech models (Whisper)")
    decode = getattr(ckpt.tgt_tokenizer, "decode_raw", None)
    if decode is None:
        raise InputError("word timestamps need the folder's tokenizer to group tokens into words")
    cfg, rules = ckpt.config, ckpt.rules
    eot, no_ts = cfg.eos_id, getattr(rules, "no_timestamps_id", None)
    if no_ts is None:
        raise InputError("this speech model has no <|notimestamps|> token to align with")
    samples = load_audio(audio, sampling_rate)
    if memory is not None and text_tokens is None:
        raise InputError("give the transcript's tokens with the encoder's memory")
    if memory is None:
        features = log_mel(samples, cfg.n_mels)[None].to(ckpt.device)  # [1, n_mels, 3000]
    if text_tokens is None:
        out = ckpt.greedy(features)[0].tolist()
        text_tokens = [i for i in out if i < eot]  # the words: no prompt, timestamp or end
    text_tokens = [int(i) for i in text_tokens]
    if not text_tokens:
        raise InputError("there is no text to align: the transcript is empty")
    if any(not 0 <= i < eot for i in text_tokens):
        raise InputError(f"text tokens are ids below the end id {eot}")
    start = [cfg.bos_id, *(i for i in rules.prompt if i != no_ts)]
    tokens = [*start, no_ts, *text_tokens, eot]
    if len(tokens) > cfg.max_len:
        raise InputError(f"the transcript has {len(text_tokens)} tokens; too long to align")
    tgt = torch.tensor([tokens[:-1]], device=ckpt.device)  # [1, Tt] fed; the last predicts eot
    with torch.no_grad(), record(ckpt.model, capture=("scores",)) as trace:
        if memory is None:
            logits = ckpt.model(features, tgt)  # [1, Tt, V]
        else:  # the same decoder pass over the encoder output the caller kept
            logits = ckpt.model.decode(tgt, memory.to(ckpt.device))  # [1, Tt, V]
    offset = len(start)  # query rows from <|notimestamps|> on: each text token, then the end
    rows_of = slice(offset, offset + len(text_tokens) + 1)
    scores = {
        layer: trace.scores("cross", layer)[0, :, rows_of].float().cpu().numpy()
        for layer in range(cfg.n_decoder_layers)
    }  # each [H, Tt', Tk]
    text_logits = logits[0, offset : offset + len(text_tokens), :eot].float()
    probs = text_logits.softmax(-1).gather(-1, torch.tensor(text_tokens)[:, None]).squeeze(-1)
    num_frames = feature_frames(len(samples))
    return ForcedPass(text_tokens, scores, probs.cpu().numpy(), num_frames, decode, eot)


def align_pass(run: ForcedPass, heads: Sequence[tuple[int, int]]) -> Alignment:
    """DTW over the chosen heads of a :class:`ForcedPass` -> an :class:`Alignment`."""
    stacked = np.stack([run.scores[layer][head] for layer, head in heads])  # [H', Tt', Tk]
    matrix = alignment_matrix(stacked, run.num_frames)
    rows, cols = dtw(-matrix)
    words = words_from_path(rows, cols, run.text_tokens, run.token_probs, run.decode, run.eot_id)
    return Alignment(run.text_tokens, rows, cols, run.token_probs, matrix, list(heads), words)


def speech_alignment(
    ckpt, audio, text_tokens=None, heads=None, sampling_rate: int | None = None, memory=None
) -> Alignment:
    """Align a transcript to a clip with the model's own cross-attention scores.

    Args:
        ckpt: a speech checkpoint (Whisper) with a tokenizer.
        audio: a path or samples (see :func:`attnviz.data.audio.load_audio`).
        text_tokens: the transcript's ids (default: the model's greedy transcript).
        heads: ``(layer, head)`` pairs (default: :func:`alignment_heads`).
        memory: the clip's encoder output ``[1, Ts, D]`` when the caller holds it (see
            :func:`forced_pass`).
    Returns:
        an :class:`Alignment`; its path follows ``ctranslate2.models.Whisper.align``.
    Raises:
        InputError: not a speech model, no tokenizer, bad heads or bad audio.
    """
    heads = check_heads(ckpt, alignment_heads(ckpt) if heads is None else heads)
    return align_pass(forced_pass(ckpt, audio, text_tokens, sampling_rate, memory), heads)


def word_timestamps(ckpt, audio, heads=None, sampling_rate: int | None = None) -> list[Word]:
    """The words of the model's transcript of ``audio`` with their start and end (seconds)
    and probability, from the alignment heads' cross-attention (see :func:`speech_alignment`).

    Args:
        heads: ``(layer, head)`` pairs; None: the folder's ``alignment_heads``.
    """
    return speech_alignment(ckpt, audio, heads=heads, sampling_rate=sampling_rate).words
