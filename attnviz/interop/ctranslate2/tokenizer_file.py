"""A CTranslate2 folder's ``tokenizer.json``, checked before the Rust ``tokenizers`` library
sees it, with the allow-list attnviz applies to Hugging Face folders
(:func:`attnviz.data.tokenizer_checks.check_folder`: component types and regular
expressions), plus bounds on the file's size and on its ``added_tokens`` (100,000 added
tokens in an 835 KB file made the Rust library allocate ~2 GB and abort the process). Padding
and truncation are never taken from the file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from ...core.errors import InputError, one_line, shorten
from ...data.tokenizer_checks import check_folder, rust_panics

#: Most ``added_tokens`` a tokenizer.json may list (Whisper's has 107, about 1,600 where the
#: timestamps are listed too).
MAX_ADDED_TOKENS = 5000
#: Most characters the added tokens may hold together, and one of them.
MAX_ADDED_CHARS = 200_000
MAX_ADDED_TOKEN_CHARS = 1000
#: Largest tokenizer.json read (Whisper's is 2 MB; Gemma 3's, 262,144 pieces, 33 MB).
MAX_TOKENIZER_BYTES = 64 << 20


def check_added_tokens(doc: dict) -> None:
    """Refuse ``added_tokens`` the Rust library would spend unbounded memory on.

    Raises:
        InputError: one line with the count or size and the limit.
    """
    added = doc.get("added_tokens")
    if added is None:
        return
    if not isinstance(added, list):
        raise InputError("its added_tokens is not a list")
    if len(added) > MAX_ADDED_TOKENS:
        raise InputError(f"it lists {len(added):,} added tokens (at most {MAX_ADDED_TOKENS:,})")
    total = 0
    for token in added:
        content = token.get("content") if isinstance(token, dict) else None
        if not isinstance(content, str) or len(content) > MAX_ADDED_TOKEN_CHARS:
            raise InputError(
                f"an added token is not a string of at most {MAX_ADDED_TOKEN_CHARS} characters: "
                f"{shorten(repr(token), 60)}"
            )
        total += len(content)
    if total > MAX_ADDED_CHARS:
        raise InputError(
            f"its added tokens hold {total:,} characters (at most {MAX_ADDED_CHARS:,})"
        )


def read_tokenizer_json(path: Path) -> dict:
    """``path`` read and checked: size, :func:`check_folder`, :func:`check_added_tokens`;
    padding and truncation removed.

    Raises:
        InputError: one line saying what is refused.
    """
    size = path.stat().st_size
    if size > MAX_TOKENIZER_BYTES:
        raise InputError(f"it has {size:,} bytes (at most {MAX_TOKENIZER_BYTES:,})")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"it does not read ({one_line(exc, 120)})") from None
    check_folder(doc)
    check_added_tokens(doc)
    return doc | {"padding": None, "truncation": None}


def load_fast_tokenizer(path: Path, cls_name: str, **kwargs):
    """A transformers fast tokenizer (``cls_name``: ``"PreTrainedTokenizerFast"`` or
    ``"WhisperTokenizerFast"``) built from the checked document of ``path``, or
    ``(None, why)``.

    Returns:
        ``(tokenizer, None)`` or ``(None, why)``: refused, not loadable, or transformers
        missing.
    """
    try:
        doc = read_tokenizer_json(path)
    except InputError as exc:
        return None, f"{shorten(path, 300)} is not used: {exc}"
    try:
        import transformers
        from tokenizers import Tokenizer

        with warnings.catch_warnings(), rust_panics(f"loading {path.name}"):
            warnings.simplefilter("ignore")
            backend = Tokenizer.from_str(json.dumps(doc))
            backend.no_padding()
            backend.no_truncation()
            tok = getattr(transformers, cls_name)(tokenizer_object=backend, **kwargs)
    except Exception as exc:  # ImportError, or tokenizers / transformers refusing the file
        return (
            None,
            f"{shorten(path, 300)} did not load ({type(exc).__name__}: {one_line(exc, 120)})",
        )
    return tok, None
