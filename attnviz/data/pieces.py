"""How a subword vocabulary cuts a corpus, and the default size chosen from it.

A vocabulary too large for its corpus cuts it into pieces seen a handful of times each, which
a model cannot learn: 29,700 pairs of number words (English -> German compounds) at 8,000
target pieces are 2 pieces a target, most seen fewer than 10 times, and train to 0.525 exact
match on held-out numbers; at the 280 pieces chosen the same run reaches 0.998.
:func:`choose_subword` picks the
largest size whose pieces the corpus shows often enough; :class:`PieceStats` is what a
training run prints about the tokenizers (and warns about).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from .tokenizer import DEFAULT_VOCAB_SIZE, Tokenizer

#: The subword vocabulary a corpus gets at most unless ``--vocab-size`` says otherwise.
VOCAB_CAP = DEFAULT_VOCAB_SIZE
#: Sizes tried below the cap (each 0.8 of the one before): the smallest is 64.
VOCAB_STEP, VOCAB_FLOOR = 0.8, 64
#: A piece is learnable when the training text holds it this often (Gowda & May 2020,
#: "Finding the optimal vocabulary size for NMT": 95 % of the classes with 100 examples) ...
MIN_PIECE_COUNT = 100
#: ... and the default vocabulary is the largest one in which this share of the pieces in use
#: is learnable.
LEARNABLE_SHARE = 0.95
#: Pieces seen fewer times than this are rare (the statistic printed, and warned about).
RARE_COUNT = 10
#: Warn when more than this share of the pieces in use are rare ...
RARE_WARN = 0.25
#: ... or more than this share of the dev set's pieces are unknown.
UNKNOWN_WARN = 0.005


@dataclass(frozen=True)
class PieceStats:
    """How a tokenizer cuts a corpus: what decides whether its pieces can be learnt.

    Attributes:
        size: the vocabulary size (special ids included).
        pieces_per_text: mean pieces a training text.
        used: distinct pieces the training text uses.
        rare_share: share of the used pieces seen fewer than :data:`RARE_COUNT` times.
        learnable_share: share of the used pieces of two or more characters seen at least
            :data:`MIN_PIECE_COUNT` times (single characters are in a vocabulary of any size,
            so no size makes a rare one learnable).
        dev_unknown: share of the dev texts' pieces that are the unknown id (None: no dev).
    """

    size: int
    pieces_per_text: float
    used: int
    rare_share: float
    learnable_share: float
    dev_unknown: float | None = None

    def line(self) -> str:
        unk = "" if self.dev_unknown is None else f", {self.dev_unknown:.2%} unknown on dev"
        return (
            f"{self.size:,} pieces, {self.pieces_per_text:.1f} a sentence, {self.used:,} in use "
            f"({self.rare_share:.0%} seen < {RARE_COUNT} times; {self.learnable_share:.0%} of "
            f"those longer than a character seen >= {MIN_PIECE_COUNT} times){unk}"
        )

    def warnings(self, side: str) -> list[str]:
        """What looks bad, each with what to do about it."""
        out = []
        if self.rare_share > RARE_WARN:
            out.append(
                f"warning: {self.rare_share:.0%} of the {side} pieces in use are seen fewer than "
                f"{RARE_COUNT} times, too few to learn: leave --vocab-size unset (chosen from "
                "the corpus) or give a smaller one"
            )
        if self.dev_unknown is not None and self.dev_unknown > UNKNOWN_WARN:
            out.append(
                f"warning: {self.dev_unknown:.1%} of the {side} dev pieces are unknown (characters "
                "the training text lacks): add --byte-fallback or more training text"
            )
        return out


_BYTE = re.compile(r"<0x[0-9A-F]{2}>")


def piece_stats(
    tok: Tokenizer, texts: Sequence[str], dev: Sequence[str] | None = None
) -> PieceStats:
    """:class:`PieceStats` of ``tok`` on the training ``texts`` (and the ``dev`` texts)."""
    ids, lengths = tok.encode_flat(list(texts))
    counts = np.bincount(ids, minlength=len(tok))
    counts[sorted(set(tok.specials.values()))] = 0  # unknown pieces are not a class to learn
    used = counts[counts > 0]
    longer = np.array([len(tok.token(i)) > 1 and not _BYTE.fullmatch(tok.token(i))
                       for i in range(len(tok))])  # fmt: skip
    merged = counts[(counts > 0) & longer]
    unknown = None
    if dev:
        dev_ids, _ = tok.encode_flat(list(dev))
        unknown = float(np.mean(dev_ids == tok.unk_id)) if len(dev_ids) else 0.0
    return PieceStats(
        size=len(tok),
        pieces_per_text=float(lengths.mean()) if len(lengths) else 0.0,
        used=len(used),
        rare_share=float(np.mean(used < RARE_COUNT)) if len(used) else 0.0,
        learnable_share=float(np.mean(merged >= MIN_PIECE_COUNT)) if len(merged) else 1.0,
        dev_unknown=unknown,
    )


def _learnable(stats: PieceStats) -> bool:
    return stats.learnable_share >= LEARNABLE_SHARE


def choose_subword(kind: str, texts: Sequence[str], byte_fallback: bool) -> Tokenizer:
    """The largest subword vocabulary (at most :data:`VOCAB_CAP`) whose pieces the corpus
    shows often enough to learn: :data:`LEARNABLE_SHARE` of those in use that are longer than
    a character at least :data:`MIN_PIECE_COUNT` times in ``texts``. Larger vocabularies cut a small corpus into pieces seen a
    handful of times each, which a model cannot learn (see the module's docstring). Sizes step down by :data:`VOCAB_STEP` from the
    cap, found by bisection (the share grows as the vocabulary shrinks); a corpus big enough
    for the cap trains one tokenizer. A corpus too small for any size to pass gets the size
    tried that came nearest.
    """
    from .tokenizer import train_tokenizer

    extra = 256 if byte_fallback else 0

    def fit(size: int) -> tuple[Tokenizer, PieceStats]:
        tok = train_tokenizer(kind, texts, vocab_size=size + extra, byte_fallback=byte_fallback)
        return tok, piece_stats(tok, texts)

    tried = {VOCAB_CAP: fit(VOCAB_CAP)}
    if _learnable(tried[VOCAB_CAP][1]):
        return tried[VOCAB_CAP][0]
    sizes = []  # candidates below the cap and below what the corpus fills, largest first
    size = min(VOCAB_CAP, len(tried[VOCAB_CAP][0]) - extra)
    while size * VOCAB_STEP >= VOCAB_FLOOR:
        size = int(size * VOCAB_STEP)
        sizes.append(size)
    lo, hi = 0, len(sizes)  # sizes[:lo] are not learnable, sizes[hi:] are (or too small)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            tried[sizes[mid]] = fit(sizes[mid])
        except InputError:  # too small for the alphabet (Unigram): larger ones only
            hi = mid
            continue
        if _learnable(tried[sizes[mid]][1]):
            hi = mid
        else:
            lo = mid + 1
    good = [n for n, (_, st) in tried.items() if _learnable(st)]
    if not good:  # a small corpus: the size tried whose pieces came nearest, the larger on ties
        good = [max(tried, key=lambda n: (tried[n][1].learnable_share, n))]
    return tried[max(good)][0]
