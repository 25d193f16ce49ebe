"""GGML tensor types: their sizes, as data, and dequantization to float32.

Plain types (F32, F16, BF16, F64, I8..I64) are read with numpy alone; block-quantized types
are decoded by :mod:`.blocks` (torch, equal bit for bit to the ``gguf`` package's numpy
dequantizers) or, for Q2_K and Q3_K, by those dequantizers themselves. Both are handed only a
byte slice whose length the reader has already checked.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .blocks import DECODERS, decode_blocks


class GGMLType(NamedTuple):
    """One GGML tensor type: ``block_size`` values are stored in ``type_size`` bytes."""

    name: str
    type_id: int
    block_size: int
    type_size: int


_QK_K = 256

#: Every type id a GGUF file may name (ggml.h), with its block and byte sizes. A file naming
#: an id outside this table is refused; one naming a type outside READABLE opens but that
#: tensor is refused by name when it is loaded.
GGML_TYPES: dict[int, GGMLType] = {
    t.type_id: t
    for t in (
        GGMLType("F32", 0, 1, 4),
        GGMLType("F16", 1, 1, 2),
        GGMLType("Q4_0", 2, 32, 2 + 16),
        GGMLType("Q4_1", 3, 32, 2 + 2 + 16),
        GGMLType("Q5_0", 6, 32, 2 + 4 + 16),
        GGMLType("Q5_1", 7, 32, 2 + 2 + 4 + 16),
        GGMLType("Q8_0", 8, 32, 2 + 32),
        GGMLType("Q8_1", 9, 32, 4 + 4 + 32),
        GGMLType("Q2_K", 10, _QK_K, 2 + 2 + _QK_K // 16 + _QK_K // 4),
        GGMLType("Q3_K", 11, _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + 12),
        GGMLType("Q4_K", 12, _QK_K, 2 + 2 + _QK_K // 2 + 12),
        GGMLType("Q5_K", 13, _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 8 + 12),
        GGMLType("Q6_K", 14, _QK_K, 2 + _QK_K // 2 + _QK_K // 4 + _QK_K // 16),
        GGMLType("Q8_K", 15, _QK_K, 4 + _QK_K + _QK_K // 8),
        GGMLType("IQ2_XXS", 16, _QK_K, 2 + _QK_K // 4),
        GGMLType("IQ2_XS", 17, _QK_K, 2 + _QK_K // 4 + _QK_K // 32),
        GGMLType("IQ3_XXS", 18, _QK_K, 2 + _QK_K // 4 + _QK_K // 8),
        GGMLType("IQ1_S", 19, _QK_K, 2 + _QK_K // 8 + _QK_K // 16),
        GGMLType("IQ4_NL", 20, 32, 2 + 16),
        GGMLType("IQ3_S", 21, _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + _QK_K // 32 + 4),
        GGMLType("IQ2_S", 22, _QK_K, 2 + _QK_K // 4 + _QK_K // 16),
        GGMLType("IQ4_XS", 23, _QK_K, 2 + 2 + _QK_K // 2 + _QK_K // 64),
        GGMLType("I8", 24, 1, 1),
        GGMLType("I16", 25, 1, 2),
        GGMLType("I32", 26, 1, 4),
        GGMLType("I64", 27, 1, 8),
        GGMLType("F64", 28, 1, 8),
        GGMLType("IQ1_M", 29, _QK_K, _QK_K // 8 + _QK_K // 16 + _QK_K // 32),
        GGMLType("BF16", 30, 1, 2),
        GGMLType("TQ1_0", 34, _QK_K, 2 + 4 * 13),
        GGMLType("TQ2_0", 35, _QK_K, 2 + 64),
        GGMLType("MXFP4", 39, 32, 1 + 16),
    )
}

#: Plain types numpy reads directly (little-endian), by name.
_PLAIN: dict[str, str] = {
    "F32": "<f4",
    "F16": "<f2",
    "F64": "<f8",
    "I8": "i1",
    "I16": "<i2",
    "I32": "<i4",
    "I64": "<i8",
}

#: Block-quantized types handed to ``gguf.quants.dequantize``.
_BLOCK_QUANTS = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

#: Blocks decoded per call to gguf (bounds the decoder's temporaries to a few MiB).
_CHUNK_BLOCKS = 1 << 14

#: Names of the types :func:`dequantize` reads, in the order messages list them.
READABLE: tuple[str, ...] = ("F32", "F16", "BF16", *_BLOCK_QUANTS, "F64", "I8", "I16", "I32")


def dequantize(data: np.ndarray, ggml_type: GGMLType, n_values: int) -> np.ndarray:
    """Decode the raw bytes of one tensor to float32 values.

    Args:
        data: uint8 array of exactly ``n_values / block_size * type_size`` bytes.
        ggml_type: the tensor's type; its name must be in :data:`READABLE`.
        n_values: the number of values the bytes hold.

    Returns:
        A flat float32 array of ``n_values`` values, in the file's (row-major) order.

    Raises:
        ValueError: the type is not readable or the byte count does not fit it.
        ImportError: a block-quantized type and the ``gguf`` package is not installed.
    """
    name = ggml_type.name
    if name not in READABLE:
        raise ValueError(f"{name} is not a type attnviz reads")
    if data.size != n_values // ggml_type.block_size * ggml_type.type_size:
        raise ValueError(f"{data.size} bytes do not hold {n_values} {name} values")
    if name in _PLAIN:
        return data.view(_PLAIN[name]).astype(np.float32)
    if name == "BF16":
        # bfloat16 is the top half of a float32.
        return (data.view("<u2").astype(np.uint32) << 16).view(np.float32)
    blocks = data.reshape(-1, ggml_type.type_size)  # [n_blocks, type_size]
    if name in DECODERS:
        return decode_blocks(torch.from_numpy(blocks), name, ggml_type.block_size).numpy()
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    qtype = GGMLQuantizationType(ggml_type.type_id)
    out = np.empty(n_values, dtype=np.float32)
    # Chunks of blocks, each handed over as one row: gguf then decodes it in one vectorised
    # pass (it loops in Python over groups of 16 rows), and the temporaries stay small.
    step = _CHUNK_BLOCKS * ggml_type.block_size
    for i, start in enumerate(range(0, blocks.shape[0], _CHUNK_BLOCKS)):
        chunk = blocks[start : start + _CHUNK_BLOCKS].reshape(1, -1)
        values = gguf_dequantize(chunk, qtype).reshape(-1)
        out[i * step : i * step + values.size] = values
    return out
