"""Head statistics: what each attention head does, in numbers and in plain words.

Every statistic is a mean over the valid query rows of a head (rows whose query is not
padding and that may attend to at least one key). Positions are 0-based. For a row ``i``:

- ``entropy``: ``-sum_j w_ij log w_ij`` (nats); ``norm_entropy`` divides by ``log(n_i)``,
  ``n_i`` the number of keys row ``i`` may attend to (rows with one key are left out of it);
- ``max_weight``: the row's largest weight;
- ``diagonal``: ``w_ii``; ``anti_diagonal``: ``w_i,L-1-i`` with ``L`` the key sequence's
  unpadded length (the mirror position, what reversal needs); ``previous``: ``w_i,i-1``;
  ``first``: ``w_i0``; ``last``: weight on the last unpadded key; ``eos``: weight on keys
  that are EOS tokens (only when key ids are given);
- ``bos``, ``punct``: weight on keys that are the start token or punctuation; ``sink``: weight
  on keys that are start, end, punctuation or the first position: where heads park weight
  they do not use (a "sink"; only when key ids are given);
- ``distance``: ``sum_j w_ij |i - j|``, the mean attention distance.

A role from statistics alone never calls a head dead: a near-uniform head may still be needed
(it can average the whole input). :func:`with_ablation` names a uniform-looking head dead
only when zeroing it also changes nothing, and "broad" when zeroing it moves outputs.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..core.devices import as_numpy
from ..core.record import Trace

METRICS = (
    "entropy",
    "norm_entropy",
    "max_weight",
    "diagonal",
    "anti_diagonal",
    "previous",
    "first",
    "last",
    "eos",
    "bos",
    "punct",
    "sink",
    "distance",
)
KEY_CLASSES = ("eos", "bos", "punct", "sink")  # metrics that need to know what each key is
#: A head is "mostly sink" when at least this share of its weight lands on sink keys.
SINK_SHARE = 0.5


def _np(x) -> np.ndarray | None:
    if x is None or isinstance(x, np.ndarray):
        return x
    return as_numpy(x)


def matrix_stats(
    weights,
    mask=None,
    query_valid=None,
    key_is_eos=None,
    key_is: dict | None = None,
) -> dict[str, np.ndarray]:
    """Statistics of attention matrices, averaged over valid rows.

    Args:
        weights: ``[..., Tq, Tk]`` attention weights (numpy or tensor), e.g. ``[B, H, Tq, Tk]``.
        mask: bool, True = blocked, broadcastable to ``weights`` (default: nothing blocked).
        query_valid: bool ``[..., Tq]`` broadcastable to the rows, False for padded queries.
        key_is_eos: bool ``[..., Tk]`` broadcastable to the keys, True where the key is EOS.
        key_is: the same for any of :data:`KEY_CLASSES` (``{"bos": ..., "sink": ...}``).
    Returns:
        ``{metric: array [...]}``, one value per matrix (``[B, H]`` for ``[B, H, Tq, Tk]``),
        NaN where a matrix has no valid row.
    """
    w = np.asarray(_np(weights), dtype=np.float64)
    *lead, tq, tk = w.shape
    blocked = np.broadcast_to(
        np.zeros((1,) * w.ndim, bool) if mask is None else _np(mask).astype(bool), w.shape
    )
    allowed = ~blocked
    n_keys = allowed.sum(-1)  # [..., Tq]
    rows = n_keys > 0
    if query_valid is not None:
        rows = rows & np.broadcast_to(_np(query_valid).astype(bool), rows.shape)
    i = np.arange(tq)[:, None]
    j = np.arange(tk)[None, :]
    # unpadded key length: one past the last key any row of this matrix may see
    seen = allowed.any(-2)  # [..., Tk]
    length = np.where(seen.any(-1), tk - np.argmax(seen[..., ::-1], -1), 0)  # [...]
    length = length[..., None, None]

    keys = {**(key_is or {}), **({"eos": key_is_eos} if key_is_eos is not None else {})}

    def share(select: np.ndarray) -> np.ndarray:
        return (w * select).sum(-1)  # [..., Tq]

    # rows past the unpadded key length have no diagonal or mirror position: left out
    in_keys = (i < length)[..., 0]  # [..., Tq]
    after_first = (i >= 1)[..., 0] & ((i - 1) < length)[..., 0]

    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(w > 0, np.log(np.where(w > 0, w, 1.0)), 0.0)
        entropy = -(w * logs).sum(-1)
        norm = np.where(n_keys > 1, entropy / np.log(np.maximum(n_keys, 2)), np.nan)
    per_row = {
        "entropy": entropy,
        "norm_entropy": norm,
        "max_weight": w.max(-1),
        "diagonal": np.where(in_keys, share(i == j), np.nan),
        "anti_diagonal": np.where(in_keys, share(j == length - 1 - i), np.nan),
        "previous": np.where(after_first, share(j == i - 1), np.nan),
        "first": share(j == 0),
        "last": share(j == length - 1),
        **{
            name: (
                share(np.broadcast_to(_np(keys[name]).astype(bool)[..., None, :], w.shape))
                if keys.get(name) is not None
                else np.full(rows.shape, np.nan)
            )
            for name in KEY_CLASSES
        },
        "distance": (w * np.abs(i - j)).sum(-1),
    }
    out = {}
    for name, values in per_row.items():
        values = np.broadcast_to(values, rows.shape)
        use = rows & ~np.isnan(values)
        with np.errstate(invalid="ignore"):
            out[name] = np.where(
                use.any(-1), np.where(use, values, 0).sum(-1) / np.maximum(use.sum(-1), 1), np.nan
            )
    return out


@dataclass(frozen=True)
class HeadStats:
    """Statistics of one head (see the module docstring) and a plain-words role guess."""

    kind: str
    layer: int
    head: int
    entropy: float
    norm_entropy: float
    max_weight: float
    diagonal: float
    anti_diagonal: float
    previous: float
    first: float
    last: float
    eos: float
    bos: float
    punct: float
    sink: float
    distance: float
    role: str

    def to_dict(self) -> dict:
        return asdict(self)


# A head is named after the position pattern that takes the largest share of its weight,
# when that share is at least PATTERN_SHARE; near-uniform heads are named first.
UNIFORM_ENTROPY = 0.9
PATTERN_SHARE = 0.4
#: A head "changes nothing" when zeroing it changes no greedy output and moves no
#: next-token probability by this much or more.
NO_EFFECT = 0.01
UNIFORM_ROLE = "uniform-looking head"
DEAD_ROLE = "dead head (uniform, no effect)"
BROAD_ROLE = "broad head (uniform-looking but needed)"
_PATTERNS = {
    "anti_diagonal": "reversal head",
    "diagonal": "diagonal/copy head",
    "previous": "previous-token head",
    "eos": "EOS head",
    "first": "first-token head",
    "last": "last-token head",
}


def role_of(metrics: dict[str, float]) -> str:
    """A plain-words guess of what a head does, from its statistics."""

    def value(name: str) -> float:
        v = metrics.get(name)
        return -1.0 if v is None or np.isnan(v) else float(v)

    if value("norm_entropy") >= UNIFORM_ENTROPY:
        return UNIFORM_ROLE
    best = max(_PATTERNS, key=value)
    if value(best) >= PATTERN_SHARE:
        return _PATTERNS[best]
    if value("max_weight") >= 0.5:
        return "sharp content-based head"
    return "mixed head"


def punctuation_ids(tokens: Sequence[str]) -> list[int]:
    """Ids of tokens made only of punctuation (a sentencepiece ``▁`` word mark ignored)."""
    out = []
    for i, t in enumerate(tokens):
        t = t.replace("▁", "")
        if t and all(unicodedata.category(c).startswith("P") for c in t):
            out.append(i)
    return out


def head_stats(
    trace: Trace,
    src_pad_mask=None,
    tgt_pad_mask=None,
    src_ids=None,
    tgt_ids=None,
    eos_id: int | None = None,
    bos_id: int | None = None,
    punct_ids: Sequence[int] = (),
) -> list[HeadStats]:
    """Statistics of every kind/layer/head in a trace, over its whole batch.

    Args:
        trace: from :func:`attnviz.core.record` (a forward pass or ``GreedyStepper.trace()``).
        src_pad_mask / tgt_pad_mask: ``[B, Ts]`` / ``[B, Tt]`` bool, True at padding; padded
            queries are left out (padded keys are already blocked in the trace's mask).
        src_ids / tgt_ids: ``[B, Ts]`` / ``[B, Tt]`` key ids (the decoder's: its inputs, start
            token first), to measure weight on end, start, punctuation and sink keys;
            ``eos_id``, ``bos_id``, ``punct_ids`` say which ids those are.
    Returns:
        one :class:`HeadStats` per head, in trace order (kind, layer, head).
    """
    pads = {"src": _np(src_pad_mask), "tgt": _np(tgt_pad_mask)}
    ids = {"src": _np(src_ids), "tgt": _np(tgt_ids)}
    sides = {
        "encoder_self": ("src", "src"),
        "decoder_self": ("tgt", "tgt"),
        "cross": ("tgt", "src"),
    }
    out = []
    for kind, layer in trace.keys():
        q_side, k_side = sides[kind]
        weights = trace.numpy(kind, layer, "weights")  # [B, H, Tq, Tk]
        mask = trace.numpy(kind, layer, "mask").astype(bool)  # [B, 1, Tq, Tk]
        q_valid = None if pads[q_side] is None else ~pads[q_side].astype(bool)[:, None, :]
        m = matrix_stats(
            weights, mask, q_valid, key_is=_key_classes(ids[k_side], eos_id, bos_id, punct_ids)
        )
        for h in range(weights.shape[1]):
            values = {
                k: float(np.nanmean(v[:, h])) if not np.isnan(v[:, h]).all() else float("nan")
                for k, v in m.items()
            }
            out.append(HeadStats(kind, layer, h, **values, role=role_of(values)))
    return out


def _key_classes(ids, eos_id, bos_id, punct_ids) -> dict[str, np.ndarray]:
    """``{class: bool [B, 1, Tk]}`` for the keys ``ids`` ``[B, Tk]`` (empty without ids); the
    end and start classes only where their id is given."""
    if ids is None:
        return {}
    ids = np.asarray(ids)
    classes = {name: ids == i for name, i in (("eos", eos_id), ("bos", bos_id)) if i is not None}
    classes["punct"] = np.isin(ids, list(punct_ids))
    first = np.zeros(ids.shape, bool)
    first[:, :1] = True
    classes["sink"] = first | np.logical_or.reduce(list(classes.values()))
    return {k: v[:, None, :] for k, v in classes.items()}


def sink_heads(stats: Iterable[HeadStats], share: float = SINK_SHARE) -> list[HeadStats]:
    """Heads that park most of their weight on sink keys (start, end, punctuation, first).

    A uniform-looking head (normalised entropy >= :data:`UNIFORM_ENTROPY`) is no sink, however
    much of its weight lands there: on a short input the sink keys are simply many of the
    keys (3 of 6 get half of a uniform head's weight)."""
    return [
        s
        for s in stats
        if not np.isnan(s.sink) and s.sink >= share and not s.norm_entropy >= UNIFORM_ENTROPY
    ]


def changes_nothing(effect) -> bool:
    """Whether zeroing a head changed no output and no probability by :data:`NO_EFFECT`.

    Args:
        effect: an :class:`attnviz.analysis.HeadEffect` (``changed_outputs``,
            ``max_prob_change``).
    """
    return effect.changed_outputs == 0 and effect.max_prob_change < NO_EFFECT


def with_ablation(stats: Iterable[HeadStats], effects: Iterable) -> list[HeadStats]:
    """Head statistics whose roles also say what zeroing each head did.

    A uniform-looking head is renamed :data:`DEAD_ROLE` when zeroing it changes nothing
    (:func:`changes_nothing`) and :data:`BROAD_ROLE` when it does; other roles and heads
    without an effect measured are kept.

    Args:
        stats: from :func:`head_stats`.
        effects: :class:`attnviz.analysis.HeadEffect` per head (from ``head_effects``).
    Returns:
        the statistics in the same order, roles updated.
    """
    by_site = {(e.kind, e.layer, e.head): e for e in effects}
    out = []
    for s in stats:
        effect = by_site.get((s.kind, s.layer, s.head))
        if s.role == UNIFORM_ROLE and effect is not None:
            s = replace(s, role=DEAD_ROLE if changes_nothing(effect) else BROAD_ROLE)
        out.append(s)
    return out
