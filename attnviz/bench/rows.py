"""What every part of ``attnviz bench`` shares: a result row, the shipped models, the
browser the app's rows drive, and torch threads as the app sets them."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

MODELS = Path(__file__).resolve().parents[2] / "models"


@dataclass
class Row:
    """One benchmark row: ``value`` compared with ``target`` (``ratio`` rows: ours / baseline)."""

    name: str
    value: float
    unit: str
    target: str
    met: bool | None
    detail: str = ""


@contextlib.contextmanager
def app_threads():
    """Torch threads as ``attnviz app`` sets them (one per request), for the app's rows."""
    from ..app.session import APP_THREADS

    before = torch.get_num_threads()
    torch.set_num_threads(APP_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def no_progress_bars():
    """transformers' progress bars off for the block (saving and loading a folder)."""
    import transformers

    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()


def save_quietly(model, folder) -> None:
    """``model.save_pretrained(folder)`` (safetensors) without transformers' progress bars."""
    with no_progress_bars():
        model.save_pretrained(folder, safe_serialization=True)


def paired_times(
    a: Callable[[], object], b: Callable[[], object], repeats: int, warmup: int = 2
) -> tuple[float, float]:
    """Median seconds of ``a`` and of ``b``, timed alternately so drift hits both alike."""
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(repeats):
        for fn, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


# -- the browser the app's rows and the browser tests drive ------------------------------------------
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
