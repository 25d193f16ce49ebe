"""How arrays travel to a page: the one encoding the app, the notebook views and the offline
report share (the page-side renderer, ``assets/viz.js``, decodes exactly these)."""

from __future__ import annotations

import base64

import numpy as np


def b64_f32(a: np.ndarray) -> str:
    """float32 little-endian bytes, base64: exact weights at 4 bytes each (+1/3)."""
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def mask_bits(m: np.ndarray, window: np.ndarray | None = None) -> str:
    """``"0"/"1"/"2"`` per cell (``1`` = blocked, ``2`` = blocked by a local layer's sliding
    window), row-major. ``m`` is bool, or uint8 already holding the 2s; ``window``: bool
    cells of ``m`` the window blocks."""
    m = np.minimum(np.asarray(m).astype(np.uint8), 2).ravel()
    if window is not None:
        m = m + np.asarray(window, bool).ravel().astype(np.uint8) * (m == 1)
    return (m + ord("0")).astype(np.uint8).tobytes().decode("ascii")


def packed_bits(m: np.ndarray) -> str:
    """One bit per cell (``1`` = blocked), row-major, most significant bit first, base64: a
    ``[Ts, Ts]`` mask of a long input in ``Ts²/8`` bytes."""
    return base64.b64encode(np.packbits(np.asarray(m, bool).ravel()).tobytes()).decode("ascii")
