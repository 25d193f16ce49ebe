"""Compare two checkpoints head by head on the same inputs and targets.

Both models are teacher-forced on the same target ids (model a's greedy outputs unless
targets are given), each inside :func:`~attnviz.record`, so every compared pattern is one the
model used. Per kind, layer and head pair the Jensen–Shannon divergence (base 2, in [0, 1]) of
the two attention rows is averaged over the query rows that attend somewhere, then over texts;
heads are matched per layer by a minimum-cost assignment, so a model whose heads are merely
permuted compares as identical after matching.

Two encoder-only models each read the sentence once (:func:`~attnviz.analysis.masked_lm.score_read`):
their encoder self-attention is compared, and their output is a's top filler at each mask token
(a sentence without one: each of its tokens), scored under both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.model import KINDS
from ..decode.scoring import Scored, score_reference
from .masked_lm import fillers_text, score_read, scored_positions


@dataclass
class TokenChange:
    """One target token of one text under both models."""

    text: int
    position: int
    token: str
    prob_a: float
    prob_b: float
    rank_a: int
    rank_b: int

    @property
    def change(self) -> float:
        return self.prob_b - self.prob_a


@dataclass
class Comparison:
    """What differs between checkpoints a and b on the same inputs.

    Attributes:
        texts: the inputs.
        targets: the target ids both models were teacher-forced on, per text (EOS last).
        divergence: per kind, ``[layers, heads]`` mean JS divergence of a's head (l, h) and
            b's head (l, h).
        pairwise: per kind, ``[layers, heads_a, heads_b]`` mean JS divergence of every pair.
        matching: per kind, ``[layers, heads]``: the head of b matched to each head of a.
        matched_divergence: per kind, ``[layers, heads]`` divergence after matching.
        tokens: per text, each target token's probability and rank under a and b.
        outputs: per text, ``(a's greedy text, b's greedy text, equal)``.
        scored: per text, a's and b's teacher-forced passes (:class:`~attnviz.decode.scoring.Scored`,
            traces included) when ``compare(..., keep_scores=True)``; else empty.
    """

    texts: list[str]
    targets: list[list[int]]
    divergence: dict[str, np.ndarray] = field(default_factory=dict)
    pairwise: dict[str, np.ndarray] = field(default_factory=dict)
    matching: dict[str, np.ndarray] = field(default_factory=dict)
    matched_divergence: dict[str, np.ndarray] = field(default_factory=dict)
    tokens: list[list[TokenChange]] = field(default_factory=list)
    outputs: list[tuple[str, str, bool]] = field(default_factory=list)
    scored: list[tuple[Scored, Scored]] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        """Share of texts whose greedy outputs are equal."""
        return sum(o[2] for o in self.outputs) / max(len(self.outputs), 1)

    def most_changed(self, kind: str, k: int = 5) -> list[tuple[int, int, float]]:
        """The ``k`` heads ``(layer, head, divergence)`` of a kind that changed most."""
        d = self.divergence[kind]
        order = np.argsort(-d, axis=None)[:k]
        return [(int(i // d.shape[1]), int(i % d.shape[1]), float(d.flat[i])) for i in order]

    def largest_changes(self, k: int = 10) -> list[TokenChange]:
        """The ``k`` target tokens whose probability changed most (either way)."""
        flat = [t for row in self.tokens for t in row]
        return sorted(flat, key=lambda t: -abs(t.change))[:k]

    def to_dict(self) -> dict:
        """Plain JSON-able data (lists and numbers)."""
        return {
            "texts": self.texts,
            "targets": self.targets,
            "agreement": self.agreement,
            "outputs": [{"a": a, "b": b, "equal": eq} for a, b, eq in self.outputs],
            "divergence": {k: v.round(6).tolist() for k, v in self.divergence.items()},
            "matching": {k: v.tolist() for k, v in self.matching.items()},
            "matched_divergence": {
                k: v.round(6).tolist() for k, v in self.matched_divergence.items()
            },
            "tokens": [[vars(t) for t in row] for row in self.tokens],
        }


def check_comparable(a: Checkpoint, b: Checkpoint) -> None:
    """Raise :class:`InputError` (one line) when a and b cannot be compared head by head."""
    ca, cb = a.config, b.config
    if ca.arch != cb.arch:  # heads of different kinds: nothing to line up
        raise InputError(
            f"A is {ca.arch} and B is {cb.arch}: Compare lines up two models of one kind head "
            "by head; pick a B of A's kind"
        )
    shape = {
        "encoder layers": (ca.n_encoder_layers, cb.n_encoder_layers),
        "decoder layers": (ca.n_decoder_layers, cb.n_decoder_layers),
        "heads": (ca.n_heads, cb.n_heads),
    }
    for what, (x, y) in shape.items():
        if x != y:
            raise InputError(f"the checkpoints differ in {what}: {x} vs {y}")
    for side, (x, y) in {
        "source": (a.src_tokenizer, b.src_tokenizer),
        "target": (a.tgt_tokenizer, b.tgt_tokenizer),
    }.items():
        if (x is None) != (y is None) or (x is not None and x != y):
            raise InputError(
                f"the checkpoints use different {side} tokenizers: {tokenizer_difference(x, y)}"
            )
    ids = {"pad_id": "pad", "bos_id": "start", "eos_id": "end"}
    differ = [f"{name} {getattr(ca, i)} vs {getattr(cb, i)}" for i, name in ids.items()
              if getattr(ca, i) != getattr(cb, i)]  # fmt: skip
    if differ:
        raise InputError(f"the checkpoints use different special ids: {', '.join(differ)}")


def _describe_tokenizer(t) -> str:
    if t is None:
        return "no tokenizer (ids in, ids out)"
    kind = getattr(t, "kind", None) or type(t).__name__
    return f"a {kind} tokenizer of {len(t):,} tokens"


def tokenizer_difference(x, y) -> str:
    """What differs between two tokenizers, in words: their kind and size, else the first id
    whose token differs (``"id 5 is “c” in A and “d” in B"``), else their special ids."""
    da, db = _describe_tokenizer(x), _describe_tokenizer(y)
    if da != db:
        return f"A has {da}, B has {db}"
    for i in range(len(x)):
        try:
            ta, tb = x.token(i), y.token(i)
        except Exception:  # a tokenizer that cannot name an id: say no more than the sizes
            break
        if ta != tb:
            return f"both have {da}, but id {i} is “{ta}” in A and “{tb}” in B"
    specials = (getattr(x, "specials", None), getattr(y, "specials", None))
    if specials[0] != specials[1]:
        return f"both have {da}, with special ids {specials[0]} in A and {specials[1]} in B"
    return f"both have {da} with the same tokens, set up differently"


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in bits over the last axis (0 where both rows are all zero).

    Args:
        p, q: broadcastable ``[..., Tk]`` rows of attention weights (masked keys exactly 0).
    Returns:
        ``[...]`` divergences in [0, 1].
    """
    p, q = p.double(), q.double()
    m = (p + q) / 2

    def kl(x: torch.Tensor) -> torch.Tensor:
        ratio = torch.where(x > 0, x / torch.where(m > 0, m, 1.0), 1.0)
        return (x * torch.log2(ratio)).sum(-1)

    return ((kl(p) + kl(q)) / 2).clamp(0.0, 1.0)


def _pairwise(wa: torch.Tensor, wb: torch.Tensor) -> np.ndarray:
    """``[H, Tq, Tk]`` x2 -> ``[H, H]`` mean JSD over the rows that attend somewhere."""
    live = (wa.sum(-1) > 0) & (wb.sum(-1) > 0)  # [H, Tq]: rows not fully masked
    out = np.zeros((wa.shape[0], wb.shape[0]))
    for i in range(wa.shape[0]):
        d = js_divergence(wa[i][None], wb)  # [H, Tq]
        rows = live[i][None] & live  # [H, Tq]
        out[i] = ((d * rows).sum(-1) / rows.sum(-1).clamp(min=1)).numpy()
    return out


def _layers(ckpt: Checkpoint, kind: str) -> int:
    """Layers of ``kind`` the model has (0 for the kinds a one-stack model lacks)."""
    cfg = ckpt.config
    if kind == "encoder_self":
        return cfg.n_encoder_layers if cfg.has_encoder else 0
    if kind == "cross":
        return cfg.n_decoder_layers if cfg.has_cross else 0
    return cfg.n_decoder_layers if cfg.has_decoder else 0


def compare(
    a: Checkpoint,
    b: Checkpoint,
    texts: Sequence[str],
    targets: Sequence[str | Sequence[int]] | None = None,
    keep_scores: bool = False,
) -> Comparison:
    """Compare checkpoints ``a`` and ``b`` head by head on ``texts``.

    Args:
        a, b: checkpoints with the same tokenizers and the same layers and heads per kind.
        texts: inputs (at least one).
        targets: references (text or target ids) to teacher-force, one per text; default: a's
            greedy output for each text (encoder-only: one id per scored position; default
            a's top fillers, or each token of a sentence without a mask token).
        keep_scores: keep both teacher-forced passes per text in ``Comparison.scored`` (their
            traces: memory grows with the texts).
    Returns:
        :class:`Comparison`.
    """
    check_comparable(a, b)
    texts = list(texts)
    if not texts:
        raise InputError("give at least one input to compare the checkpoints on")
    if targets is not None and len(targets) != len(texts):
        raise InputError(f"{len(texts)} inputs but {len(targets)} targets")
    out = Comparison(texts=texts, targets=[])
    sums = {k: np.zeros((_layers(a, k), a.config.n_heads, a.config.n_heads)) for k in KINDS}
    for i, text in enumerate(texts):
        if a.config.encoder_only:  # one read pass each, scored on a's fillers
            sa = score_read(a, text, None if targets is None else targets[i])
            sb = score_read(b, text, sa.ids)
            at = scored_positions(a, a.encode_source(text).ids)
            out.outputs.append((fillers_text(a, sa.argmax, at), fillers_text(b, sb.argmax, at),
                                sa.argmax == sb.argmax))  # fmt: skip
        else:
            pa, pb = a.predict_details(text), b.predict_details(text)
            out.outputs.append((pa.text, pb.text, pa.tokens == pb.tokens))
            target = pa.tokens if targets is None else targets[i]
            sa: Scored = score_reference(a, text, target)
            sb: Scored = score_reference(b, text, sa.ids)
        out.targets.append(sa.ids)
        if keep_scores:
            out.scored.append((sa, sb))
        out.tokens.append(
            [
                TokenChange(i, t, sa.tokens[t], sa.probs[t], sb.probs[t], sa.ranks[t], sb.ranks[t])
                for t in range(len(sa.ids))
            ]
        )
        for kind in KINDS:
            for layer in range(_layers(a, kind)):
                wa = sa.trace.weights(kind, layer)[0].float().cpu()  # [H, Tq, Tk]
                wb = sb.trace.weights(kind, layer)[0].float().cpu()
                sums[kind][layer] += _pairwise(wa, wb)
    for kind in KINDS:
        pair = sums[kind] / len(texts)  # [L, H, H]
        out.pairwise[kind] = pair
        out.divergence[kind] = np.stack([np.diag(p) for p in pair]) if len(pair) else pair[:, 0]
        match = np.zeros(pair.shape[:2], dtype=int)
        matched = np.zeros(pair.shape[:2])
        for layer, p in enumerate(pair):
            rows, cols = _assignment(p)
            match[layer, rows] = cols
            matched[layer, rows] = p[rows, cols]
        out.matching[kind], out.matched_divergence[kind] = match, matched
    return out


def _assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns of the cheapest one-to-one matching of ``cost`` ``[H, H]``
    (scipy, imported here: it takes a quarter of a second that ``import attnviz`` need not
    pay)."""
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment(cost)
