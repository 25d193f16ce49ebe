"""How a head is named: one spelling written, one parser for every spelling read.

A head is written ``"cross L1 H2"`` (kind, 0-based layer, 0-based head): :func:`head_name`.
:func:`parse_head` reads that, the page's ``"cross 1 2"`` and the command line's
``"cross:1:2"``; :func:`parse_layer` and :func:`parse_head_index` read one part
(``"L1"`` / ``"1"`` / ``1``).
"""

from __future__ import annotations

import re

from .errors import InputError
from .model import KINDS

#: A head as every message writes it.
EXAMPLE = "cross L1 H2"
_SEP = r"(?:\s+|:)"
_HEAD = re.compile(rf"(\w+){_SEP}[Ll]?(\d{{1,6}}){_SEP}[Hh]?(\d{{1,6}})")
_PART = {"L": re.compile(r"[Ll]?(\d{1,6})"), "H": re.compile(r"[Hh]?(\d{1,6})")}


def head_name(kind: str, layer: int, head: int) -> str:
    """``("cross", 1, 2)`` -> ``"cross L1 H2"``."""
    return f"{kind} L{layer} H{head}"


def parse_head(text: str) -> tuple[str, int, int]:
    """A head in any spelling -> ``(kind, layer, head)``.

    Args:
        text: ``"cross L1 H2"``, ``"cross 1 2"`` (the page) or ``"cross:1:2"`` (the CLI).
    Raises:
        InputError: not a head, or a kind that is not one of ``KINDS``.
    """
    m = _HEAD.fullmatch(str(text).strip())
    if not m:
        raise InputError(
            f"not a head: {str(text)[:40]!r}; a head reads like '{EXAMPLE}' "
            "(or KIND:LAYER:HEAD, e.g. cross:1:2)"
        )
    if m[1] not in KINDS:
        raise InputError(f"unknown attention kind {m[1][:40]!r}; one of {', '.join(KINDS)}")
    return m[1], int(m[2]), int(m[3])


def _number(value, prefix: str, what: str) -> int:
    m = _PART[prefix].fullmatch(str(value).strip())
    if not m:
        raise InputError(f"not a {what}: {str(value)[:40]!r}; {what}s read like '{prefix}1'")
    return int(m[1])


def parse_layer(value: str | int) -> int:
    """A layer as a person or the page names it (``"L1"``, ``"1"`` or ``1``) -> ``1``."""
    return _number(value, "L", "layer")


def parse_head_index(value: str | int) -> int:
    """One head of a layer (``"H2"``, ``"2"`` or ``2``) -> ``2``."""
    return _number(value, "H", "head")
