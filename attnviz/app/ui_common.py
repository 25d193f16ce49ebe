"""What the page's tab modules share: the event options and a few small gradio helpers.

Each ``ui_*`` module lays out one part of the page on the :class:`~attnviz.app.ui.Page` it is
handed (its components become the page's attributes) and wires that part's events.
"""

from __future__ import annotations

import gradio as gr

from ..core.errors import AttnvizError
from ..render import plots
from .state import SessionState, checkpoint_of

# Decoding events skip gradio's queue (a queued event costs ~50 ms more round trip); each
# session's decoder has its own lock, and a Step costs milliseconds of model time.
FAST = dict(queue=False, show_progress="hidden")
MODEL_EVENTS = dict(concurrency_id="model", concurrency_limit=2)
HIDDEN = dict(api_visibility="undocumented")
INTERNAL = dict(HIDDEN, **MODEL_EVENTS)


def decoder_menus(state: SessionState) -> tuple[list[str], list[str]]:
    """``(["L0", ...], ["H0", ...])`` of the state's model (empty when none loads), so the
    menus hold valid values before the page's first load event renews them."""
    try:
        cfg = checkpoint_of(state).config
    except AttnvizError:
        return [], []
    return [f"L{i}" for i in range(cfg.n_decoder_layers)], [f"H{h}" for h in range(cfg.n_heads)]


def kind_note(p, place: str) -> None:
    """Where a part of the page does not apply to the model's kind: one sentence saying why
    (its body, ``p.kind_bodies[place]``, hidden; both set by ``Page.controls``)."""
    p.kind_notes[place] = gr.Markdown(
        visible=False, elem_id=f"kind-note-{place}", elem_classes="explain"
    )


def shown_plot(fig):
    """A plot that takes no room until it has a figure (an empty plot is a blank box)."""
    return gr.Plot(value=fig, visible=fig is not None)


#: Layer and head menus take a value their choices lack for one event: a model switch renews
#: the choices and the values in one update, but an event already queued (the panels that
#: follow a decode) may carry the old model's "L3". The handlers refuse it in one line (and
#: the next update sets a valid value) instead of gradio failing every output of that event.
STALE_OK = True


def dark(figs: list, theme: str) -> list:
    """The figures themed for the page (``theme``: "light" or "dark"); ``None`` stays."""
    return [plots.themed(f, theme == "dark") if f is not None else None for f in figs]
