"""The app's panels, registered: one table (:data:`PANELS`) says, for every panel of the page,
its name, its tab, its stamp and how it follows the state; the page's followers loop over it.

A panel is a gradio-free logic module plus its layout and wiring, which build its
:class:`~attnviz.app.panels.registry.Face` (its components and how they are cleared, rerun and
renewed). Panel modules are named for the panel (a bare noun; ``_ui``: its layout, wiring and
faces where one module would pass ~500 lines). Each tab after the Step-through tab is laid out
by the module its panels name (:attr:`~attnviz.app.panels.registry.Panel.page`), in the order
of :data:`PANELS`, which is the tab bar's: the labs (:mod:`.labs`: mask lab, head ablation,
attribution, the workers preload it; :mod:`.contrast`: why this token and not that one;
:mod:`.lab_result`: what every lab returns; laid out by :mod:`.labs_ui`); :mod:`.health`,
:mod:`.playback` and :mod:`.export` (logic, layout, wiring and face in one module: a new panel
is one module here plus one line in :data:`PANELS`); Alignment (:mod:`.alignment`,
:mod:`.alignment_ui`); Compare (:mod:`.compare`, :mod:`.compare_ui`); Similarity
(:mod:`.similarity`, :mod:`.similarity_ui`); Why this token (:mod:`.why`, :mod:`.why_routes`,
:mod:`.why_ui`). The step view's panels (:mod:`.beam`, :mod:`.whatif`, :mod:`.reference`) are
laid out inside that tab by ``app.ui_step``, which builds their faces.

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
    # a person watching the mask lab sees it follow
    Panel("mask", tab="mask", stamp=ON_STEP, in_view=True, page="labs_ui"),
    Panel("attr", tab="attr", stamp=ON_STEP, page="labs_ui"),
    Panel("attr_vs", tab="attr", stamp=ON_STEP, page="labs_ui"),  # "why this, not that"
    Panel("attr_alt", tab="attr", stamp=ON_STEP, in_view=True, page="labs_ui"),  # cheap
    Panel("whatif", tab="step", stamp=ON_STEP, in_view=True, opened="whatif"),
    Panel("reference", tab="step", stamp=ON_OUTPUT, rerun_when=same_source),
    Panel("beam", tab="step", stamp=ON_INPUT),
    Panel("ablate", tab="ablation", stamp=ON_INPUT, page="labs_ui"),
    # a checkpoint without a task is checked on the current input (stamped only then)
    Panel("health", tab="health", stamp=ON_CHECKED_INPUT, page="health"),
    Panel("playback", tab="play", stamp=ON_FILE, renew=True, page="playback"),  # its range
    Panel("export", tab="export", stamp=ON_STEP, page="export"),
    Panel("align", tab="align", stamp=ON_INPUT, page="alignment_ui"),
    Panel("faith", tab="align", stamp=ON_STEP, page="alignment_ui"),
    Panel("compare", tab="compare", stamp=ON_INPUT, page="compare_ui"),  # A and the input
    Panel("similarity", tab="similarity", stamp=ON_FILE, page="similarity_ui"),  # its sentences
    Panel("why_dla", tab="why", stamp=ON_STEP, page="why_ui"),
    Panel("why_lens", tab="why", stamp=ON_STEP, page="why_ui"),
    Panel("why_patch", tab="why", stamp=ON_STEP, page="why_ui"),
    Panel("why_flow", tab="why", stamp=ON_STEP, page="why_ui"),
    Panel("why_alt", tab="why", stamp=ON_STEP, in_view=True, page="why_ui"),  # its candidates
)

#: The panels by name.
BY_NAME: dict[str, Panel] = {p.name: p for p in PANELS}

__all__ = ["BY_NAME", "PANELS", "Face", "Panel"]
