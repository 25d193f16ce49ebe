"""Weights laid out for one-row products on the CPU: what a cached decoder step multiplies.

A cached step multiplies one row per sequence by every weight matrix, so it reads the whole
model from memory once per token, and its time is the time that read takes. On the CPU the
matrix-vector kernel behind ``F.linear(x, W)`` streams a ``W [out, in]`` stored row by row
(one dot product per output) markedly slower than the same values stored column by column
(``W.t()`` contiguous, one pass of axpy-like updates): on a 2-core x86 machine, one thread,
GPT-2's 50,257 x 768 output matrix takes 11.8 ms the first way and 6.1 ms the second, and its
48 layer matrices 25 ms against 20 ms. :func:`streamed` keeps a column-major copy of a weight
(the same values, so the same products up to the order of the float sums) for the fused step
(:mod:`attnviz.core.step`); the module path, training and saving never see it.

The copies cost memory: :func:`plan` picks the weights worth copying under a budget per
model (:data:`BUDGET` elements), the output matrix first. A copy is made once and kept while
its weight lives, and made again when the weight changes (its version counter, its storage,
its dtype or device).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import torch
from torch import Tensor

#: Most elements of column-major copies kept for one model (1 GiB of float32).
BUDGET = 2**28

_COPIES: dict[int, tuple[weakref.ref, tuple, Tensor]] = {}
_LOCK = threading.Lock()


def wanted(weight: Tensor) -> bool:
    """Whether a copy of ``weight`` can stand in for it now: on the CPU, outside autograd
    (a copy would cut the weight's gradient), and not an inference tensor (no version)."""
    return (
        weight.device.type == "cpu"
        and weight.dim() == 2
        and not torch.is_grad_enabled()
        and not weight.is_inference()
    )


def plan(weights: Sequence[Tensor], budget: int | None = None) -> set[int]:
    """The ``id`` of each weight to copy: in the order given, while the copies fit ``budget``
    elements (default :data:`BUDGET`; each weight once, however often it is listed: tied
    weights)."""
    budget = BUDGET if budget is None else budget
    chosen, used = set(), 0
    for w in weights:
        if id(w) in chosen or not wanted(w):
            continue
        if used + w.numel() > budget:
            continue
        chosen.add(id(w))
        used += w.numel()
    return chosen


def streamed(weight: Tensor) -> Tensor:
    """``weight [out, in]`` as a view of a column-major copy: equal values and shape, the
    strides of ``weight.t().contiguous().t()``. Made once per weight and version."""
    key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
    with _LOCK:
        hit = _COPIES.get(id(weight))
        if hit is not None and hit[0]() is weight and hit[1] == key:
            return hit[2]
    copy = weight.detach().t().contiguous().t()  # [out, in], strides (1, out)
    ident = id(weight)
    with _LOCK:
        _COPIES[ident] = (weakref.ref(weight, lambda _: _forget(ident)), key, copy)
    return copy


def _forget(ident: int) -> None:
    with _LOCK:
        _COPIES.pop(ident, None)


def held() -> int:
    """Elements held in copies now (for tests and the benchmark's note)."""
    with _LOCK:
        return sum(c.numel() for _, _, c in _COPIES.values())
