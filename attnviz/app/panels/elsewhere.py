"""The faces of the panels still laid out outside this folder by modules edited elsewhere
(to move here): the Alignment tab's AER grid and faithfulness (:mod:`attnviz.app.ui_align`)
and the Why this token tab's panels (:mod:`attnviz.app.ui_why`).

Built after layout, from those modules' components and their public :func:`ui_why.follow`.
"""

from __future__ import annotations

import gradio as gr

from .. import ui_why, why_view
from ..pagetext import STALE
from ..stamps import Follow
from .registry import Face


def _why(p, name: str, rerun: bool = False):
    """A Why this token panel's part of following, as :func:`ui_why.follow` gives it."""
    one = frozenset({name})
    none = frozenset()

    def part(state, values):
        plan = Follow(one if rerun else none, none, none if rerun else one, {})
        return ui_why.follow(p, state, plan)

    return part


def _align_menus(p, ckpt) -> dict:
    dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
    heads = [f"H{h}" for h in range(ckpt.config.n_heads)]
    return {
        p.align_layer: gr.Dropdown(choices=["best", *dec], value="best"),
        p.align_head: gr.Dropdown(choices=["best", *heads], value="best"),
    }


def faces(p) -> list[Face]:
    """The Alignment tab's and the Why this token tab's panels on the page."""
    why = [
        Face(name, ui_why.panels(p)[name], clear=_why(p, name))
        for name in why_view.PANELS
    ]  # fmt: skip
    return [
        Face(
            "align",
            [p.align_grid, p.align_plot, p.align_overlay, p.align_msg],
            clear=lambda s, v: {
                p.align_grid: "",
                p.align_plot: None,
                p.align_overlay: None,
                p.align_msg: STALE,
            },
            controls=lambda s, ckpt: _align_menus(p, ckpt),
            control_outputs=[p.align_layer, p.align_head],
        ),
        Face(
            "faith",
            [p.faith_plot, p.faith_msg],
            clear=lambda s, v: {p.faith_plot: None, p.faith_msg: STALE},
        ),
        *why,
        Face(
            why_view.ALT,
            [p.why_versus],
            clear=_why(p, why_view.ALT),
            rerun=_why(p, why_view.ALT, rerun=True),
        ),
    ]
