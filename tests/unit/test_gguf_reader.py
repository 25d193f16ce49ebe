"""Our GGUF reader against gguf's writer and reader: metadata, shapes, types, dequantization.

Files are written with ``gguf.GGUFWriter``; every tensor type attnviz reads is held to
``gguf.quants.dequantize`` of the same bytes and to ``gguf.GGUFReader`` on the same (trusted)
file. The real Gemma 3 270M Q4_K_M file is checked the same way in
tests/integration/test_gguf_real_file.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import GGUFValueType as V  # noqa: E402

from attnviz.core.errors import CheckpointError  # noqa: E402
from attnviz.interop.gguf import READABLE  # noqa: E402
from attnviz.interop.gguf.blocks import DECODERS  # noqa: E402
from attnviz.interop.gguf.reader import (  # noqa: E402
    GGUFError,
    GGUFFile,
    TensorInfo,
    is_gguf,
    load_tensor,
    read_gguf,
)

RNG = np.random.default_rng(0)

# key -> (value, GGUF value type); nested arrays and arrays of every kind included.
METADATA = {
    "t.u8": (200, V.UINT8),
    "t.i8": (-100, V.INT8),
    "t.u16": (60000, V.UINT16),
    "t.i16": (-30000, V.INT16),
    "t.u32": (4_000_000_000, V.UINT32),
    "t.i32": (-2_000_000_000, V.INT32),
    "t.f32": (0.25, V.FLOAT32),
    "t.u64": (2**63 + 5, V.UINT64),
    "t.i64": (-(2**62), V.INT64),
    "t.f64": (1e-300, V.FLOAT64),
    "t.true": (True, V.BOOL),
    "t.false": (False, V.BOOL),
    "t.str": ("héllo ▁world", V.STRING),
    "t.empty_str": ("", V.STRING),
    "t.ints": ([1, -2, 3], V.ARRAY),
    "t.floats": ([0.5, -1.5], V.ARRAY),
    "t.bools": ([True, False, True], V.ARRAY),
    "t.strs": (["a", "", "▁b"], V.ARRAY),
    "t.nested": ([[1, 2], [3]], V.ARRAY),
    "t.nested_strs": ([["x"], ["y", "z"]], V.ARRAY),
}

# Types gguf quantizes in numpy (from float data); the K-quants get random blocks instead.
QUANTIZABLE = ("BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
PLAIN = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8}
PLAIN |= {"I16": np.int16, "I32": np.int32}


def write_gguf(path: Path, alignment: int | None = None) -> dict[str, tuple]:
    """A file with METADATA and one tensor per type; returns name -> (type, torch shape)."""
    w = gguf.GGUFWriter(path, arch="test")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_file_type(15)  # Q4_K_M
    for key, (value, vtype) in METADATA.items():
        w.add_key_value(key, value, vtype)
    made: dict[str, tuple] = {}
    for name, dtype in PLAIN.items():
        shape = (2, 3, 4) if name == "F32" else (5,)
        values = (RNG.standard_normal(shape) * 50).astype(dtype)
        w.add_tensor(f"plain.{name}", values)
        made[f"plain.{name}"] = (name, shape)
    for name in QUANTIZABLE:
        values = RNG.standard_normal((3, 64)).astype(np.float32)
        w.add_tensor(f"q.{name}", gguf.quants.quantize(values, Q[name]), raw_dtype=Q[name])
        made[f"q.{name}"] = (name, (3, 64))
    for name in (*K_QUANTS, "IQ2_XXS"):
        _, type_size = gguf.GGML_QUANT_SIZES[Q[name]]
        raw = RNG.integers(0, 256, size=(2, 2 * type_size), dtype=np.uint8)  # 2 rows, 2 blocks
        w.add_tensor(f"k.{name}", raw, raw_dtype=Q[name])
        made[f"k.{name}"] = (name, (2, 512))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return made


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, dict[str, tuple]]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_gguf(path)


def test_metadata_of_every_value_type_round_trips(tiny):
    path, _ = tiny
    f = read_gguf(path)
    assert isinstance(f, GGUFFile) and f.version == 3 and f.path == path
    md = f.metadata
    assert md["general.architecture"] == "test"
    for key, (value, vtype) in METADATA.items():
        got = md[key]
        if key == "t.empty_str":
            continue  # GGUFWriter drops empty strings
        assert f.metadata_types[key] == vtype, key
        if key in ("t.nested", "t.nested_strs"):
            assert [list(a) for a in got] == value, key
        elif key == "t.strs":
            assert got == value and isinstance(got, list)
        elif vtype == V.ARRAY:
            assert isinstance(got, np.ndarray) and got.tolist() == value, key
        elif vtype == V.FLOAT32:
            assert got == pytest.approx(value) and isinstance(got, float)
        else:
            assert got == value and type(got) is type(value), key
    assert md["t.ints"].dtype == np.int32 and md["t.bools"].dtype == bool
    assert md["general.file_type"] == 15


def test_metadata_matches_gguf_reader(tiny):
    path, _ = tiny
    theirs = gguf.GGUFReader(path)
    ours = read_gguf(path)
    for key, fld in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        assert key in ours.metadata, key
        if fld.types == [V.STRING]:
            assert ours.metadata[key] == fld.contents()
        elif fld.types[:1] == [V.ARRAY] and len(fld.types) == 2:
            assert list(ours.metadata[key]) == fld.contents(), key


def test_tensor_table_shapes_types_and_offsets(tiny):
    path, made = tiny
    f = read_gguf(path)
    assert list(f.tensors) == list(made)
    theirs = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for name, (type_name, shape) in made.items():
        info = f.tensors[name]
        assert isinstance(info, TensorInfo)
        assert info.shape == shape == tuple(reversed(theirs[name].shape.tolist()))
        assert info.type_name == type_name and info.type_id == int(Q[type_name])
        assert info.offset == theirs[name].data_offset and info.offset % f.alignment == 0
        assert info.n_bytes == theirs[name].n_bytes
    expected = {t: 1 for t in (*PLAIN, *QUANTIZABLE, *K_QUANTS, "IQ2_XXS")}
    assert f.type_counts() == expected
    text = f.describe_types()
    assert text.startswith("Q4_K_M: ") and "1 Q6_K" in text and text.endswith(" tensors")


@pytest.mark.parametrize("name", [*PLAIN, *QUANTIZABLE, *K_QUANTS])
def test_load_tensor_equals_gguf_dequantize(tiny, name):
    path, made = tiny
    prefix = "plain" if name in PLAIN else "q" if name in QUANTIZABLE else "k"
    tensor_name = f"{prefix}.{name}"
    f = read_gguf(path)
    got = load_tensor(f, tensor_name)
    assert got.dtype == torch.float32 and tuple(got.shape) == made[tensor_name][1]
    theirs = next(t for t in gguf.GGUFReader(path).tensors if t.name == tensor_name)
    if name in PLAIN:  # gguf's reader hands these over already typed
        want = np.asarray(theirs.data).astype(np.float32)
    else:
        want = gguf.quants.dequantize(np.asarray(theirs.data), Q[name])
    np.testing.assert_array_equal(got.numpy(), want.reshape(got.shape))
    if name in ("F32", "I8"):
        assert got.abs().sum() > 0
    half = load_tensor(f, tensor_name, dtype=torch.float16)
    assert half.dtype == torch.float16 and half.shape == got.shape


def test_every_readable_type_is_covered():
    assert set(READABLE) >= {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}
    assert set(READABLE) >= set(K_QUANTS)
    assert set(READABLE) <= {*PLAIN, *QUANTIZABLE, *K_QUANTS}


def test_unreadable_type_and_unknown_name_are_refused_by_name(tiny):
    path, _ = tiny
    f = read_gguf(path)
    with pytest.raises(GGUFError, match=r"k\.IQ2_XXS is stored as IQ2_XXS, which attnviz does not"):
        load_tensor(f, "k.IQ2_XXS")
    with pytest.raises(GGUFError, match="no tensor named 'nope'"):
        load_tensor(f, "nope")
    assert issubclass(GGUFError, CheckpointError)


def test_custom_alignment_and_version_2(tmp_path):
    path = tmp_path / "aligned.gguf"
    made = write_gguf(path, alignment=256)
    f = read_gguf(path)
    assert f.alignment == 256 and all(i.offset % 256 == 0 for i in f.tensors.values())
    data = bytearray(path.read_bytes())
    data[4:8] = (2).to_bytes(4, "little")  # v2 and v3 share the layout
    v2 = tmp_path / "v2.gguf"
    v2.write_bytes(bytes(data))
    g = read_gguf(v2)
    assert g.version == 2 and g.tensors == f.tensors
    assert torch.equal(load_tensor(g, "q.Q8_0"), load_tensor(f, "q.Q8_0"))
    assert set(g.type_counts()) == {made[n][0] for n in made}


def test_is_gguf(tiny, tmp_path):
    path, _ = tiny
    assert is_gguf(path) and is_gguf(str(path))
    (tmp_path / "short").write_bytes(b"GGU")
    (tmp_path / "other").write_bytes(b"PK\x03\x04 not gguf")
    assert not is_gguf(tmp_path) and not is_gguf(tmp_path / "short")
    assert not is_gguf(tmp_path / "other") and not is_gguf(tmp_path / "missing")


def test_a_file_changed_after_reading_is_refused(tiny, tmp_path):
    path, _ = tiny
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(path.read_bytes())
    f = read_gguf(copy)
    with open(copy, "r+b") as fh:
        fh.truncate(f.tensors["plain.F32"].offset + 4)
    with pytest.raises(GGUFError, match="changed since it was read"):
        load_tensor(f, "plain.F32")


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_torch_decoders_equal_gguf_bit_for_bit_across_chunks(name, monkeypatch):
    """Random bytes (NaN and inf scales included) over several chunks and a ragged tail:
    the torch decoders give gguf's numpy values exactly."""
    from attnviz.interop.gguf import blocks as blocks_module

    monkeypatch.setattr(blocks_module, "CHUNK_VALUES", 1024)
    threads = torch.get_num_threads()
    size = gguf.GGML_QUANT_SIZES[Q[name]]
    raw = RNG.integers(0, 256, size=(37 * 1024 // size[0] + 3, size[1]), dtype=np.uint8)
    got = blocks_module.decode_blocks(torch.from_numpy(raw), name, size[0])
    want = gguf.quants.dequantize(raw.reshape(1, -1), Q[name]).reshape(-1)
    np.testing.assert_array_equal(got.numpy(), want)
    assert torch.get_num_threads() == threads  # one_thread() put it back
