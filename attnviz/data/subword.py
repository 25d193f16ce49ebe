"""Subword vocabularies (BPE, Unigram) with Hugging Face ``tokenizers``, behind the
:class:`attnviz.Tokenizer` API.

Trained in-process by :func:`attnviz.data.tokenizer.train_tokenizer`: the Metaspace pre-tokenizer
turns spaces into ``▁`` and splits before each, a normalizer puts ``▁`` before every text,
and the matching decoder undoes both, so ``decode(encode(s)) == s`` for text made of seen
characters (any text with byte fallback). The special tokens sit at the ids the model config
names; the whole model is saved as ``tokenizers`` JSON inside the checkpoint metadata.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from ..core.errors import InputError
from ..core.specials import not_text_ids
from .tokenizer import (
    DEFAULT_IDS,
    SPECIAL_TOKENS,
    SPECIALS,
    SUBWORD,
    SUBWORD_KINDS,
    WORD_START,
    Encoding,
    Tokenizer,
    check_specials,
    content_ids,
)
from .tokenizer_checks import check_own, rust_panics

#: Texts encoded per call when a whole corpus is encoded (bounds the memory of one call).
ENCODE_CHUNK = 100_000
#: Longest word subword training sees, in characters: a longer one is cut to this length for
#: training only (a word of megabytes keeps the BPE and Unigram trainers busy for minutes;
#: no piece that long would be learnt from it).
MAX_WORD_CHARS = 100


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
        specials = check_specials(specials)
        size = hf.get_vocab_size(with_added_tokens=True)
        tokens = [hf.id_to_token(i) for i in range(size)]
        tokens = [t[1:] if t and t[0] == " " and t[1:] in SPECIALS else t for t in tokens]
        if any(t is None for t in tokens):
            raise InputError(f"the {kind} vocabulary has gaps in its ids")
        for role, i in specials.items():
            if i >= size or tokens[i] not in SPECIALS:
                raise InputError(f"the {kind} vocabulary has no special token at {role} id {i}")
        self.kind = kind
        self.tokens = tokens
        self.set_specials(specials)
        self._hf = hf
        # ids text may never produce (an unk stays, as the unknown-piece report needs it)
        self._not_from_text = np.array(sorted(not_text_ids(self)))

    @property
    def byte_fallback(self) -> bool:
        """Whether unseen characters become byte pieces instead of the unknown id."""
        return bool(json.loads(self._hf.to_str())["model"].get("byte_fallback"))

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
        with rust_panics(f"reading text with the {self.kind} tokenizer"):
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
        """Many texts -> one flat int32 id array and the lengths (equal to :meth:`encode`).

        The pre-tokenizer splits at every space and the models (BPE merges, the Unigram
        lattice) never cross a split, so a text's ids are its space-separated words' ids
        joined: each distinct word is encoded once (in batches, in Rust) and then looked up.
        """
        words = _WordTable(self._hf)
        ids, lengths = [], []
        for start in range(0, len(texts), ENCODE_CHUNK):
            if len(words) > 1_000_000:  # a corpus of mostly distinct words: bound the memory
                words = _WordTable(self._hf)
            with rust_panics(f"encoding texts with the {self.kind} tokenizer"):
                chunk_ids, chunk_lengths = words.encode(texts[start : start + ENCODE_CHUNK])
            ids.append(chunk_ids)
            lengths.append(chunk_lengths)
        flat = np.concatenate(ids) if ids else np.zeros(0, np.int32)
        flat[np.isin(flat, self._not_from_text)] = self.unk_id
        return flat, (np.concatenate(lengths) if lengths else np.zeros(0, np.int32))

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text (spaces restored from ``▁``). Skips pad and start ids, stops at the end id."""
        out = content_ids(ids, self.eos_id, stop_at_eos, (self.pad_id, self.bos_id))
        for i in out:
            self.token(i)  # range check
        with rust_panics(f"decoding with the {self.kind} tokenizer"):
            return self._hf.decode(out, skip_special_tokens=False)

    def to_dict(self) -> dict:
        """``kind``, ``tokens``, ``specials`` and ``hf``: the ``tokenizers`` JSON, as a dict."""
        return {
            "kind": self.kind,
            "tokens": list(self.tokens),
            "specials": dict(self.specials),
            "hf": json.loads(self._hf.to_str()),
        }

    @classmethod
    def from_dict(cls, data: dict) -> SubwordTokenizer:
        """Rebuild from :meth:`to_dict` output (checks the model and its special tokens)."""
        from tokenizers import Tokenizer as HF

        kind = data.get("kind")
        hf_json = data.get("hf")
        check_own(hf_json, kind)  # only what train_subword writes reaches the Rust library
        try:
            with rust_panics(f"loading the saved {kind} tokenizer"):
                hf = HF.from_str(json.dumps(hf_json))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
            raise InputError(f"the saved {kind} tokenizer does not load: {exc}") from None
        tok = cls(kind, hf, data.get("specials", DEFAULT_IDS))
        if "tokens" in data and data["tokens"] != tok.tokens:
            raise InputError(f"the saved {kind} token list differs from its model's vocabulary")
        return tok


def train_subword(
    kind: str, texts: Iterable[str], vocab_size: int, byte_fallback: bool, specials: dict
) -> SubwordTokenizer:
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
    try:
        with rust_panics(f"training the {kind} tokenizer"):
            hf.train_from_iterator(_short_words(texts), trainer)
    except Exception as exc:  # tokenizers raises a bare Exception, e.g. too small a vocabulary
        raise InputError(f"training the {kind} tokenizer failed: {exc}; try a larger "
                         "vocabulary size") from None  # fmt: skip
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
        # A piece holding a space never matches text (the pre-tokenizer has turned spaces into
        # ▁), so text spelling "<eos>" is read as its characters; "<unk>" may match: it is
        # unknown either way. SubwordTokenizer shows the specials under their own names.
        vocab = [[_unmatchable(t), 0.0] for t, _ in vocab[:k]] + vocab[k:]
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


def _short_words(texts: Iterable[str]) -> Iterator[str]:
    """``texts`` with every word longer than :data:`MAX_WORD_CHARS` cut to that length."""
    for text in texts:
        if len(text) > MAX_WORD_CHARS and any(len(w) > MAX_WORD_CHARS for w in text.split(" ")):
            text = " ".join(w[:MAX_WORD_CHARS] for w in text.split(" "))
        yield text


class _WordTable:
    """Space-separated words -> their subword ids, each distinct word encoded once.

    The Metaspace pre-tokenizer splits at every space and BPE merges and the Unigram lattice
    never cross a split, so a text's ids are its words' ids joined (an empty word, between
    two spaces, is the lone ``▁`` piece).
    """

    def __init__(self, hf):
        self._hf = hf
        self.index: dict[str, int] = {}
        self.ids = array("i")  # every word's ids, word after word
        self.starts, self.lengths = array("q"), array("i")
        self._add([""], [hf.encode(" ", add_special_tokens=False).ids[:1]])
        self._add(["\n"], [[]])  # separates texts in a chunk; no ids of its own

    def __len__(self) -> int:
        return len(self.index)

    def _add(self, words: list[str], rows: list[list[int]]) -> None:
        for w, row in zip(words, rows, strict=True):
            self.index[w] = len(self.index)
            self.starts.append(len(self.ids))
            self.lengths.append(len(row))
            self.ids.extend(row)

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32, lengths int32)`` of ``texts``, as :meth:`SubwordTokenizer.encode`."""
        kept = list(filter(None, texts))  # an empty text has no ids (not even ▁)
        joined = " \n ".join(kept)
        if joined.count("\n") != max(len(kept) - 1, 0):  # a text holds a line break itself
            return self._encode_each(texts)
        if not kept:
            return np.zeros(0, np.int32), np.zeros(len(texts), np.int32)
        ids, per_text = self._gather(joined.split(" "))
        lengths = np.zeros(len(texts), dtype=np.int32)
        lengths[np.fromiter(map(bool, texts), dtype=bool, count=len(texts))] = per_text
        return ids, lengths

    def _encode_each(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        ids, lengths = [], np.zeros(len(texts), dtype=np.int32)
        for i, t in enumerate(texts):
            if "\n" in t:  # the word "\n" would read as a separator: encode it whole
                row = np.array(self._hf.encode(t, add_special_tokens=False).ids, np.int32)
            elif t:
                row = self._gather(t.split(" "))[0]
            else:
                continue
            ids.append(row)
            lengths[i] = len(row)
        return (np.concatenate(ids) if ids else np.zeros(0, np.int32)), lengths

    def _gather(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Words, texts separated by the word ``"\\n"`` -> all ids and each text's length."""
        new = list(set(words).difference(self.index))
        if new:
            encs = self._hf.encode_batch_fast(new, add_special_tokens=False)
            self._add(new, [e.ids for e in encs])
        word = np.fromiter(map(self.index.__getitem__, words), dtype=np.int64, count=len(words))
        lengths = np.frombuffer(self.lengths, dtype=np.int32)[word]
        starts = np.frombuffer(self.starts, dtype=np.int64)[word]
        ends = np.cumsum(lengths, dtype=np.int64)  # where each word's ids end in the output
        pos = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
        pos += np.repeat(starts - (ends - lengths), lengths)
        ids = np.frombuffer(self.ids, dtype=np.int32)[pos]
        seps = np.flatnonzero(word == self.index["\n"])  # a text's words lie between two
        starts_w = np.concatenate(([0], seps + 1))
        ends_w = np.concatenate((seps, [len(words)]))
        cum = np.concatenate(([0], ends))
        return ids, (cum[ends_w] - cum[starts_w]).astype(np.int32)


def _unmatchable(token: str) -> str:
    return token if token == SPECIAL_TOKENS["unk"] else " " + token


SUBWORD.update(load=SubwordTokenizer.from_dict, train=train_subword)
