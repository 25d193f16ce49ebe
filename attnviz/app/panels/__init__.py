"""The app's panels, registered: one table (:data:`PANELS`) says, for every panel of the page,
its name, its tab, its stamp and how it follows the state; the page's followers loop over it.

A panel is a gradio-free logic module plus its layout and wiring, which build its
:class:`~attnviz.app.panels.registry.Face` (its components and how they are cleared, rerun and
renewed). Here, the panels already moved: :mod:`.health`, :mod:`.playback`, :mod:`.export`
(logic modules named for the panel, no suffix). A new panel is one module here plus one line
in :data:`PANELS`.

Panels registered where they still live (being edited elsewhere; to move): the Alignment tab
and faithfulness (``app.alignment``, ``app.ui_align``), Why this token (``app.why_view``,
``app.ui_why``), whose faces :mod:`.elsewhere` builds; and the labs, what-if, Reference, beam,
Compare and Similarity panels (``app.labs``, ``app.whatif_view``, ``app.reference``,
``app.beamview``, ``app.compare_lab``, ``app.similarity_view``), whose faces their ``ui_*``
modules build.

Importing this package imports no panel and no gradio: the stamps (and so the session layer)
ask it.
"""

from __future__ import annotations

from .registry import (
    Face,
    Panel,
    on_checked_input,
    on_file,
    on_input,
    on_output,
    on_step,
    same_source,
)

#: Every panel of the page that follows the session state, in the order the page follows them.
PANELS: tuple[Panel, ...] = (
    Panel("model", tab="", stamp=on_file, renew=True),  # the header
    Panel("playback", tab="play", stamp=on_file, renew=True),  # the snapshots' range
    Panel("mask", tab="mask", stamp=on_step, in_view=True),  # a person watching sees it follow
    Panel("attr", tab="attr", stamp=on_step),
    Panel("attr_vs", tab="attr", stamp=on_step),  # "why this token and not that one"
    Panel("attr_alt", tab="attr", stamp=on_step, in_view=True),  # the step's candidates: cheap
    Panel("export", tab="export", stamp=on_step, page="export"),
    Panel("faith", tab="align", stamp=on_step),
    Panel("whatif", tab="step", stamp=on_step, in_view=True, opened="whatif"),
    Panel("reference", tab="step", stamp=on_output, rerun_when=same_source),
    Panel("beam", tab="step", stamp=on_input),
    Panel("ablate", tab="ablation", stamp=on_input),
    Panel("align", tab="align", stamp=on_input),
    Panel("compare", tab="compare", stamp=on_input),  # A and the input
    Panel("similarity", tab="similarity", stamp=on_file),  # its own sentences
    Panel("why_dla", tab="why", stamp=on_step),
    Panel("why_lens", tab="why", stamp=on_step),
    Panel("why_patch", tab="why", stamp=on_step),
    Panel("why_flow", tab="why", stamp=on_step),
    Panel("why_alt", tab="why", stamp=on_step, in_view=True),  # the step's candidates menu
    # a checkpoint without a task is checked on the current input (stamped only then)
    Panel("health", tab="health", stamp=on_checked_input),
)

#: The panels by name.
BY_NAME: dict[str, Panel] = {p.name: p for p in PANELS}

__all__ = ["BY_NAME", "PANELS", "Face", "Panel"]
