"""Devices: which one to run on, and the one place tensors become display arrays."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import torch
from torch import Tensor

from .errors import InputError


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """``"auto"`` = CUDA when available, else CPU; ``"cuda"`` without a GPU is an error.

    Args:
        name: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (or a ``torch.device``).
    Returns:
        The ``torch.device`` to use.
    """
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda was asked for, but no CUDA GPU is available")
    if name not in ("cpu",) and not name.startswith("cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def as_numpy(t: Tensor) -> np.ndarray:
    """The one place tensors become display arrays: CPU, float32 (bool masks stay bool)."""
    t = t.detach()
    if t.dtype != torch.bool:
        t = t.float()
    return t.cpu().numpy()


_THREADS_LOCK = threading.RLock()


@contextlib.contextmanager
def one_thread():
    """Torch's intra-op threads set to one for a while, then put back (one caller at a time).

    For loading, which runs many memory-bound ops: each op waits for all its threads at its
    end, and when another process holds a core that wait dominates (Gemma 3 270M's weights
    decoded in 0.8 s alone, 37 s beside one busy process with two threads, 1.2 s with one).
    """
    with _THREADS_LOCK:
        saved = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(saved)
