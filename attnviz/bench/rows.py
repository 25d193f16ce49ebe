"""What every part of ``attnviz bench`` shares: a result row, the shipped models, the
browser the app's rows drive, and torch threads as the app sets them."""

from __future__ import annotations

import contextlib
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



# -- the browser the app's rows and the browser tests drive ------------------------------------------
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
