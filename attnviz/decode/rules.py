"""What constrains beam search: transformers' logits processors in its order
(:class:`Constraints`), and a checkpoint's generation config read into
:func:`~attnviz.decode.beam.beam_search` options (:func:`generation_settings`, :func:`beam_options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..core.errors import InputError
from .greedy import LogitRules


@dataclass(frozen=True)
class Constraints:
    """The logits processors of transformers' beam search, in its order."""

    rules: LogitRules | None
    ngram: int
    bad_words: list[tuple[int, ...]]
    repetition_penalty: float
    eos_id: int | None

    def apply(self, logp: Tensor, seqs: Tensor, step: int, limit: int) -> Tensor:
        """Constrained ``[k, V]`` log-probs for producing token ``step`` of at most ``limit``;
        ``seqs`` ``[k, 1 + step]``: each hypothesis so far, start token first."""
        if self.repetition_penalty != 1.0:
            seen = logp.gather(1, seqs)
            seen = torch.where(
                seen < 0, seen * self.repetition_penalty, seen / self.repetition_penalty
            )
            logp = logp.scatter(1, seqs, seen)
        rows = seqs.tolist() if self.ngram or self.bad_words else []
        banned: list[set[int]] = [set() for _ in rows]
        if self.ngram:
            n = self.ngram
            for row, out in zip(rows, banned, strict=True):
                if len(row) >= n:
                    prefix = row[len(row) + 1 - n :]
                    for i in range(len(row) - n + 1):
                        if row[i : i + n - 1] == prefix:
                            out.add(row[i + n - 1])
        for word in self.bad_words:
            for row, out in zip(rows, banned, strict=True):
                if len(word) - 1 <= len(row) and (
                    len(word) == 1 or row[1 - len(word) :] == list(word[:-1])
                ):
                    out.add(word[-1])
        if any(banned):
            logp = logp.clone()
            for i, out in enumerate(banned):
                ids = [t for t in out if t < logp.shape[-1]]
                logp[i, ids] = float("-inf")
        return logp if self.rules is None else self.rules.apply(logp, step, limit, seqs[:, 1:])


#: generation settings beam search does not follow, with the values that change nothing
_UNSUPPORTED: dict[str, tuple] = {
    "do_sample": (None, False),
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0, 0.0),
    "constraints": (None, []),
    "force_words_ids": (None, []),
    "encoder_no_repeat_ngram_size": (None, 0),
    "encoder_repetition_penalty": (None, 1, 1.0),
    "exponential_decay_length_penalty": (None,),
    "sequence_bias": (None, {}, []),
    "renormalize_logits": (None, False),
    "remove_invalid_values": (None, False),
    "guidance_scale": (None, 1, 1.0),
    "low_memory": (None, False),
    "max_time": (None,),
    "stop_strings": (None, [], ""),
    "watermarking_config": (None,),
}


def generation_settings(ckpt: Any) -> dict[str, Any]:
    """A checkpoint's generation settings, as its folder was read once on load (a Hugging Face
    folder's ``generation_config.json``, or ``config.json``'s generation keys where it has none:
    :func:`attnviz.interop.hf.read_generation_config`); empty for attnviz checkpoints."""
    meta = getattr(ckpt, "meta", {}) or {}
    return {k: v for k, v in (meta.get("generation_config") or {}).items() if v is not None}


def beam_options(gen: dict[str, Any], **given: Any) -> dict[str, Any]:
    """Keyword arguments of :func:`beam_search` from generation settings ``gen``; ``given``
    (not None) wins. Raises :class:`InputError` on a setting beam search does not follow."""
    for key, neutral in _UNSUPPORTED.items():
        if key in gen and gen[key] not in neutral:
            raise InputError(
                f"the generation config sets {key}={gen[key]!r}, which attnviz's beam search does "
                "not follow; decoding without it would give other text than transformers"
            )
    bad = gen.get("bad_words_ids") or []
    if not isinstance(bad, list) or not all(isinstance(w, list) for w in bad):
        raise InputError(f"bad_words_ids must be a list of id lists, got {bad!r}")
    options = {
        "beam_size": gen.get("num_beams", 1),
        "length_penalty": gen.get("length_penalty", 1.0),
        "early_stopping": gen.get("early_stopping", False),
        "no_repeat_ngram_size": gen.get("no_repeat_ngram_size") or 0,
        "repetition_penalty": gen.get("repetition_penalty", 1.0),
        "bad_words": [w for w in bad if len(w) > 1],  # single ids are in the rules already
    }
    options.update({k: v for k, v in given.items() if v is not None})
    for key, kind in (("beam_size", int), ("no_repeat_ngram_size", int),
                      ("length_penalty", (int, float)), ("repetition_penalty", (int, float))):  # fmt: skip
        value = options[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InputError(f"{key} must be a number, got {value!r}")
    return options


@dataclass(frozen=True)
class WhisperRules:
    """Whisper's generation rules on next-token logits, as CTranslate2 and transformers'
    Whisper ``generate`` apply them; greedy decoding, the stepper and beam search share them.

    Decoding starts from ``<|startoftranscript|>`` (the model's ``bos_id``); the rest of the
    prompt (``<|notimestamps|>``, a language or task token) is forced first, then text is
    produced. Steps count from the start id, so the first text step is ``len(prompt)``.

    Attributes:
        prompt: ids forced after the start id (``(no_timestamps_id,)`` for plain text; empty
            for text with timestamps).
        banned: ids never produced (``suppress_tokens`` / the folder's ``suppress_ids``).
        begin_banned: ids not produced as the first text token (``suppress_blank``: the
            space and the end id).
        timestamps: apply the timestamp rules: ``<|notimestamps|>`` never produced; the first
            text token a timestamp of at most ``max_initial_timestamp``; timestamps in pairs
            (except just before the end), never decreasing; a timestamp wherever the
            timestamps' total probability beats every single text token.
        eos_id, no_timestamps_id: ``<|endoftext|>``, ``<|notimestamps|>``; timestamp ids run
            from ``no_timestamps_id + 1`` to the last id.
        max_initial_timestamp: the latest first timestamp, in timestamp steps (50 = 1 s).
    """

    prompt: tuple[int, ...]
    banned: tuple[int, ...]
    begin_banned: tuple[int, ...]
    timestamps: bool
    eos_id: int
    no_timestamps_id: int
    max_initial_timestamp: int = 50

    def apply(self, logits: Tensor, step: int, limit: int, seqs: Tensor | None = None) -> Tensor:
        """Constrained copy of ``logits`` ``[B, V]`` for token ``step`` (0 = the first after
        the start id); ``seqs`` ``[B, step]``: the tokens so far (needed with timestamps)."""
        logits = logits.clone()
        n = len(self.prompt)
        if step < n:  # the prompt: its token is the only one allowed
            keep = logits[:, self.prompt[step]].clone()
            logits.fill_(float("-inf"))
            logits[:, self.prompt[step]] = keep
            return logits
        vocab = logits.shape[-1]
        blocked = torch.zeros_like(logits, dtype=torch.bool)  # [B, V]
        blocked[:, [i for i in self.banned if 0 <= i < vocab]] = True
        text = step - n  # index of this text token
        if text == 0:
            blocked[:, [i for i in self.begin_banned if 0 <= i < vocab]] = True
        if self.timestamps:
            if seqs is None:
                raise ValueError("timestamp rules need the tokens produced so far")
            self._timestamp_rules(logits, blocked, seqs[:, n:], text)
        return logits.masked_fill(blocked, float("-inf"))

    def _timestamp_rules(self, logits: Tensor, blocked: Tensor, seqs: Tensor, text: int) -> None:
        """Mark what the timestamp rules block in ``blocked`` ``[B, V]``; ``seqs`` ``[B, text]``:
        the text tokens so far (CTranslate2's ``ApplyTimestampRules``, row by row)."""
        begin = self.no_timestamps_id + 1
        blocked[:, self.no_timestamps_id] = True
        if text == 0:
            blocked[:, :begin] = True
            blocked[:, begin + self.max_initial_timestamp + 1 :] = True
            return
        check = []
        for b, row in enumerate(seqs.tolist()):
            last = row[-1]
            if last >= begin:
                penultimate = row[-2] if text > 1 else last
                if penultimate >= begin:  # a pair is closed: text (or the end) comes next
                    blocked[b, begin:] = True
                else:  # an open timestamp: another timestamp or the end
                    blocked[b, : self.eos_id] = True
                    check.append(b)
            else:
                check.append(b)
            stamps = [t for t in row if t >= begin]
            if stamps:  # never back in time
                blocked[b, begin : stamps[-1]] = True
        if check:
            logp = logits.masked_fill(blocked, float("-inf")).float().log_softmax(-1)
            for b in check:
                stamp = torch.logsumexp(logp[b, begin:], dim=-1)
                if stamp > logp[b, :begin].max():
                    blocked[b, :begin] = True
