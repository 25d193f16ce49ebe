"""A reader of CTranslate2's ``model.bin``: names, shapes and dtypes checked before any tensor
is allocated; nothing in the file is executed.

The layout (binary versions 4 to 6, little-endian; ``str`` = ``uint16`` length counting a
closing NUL, then the UTF-8 bytes and the NUL)::

    uint32 version | str spec | uint32 revision
    uint32 n_variables, then each: str name | uint8 rank | uint32 dims[rank]
                                   | uint8 dtype id | uint32 n_bytes | n_bytes of data
    uint32 n_aliases, then each: str alias | str target variable

Dtype ids: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. A quantized weight
``w`` (int8 or int16) comes with ``w_scale`` (float32, one per row for int8, one scalar for
int16; the stored integers are ``round(w * scale)``); :func:`read_model_bin` returns
``w / scale`` as float32 and drops ``w_scale``. Small int8 values without a scale (flags,
head counts, text) are kept as they are.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch
from torch import Tensor

from ...core.errors import CheckpointError, shorten

#: binary versions this reader knows (the ones with a dtype id per variable)
VERSIONS = range(4, 7)
#: the dtype ids of the format, in order
DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.float16,
    torch.bfloat16,
)
_QUANTIZED = (torch.int8, torch.int16)
_SCALE = "_scale"
# The smallest a variable's header can be: an empty name (length + NUL), rank, dtype, size.
_MIN_VARIABLE = 2 + 1 + 1 + 1 + 4
_MIN_ALIAS = 2 * (2 + 1)
#: Highest rank a variable may have (CTranslate2's specs use at most 3: convolution weights).
MAX_RANK = 8


@dataclass
class ModelBin:
    """The contents of one ``model.bin``.

    Attributes:
        spec: the spec name (``"TransformerSpec"``, ``"WhisperSpec"``, ...).
        revision: the spec's revision (its weights layout).
        version: the binary format version.
        variables: every variable by name, aliases included (an alias maps to the very same
            tensor as its target); quantized weights dequantized to float32, their
            ``_scale`` variables dropped; float16 and bfloat16 kept as stored.
        aliases: alias name -> the variable it stands for.
        stored_dtypes: each stored variable's dtype in the file (``"int8"`` for a weight
            returned dequantized), by name.
    """

    spec: str
    revision: int
    version: int
    variables: dict[str, Tensor]
    aliases: dict[str, str] = field(default_factory=dict)
    stored_dtypes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Entry:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    n_bytes: int


class _Cursor:
    """Reads the header fields of ``f`` and refuses, naming the file, anything cut short."""

    def __init__(self, f: BinaryIO, path: Path, size: int):
        self.f, self.path, self.size = f, path, size

    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"{shorten(self.path, 300)} is not a readable model.bin: {what}")

    @property
    def left(self) -> int:
        return self.size - self.f.tell()

    def read(self, n: int, what: str) -> bytes:
        if n > self.left:
            raise self.fail(f"the file ends inside {what} ({self.size} bytes)")
        return self.f.read(n)

    def u8(self, what: str) -> int:
        return self.read(1, what)[0]

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.read(4, what))[0]

    def text(self, what: str) -> str:
        (length,) = struct.unpack("<H", self.read(2, what))
        raw = self.read(length, what)
        if length == 0 or raw[-1] != 0 or 0 in raw[:-1]:
            raise self.fail(f"{what} is not a NUL-terminated string")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def skip(self, n: int) -> None:
        self.f.seek(n, os.SEEK_CUR)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _read_entries(cur: _Cursor) -> tuple[int, str, int, list[_Entry], dict[str, str]]:
    """Walk the header, seeking over the data: everything checked, nothing allocated."""
    version = cur.u32("the binary version")
    if version not in VERSIONS:
        known = f"{VERSIONS.start}-{VERSIONS.stop - 1}"
        raise cur.fail(f"binary version {version} is not one this reader knows ({known})")
    spec = cur.text("the spec name")
    revision = cur.u32("the spec revision")
    count = cur.u32("the variable count")
    if count * _MIN_VARIABLE > cur.left:
        raise cur.fail(f"it claims {count} variables but has only {cur.left} bytes left")
    entries: list[_Entry] = []
    seen: set[str] = set()
    for i in range(count):
        name = cur.text(f"the name of variable {i}")
        if not name or name in seen:
            raise cur.fail(f"variable {i} has an empty or repeated name {shorten(repr(name))}")
        seen.add(name)
        rank = cur.u8(f"the rank of {shorten(name)}")
        if rank > MAX_RANK:
            raise cur.fail(f"{shorten(name)} has rank {rank} (at most {MAX_RANK})")
        shape = struct.unpack(f"<{rank}I", cur.read(4 * rank, f"the shape of {shorten(name)}"))
        claimed = math.prod(max(d, 1) for d in shape)
        if claimed > cur.size:  # an empty tensor whose other sizes claim more than the file
            raise cur.fail(
                f"{shorten(name)} {list(shape)} claims {claimed} elements, more than the "
                f"{cur.size} bytes the file holds"
            )
        type_id = cur.u8(f"the dtype of {shorten(name)}")
        if type_id >= len(DTYPES):
            raise cur.fail(f"{shorten(name)} has an unknown dtype id {type_id}")
        dtype = DTYPES[type_id]
        n_bytes = cur.u32(f"the size of {shorten(name)}")
        expected = math.prod(shape) * _element_size(dtype)
        if n_bytes != expected:
            raise cur.fail(
                f"{shorten(name)} {list(shape)} {str(dtype).removeprefix('torch.')} needs "
                f"{expected} bytes but claims {n_bytes}"
            )
        if n_bytes > cur.left:
            raise cur.fail(
                f"{shorten(name)} claims {n_bytes} bytes but only {cur.left} are left "
                "(a file cut short?)"
            )
        entries.append(_Entry(name, tuple(shape), dtype, cur.f.tell(), n_bytes))
        cur.skip(n_bytes)
    n_aliases = cur.u32("the alias count")
    if n_aliases * _MIN_ALIAS > cur.left:
        raise cur.fail(f"it claims {n_aliases} aliases but has only {cur.left} bytes left")
    aliases: dict[str, str] = {}
    for i in range(n_aliases):
        alias = cur.text(f"alias {i}")
        target = cur.text(f"the target of alias {i}")
        if alias in seen or alias in aliases:
            raise cur.fail(f"alias {shorten(alias)} repeats a variable's name")
        if target not in seen:
            raise cur.fail(f"alias {shorten(alias)} names a missing variable {shorten(target)}")
        aliases[alias] = target
    if cur.left:
        raise cur.fail(f"{cur.left} unexpected bytes after the last alias")
    return version, spec, revision, entries, aliases


def _dequantize(cur: _Cursor, tensors: dict[str, Tensor]) -> None:
    """Replace each int8/int16 weight that has a ``_scale`` by ``weight / scale`` (float32)."""
    for name in [n for n, t in tensors.items() if t.dtype in _QUANTIZED]:
        scale = tensors.get(name + _SCALE)
        if scale is None:
            continue  # a flag or a piece of text, not a weight
        q = tensors[name]
        rows = q.shape[0] if q.dim() else 1
        if not scale.is_floating_point() or scale.numel() not in (1, rows):
            raise cur.fail(
                f"{shorten(name + _SCALE)} {list(scale.shape)} does not scale "
                f"{shorten(name)} {list(q.shape)}"
            )
        scale = scale.float().reshape(-1, *[1] * (q.dim() - 1)) if q.dim() else scale.float()
        tensors[name] = q.float() / scale
        del tensors[name + _SCALE]


def read_model_bin(path: str | Path) -> ModelBin:
    """Read a CTranslate2 ``model.bin`` (see the module docstring for the layout).

    Every name, rank, shape, dtype and size is checked against the file's length before a
    tensor is allocated, so a file that lies (a huge count, a size that does not fit) costs
    nothing; then the tensors are read.

    Args:
        path: the ``model.bin`` file.
    Returns:
        a :class:`ModelBin`.
    Raises:
        CheckpointError: one line naming the file: missing, cut short, an unknown version
            or dtype, sizes that do not add up, repeated names, aliases to nothing.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{shorten(path, 300)} is missing")
    with open(path, "rb") as f:
        cur = _Cursor(f, path, os.fstat(f.fileno()).st_size)
        version, spec, revision, entries, aliases = _read_entries(cur)
        tensors: dict[str, Tensor] = {}
        stored: dict[str, str] = {}
        for e in entries:
            f.seek(e.offset)
            data = bytearray(f.read(e.n_bytes))
            if len(data) != e.n_bytes:  # the file shrank while being read
                raise cur.fail(f"the file ends inside {shorten(e.name)}")
            flat = torch.frombuffer(data, dtype=e.dtype) if data else torch.empty(0, dtype=e.dtype)
            tensors[e.name] = flat.reshape(e.shape)
            stored[e.name] = str(e.dtype).removeprefix("torch.")
    _dequantize(cur, tensors)
    for scale_name in set(stored) - set(tensors):
        del stored[scale_name]
    for alias, target in aliases.items():
        if target not in tensors:
            raise cur.fail(f"alias {shorten(alias)} names a scale, not a weight")
        tensors[alias] = tensors[target]
    return ModelBin(spec, revision, version, tensors, aliases, stored)
