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
    with gr.Tab("Alignment", elem_id="tab-align") as p.align_tab:
        kind_note(p, "align")
        with gr.Column() as p.kind_bodies["align"]:
            gr.Markdown(ALIGN_INTRO, elem_classes="explain")
            with gr.Row():
                p.align_lens = gr.Radio(list(LENSES), value="weights", label="lens")
                p.align_setting = gr.Radio(["output", "input"], value="output", label="setting")
                p.align_layer = gr.Dropdown(
                    ["best"], value="best", label="layer", allow_custom_value=STALE_OK
                )
                p.align_head = gr.Dropdown(
                    ["best"], value="best", label="head", allow_custom_value=STALE_OK
                )
            with gr.Row():
                p.align_gold = gr.Textbox(
                    label="gold links of the current input (Pharaoh line, e.g. 0-2 1-1 2p0)",
                    elem_id="align-gold", scale=2,
                )  # fmt: skip
                p.align_sources = gr.File(label="grid: sources, one per line", scale=1)
                p.align_gold_file = gr.File(
                    label="gold links (Pharaoh): one line per source line, or one line for "
                    "the current input", scale=1,
                )  # fmt: skip
            with gr.Row():
                p.align_btn = gr.Button("Score every head", variant="primary", elem_id="align-btn")
                p.align_dl = gr.Button("Download the head's links (Pharaoh)", elem_id="align-dl")
            p.align_msg = gr.Markdown(elem_id="align-message")
            p.align_grid = gr.HTML(elem_id="align-grid")
            with gr.Row():
                p.align_plot = gr.Plot(label="AER per head", elem_id="align-aer")
                p.align_overlay = gr.Plot(label="links on the current input", elem_id="align-links")
            p.align_file = gr.File(label="download", elem_id="align-file", height=90)
            gr.Markdown("### Faithfulness at this step")
            p.faith_btn = gr.Button("Measure faithfulness of the newest token", elem_id="faith-btn")
            p.faith_msg = gr.Markdown(elem_id="faith-message")
            p.faith_plot = gr.Plot(label="comprehensiveness / sufficiency", elem_id="faith-plot")


def align_inputs(p) -> list:
    """The controls an alignment view is computed from, in :func:`alignment.view`'s order."""
    return [p.align_lens, p.align_setting, p.align_layer, p.align_head,
            p.align_gold, p.align_sources, p.align_gold_file]  # fmt: skip


def wire(p) -> None:
    """The Alignment tab: computed when it opens or a control changes, never on a Step."""
    outs = [p.align_grid, p.align_plot, p.align_overlay, p.align_msg, p.stamps]

    def run(state, stamps, *args):
        *args, theme = args
        view = alignment.view(state, *args)
        figs = dark(view.figures, theme)
        return (view.grid_html, *figs, view.message, {**stamps, "align": stamp(state)["align"]})

    gr.on(
        [p.align_tab.select, p.align_btn.click, p.align_lens.input, p.align_setting.input,
         p.align_layer.input, p.align_head.input, p.align_gold.submit, p.align_sources.upload,
         p.align_gold_file.upload, p.align_sources.clear, p.align_gold_file.clear],
        run, [p.state, p.stamps, *align_inputs(p), p.theme], outs, js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    dl_in = [p.state, p.align_lens, p.align_setting, p.align_layer, p.align_head,
             p.align_sources, p.align_gold_file]  # fmt: skip
    p.align_dl.click(
        lambda s, lens, setting, ly, hd, src, gold: _file_only(
            alignment.download(s, ly, hd, lens, setting, src, gold)
        ),
        dl_in, [p.align_file, p.align_msg], **INTERNAL,
    )  # fmt: skip

    def faith(state, stamps, theme):
        view = alignment.faithfulness_view(state)
        fig = dark(view.figures, theme)[0]
        return fig, view.message, {**stamps, "faith": stamp(state)["faith"]}

    p.faith_btn.click(
        faith, [p.state, p.stamps, p.theme], [p.faith_plot, p.faith_msg, p.stamps],
        js=THEME_JS, **INTERNAL,
    )  # fmt: skip


def _file_only(view) -> tuple:
    return view.path, view.message


def _menus(p, ckpt) -> dict:
    """The layer and head menus for ``ckpt``: its decoder layers and heads, "best" first."""
    dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
    heads = [f"H{h}" for h in range(ckpt.config.n_heads)]
    return {
        p.align_layer: gr.Dropdown(choices=["best", *dec], value="best"),
        p.align_head: gr.Dropdown(choices=["best", *heads], value="best"),
    }


def faces(p) -> list[Face]:
    """The AER grid and the faithfulness curves, said to be for an earlier state when it moves
    on; the layer and head menus renewed for each model."""
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
            controls=lambda s, ckpt: _menus(p, ckpt),
            control_outputs=[p.align_layer, p.align_head],
        ),
        Face(
            "faith",
            [p.faith_plot, p.faith_msg],
            clear=lambda s, v: {p.faith_plot: None, p.faith_msg: STALE},
        ),
    ]
