"""What an uploaded file is, from its bytes (never from its name alone; nothing is unpickled),
and how large an upload may be."""

from __future__ import annotations

import codecs
import struct
import zipfile

_PICKLE_PROTOCOLS = b"\x02\x03\x04\x05"
#: The largest file the page takes by default (``attnviz app --max-upload``); gradio's own
#: cap, 200 MB, fits no real model.
MAX_UPLOAD = "2gb"
_UNITS = {"": 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}


def upload_bytes(size: str | int) -> int:
    """An upload cap in bytes: ``"2gb"``, ``"500 MB"``, ``"1.5GB"`` or a number of bytes
    (1 KB = 1024 bytes, as gradio counts).

    Raises:
        ValueError: one line, for anything else.
    """
    text = str(size).strip().lower().replace(" ", "")
    num = text.rstrip("kmgtb")
    unit = text[len(num) :]
    try:
        n = int(float(num) * _UNITS[unit])
    except (KeyError, ValueError, OverflowError):
        raise ValueError(f"not a size: {size!r} (try 2gb, 500mb or a number of bytes)") from None
    if n <= 0:
        raise ValueError(f"an upload cap must be above 0 bytes, got {size!r}")
    return n


def size_label(n: int) -> str:
    """Bytes as a person reads them: ``"2 GB"``, ``"500 MB"``, ``"1.5 GB"``."""
    for unit in ("TB", "GB", "MB", "KB"):
        if n >= _UNITS[unit.lower()]:
            return f"{n / _UNITS[unit.lower()]:.3g} {unit}"
    return f"{n} bytes"


def what_is(head: bytes, is_torch_zip: bool = False) -> str:
    """What a file is, in words, from its first bytes (a few hundred).

    Args:
        head: the file's first bytes.
        is_torch_zip: the file is a zip holding a ``data.pkl`` (what ``torch.save`` writes).
    Returns:
        ``"safetensors"``, ``"a pickle"``, ``"a torch.save file"``, ``"a zip archive"``,
        ``"an empty file"``, ``"a text file"`` or ``"a file of unrecognised bytes"``.
    """
    if not head:
        return "an empty file"
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] > 1:
        return "safetensors"  # an 8-byte little-endian header length, then the JSON header
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "a torch.save file" if is_torch_zip else "a zip archive"
    if head[:1] == b"\x80" and head[1:2] and head[1] in _PICKLE_PROTOCOLS:
        return "a pickle"
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return "a file of unrecognised bytes"
    printable = all(c.isprintable() or c in "\t\n\r\f" for c in text)
    return "a text file" if printable else "a file of unrecognised bytes"


def _torch_zip(open_file) -> bool:
    """A zip (``open_file() -> binary file``) with a ``data.pkl`` member: torch.save's format."""
    try:
        with open_file() as f, zipfile.ZipFile(f) as z:
            return any(n.endswith("data.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError):
        return False


def sniff(open_file) -> str:
    """:func:`what_is` of a file given as ``open_file() -> binary file``."""
    with open_file() as f:
        head = f.read(512)
    return what_is(head, head.startswith(b"PK") and _torch_zip(open_file))
