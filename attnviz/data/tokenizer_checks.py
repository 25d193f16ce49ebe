"""Checks on ``tokenizers`` JSON read from a file, before the Rust library sees it.

A tokenizer stored in a checkpoint (or a Hugging Face folder's ``tokenizer.json``) is data
from whoever wrote the file, and the Rust library trusts it: ``padding`` of a fixed length of
10^8 aborts the process, a ``Split`` pre-tokenizer's user regex such as ``(a+)+$`` panics or
runs for minutes. So only the components attnviz's own training writes
(:func:`check_own`) or that a Hugging Face family's tokenizer class produces
(:func:`check_folder`) load, no regex but a few known ones runs, and padding and truncation
are never taken from a file. A panic that still comes out of Rust becomes one
:class:`~attnviz.core.errors.InputError` line (:func:`rust_panics`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..core.errors import InputError, one_line, shorten

WORD_START = "▁"
#: The Metaspace pre-tokenizer and decoder attnviz's training writes (attnviz.data.subword).
_METASPACE_SPLIT = {"type": "Metaspace", "replacement": WORD_START, "prepend_scheme": "never",
                    "split": True}  # fmt: skip
_METASPACE_DECODE = {"type": "Metaspace", "replacement": WORD_START, "prepend_scheme": "always",
                     "split": True}  # fmt: skip
_OWN = {
    "truncation": (None,),
    "padding": (None,),
    "added_tokens": ([],),
    "normalizer": ({"type": "Prepend", "prepend": WORD_START},),
    "pre_tokenizer": (_METASPACE_SPLIT,),
    "post_processor": (None,),
    "decoder": (
        _METASPACE_DECODE,
        {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, _METASPACE_DECODE]},
    ),
}
#: Fields of the model each kind has, and the values a field may take (None: any of its type).
_OWN_MODEL = {
    "BPE": {
        "dropout": (None,),
        "unk_token": ("<unk>",),
        "continuing_subword_prefix": (None,),
        "end_of_word_suffix": (None,),
        "fuse_unk": (False, True),
        "byte_fallback": (False, True),
        "ignore_merges": (False, True),
        "vocab": dict,
        "merges": list,
    },  # fmt: skip
    "Unigram": {"unk_id": int, "vocab": list, "byte_fallback": (False, True)},
}

#: Component types a Hugging Face family's tokenizer.json may hold (what transformers'
#: converters write for Marian, BART/mBART, Pegasus, T5, FSMT, GPT-2, BERT, Llama, Whisper).
FOLDER_TYPES = {
    "normalizer": {
        "NFC",
        "NFD",
        "NFKC",
        "NFKD",
        "Lowercase",
        "Strip",
        "StripAccents",
        "Prepend",
        "Precompiled",
        "Replace",
        "Sequence",
        "BertNormalizer",
        "Nmt",
        "ByteLevel",
    },  # fmt: skip
    "pre_tokenizer": {
        "Metaspace",
        "ByteLevel",
        "Whitespace",
        "WhitespaceSplit",
        "BertPreTokenizer",
        "Punctuation",
        "Digits",
        "Split",
        "Sequence",
        "UnicodeScripts",
        "CharDelimiterSplit",
    },  # fmt: skip
    "model": {"BPE", "Unigram", "WordPiece", "WordLevel"},
    "post_processor": {
        "TemplateProcessing",
        "RobertaProcessing",
        "BertProcessing",
        "ByteLevel",
        "Sequence",
    },  # fmt: skip
    "decoder": {
        "Metaspace",
        "ByteLevel",
        "ByteFallback",
        "Fuse",
        "Strip",
        "Replace",
        "WordPiece",
        "BPEDecoder",
        "CTC",
        "Sequence",
    },  # fmt: skip
}
#: Word splitters transformers' GGUF tokenizers use (Qwen 3.5, Mistral's Tekken, GPT-4o's).
QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
GPT4O_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _CONTRACTION
    + r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTION
    + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)  # fmt: skip
#: The only regular expressions a folder's tokenizer may run, besides alternations of plain
#: strings (sentencepiece's user-defined pieces): those transformers' converters write
#: (GPT-2's and Llama 3's word splitters, sentencepiece's space handling).
KNOWN_PATTERNS = frozenset({
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+",
    " {2,}", r"\A +| +\z", r"\A▁", r"\s+",
    QWEN35_SPLIT, TEKKEN_SPLIT, GPT4O_SPLIT,
})  # fmt: skip
#: Characters with a meaning in a regular expression (escaped, they stand for themselves).
_REGEX_META = frozenset(".^$*+?{}[]()")
#: Where a Sequence component keeps its parts.
_PARTS = ("normalizers", "pretokenizers", "decoders", "processors")


def check_own(doc: object, kind: str) -> None:
    """Refuse ``tokenizers`` JSON that attnviz's subword training (``attnviz.data.subword``) does
    not write: other components, padding, truncation, added tokens, a regex of any kind.

    Raises:
        InputError: one line naming the first part that differs.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise InputError(f"a {kind} tokenizer must be saved with its 'hf' tokenizers JSON")
    model = doc["model"]
    fields = _OWN_MODEL.get(str(model.get("type")))
    if fields is None or str(model.get("type")).lower() != kind:
        raise InputError(f"a {kind} tokenizer holds a {shorten(model.get('type'))} model")
    for name, value in model.items():
        if name == "type":
            continue
        allowed = fields.get(name)
        ok = allowed is not None and (
            isinstance(value, allowed) if isinstance(allowed, type) else value in allowed
        )
        if not ok or isinstance(value, bool) is not (allowed == (False, True)):
            raise InputError(
                f"the saved {kind} tokenizer's model field {shorten(name, 40)} is not "
                f"attnviz's own: {shorten(repr(value))}"
            )

    extra = sorted(set(doc) - set(_OWN) - {"model", "version"})
    if extra:
        raise InputError(f"the saved {kind} tokenizer has parts attnviz never writes: "
                         f"{shorten(', '.join(map(str, extra)))}")  # fmt: skip
    for part, allowed in _OWN.items():
        if doc.get(part) not in allowed:
            what = "never pads" if part == "padding" else "never truncates"
            why = what if part in ("padding", "truncation") else "does not write this"
            raise InputError(
                f"the saved {kind} tokenizer's {part} is not attnviz's own ({why}): "
                f"{shorten(repr(doc.get(part)))}"
            )


def check_folder(doc: object) -> None:
    """Refuse a Hugging Face ``tokenizer.json`` holding components no supported family's
    tokenizer class writes, or a regular expression other than :data:`KNOWN_PATTERNS`.
    Padding and truncation are not checked here: the loader turns them off.

    Raises:
        InputError: one line naming the component.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise InputError("tokenizer.json has no 'model' object")
    for part, types in FOLDER_TYPES.items():
        value = doc.get(part)
        if value is not None:
            for component in _components(value, part):
                _check_component(component, part, types)


def _components(value: object, part: str, depth: int = 0) -> Iterator[dict]:
    """``value`` and, for a ``Sequence``, each of its parts (nested), as dicts."""
    if not isinstance(value, dict) or depth > 8:
        raise InputError(f"tokenizer.json's {part} is not a component: {shorten(repr(value))}")
    yield value
    if value.get("type") == "Sequence":
        parts = [value[k] for k in _PARTS if k in value]
        if len(parts) != 1 or not isinstance(parts[0], list):
            raise InputError(f"tokenizer.json's {part} Sequence has no list of parts")
        for item in parts[0]:
            yield from _components(item, part, depth + 1)


def _check_component(component: dict, part: str, types: set[str]) -> None:
    kind = component.get("type")
    if kind not in types:
        raise InputError(
            f"tokenizer.json's {part} {shorten(repr(kind), 40)} is not one a supported family's "
            f"tokenizer uses ({', '.join(sorted(types))})"
        )
    pattern = component.get("pattern")
    if pattern is None:
        return
    if not isinstance(pattern, dict) or len(pattern) != 1:
        raise InputError(f"tokenizer.json's {part} {kind} has an unreadable pattern")
    (how, text), = pattern.items()  # fmt: skip
    if how == "String" and isinstance(text, str):
        return
    if how == "Regex" and isinstance(text, str) and (text in KNOWN_PATTERNS or _literals(text)):
        return
    raise InputError(
        f"tokenizer.json's {part} {kind} runs the regular expression {shorten(repr(text), 60)}; "
        "attnviz runs only the ones transformers' converters write (a regex from a file may "
        "run for minutes or crash)"
    )


def _literals(pattern: str) -> bool:
    """Whether ``pattern`` is plain strings joined by ``|`` (``re.escape`` pieces): it matches
    in linear time, with nothing to backtrack."""
    escaped = False
    for ch in pattern:
        if escaped:
            if ch.isalnum():  # \d, \w, \p{...}: a class, not a literal
                return False
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in _REGEX_META:
            return False
    return bool(pattern) and not escaped


@contextlib.contextmanager
def rust_panics(what: str) -> Iterator[None]:
    """Turn a panic inside the Rust ``tokenizers`` library (``pyo3_runtime.PanicException``,
    a ``BaseException``) into one :class:`InputError` line saying ``what`` failed."""
    try:
        yield
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        raise InputError(
            f"{what} failed inside the tokenizers library: {one_line(exc, 200)}"
        ) from None
