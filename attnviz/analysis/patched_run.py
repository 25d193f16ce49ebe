"""One cell of an activation-patching grid (:mod:`.patching`) run again on its own and
recorded, so the patched run can be opened like any other: its next tokens beside the clean and
corrupted runs', and its attention (the trace). Shape legend: T positions, H heads, Tq query
positions, Dh head width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import Edit, record
from .patching import (
    DIRECTIONS,
    WHATS,
    PatchHeads,
    PatchStream,
    PatchWeights,
    check_same_length,
    layout,
    recorded,
)
from .why import Exportable, Prepared, checkpoint_of, label, prepare, token_id


@dataclass
class PatchedRun(Exportable):
    """One cell of a patching grid run again on its own, recorded: what the model predicts
    with that one activation patched, and the attention it used (``trace``).

    Attributes:
        cell: the cell's labels, one per grid axis.
        top_ids, top_tokens, probs: the patched run's top next tokens and probabilities.
        clean_probs, corrupted_probs: those tokens' probabilities in the two plain runs.
        metric: the cell's normalised metric (0 = corrupted, 1 = clean).
        trace: the patched run's :class:`~attnviz.core.record.Trace` (weights, streams).
        base: the trace of the run it patched, unpatched (the corrupted run when
            denoising, the clean one when noising): its attention beside the patched run's.
    """

    what: str
    direction: str
    cell: list[str]
    top_ids: list[int]
    top_tokens: list[str]
    probs: list[float]
    clean_probs: list[float]
    corrupted_probs: list[float]
    metric: float
    trace: object = field(default=None, repr=False)
    base: object = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {"what": self.what, "direction": self.direction, "cell": self.cell,
                "top_ids": self.top_ids, "top_tokens": self.top_tokens, "probs": self.probs,
                "clean_probs": self.clean_probs, "corrupted_probs": self.corrupted_probs,
                "metric": self.metric}  # fmt: skip


def patched_run(
    ckpt: Checkpoint | str,
    clean,
    corrupted,
    answer: int | str,
    wrong: int | str,
    what: str,
    cell: Sequence[int],
    *,
    step: int | None = None,
    direction: str = "denoising",
    k: int = 10,
) -> PatchedRun:
    """Run one cell of :func:`patch`'s grid again, recorded, to open it like any other run.

    Args:
        cell: the cell's indices into the grid: ``(layer, position)`` for ``"resid"``,
            ``(module, head)`` for ``"heads"``/``"patterns"``, ``(module, head, position)``
            for ``"head_positions"`` (modules as :func:`attnviz.analysis.patching.modules` lists them).
        k: how many top next tokens to report.
    Returns:
        :class:`PatchedRun` with the run's trace (attention weights and streams).
    Raises:
        InputError: as :func:`patch`, and a cell outside the grid.
    """
    if what not in WHATS or direction not in DIRECTIONS:
        raise InputError(f"what must be one of {', '.join(WHATS)} and direction one of "
                         f"{', '.join(DIRECTIONS)}")  # fmt: skip
    ckpt = checkpoint_of(ckpt)
    c, bad = prepare(ckpt, clean, step), prepare(ckpt, corrupted, step)
    check_same_length(ckpt, c, bad)
    a, b = token_id(ckpt, answer, "answer"), token_id(ckpt, wrong, "wrong")
    c_logits, c_trace = recorded(ckpt, c)
    k_logits, k_trace = recorded(ckpt, bad)
    run, src = (bad, c_trace) if direction == "denoising" else (c, k_trace)
    base = k_trace if direction == "denoising" else c_trace
    axes, labels, sites = layout(ckpt, c, what)
    cell = [int(i) for i in cell]
    sizes = [len(sites)] + [len(labels[ax]) for ax in axes[1:]]
    if len(cell) != len(axes) or not all(0 <= i < n for i, n in zip(cell, sizes, strict=True)):
        raise InputError(f"a {what} cell is {len(axes)} indices within {sizes} "
                         f"({', '.join(axes)}), got {cell}")  # fmt: skip
    edit = _cell_edit(ckpt, run, src, what, sites[cell[0]], cell[1:])
    with torch.no_grad(), record(ckpt.model, [edit], capture=("weights",), streams=True) as tr:
        logits = run.last(run.tensor(ckpt.device))  # [1, V]
    probs = logits[0].float().softmax(-1)
    top_p, top_i = probs.topk(max(1, min(int(k), probs.shape[-1])))
    ids = top_i.tolist()

    def p_of(lg: Tensor) -> list[float]:
        return lg[0].float().softmax(-1)[ids].tolist()

    def d(lg: Tensor) -> float:
        return float(lg[0, a] - lg[0, b])

    d_clean, d_corr = d(c_logits), d(k_logits)
    metric = (d(logits) - d_corr) / (d_clean - d_corr) if d_clean != d_corr else float("nan")
    names = [labels[axes[0]][cell[0]]] + [labels[ax][i] for ax, i in zip(axes[1:], cell[1:],
                                                                          strict=True)]  # fmt: skip
    return PatchedRun(what, direction, names, ids, [label(ckpt, i) for i in ids],
                      top_p.tolist(), p_of(c_logits), p_of(k_logits), metric, tr, base)  # fmt: skip


def _cell_edit(ckpt, run: Prepared, src, what: str, site, rest: list[int]) -> Edit:
    """The one edit that patches a single cell of the grid (``rest``: its indices after the
    layer or module)."""
    dev, h = ckpt.device, ckpt.config.n_heads
    if what == "resid":
        where = torch.zeros(1, len(run.ids), dtype=torch.bool, device=dev)
        where[0, rest[0]] = True
        return PatchStream(run.stack, site, "resid_pre", src.stream(run.stack, site, "resid_pre"),
                           where)  # fmt: skip
    kind, layer = site
    if what == "patterns":
        where = torch.zeros(1, h, dtype=torch.bool, device=dev)
        where[0, rest[0]] = True
        return PatchWeights(kind, layer, src.weights(kind, layer), where)
    z = src.head_output(kind, layer)  # [1, H, Tq, Dh]
    where = torch.zeros(1, h, z.shape[2], dtype=torch.bool, device=dev)
    if what == "heads":
        where[0, rest[0]] = True
    else:
        if rest[1] >= z.shape[2]:
            raise InputError(f"{kind} {layer} has {z.shape[2]} query positions")
        where[0, rest[0], rest[1]] = True
    return PatchHeads(kind, layer, z, where)
