"""Lenses: three ways to read one recorded attention module.

- ``"weights"``: the attention weights α the softmax gave (what the model used to mix values).
- ``"norms"``: ‖α_ij f_h(x_j)‖, the size of what key j actually adds to query i through head
  h, where f_h is the head's value projection followed by its slice of the output projection
  (Kobayashi et al. 2020, "Attention is not only a weight"). A large weight on a key whose
  transformed value is tiny counts for little. Summed over keys and heads, α_ij f_h(x_j) plus
  the output bias is exactly the module's output (:func:`value_contributions`; a test holds it
  to 1e-5).
- ``"rollout"``: attention rollout with the residual (Abnar & Zuidema 2020): each layer's
  head-mean weights mixed half-and-half with the identity, rows renormalised, and multiplied
  through the stack, so a cell says how much of an input position flows into a position
  after that layer. For cross-attention the encoder-decoder composition: decoder rollout up to
  the layer, then that layer's cross-attention, then the whole encoder's rollout back to the
  source tokens. Rows sum to 1; one matrix per layer (heads are averaged), returned with a
  head axis of 1.

Every lens reads the same trace: the values, weights and masks the forward pass recorded.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.model import Transformer
from ..core.record import Trace

LENSES = ("weights", "norms", "rollout")


def attention_module(model: Transformer, kind: str, layer: int) -> torch.nn.Module:
    """The attention module that records as ``(kind, layer)``."""
    try:
        if kind == "encoder_self":
            return model.encoder.layers[layer].self_attn
        if kind == "decoder_self":
            return model.decoder.layers[layer].self_attn
        if kind == "cross":
            return model.decoder.layers[layer].cross_attn
    except IndexError:
        raise InputError(f"the model has no {kind} layer {layer}") from None
    raise InputError(f"kind must be encoder_self, decoder_self or cross, got {kind!r}")


def _transformed_values(model: Transformer, trace: Trace, kind: str, layer: int) -> torch.Tensor:
    """f_h(x_j): each head's values through its slice of the output projection ``[B, H, Tk, D]``."""
    values = trace.values(kind, layer).detach().float()  # [B, H, Tk, Dh]
    w = attention_module(model, kind, layer).out_proj.weight.detach().float()  # [D, H*Dh]
    h, dh = values.shape[1], values.shape[-1]
    w = w.view(w.shape[0], h, dh).to(values.device)  # [D, H, Dh]
    return torch.einsum("bhkd,ehd->bhke", values, w)


def value_contributions(model: Transformer, trace: Trace, kind: str, layer: int) -> torch.Tensor:
    """α_ij f_h(x_j) for every query, head and key: ``[B, H, Tq, Tk, D]``.

    Summed over keys and heads, plus the output projection's bias, this is the module's output
    ``[B, Tq, D]`` (the invariant behind the ``"norms"`` lens).
    """
    weights = trace.weights(kind, layer).float()  # [B, H, Tq, Tk]
    fx = _transformed_values(model, trace, kind, layer)  # [B, H, Tk, D]
    return weights.unsqueeze(-1) * fx.unsqueeze(2)


def norms(model: Transformer, trace: Trace, kind: str, layer: int) -> np.ndarray:
    """‖α_ij f_h(x_j)‖ ``[B, H, Tq, Tk]`` (0 wherever the weight is 0, masked cells included)."""
    weights = trace.weights(kind, layer).float()  # [B, H, Tq, Tk]
    fx_norm = _transformed_values(model, trace, kind, layer).norm(dim=-1)  # [B, H, Tk]
    return as_numpy(weights * fx_norm.unsqueeze(2))


def _mixed(a: np.ndarray) -> np.ndarray:
    """Head-mean weights ``[B, Tq, Tk]`` (Tq == Tk) with the residual: 0.5 A + 0.5 I, renormalised."""
    eye = np.eye(a.shape[-1], dtype=np.float64)
    m = 0.5 * a.astype(np.float64) + 0.5 * eye
    return m / m.sum(-1, keepdims=True)


def self_rollout(trace: Trace, kind: str, upto: int) -> np.ndarray:
    """Rollout of a self-attention stack through layer ``upto`` ``[B, T, T]``."""
    r = None
    for layer in trace.layers(kind):
        if layer > upto:
            break
        a = _mixed(trace.numpy(kind, layer).mean(1))  # [B, T, T]
        r = a if r is None else a @ r
    if r is None:
        raise InputError(f"the trace holds no {kind} layer up to {upto}")
    return r


def rollout(trace: Trace, kind: str, layer: int) -> np.ndarray:
    """Attention rollout through ``layer`` ``[B, 1, Tq, Tk]``; rows sum to 1.

    ``encoder_self``/``decoder_self``: the stack's rollout up to and including ``layer``.
    ``cross``: decoder rollout up to ``layer``, then the layer's head-mean cross-attention,
    then the full encoder rollout (decoder position -> source token).
    """
    if kind in ("encoder_self", "decoder_self"):
        return self_rollout(trace, kind, layer)[:, None].astype(np.float32)
    if kind != "cross":
        raise InputError(f"kind must be encoder_self, decoder_self or cross, got {kind!r}")
    enc = self_rollout(trace, "encoder_self", max(trace.layers("encoder_self")))  # [B, Ts, Ts]
    cross = trace.numpy("cross", layer).mean(1).astype(np.float64)  # [B, Tt, Ts]
    dead = cross.sum(-1, keepdims=True) == 0  # fully masked rows: spread nothing
    cross = np.where(dead, 1.0 / cross.shape[-1], cross)
    dec = self_rollout(trace, "decoder_self", layer)  # [B, Tt, Tt]
    return (dec @ cross @ enc)[:, None].astype(np.float32)


def lens(
    model: Transformer, trace: Trace, kind: str, layer: int, name: str = "weights"
) -> np.ndarray:
    """One lens of one recorded module, as a float32 array ``[B, H, Tq, Tk]`` (rollout: H = 1).

    Args:
        model: the model that produced ``trace`` (the norms lens reads its output projection).
        trace: a trace recorded with values (``record(model)`` records them by default).
        name: ``"weights"``, ``"norms"`` or ``"rollout"`` (see the module docstring).
    """
    if name == "weights":
        return trace.numpy(kind, layer)
    if name == "norms":
        return norms(model, trace, kind, layer)
    if name == "rollout":
        return rollout(trace, kind, layer)
    raise InputError(f"lens must be one of {', '.join(LENSES)}, got {name!r}")
