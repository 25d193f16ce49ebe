"""Weight files: safetensors read without unpickling anything (a pickle is named and refused)
and written atomically (temporary file, fsync, one rename), with JSON metadata in the header;
JSON files written the same way. Every checkpoint, snapshot and training state goes through
here."""

from __future__ import annotations

import json
import os
import struct
import threading
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from .errors import CheckpointError, shorten

_HEADER_KEY = "attnviz"
# What a pickle looks like from its first bytes: torch.save's zip archive, or a raw pickle
# (PROTO opcode 0x80 then the protocol number). Checked only after safetensors refused the file.
_ZIP_MAGIC = b"PK"
_PICKLE_PROTOCOLS = (b"\x02", b"\x03", b"\x04", b"\x05")


# -- files ----------------------------------------------------------------------------------
def replace_atomically(path: Path, write) -> None:
    """Write via ``write(tmp_path)``, flush to disk, then rename over ``path`` in one step."""
    # this writer's own name (process and thread): two writers of one file never share it
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{threading.get_ident()}")
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # the writer may create it private; a checkpoint is a plain file
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_tensors(path: str | Path, tensors: dict[str, Tensor], meta: dict | None = None) -> None:
    """Save tensors (and JSON ``meta`` in the header) to a safetensors file, atomically."""
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    header = {_HEADER_KEY: json.dumps(meta)} if meta is not None else None
    replace_atomically(Path(path), lambda tmp: save_file(tensors, str(tmp), metadata=header))


def write_json_atomically(path: str | Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename)."""
    replace_atomically(Path(path), lambda tmp: tmp.write_text(json.dumps(data, indent=2) + "\n"))


#: safetensors dtype names read straight into torch tensors (others go through safetensors)
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
           "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
           "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}  # fmt: skip


def _read_into_memory(path: Path, f) -> dict[str, Tensor]:
    """Every tensor of a safetensors file ``f`` (already opened, so its header and offsets
    are checked) read with plain reads into tensors of its own, never a mapping of the file:
    the loaded weights then exist once (a mapping's pages count again when touched), and a
    file rewritten in place later cannot change them or fault."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        (n,) = struct.unpack("<Q", fh.read(8))
        entries = json.loads(fh.read(n))
        out: dict[str, Tensor] = {}
        for key in f.keys():  # noqa: SIM118 (not a dict)
            entry = entries[key]
            dtype = _DTYPES.get(entry["dtype"])
            if dtype is None:
                out[key] = f.get_tensor(key)
                continue
            begin, end = entry["data_offsets"]
            t = torch.empty(entry["shape"], dtype=dtype)
            if t.numel() * t.element_size() != end - begin or 8 + n + end > size:
                raise ValueError(f"tensor {key} does not fit its offsets")
            fh.seek(8 + n + begin)
            if t.numel() and fh.readinto(t.reshape(-1).view(torch.uint8).numpy()) != end - begin:
                raise ValueError(f"the file ends inside tensor {key}")
            out[key] = t
    return out


def read_tensors(path: str | Path) -> tuple[dict[str, Tensor], dict | None]:
    """Read a safetensors file without unpickling anything.

    Returns:
        ``(tensors, meta)`` where ``meta`` is the JSON stored by :func:`write_tensors`, or
        None when the header has none.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    try:
        with safe_open(str(path), framework="pt") as f:  # checks the header and offsets
            header = f.metadata() or {}
            tensors = _read_into_memory(path, f)
    except (SafetensorError, OSError, ValueError) as exc:
        # Only now look at the first bytes: a valid safetensors header length can start with
        # any byte (0x80 included), so the pickle test must not come first.
        with open(path, "rb") as f:
            head = f.read(2)
        if head.startswith(_ZIP_MAGIC) or (head[:1] == b"\x80" and head[1:2] in _PICKLE_PROTOCOLS):
            raise CheckpointError(
                f"{path} is a pickle (a torch.save/.pt file), not safetensors; attnviz never "
                "unpickles files. Load it yourself where you trust it and save the state dict "
                "with safetensors.torch.save_file"
            ) from None
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc})") from None
    meta = None
    if _HEADER_KEY in header:
        try:
            meta = json.loads(header[_HEADER_KEY])
        except ValueError as exc:  # also a number of over 4,300 digits (nesting: said upstream)
            raise CheckpointError(
                f"{path}: metadata in the header is not JSON ({shorten(str(exc), 120)})"
            ) from None
    return tensors, meta
