"""What every lab panel returns (:class:`LabView`) and the check each one starts with.

Shared by :mod:`attnviz.app.panels.labs`, :mod:`attnviz.app.panels.contrast` and the panels
that build on them; :mod:`attnviz.app.panels.labs` re-exports all three names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go

from ...checkpoint import Checkpoint
from ...core.errors import InputError
from .. import figures
from ..inputs import refuse
from ..speech import NOT_FOR_AUDIO
from ..state import SessionState, checkpoint_of, warning


@dataclass
class LabView:
    """What one panel shows: figures (in panel order) and a markdown message."""

    figures: list[go.Figure] = field(default_factory=list)
    message: str = ""
    rows: list[list] = field(default_factory=list)  # table rows, where the panel has a table
    path: str | None = None  # a written file, for the export buttons
    on_input: bool = False  # computed on the current input: it goes when the input changes


def stopped(*args, message: str, **kwargs) -> LabView:
    """A lab whose model's worker stopped (:func:`attnviz.app.workers.remote`): its line."""
    return LabView(message=message)


def error_view(exc: Exception, n_figures: int = 1) -> LabView:
    """A panel's answer to a user error: placeholders and the reason as the message."""
    figs = [figures.placeholder("see the message above") for _ in range(n_figures)]
    return LabView(figs, warning(exc))


def started_checkpoint(state: SessionState, lab: str = "") -> Checkpoint:
    """The checkpoint of a state with an input started (else a message to start one);
    ``lab``: refused in one sentence where it does not apply to the model's kind."""
    if not state.started:
        raise InputError("type an input and press Step or Run (Read, for a sentence model) first")
    ckpt = checkpoint_of(state)
    if ckpt.is_audio:
        raise InputError(NOT_FOR_AUDIO)
    refuse(ckpt, lab or "lab")  # "lab": refused only where no lab runs (encoder-only)
    return ckpt
