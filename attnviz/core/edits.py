"""Attention edits: what :func:`attnviz.core.record` changes inside the real forward pass.

:class:`ZeroHeads` (head ablation), :class:`ReplaceWeights` (a pattern of your own),
:class:`DropMask` (switch a mask off), :class:`Hook` (any function at a stage) and the
:class:`Edit` base a new kind of edit subclasses. The recorder (:mod:`attnviz.core.record`) calls
each stage of every edit that matches a module; it never asks which kind it has.
Shapes: B batch, H heads, Tq/Tk query/key length, Dh head width.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import EditError
from .model import KINDS, Transformer


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

    def edit_window(self, window: Tensor | None) -> Tensor | None:
        """A local layer's sliding-window mask ``[Tq, Tk]`` (True = beyond the window; None
        on a layer that sees every key) -> the one used. Called before :meth:`edit_masks`."""
        return window

    def edit_weights(self, weights: Tensor) -> Tensor:
        """Post-softmax weights ``[B, H, Tq, Tk]`` -> the weights that meet the values."""
        return weights

    def edit_heads(self, head_output: Tensor) -> Tensor:
        """Per-head outputs ``[B, H, Tq, Dh]`` -> the ones merged and projected."""
        return head_output

    def edit_stream(self, stack: str, layer: int, point: str, x: Tensor) -> Tensor:
        """The residual stream or a sublayer's output ``[B, T, D]`` at ``point`` of layer
        ``layer`` of ``stack`` (``"encoder"``/``"decoder"``; points as
        :func:`attnviz.core.layers.tap` lists them) -> the one used. Called for every edit
        (:meth:`matches` is about attention modules); an edit that overrides it keeps
        decoding on the module path, where the stream is tapped."""
        return x


def edits_stream(edit: Edit) -> bool:
    """Whether ``edit`` overrides :meth:`Edit.edit_stream`."""
    return type(edit).edit_stream is not Edit.edit_stream


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
    """Switch a mask off: ``which`` is ``"causal"``, ``"padding"``, ``"both"`` (those two) or
    ``"sliding"`` (the sliding window of local layers, the causal mask kept).

    ``kinds`` (default: every kind that has that mask) and ``layers`` (default: all) choose
    where. The causal mask and the window exist only in ``"decoder_self"``; ``"causal"`` and
    ``"both"`` leave a window in place (it still blocks keys too far back).
    """

    which: str = "causal"
    kinds: Sequence[str] | str | None = None
    layers: Sequence[int] | int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", _as_tuple(self.kinds, "kinds", str))
        object.__setattr__(self, "layers", _as_tuple(self.layers, "layers", int))

    def validate(self, model: Transformer) -> None:
        if self.which not in WHICH:
            raise EditError(f"which must be one of {WHICH}, got {self.which!r}")
        own = self.which in ("causal", "sliding")
        default = ("decoder_self",) if own else KINDS
        for kind in self.kinds or default:
            for layer in self.layers or (None,):
                _check_site(model, kind, layer)
            if own and kind != "decoder_self":
                raise EditError(f"{kind} has no {self.which} mask; only decoder_self has one")
        if self.which == "sliding":
            cfg = model.config
            local = [i for i in range(cfg.n_decoder_layers) if cfg.layer_window(i) is not None]
            if not local:
                raise EditError("this model has no sliding-window layers")
            full = [i for i in self.layers or () if i not in local]
            if full:
                raise EditError(
                    f"decoder_self layers {full} see every key (no sliding window); the local "
                    f"layers are {local}"
                )

    def matches(self, kind: str, layer: int) -> bool:
        return (self.kinds is None or kind in self.kinds) and (
            self.layers is None or layer in self.layers
        )

    def edit_window(self, window: Tensor | None) -> Tensor | None:
        return None if self.which == "sliding" else window

    def edit_masks(self, key_padding_mask: Tensor | None, attn_mask: Tensor | None) -> tuple:
        if self.which in ("padding", "both"):
            key_padding_mask = None
        if self.which in ("causal", "both"):
            attn_mask = None
        return key_padding_mask, attn_mask


#: What :class:`DropMask` can switch off.
WHICH = ("causal", "padding", "both", "sliding")

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
