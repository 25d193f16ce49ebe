"""Masks: the only module that builds or converts them.

Convention (the ``key_padding_mask`` meaning of ``torch.nn.MultiheadAttention``): masks are
``torch.bool`` and **True = blocked** ("may not attend"). Padding masks are ``[B, T]`` with
True at PAD; the causal mask is ``[Tq, Tk]``. Float additive masks (0 = allowed, -inf or a
large negative number = blocked), as made by ``nn.Transformer.generate_square_subsequent_mask``,
are accepted at the public boundary and converted here, once.

A query row whose keys are all blocked gets all-zero weights and all-zero head outputs (the
output projection then adds only its bias), never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .errors import MaskError

#: Float mask entries at or below this count as blocked (covers -inf, -1e9, finfo.min, -1e4).
FLOAT_BLOCKED_AT = -1e4


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Padding mask of token ids.

    Args:
        ids: ``[B, T]`` token ids.
        pad_id: the PAD token id.
    Returns:
        ``[B, T]`` bool, True where ``ids == pad_id``.
    """
    return ids == pad_id


def length_mask(lengths: Sequence[int] | Tensor, width: int, device=None) -> Tensor:
    """Padding mask of rows padded at the end, from their lengths (not from their ids).

    A decoder input starts with the start id, which may equal the pad id (T5, Marian), so a
    target's padding is told by its length, never by comparing ids with the pad id.

    Args:
        lengths: ``[B]`` real tokens per row.
        width: T, the padded width.
    Returns:
        ``[B, T]`` bool, True at the positions after each row's length.
    """
    lengths = torch.as_tensor(lengths, dtype=torch.long, device=device)
    return torch.arange(width, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(1)


def causal_mask(tq: int, tk: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """Causal (no-peeking) mask for ``tq`` new queries over ``tk`` keys.

    The queries are the last ``tq`` positions of the ``tk`` keys (``tk >= tq``), so query ``i``
    sits at absolute position ``tk - tq + i`` and may see keys up to and including it. With
    ``tk == tq`` this is the usual upper-triangular mask; with a KV cache (``tq=1``) nothing
    is blocked.

    Returns:
        ``[Tq, Tk]`` bool, True above the (shifted) diagonal.
    """
    tk = tq if tk is None else tk
    if tk < tq:
        raise MaskError(f"causal mask needs at least as many keys as queries, got Tq={tq}, Tk={tk}")
    q_pos = torch.arange(tq, device=device).unsqueeze(1) + (tk - tq)  # [Tq, 1]
    k_pos = torch.arange(tk, device=device).unsqueeze(0)  # [1, Tk]
    return k_pos > q_pos


def sliding_window_mask(
    tq: int, window: int, tk: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """Sliding-window mask: what a local layer blocks beyond the causal mask.

    The queries are the last ``tq`` of the ``tk`` positions (as in :func:`causal_mask`); the
    query at position ``i`` may not attend to a key ``j`` with ``i - j >= window``, so it sees
    at most ``window`` keys, itself included (transformers' ``sliding_window_overlay``:
    ``kv_idx > q_idx - sliding_window``, the convention of Gemma 3, Mistral and Qwen2 alike).
    Future keys are left to the causal mask: the two never block the same cell.

    Returns:
        ``[Tq, Tk]`` bool, True where the key is ``window`` or more positions behind.
    """
    tk = tq if tk is None else tk
    if tk < tq:
        raise MaskError(f"window mask needs at least as many keys as queries, got Tq={tq}, Tk={tk}")
    q_pos = torch.arange(tq, device=device).unsqueeze(1) + (tk - tq)  # [Tq, 1]
    k_pos = torch.arange(tk, device=device).unsqueeze(0)  # [1, Tk]
    return q_pos - k_pos >= window


def as_bool_mask(
    mask: Tensor | None,
    shape: tuple[int, ...],
    name: str,
    dims: str,
    device: torch.device | None = None,
) -> Tensor | None:
    """Validate a user-given mask and convert it to the bool, True = blocked convention.

    Args:
        mask: None, a bool mask (True = blocked) or a float additive mask.
        shape: the exact shape expected, e.g. ``(B, T)``.
        name: argument name for the error message, e.g. ``"src_pad_mask"``.
        dims: symbolic shape for the error message, e.g. ``"[B, Ts]"``.
        device: where the mask must be (that of the ids it goes with).
    Returns:
        None or a bool tensor of ``shape``.
    Raises:
        MaskError: wrong type, dtype, shape or float values that are neither allowed nor blocked.
    """
    if mask is None:
        return None
    expected = f"{dims} = {list(shape)}"
    if not isinstance(mask, Tensor):
        raise MaskError(
            f"{name} must be a torch.Tensor of shape {expected}, got {type(mask).__name__}"
        )
    if tuple(mask.shape) != tuple(shape):
        raise MaskError(f"{name} must have shape {expected}, got {list(mask.shape)}")
    if device is not None and mask.device != device:
        raise MaskError(
            f"{name} is on {mask.device} but the token ids are on {device}; move it there"
        )
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        blocked = mask <= FLOAT_BLOCKED_AT
        if not torch.all(blocked | (mask == 0)):
            raise MaskError(
                f"float {name} may hold only 0 (allowed) and -inf (blocked); "
                "attnviz masks block or allow, they do not add biases"
            )
        return blocked
    raise MaskError(
        f"{name} must be torch.bool (True = blocked) or a float additive mask, got {mask.dtype}; "
        f"if 1 means 'attend' in your mask, pass `{name} == 0`"
    )


def combine(
    key_padding_mask: Tensor | None, attn_mask: Tensor | None, window: Tensor | None = None
) -> Tensor | None:
    """Merge a key padding mask and per-query masks into one mask for attention.

    Args:
        key_padding_mask: ``[B, Tk]`` bool or None.
        attn_mask: ``[Tq, Tk]`` bool or None (e.g. causal).
        window: ``[Tq, Tk]`` bool or None: a sliding window (:func:`sliding_window_mask`).
    Returns:
        None when both are None, else bool broadcastable to ``[B, H, Tq, Tk]``:
        ``[B, 1, 1|Tq, Tk]`` or ``[1, 1, Tq, Tk]``.
    """
    if window is not None:
        attn_mask = window if attn_mask is None else attn_mask | window
    if key_padding_mask is None and attn_mask is None:
        return None
    if key_padding_mask is None:
        return attn_mask[None, None]  # [1, 1, Tq, Tk]
    kpm = key_padding_mask[:, None, None, :]  # [B, 1, 1, Tk]
    if attn_mask is None:
        return kpm
    return kpm | attn_mask[None, None]  # [B, 1, Tq, Tk]


def dead_rows(mask: Tensor) -> Tensor:
    """Query rows whose every key is blocked: ``[..., Tq, Tk]`` -> ``[..., Tq, 1]`` bool."""
    return mask.all(dim=-1, keepdim=True)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over keys with blocked cells exactly 0 and fully blocked rows all 0.

    Args:
        scores: ``[B, H, Tq, Tk]`` raw scores.
        mask: bool broadcastable to ``scores`` (True = blocked) or None.
    Returns:
        ``[B, H, Tq, Tk]`` weights; rows sum to 1 where any key is allowed.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)  # [B, H, Tq, Tk]
    dead = dead_rows(mask)
    weights = torch.softmax(scores.masked_fill(mask & ~dead, float("-inf")), dim=-1)
    return weights.masked_fill(dead, 0.0)  # [B, H, Tq, Tk]


def sdpa_mask(
    mask: Tensor | None, bias: Tensor | None = None
) -> tuple[Tensor | None, Tensor | None]:
    """Translate a True = blocked mask into ``F.scaled_dot_product_attention``'s convention.

    Fully blocked rows are opened to every key (so the fused kernel never sees an empty row
    and never makes NaN) and returned separately, so the caller zeroes their output.

    Args:
        mask: bool, True = blocked, broadcastable to ``[B, H, Tq, Tk]``, or None.
        bias: a float position bias ``[1, H, Tq, Tk]`` added to the scores (T5), or None.
    Returns:
        ``(allowed, dead)``: allowed is bool True = may attend (SDPA's meaning), or with a
        bias the float additive mask (bias, -inf where blocked), or None; dead is
        ``[..., Tq, 1]`` bool or None.
    """
    if mask is None:
        return bias, None
    dead = dead_rows(mask)
    if bias is not None:
        blocked = torch.tensor(float("-inf"), dtype=bias.dtype, device=bias.device)
        return torch.where(mask & ~dead, blocked, bias), dead  # [B, H, Tq, Tk]
    return ~(mask & ~dead), dead  # the one place the convention flips
