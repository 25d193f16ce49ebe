"""A GGUF reader that trusts nothing in the file.

Layout (little-endian, versions 2 and 3): magic ``GGUF``, u32 version, u64 tensor count,
u64 metadata count; the metadata key/values; one info per tensor (name, rank, dims, type,
offset); padding to ``general.alignment`` (default 32); the tensor data. Every count, length,
rank, dimension, type and offset is checked against the bytes the file holds before anything
is allocated or read, so a crafted file is refused at once with one line naming the problem.
Tensor data is read only by :func:`load_tensor`, one bounded slice per tensor.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnviz.core.errors import CheckpointError, shorten

from .quants import GGML_TYPES, READABLE, GGMLType, dequantize

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
#: Most bytes the header (metadata and tensor table) may take, whatever the file's size.
MAX_HEADER_BYTES = 1 << 28
#: Most Python values (strings, numbers in non-numpy arrays, nested arrays) the metadata
#: may turn into, so a header of tiny items cannot fill memory with objects.
MAX_ITEMS = 1 << 22
MAX_TENSORS = 1 << 20  # real files hold a few thousand (experts are stacked in one tensor)
MAX_DEPTH = 8  # arrays inside arrays
MAX_RANK = 4  # GGML_MAX_DIMS
MAX_NAME_BYTES = 1 << 10  # llama.cpp allows 64
MAX_ALIGNMENT = 1 << 20

# Metadata value types: id -> (name, struct format, numpy dtype) for fixed-size ones.
_STRING, _ARRAY, _BOOL = 8, 9, 7
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"),
    1: ("<b", "<i1"),
    2: ("<H", "<u2"),
    3: ("<h", "<i2"),
    4: ("<I", "<u4"),
    5: ("<i", "<i4"),
    6: ("<f", "<f4"),
    7: ("<B", "<u1"),
    10: ("<Q", "<u8"),
    11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}
_U64 = struct.Struct("<Q")
_MIN_VALUE_BYTES = 1  # the smallest value (u8, i8, bool)
_MIN_KV_BYTES = 8 + 4 + _MIN_VALUE_BYTES  # key length, value type, value
_MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8  # name length, name, rank, one dim, type, offset


class GGUFError(CheckpointError):
    """A GGUF file that cannot be read: not GGUF, truncated, inconsistent or unsupported."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file, as its table describes it (already checked).

    ``shape`` is in torch/numpy order: GGUF's dims reversed, so a token table stored as
    ``[ne0=D, ne1=V]`` has shape ``(V, D)``.
    """

    name: str
    shape: tuple[int, ...]
    type_name: str
    type_id: int
    offset: int  # absolute byte offset in the file
    n_bytes: int


@dataclass
class GGUFFile:
    """The checked header of a GGUF file: metadata and tensor table; no tensor data."""

    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]  # in file order
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0  # where the data section starts
    file_size: int = 0
    metadata_types: dict[str, int] = field(default_factory=dict)  # key -> GGUF value type id

    def type_counts(self) -> dict[str, int]:
        """Number of tensors of each type name, e.g. ``{"Q4_K": 27, "F32": 157}``."""
        return dict(Counter(info.type_name for info in self.tensors.values()))

    def file_type(self) -> str | None:
        """The file type ``general.file_type`` names ("Q4_K_M", "F16", ...), if it names one."""
        value = self.metadata.get("general.file_type")
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        return _FILE_TYPES.get(value, f"file type {value}")

    def describe_types(self) -> str:
        """One line: the file type and its tensors by type, e.g. "Q4_K_M: 27 Q4_K, 9 Q6_K tensors"."""
        counts = sorted(self.type_counts().items())
        parts = ", ".join(f"{n} {name}" for name, n in counts) or "no"
        kind = self.file_type()
        return f"{kind + ': ' if kind else ''}{parts} tensors"


# llama_ftype (llama.h): general.file_type -> the name llama.cpp's quantize tool uses.
_FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE", 1024: "guessed",
}  # fmt: skip


def is_gguf(path: str | os.PathLike) -> bool:
    """True if ``path`` is a file that starts with the GGUF magic (nothing else is checked)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


class _Cursor:
    """Reads little-endian values from a buffer, refusing any read past ``end``."""

    def __init__(self, buf: Any, end: int, label: str, file_size: int) -> None:
        self.buf, self.pos, self.end, self.label = buf, 0, end, label
        self.holds = "the file holds" if end >= file_size else "a GGUF header may take"
        self.where = "the header"
        self.items = 0

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(f"{self.label}: {problem}")

    def need(self, n_bytes: int, claim: str) -> None:
        """Refuse ``claim`` (what the file says is next) unless ``n_bytes`` remain."""
        if n_bytes > self.end - self.pos:
            raise self.fail(f"{self.where} claims {claim}, more than {self.holds}")

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if size > self.end - self.pos:
            raise self.fail(f"file ends inside {self.where} (truncated at byte {self.end})")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def count(self, n: int) -> None:
        self.items += n
        if self.items > MAX_ITEMS:
            raise self.fail(f"{self.where} makes the metadata hold more than {MAX_ITEMS} values")

    def string(self, what: str = "a string", limit: int | None = None) -> str:
        length = self.take("<Q")
        if limit is not None and length > limit:
            raise self.fail(f"{self.where} claims {what} of {length} bytes (at most {limit})")
        self.need(length, f"{what} of {length} bytes")
        text = str(self.buf[self.pos : self.pos + length], "utf-8", "replace")
        self.pos += length
        return text

    def strings(self, n: int) -> list[str]:
        """``n`` strings in a row: :meth:`string` unrolled, as vocabularies hold 10^5 of them."""
        buf, pos, end, out = self.buf, self.pos, self.end, []
        unpack, append = _U64.unpack_from, out.append
        for _ in range(n):
            if end - pos < 8:
                self.pos = end
                self.take("<Q")  # raises: the file ends here
            (length,) = unpack(buf, pos)
            pos += 8
            if length > end - pos:
                self.pos = pos
                self.need(length, f"a string of {length} bytes")  # raises
            append(str(buf[pos : pos + length], "utf-8", "replace"))
            pos += length
        self.pos = pos
        return out

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            v = self.take(_SCALARS[vtype][0])
            return bool(v) if vtype == _BOOL else v
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array(depth + 1)
        raise self.fail(f"{self.where} has unknown value type {vtype}")

    def array(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"{self.where} nests arrays more than {MAX_DEPTH} deep")
        itype = self.take("<I")
        n = self.take("<Q")
        if itype in _SCALARS:
            dtype = np.dtype(_SCALARS[itype][1])
            self.need(n * dtype.itemsize, f"an array of {n} elements")
            arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=self.pos).copy()
            self.pos += n * dtype.itemsize
            return arr.astype(bool) if itype == _BOOL else arr
        if itype == _STRING:
            self.need(n * 8, f"an array of {n} elements")
            self.count(n)
            return self.strings(n)
        if itype == _ARRAY:
            self.need(n * 12, f"an array of {n} elements")
            self.count(n)
            return [self.array(depth + 1) for _ in range(n)]
        raise self.fail(f"{self.where} is an array of unknown value type {itype}")


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Read and check the header of a GGUF file: metadata and tensor table, no tensor data.

    Args:
        path: a ``.gguf`` file (version 2 or 3, little-endian).

    Returns:
        A :class:`GGUFFile` whose every tensor lies, aligned and apart, inside the file.

    Raises:
        GGUFError: the file is not GGUF, is truncated, or claims more than it holds.
    """
    path = Path(path).expanduser()
    label = shorten(path.name)
    if not path.is_file():
        raise GGUFError(f"{label}: no such GGUF file ({shorten(path)})")
    file_size = path.stat().st_size
    if file_size < 24:
        raise GGUFError(f"{label}: {file_size} bytes is too short for a GGUF header (24 bytes)")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        file_size = len(buf)
        # Arrays are copied out of the mapping (never viewed), so it closes cleanly.
        return _parse(_Cursor(buf, min(file_size, MAX_HEADER_BYTES), label, file_size), path)


def _parse(cur: _Cursor, path: Path) -> GGUFFile:
    file_size = len(cur.buf)
    if bytes(cur.buf[:4]) != MAGIC:
        raise cur.fail(f"not a GGUF file (starts with {bytes(cur.buf[:4])!r}, not b'GGUF')")
    cur.pos = 4
    version = cur.take("<I")
    if version not in VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in (1, 2, 3):
            raise cur.fail("a big-endian GGUF file, which attnviz does not read")
        hint = "; convert it again with a current llama.cpp" if version == 1 else ""
        raise cur.fail(f"GGUF version {version}, which attnviz does not read (2 or 3){hint}")
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    cur.need(n_kv * _MIN_KV_BYTES, f"{n_kv} metadata entries")
    cur.need(n_tensors * _MIN_TENSOR_BYTES, f"{n_tensors} tensors")
    if n_tensors > MAX_TENSORS:
        raise cur.fail(
            f"the header claims {n_tensors} tensors (attnviz reads at most {MAX_TENSORS})"
        )
    cur.count(n_kv)

    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for i in range(n_kv):
        cur.where = f"metadata entry #{i}"
        key = cur.string("a key", MAX_NAME_BYTES)
        if key in metadata:
            raise cur.fail(f"metadata key '{shorten(key)}' appears twice")
        cur.where = f"metadata key '{shorten(key)}'"
        vtype = cur.take("<I")
        metadata[key], types[key] = cur.value(vtype), vtype

    alignment = _alignment(cur, metadata)
    tensors = _tensor_table(cur, n_tensors)
    data_offset = -(-cur.pos // alignment) * alignment
    out = {}
    end_of_previous, previous = 0, ""
    for name, (shape, gtype, rel, n_bytes) in sorted(tensors.items(), key=lambda t: t[1][2]):
        where = f"tensor '{shorten(name)}'"
        if rel % alignment:
            raise cur.fail(f"{where} starts at offset {rel}, not a multiple of {alignment}")
        if data_offset + rel + n_bytes > file_size:
            raise cur.fail(
                f"{where} claims {n_bytes} bytes at offset {rel} of the data section, past "
                f"the end of the file ({max(0, file_size - data_offset)} data bytes; truncated?)"
            )
        if rel < end_of_previous:
            raise cur.fail(f"{where} overlaps tensor '{shorten(previous)}'")
        end_of_previous, previous = rel + n_bytes, name
        out[name] = TensorInfo(name, shape, gtype.name, gtype.type_id, data_offset + rel, n_bytes)
    return GGUFFile(
        path=path,
        version=version,
        metadata=metadata,
        tensors={name: out[name] for name in tensors},
        alignment=alignment,
        data_offset=data_offset,
        file_size=file_size,
        metadata_types=types,
    )


def _alignment(cur: _Cursor, metadata: dict[str, Any]) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 0 < value <= MAX_ALIGNMENT
        or value & (value - 1)
    ):
        raise cur.fail(f"general.alignment is {shorten(repr(value))}, not a power of two")
    return value


def _tensor_table(cur: _Cursor, n_tensors: int) -> dict[str, tuple]:
    """name -> (shape in torch order, type, offset in the data section, bytes), checked."""
    tensors: dict[str, tuple] = {}
    for i in range(n_tensors):
        cur.where = f"tensor #{i}"
        name = cur.string("a name", MAX_NAME_BYTES)
        if name in tensors:
            raise cur.fail(f"tensor name '{shorten(name)}' appears twice")
        cur.where = where = f"tensor '{shorten(name)}'"
        rank = cur.take("<I")
        if not 1 <= rank <= MAX_RANK:
            raise cur.fail(f"{where} has rank {rank} (GGUF allows 1 to {MAX_RANK})")
        dims = [cur.take("<Q") for _ in range(rank)]
        if min(dims) == 0:
            raise cur.fail(f"{where} has a dimension of 0 (dims {dims})")
        type_id = cur.take("<I")
        gtype = GGML_TYPES.get(type_id)
        if gtype is None:
            raise cur.fail(f"{where} has unknown tensor type id {type_id}")
        rel = cur.take("<Q")
        n_bytes = _n_bytes(cur, where, dims, gtype)
        tensors[name] = (tuple(reversed(dims)), gtype, rel, n_bytes)
    return tensors


def _n_bytes(cur: _Cursor, where: str, dims: list[int], gtype: GGMLType) -> int:
    """Bytes a tensor of GGUF ``dims`` takes, refused unless it could fit the file."""
    if dims[0] % gtype.block_size:
        raise cur.fail(
            f"{where} has rows of {dims[0]} values, not a multiple of {gtype.name}'s "
            f"block of {gtype.block_size}"
        )
    n_values = math.prod(dims)  # Python ints: no overflow
    n_bytes = n_values // gtype.block_size * gtype.type_size
    if n_values >= 1 << 63 or n_bytes > len(cur.buf):
        raise cur.fail(f"{where} claims dims {dims} ({n_bytes} bytes), more than the file holds")
    return n_bytes


def load_tensor(f: GGUFFile, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One tensor of a checked GGUF file, dequantized.

    Args:
        f: what :func:`read_gguf` returned for the file.
        name: the tensor's GGUF name, e.g. ``"blk.0.attn_q.weight"``.
        dtype: the dtype of the result (values are decoded to float32 first).

    Returns:
        A tensor of shape ``f.tensors[name].shape`` (GGUF's dims reversed).

    Raises:
        GGUFError: no such tensor, a type attnviz does not read, or the file has changed.
    """
    info = f.tensors.get(name)
    label = shorten(f.path.name)
    if info is None:
        raise GGUFError(f"{label}: no tensor named '{shorten(name)}' in the file")
    gtype = GGML_TYPES[info.type_id]
    if gtype.name not in READABLE:
        raise GGUFError(
            f"{label}: tensor {shorten(name)} is stored as {gtype.name}, which attnviz does not "
            f"read (it reads {', '.join(READABLE)})"
        )
    raw = bytearray(info.n_bytes)
    try:
        with open(f.path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size != f.file_size:
                raise GGUFError(f"{label}: the file changed since it was read; open it again")
            fh.seek(info.offset)
            got = fh.readinto(raw)
    except OSError as exc:
        raise GGUFError(f"{label}: cannot read tensor {shorten(name)}: {exc.strerror}") from exc
    if got != info.n_bytes:
        raise GGUFError(f"{label}: file ends inside tensor {shorten(name)}; open it again")
    n_values = math.prod(info.shape)
    try:
        values = dequantize(np.frombuffer(raw, dtype=np.uint8), gtype, n_values)
    except ImportError as exc:
        raise GGUFError(
            f"{label}: tensor {shorten(name)} is {gtype.name}; reading it needs the gguf "
            "package (pip install 'attnviz[gguf]')"
        ) from exc
    return torch.from_numpy(values.reshape(info.shape)).to(dtype)
