"""Recording and editing attention inside the real forward pass.

``with attnviz.record(model) as trace: model(src, tgt)`` captures, for every attention module
of ``model`` that runs inside the block, the raw scores (q·kᵀ/√Dh, before masking), the mask
applied (bool, True = blocked), the weights (after softmax, before dropout), the values and
the per-head outputs. Edits (:class:`ZeroHeads`, :class:`ReplaceWeights`, :class:`DropMask`,
:class:`Hook` around any function, or any :class:`Edit` subclass) passed to :func:`record`
change that same forward pass, so an ablation runs the real model.

The recorder lives in a context variable for the duration of the ``with`` block: it is per
call, per thread and per asyncio task, and is gone on exit even after an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .devices import as_numpy
from .errors import EditError, TraceLookupError
from .model import ACTIVE_RECORDER, KINDS, MultiHeadAttention, Transformer

#: What a record can hold, in hook-point order.
FIELDS = ("scores", "mask", "weights", "values", "head_output", "position_bias")


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


class Trace:
    """Attention captured by :func:`record`, by kind and layer.

    A module that runs several times inside one ``record`` block (e.g. once per decoding
    step) has several calls; accessors take ``call=-1`` (the last) by default.
    """

    def __init__(self) -> None:
        self._calls: dict[tuple[str, int], list[AttentionRecord]] = {}

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
        """Mask applied, bool True = blocked, ``[B, 1, Tq, Tk]``."""
        return self._field(kind, layer, "mask", call)

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

    def show(self, src_tokens: Sequence[str], tgt_tokens: Sequence[str], **kwargs):
        """This trace's attention (batch item 0) as a notebook view: see
        :meth:`attnviz.show.View.from_trace` (``tgt_tokens``: the decoder inputs, BOS first;
        ``kind``, ``layer``, ``head`` as keywords)."""
        from .show import View

        return View.from_trace(self, list(src_tokens), list(tgt_tokens), **kwargs)

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


# -- edits -------------------------------------------------------------------------------------
def _check_site(model: Transformer, kind: str, layer: int | None) -> None:
    if kind not in KINDS:
        raise EditError(f"kind must be one of {KINDS}, got {kind!r}")
    n = model.config.n_encoder_layers if kind == "encoder_self" else model.config.n_decoder_layers
    if layer is not None and not (isinstance(layer, int) and 0 <= layer < n):
        raise EditError(f"{kind} has layers 0..{n - 1}, got {layer!r}")


_A = {int: "an int", str: "a str"}


def _as_tuple(value, name: str, item_type: type) -> tuple | None:
    """An int/str or a sequence of them as a tuple (None stays None)."""
    if value is None:
        return None
    if isinstance(value, item_type):
        return (value,)
    try:
        items = tuple(value)
    except TypeError:
        items = None
    if items is None or not all(isinstance(i, item_type) for i in items):
        raise EditError(f"{name} must be {_A[item_type]} or a list of them, got {value!r}")
    return items


def _check_heads(model: Transformer, heads: Iterable[int]) -> tuple[int, ...]:
    heads = tuple(heads)
    h = model.config.n_heads
    bad = [i for i in heads if not (isinstance(i, int) and 0 <= i < h)]
    if bad:
        raise EditError(f"the model has heads 0..{h - 1}, got {bad}")
    return heads


class Edit:
    """An attention edit applied inside the forward pass; every stage defaults to nothing.

    The recorder calls each stage of every edit that :meth:`matches` a module, in the order
    the edits were given: :meth:`edit_masks` before the masks are combined, :meth:`edit_weights`
    after the softmax (before the weights meet the values), :meth:`edit_heads` on the per-head
    outputs (before the heads are merged). A new kind of edit overrides the stages it needs
    (or is a :class:`Hook` around a function); the recorder never asks which kind it has.
    """

    def validate(self, model: Transformer) -> None:
        """Raise :class:`attnviz.EditError` if the edit does not fit ``model``."""

    def matches(self, kind: str, layer: int) -> bool:
        """Whether the edit applies to the module of ``kind`` and ``layer``."""
        return True

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple:
        """``([B, Tk] | None, [Tq, Tk] | None)`` bool masks (True = blocked) -> the pair used."""
        return key_padding_mask, attn_mask

    def edit_weights(self, weights: Tensor) -> Tensor:
        """Post-softmax weights ``[B, H, Tq, Tk]`` -> the weights that meet the values."""
        return weights

    def edit_heads(self, head_output: Tensor) -> Tensor:
        """Per-head outputs ``[B, H, Tq, Dh]`` -> the ones merged and projected."""
        return head_output


@dataclass(frozen=True)
class ZeroHeads(Edit):
    """Zero the outputs of ``heads`` in one attention module (head ablation)."""

    kind: str
    layer: int
    heads: Sequence[int] | int

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _as_tuple(self.heads, "heads", int))

    def validate(self, model: Transformer) -> None:
        _check_site(model, self.kind, self.layer)
        _check_heads(model, self.heads)

    def matches(self, kind: str, layer: int) -> bool:
        return (kind, layer) == (self.kind, self.layer)

    def edit_heads(self, head_output: Tensor) -> Tensor:
        keep = torch.ones(
            head_output.shape[1], 1, 1, dtype=head_output.dtype, device=head_output.device
        )
        keep[list(self.heads)] = 0
        return head_output * keep  # [B, H, Tq, Dh]


@dataclass(frozen=True)
class ReplaceWeights(Edit):
    """Replace attention weights of one module after the softmax, before they meet the values.

    ``weights`` is a tensor broadcastable to ``[B, Tq, Tk]`` for one ``head`` (or to
    ``[B, H, Tq, Tk]`` when ``head`` is None), or a callable mapping the computed weights of
    that head (``[B, Tq, Tk]``) or of all heads (``[B, H, Tq, Tk]``) to new ones.
    """

    kind: str
    layer: int
    weights: Tensor | Callable[[Tensor], Tensor]
    head: int | None = None

    def validate(self, model: Transformer) -> None:
        _check_site(model, self.kind, self.layer)
        if self.head is not None:
            _check_heads(model, [self.head])

    def matches(self, kind: str, layer: int) -> bool:
        return (kind, layer) == (self.kind, self.layer)

    def edit_weights(self, weights: Tensor) -> Tensor:
        """``weights [B, H, Tq, Tk]`` -> edited copy."""
        target = weights if self.head is None else weights[:, self.head]
        new = self.weights(target) if callable(self.weights) else self.weights
        new = torch.as_tensor(new, dtype=weights.dtype, device=weights.device)
        try:
            new = new.expand_as(target)
        except RuntimeError:
            raise EditError(
                f"replacement weights of shape {list(new.shape)} do not fit {self.kind} layer "
                f"{self.layer}, which has {list(target.shape)} here"
            ) from None
        if self.head is None:
            return new.clone()
        out = weights.clone()
        out[:, self.head] = new
        return out


@dataclass(frozen=True)
class DropMask(Edit):
    """Switch a mask off: ``which`` is ``"causal"``, ``"padding"`` or ``"both"``.

    ``kinds`` (default: every kind that has that mask) and ``layers`` (default: all) choose
    where. The causal mask exists only in ``"decoder_self"``.
    """

    which: str = "causal"
    kinds: Sequence[str] | str | None = None
    layers: Sequence[int] | int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", _as_tuple(self.kinds, "kinds", str))
        object.__setattr__(self, "layers", _as_tuple(self.layers, "layers", int))

    def validate(self, model: Transformer) -> None:
        if self.which not in ("causal", "padding", "both"):
            raise EditError(f"which must be 'causal', 'padding' or 'both', got {self.which!r}")
        default = ("decoder_self",) if self.which == "causal" else KINDS
        for kind in self.kinds or default:
            for layer in self.layers or (None,):
                _check_site(model, kind, layer)
            if self.which == "causal" and kind != "decoder_self":
                raise EditError(f"{kind} has no causal mask; only decoder_self has one")

    def matches(self, kind: str, layer: int) -> bool:
        return (self.kinds is None or kind in self.kinds) and (
            self.layers is None or layer in self.layers
        )

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple:
        if self.which in ("padding", "both"):
            key_padding_mask = None
        if self.which in ("causal", "both"):
            attn_mask = None
        return key_padding_mask, attn_mask


#: Stages a :class:`Hook` can sit at, in forward order.
STAGES = ("mask", "weights", "heads")


@dataclass(frozen=True)
class Hook(Edit):
    """Any function as an edit at one stage of one module (or of every layer of a kind).

    ``fn`` sees what flows through the stage and returns its replacement, or None to leave it
    as it is (a probe): at ``"weights"`` the post-softmax weights ``[B, H, Tq, Tk]``, at
    ``"heads"`` the per-head outputs ``[B, H, Tq, Dh]``, at ``"mask"`` the pair
    ``(key_padding_mask [B, Tk] | None, attn_mask [Tq, Tk] | None)`` (bool, True = blocked).
    Like every edit it lives only inside its ``record`` block.

    Example: ``Hook("cross", 1, "heads", lambda z: z * 2)`` doubles every cross-attention
    head of layer 1.
    """

    kind: str
    layer: int | None
    stage: str
    fn: Callable

    def validate(self, model: Transformer) -> None:
        _check_site(model, self.kind, self.layer)
        if self.stage not in STAGES:
            raise EditError(f"stage must be one of {STAGES}, got {self.stage!r}")
        if not callable(self.fn):
            raise EditError(f"fn must be a function, got {type(self.fn).__name__}")

    def matches(self, kind: str, layer: int) -> bool:
        return kind == self.kind and (self.layer is None or layer == self.layer)

    def _where(self) -> str:
        where = "every layer" if self.layer is None else f"layer {self.layer}"
        return f"the {self.stage} hook on {self.kind} {where}"

    def _tensor(self, old: Tensor) -> Tensor:
        new = self.fn(old)
        if new is None:
            return old
        if not isinstance(new, Tensor) or new.shape != old.shape:
            got = list(new.shape) if isinstance(new, Tensor) else type(new).__name__
            raise EditError(f"{self._where()} returned {got}; expected a tensor {list(old.shape)}")
        return new

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple:
        if self.stage != "mask":
            return key_padding_mask, attn_mask
        new = self.fn(key_padding_mask, attn_mask)
        if new is None:
            return key_padding_mask, attn_mask
        ok = isinstance(new, tuple) and len(new) == 2
        if not ok or not all(m is None or (isinstance(m, Tensor) and m.dtype == torch.bool)
                             for m in new):  # fmt: skip
            raise EditError(
                f"{self._where()} must return (key_padding_mask, attn_mask), each None or a "
                "bool tensor (True = blocked)"
            )
        return new

    def edit_weights(self, weights: Tensor) -> Tensor:
        return self._tensor(weights) if self.stage == "weights" else weights

    def edit_heads(self, head_output: Tensor) -> Tensor:
        return self._tensor(head_output) if self.stage == "heads" else head_output


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
    ):
        self.outer = outer
        self.trace = Trace()
        self._hooks: dict[int, _Hook] = {}
        for name, module in model.attention_modules().items():
            mine = [e for e in edits if e.matches(module.kind, module.layer)]
            if capture or mine:
                self._hooks[id(module)] = _Hook(
                    module.kind, module.layer, name, self.trace, capture, detach, mine, dtype
                )

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
    recorder = _Recorder(model, edits, capture, detach, ACTIVE_RECORDER.get(), dtype)
    token = ACTIVE_RECORDER.set(recorder)
    try:
        yield recorder.trace
    finally:
        ACTIVE_RECORDER.reset(token)
