"""The Checkpoint health panel, whole: its logic (the health check of the loaded checkpoint, as
HTML and a figure of every head's role; reports cached per checkpoint file version) and, at the
end, its tab on the page (:func:`layout`, :func:`wire`, :func:`faces`).

Registered by one line in :data:`attnviz.app.panels.PANELS` (``page="health"``). The logic
imports no gradio; the page part imports it when the page is built.
"""

from __future__ import annotations

import contextlib
import html

from ... import analysis
from ...core.errors import AttnvizError, InputError
from ...render import plots
from ...train.evaluate import dev_pairs
from .. import store
from ..lru import LRU
from ..pagetext import STALE, THEME_JS
from ..state import (
    SessionState,
    checkpoint_of,
)
from ..workers import remote
from .lab_result import stopped
from .labs import LabView, error_view
from .registry import Face

LEVELS = {"ok": "✓", "info": "ℹ", "warning": "⚠", "error": "✗"}
_HEALTH = LRU(16)  # reports by (model, version, device, n)


# -- health -------------------------------------------------------------------------------------
@remote(stopped)
def health(state: SessionState, extra: str = "", n: int = 100) -> LabView:
    """The health check of the loaded checkpoint (cached per checkpoint file version).

    A checkpoint with a built-in task is checked on ``n`` of its validation inputs; one
    without is checked on the current input plus the lines of ``extra`` (one input a line).

    Returns:
        The report as HTML (problems highlighted) in ``message``, and a figure of every
        head's normalised entropy with its role.
    """
    try:
        ckpt = checkpoint_of(state)
        texts = None if ckpt.task else health_inputs(state, extra)
        key = (state.model, store.version_of(state.model), state.device, n, texts)
        rep = _HEALTH.get(key)
        if rep is None:
            rep = analysis.check(ckpt, texts=texts, n=n, ablation_sample=16)
            _HEALTH.put(key, rep)
    except AttnvizError as exc:
        return error_view(exc)
    items = []
    for f in rep.findings:
        items.append(
            f'<li class="finding {f.level}"><span class="level">{LEVELS[f.level]} {f.level}</span>'
            f" <b>{html.escape(f.check)}</b>: {html.escape(f.message)}</li>"
        )
    verdict = "passed" if rep.passed else "FAILED"
    body = (
        f'<div class="health {"pass" if rep.passed else "fail"}"><p><b>Health check {verdict}</b> '
        f"on {html.escape(rep.inputs)}.</p><ul>{''.join(items)}</ul></div>"
    )
    rows = [s.to_dict() for s in rep.stats]
    fig = plots.head_stats_figure(rows, "norm_entropy")
    return LabView([fig], body, on_input=texts is not None)


#: Dev sources a corpus checkpoint's health check adds to the inputs given.
HEALTH_DEV_SOURCES = 15


def health_inputs(state: SessionState, extra: str = "") -> tuple[str, ...]:
    """Inputs to check a checkpoint without a task on: the current input, each non-empty line
    of ``extra``, then up to :data:`HEALTH_DEV_SOURCES` dev sources a corpus run stored
    beside it (duplicates once): one input alone makes most heads look like they change
    nothing."""
    lines = [state.text.strip(), *(line.strip() for line in (extra or "").splitlines())]
    with contextlib.suppress(AttnvizError):  # no model loaded: the inputs given alone
        lines += [s.strip() for s, _ in dev_pairs(checkpoint_of(state))[:HEALTH_DEV_SOURCES]]
    texts = tuple(dict.fromkeys(t for t in lines if t))
    if not texts:
        raise InputError(
            "this checkpoint names no task, so it is checked on your inputs: type an input "
            "above (and, if you like, more inputs one per line in the box here)"
        )
    return texts


# -- on the page --------------------------------------------------------------------------------
def layout(p) -> None:
    """The Checkpoint health tab: more inputs for a model without a task, the button, the
    report and the head roles."""
    my = p.part("health")
    import gradio as gr

    with gr.Tab("Checkpoint health", elem_id="tab-health") as my.health_tab:
        my.health_extra = gr.Textbox(
            label="for a model without a task: the current input is checked, and these "
            "inputs too (one per line)", lines=2, elem_id="health-inputs",
        )  # fmt: skip
        my.health_btn = gr.Button("Run the health check", elem_id="health-btn")
        my.health_html = gr.HTML(elem_id="health-report")
        my.health_plot = gr.Plot(label="head roles", elem_id="health-heads")


def wire(p) -> None:
    """The button runs the check (stamped when it was run on the current input, so that it
    follows it); the tab, when selected, is the one shown (``p.active``)."""
    my = p.part("health")
    from ..state import panel_stamps
    from ..ui_common import FAST, HIDDEN, INTERNAL, dark

    def checked(state, stamps, extra, theme):
        view = health(state, extra)
        fig = dark(view.figures[:1], theme)[0] if view.figures else None
        stamps = {k: v for k, v in stamps.items() if k != "health"}
        if view.on_input:  # a checkpoint without a task was checked on the input
            stamps["health"] = panel_stamps(state)["health"]
        return view.message, fig, stamps

    my.health_btn.click(
        checked, [p.state, p.stamps, my.health_extra, p.theme],
        [my.health_html, my.health_plot, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.health_tab.select(lambda: "health", None, [p.active], **HIDDEN, **FAST)


def faces(p) -> list[Face]:
    """The report, said to be for an earlier input when the one it was checked on changes."""
    my = p.part("health")
    return [
        Face(
            "health",
            [my.health_html, my.health_plot],
            clear=lambda s, v: {my.health_html: STALE, my.health_plot: None},
        )
    ]
