"""Weights laid out for one-row products on the CPU: what a cached decoder step multiplies.

A cached step multiplies one row per sequence by every weight matrix, so it reads the whole
model from memory once per token, and its time is the time that read takes. On the CPU the
float32 matrix-vector kernel behind ``F.linear(x, W)`` streams a ``W [out, in]`` stored row by
row (one dot product per output) markedly slower than the same values stored column by column
(``W.t()`` contiguous): on a 2-core x86 machine, one thread, GPT-2's 50,257 x 768 output matrix
takes 11.8 ms the first way and 6.1 ms the second, and its 48 layer matrices 25 ms against
20 ms. (Not so for float16 or bfloat16, whose kernels favour the row layout: only float32
weights are copied.)

:class:`Copies` holds column-major copies of a model's weights (the same values, so the same
products up to the order of the float sums) for the fused step (:mod:`attnviz.core.step`).
Copies cost memory and go stale when a weight changes, so nothing makes them implicitly: their
holder makes them and promises the weights keep their values while it holds them. The app
does, for the checkpoints it loads read-only (:func:`attnviz.app.decoders.copies_of`). A weight
changed in place the usual ways (an optimizer step, ``load_state_dict``, ``model.to``) is
noticed by its version and storage and read as it is; a change through ``.data`` is not.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

#: Most elements of column-major copies made for one model (1 GiB of float32).
BUDGET = 2**28


def wanted(weight: Tensor) -> bool:
    """Whether a column-major copy of ``weight`` would be read faster and can stand in for it
    now: a float32 matrix on the CPU, outside autograd (a copy would cut the weight's
    gradient), and not an inference tensor (it has no version to check)."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.dim() == 2
        and not torch.is_grad_enabled()
        and not weight.is_inference()
    )


def plan(weights: Sequence[Tensor], budget: int | None = None) -> list[Tensor]:
    """The weights to copy: in the order given, while the copies fit ``budget`` elements
    (default :data:`BUDGET`; each weight once, however often it is listed: tied weights)."""
    budget = BUDGET if budget is None else budget
    chosen: dict[int, Tensor] = {}
    used = 0
    for w in weights:
        if id(w) in chosen or not wanted(w) or used + w.numel() > budget:
            continue
        chosen[id(w)] = w
        used += w.numel()
    return list(chosen.values())


def step_matrices(model: nn.Module) -> list[Tensor]:
    """The weight matrices a cached decoder step multiplies whole, the output matrix first
    (the biggest read). Cross-attention's input projection is left out: a step multiplies its
    query third only."""
    out = [model.generator.weight]
    for layer in model.decoder.layers:
        out += [layer.self_attn.in_proj_weight, layer.self_attn.out_proj.weight]
        if layer.cross_attn is not None:
            out.append(layer.cross_attn.out_proj.weight)
        if layer.ff is not None:
            ff = layer.ff
            out += [ff.linear1.weight, ff.linear2.weight]
            out += [] if ff.gate is None else [ff.gate.weight]
    return out


def _stamp(weight: Tensor) -> tuple:
    return (weight.data_ptr(), weight._version, weight.dtype, weight.device)


class Copies:
    """Column-major copies of the weights a cached step of ``model`` multiplies, made now.

    Args:
        model: a :class:`~attnviz.core.model.Transformer` with a decoder.
        budget: most elements copied (default :data:`BUDGET`), the output matrix first.

    Made under ``torch.no_grad()`` on a CPU float32 model; elsewhere nothing is copied and
    :meth:`lay` hands every weight back as it is.
    """

    def __init__(self, model: nn.Module, budget: int | None = None):
        with torch.no_grad():
            chosen = plan(step_matrices(model), budget)
            self._copies = {
                id(w): (w, _stamp(w), w.detach().t().contiguous().t()) for w in chosen
            }  # [out, in] each, strides (1, out)

    @property
    def numel(self) -> int:
        """Elements held in copies."""
        return sum(c.numel() for _, _, c in self._copies.values())

    def lay(self, weight: Tensor) -> Tensor:
        """``weight``'s copy (equal values and shape, column-major strides) where one is held,
        still matches the weight's version and storage, and may stand in for it now (see
        :func:`wanted`); else ``weight`` itself."""
        held = self._copies.get(id(weight))
        if held is None or held[0] is not weight or not wanted(weight):
            return weight
        return held[2] if held[1] == _stamp(weight) else weight
