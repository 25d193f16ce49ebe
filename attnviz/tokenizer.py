"""Character- and word-level vocabularies with pad, decoder-start, end and unknown tokens.

A tokenizer is its kind, its token list and the ids of its four special roles
(``{"pad", "bos", "eos", "unk"}``), saved as JSON inside every checkpoint and checked against
the model config there. Built-in tasks put the specials at ids 0-3 (:data:`DEFAULT_IDS`) and
their symbols after them; imported models keep their own ids, and the decoder start id may
equal the pad id. Text outside the vocabulary is never dropped silently: it maps to UNK and
:meth:`Tokenizer.encode` reports which pieces were unknown, so the caller (the app) can show
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import InputError

#: The built-in layout: ids 0-3 are pad, decoder start, end and unknown. Models brought from
#: elsewhere have their own (the model config's ``pad_id``/``bos_id``/``eos_id``/``unk_id``).
DEFAULT_IDS = {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
SPECIAL_TOKENS = dict(zip(DEFAULT_IDS, SPECIALS, strict=True))
TOKENIZER_KINDS = ("char", "word")


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
        symbols: the task's tokens, without the specials; order fixes the ids (they fill the
            ids the specials leave free, from 0 up).
        specials: ids of the roles ``pad``, ``bos`` (decoder start), ``eos`` and ``unk``
            (default :data:`DEFAULT_IDS`); ``bos`` may equal ``pad``.
    """

    def __init__(self, kind: str, symbols: Sequence[str], specials: dict[str, int] | None = None):
        specials = _check_specials(specials)
        symbols = list(symbols)
        clash = [s for s in symbols if s in SPECIALS]
        if clash:
            raise InputError(f"tokens {clash} clash with the special tokens {SPECIALS}")
        size = len(symbols) + len(set(specials.values()))
        tokens: list[str | None] = [None] * size
        for role, i in specials.items():
            if i >= size:
                raise InputError(f"special id {role}={i} is outside a vocabulary of {size}")
            if tokens[i] is None:
                tokens[i] = SPECIAL_TOKENS[role]
        free = iter(symbols)
        tokens = [t if t is not None else next(free) for t in tokens]
        self._setup(kind, tokens, specials)

    @classmethod
    def from_vocab(cls, kind: str, tokens: Sequence[str], specials: dict[str, int]) -> Tokenizer:
        """A tokenizer over a whole token list (specials included, at the ids ``specials`` names)."""
        tok = cls.__new__(cls)
        tok._setup(kind, list(tokens), _check_specials(specials))
        return tok

    def _setup(self, kind: str, tokens: list, specials: dict[str, int]) -> None:
        if kind not in TOKENIZER_KINDS:
            raise InputError(f"tokenizer kind must be one of {TOKENIZER_KINDS}, got {kind!r}")
        if not all(isinstance(t, str) for t in tokens):
            raise InputError("tokenizer tokens must be strings")
        if len(set(tokens)) != len(tokens):
            raise InputError("tokenizer symbols must be unique")
        bad = [i for i, i_ in specials.items() if not 0 <= i_ < len(tokens)]
        if bad:
            raise InputError(f"special ids {bad} are outside a vocabulary of {len(tokens)}")
        special_ids = set(specials.values())
        pieces = [(i, t) for i, t in enumerate(tokens) if i not in special_ids]
        bad = [
            t for _, t in pieces if not t or (kind == "char" and len(t) != 1 and not _reserved(t))
        ]
        bad += [t for _, t in pieces if kind == "word" and any(c.isspace() for c in t)]
        if bad:
            raise InputError(f"invalid {kind} tokens: {bad[:5]}")
        self.kind = kind
        self.tokens: list[str] = tokens
        self.specials = dict(specials)
        self.pad_id, self.bos_id = specials["pad"], specials["bos"]
        self.eos_id, self.unk_id = specials["eos"], specials["unk"]
        self._index = {t: i for i, t in pieces}  # text never turns into a special id

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
            isinstance(other, Tokenizer)
            and self.kind == other.kind
            and self.tokens == other.tokens
            and self.specials == other.specials
        )

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, size={len(self)})"

    def split(self, text: str) -> list[str]:
        """The pieces of ``text``: its characters, or its whitespace-separated words."""
        return self._split(self.kind, text)

    def encode(self, text: str) -> Encoding:
        """Text -> :class:`Encoding` (ids without start/end; unknown pieces mapped to unk)."""
        pieces = self.split(text)
        ids = [self._index.get(p, self.unk_id) for p in pieces]
        unknown = list(dict.fromkeys(p for p in pieces if p not in self._index))
        return Encoding(ids, pieces, unknown)

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text. Skips pad and start ids, stops at the first end id, shows unk as its token."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.token(i))
        return ("" if self.kind == "char" else " ").join(out)

    def token(self, i: int) -> str:
        """The token string for one id (specials included, e.g. ``"<eos>"``)."""
        if not 0 <= i < len(self.tokens):
            raise InputError(f"token id {i} is outside this vocabulary of {len(self)}")
        return self.tokens[i]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "tokens": list(self.tokens), "specials": dict(self.specials)}

    @classmethod
    def from_dict(cls, data: dict) -> Tokenizer:
        """Rebuild from :meth:`to_dict` output (a dict without ``specials`` is the built-in layout)."""
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise InputError("a tokenizer must be saved as {'kind': ..., 'tokens': [...]}")
        tokens = data["tokens"]
        if "specials" not in data and tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise InputError(f"a tokenizer's first tokens must be {SPECIALS}")
        return cls.from_vocab(data.get("kind"), tokens, data.get("specials", DEFAULT_IDS))


def _reserved(token: str) -> bool:
    """``<...>`` marks a reserved token a character vocabulary may hold (never read from text)."""
    return len(token) > 2 and token[0] == "<" and token[-1] == ">"


def _check_specials(specials: dict[str, int] | None) -> dict[str, int]:
    specials = DEFAULT_IDS if specials is None else specials
    if not isinstance(specials, dict) or set(specials) != set(DEFAULT_IDS):
        raise InputError(f"tokenizer specials must name exactly {sorted(DEFAULT_IDS)}")
    for role, i in specials.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise InputError(f"special id {role} must be a non-negative integer, got {i!r}")
    if specials["eos"] == specials["pad"]:  # a start id equal to the end id is fine (BART)
        raise InputError("the end id must differ from the pad id")
    return {role: specials[role] for role in DEFAULT_IDS}
