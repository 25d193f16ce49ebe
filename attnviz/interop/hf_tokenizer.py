"""A Hugging Face folder's tokenizer behind the interface of :class:`attnviz.Tokenizer`.

Needs the optional ``hf`` extra (``pip install 'attnviz[hf]'``: transformers, sentencepiece,
tokenizers, protobuf). ``trust_remote_code`` is never enabled. Pieces are the tokenizer's own
(sentencepiece ``▁`` marks a word start; byte-level BPE's ``Ġ`` is shown as ``▁`` too).
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Iterable
from pathlib import Path

from ..core.errors import InputError, one_line
from ..data.tokenizer import Encoding, SpecialIds, content_ids
from ..data.tokenizer_checks import check_folder, rust_panics

#: Files any one of which means the folder has a tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "spiece.model",
    "source.spm",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab-src.json",
)
EXTRA = "pip install 'attnviz[hf]'  (transformers, sentencepiece, tokenizers, protobuf)"


def readable(piece: str) -> str:
    """A piece as an axis label: byte-level BPE's word-start ``Ġ`` shown as ``▁``."""
    return piece.replace("Ġ", "▁").replace("Ċ", "\\n")


class HFTokenizer(SpecialIds):
    """Text <-> ids with a folder's transformers tokenizer; the :class:`attnviz.Tokenizer` API.

    ``encode`` adds the special tokens transformers adds (EOS; BOS for BART), so the ids are
    what ``tokenizer(text)`` gives. The model's vocabulary may be larger than the tokenizer's
    (T5: 32128 vs 32100); ids past the tokenizer show as ``<unused N>`` and decode to nothing.

    Args:
        tok: a ``transformers`` tokenizer.
        specials: ``{"pad", "bos", "eos", "unk"}`` ids (the model's).
        path: the folder it came from.
        vocab_size: the model's vocabulary; ``tokens`` and ``len()`` cover it, so every id
            the model can produce has a label.
    """

    kind = "hf"

    def __init__(
        self,
        tok,
        specials: dict[str, int],
        path: Path,
        vocab_size: int | None = None,
        side: str = "source",
    ):
        if side not in ("source", "target"):
            raise ValueError(f"side must be 'source' or 'target', got {side!r}")
        self._tok = tok
        self.side = side
        self.path = Path(path)
        self.set_specials(specials)
        self._vocab_size = vocab_size
        self._size = len(tok)  # ids the tokenizer itself knows
        self._special_ids = set(tok.all_special_ids)

    @functools.cached_property
    def tokens(self) -> list[str]:
        """A label per id, ids past the tokenizer's as ``<unused N>`` (built on first use:
        262,144 pieces take 0.7 s, which opening a model need not pay)."""
        out = [
            readable(t) if t is not None else f"<unused {i}>"
            for i, t in enumerate(_id_pieces(self._tok, self.side, self._size))
        ]
        return out + [f"<unused {i}>" for i in range(self._size, self._vocab_size or 0)]

    @property
    def tokenizer_eos_id(self) -> int | None:
        """The tokenizer's own end id (None when it has none)."""
        return self._tok.eos_token_id

    @property
    def mask_token(self) -> tuple[str, int] | None:
        """The mask token and its id (BERT's ``[MASK]``, RoBERTa's ``<mask>``), or None."""
        text, i = getattr(self._tok, "mask_token", None), getattr(self._tok, "mask_token_id", None)
        return (str(text), int(i)) if text and isinstance(i, int) else None

    @property
    def sep_token(self) -> tuple[str, int] | None:
        """The separator between the two texts of a pair (``[SEP]``, ``</s>``), or None."""
        text, i = getattr(self._tok, "sep_token", None), getattr(self._tok, "sep_token_id", None)
        return (str(text), int(i)) if text and isinstance(i, int) else None

    def for_target(self) -> HFTokenizer:
        """The same tokenizer for the target side: text is read as transformers'
        ``tok(text_target=...)`` reads it (Marian's ``target.spm``, mBART's target language)."""
        return HFTokenizer(self._tok, self.specials, self.path, self._vocab_size, "target")

    def __len__(self) -> int:
        return max(self._size, self._vocab_size or 0)

    def __eq__(self, other: object) -> bool:
        """Same side, special ids and id -> piece table (a folder and its fine-tuned copy)."""
        if not isinstance(other, HFTokenizer):
            return NotImplemented
        return (type(self._tok), self.side, self.specials, self.tokens) == (
            type(other._tok), other.side, other.specials, other.tokens)  # fmt: skip

    def __hash__(self) -> int:
        return hash((self.side, len(self)))

    def __repr__(self) -> str:
        return f"HFTokenizer({type(self._tok).__name__}, size={len(self)}, path={str(self.path)!r})"

    def _ids(self, text: str, special: bool = True) -> list[int]:
        """``tok(text)`` on the source side, ``tok(text_target=text)`` on the target side."""
        with rust_panics("reading text with the folder's tokenizer"):
            if self.side == "target":
                out = self._tok(text_target=text, add_special_tokens=special)
            else:
                out = self._tok(text, add_special_tokens=special)
        return list(out["input_ids"])

    def split(self, text: str) -> list[str]:
        """The pieces of ``text`` without special tokens."""
        if self.side == "target":
            return [self.token(i) for i in self._ids(text, special=False)]
        with rust_panics("reading text with the folder's tokenizer"):
            return [readable(p) for p in self._tok.tokenize(text)]

    def encode(self, text: str) -> Encoding:
        """Text -> :class:`Encoding` with the special tokens transformers adds.

        ``unknown`` lists the stretches of text that became the unknown id.
        """
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        ids = self._ids(text)
        pieces = [self.token(i) for i in ids]
        unknown: list[str] = []
        if self.unk_id in ids and self.side == "target":
            unknown = [p for i, p in zip(ids, pieces, strict=True) if i == self.unk_id]
        elif self.unk_id in ids:
            try:
                with rust_panics("reading text with the folder's tokenizer"):
                    spans = self._tok(text, return_offsets_mapping=True)["offset_mapping"]
                unknown = [
                    text[a:b] for i, (a, b) in zip(ids, spans, strict=True) if i == self.unk_id
                ]
            except (NotImplementedError, KeyError, ValueError, TypeError):
                unknown = [p for i, p in zip(ids, pieces, strict=True) if i == self.unk_id]
        return Encoding(ids, pieces, list(dict.fromkeys(unknown)))

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> text as transformers decodes it (special tokens skipped); stops at the end id."""
        out = [i for i in content_ids(ids, self.eos_id, stop_at_eos) if 0 <= i < self._size]
        with rust_panics("decoding with the folder's tokenizer"):
            return self._tok.decode(out, skip_special_tokens=True)

    def encode_plain(self, text: str) -> list[int]:
        """The ids of ``text`` alone, no special tokens added (a transcript's words)."""
        return self._ids(text, special=False)

    def decode_raw(self, ids: Iterable[int]) -> str:
        """Ids -> the text their pieces spell, specials kept and nothing cleaned up (how
        Whisper groups a transcript's tokens into words)."""
        out = [int(i) for i in ids if 0 <= int(i) < self._size]
        return self._tok.decode(out, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def token(self, i: int) -> str:
        """The piece of one id (specials included, e.g. ``"</s>"``)."""
        if i < 0:
            raise InputError(f"token id {i} is negative")
        return self.tokens[i] if i < len(self) else f"<unused {i}>"

    def to_dict(self) -> dict:
        """Where it comes from (a folder's tokenizer is not copied into attnviz checkpoints)."""
        return {
            "kind": self.kind,
            "path": str(self.path),
            "side": self.side,
            "specials": dict(self.specials),
        }


def _id_pieces(tok, side: str, size: int) -> list[str | None]:
    """The piece of every id on one side. A tokenizer whose id -> piece table is the
    target's (FSMT, Marian with separate vocabularies) labels source ids from its source
    table (``encoder``) instead."""
    pieces = tok.convert_ids_to_tokens(list(range(size)))
    encoder, decoder = getattr(tok, "encoder", None), getattr(tok, "decoder", None)
    if side == "source" and isinstance(encoder, dict) and isinstance(decoder, dict):
        inverse = {v: k for k, v in encoder.items() if isinstance(v, int)}
        if inverse != decoder:
            added = {i: p for i, p in enumerate(pieces) if i not in inverse}
            return [inverse.get(i, added.get(i)) for i in range(size)]
    return pieces


class IdTokenizer(SpecialIds):
    """Ids in, ids out: the tokenizer of a folder without a working one.

    Text is token ids separated by spaces or commas (``"12 7 33 0"``: taken as given, as
    transformers takes ``input_ids``); every id shows as ``#<id>``, and output decodes to its
    ids. ``why`` says why the folder's own tokenizer is not used.
    """

    kind = "ids"

    def __init__(self, specials: dict[str, int], vocab_size: int, why: str, side: str = "source"):
        self.set_specials(specials)
        self.vocab_size, self.why, self.side = int(vocab_size), why, side

    @functools.cached_property
    def tokens(self) -> list[str]:
        """A label per id (built on first use; the size is the weights' embedding rows)."""
        return [self.token(i) for i in range(self.vocab_size)]

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"IdTokenizer(size={self.vocab_size})"

    def split(self, text: str) -> list[str]:
        """The ids of ``text`` as labels."""
        return [self.token(i) for i in self._read(text)]

    def _read(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        words = text.replace(",", " ").split()
        ids = []
        for w in words:
            w = w.lstrip("#")
            if not w.isdigit() or int(w) >= self.vocab_size:
                raise InputError(
                    f"{self.why}: type token ids (0..{self.vocab_size - 1}) separated by spaces, "
                    f"e.g. '12 7 33 {self.eos_id}'; got {w[:20]!r}"
                )
            ids.append(int(w))
        return ids

    def encode(self, text: str) -> Encoding:
        ids = self._read(text)
        return Encoding(ids, [self.token(i) for i in ids], [])

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> ``"12 7 33"`` (up to the end id)."""
        return " ".join(str(i) for i in content_ids(ids, self.eos_id, stop_at_eos))

    def token(self, i: int) -> str:
        if i < 0:
            raise InputError(f"token id {i} is negative")
        return f"#{int(i)}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "size": self.vocab_size, "specials": dict(self.specials)}


def load_hf_tokenizer(
    folder: Path, ids: dict[str, int], vocab_size: int | None = None, limit: int | None = None
) -> tuple[HFTokenizer | None, str | None]:
    """The folder's tokenizer, or ``(None, why)`` when it has none or transformers is missing.

    Args:
        ids: the model's ``pad_id``, ``bos_id``, ``eos_id``, ``unk_id``.
        vocab_size: the model's (target) vocabulary, which may be larger (T5).
        limit: ids the model takes (default ``vocab_size``); a tokenizer with an id outside
            is not used.
    """
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None, f"{folder} has no tokenizer files; ids in, ids out"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None, f"reading this folder's tokenizer needs transformers: {EXTRA}"
    refused = _refused_json(folder / "tokenizer.json")
    if refused:
        return None, f"the tokenizer in {folder} is not used: {refused}; ids in, ids out"
    try:
        with warnings.catch_warnings(), rust_panics("loading the folder's tokenizer"):
            warnings.simplefilter("ignore")  # e.g. Marian's "pip install sacremoses"
            tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as exc:  # transformers raises many kinds; say which and go on without
        return None, f"the tokenizer in {folder} did not load ({type(exc).__name__}: {exc})"
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:  # padding and truncation are never taken from a file
        backend.no_padding()
        backend.no_truncation()
    bad = _outside(tok, limit or vocab_size)
    if bad:
        return None, f"the tokenizer in {folder} is not usable: {bad}; ids in, ids out"
    unk = tok.unk_token_id if tok.unk_token_id is not None else ids["unk_id"]
    specials = {"pad": ids["pad_id"], "bos": ids["bos_id"], "eos": ids["eos_id"], "unk": unk}
    return HFTokenizer(tok, specials, folder, vocab_size), None


def _refused_json(path: Path) -> str | None:
    """Why a folder's ``tokenizer.json`` may not reach the Rust library (components no
    supported family writes, a regex of its own), or None (also when there is none)."""
    if not path.is_file():
        return None
    try:
        check_folder(json.loads(path.read_text(encoding="utf-8")))
    except (InputError, ValueError, RecursionError, OSError) as exc:
        return one_line(exc, 300)
    return None


def _outside(tok, vocab_size: int | None) -> str | None:
    """Why the tokenizer's ids do not fit the model (a piece mapped past the vocabulary or
    below 0), or None."""
    try:
        vocab = tok.get_vocab()
    except Exception as exc:  # a broken vocabulary file: say which error and go on without
        return f"its vocabulary does not read ({type(exc).__name__})"
    limit = vocab_size if vocab_size is not None else len(vocab)
    for piece, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < limit:
            return f"it maps {str(piece)[:40]!r} to id {str(i)[:20]}, outside 0..{limit - 1}"
    return None
