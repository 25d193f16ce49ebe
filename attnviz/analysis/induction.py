"""Induction heads in a checkpoint: each decoder self-attention head's previous-token and
induction scores on repeated random tokens, and the in-context loss (TransformerLens's
definitions; see :mod:`attnviz.train.induction`).

    from attnviz.analysis import induction_scores
    s = induction_scores(ckpt, n=100, length=20)
    s.best("induction")      # (layer, head, score)
"""

from __future__ import annotations

from ..checkpoint import Checkpoint, load_checkpoint
from ..core.errors import InputError
from ..core.specials import not_text_ids
from ..train.induction import InductionScores, measure, repeated_tokens

__all__ = ["InductionScores", "induction_scores", "symbol_ids"]


def symbol_ids(ckpt: Checkpoint) -> list[int]:
    """The ids random sequences are drawn from: the vocabulary without its special ids
    (pad, start, end, unknown, and the prompt's separator)."""
    cfg = ckpt.config
    sep = [] if ckpt.prompt is None else [ckpt.prompt.sep_id]
    special = not_text_ids(cfg, unk=True, more=sep)
    return [i for i in range(cfg.tgt_vocab_size) if i not in special]


def induction_scores(
    ckpt: Checkpoint | str, n: int = 100, length: int = 20, seed: int = 0
) -> InductionScores:
    """Previous-token and induction score of every head, and the loss on each half.

    Args:
        ckpt: a decoder-only checkpoint (or its folder).
        n: sequences ``<bos> r r`` measured; ``length``: tokens in each run ``r`` (distinct).
        seed: which random runs.
    Returns:
        :class:`~attnviz.train.induction.InductionScores`: ``prev_token`` and ``induction``
        ``[L, H]``, ``loss_first`` and ``loss_second``.
    Raises:
        InputError: not a decoder-only model, or ``1 + 2 * length`` positions it does not have.
    """
    if not isinstance(ckpt, Checkpoint):
        ckpt = load_checkpoint(ckpt)
    if ckpt.config.has_encoder:
        raise InputError(
            f"induction scores are measured on decoder-only models; this one is {ckpt.config.arch}"
        )
    if 1 + 2 * length > ckpt.config.max_len:
        raise InputError(
            f"--length {length} needs {1 + 2 * length} positions; this model has "
            f"{ckpt.config.max_len}"
        )
    ids = repeated_tokens(symbol_ids(ckpt), ckpt.config.bos_id, n, length, seed)
    return measure(ckpt.model, ids, length)


def table(scores: InductionScores) -> str:
    """The scores as text: one line per layer, previous-token / induction per head."""
    heads = scores.prev_token.shape[1]
    lines = [
        f"{scores.n} sequences <bos> r r, r = {scores.length} distinct random tokens",
        "layer  " + "  ".join(f"h{h}: prev / induction" for h in range(heads)),
    ]
    for layer in range(scores.prev_token.shape[0]):
        cells = [
            f"{float(scores.prev_token[layer, h]):.3f} / {float(scores.induction[layer, h]):.3f}"
            for h in range(heads)
        ]
        lines.append(f"{layer:>5}  " + "  ".join(f"{c:>20}" for c in cells))
    for which in ("prev_token", "induction"):
        layer, head, value = scores.best(which)
        lines.append(
            f"best {which.replace('_', '-')} head: layer {layer} head {head} ({value:.3f})"
        )
    lines.append(
        f"loss on the first run {scores.loss_first:.3f}, on the repeat {scores.loss_second:.3f} "
        f"(in-context gain {scores.in_context_gain:+.3f} nats a token)"
    )
    return "\n".join(lines)
