"""The Export panel: the state shown written as an offline HTML report, a JSON or an NPZ trace,
into a private temporary folder for the download button; no gradio."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ... import analysis
from ...analysis import Inspection
from ...core.errors import AttnvizError, InputError
from ...render import report
from .. import store
from ..decoders import DECODERS
from ..kinds import is_encoder_only
from ..lab_view import stopped
from ..labs import LabView, error_view, started_checkpoint
from ..state import (
    SessionState,
    checkpoint_of,
)
from ..workers import remote


# -- export -------------------------------------------------------------------------------------
def inspection(state: SessionState) -> Inspection:
    """The current view as an :class:`~attnviz.analysis.Inspection` (the steps shown so far;
    the whole greedy decode when nothing is decoded yet)."""
    ckpt = started_checkpoint(state, "export")
    if state.step == 0:
        return analysis.inspect_text(ckpt, state.text)
    enc = ckpt.encode_source(state.text)  # a decoder-only model's prompt: its framing too
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        return analysis.export.from_stepper(ckpt, state.text, enc, stepper, upto=state.step)


@remote(stopped)
def export(state: SessionState, what: str, unit: str = "pieces") -> LabView:
    """Write the current state as ``"html"`` (offline report), ``"json"`` or ``"npz"``.

    Args:
        unit: ``"pieces"`` or ``"words"`` (the page's pieces | words switch): the attention
            in the file pooled into words, the file name ending ``-words``.
    Returns:
        ``path`` set to the written file (None on error, with the reason in ``message``).
    """
    if what not in ("html", "json", "npz"):
        return error_view(InputError(f"export html, json or npz, not {what!r}"), 0)
    try:
        unit = analysis.export.check_unit(unit)
        ins = inspection(state)
        folder = Path(tempfile.mkdtemp(prefix="export-", dir=store.private_dir("exports")))
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", ins.text)[:32].strip("_") or "input"
        words = "-words" if unit == "words" else ""
        # a sentence read (encoder-only) has no steps: its one pass is what is written
        ckpt = checkpoint_of(state)
        when = "read" if is_encoder_only(ckpt) else f"step{len(ins.out_ids)}"
        path = folder / f"attnviz-{name}-{when}{words}.{what}"
        if what == "html":
            report.write_html(ins, path, ckpt, unit)
        elif what == "json":
            analysis.write_json(ins, path, unit)
        else:
            analysis.write_npz(ins, path, unit)
    except AttnvizError as exc:
        return error_view(exc, 0)
    size = f"{path.stat().st_size / 1024:.1f} KB"
    return LabView([], f"Wrote {path.name} ({size}{', words' if words else ''}).", path=str(path))
