"""Character, word and subword (BPE, Unigram) vocabularies with pad, decoder-start, end and
unknown tokens.

A tokenizer is its kind, its token list and the ids of its four special roles
(``{"pad", "bos", "eos", "unk"}``), saved as JSON inside every checkpoint and checked against
the model config there. Subword tokenizers (:mod:`attnviz.data.subword`) are Hugging Face
``tokenizers`` models trained in-process (:func:`train_tokenizer`); their JSON is stored in
the checkpoint's metadata beside the token list, never as a pickle. Built-in tasks put the specials at ids 0-3 (:data:`DEFAULT_IDS`) and
their symbols after them; imported models keep their own ids, and the decoder start id may
equal the pad id. Text outside the vocabulary is never dropped silently: it maps to UNK and
:meth:`Tokenizer.encode` reports which pieces were unknown, so the caller (the app) can show
them.
"""

from __future__ import annotations

import operator
import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import ModelConfig
from ..core.errors import InputError, shorten

#: The built-in layout: ids 0-3 are pad, decoder start, end and unknown. Models brought from
#: elsewhere have their own (the model config's ``pad_id``/``bos_id``/``eos_id``/``unk_id``).
#: The four special roles, and their ids where nothing else says: the model config's
#: defaults (``ModelConfig.pad_id`` ... ``unk_id``), written once there.
ROLES = ("pad", "bos", "eos", "unk")
DEFAULT_IDS = {role: getattr(ModelConfig, f"{role}_id") for role in ROLES}


def config_ids(specials: dict[str, int]) -> dict[str, int]:
    """Tokenizer roles -> the model config's field names: ``{"pad": 0, ...}`` ->
    ``{"pad_id": 0, ...}`` (the one place the two namings meet)."""
    return {f"{role}_id": specials[role] for role in ROLES}


class SpecialIds:
    """What every tokenizer kind holds of its special ids: ``specials`` by role and the
    ``pad_id``, ``bos_id``, ``eos_id``, ``unk_id`` attributes."""

    specials: dict[str, int]
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int

    def set_specials(self, specials: dict[str, int]) -> None:
        """Keep ``specials`` (by role) and set the four id attributes from it."""
        self.specials = {role: specials[role] for role in ROLES}
        self.pad_id, self.bos_id = specials["pad"], specials["bos"]
        self.eos_id, self.unk_id = specials["eos"], specials["unk"]


SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
SPECIAL_TOKENS = dict(zip(DEFAULT_IDS, SPECIALS, strict=True))
SUBWORD_KINDS = ("bpe", "unigram")
TOKENIZER_KINDS = ("char", "word", *SUBWORD_KINDS)
#: Marks the start of a word in a subword piece (sentencepiece's and Metaspace's marker).
WORD_START = "\u2581"
#: Vocabulary size of a subword tokenizer when none is asked for.
DEFAULT_VOCAB_SIZE = 8000
#: Texts a subword vocabulary is learnt from, at most (an even spread over a larger corpus).
MAX_TRAINING_TEXTS = 500_000


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


#: How the subword kinds (bpe, unigram) load and train: ``{"load": from_dict, "train":
#: train_subword}``, registered by :mod:`attnviz.data.subword`, which ``attnviz.data`` imports,
#: so this module never imports that one (it builds on this one).
SUBWORD: dict[str, Callable] = {}


class Tokenizer(SpecialIds):
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
        specials = check_specials(specials)
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
        tok._setup(kind, list(tokens), check_specials(specials))
        return tok

    def _setup(self, kind: str, tokens: list, specials: dict[str, int]) -> None:
        if kind not in ("char", "word"):
            if kind in SUBWORD_KINDS:  # a subword vocabulary needs its trained model too
                raise InputError(
                    f"a {kind} tokenizer is made by train_tokenizer, not from a token list"
                )
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
        self.set_specials(specials)
        self._index = {t: i for i, t in pieces}  # text never turns into a special id
        marks = [m for m in MARKERS if m in self._index]  # written whole, read whole
        self._marks = re.compile("(" + "|".join(map(re.escape, marks)) + ")") if marks else None

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
        """The pieces of ``text``: its characters, or its whitespace-separated words; a
        :data:`MARKERS` token of the vocabulary written in the text is one piece."""
        if self._marks is None:
            return self._split(self.kind, text)
        parts = self._marks.split(text)  # [text, marker, text, ...]
        return [p for i, part in enumerate(parts)
                for p in ([part] if i % 2 else self._split(self.kind, part))]  # fmt: skip

    @property
    def mask_token(self) -> tuple[str, int] | None:
        """``("<mask>", id)`` where the vocabulary has it (a masked-LM model trained here)."""
        return self._marker("<mask>")

    @property
    def sep_token(self) -> tuple[str, int] | None:
        """``("<sep>", id)`` where the vocabulary has it (between a one-stack model's source
        and target)."""
        return self._marker("<sep>")

    def _marker(self, token: str) -> tuple[str, int] | None:
        i = getattr(self, "_index", {}).get(token)
        return None if i is None else (token, i)

    def encode(self, text: str) -> Encoding:
        """Text -> :class:`Encoding` (ids without start/end; unknown pieces mapped to unk)."""
        pieces = self.split(text)
        ids = [self._index.get(p, self.unk_id) for p in pieces]
        unknown = list(dict.fromkeys(p for p in pieces if p not in self._index))
        return Encoding(ids, pieces, unknown)

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text. Skips pad and start ids, stops at the first end id, shows unk as its token."""
        skip = (self.pad_id, self.bos_id)
        out = [self.token(i) for i in content_ids(ids, self.eos_id, stop_at_eos, skip)]
        return ("" if self.kind == "char" else " ").join(out)

    def token(self, i: int) -> str:
        """The token string for one id (specials included, e.g. ``"<eos>"``)."""
        if not 0 <= i < len(self.tokens):
            raise InputError(f"token id {i} is outside this vocabulary of {len(self)}")
        return self.tokens[i]

    def label(self, i: int) -> str:
        """A legible label for one id on an axis: the piece itself (a subword piece keeps its
        word-start marker ``▁``, which the app shows small and grey)."""
        return self.token(i)

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Many texts -> all their ids in one flat array and each text's length.

        Returns:
            ``(ids [sum(lengths)] int32, lengths [len(texts)] int32)``; no start/end ids.
        """
        ids, lengths = array("i"), array("i")
        index, unk, split = self._index, self.unk_id, self.split
        for text in texts:
            row = [index.get(p, unk) for p in split(text)]
            ids.extend(row)
            lengths.append(len(row))
        return np.frombuffer(ids, dtype=np.int32), np.frombuffer(lengths, dtype=np.int32)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "tokens": list(self.tokens), "specials": dict(self.specials)}

    @classmethod
    def from_dict(cls, data: dict) -> Tokenizer:
        """Rebuild from :meth:`to_dict` output (a dict without ``specials`` is the built-in layout)."""
        if isinstance(data, dict) and data.get("kind") in SUBWORD_KINDS:
            return SUBWORD["load"](data)
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise InputError("a tokenizer must be saved as {'kind': ..., 'tokens': [...]}")
        tokens = data["tokens"]
        if "specials" not in data and tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise InputError(f"a tokenizer's first tokens must be {SPECIALS}")
        return cls.from_vocab(data.get("kind"), tokens, data.get("specials", DEFAULT_IDS))


#: Characters an input may have per token the model takes: a text longer than
#: ``max_len * CHARS_PER_TOKEN`` characters cannot fit, and is refused before any tokenizer
#: reads it (tokenizing 100,000 characters may take a long time).
CHARS_PER_TOKEN = 32
#: Most characters any input may have, whatever the model's ``max_len`` (a relative-position
#: model may name 10^12 positions).
MAX_TEXT_CHARS = 1_000_000


def check_token_id(value: object, vocab: int, what: str = "token") -> int:
    """A token id a person gave (an int, a numpy/0-d tensor int, or digits typed in the page)
    checked against a vocabulary of ``vocab`` ids: the one check every place that takes an id
    uses.

    Raises:
        InputError: not an integer (a bool, a float, text), or outside ``0..vocab - 1``.
    """
    token = None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        digits = value.strip()
        if len(digits) > 19:  # no vocabulary is that large (and int() refuses 4,300 digits)
            raise InputError(
                f"{what} {shorten(digits, 20)} is outside the vocabulary 0..{vocab - 1}"
            )
        token = int(digits)
    elif not isinstance(value, (bool, str)):
        try:
            token = operator.index(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, RuntimeError):
            token = None
    if token is None:
        raise InputError(
            f"{what} must be an integer id in 0..{vocab - 1}, got {shorten(repr(value))}"
        )
    if not 0 <= token < vocab:
        raise InputError(f"{what} {token} is outside the vocabulary 0..{vocab - 1}")
    return token


def check_text(text: object, max_len: int, what: str = "the input") -> str:
    """``text`` if it is a string short enough to tokenize for a model of ``max_len``
    positions, else :class:`InputError` saying the limit.

    Checked before tokenizing: the length in tokens is only known after the tokenizer ran.
    """
    if not isinstance(text, str):
        raise InputError(f"{what} must be text (a str), got {shorten(repr(text))}")
    limit = min(max_len * CHARS_PER_TOKEN, MAX_TEXT_CHARS)
    if len(text) > limit:
        why = (
            f"this model takes at most {max_len:,} tokens, so at most {limit:,} characters are read"
            if limit < MAX_TEXT_CHARS
            else f"at most {limit:,} characters are read"
        )
        raise InputError(f"{what} has {len(text):,} characters; {why}")
    return text


def content_ids(
    ids: Iterable[int], eos_id: int | None, stop_at_eos: bool = True, skip: Sequence[int] = ()
) -> list[int]:
    """Ids as ints up to the first end id (when ``stop_at_eos``), leaving out ``skip``: what
    every tokenizer's ``decode`` turns into text."""
    out = []
    for i in ids:
        i = int(i)
        if i == eos_id and stop_at_eos:
            break
        if i not in skip:
            out.append(i)
    return out


#: Reserved tokens that text may hold, each read as one piece where a vocabulary has it: the
#: separator of a one-stack model's pair and the masked-LM mask (other ``<...>`` tokens, the
#: spare ids' markers, are never read from text).
MARKERS = ("<sep>", "<mask>")


def _reserved(token: str) -> bool:
    """``<...>`` marks a reserved token a character vocabulary may hold (never read from text)."""
    return len(token) > 2 and token[0] == "<" and token[-1] == ">"


def check_specials(specials: dict[str, int] | None) -> dict[str, int]:
    specials = DEFAULT_IDS if specials is None else specials
    if not isinstance(specials, dict) or set(specials) != set(DEFAULT_IDS):
        raise InputError(f"tokenizer specials must name exactly {sorted(DEFAULT_IDS)}")
    for role, i in specials.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise InputError(f"special id {role} must be a non-negative integer, got {i!r}")
    if specials["eos"] == specials["pad"]:  # a start id equal to the end id is fine (BART)
        raise InputError("the end id must differ from the pad id")
    return {role: specials[role] for role in ROLES}


#: Largest vocabulary :func:`train_tokenizer` builds (the subword trainers size their tables
#: by it up front: 10^9 aborts the process).
MAX_VOCAB_SIZE = 1_000_000


def train_tokenizer(
    kind: str,
    texts: Iterable[str],
    *,
    vocab_size: int | None = None,
    byte_fallback: bool = False,
    specials: dict[str, int] | None = None,
    max_texts: int = MAX_TRAINING_TEXTS,
) -> Tokenizer:
    """A tokenizer whose vocabulary is learnt from ``texts``.

    For one vocabulary shared by source and target, pass both sides' texts.

    Args:
        kind: ``"char"``, ``"word"``, ``"bpe"`` or ``"unigram"``.
        texts: the training texts (iterated once).
        vocab_size: the whole vocabulary, specials (and byte pieces) included. Subword
            default :data:`DEFAULT_VOCAB_SIZE` (fewer when the text has fewer pieces); char and
            word: every piece seen unless given, then the most frequent ones.
        byte_fallback: subword only: unseen characters become UTF-8 byte pieces (256 ids)
            instead of the unknown id, so every text round-trips.
        specials: ids of ``pad``/``bos``/``eos``/``unk`` (default :data:`DEFAULT_IDS`); a
            subword vocabulary needs them at the lowest ids.
        max_texts: subword only: learn from at most this many texts, spread evenly over
            ``texts`` (as sentencepiece's ``input_sentence_size``); encoding uses them all.
    Returns:
        a :class:`Tokenizer` (a :class:`attnviz.data.subword.SubwordTokenizer` for bpe/unigram).
    Raises:
        InputError: an unknown kind, a vocabulary too small, byte fallback on char/word, or
            no text at all.
    """
    if kind not in TOKENIZER_KINDS:
        raise InputError(f"tokenizer kind must be one of {TOKENIZER_KINDS}, got {kind!r}")
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size < 1):
        raise InputError(f"the vocabulary size must be a positive integer, got {vocab_size!r}")
    if vocab_size is not None and vocab_size > MAX_VOCAB_SIZE:
        raise InputError(
            f"the vocabulary size must be at most {MAX_VOCAB_SIZE:,} (the largest models use "
            f"about 256,000), got {vocab_size:,}"
        )
    specials = check_specials(specials)
    if kind in SUBWORD_KINDS:
        texts = texts if isinstance(texts, Sequence) else list(texts)
        if len(texts) > max_texts:
            texts = texts[:: -(-len(texts) // max_texts)]
        return SUBWORD["train"](
            kind, texts, vocab_size or DEFAULT_VOCAB_SIZE, byte_fallback, specials
        )
    if byte_fallback:
        raise InputError(f"byte fallback needs a bpe or unigram tokenizer, not {kind}")
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(Tokenizer._split(kind, text))
    for s in SPECIALS:  # text spelling a special token is read as unknown, never as it
        counts.pop(s, None)
    if not counts:
        raise InputError(f"cannot train a {kind} tokenizer on no text")
    room = None if vocab_size is None else vocab_size - len(set(specials.values()))
    if room is not None and room < 1:
        raise InputError(f"a vocabulary of {vocab_size} leaves no room beside the special tokens")
    kept = [p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:room]]
    return Tokenizer(kind, sorted(kept), specials)
