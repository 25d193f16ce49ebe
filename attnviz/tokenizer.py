"""Character, word and subword (BPE, Unigram) vocabularies with pad, decoder-start, end and
unknown tokens.

A tokenizer is its kind, its token list and the ids of its four special roles
(``{"pad", "bos", "eos", "unk"}``), saved as JSON inside every checkpoint and checked against
the model config there. Subword tokenizers (:class:`SubwordTokenizer`) are Hugging Face
``tokenizers`` models trained in-process (:func:`train_tokenizer`); their JSON is stored in
the checkpoint's metadata beside the token list, never as a pickle. Built-in tasks put the specials at ids 0-3 (:data:`DEFAULT_IDS`) and
their symbols after them; imported models keep their own ids, and the decoder start id may
equal the pad id. Text outside the vocabulary is never dropped silently: it maps to UNK and
:meth:`Tokenizer.encode` reports which pieces were unknown, so the caller (the app) can show
them.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InputError

#: The built-in layout: ids 0-3 are pad, decoder start, end and unknown. Models brought from
#: elsewhere have their own (the model config's ``pad_id``/``bos_id``/``eos_id``/``unk_id``).
DEFAULT_IDS = {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
SPECIAL_TOKENS = dict(zip(DEFAULT_IDS, SPECIALS, strict=True))
SUBWORD_KINDS = ("bpe", "unigram")
TOKENIZER_KINDS = ("char", "word", *SUBWORD_KINDS)
#: Marks the start of a word in a subword piece (sentencepiece's and Metaspace's marker).
WORD_START = "\u2581"
#: Vocabulary size of a subword tokenizer when none is asked for.
DEFAULT_VOCAB_SIZE = 8000
#: Texts encoded per call when a whole corpus is encoded (bounds the memory of one call).
ENCODE_CHUNK = 20_000


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
            return SubwordTokenizer.from_dict(data)
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


# -- subword vocabularies (BPE, Unigram) ----------------------------------------------------
def _special_list(specials: dict[str, int]) -> list[str]:
    """The special tokens in id order; their distinct ids must be ``0 .. k-1``."""
    by_id: dict[int, str] = {}
    for role, i in specials.items():
        by_id.setdefault(i, SPECIAL_TOKENS[role])
    if sorted(by_id) != list(range(len(by_id))):
        raise InputError(
            f"a subword tokenizer puts its special tokens first: ids {sorted(by_id)} must be "
            f"0-{len(by_id) - 1}"
        )
    return [by_id[i] for i in range(len(by_id))]


def _byte_pieces() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(256)]


class SubwordTokenizer(Tokenizer):
    """BPE or Unigram pieces from a Hugging Face ``tokenizers`` model, same API as :class:`Tokenizer`.

    Text is split at spaces by the Metaspace pre-tokenizer: each space becomes ``▁``, which
    starts the next piece, and a ``▁`` is put before the text, so ``decode(encode(s).ids) == s``
    for any text made of characters seen in training (with ``byte_fallback``, for any text:
    unseen characters become UTF-8 byte pieces ``<0xE2>``). Text never becomes a special id.

    Make one with :func:`train_tokenizer`; it saves as JSON (:meth:`to_dict`).
    """

    def __init__(self, kind: str, hf, specials: dict[str, int]):
        if kind not in SUBWORD_KINDS:
            raise InputError(f"a subword tokenizer is one of {SUBWORD_KINDS}, got {kind!r}")
        specials = _check_specials(specials)
        size = hf.get_vocab_size(with_added_tokens=True)
        tokens = [hf.id_to_token(i) for i in range(size)]
        if any(t is None for t in tokens):
            raise InputError(f"the {kind} vocabulary has gaps in its ids")
        for role, i in specials.items():
            if i >= size or tokens[i] not in SPECIALS:
                raise InputError(f"the {kind} vocabulary has no special token at {role} id {i}")
        self.kind = kind
        self.tokens = tokens
        self.specials = dict(specials)
        self.pad_id, self.bos_id = specials["pad"], specials["bos"]
        self.eos_id, self.unk_id = specials["eos"], specials["unk"]
        self._hf = hf
        # ids text may never produce (an unk stays, as the unknown-piece report needs it)
        self._not_from_text = np.array(sorted({self.pad_id, self.bos_id, self.eos_id}))

    @property
    def byte_fallback(self) -> bool:
        """Whether unseen characters become byte pieces instead of the unknown id."""
        return bool(self._model_json().get("byte_fallback"))

    def _model_json(self) -> dict:
        import json

        return json.loads(self._hf.to_str())["model"]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SubwordTokenizer) and self.to_dict() == other.to_dict()

    def _clean(self, ids: list[int]) -> list[int]:
        specials = set(self._not_from_text.tolist())
        return [self.unk_id if i in specials else i for i in ids]

    def split(self, text: str) -> list[str]:
        """The pieces of ``text`` (``▁`` marks a word start)."""
        return self.encode(text).pieces

    def encode(self, text: str) -> Encoding:
        """Text -> :class:`Encoding`; ``unknown`` lists the stretches of text read as unk."""
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        enc = self._hf.encode(text, add_special_tokens=False)
        ids = self._clean(enc.ids)
        pieces, unknown = [], []
        for i, piece, (a, b) in zip(ids, enc.tokens, enc.offsets, strict=True):
            if i == self.unk_id:
                piece = text[a:b] or piece
                unknown.append(piece)
            pieces.append(piece)
        return Encoding(ids, pieces, list(dict.fromkeys(unknown)))

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Many texts -> one flat int32 id array and the lengths, encoded in batches in Rust."""
        chunks, lengths = [], array("i")
        for start in range(0, len(texts), ENCODE_CHUNK):
            encs = self._hf.encode_batch_fast(
                list(texts[start : start + ENCODE_CHUNK]), add_special_tokens=False
            )
            rows = [e.ids for e in encs]
            del encs  # an Encoding holds offsets and strings too; keep only the ids
            lengths.extend(map(len, rows))
            flat = array("i")
            for r in rows:
                flat.extend(r)
            chunks.append(np.frombuffer(flat, dtype=np.int32))
        ids = np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
        ids[np.isin(ids, self._not_from_text)] = self.unk_id
        return ids, np.frombuffer(lengths, dtype=np.int32)

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text (spaces restored from ``▁``). Skips pad and start ids, stops at the end id."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            self.token(i)  # range check
            out.append(i)
        return self._hf.decode(out, skip_special_tokens=False)

    def to_dict(self) -> dict:
        """``kind``, ``tokens``, ``specials`` and ``hf``: the ``tokenizers`` JSON, as a dict."""
        import json

        return {
            "kind": self.kind,
            "tokens": list(self.tokens),
            "specials": dict(self.specials),
            "hf": json.loads(self._hf.to_str()),
        }

    @classmethod
    def from_dict(cls, data: dict) -> SubwordTokenizer:
        """Rebuild from :meth:`to_dict` output (checks the model and its special tokens)."""
        import json

        from tokenizers import Tokenizer as HF

        kind = data.get("kind")
        hf_json = data.get("hf")
        if not isinstance(hf_json, dict) or not isinstance(hf_json.get("model"), dict):
            raise InputError(f"a {kind} tokenizer must be saved with its 'hf' tokenizers JSON")
        model_type = hf_json["model"].get("type")
        if str(model_type).lower() != kind:
            raise InputError(f"a {kind} tokenizer holds a {model_type} model")
        try:
            hf = HF.from_str(json.dumps(hf_json))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise InputError(f"the saved {kind} tokenizer does not load: {exc}") from None
        tok = cls(kind, hf, data.get("specials", DEFAULT_IDS))
        if "tokens" in data and data["tokens"] != tok.tokens:
            raise InputError(f"the saved {kind} token list differs from its model's vocabulary")
        return tok


def _subword(
    kind: str, texts: Iterable[str], vocab_size: int, byte_fallback: bool, specials: dict
) -> SubwordTokenizer:
    import json

    from tokenizers import Tokenizer as HF
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    names = _special_list(specials)
    unk = SPECIAL_TOKENS["unk"]
    size = vocab_size - (256 if byte_fallback else 0)
    if size < len(names) + 2:
        raise InputError(
            f"a vocabulary of {vocab_size} is too small for the special tokens"
            + (" and the 256 byte pieces" if byte_fallback else "")
        )
    common = dict(vocab_size=size, special_tokens=names, show_progress=False)
    if kind == "bpe":
        hf = HF(models.BPE(unk_token=unk))
        trainer = trainers.BpeTrainer(**common)
    else:
        hf = HF(models.Unigram())
        trainer = trainers.UnigramTrainer(**common, unk_token=unk)
    # The normalizer puts ▁ before every text (a leading space stays a piece of its own), the
    # pre-tokenizer turns spaces into ▁ and splits before each; the decoder undoes both.
    hf.normalizer = normalizers.Prepend(WORD_START)
    hf.pre_tokenizer = pre_tokenizers.Metaspace(WORD_START, prepend_scheme="never", split=True)
    hf.train_from_iterator(texts, trainer)
    doc = json.loads(hf.to_str())
    doc["added_tokens"] = []  # specials live in the vocabulary only: text never matches them
    model = doc["model"]
    k = len(names)
    if kind == "bpe":
        vocab = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
        if len(vocab) <= k:
            raise InputError("cannot train a bpe tokenizer on no text")
        if byte_fallback:
            vocab = [*vocab[:k], *_byte_pieces(), *(t for t in vocab[k:] if t not in _BYTES)]
        model["vocab"] = {t: i for i, t in enumerate(vocab)}
    else:
        vocab = model["vocab"]
        if len(vocab) <= k:
            raise InputError("cannot train a unigram tokenizer on no text")
        floor = min(score for _, score in vocab[k:]) - 20.0
        # specials far below any other path: text spelling "<eos>" is read as its characters
        vocab = [[t, SPECIAL_SCORE] for t, _ in vocab[:k]] + vocab[k:]
        if byte_fallback:
            vocab = [*vocab[:k], *([b, floor] for b in _byte_pieces()), *vocab[k:]]
        model["vocab"] = vocab
        model["unk_id"] = names.index(unk)
    model["byte_fallback"] = byte_fallback
    metaspace = {"type": "Metaspace", "replacement": WORD_START, "prepend_scheme": "always",
                 "split": True}  # fmt: skip
    doc["decoder"] = (
        {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace]}
        if byte_fallback
        else metaspace
    )
    return SubwordTokenizer(kind, HF.from_str(json.dumps(doc)), specials)


_BYTES = frozenset(_byte_pieces())
SPECIAL_SCORE = -1e6


def train_tokenizer(
    kind: str,
    texts: Iterable[str],
    *,
    vocab_size: int | None = None,
    byte_fallback: bool = False,
    specials: dict[str, int] | None = None,
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
    Returns:
        a :class:`Tokenizer` (a :class:`SubwordTokenizer` for bpe/unigram).
    Raises:
        InputError: an unknown kind, a vocabulary too small, byte fallback on char/word, or
            no text at all.
    """
    if kind not in TOKENIZER_KINDS:
        raise InputError(f"tokenizer kind must be one of {TOKENIZER_KINDS}, got {kind!r}")
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size < 1):
        raise InputError(f"the vocabulary size must be a positive integer, got {vocab_size!r}")
    specials = _check_specials(specials)
    if kind in SUBWORD_KINDS:
        return _subword(kind, texts, vocab_size or DEFAULT_VOCAB_SIZE, byte_fallback, specials)
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
