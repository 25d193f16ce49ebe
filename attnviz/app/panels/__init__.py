"""The app's panels, registered: one table (:data:`PANELS`) says, for every panel of the page,
its name, its tab, its stamp and how it follows the state; the page's followers loop over it.

A panel is a gradio-free logic module plus its layout and wiring, which build its
:class:`~attnviz.app.panels.registry.Face` (its components and how they are cleared, rerun and
renewed). Panel modules are named for the panel (a bare noun, no suffix). Here: :mod:`.export` and
:mod:`.health` and :mod:`.playback` (logic, layout, wiring and face in one module: a new panel
is one module here plus one line in :data:`PANELS`); the Alignment tab (:mod:`.alignment`, its
logic, and :mod:`.alignment_ui`, its layout, wiring and faces: one module would pass ~500
lines); and the logic of :mod:`.beam`, :mod:`.compare`, :mod:`.reference`, :mod:`.similarity`
and :mod:`.whatif`, whose layout and wiring are still in the ``ui_*`` modules (``ui_labs``,
``ui_step``, ``ui_compare``, ``ui_similarity``), which build their faces. The labs: :mod:`.labs`
(mask lab, head ablation, attribution; the workers preload it), :mod:`.contrast` (why this
token and not that one) and :mod:`.lab_result` (what every lab returns, the check each starts
with), laid out by ``ui_labs``.

The Why this token tab: :mod:`.why` (its logic) and :mod:`.why_ui` (its layout, wiring and
faces; the page lays it out last, after Compare and Similarity, so the tab bar keeps its
order).

Importing this package imports no panel and no gradio: the stamps (and so the session state)
ask it. Every panel module is named for its panel, a bare noun.
"""

from __future__ import annotations

from .registry import (
    ON_CHECKED_INPUT,
    ON_FILE,
    ON_INPUT,
    ON_OUTPUT,
    ON_STEP,
    Face,
    Panel,
    same_source,
)

#: Every panel of the page that follows the session state, in the order the page follows them.
PANELS: tuple[Panel, ...] = (
    Panel("model", tab="", stamp=ON_FILE, renew=True),  # the header
    Panel("mask", tab="mask", stamp=ON_STEP, in_view=True),  # a person watching sees it follow
    Panel("attr", tab="attr", stamp=ON_STEP),
    Panel("attr_vs", tab="attr", stamp=ON_STEP),  # "why this token and not that one"
    Panel("attr_alt", tab="attr", stamp=ON_STEP, in_view=True),  # the step's candidates: cheap
    Panel("whatif", tab="step", stamp=ON_STEP, in_view=True, opened="whatif"),
    Panel("reference", tab="step", stamp=ON_OUTPUT, rerun_when=same_source),
    Panel("beam", tab="step", stamp=ON_INPUT),
    Panel("ablate", tab="ablation", stamp=ON_INPUT),
    Panel("compare", tab="compare", stamp=ON_INPUT),  # A and the input
    Panel("similarity", tab="similarity", stamp=ON_FILE),  # its own sentences
    Panel("why_dla", tab="why", stamp=ON_STEP),
    Panel("why_lens", tab="why", stamp=ON_STEP),
    Panel("why_patch", tab="why", stamp=ON_STEP),
    Panel("why_flow", tab="why", stamp=ON_STEP),
    Panel("why_alt", tab="why", stamp=ON_STEP, in_view=True),  # the step's candidates menu
    # a checkpoint without a task is checked on the current input (stamped only then)
    Panel("health", tab="health", stamp=ON_CHECKED_INPUT, page="health"),
    Panel("playback", tab="play", stamp=ON_FILE, renew=True, page="playback"),  # its range
    Panel("export", tab="export", stamp=ON_STEP, page="export"),
    Panel("align", tab="align", stamp=ON_INPUT, page="alignment_ui"),
    Panel("faith", tab="align", stamp=ON_STEP, page="alignment_ui"),
)

#: The panels by name.
BY_NAME: dict[str, Panel] = {p.name: p for p in PANELS}

__all__ = ["BY_NAME", "PANELS", "Face", "Panel"]
