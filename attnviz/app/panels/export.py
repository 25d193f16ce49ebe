"""The Export panel, whole: its logic (the state shown written as an offline HTML report, a JSON
or an NPZ trace, into a private temporary folder for the download button) and, at the end, its
tab on the page (:func:`layout`, :func:`wire`, :func:`faces`).

Registered by one line in :data:`attnviz.app.panels.PANELS` (``page="export"``): the page lays
it out, wires it and follows it from there. The logic imports no gradio; the page part imports
it when the page is built.
"""

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
from ..pagetext import STALE, UNIT_JS
from ..state import (
    SessionState,
    checkpoint_of,
)
from ..workers import remote
from .lab_result import stopped
from .labs import LabView, error_view, started_checkpoint
from .registry import Face
from .why import report_sections


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
def export(
    state: SessionState, what: str, unit: str = "pieces", why: dict | None = None
) -> LabView:
    """Write the current state as ``"html"`` (offline report), ``"json"`` or ``"npz"``.

    Args:
        unit: ``"pieces"`` or ``"words"`` (the page's pieces | words switch): the attention
            in the file pooled into words, the file name ending ``-words``.
        why: the Why this token tab's kept results (panel key -> ``(stamp, result)``): the
            report adds the tab's sections for the step shown
            (:func:`attnviz.app.panels.why.report_sections`).
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
            report.write_html(ins, path, ckpt, unit, report_sections(state, why))
        elif what == "json":
            analysis.write_json(ins, path, unit)
        else:
            analysis.write_npz(ins, path, unit)
    except AttnvizError as exc:
        return error_view(exc, 0)
    size = f"{path.stat().st_size / 1024:.1f} KB"
    return LabView([], f"Wrote {path.name} ({size}{', words' if words else ''}).", path=str(path))


# -- on the page --------------------------------------------------------------------------------
def layout(p) -> None:
    """The Export tab: one button per format, the download."""
    my = p.part("export")
    import gradio as gr

    with gr.Tab("Export", elem_id="tab-export") as my.export_tab:
        gr.Markdown(
            "Every heatmap has a PNG button; every lab figure a camera button. "
            "Files of the state shown (their attention follows the step view's "
            "**show: pieces | words** switch):"
        )
        with gr.Row():
            my.exp_html = gr.Button("HTML report", elem_id="export-html")
            my.exp_json = gr.Button("JSON trace", elem_id="export-json")
            my.exp_npz = gr.Button("NPZ trace", elem_id="export-npz")
        # the step view's pieces | words switch, read by UNIT_JS when a button is pressed
        my.exp_unit = gr.Textbox("pieces", elem_id="export-unit", elem_classes="av-hidden")
        my.exp_msg = gr.Markdown(elem_id="export-message")
        my.exp_file = gr.File(label="download", elem_id="export-file")


def wire(p) -> None:
    """Each button writes its file of the state shown, stamped so that it follows the step;
    the tab, when selected, is the one shown (``p.active``)."""
    my = p.part("export")
    from ..state import panel_stamps
    from ..ui_common import FAST, HIDDEN, INTERNAL

    def written(state, stamps, unit, what, why=None):
        view = export(state, what, unit, why)
        return view.path, view.message, {**stamps, "export": panel_stamps(state)["export"]}

    # the Why this token tab's kept results join the HTML report (when the tab is on the page)
    kept = getattr(p.part("why"), "why_kept", None)
    why = [kept] if kept is not None else []
    for btn, what in ((my.exp_html, "html"), (my.exp_json, "json"), (my.exp_npz, "npz")):
        btn.click(
            # the unit last: UNIT_JS writes the page's switch into the last input
            lambda s, stamps, *rest, what=what: written(s, stamps, rest[-1], what, *rest[:-1]),
            [p.state, p.stamps, *why, my.exp_unit], [my.exp_file, my.exp_msg, p.stamps],
            js=UNIT_JS, **INTERNAL,
        )  # fmt: skip
    my.export_tab.select(lambda: "export", None, [p.active], **HIDDEN, **FAST)


def faces(p) -> list[Face]:
    """The file and its line, emptied when the step shown changes."""
    my = p.part("export")
    return [
        Face(
            "export",
            [my.exp_file, my.exp_msg],
            clear=lambda s, v: {my.exp_file: None, my.exp_msg: STALE},
        )
    ]
