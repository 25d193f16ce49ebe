"""Character- and word-level vocabularies with PAD/BOS/EOS/UNK.

Ids 0-3 are always ``<pad> <bos> <eos> <unk>``; the task's symbols follow in a fixed order,
so a tokenizer is fully described by its kind and token list and is saved as JSON inside
every checkpoint. Text outside the vocabulary is never dropped silently: it maps to UNK and
:meth:`Tokenizer.encode` reports which pieces were unknown, so the caller (the app) can show
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import InputError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
KINDS = ("char", "word")


@dataclass(frozen=True)
class Encoding:
    """One encoded text.

    Attributes:
        ids: token ids (no BOS/EOS), one per piece.
        pieces: the text split into characters or words, aligned with ``ids``.
        unknown: the pieces that are not in the vocabulary (each mapped to UNK), in order of
            first appearance.
    """

    ids: list[int]
    pieces: list[str]
    unknown: list[str]


class Tokenizer:
    """Maps text to ids and back at character (``"char"``) or word (``"word"``) level.

    Args:
        kind: ``"char"`` (every character is a token, spaces included) or ``"word"`` (tokens
            are whitespace-separated words).
        symbols: the task's tokens, without the four specials; order fixes the ids (the
            first symbol gets id 4).
    """

    def __init__(self, kind: str, symbols: Sequence[str]):
        if kind not in KINDS:
            raise InputError(f"tokenizer kind must be one of {KINDS}, got {kind!r}")
        symbols = list(symbols)
        clash = [s for s in symbols if s in SPECIALS]
        if clash:
            raise InputError(f"tokens {clash} clash with the special tokens {SPECIALS}")
        if len(set(symbols)) != len(symbols):
            raise InputError("tokenizer symbols must be unique")
        bad = [s for s in symbols if not s or (kind == "char" and len(s) != 1)]
        bad += [s for s in symbols if kind == "word" and any(c.isspace() for c in s)]
        if bad:
            raise InputError(f"invalid {kind} tokens: {bad[:5]}")
        self.kind = kind
        self.tokens: list[str] = [*SPECIALS, *symbols]
        self._index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def from_texts(cls, kind: str, texts: Iterable[str]) -> Tokenizer:
        """A tokenizer whose vocabulary is every piece seen in ``texts``, sorted."""
        pieces: set[str] = set()
        for text in texts:
            pieces.update(cls._split(kind, text))
        return cls(kind, sorted(pieces))

    @staticmethod
    def _split(kind: str, text: str) -> list[str]:
        return list(text) if kind == "char" else text.split()

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tokenizer) and self.kind == other.kind and self.tokens == other.tokens
        )

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, size={len(self)})"

    def split(self, text: str) -> list[str]:
        """The pieces of ``text``: its characters, or its whitespace-separated words."""
        return self._split(self.kind, text)

    def encode(self, text: str) -> Encoding:
        """Text -> :class:`Encoding` (ids without BOS/EOS; unknown pieces mapped to UNK)."""
        pieces = self.split(text)
        ids = [self._index.get(p, UNK) for p in pieces]
        unknown = list(dict.fromkeys(p for p, i in zip(pieces, ids, strict=True) if i == UNK))
        return Encoding(ids, pieces, unknown)

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text. Skips PAD and BOS, stops at the first EOS, shows UNK as ``<unk>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS and stop_at_eos:
                break
            if i in (PAD, BOS):
                continue
            out.append(self.token(i))
        return ("" if self.kind == "char" else " ").join(out)

    def token(self, i: int) -> str:
        """The token string for one id (specials included, e.g. ``"<eos>"``)."""
        if not 0 <= i < len(self.tokens):
            raise InputError(f"token id {i} is outside this vocabulary of {len(self)}")
        return self.tokens[i]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "tokens": list(self.tokens)}

    @classmethod
    def from_dict(cls, data: dict) -> Tokenizer:
        """Rebuild from :meth:`to_dict` output, checking the specials are where they belong."""
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise InputError("a tokenizer must be saved as {'kind': ..., 'tokens': [...]}")
        tokens = data["tokens"]
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise InputError(f"a tokenizer's first tokens must be {SPECIALS}")
        if not all(isinstance(t, str) for t in tokens):
            raise InputError("tokenizer tokens must be strings")
        return cls(data.get("kind"), tokens[len(SPECIALS) :])
