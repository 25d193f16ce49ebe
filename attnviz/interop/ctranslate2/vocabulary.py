"""A CTranslate2 folder's vocabularies (``*_vocabulary.json`` or ``.txt``) and the tokenizer
of a folder that has nothing but them: token strings in, token strings out.

CTranslate2 itself never tokenizes: ``translate_batch`` takes tokens (``["▁Hello", "</s>"]``)
and returns tokens. :class:`VocabTokenizer` does the same with text: the input is its tokens
separated by spaces (or ``#<id>``), and the output is the produced tokens joined by spaces, so
``ckpt.predict(" ".join(tokens)) == " ".join(translator.translate_batch([tokens])[0]
.hypotheses[0])``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

from ...core.errors import CheckpointError, InputError, shorten
from ...data.tokenizer import Encoding, SpecialIds, content_ids
from ..hf_tokenizer import EXTRA, HFTokenizer
from .tokenizer_file import load_fast_tokenizer

#: Longest vocabulary file read (a vocabulary of a few million tokens fits well below it).
MAX_VOCABULARY_BYTES = 64 << 20
#: Most tokens a vocabulary may list.
MAX_VOCABULARY_TOKENS = 4_000_000
#: Bytes one token may take in a vocabulary file (JSON escapes included), for the size cap.
MAX_TOKEN_BYTES = 1024
#: A text is refused when more than 1 / MOSTLY_UNKNOWN of its tokens are not in the vocabulary.
MOSTLY_UNKNOWN = 2


def read_vocabulary(folder: Path, name: str, rows: int | None = None) -> list[str] | None:
    """``{name}.json`` (a JSON list of strings) or ``{name}.txt`` (one token a line), or None
    when the folder has neither.

    A token listed twice keeps both ids (the first is the one text reads as, as in
    CTranslate2). The file's size and its count of lines are checked before it is parsed.

    Args:
        rows: the embedding rows the vocabulary must name (bounds the file's size).
    Raises:
        CheckpointError: a file that is too big for ``rows`` tokens, not UTF-8, or not a list
            of strings.
    """
    limit = MAX_VOCABULARY_BYTES
    if rows is not None:
        limit = min(limit, (rows + 1) * MAX_TOKEN_BYTES)
    most = MAX_VOCABULARY_TOKENS if rows is None else rows
    for suffix in (".json", ".txt"):
        path = folder / f"{name}{suffix}"
        if not path.is_file():
            continue
        size = path.stat().st_size
        if size > limit:
            raise CheckpointError(
                f"{shorten(path, 300)} has {size:,} bytes, more than a vocabulary of "
                f"{most:,} tokens takes ({limit:,})"
            )
        try:
            raw = path.read_bytes()
            lines = raw.count(b"\n") if suffix == ".txt" else 0
            if lines > most + 1:
                raise CheckpointError(
                    f"{shorten(path, 300)} has {lines:,} lines for a vocabulary of {most:,} tokens"
                )
            text = raw.decode("utf-8")
            tokens = json.loads(text) if suffix == ".json" else text.split("\n")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise CheckpointError(f"{shorten(path, 300)} is not readable ({exc})") from None
        if suffix == ".txt" and tokens and tokens[-1] == "":
            tokens.pop()  # the newline after the last token
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise CheckpointError(f"{shorten(path, 300)} must be a list of token strings")
        return tokens
    return None


class VocabTokenizer(SpecialIds):
    """Tokens in, tokens out: the tokenizer of a folder with only a token vocabulary.

    Args:
        tokens: the vocabulary, one piece per id (an id the model adds, such as a start
            token with a zero embedding, included).
        specials: ``{"pad", "bos", "eos", "unk"}`` ids (the model's).
        prefix / suffix: ids added around every encoded input (CTranslate2's
            ``add_source_bos`` / ``add_source_eos``).
        why: why the folder's text is read as tokens.
        hidden: ids left out of decoded text (a start token the model adds; CTranslate2
            returns every other token it produces, ``<blank>`` and ``<s>`` included).
    """

    kind = "ct2-vocabulary"

    def __init__(
        self,
        tokens: list[str],
        specials: dict[str, int],
        prefix: tuple[int, ...] = (),
        suffix: tuple[int, ...] = (),
        why: str = "",
        side: str = "source",
        hidden: tuple[int, ...] = (),
    ):
        self.tokens = list(tokens)
        self.set_specials(specials)
        self.prefix, self.suffix, self.why, self.side = tuple(prefix), tuple(suffix), why, side
        self.hidden = tuple(hidden)

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {t: i for i, t in reversed(list(enumerate(self.tokens)))}  # the first id wins

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"VocabTokenizer(size={len(self)}, side={self.side!r})"

    def split(self, text: str) -> list[str]:
        """The tokens of ``text`` (split at spaces), nothing added."""
        if not isinstance(text, str):
            raise InputError(f"text must be a string, got {type(text).__name__}")
        return text.split()

    def _id(self, piece: str) -> int | None:
        """The id of a token, or of ``#<id>`` (how ids are shown), or None."""
        if piece in self._index:
            return self._index[piece]
        if piece[:1] == "#" and piece[1:].isdigit() and int(piece[1:]) < len(self.tokens):
            return int(piece[1:])
        return None

    def encode(self, text: str) -> Encoding:
        """Tokens (or ``#<id>``) -> ids; an unknown token -> the unknown id, listed in
        ``unknown``.

        Raises:
            InputError: more than half of the tokens are unknown (raw text typed into a
                folder whose subword model is missing: it would be translated as ``<unk>``).
        """
        pieces = self.split(text)
        found = [self._id(p) for p in pieces]
        ids = [self.unk_id if i is None else i for i in found]
        unknown = [p for p, i in zip(pieces, found, strict=True) if i is None]
        if len(unknown) * MOSTLY_UNKNOWN > len(pieces):
            raise InputError(self._too_many_unknown(unknown, len(pieces)))
        ids = [*self.prefix, *ids, *self.suffix]
        return Encoding(ids, [self.token(i) for i in ids], list(dict.fromkeys(unknown)))

    def _too_many_unknown(self, unknown: list[str], n: int) -> str:
        """The one line refusing a text most of whose ``n`` tokens are ``unknown``."""
        return (
            f"{len(unknown)} of {n} tokens are not in the vocabulary "
            f"({shorten(', '.join(map(repr, dict.fromkeys(unknown))), 80)}): this folder reads "
            "text as its tokens separated by spaces; to type plain text, put the "
            "sentencepiece.model the model was trained with beside model/ (or source.spm and "
            "target.spm in the folder)"
        )

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
        """Ids -> their tokens joined by spaces, up to the end id, without ``hidden`` ids (as
        CTranslate2 returns a hypothesis)."""
        kept = content_ids(ids, self.eos_id, stop_at_eos, self.hidden)
        return " ".join(self.token(i) for i in kept)

    def token(self, i: int) -> str:
        if i < 0:
            raise InputError(f"token id {i} is negative")
        return self.tokens[i] if i < len(self.tokens) else f"<unused {i}>"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "size": len(self), "specials": dict(self.specials)}


def folder_tokenizer(
    folder: Path, tokens: list[str], specials: dict[str, int], added: int
) -> tuple[HFTokenizer | None, str | None]:
    """The folder's ``tokenizer.json`` (a Hugging Face fast tokenizer) when it has one whose
    ids are the vocabulary's, else ``(None, why)``; ``why`` is None when there is no file.

    Args:
        tokens: the vocabulary (without a token the model adds).
        specials: the model's ``{"pad", "bos", "eos", "unk"}`` ids.
        added: ids the model has beyond ``tokens`` (the tokenizer never produces them).
    """
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None, None
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None, f"reading {path.name} needs transformers: {EXTRA}"
    names = {k: tokens[i] for k, i in specials.items() if i < len(tokens)}
    tok, why = load_fast_tokenizer(
        path, "PreTrainedTokenizerFast", eos_token=names.get("eos"),
        unk_token=names.get("unk"), pad_token=names.get("pad"),
    )  # fmt: skip
    if tok is None:
        return None, f"{why}; type tokens instead"
    try:
        vocab = tok.get_vocab()
    except Exception as exc:  # tokenizers raises many kinds: say which and go on without
        return None, f"{path} did not load ({type(exc).__name__}); type tokens instead"
    wrong = [t for i, t in enumerate(tokens) if vocab.get(t) != i]
    if wrong or len(vocab) != len(tokens):
        what = f"{shorten(wrong[0])!r} has another id" if wrong else "its size differs"
        return None, f"{path} does not match the vocabulary ({what}); type tokens instead"
    return HFTokenizer(tok, specials, folder, len(tokens) + added), None
