"""One input, fully inspected, and written out as JSON, NPZ or one offline HTML page.

:func:`inspect_text` greedy-decodes an input step by step and keeps everything the views need:
tokens, the full attention trace of the decode (the attention the model used at each step),
the next-token distribution of every step, and head statistics.

Exports hold subword pieces by default; ``unit="words"`` pools every attention matrix into
words with :func:`~attnviz.analysis.words.pool_words` (the page's pieces | words switch).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.record import Trace
from ..data.tokenizer import Encoding
from ..decode.greedy import GreedyStepper
from .masked_lm import fillers_text, read_pass, special_token
from .stats import HeadStats, head_stats, punctuation_ids
from .words import pool_words, word_index, word_labels

#: What an export's attention is over: subword pieces (as the model saw them) or words.
UNITS = ("pieces", "words")
#: (query side, key side) of each attention kind: ``"src"`` or ``"tgt"`` tokens.
SIDES = {"encoder_self": ("src", "src"), "decoder_self": ("tgt", "tgt"), "cross": ("tgt", "src")}


def check_unit(unit: str) -> str:
    """``unit`` if it is ``"pieces"`` or ``"words"``; else an :class:`InputError`."""
    if unit not in UNITS:
        raise InputError(f"export pieces or words, not {unit!r}")
    return unit


@dataclass
class Inspection:
    """A decoded input and its attention.

    Attributes:
        src_tokens: input pieces ``[Ts]``; ``unknown``: pieces read as UNK.
        out_tokens: output tokens as strings ``[T]`` (EOS included when produced).
        tgt_tokens: decoder inputs ``[T]``: BOS + ``out_tokens[:-1]`` (the rows of
            decoder self-attention and cross-attention).
        trace: full attention of the decode, batch 1 (see ``GreedyStepper.trace``).
        probs: ``[T, V]`` next-token distribution at every step.
        stats: head statistics of this decode.
        src_kind / tgt_kind: the tokenizers' kinds (``"char"``, ``"word"``, a subword kind),
            which say where words start (:func:`~attnviz.analysis.words.word_index`).
        positions: an encoder-only model's read (:func:`inspect_read`): the source position
            of each output token and ``probs`` row (its mask tokens, else every token); then
            ``tgt_tokens`` is empty (no decoder) and ``trace`` the one pass over the sentence.
    """

    checkpoint: str
    text: str
    output: str
    src_tokens: list[str]
    unknown: list[str]
    out_ids: list[int]
    out_tokens: list[str]
    tgt_tokens: list[str]
    trace: Trace
    probs: np.ndarray
    vocab: list[str]
    stats: list[HeadStats]
    src_kind: str | None = None
    tgt_kind: str | None = None
    positions: list[int] | None = None

    def word_index(self) -> dict[str, list[int]]:
        """The word of each piece: ``{"src": [Ts], "tgt": [T]}`` (``tgt``: of ``tgt_tokens``,
        the rows of decoder self-attention and cross-attention)."""
        return {
            "src": word_index(self.src_tokens, self.src_kind),
            "tgt": word_index(self.tgt_tokens, self.tgt_kind),
        }

    def words(self) -> dict[str, list[str]]:
        """Each word's text: ``{"src": [Ws], "tgt": [Wt]}`` (its pieces joined, markers dropped)."""
        idx = self.word_index()
        return {
            "src": word_labels(self.src_tokens, idx["src"]),
            "tgt": word_labels(self.tgt_tokens, idx["tgt"]),
        }

    def word_attention(
        self, kind: str, layer: int, index: dict[str, list[int]] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One layer's attention pooled into words: ``(weights [H, Wq, Wk], mask [Wq, Wk])``
        (:func:`~attnviz.analysis.words.pool_words` of the recorded weights and mask).
        ``index``: :meth:`word_index`, when the caller has it already."""
        idx = index or self.word_index()
        q, k = SIDES[kind]
        w = self.trace.numpy(kind, layer, "weights")[0]
        m = self.trace.numpy(kind, layer, "mask")[0, 0].astype(bool)
        return pool_words(w, m, idx[q], idx[k])

    def arrays(self, unit: str = "pieces") -> dict[str, np.ndarray]:
        """Every array by name: ``{kind}.{layer}.weights`` ``[H, Tq, Tk]``, ``.mask`` ``[Tq, Tk]``
        (True = blocked), ``probs`` ``[T, V]``, ``out_ids`` ``[T]``.

        ``unit="words"``: each weights/mask pair pooled into words (``[H, Wq, Wk]``,
        ``[Wq, Wk]``) by :func:`~attnviz.analysis.words.pool_words`: summed over a word's key
        pieces, averaged over its query pieces, a word cell blocked only where all its piece
        cells are. ``probs`` and ``out_ids`` stay per decoding step.
        """
        check_unit(unit)
        idx = self.word_index() if unit == "words" else None
        out = {"probs": self.probs, "out_ids": np.asarray(self.out_ids)}
        for kind, layer in self.trace.keys():
            if idx is not None:
                w, m = self.word_attention(kind, layer, idx)
            else:
                w = self.trace.numpy(kind, layer, "weights")[0]
                m = self.trace.numpy(kind, layer, "mask")[0, 0].astype(bool)
            out[f"{kind}.{layer}.weights"] = w
            out[f"{kind}.{layer}.mask"] = m
        return out

    def to_dict(self, unit: str = "pieces") -> dict:
        """JSON-ready: tokens, output, weights and masks as nested lists, top-5 per step.

        ``unit="words"``: the attention pooled into words (see :meth:`arrays`), with
        ``"unit": "words"``, the word labels (``src_words``, ``tgt_words``) and the word of
        each piece (``src_word_index``, ``tgt_word_index``) to map a word back to its pieces.
        The pieces export (the default) is unchanged.
        """
        top = []
        for row in self.probs:
            idx = np.argsort(row)[::-1][:5]
            top.append([{"token": self.vocab[i], "prob": round(float(row[i]), 6)} for i in idx])
        head = {}
        if check_unit(unit) == "words":
            index, words = self.word_index(), self.words()
            head = {
                "unit": "words",
                "src_words": words["src"],
                "tgt_words": words["tgt"],
                "src_word_index": index["src"],
                "tgt_word_index": index["tgt"],
            }
        return {
            "checkpoint": self.checkpoint,
            "text": self.text,
            "output": self.output,
            "src_tokens": self.src_tokens,
            "unknown": self.unknown,
            "out_tokens": self.out_tokens,
            "tgt_tokens": self.tgt_tokens,
            **({} if self.positions is None else {"positions": self.positions}),
            **head,
            "top_next_tokens": top,
            "attention": {
                name: np.round(value, 6).tolist() if value.dtype != bool else value.tolist()
                for name, value in self.arrays(unit).items()
                if name not in ("probs", "out_ids")
            },
            "head_stats": [s.to_dict() for s in self.stats],
        }


def inspect_text(ckpt: Checkpoint, text: str, max_len: int | None = None) -> Inspection:
    """Greedy-decode ``text`` step by step and collect what the views show (an encoder-only
    model: its one pass over ``text``, :func:`inspect_read`)."""
    if ckpt.config.encoder_only:
        return inspect_read(ckpt, text)
    stepper = ckpt.stepper(text, max_len)  # the checkpoint's generation rules
    enc = frames_encoding(stepper) if ckpt.is_audio else ckpt.encode_source(text)
    stepper.run()
    return from_stepper(ckpt, text, enc, stepper)


def frames_encoding(stepper: GreedyStepper) -> Encoding:
    """A speech model's source as an :class:`Encoding`: one piece per encoder frame, named by
    its time (``"0.02s"``, 20 ms apart), ids -1 (a frame is no token)."""
    from .timestamps import FRAMES_PER_SECOND

    n = int(stepper.encoder_trace.weights("encoder_self", 0).shape[-1])  # [1, H, Ts, Ts]
    return Encoding([-1] * n, [f"{i / FRAMES_PER_SECOND:.2f}s" for i in range(n)], [])


def inspect_read(ckpt: Checkpoint, text: str) -> Inspection:
    """An encoder-only model's one pass over ``text`` as an :class:`Inspection`: the output is
    its top filler at each mask token (a sentence without one: its prediction of each token),
    ``probs`` the distribution there, ``positions`` where each was read."""
    read = read_pass(ckpt, text)
    tok, enc = ckpt.tgt_tokenizer, read.enc
    ids = read.argmax()
    return Inspection(
        checkpoint=str(ckpt.path), text=text, output=fillers_text(ckpt, ids, read.scored),
        src_tokens=list(enc.pieces), unknown=list(enc.unknown), out_ids=ids,
        out_tokens=[tok.token(i) for i in ids], tgt_tokens=[], trace=read.trace,
        probs=as_numpy(read.probs[read.scored]), vocab=list(tok.tokens),
        stats=key_stats(ckpt, read.trace, [enc.ids], [enc.ids]),
        src_kind=ckpt.src_tokenizer.kind, tgt_kind=tok.kind, positions=list(read.scored),
    )  # fmt: skip


def key_stats(ckpt: Checkpoint, trace, src_ids, tgt_ids, src_pad=None, tgt_pad=None) -> list:
    """:func:`head_stats` with the checkpoint's end, start and punctuation ids, so the shares
    on those keys (and sinks) are measured. ``src_ids``/``tgt_ids``: ``[B, Ts]``/``[B, Tt]``
    key ids (the decoder's inputs, start token first). An encoder-only model's end is its
    separator ([SEP]); its start ([CLS]) is the first token, a sink key of every model."""
    cfg = ckpt.config
    src_tokens = ckpt.src_tokenizer.tokens if ckpt.src_tokenizer is not None else []  # audio
    punct = sorted(set(punctuation_ids(src_tokens))
                   | set(punctuation_ids(ckpt.tgt_tokenizer.tokens)))  # fmt: skip
    eos, bos = cfg.eos_id, cfg.bos_id
    if cfg.encoder_only:  # BERT's [CLS] ... [SEP], RoBERTa's <s> ... </s>
        eos = (special_token(ckpt, "sep") or (None, None))[1]
        bos = int(np.asarray(src_ids)[0, 0])  # what every sentence read starts with
    return head_stats(trace, src_pad, tgt_pad, np.asarray(src_ids), np.asarray(tgt_ids),
                      eos_id=eos, bos_id=bos, punct_ids=punct)  # fmt: skip


def from_stepper(
    ckpt: Checkpoint, text: str, enc: Encoding, stepper: GreedyStepper, upto: int | None = None
) -> Inspection:
    """An :class:`Inspection` of the first ``upto`` steps (default all) a stepper has taken."""
    steps = stepper.steps[:upto]
    trace = stepper.trace(upto=len(steps))
    tok = ckpt.tgt_tokenizer
    ids = [s.token for s in steps]
    out_tokens = [tok.token(i) for i in ids]
    if ckpt.config.decoder_only:  # one sequence: the prompt, then the output read
        keys = [*enc.ids, *ids[:-1]]
        tgt_tokens = [*enc.pieces, *out_tokens[:-1]]
    else:  # the decoder reads the start token, then the output
        keys = [ckpt.config.bos_id, *ids[:-1]]
        tgt_tokens = [tok.token(ckpt.config.bos_id), *out_tokens[:-1]]
    return Inspection(
        checkpoint=str(ckpt.path),
        text=text,
        output=tok.decode(ids),
        src_tokens=list(enc.pieces),
        unknown=list(enc.unknown),
        out_ids=ids,
        out_tokens=out_tokens,
        tgt_tokens=tgt_tokens,
        trace=trace,
        probs=np.stack([as_numpy(s.probs) for s in steps]),
        vocab=list(tok.tokens),
        stats=key_stats(ckpt, trace, [enc.ids], [keys]),
        src_kind=ckpt.src_tokenizer.kind if ckpt.src_tokenizer is not None else "audio",
        tgt_kind=tok.kind,
    )


def write_json(inspection: Inspection, path: str | Path, unit: str = "pieces") -> Path:
    """:meth:`Inspection.to_dict` (pieces or words) as strict JSON (see :func:`dumps`)."""
    check_unit(unit)
    path = Path(path)
    path.write_text(dumps(inspection.to_dict(unit)) + "\n")
    return path


def write_npz(inspection: Inspection, path: str | Path, unit: str = "pieces") -> Path:
    """Arrays plus token lists (as string arrays) in one ``.npz`` (no pickled objects).

    ``unit="words"``: the attention pooled into words (:meth:`Inspection.arrays`), plus
    ``unit`` (``"words"``), ``src_words``/``tgt_words`` (labels) and
    ``src_word_index``/``tgt_word_index`` (``[Ts]``/``[T]``: the word of each piece).
    """
    check_unit(unit)
    path = Path(path)
    if path.suffix != ".npz":  # numpy would add it; say the name it really writes
        path = path.with_name(path.name + ".npz")
    arrays = inspection.arrays(unit)
    for name in ("src_tokens", "out_tokens", "tgt_tokens", "vocab"):
        arrays[name] = np.asarray(getattr(inspection, name), dtype=str)
    if inspection.positions is not None:
        arrays["positions"] = np.asarray(inspection.positions, dtype=np.int64)
    if unit == "words":
        index, words = inspection.word_index(), inspection.words()
        arrays["unit"] = np.asarray("words")
        for side in ("src", "tgt"):
            arrays[f"{side}_words"] = np.asarray(words[side], dtype=str)
            arrays[f"{side}_word_index"] = np.asarray(index[side], dtype=np.int64)
    np.savez_compressed(path, **arrays)
    return path


def json_default(value):
    """``json.dumps(default=...)`` for numpy scalars."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def json_ready(value):
    """``value`` with every NaN or infinite float (numpy scalars included) replaced by None.

    JSON has no NaN: Python's ``json`` would write a bare ``NaN`` that browsers and strict
    parsers reject. A statistic that is undefined (e.g. ``eos`` without key ids) is ``null``.
    """
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value, **kwargs) -> str:
    """Strict JSON text: non-finite floats become ``null``; never writes ``NaN``/``Infinity``."""
    return json.dumps(json_ready(value), allow_nan=False, default=json_default, **kwargs)
