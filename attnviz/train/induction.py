"""Induction heads, measured: previous-token and induction scores of every decoder
self-attention head on repeated random tokens, and the loss on each half.

The sequences are ``<bos> r r`` with ``r`` a run of ``length`` distinct random tokens. With
TransformerLens's definitions, a head's **previous-token score** is its mean attention from
each position ``t >= 1`` to ``t - 1``; its **induction score** is its mean attention from each
position of the second run to the position just after the earlier occurrence of the same
token (``t - length + 1``): the head that lets a model copy what followed last time.
The **in-context loss** compares the next-token loss on the second run (predictable by
looking back) with that on the first (random): a model that has formed induction heads
predicts the second far better.

Training measures these at every snapshot of the ``repeat`` task, so the Training playback
shows the scores rise as the loss on the second half falls;
:func:`attnviz.analysis.induction_scores` measures any decoder-only checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.errors import InputError
from ..core.model import Transformer
from ..core.record import record


@dataclass
class InductionScores:
    """Per-head scores and the two halves' losses.

    Attributes:
        prev_token: ``[L, H]`` mean attention to the previous position.
        induction: ``[L, H]`` mean attention to the token after the earlier occurrence.
        loss_first: mean next-token loss (nats) predicting the first run's tokens.
        loss_second: the same on the second run's tokens (the in-context part).
        n, length: sequences measured and the run length.
    """

    prev_token: Tensor
    induction: Tensor
    loss_first: float
    loss_second: float
    n: int
    length: int

    @property
    def in_context_gain(self) -> float:
        """``loss_second - loss_first``: negative when the model uses the context."""
        return self.loss_second - self.loss_first

    def best(self, which: str) -> tuple[int, int, float]:
        """``(layer, head, score)`` of the highest ``"induction"`` or ``"prev_token"`` score."""
        table = getattr(self, which)
        flat = int(table.argmax())
        layer, head = divmod(flat, table.shape[1])
        return layer, head, float(table[layer, head])

    def to_dict(self) -> dict:
        return {
            "prev_token": [[round(float(v), 5) for v in row] for row in self.prev_token],
            "induction": [[round(float(v), 5) for v in row] for row in self.induction],
            "loss_first": round(self.loss_first, 5),
            "loss_second": round(self.loss_second, 5),
            "n": self.n,
            "length": self.length,
        }


def best_of(scores: dict) -> tuple[float, float]:
    """``(induction, previous-token)``: the best induction score of layers 1 and up (layer 0
    for a one-layer model) and the best previous-token score of layer 0, from one
    :meth:`InductionScores.to_dict`."""
    later = scores["induction"][1:] or scores["induction"]
    return max(max(row) for row in later), max(scores["prev_token"][0])


def repeated_tokens(
    symbols: Sequence[int], bos_id: int, n: int, length: int, seed: int = 0
) -> Tensor:
    """``n`` sequences ``<bos> r r``, each ``r`` ``length`` distinct ids drawn from ``symbols``.

    Returns:
        ``[n, 1 + 2 * length]`` long ids.
    """
    if length < 2 or length > len(symbols):
        raise InputError(f"length must be 2 to {len(symbols)} (distinct tokens), got {length}")
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    gen = torch.Generator().manual_seed(seed)
    pool = torch.as_tensor(list(symbols), dtype=torch.long)
    runs = torch.stack([pool[torch.randperm(len(pool), generator=gen)[:length]] for _ in range(n)])
    bos = torch.full((n, 1), bos_id, dtype=torch.long)
    return torch.cat([bos, runs, runs], dim=1)


def head_scores(weights: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """Previous-token and induction scores of one layer's heads.

    Args:
        weights: ``[B, H, T, T]`` attention on ``<bos> r r`` sequences (``T = 1 + 2 * length``).
    Returns:
        ``(prev_token [H], induction [H])``.
    """
    t = weights.shape[-1]
    if t != 1 + 2 * length:
        raise InputError(f"weights over {t} positions are not <bos> plus two runs of {length}")
    w = weights.float()
    prev = torch.diagonal(w, offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))  # [H]
    # cell i of this diagonal is query i + length - 1, key i; the second run's queries
    # 1 + length .. 2 * length are cells 2 .. length + 1
    ind = torch.diagonal(w, offset=-(length - 1), dim1=-2, dim2=-1)[..., 2:]
    return prev, ind.mean(dim=(0, 2))


@torch.no_grad()
def measure(model: Transformer, ids: Tensor, length: int) -> InductionScores:
    """Scores of every decoder self-attention head, and the two halves' losses, on ``ids``
    from :func:`repeated_tokens` (``[B, 1 + 2 * length]``). The model must be decoder-only."""
    if model.config.has_encoder:
        raise InputError(
            f"induction scores are measured on decoder-only models; this one is {model.config.arch}"
        )
    was = model.training
    model.eval()
    ids = ids.to(next(model.parameters()).device)
    with record(model, capture=("weights",)) as trace:
        logits = model(ids)  # [B, T, V]
    model.train(was)
    layers = sorted(layer for kind, layer in trace.keys() if kind == "decoder_self")
    pairs = [head_scores(trace.weights("decoder_self", i), length) for i in layers]
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")
    return InductionScores(
        prev_token=torch.stack([p for p, _ in pairs]).cpu(),
        induction=torch.stack([q for _, q in pairs]).cpu(),
        loss_first=float(losses[:, :length].mean()),
        loss_second=float(losses[:, length:].mean()),
        n=ids.shape[0],
        length=length,
    )
