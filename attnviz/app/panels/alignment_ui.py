"""The Alignment tab on the page: which heads align source and output words (AER against gold
links, per lens and setting, on the current input or a grid of sources) and faithfulness at the
step shown — its layout, events and faces (:func:`layout`, :func:`wire`, :func:`faces`); the
logic is :mod:`.alignment`. Computed when the tab opens or a control asks, never on a Step.

Registered by two lines in :data:`attnviz.app.panels.PANELS` (``"align"`` and ``"faith"``,
``page="alignment_ui"``).
"""

from __future__ import annotations

import gradio as gr

from ...analysis import LENSES
from ..pagetext import ALIGN_INTRO, STALE, THEME_JS
from ..state import panel_stamps as stamp
from ..ui_common import INTERNAL, STALE_OK, dark, kind_note
from . import alignment
from .registry import Face


def layout(p) -> None:
    """The Alignment tab: heads scored against gold links, and faithfulness at this step."""
    my = p.part("align")
    with gr.Tab("Alignment", elem_id="tab-align") as my.align_tab:
        kind_note(p, "align")
        with gr.Column() as p.kind_bodies["align"]:
            gr.Markdown(ALIGN_INTRO, elem_classes="explain")
            with gr.Row():
                my.align_lens = gr.Radio(list(LENSES), value="weights", label="lens")
                my.align_setting = gr.Radio(["output", "input"], value="output", label="setting")
                my.align_layer = gr.Dropdown(
                    ["best"], value="best", label="layer", allow_custom_value=STALE_OK
                )
                my.align_head = gr.Dropdown(
                    ["best"], value="best", label="head", allow_custom_value=STALE_OK
                )
            with gr.Row():
                my.align_gold = gr.Textbox(
                    label="gold links of the current input (Pharaoh line, e.g. 0-2 1-1 2p0)",
                    elem_id="align-gold", scale=2,
                )  # fmt: skip
                my.align_sources = gr.File(label="grid: sources, one per line", scale=1)
                my.align_gold_file = gr.File(
                    label="gold links (Pharaoh): one line per source line, or one line for "
                    "the current input", scale=1,
                )  # fmt: skip
            with gr.Row():
                my.align_btn = gr.Button("Score every head", variant="primary", elem_id="align-btn")
                my.align_dl = gr.Button("Download the head's links (Pharaoh)", elem_id="align-dl")
            my.align_msg = gr.Markdown(elem_id="align-message")
            my.align_grid = gr.HTML(elem_id="align-grid")
            with gr.Row():
                my.align_plot = gr.Plot(label="AER per head", elem_id="align-aer")
                my.align_overlay = gr.Plot(
                    label="links on the current input", elem_id="align-links"
                )
            my.align_file = gr.File(label="download", elem_id="align-file", height=90)
            gr.Markdown("### Faithfulness at this step")
            my.faith_btn = gr.Button(
                "Measure faithfulness of the newest token", elem_id="faith-btn"
            )
            my.faith_msg = gr.Markdown(elem_id="faith-message")
            my.faith_plot = gr.Plot(label="comprehensiveness / sufficiency", elem_id="faith-plot")


def align_inputs(p) -> list:
    """The controls an alignment view is computed from, in :func:`alignment.view`'s order."""
    my = p.part("align")
    return [my.align_lens, my.align_setting, my.align_layer, my.align_head,
            my.align_gold, my.align_sources, my.align_gold_file]  # fmt: skip


def wire(p) -> None:
    """The Alignment tab: computed when it opens or a control changes, never on a Step."""
    my = p.part("align")
    outs = [my.align_grid, my.align_plot, my.align_overlay, my.align_msg, p.stamps]

    def run(state, stamps, *args):
        *args, theme = args
        view = alignment.view(state, *args)
        figs = dark(view.figures, theme)
        return (view.grid_html, *figs, view.message, {**stamps, "align": stamp(state)["align"]})

    gr.on(
        [my.align_tab.select, my.align_btn.click, my.align_lens.input, my.align_setting.input,
         my.align_layer.input, my.align_head.input, my.align_gold.submit, my.align_sources.upload,
         my.align_gold_file.upload, my.align_sources.clear, my.align_gold_file.clear],
        run, [p.state, p.stamps, *align_inputs(p), p.theme], outs, js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    dl_in = [p.state, my.align_lens, my.align_setting, my.align_layer, my.align_head,
             my.align_sources, my.align_gold_file]  # fmt: skip
    my.align_dl.click(
        lambda s, lens, setting, ly, hd, src, gold: _file_only(
            alignment.download(s, ly, hd, lens, setting, src, gold)
        ),
        dl_in, [my.align_file, my.align_msg], **INTERNAL,
    )  # fmt: skip

    def faith(state, stamps, theme):
        view = alignment.faithfulness_view(state)
        fig = dark(view.figures, theme)[0]
        return fig, view.message, {**stamps, "faith": stamp(state)["faith"]}

    my.faith_btn.click(
        faith, [p.state, p.stamps, p.theme], [my.faith_plot, my.faith_msg, p.stamps],
        js=THEME_JS, **INTERNAL,
    )  # fmt: skip


def _file_only(view) -> tuple:
    return view.path, view.message


def _menus(p, ckpt) -> dict:
    """The layer and head menus for ``ckpt``: its decoder layers and heads, "best" first."""
    my = p.part("align")
    dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
    heads = [f"H{h}" for h in range(ckpt.config.n_heads)]
    return {
        my.align_layer: gr.Dropdown(choices=["best", *dec], value="best"),
        my.align_head: gr.Dropdown(choices=["best", *heads], value="best"),
    }


def faces(p) -> list[Face]:
    """The AER grid and the faithfulness curves, said to be for an earlier state when it moves
    on; the layer and head menus renewed for each model."""
    my = p.part("align")
    return [
        Face(
            "align",
            [my.align_grid, my.align_plot, my.align_overlay, my.align_msg],
            clear=lambda s, v: {
                my.align_grid: "",
                my.align_plot: None,
                my.align_overlay: None,
                my.align_msg: STALE,
            },
            controls=lambda s, ckpt: _menus(p, ckpt),
            control_outputs=[my.align_layer, my.align_head],
        ),
        Face(
            "faith",
            [my.faith_plot, my.faith_msg],
            clear=lambda s, v: {my.faith_plot: None, my.faith_msg: STALE},
        ),
    ]
