"""Hostile GGUF files, built byte by byte: each is refused at once with one line naming the fault.

No case may raise anything but GGUFError, allocate what a count claims, or take a second.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import pytest

from attnviz.interop.gguf.reader import GGUFError, load_tensor, read_gguf

HUGE = 2**64 - 1
U8, I32, F32, BOOL, STRING, ARRAY, U64 = 0, 5, 6, 7, 8, 9, 10


def s(text: str | bytes, length: int | None = None) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def header(n_tensors: int, n_kv: int, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + payload


def tinfo(name: str, dims: list[int], type_id: int = 0, offset: int = 0) -> bytes:
    return s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, type_id, offset)


def build(kvs: list[bytes], infos: list[bytes], data: bytes, n_tensors=None, n_kv=None) -> bytes:
    """A file: header, metadata, tensor infos, padding to 32, data."""
    head = header(
        len(infos) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    body = head + b"".join(kvs) + b"".join(infos)
    return body + b"\0" * (-len(body) % 32) + data


KVS = [
    kv("general.architecture", STRING, s("llama")),
    kv("a.count", U64, struct.pack("<Q", 7)),
    kv("a.flag", BOOL, b"\1"),
    kv("a.list", ARRAY, struct.pack("<IQ", I32, 3) + struct.pack("<3i", 1, 2, 3)),
    kv("a.words", ARRAY, struct.pack("<IQ", STRING, 2) + s("x") + s("yz")),
]
INFOS = [tinfo("w", [4, 2], 0, 0), tinfo("b", [4], 0, 32)]
DATA = np.arange(8, dtype="<f4").tobytes() + b"\0" * 0 + np.ones(4, "<f4").tobytes()
VALID = build(KVS, INFOS, DATA)


def refused(tmp_path: Path, data: bytes, match: str = "") -> str:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    start = time.perf_counter()
    with pytest.raises(GGUFError, match=r"^bad\.gguf: ") as info:
        read_gguf(path)
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert "\n" not in message and message.startswith("bad.gguf: ")
    assert match in message, message
    return message


def test_the_valid_base_file_reads(tmp_path):
    path = tmp_path / "ok.gguf"
    path.write_bytes(VALID)
    f = read_gguf(path)
    assert f.metadata["a.words"] == ["x", "yz"] and f.metadata["a.list"].tolist() == [1, 2, 3]
    assert f.tensors["w"].shape == (2, 4) and f.tensors["b"].offset == f.data_offset + 32
    assert load_tensor(f, "w").flatten().tolist() == list(range(8))


HOSTILE = {
    "kv count": (header(0, HUGE), "claims 18446744073709551615 metadata entries"),
    "tensor count": (header(HUGE, 0), "claims 18446744073709551615 tensors"),
    "key length": (header(0, 1) + s("", HUGE) + b"\0" * 16, "a key of 18446744073709551615 bytes"),
    "string length": (
        header(0, 1) + s("k") + struct.pack("<I", STRING) + s("", HUGE),
        "metadata key 'k' claims a string of 18446744073709551615 bytes, more than the file",
    ),
    "array length": (
        header(0, 1) + kv("x", ARRAY, struct.pack("<IQ", U64, HUGE)),
        "metadata key 'x' claims an array of 18446744073709551615 elements, more than the file",
    ),
    "string array length": (
        header(0, 1) + kv("x", ARRAY, struct.pack("<IQ", STRING, HUGE)),
        "claims an array of 18446744073709551615 elements",
    ),
    "nested array length": (
        header(0, 1) + kv("x", ARRAY, struct.pack("<IQIQ", ARRAY, 1, U8, HUGE)),
        "claims an array of 18446744073709551615 elements",
    ),
    "million-element array in a tiny file": (
        header(0, 1) + kv("x", ARRAY, struct.pack("<IQ", I32, 10**6)) + b"\0" * 8,
        "an array of 1000000 elements",
    ),
    "deep nesting": (
        header(0, 1) + kv("x", ARRAY, struct.pack("<IQ", ARRAY, 1) * 40 + b"\0" * 400),
        "nests arrays more than",
    ),
    "unknown value type": (header(0, 1) + kv("x", 13, b"\0" * 8), "unknown value type 13"),
    "unknown array item type": (
        header(0, 1) + kv("x", ARRAY, struct.pack("<IQ", 99, 1) + b"\0" * 8),
        "unknown value type 99",
    ),
    "duplicate key": (
        header(0, 2) + kv("k", U8, b"\1") + kv("k", U8, b"\2"),
        "metadata key 'k' appears twice",
    ),
    "duplicate tensor": (build([], [INFOS[0], INFOS[0]], DATA), "tensor name 'w' appears twice"),
    "rank 9": (build([], [tinfo("w", [1] * 9)], DATA), "tensor 'w' has rank 9"),
    "rank 0": (build([], [tinfo("w", [])], DATA), "tensor 'w' has rank 0"),
    "dim 0": (build([], [tinfo("w", [4, 0])], DATA), "has a dimension of 0"),
    "huge dim": (build([], [tinfo("w", [HUGE])], DATA), "more than the file holds"),
    "product overflow": (
        build([], [tinfo("w", [2**32, 2**32, 2**32, 2**32])], DATA),
        "more than the file holds",
    ),
    "product wrapping to a small size": (
        build([], [tinfo("w", [2**62, 4])], DATA),
        "more than the file holds",
    ),
    "unknown tensor type": (build([], [tinfo("w", [4], 77)], DATA), "unknown tensor type id 77"),
    "row not a whole block": (build([], [tinfo("w", [33], 8)], DATA), "not a multiple of Q8_0"),
    "offset past end": (
        build([], [tinfo("w", [4], 0, 2**40)], DATA),
        "past the end of the file",
    ),
    "offset huge": (build([], [tinfo("w", [4], 0, HUGE - 31)], DATA), "past the end of the file"),
    "misaligned offset": (build([], [tinfo("w", [4], 0, 4)], DATA), "not a multiple of 32"),
    "overlapping tensors": (
        build([], [tinfo("w", [16], 0, 0), tinfo("v", [4], 0, 32)], DATA + b"\0" * 64),
        "tensor 'v' overlaps tensor 'w'",
    ),
    "alignment not a power of two": (
        build([kv("general.alignment", I32, struct.pack("<i", 24))], INFOS, DATA),
        "general.alignment is 24, not a power of two",
    ),
    "alignment of 0": (
        build([kv("general.alignment", I32, struct.pack("<i", 0))], INFOS, DATA),
        "general.alignment is 0",
    ),
    "alignment as a string": (
        build([kv("general.alignment", STRING, s("32"))], INFOS, DATA),
        "general.alignment is '32'",
    ),
    "wrong magic": (header(0, 0, magic=b"GGML") + b"\0" * 8, "not a GGUF file"),
    "version 1": (header(0, 0, version=1), "GGUF version 1, which attnviz does not read"),
    "version 99": (header(0, 0, version=99), "GGUF version 99, which attnviz does not read"),
    "big-endian": (
        b"GGUF" + struct.pack(">IQQ", 3, 0, 0),
        "a big-endian GGUF file, which attnviz does not read",
    ),
    "empty file": (b"", "too short for a GGUF header"),
    "truncated data": (VALID[:-4], "past the end of the file"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_file_is_refused_at_once_by_name(tmp_path, case):
    data, match = HOSTILE[case]
    refused(tmp_path, data, match)


def test_every_truncation_of_a_valid_file_is_refused(tmp_path):
    start = time.perf_counter()
    for cut in range(len(VALID)):
        refused(tmp_path, VALID[:cut])
    assert time.perf_counter() - start < 5.0


def test_random_damage_never_escapes_as_another_error(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "fuzz.gguf"
    for _ in range(400):
        data = bytearray(VALID)
        for pos in rng.integers(4, len(VALID), size=rng.integers(1, 4)):
            data[pos] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data))
        start = time.perf_counter()
        try:
            f = read_gguf(path)
            for name in f.tensors:
                load_tensor(f, name)
        except GGUFError:
            pass
        assert time.perf_counter() - start < 1.0


def test_a_big_endian_file_from_gguf_writer_is_refused(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(path, arch="test", endianess=gguf.GGUFEndian.BIG)
    w.add_tensor("w", np.ones(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    refused(tmp_path, path.read_bytes(), "big-endian")


def test_caps_on_tensors_values_and_header_bytes(tmp_path, monkeypatch):
    from attnviz.interop.gguf import reader

    monkeypatch.setattr(reader, "MAX_TENSORS", 1)
    refused(tmp_path, VALID, "claims 2 tensors (attnviz reads at most 1)")
    monkeypatch.setattr(reader, "MAX_TENSORS", 2)
    monkeypatch.setattr(reader, "MAX_ITEMS", 6)  # 5 entries, then 2 strings
    refused(tmp_path, VALID, "metadata key 'a.words' makes the metadata hold more than 6 values")
    monkeypatch.setattr(reader, "MAX_ITEMS", 1 << 22)
    monkeypatch.setattr(reader, "MAX_HEADER_BYTES", 64)
    refused(tmp_path, VALID, "more than a GGUF header may take")
