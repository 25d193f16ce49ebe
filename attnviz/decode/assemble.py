"""A decoded sequence's full attention matrices, assembled from the records of its steps
(one query row each) and of its encoder pass or prompt."""

from __future__ import annotations

import math

import torch

from ..core.record import AttentionRecord, Trace

#: What the decoders keep per step (values and head outputs are not needed for display); a
#: local layer's sliding window too (None on other layers).
STEP_FIELDS = ("scores", "mask", "weights", "window")


def assemble_trace(encoder: Trace, steps: list[dict[tuple[str, int], AttentionRecord]]) -> Trace:
    """Full attention matrices of a decoded sequence from per-step records.

    Args:
        encoder: trace of the encoder pass (``"encoder_self"`` records, batch 1), or of a
            decoder-only model's prompt but its last token (``"decoder_self"``, P' rows).
        steps: one dict per decoding step of ``(kind, layer) -> record`` with ``Tq = 1``.
    Returns:
        A :class:`Trace` with batch 1 whose ``"decoder_self"`` matrices are ``[1, H, T, T]``
        (weights 0, mask True and scores NaN above the diagonal: those scores were never
        computed) and ``"cross"`` matrices ``[1, H, T, Ts]``, T = ``len(steps)`` (plus the
        prompt's P' rows for a decoder-only model: its rows come first).
    """
    trace = Trace()
    prompt = {}
    for kind, layer in encoder.keys():
        if kind == "encoder_self":
            trace._add(encoder.get(kind, layer))
        elif kind == "decoder_self":
            prompt[kind, layer] = encoder.get(kind, layer)
    if not steps:
        for rec in prompt.values():
            trace._add(rec)
        return trace
    t_total = len(steps) + (_query_rows(next(iter(prompt.values()))) if prompt else 0)
    for kind, layer in steps[0]:
        name = steps[0][kind, layer].name
        rows = [s[kind, layer] for s in steps]
        if (kind, layer) in prompt:
            rows = [prompt[kind, layer], *rows]
        rec = AttentionRecord(kind, layer, name)
        for f in STEP_FIELDS:
            parts = [getattr(r, f) for r in rows]
            if any(p is None for p in parts):  # not captured (GreedyStepper's capture)
                continue
            if kind == "decoder_self":  # row t has t + 1 keys: pad the future
                fill = {"scores": math.nan, "mask": True, "weights": 0.0, "window": False}[f]
                parts = [
                    torch.cat([p, p.new_full((*p.shape[:-1], t_total - p.shape[-1]), fill)], dim=-1)
                    for p in parts
                ]
            setattr(rec, f, torch.cat(parts, dim=2))  # [1, H|1, T, Tk]
        trace._add(rec)
    return trace


def _query_rows(rec: AttentionRecord) -> int:
    """Query rows Tq of a record, from whichever field was captured."""
    return next(getattr(rec, f).shape[2] for f in STEP_FIELDS if getattr(rec, f) is not None)


def step_records(trace: Trace) -> dict[tuple[str, int], AttentionRecord]:
    return {key: trace.get(*key) for key in trace.keys()}
