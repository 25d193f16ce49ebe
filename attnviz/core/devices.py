"""Devices: which one to run on, and the one place tensors become display arrays."""

from __future__ import annotations

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
