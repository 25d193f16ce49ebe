"""One input, fully inspected, and written out as JSON, NPZ or one offline HTML page.

:func:`inspect_text` greedy-decodes an input step by step and keeps everything the views need:
tokens, the full attention trace of the decode (the attention the model used at each step),
the next-token distribution of every step, and head statistics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..checkpoint import Checkpoint
from ..decoding import GreedyStepper
from ..devices import as_numpy
from ..record import Trace
from ..tokenizer import Encoding
from .stats import HeadStats, head_stats, punctuation_ids


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

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by name: ``{kind}.{layer}.weights`` ``[H, Tq, Tk]``, ``.mask``, ``probs``."""
        out = {"probs": self.probs, "out_ids": np.asarray(self.out_ids)}
        for kind, layer in self.trace.keys():
            out[f"{kind}.{layer}.weights"] = self.trace.numpy(kind, layer, "weights")[0]
            out[f"{kind}.{layer}.mask"] = self.trace.numpy(kind, layer, "mask")[0, 0].astype(bool)
        return out

    def to_dict(self) -> dict:
        """JSON-ready: tokens, output, weights and masks as nested lists, top-5 per step."""
        top = []
        for row in self.probs:
            idx = np.argsort(row)[::-1][:5]
            top.append([{"token": self.vocab[i], "prob": round(float(row[i]), 6)} for i in idx])
        return {
            "checkpoint": self.checkpoint,
            "text": self.text,
            "output": self.output,
            "src_tokens": self.src_tokens,
            "unknown": self.unknown,
            "out_tokens": self.out_tokens,
            "tgt_tokens": self.tgt_tokens,
            "top_next_tokens": top,
            "attention": {
                name: np.round(value, 6).tolist() if value.dtype != bool else value.tolist()
                for name, value in self.arrays().items()
                if name not in ("probs", "out_ids")
            },
            "head_stats": [s.to_dict() for s in self.stats],
        }


def inspect_text(ckpt: Checkpoint, text: str, max_len: int | None = None) -> Inspection:
    """Greedy-decode ``text`` step by step and collect what the views show."""
    enc = ckpt.encode_source(text)
    stepper = ckpt.stepper(text, max_len)  # the checkpoint's generation rules
    stepper.run()
    return from_stepper(ckpt, text, enc, stepper)


def key_stats(ckpt: Checkpoint, trace, src_ids, tgt_ids, src_pad=None, tgt_pad=None) -> list:
    """:func:`head_stats` with the checkpoint's end, start and punctuation ids, so the shares
    on those keys (and sinks) are measured. ``src_ids``/``tgt_ids``: ``[B, Ts]``/``[B, Tt]``
    key ids (the decoder's inputs, start token first)."""
    cfg = ckpt.config
    punct = sorted(set(punctuation_ids(ckpt.src_tokenizer.tokens))
                   | set(punctuation_ids(ckpt.tgt_tokenizer.tokens)))  # fmt: skip
    return head_stats(trace, src_pad, tgt_pad, np.asarray(src_ids), np.asarray(tgt_ids),
                      eos_id=cfg.eos_id, bos_id=cfg.bos_id, punct_ids=punct)  # fmt: skip


def from_stepper(
    ckpt: Checkpoint, text: str, enc: Encoding, stepper: GreedyStepper, upto: int | None = None
) -> Inspection:
    """An :class:`Inspection` of the first ``upto`` steps (default all) a stepper has taken."""
    steps = stepper.steps[:upto]
    trace = stepper.trace(upto=len(steps))
    tok = ckpt.tgt_tokenizer
    ids = [s.token for s in steps]
    out_tokens = [tok.token(i) for i in ids]
    return Inspection(
        checkpoint=str(ckpt.path),
        text=text,
        output=tok.decode(ids),
        src_tokens=list(enc.pieces),
        unknown=list(enc.unknown),
        out_ids=ids,
        out_tokens=out_tokens,
        tgt_tokens=[tok.token(ckpt.config.bos_id), *out_tokens[:-1]],
        trace=trace,
        probs=np.stack([as_numpy(s.probs) for s in steps]),
        vocab=list(tok.tokens),
        stats=key_stats(ckpt, trace, [enc.ids], [[ckpt.config.bos_id, *ids[:-1]]]),
    )


def write_json(inspection: Inspection, path: str | Path) -> Path:
    """:meth:`Inspection.to_dict` as strict JSON (see :func:`dumps`)."""
    path = Path(path)
    path.write_text(dumps(inspection.to_dict()) + "\n")
    return path


def write_npz(inspection: Inspection, path: str | Path) -> Path:
    """Arrays plus token lists (as string arrays) in one ``.npz`` (no pickled objects)."""
    path = Path(path)
    if path.suffix != ".npz":  # numpy would add it; say the name it really writes
        path = path.with_name(path.name + ".npz")
    arrays = inspection.arrays()
    for name in ("src_tokens", "out_tokens", "tgt_tokens", "vocab"):
        arrays[name] = np.asarray(getattr(inspection, name), dtype=str)
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
