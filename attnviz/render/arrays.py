"""How arrays travel to a page: the one encoding the app, the notebook views and the offline
report share (the page-side renderer, ``assets/viz.js``, decodes exactly these)."""

from __future__ import annotations

import base64

import numpy as np


def b64_f32(a: np.ndarray) -> str:
    """float32 little-endian bytes, base64: exact weights at 4 bytes each (+1/3)."""
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def mask_bits(m: np.ndarray) -> str:
    """``"0"/"1"`` per cell (``1`` = blocked), row-major."""
    return (np.asarray(m, bool).ravel().astype(np.uint8) + ord("0")).tobytes().decode("ascii")


def packed_bits(m: np.ndarray) -> str:
    """One bit per cell (``1`` = blocked), row-major, most significant bit first, base64: a
    ``[Ts, Ts]`` mask of a long input in ``Ts²/8`` bytes."""
    return base64.b64encode(np.packbits(np.asarray(m, bool).ravel()).tobytes()).decode("ascii")
