"""The tokenizer keys of a GGUF file's metadata, read and checked before anything is built.

:func:`read_spec` turns ``tokenizer.ggml.*`` into plain Python values (a "spec") or raises one
:class:`~attnviz.core.errors.InteropError` line naming the key: counts, sizes, element types,
finite scores, token types and special ids in range. :mod:`.tokenizer` builds from the spec.
"""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np

from ...core.errors import InteropError, one_line, shorten

MAX_TOKENS = 1_000_000
MAX_TOKEN_CHARS = 1024
MAX_TOTAL_CHARS = 32_000_000
MAX_MERGES = 2_000_000
#: Bound on the work of deriving merges (each token is cut at every position).
MAX_SPLIT_WORK = 200_000_000
#: llama.cpp's token types: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined,
#: 5 unused, 6 byte.
CONTROL, USER_DEFINED, MAX_TOKEN_TYPE = 3, 4, 6
KINDS = ("llama", "gpt2")
#: Architectures whose sentencepiece vocabulary is spelled and merged Gemma's way.
GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")


def read_spec(metadata: dict, vocab_rows: int, source: str) -> dict:
    """The tokenizer keys of ``metadata``, checked, as plain Python values.

    Raises:
        InteropError: one line naming the key.
    """
    if not isinstance(metadata, dict):
        raise InteropError(f"{shorten(source)}: metadata must be a dict")

    def bad(key: str, why: str) -> InteropError:
        return InteropError(f"{shorten(source)}: tokenizer.ggml.{key} {why}; "
                            "the file's tokenizer metadata is damaged or not llama.cpp's")  # fmt: skip

    kind = metadata.get("tokenizer.ggml.model")
    if kind not in KINDS:
        raise InteropError(
            f"{shorten(source)}: tokenizer.ggml.model is {shorten(repr(kind), 40)}; attnviz "
            f"reads {', '.join(repr(k) for k in KINDS)} (sentencepiece and byte-level BPE)"
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, (list, tuple)):
        raise bad("tokens", f"is {type(tokens).__name__}, not a list of strings")
    n = len(tokens)
    if not 0 < n <= MAX_TOKENS:
        raise bad("tokens", f"holds {n:,} tokens (1..{MAX_TOKENS:,} expected)")
    if n > vocab_rows:
        raise InteropError(f"{shorten(source)}: the tokenizer has {n:,} tokens but the model's "
                           f"embedding only {vocab_rows:,} rows; the file is inconsistent")  # fmt: skip
    total = 0
    for i, t in enumerate(tokens):
        if type(t) is not str or len(t) > MAX_TOKEN_CHARS:
            what = f"{len(t)} characters long" if type(t) is str else type(t).__name__
            raise bad(
                "tokens", f"[{i}] is {what}, not a string (at most {MAX_TOKEN_CHARS} characters)"
            )
        total += len(t)
    if total > MAX_TOTAL_CHARS:
        raise bad("tokens", f"spell {total:,} characters (at most {MAX_TOTAL_CHARS:,})")
    try:
        "".join(tokens).encode("utf-8")
    except UnicodeEncodeError:
        i = next(i for i, t in enumerate(tokens) if not _utf8(t))
        raise bad("tokens", f"[{i}] is not valid UTF-8 text") from None

    spec: dict = {"kind": kind, "tokens": list(tokens), "source": source}
    spec["arch"] = str(metadata.get("general.architecture", ""))[:64]
    pre = metadata.get("tokenizer.ggml.pre", "default")
    spec["pre"] = pre if isinstance(pre, str) else "default"
    spec["scores"] = _numbers(metadata, "scores", n, float, bad)
    if spec["scores"] is not None and not all(map(math.isfinite, spec["scores"])):
        raise bad("scores", "holds a NaN or infinite score")
    types = _numbers(metadata, "token_type", n, int, bad)
    if types is not None and not all(0 <= t <= MAX_TOKEN_TYPE for t in types):
        raise bad("token_type", f"holds a type outside 0..{MAX_TOKEN_TYPE}")
    spec["types"] = types
    spec["merges"] = _merges(metadata.get("tokenizer.ggml.merges"), bad)
    if kind == "llama" and spec["merges"] is None:
        _check_split_work(spec, bad)

    ids = {}
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                      ("unk", "unknown_token_id"), ("pad", "padding_token_id")):  # fmt: skip
        value = metadata.get(f"tokenizer.ggml.{key}")
        if value is None:
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise bad(key, f"is {shorten(repr(value), 30)}, not a token id")
        if not 0 <= int(value) < n:
            raise bad(key, f"is {int(value)}, outside the {n:,} tokens (0..{n - 1})")
        ids[role] = int(value)
    spec["ids"] = ids
    for flag in ("add_bos_token", "add_eos_token"):
        value = metadata.get(f"tokenizer.ggml.{flag}")
        if value is not None and not isinstance(value, (bool, np.bool_)):
            raise bad(flag, f"is {shorten(repr(value), 30)}, not true or false")
        spec[flag] = None if value is None else bool(value)
    if spec["add_bos_token"] is None:  # llama.cpp adds BOS to a sentencepiece vocabulary
        spec["add_bos_token"] = kind == "llama"
    eos = ids.get("eos", 0)
    spec["specials"] = {"pad": ids.get("pad", eos), "bos": ids.get("bos", eos), "eos": eos,
                        "unk": ids.get("unk", 0)}  # fmt: skip
    return spec


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _numbers(metadata: dict, key: str, n: int, kind: type, bad) -> list | None:
    """A numeric array of ``n`` values as a list of ``kind`` (None when absent)."""
    value = metadata.get(f"tokenizer.ggml.{key}")
    if value is None:
        return None
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise bad(key, f"is {type(value).__name__}, not an array")
    if len(value) != n:
        raise bad(key, f"holds {len(value):,} values for {n:,} tokens")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise bad(key, f"does not read as numbers ({one_line(exc, 60)})") from None
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.number) and arr.dtype != np.bool_):
        raise bad(key, f"holds {arr.dtype} values, not numbers")
    if kind is int and not np.issubdtype(arr.dtype, np.integer):
        raise bad(key, f"holds {arr.dtype} values, not integers")
    return arr.astype(np.float64 if kind is float else np.int64).tolist()


def _merges(value: object, bad) -> list[tuple[str, str]] | None:
    """``"left right"`` strings -> pairs (None when absent)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise bad("merges", f"is {type(value).__name__}, not a list of strings")
    if len(value) > MAX_MERGES:
        raise bad("merges", f"holds {len(value):,} merges (at most {MAX_MERGES:,})")
    pairs = []
    for i, m in enumerate(value):
        parts = m.split(" ") if type(m) is str and len(m) <= 2 * MAX_TOKEN_CHARS else ()
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise bad("merges", f"[{i}] is {shorten(repr(m), 40)}, not 'left right'")
        pairs.append((parts[0], parts[1]))
    return pairs


def _check_split_work(spec: dict, bad) -> None:
    """Refuse a vocabulary whose merges would take minutes to derive (very long tokens)."""
    work = sum(len(t) * len(t) for t in spec["tokens"])
    if work > MAX_SPLIT_WORK:
        raise bad("tokens", f"are too long to derive merges from ({work:,} > {MAX_SPLIT_WORK:,})")
    if spec["scores"] is None and spec["arch"] not in GEMMA_ARCHS:
        raise bad("scores", "are missing, and so are the merges")


def spec_hash(spec: dict) -> str:
    """A hash of everything the built tokenizer depends on (the default cache key)."""
    h = hashlib.sha256()
    for part in ("kind", "arch", "pre", "ids", "add_bos_token", "add_eos_token"):
        h.update(repr(spec[part]).encode() + b"\0")
    h.update("\0".join(spec["tokens"]).encode("utf-8", "surrogatepass"))
    for part in ("scores", "types"):
        if spec[part] is not None:
            h.update(part.encode() + np.asarray(spec[part]).tobytes())
    if spec["merges"] is not None:
        h.update("\n".join(f"{a} {b}" for a, b in spec["merges"]).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def safe_key(key: str) -> str:
    """A cache key as a file name (no separators; long keys hashed)."""
    text = re.sub(r"[^A-Za-z0-9_.-]", "_", str(key)).lstrip(".")
    return text if 0 < len(text) <= 100 else hashlib.sha256(str(key).encode()).hexdigest()[:32]
