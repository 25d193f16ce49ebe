"""What a lab's runs hold at their peak, estimated from the config before the runs start, and
the one-line refusal when this process cannot hold it.

The labs that run a whole sequence at once keep ``[B, T, V]`` scores (logits and
probabilities: with Gemma 3's 262,144-token vocabulary, 700 positions are gigabytes) and, when
they record, every layer's attention. The Mask lab (:mod:`attnviz.analysis.masking`), head
ablation (:mod:`attnviz.analysis.ablation`) and what-ifs (:mod:`attnviz.analysis.whatif`)
ask :func:`lab_memory` and :func:`refuse_oversized` here, before their runs.
"""

from __future__ import annotations

from ..core.errors import InputError
from ..core.memory import BYTES_PER_NUMBER, available_memory

#: Part of the memory this process may use that one lab may hold.
LAB_FRACTION = 0.25
#: A lab needing less than this is never refused (tiny models on any machine).
ALWAYS_ALLOWED = 256 << 20


def lab_memory(
    cfg,
    batch_size: int,
    src_len: int,
    tgt_len: int,
    runs: int = 2,
    vocab_copies: int = 3,
    recorded: bool = True,
    scored: int | None = None,
) -> int:
    """Peak bytes of a lab's ``runs`` runs, from the config's arithmetic.

    Args:
        cfg: the model's :class:`~attnviz.ModelConfig`.
        batch_size: rows B run together; src_len / tgt_len: Ts and Tt (a decoder-only model's
            whole sequence is Tt).
        runs: runs whose results are held at once (a baseline and an edited run: 2).
        vocab_copies: ``[B, Tt, V]`` float32 tensors one run holds at its peak (logits,
            their float copy and the softmax: 3; a stepper's probabilities and logits: 2).
        recorded: whether the runs record every layer's attention (scores, weights, masks).
        scored: positions whose scores are kept (default ``tgt_len``; a stepper keeps its
            steps' only, not a prompt's).
    Returns:
        bytes.
    """
    scored = tgt_len if scored is None else scored
    scores = vocab_copies * batch_size * scored * cfg.tgt_vocab_size
    attention = 0
    if recorded:
        keys = tgt_len if cfg.decoder_only else src_len
        layers = cfg.n_encoder_layers + 2 * cfg.n_decoder_layers
        attention = 3 * layers * cfg.n_heads * batch_size * max(src_len, tgt_len) * keys
    return runs * BYTES_PER_NUMBER * (scores + attention)


def lab_budget() -> int:
    """Bytes one lab may hold: :data:`LAB_FRACTION` of what this process may still use."""
    return int(available_memory() * LAB_FRACTION)


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def refuse_oversized(what: str, cfg, needed: int, tokens: int, recorded: bool = True) -> None:
    """Refuse, in one line, a lab whose runs would hold ``needed`` bytes this process cannot
    spare (before anything runs).

    Args:
        what: the lab's run, as the message names it (``"mask experiment"``).
        tokens: the positions the runs cover (named in the message).
        recorded: whether the runs record attention (named in the message).
    Raises:
        InputError: ``needed`` is over :func:`lab_budget` (and over :data:`ALWAYS_ALLOWED`).
    """
    budget = lab_budget()
    if needed > max(budget, ALWAYS_ALLOWED):
        also = ", and the attention of every layer" if recorded else ""
        raise InputError(
            f"this {what} on {tokens:,} tokens would hold about {_size(needed)} "
            f"(a {cfg.tgt_vocab_size:,}-token vocabulary's scores at every position{also}), "
            f"more than the {_size(budget)} it may use: try a shorter input"
        )
