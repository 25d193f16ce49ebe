"""Recording and editing attention inside the real forward pass.

``with attnviz.record(model) as trace: model(src, tgt)`` captures, for every attention module
of ``model`` that runs inside the block, the raw scores (q·kᵀ/√Dh, before masking), the mask
applied (bool, True = blocked), the weights (after softmax, before dropout), the values and
the per-head outputs. Edits (:class:`ZeroHeads`, :class:`ReplaceWeights`, :class:`DropMask`,
:class:`Hook` around any function, or any :class:`Edit` subclass; all in :mod:`attnviz.core.edits`
and importable from here) passed to :func:`record` change that same forward pass, so an
ablation runs the real model.

The recorder lives in a context variable for the duration of the ``with`` block: it is per
call, per thread and per asyncio task, and is gone on exit even after an exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .devices import as_numpy
from .edits import STAGES as STAGES
from .edits import DropMask as DropMask
from .edits import Edit, edits_stream
from .edits import Hook as Hook
from .edits import ReplaceWeights as ReplaceWeights
from .edits import ZeroHeads as ZeroHeads
from .errors import EditError, TraceLookupError
from .model import ACTIVE_RECORDER, KINDS, MultiHeadAttention, Transformer

#: What a record can hold, in hook-point order.
FIELDS = ("scores", "mask", "weights", "values", "head_output", "position_bias", "window")


@dataclass
class AttentionRecord:
    """What one attention module computed in one call.

    Attributes:
        kind, layer, name: which module (``"cross"``, 1, ``"decoder.layers.1.cross_attn"``).
        scores: ``[B, H, Tq, Tk]`` raw q·kᵀ/√Dh (plus the position bias, where the model
            has one: what the softmax saw) before masking.
        mask: ``[B, 1, Tq, Tk]`` bool, True = blocked (all False when nothing was masked).
        weights: ``[B, H, Tq, Tk]`` after softmax (and any edit), before dropout.
        values: ``[B, H, Tk, Dh]`` or None.
        head_output: ``[B, H, Tq, Dh]`` per-head output (after any head edit) or None.
        position_bias: ``[1, H, Tq, Tk]`` relative position bias already inside ``scores``
            (T5 self-attention), or None where the model has none.
        window: ``[1, 1, Tq, Tk]`` bool, the cells of ``mask`` that the sliding window
            blocks (a local layer's), or None where the layer had no window (a full-attention
            layer, or one whose window an edit removed).
    """

    kind: str
    layer: int
    name: str
    scores: Tensor | None = None
    mask: Tensor | None = None
    weights: Tensor | None = None
    values: Tensor | None = None
    head_output: Tensor | None = None
    position_bias: Tensor | None = None
    window: Tensor | None = None


class Trace:
    """Attention captured by :func:`record`, by kind and layer.

    A module that runs several times inside one ``record`` block (e.g. once per decoding
    step) has several calls; accessors take ``call=-1`` (the last) by default.
    """

    def __init__(self) -> None:
        self._calls: dict[tuple[str, int], list[AttentionRecord]] = {}
        self._streams: dict[tuple[str, int, str], list[Tensor]] = {}

    def stream(self, stack: str, layer: int, point: str, call: int = -1) -> Tensor:
        """The residual stream or a sublayer's output ``[B, T, D]`` kept by
        ``record(..., streams=True)``: ``stack`` ``"encoder"``/``"decoder"``, ``point`` one of
        ``"resid_pre"``, ``"attn"``, ``"cross"``, ``"mlp"``, ``"resid_post"`` (see
        :func:`attnviz.core.layers.tap`; after any stream edit)."""
        calls = self._streams.get((stack, layer, point))
        if not calls:
            raise TraceLookupError(
                f"no {point!r} stream of {stack} layer {layer} was kept; record with streams=True"
            )
        return calls[call]

    def _add(self, rec: AttentionRecord) -> None:
        self._calls.setdefault((rec.kind, rec.layer), []).append(rec)

    # -- listing -----------------------------------------------------------------------------
    def keys(self) -> list[tuple[str, int]]:
        """``(kind, layer)`` pairs held, encoder self, decoder self, cross; layers ascending."""
        return sorted(self._calls, key=lambda k: (KINDS.index(k[0]), k[1]))

    def kinds(self) -> list[str]:
        return [k for k in KINDS if any(kind == k for kind, _ in self._calls)]

    def layers(self, kind: str) -> list[int]:
        return sorted(layer for k, layer in self._calls if k == kind)

    def n_calls(self, kind: str, layer: int) -> int:
        """How many calls of one module were recorded (``call=`` of the accessors indexes them;
        a cached decode records one call per step)."""
        return len(self._calls.get((kind, layer), ()))

    def names(self) -> list[str]:
        """Hook-point names held, e.g. ``"decoder.layers.0.cross_attn.weights"``."""
        out = []
        for key in self.keys():
            rec = self._calls[key][-1]
            out += [f"{rec.name}.{f}" for f in FIELDS if getattr(rec, f) is not None]
        return out

    def __contains__(self, key: object) -> bool:
        return key in self._calls

    def __len__(self) -> int:
        return len(self._calls)

    def __repr__(self) -> str:
        parts = [f"{k}[{layer}]x{len(v)}" for (k, layer), v in sorted(self._calls.items())]
        return f"Trace({', '.join(parts)})"

    # -- access ------------------------------------------------------------------------------
    def get(self, kind: str, layer: int, call: int = -1) -> AttentionRecord:
        """The record of one module call; a clear error names what the trace holds."""
        calls = self._calls.get((kind, layer))
        if not calls:
            held = ", ".join(f"{k}/{i}" for k, i in self.keys()) or "nothing"
            raise TraceLookupError(f"trace holds no {kind!r} layer {layer}; it holds {held}")
        return calls[call]

    def _field(self, kind: str, layer: int, name: str, call: int) -> Tensor:
        value = getattr(self.get(kind, layer, call), name)
        if value is None:
            raise TraceLookupError(f"{name!r} was not captured for {kind!r} layer {layer}")
        return value

    def weights(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """Post-softmax weights ``[B, H, Tq, Tk]``: masked cells exactly 0."""
        return self._field(kind, layer, "weights", call)

    def scores(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """Raw scores q·kᵀ/√Dh ``[B, H, Tq, Tk]``, before the mask."""
        return self._field(kind, layer, "scores", call)

    def mask(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """Mask applied, bool True = blocked, ``[B, 1, Tq, Tk]``: padding, causal and sliding
        window together (:meth:`window` tells the window's cells apart)."""
        return self._field(kind, layer, "mask", call)

    def window(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """The cells of :meth:`mask` blocked by the sliding window, bool ``[B, 1, Tq, Tk]``:
        all False on a layer without one (full attention, or its window dropped by
        ``DropMask("sliding")``). Never the same cell as the causal mask (the window blocks
        keys ``window`` or more positions behind the query; the causal mask, keys ahead)."""
        rec = self.get(kind, layer, call)
        mask = self._field(kind, layer, "mask", call)
        if rec.window is None:
            return torch.zeros_like(mask)
        return rec.window.expand_as(mask)

    def is_sliding(self, kind: str, layer: int, call: int = -1) -> bool:
        """Whether that call of the layer attended through a sliding window."""
        return self.get(kind, layer, call).window is not None

    def values(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """Values ``[B, H, Tk, Dh]``."""
        return self._field(kind, layer, "values", call)

    def head_output(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """Per-head outputs ``weights @ values`` ``[B, H, Tq, Dh]`` (before merging heads)."""
        return self._field(kind, layer, "head_output", call)

    def position_bias(self, kind: str, layer: int, call: int = -1) -> Tensor:
        """Relative position bias ``[1, H, Tq, Tk]`` that ``scores`` include (T5 only)."""
        return self._field(kind, layer, "position_bias", call)

    def numpy(self, kind: str, layer: int, what: str = "weights", call: int = -1) -> np.ndarray:
        """One captured tensor as a CPU float32 numpy array (a bool array for ``mask``)."""
        if what not in FIELDS:
            raise TraceLookupError(f"what must be one of {FIELDS}, got {what!r}")
        return as_numpy(self._field(kind, layer, what, call))

    #: What :meth:`show` draws with: :meth:`attnviz.render.show.View.from_trace`, registered by
    #: :mod:`attnviz.render.show` when it is imported (``import attnviz`` does), so that the
    #: recorder never imports the renderer.
    viewer = None

    def show(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str], **kwargs):
        """This trace's attention (batch item 0) as a notebook view: see
        :meth:`attnviz.render.show.View.from_trace` (``tgt_tokens``: the decoder inputs, BOS first;
        ``kind``, ``layer``, ``head`` as keywords)."""
        if Trace.viewer is None:
            raise TraceLookupError("import attnviz.render.show (or attnviz) to draw a trace")
        return Trace.viewer(self, list(src_tokens), list(tgt_tokens), **kwargs)

    def to_numpy(self) -> dict[str, np.ndarray]:
        """Every captured tensor of the last call of each module, keyed by hook-point name."""
        out = {}
        for key in self.keys():
            rec = self._calls[key][-1]
            for f in FIELDS:
                value = getattr(rec, f)
                if value is not None:
                    out[f"{rec.name}.{f}"] = as_numpy(value)
        return out


@dataclass
class _Hook:
    """Edits and capture for one module in one ``record`` block (model.AttentionHook)."""

    kind: str
    layer: int
    name: str
    trace: Trace
    capture: frozenset[str]
    detach: bool
    edits: list = field(default_factory=list)
    dtype: torch.dtype | None = None

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple:
        for e in self.edits:
            key_padding_mask, attn_mask = e.edit_masks(key_padding_mask, attn_mask)
        return key_padding_mask, attn_mask

    def edit_window(self, window: Tensor | None) -> Tensor | None:
        for e in self.edits:
            window = e.edit_window(window)
        return window

    def edit_weights(self, weights: Tensor) -> Tensor:
        for e in self.edits:
            weights = e.edit_weights(weights)
        return weights

    def edit_heads(self, head_output: Tensor) -> Tensor:
        for e in self.edits:
            head_output = e.edit_heads(head_output)
        return head_output

    def save(self, **tensors: Tensor | None) -> None:
        if not self.capture:
            return
        rec = AttentionRecord(self.kind, self.layer, self.name)
        for name, value in tensors.items():
            if name not in self.capture:
                continue
            if name == "mask":
                value = _full_mask(value, tensors["weights"])
            if name == "window" and value is not None:
                value = value[None, None]  # [1, 1, Tq, Tk]
            if value is not None and self.detach:
                value = value.detach()
            if value is not None and self.dtype is not None and value.is_floating_point():
                value = value.to(self.dtype)  # a compact copy; the forward used its own
            if name == "values" and value is not None:
                value = value.clone()  # may be a view of a KV cache that later steps overwrite
            setattr(rec, name, value)
        self.trace._add(rec)


def _full_mask(mask: Tensor | None, weights: Tensor) -> Tensor:
    """Mask as stored in a trace: ``[B, 1, Tq, Tk]`` bool, all False when nothing was masked."""
    b, _, tq, tk = weights.shape
    if mask is None:
        return torch.zeros(b, 1, tq, tk, dtype=torch.bool, device=weights.device)
    return mask.expand(b, 1, tq, tk)


@dataclass
class _Chain:
    """An outer and an inner hook on the same module: edits compose, both traces record."""

    outer: _Hook | _Chain
    inner: _Hook

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple:
        return self.inner.edit_masks(*self.outer.edit_masks(key_padding_mask, attn_mask))

    def edit_window(self, window: Tensor | None) -> Tensor | None:
        return self.inner.edit_window(self.outer.edit_window(window))

    def edit_weights(self, weights: Tensor) -> Tensor:
        return self.inner.edit_weights(self.outer.edit_weights(weights))

    def edit_heads(self, head_output: Tensor) -> Tensor:
        return self.inner.edit_heads(self.outer.edit_heads(head_output))

    def save(self, **tensors: Tensor | None) -> None:
        self.outer.save(**tensors)
        self.inner.save(**tensors)


class _Recorder:
    """Maps the attention modules of one model to their hooks (model.Recorder).

    A ``record`` block inside another keeps the outer one working: both apply their edits
    (outer first) and both traces record.
    """

    def __init__(
        self,
        model: Transformer,
        edits: Sequence[Edit],
        capture: frozenset[str],
        detach: bool,
        outer: _Recorder | None,
        dtype: torch.dtype | None = None,
        streams: bool = False,
    ):
        self.outer = outer
        self.trace = Trace()
        modules = model.modules() if hasattr(model, "modules") else ()  # a stand-in: none
        self._layers = {id(m) for m in modules if hasattr(m, "index")}
        self._stream_edits = [e for e in edits if edits_stream(e)]
        self._keep_streams, self._detach = streams, detach
        #: an edit of the stream is active here or outside: decoding keeps the module path
        self.edits_streams = bool(self._stream_edits) or getattr(outer, "edits_streams", False)
        self._hooks: dict[int, _Hook] = {}
        for name, module in model.attention_modules().items():
            mine = [e for e in edits if e.matches(module.kind, module.layer)]
            if capture or mine:
                self._hooks[id(module)] = _Hook(
                    module.kind, module.layer, name, self.trace, capture, detach, mine, dtype
                )

    def stream(self, layer: torch.nn.Module, point: str, x: Tensor) -> Tensor:
        """A layer's stream at ``point`` (see :func:`attnviz.core.layers.tap`): the outer
        block's edits, then this one's; kept when this block records streams."""
        if self.outer is not None:
            x = self.outer.stream(layer, point, x)
        if id(layer) not in self._layers:
            return x
        for e in self._stream_edits:
            x = e.edit_stream(layer.stack, layer.index, point, x)
        if self._keep_streams:
            kept = x.detach() if self._detach else x
            self.trace._streams.setdefault((layer.stack, layer.index, point), []).append(kept)
        return x

    def hook_for(self, module: MultiHeadAttention) -> _Hook | _Chain | None:
        mine = self._hooks.get(id(module))
        outer = self.outer.hook_for(module) if self.outer is not None else None
        if outer is None or mine is None:
            return mine or outer
        return _Chain(outer, mine)


@contextmanager
def record(
    model: Transformer,
    edits: Sequence[Edit] = (),
    *,
    capture: Iterable[str] | None = FIELDS,
    detach: bool = True,
    dtype: torch.dtype | None = None,
    streams: bool = False,
) -> Iterator[Trace]:
    """Capture (and optionally edit) the attention of ``model`` for the calls inside the block.

    Args:
        model: the :class:`attnviz.Transformer` to watch; other models are left alone.
        edits: :class:`Edit` objects (:class:`ZeroHeads`, :class:`ReplaceWeights`,
            :class:`DropMask`, :class:`Hook` or your own) applied inside the forward pass.
        capture: which of ``FIELDS`` to keep (None or empty: edit only, keep nothing).
        detach: store detached tensors (False keeps the autograd graph, for attribution).
        dtype: store float tensors in this dtype (e.g. ``torch.float16`` halves a trace);
            the forward pass itself is unchanged. Default: as computed.
        streams: also keep each layer's residual stream and sublayer outputs
            (:meth:`Trace.stream`); off by default.
    Yields:
        The :class:`Trace`, filled as the model runs.

    Blocks nest: decoding helpers open their own ``record`` inside yours, and your edits
    still apply and your trace still records.
    """
    edits = list(edits)
    for e in edits:
        if not isinstance(e, Edit):
            raise EditError(
                f"unknown edit {e!r}; use ZeroHeads, ReplaceWeights, DropMask, Hook or a "
                "subclass of attnviz.Edit"
            )
        e.validate(model)
    capture = frozenset(capture or ())
    unknown = capture - set(FIELDS)
    if unknown:
        raise EditError(f"capture may name {FIELDS}, got {sorted(unknown)}")
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise EditError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    recorder = _Recorder(model, edits, capture, detach, ACTIVE_RECORDER.get(), dtype, streams)
    token = ACTIVE_RECORDER.set(recorder)
    try:
        yield recorder.trace
    finally:
        ACTIVE_RECORDER.reset(token)
