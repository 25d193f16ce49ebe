"""Attention what-if: at one decode step, make chosen heads look at one key, then decode on.

At step ``step`` the chosen heads' attention row is replaced by a one-hot on key position
``attend_to`` (a :class:`~attnviz.ReplaceWeights` edit inside the real forward pass); the
token chosen from that edited pass is kept, and greedy decoding continues from the new prefix
with no override (later steps see the prefix, not the edited hidden states).

By default both sides start from the greedy decode. ``tokens=`` gives the prefix actually fed
instead (e.g. with tokens a person forced): both sides feed ``tokens[:step]``, then the
original decodes greedily on from it (as the step view continues) and the what-if overrides
step ``step`` and decodes greedily on.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from ..checkpoint import Checkpoint
from ..core.errors import InputError, index_in, shorten
from ..core.record import ReplaceWeights
from ..decode.greedy import GreedyStepper
from .labsize import lab_memory, refuse_oversized


@dataclass
class Decode:
    """One side of a what-if.

    Attributes:
        tokens: output ids (BOS excluded; EOS last when produced).
        text: the decoded text.
        probs: per step, the probability the model gave the token it produced.
    """

    tokens: list[int]
    text: str
    probs: list[float]


@dataclass
class WhatIf:
    """The original greedy decode and the decode with one attention row overridden.

    Attributes:
        before, after: :class:`Decode` of each.
        step, kind, layer, heads, attend_to: the override.
        edited_attention: ``[H, Tk]`` the edited step's attention row of that layer (the
            one-hot shows in the chosen heads).
    """

    before: Decode
    after: Decode
    step: int
    kind: str
    layer: int
    heads: list[int]
    attend_to: int
    edited_attention: torch.Tensor

    @property
    def changed(self) -> list[int]:
        """Positions whose token differs (or exists on one side only)."""
        a, b = self.before.tokens, self.after.tokens
        return [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]


def _decode(ckpt: Checkpoint, stepper: GreedyStepper, probs: list[float]) -> Decode:
    tokens = stepper.tokens
    tok = ckpt.tgt_tokenizer
    text = tok.decode(tokens) if tok is not None else " ".join(f"#{t}" for t in tokens)
    return Decode(tokens, text, probs)


def _prefix(ckpt: Checkpoint, tokens: Sequence[int], step: int) -> list[int]:
    """``tokens[:step]`` checked: ids in the vocabulary, no end token before ``step``."""
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Iterable):
        raise InputError(f"tokens must be a list of target ids, got {shorten(repr(tokens))}")
    tokens = list(tokens)
    step = index_in(step, "step", len(tokens) + 1, note=f" (tokens holds {len(tokens)} ids)")
    cfg = ckpt.config
    vocab = cfg.tgt_vocab_size
    out = []
    for i, t in enumerate(tokens[:step]):
        try:
            if isinstance(t, bool):
                raise TypeError
            t = operator.index(t)
        except TypeError:
            raise InputError(f"tokens[{i}] is not a token id: {shorten(repr(t))}") from None
        if not 0 <= t < vocab:
            raise InputError(f"tokens[{i}] = {t} is outside the vocabulary 0..{vocab - 1}")
        if ckpt.decoding.ends(t):
            raise InputError(
                f"tokens[{i}] is the end token: that decode has {i + 1} steps, "
                f"so step must be in 0..{i}"
            )
        out.append(t)
    return out


def check_size(ckpt: Checkpoint, text) -> None:
    """Refuse, in one line, a what-if whose two steppers this process cannot hold, before
    either runs: each keeps every step's probabilities and logits (``[V]`` twice a step) and
    records every layer's attention, up to the checkpoint's decode limit."""
    cfg = ckpt.config
    src_len = ckpt.source_tensor(text).shape[-1]
    if ckpt.is_audio:
        src_len //= 2  # log-mel frames -> encoder frames (the front-end's stride)
    n_new = ckpt.limit(src_len)
    tgt_len = n_new + (src_len if cfg.decoder_only else 1)
    needed = lab_memory(cfg, 1, src_len, tgt_len, runs=2, vocab_copies=2, scored=n_new)
    refuse_oversized("what-if", cfg, needed, tgt_len)


def what_if(
    ckpt: Checkpoint,
    text: str,
    step: int,
    kind: str = "cross",
    layer: int = 0,
    heads: Sequence[int] | None = None,
    attend_to: int = 0,
    tokens: Sequence[int] | None = None,
) -> WhatIf:
    """Re-decode ``text`` with the attention of ``heads`` at ``step`` forced onto one key.

    Args:
        ckpt: a loaded checkpoint (its generation rules apply to every step).
        text: the input.
        step: the decode step to override (0 = the first output token).
        kind: ``"cross"`` (keys are source positions) or ``"decoder_self"`` (keys are the
            decoder positions 0..step).
        layer: the decoder layer.
        heads: the heads to override; None = every head of that layer.
        attend_to: the key position the overridden heads attend to (weight 1, all else 0).
        tokens: the output prefix actually fed (ids, BOS excluded; e.g. with forced tokens):
            both sides feed ``tokens[:step]`` before ``step``; None = the greedy decode's.
            Ids after ``step`` are ignored.
    Returns:
        :class:`WhatIf`.
    Raises:
        InputError: a layer, head, step or key out of range; ``tokens`` shorter than
            ``step``, holding a non-id, an id outside the vocabulary or an end token before
            ``step``.
    """
    if kind not in ("cross", "decoder_self"):
        raise InputError(f"a what-if overrides 'cross' or 'decoder_self' attention, got {kind!r}")
    cfg = ckpt.config
    layer = index_in(layer, "layer", cfg.n_decoder_layers)
    if heads is None:
        heads = list(range(cfg.n_heads))
    elif isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable) or not list(heads):
        raise InputError(
            f"heads must be a list of heads in 0..{cfg.n_heads - 1} (None: every head), "
            f"got {shorten(repr(heads))}"
        )
    heads = [index_in(h, "heads", cfg.n_heads) for h in heads]
    check_size(ckpt, text)
    original = ckpt.stepper(text)
    if tokens is not None:
        original.sync(_prefix(ckpt, tokens, step))
    if not original.done:
        original.run()
    before = _decode(ckpt, original, [s.prob for s in original.steps])
    n = len(before.tokens)
    step = index_in(step, "step", n, note=f" (this decode has {n} steps)")
    keys = original.src.shape[1] if kind == "cross" else step + 1
    attend_to = index_in(attend_to, "attend_to", keys, "a key position")

    def one_hot(w: torch.Tensor) -> torch.Tensor:  # [B, H, Tq=1, Tk]
        out = w.clone()
        out[:, heads, -1, :] = 0
        out[:, heads, -1, attend_to] = 1
        return out

    stepper = ckpt.stepper(text)
    stepper.sync(before.tokens[:step])
    stepper.edits = (ReplaceWeights(kind, layer, one_hot),)
    try:
        edited = stepper.step()
    finally:
        stepper.edits = ()
    # Keep the edited step's choice, but recompute its position without the override so
    # the following steps see the prefix only.
    stepper.back(step)
    stepper.step(token=edited.token)
    if not stepper.done:
        stepper.run()
    probs = [*before.probs[:step], edited.prob, *(s.prob for s in stepper.steps[step + 1 :])]
    return WhatIf(
        before=before,
        after=_decode(ckpt, stepper, probs),
        step=step,
        kind=kind,
        layer=layer,
        heads=heads,
        attend_to=attend_to,
        edited_attention=edited.attention[(kind, layer)],
    )
