"""Activation patching between a clean and a corrupted input of the same length.

The metric is the logit difference ``logit(answer) - logit(wrong)`` at the predicting
position, normalised so that 0 is the corrupted run's and 1 the clean run's. Denoising (the
default) runs the corrupted input and puts one clean activation back; noising runs the clean
input and puts one corrupted activation in. What is patched (``what``):

- ``"resid"``: the residual stream entering each layer, at each position ``[L, T]``;
- ``"heads"``: each head's output (before the output projection) at every position ``[M, H]``
  (M: attention modules, in forward order: ``encoder_self``, ``decoder_self``, ``cross``);
- ``"head_positions"``: each head's output at each query position ``[M, H, T]``;
- ``"patterns"``: each head's attention weights ``[M, H]``.

Every patched run is the real model under an edit of the recorder (:class:`PatchStream`,
:class:`PatchHeads`, :class:`PatchWeights`), many patches a batch. Attribution patching
(``method="attribution"`` or ``"both"``) estimates the same grids from one backward pass:
``(source activation - run activation) · ∂metric/∂activation`` (Nanda 2023), with its
agreement with exact patching reported when both are computed.

Shape legend: N patched runs in a batch, L layers, T positions, H heads, Dh head width.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import Edit, record
from .why import (
    Exportable,
    Prepared,
    checkpoint_of,
    label,
    n_layers,
    prepare,
    progress_bar,
    token_id,
)

WHATS = ("resid", "heads", "head_positions", "patterns")
METHODS = ("exact", "attribution", "both")
DIRECTIONS = ("denoising", "noising")


@dataclass(frozen=True, eq=False)
class PatchStream(Edit):
    """Put ``values`` ``[1, T, D]`` into the stream at ``point`` of one layer where ``where``
    ``[N, T]`` is True (row n of the batch patches its own positions)."""

    stack: str
    layer: int
    point: str
    values: Tensor
    where: Tensor

    def matches(self, kind: str, layer: int) -> bool:
        return False  # not an attention edit: attention keeps its fused path

    def edit_stream(self, stack: str, layer: int, point: str, x: Tensor) -> Tensor:
        if (stack, layer, point) != (self.stack, self.layer, self.point):
            return x
        return torch.where(self.where[..., None], self.values.to(x.dtype), x)  # [N, T, D]


@dataclass(frozen=True, eq=False)
class _OneModule(Edit):
    """An edit of one attention module (``kind``, ``layer``) putting ``values`` in place
    where ``where`` is True."""

    kind: str
    layer: int
    values: Tensor
    where: Tensor

    def matches(self, kind: str, layer: int) -> bool:
        return (kind, layer) == (self.kind, self.layer)


@dataclass(frozen=True, eq=False)
class PatchHeads(_OneModule):
    """Put ``values`` ``[1, H, Tq, Dh]`` into one module's per-head outputs (before the heads
    are merged) where ``where`` ``[N, H, Tq]`` is True."""

    def edit_heads(self, head_output: Tensor) -> Tensor:
        return torch.where(self.where[..., None], self.values.to(head_output.dtype), head_output)


@dataclass(frozen=True, eq=False)
class PatchWeights(_OneModule):
    """Put ``values`` ``[1, H, Tq, Tk]`` (attention weights) into one module where ``where``
    ``[N, H]`` is True, after the softmax, before the weights meet the values."""

    def edit_weights(self, weights: Tensor) -> Tensor:
        where = self.where[..., None, None]  # [N, H, 1, 1]
        return torch.where(where, self.values.to(weights.dtype), weights)


@dataclass(frozen=True, eq=False)
class _GradStart(Edit):
    """Make the stream entering each stack's first layer a leaf that requires grad, so one
    backward pass reaches every activation after it (attribution patching)."""

    def matches(self, kind: str, layer: int) -> bool:
        return False

    def edit_stream(self, stack: str, layer: int, point: str, x: Tensor) -> Tensor:
        if layer == 0 and point == "resid_pre":
            return x.detach().requires_grad_(True)
        return x


@dataclass
class Patching(Exportable):
    """A patching grid with its axes.

    Attributes:
        grid: the normalised metric of each patched run (0 = corrupted, 1 = clean);
            NaN where a module has fewer query positions than the axis.
        axes: the names of ``grid``'s axes, e.g. ``("layer", "position")``.
        labels: each axis's labels.
        clean_diff, corrupted_diff: the logit difference of the clean and corrupted runs.
        approx: the attribution-patching estimate of ``grid`` (same shape), or None.
        agreement: ``{"pearson": r, "max_abs_diff": d}`` of ``approx`` vs exact, or {}.
    """

    what: str
    direction: str
    answer: str
    wrong: str
    grid: np.ndarray | None
    axes: tuple[str, ...]
    labels: dict[str, list[str]]
    clean_diff: float
    corrupted_diff: float
    approx: np.ndarray | None = None
    agreement: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        def lst(a):
            return None if a is None else a.tolist()

        return {
            "what": self.what, "direction": self.direction, "answer": self.answer,
            "wrong": self.wrong, "axes": list(self.axes), "labels": self.labels,
            "grid": lst(self.grid), "approx": lst(self.approx), "agreement": self.agreement,
            "clean_diff": self.clean_diff, "corrupted_diff": self.corrupted_diff,
        }  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f"labels_{k}": np.array(v, dtype=str) for k, v in self.labels.items()}
        out["axes"] = np.array(self.axes, dtype=str)
        out["diffs"] = np.array([self.clean_diff, self.corrupted_diff])
        for name in ("grid", "approx"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def text(self) -> str:
        grid = self.grid if self.grid is not None else self.approx
        lines = [f"patching {self.what} ({self.direction}): logit({self.answer!r}) - "
                 f"logit({self.wrong!r}) clean {self.clean_diff:.3f}, corrupted "
                 f"{self.corrupted_diff:.3f}; 0 = corrupted, 1 = clean"]  # fmt: skip
        if grid.ndim == 2:
            rows, cols = self.labels[self.axes[0]], self.labels[self.axes[1]]
            lines.append(" " * 16 + " ".join(f"{c[:7]:>7}" for c in cols))
            for r, row in zip(rows, grid, strict=True):
                lines.append(f"{r[:15]:>15} " + " ".join(f"{v:7.3f}" for v in row))
        else:
            flat = np.nan_to_num(np.abs(grid), nan=-1).ravel().argsort()[::-1][:10]
            for i in flat:
                idx = np.unravel_index(i, grid.shape)
                names = [self.labels[a][j] for a, j in zip(self.axes, idx, strict=True)]
                lines.append(f"  {' / '.join(names):<40} {grid[idx]:+.3f}")
        if self.agreement:
            lines.append("attribution patching vs exact: " + ", ".join(
                f"{k} {v:.3f}" for k, v in self.agreement.items()))  # fmt: skip
        return "\n".join(lines)


def modules(ckpt: Checkpoint) -> list[tuple[str, int]]:
    """Every attention module as ``(kind, layer)``, in forward order."""
    return [(m.kind, m.layer) for m in ckpt.model.attention_modules().values()]


def _tokens_of(prep: Prepared, ckpt: Checkpoint) -> tuple[list[int], list[str]]:
    if prep.source is None:
        return prep.ids, prep.tokens
    tok = ckpt.src_tokenizer
    return prep.source, [tok.token(i) if tok else f"#{i}" for i in prep.source]


def check_same_length(ckpt: Checkpoint, clean: Prepared, corrupted: Prepared) -> None:
    (a, ta), (b, tb) = _tokens_of(clean, ckpt), _tokens_of(corrupted, ckpt)
    if len(a) != len(b) or len(clean.ids) != len(corrupted.ids):
        raise InputError(
            f"clean and corrupted must have as many tokens: clean has {len(a)} "
            f"({' | '.join(ta)}), corrupted {len(b)} ({' | '.join(tb)})"
        )


@torch.no_grad()
def _run(ckpt: Checkpoint, prep: Prepared, edits: Sequence[Edit] = (), n: int = 1) -> Tensor:
    """Logits ``[N, V]`` at the explained position of ``n`` copies of ``prep`` under ``edits``."""
    x = prep.tensor(ckpt.device).expand(n, -1)
    with record(ckpt.model, edits, capture=None):
        return prep.last(x)


def recorded(ckpt: Checkpoint, prep: Prepared):
    with (
        torch.no_grad(),
        record(ckpt.model, capture=("head_output", "weights"), streams=True) as tr,
    ):
        logits = prep.last(prep.tensor(ckpt.device))
    return logits, tr


def patch(
    ckpt: Checkpoint | str,
    clean,
    corrupted,
    answer: int | str,
    wrong: int | str,
    what: str = "resid",
    *,
    step: int | None = None,
    direction: str = "denoising",
    method: str = "exact",
    batch: int = 32,
    progress: bool | None = None,
    budget_s: float | None = None,
) -> Patching:
    """Activation patching of ``what`` between ``clean`` and ``corrupted`` (see the module
    docstring); ``step`` as :func:`attnviz.analysis.why.prepare`.

    Args:
        budget_s: the longest exact patching may take: after its first batch of patched runs
            the whole grid's time is projected, and a grid that would take longer is refused
            (:class:`TooLong`) before the rest runs. None: no limit.
    Returns:
        :class:`Patching`: ``grid`` (exact) and/or ``approx`` (attribution) with their axes.
    Raises:
        InputError: inputs of different token counts (both tokenizations shown), an answer
            or wrong token that is not one token, runs with the same logit difference.
        TooLong: the exact grid would take more than ``budget_s``.
    """
    for name, value, allowed in (("what", what, WHATS), ("method", method, METHODS),
                                 ("direction", direction, DIRECTIONS)):  # fmt: skip
        if value not in allowed:
            raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    ckpt = checkpoint_of(ckpt)
    c, k = prepare(ckpt, clean, step), prepare(ckpt, corrupted, step)
    check_same_length(ckpt, c, k)
    a, b = token_id(ckpt, answer, "answer"), token_id(ckpt, wrong, "wrong")

    def diff(logits: Tensor) -> Tensor:  # logits [N, V] at the explained position
        return (logits[:, a] - logits[:, b]).double()  # [N]

    c_logits, c_trace = recorded(ckpt, c)
    k_logits, k_trace = recorded(ckpt, k)
    d_clean, d_corr = float(diff(c_logits)[0]), float(diff(k_logits)[0])
    if abs(d_clean - d_corr) < 1e-6:
        raise InputError(
            f"clean and corrupted give the same logit difference ({d_clean:.4f}): nothing to "
            "restore; choose inputs (or tokens) the model answers differently"
        )
    run, src = (k, c_trace) if direction == "denoising" else (c, k_trace)
    run_trace = k_trace if direction == "denoising" else c_trace

    def norm(d: Tensor | np.ndarray) -> np.ndarray:
        return (np.asarray(d, dtype=np.float64) - d_corr) / (d_clean - d_corr)

    axes, labels, sites = layout(ckpt, c, what)
    grid = approx = None
    if method in ("exact", "both"):
        clock = _Clock(_n_batches(ckpt, src, what, sites, len(run.ids), batch), budget_s, what)
        grid = _exact(ckpt, run, src, what, sites, diff, batch, progress, clock)
        grid = norm(grid)
    agreement = {}
    if method in ("attribution", "both"):
        approx = _attribution(ckpt, run, src, run_trace, what, sites, diff) / (d_clean - d_corr)
        approx = approx + norm(d_corr if direction == "denoising" else d_clean)
        if grid is not None:
            ok = ~np.isnan(grid)
            x, y = grid[ok], approx[ok]
            r = float(np.corrcoef(x, y)[0, 1]) if x.size > 1 and x.std() and y.std() else 1.0
            agreement = {"pearson": r, "max_abs_diff": float(np.abs(x - y).max())}
    return Patching(
        what, direction, label(ckpt, a), label(ckpt, b), grid, axes, labels,
        d_clean, d_corr, approx, agreement,
    )  # fmt: skip


def layout(ckpt: Checkpoint, prep: Prepared, what: str):
    """``(axes, labels, sites)``: sites are the layers (resid) or attention modules."""
    h = ckpt.config.n_heads
    heads = [str(i) for i in range(h)]
    if what == "resid":
        layers = list(range(n_layers(ckpt, prep.stack)))
        return ("layer", "position"), {"layer": [str(i) for i in layers],
                                       "position": prep.tokens}, layers  # fmt: skip
    mods = modules(ckpt)
    names = [f"{kind} {layer}" for kind, layer in mods]
    if what == "head_positions":
        return ("module", "head", "position"), {"module": names, "head": heads,
                                                "position": prep.tokens}, mods  # fmt: skip
    return ("module", "head"), {"module": names, "head": heads}, mods


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


class TooLong(InputError):
    """An exact patching grid that would take longer than the time it was given."""

    def __init__(self, message: str, seconds: float):
        super().__init__(message)
        self.seconds = seconds


def _n_batches(ckpt, src, what: str, sites, t: int, batch: int) -> int:
    """How many batched runs the exact grid takes."""
    if what == "resid":
        return len(sites) * -(-t // batch)
    if what in ("heads", "patterns"):
        return len(sites)
    h = ckpt.config.n_heads
    return sum(-(-(h * src.head_output(*site).shape[2]) // batch) for site in sites)


class _Clock:
    """Times the first batched run and refuses a grid whose projected time is over budget."""

    def __init__(self, n: int, budget_s: float | None, what: str):
        self.n, self.budget, self.what = n, budget_s, what
        self.start = time.perf_counter()
        self.done = 0

    def tick(self) -> None:
        self.done += 1
        if self.done != 1 or self.budget is None:
            return
        took = time.perf_counter() - self.start
        total = took * self.n
        if total > self.budget:
            raise TooLong(
                f"patching {self.what} takes {self.n} batched runs, about "
                f"{total:.{0 if total >= 10 else 1}f} s here "
                f"(over {self.budget:g} s): use attribution patching for a first look (one "
                "backward pass), a coarser grid (heads, resid) or a shorter input",
                total,
            )


def _exact(ckpt, run: Prepared, src, what: str, sites, diff: Callable, batch: int, progress,
           clock: _Clock):  # fmt: skip
    """The metric (not normalised) of every patched run, shaped like the grid."""
    dev, h, t = ckpt.device, ckpt.config.n_heads, len(run.ids)
    out = []

    def diff_run(edit, n: int) -> Tensor:
        d = diff(_run(ckpt, run, [edit], n))
        clock.tick()
        return d

    for site in progress_bar(sites, f"patching {what}", progress):
        if what == "resid":
            values = src.stream(run.stack, site, "resid_pre")  # [1, T, D]
            eye = torch.eye(t, dtype=torch.bool, device=dev)  # row n patches position n
            row = []
            for s in _chunks(t, batch):
                e = PatchStream(run.stack, site, "resid_pre", values, eye[s])
                row.append(diff_run(e, s.stop - s.start))
            out.append(torch.cat(row).cpu().numpy())
            continue
        kind, layer = site
        if what == "patterns":
            e = PatchWeights(
                kind, layer, src.weights(kind, layer), torch.eye(h, dtype=torch.bool, device=dev)
            )
            out.append(diff_run(e, h).cpu().numpy())
            continue
        z = src.head_output(kind, layer)  # [1, H, Tq, Dh]
        tq = z.shape[2]
        if what == "heads":
            where = torch.eye(h, dtype=torch.bool, device=dev)[:, :, None].expand(h, h, tq)
            out.append(diff_run(PatchHeads(kind, layer, z, where), h).cpu().numpy())
            continue
        where = torch.eye(h * tq, dtype=torch.bool, device=dev).view(h * tq, h, tq)
        row = [diff_run(PatchHeads(kind, layer, z, where[s]), s.stop - s.start)
               for s in _chunks(h * tq, batch)]  # fmt: skip
        out.append(torch.cat(row).cpu().numpy().reshape(h, tq))
    return _stack(out)


def _stack(rows: list[np.ndarray]) -> np.ndarray:
    width = max(r.shape[-1] for r in rows)
    padded = []
    for r in rows:
        pad = [(0, 0)] * (r.ndim - 1) + [(0, width - r.shape[-1])]
        padded.append(np.pad(r, pad, constant_values=np.nan))
    return np.stack(padded)


def _attribution(ckpt, run: Prepared, src, run_trace, what: str, sites, diff) -> np.ndarray:
    """``(source - run activation) · ∂metric/∂activation`` for every site, shaped like the
    grid (not normalised, not offset)."""
    capture = ("head_output", "weights")
    with torch.enable_grad(), record(ckpt.model, [_GradStart()], capture=capture,
                                     streams=True, detach=False) as tr:  # fmt: skip
        metric = diff(run.last(run.tensor(ckpt.device))).sum()
        if what == "resid":
            acts = [tr.stream(run.stack, s, "resid_pre") for s in sites]
            olds = [run_trace.stream(run.stack, s, "resid_pre") for s in sites]
            news = [src.stream(run.stack, s, "resid_pre") for s in sites]
        elif what == "patterns":
            acts = [tr.weights(*s) for s in sites]
            olds = [run_trace.weights(*s) for s in sites]
            news = [src.weights(*s) for s in sites]
        else:
            acts = [tr.head_output(*s) for s in sites]
            olds = [run_trace.head_output(*s) for s in sites]
            news = [src.head_output(*s) for s in sites]
        grads = torch.autograd.grad(metric, acts, allow_unused=True)
    rows = []
    for g, old, new in zip(grads, olds, news, strict=True):
        g = torch.zeros_like(old) if g is None else g
        prod = ((new - old).double() * g.double())[0]  # resid [T, D]; heads [H, Tq, Dh]; ...
        if what == "resid":
            rows.append(prod.sum(-1).cpu().numpy())  # [T]
        elif what in ("patterns", "heads"):
            rows.append(prod.sum((-1, -2)).cpu().numpy())  # [H]
        else:
            rows.append(prod.sum(-1).cpu().numpy())  # [H, Tq]
    return _stack(rows)
