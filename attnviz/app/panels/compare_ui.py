"""The Compare tab: the checkpoint shown (A) against another (B, from the menu or uploaded),
head by head on the current input, and its events. Computed when model B, a head (menus or
a click on the grid) or the button asks, never on a Step."""

from __future__ import annotations

import gradio as gr

from ...core.errors import AttnvizError
from ...core.model import KINDS
from .. import store
from ..pagetext import COMPARE_ON_LOAD, PICK_JS, STALE, THEME_JS
from ..state import layer_count
from ..state import panel_stamps as stamp
from ..ui_common import HIDDEN, INTERNAL, STALE_OK, dark
from . import Face
from . import compare as compare_lab


def layout(p) -> None:
    """The Compare tab: model B (menu or upload), the head grid, one head drawn A | B."""
    my = p.part("compare")
    with gr.Tab("Compare", elem_id="tab-compare") as my.compare_tab:
        gr.Markdown(compare_lab.INTRO, elem_classes="explain")
        with gr.Row(equal_height=True):
            my.compare_model = gr.Dropdown(
                choices=store.menu(), value=None, label="model B", elem_id="compare-model",
                scale=2,
            )  # fmt: skip
            my.compare_upload = gr.File(
                label="…or upload model B", file_count="multiple", elem_id="compare-upload",
                scale=1, height=110,
            )  # fmt: skip
            my.compare_files = gr.State([])  # the box's files: a new upload replaces them
            my.compare_btn = gr.Button("Compare", variant="primary", elem_id="compare-btn", scale=0)
        my.compare_msg = gr.Markdown(elem_id="compare-message")
        # a grid cell clicked: the page puts "kind layer head" here and presses the button
        my.compare_grid = gr.HTML(elem_id="compare-grid", js_on_load=COMPARE_ON_LOAD)
        my.compare_pick_btn = gr.Button(
            "pick", elem_id="compare-pick-btn", elem_classes="av-hidden"
        )
        my.compare_pick = gr.Textbox("", elem_id="compare-pick", elem_classes="av-hidden")
        with gr.Row():
            my.compare_kind = gr.Radio(
                list(KINDS), value="cross", label="head drawn (or click a cell above)",
                elem_id="compare-kind",
            )  # fmt: skip
            my.compare_layer = gr.Dropdown(
                ["L0"], value="L0", label="layer", allow_custom_value=STALE_OK
            )
            my.compare_head = gr.Dropdown(
                ["H0"], value="H0", label="head", elem_id="compare-head-menu"
            )
        my.compare_head_plot = gr.Plot(label="A | B | A − B", elem_id="compare-head")
        my.compare_tokens = gr.HTML(elem_id="compare-tokens")


def faces(p) -> list[Face]:
    """The tab's result, cleared when the input or model changes; its kinds menu, the loaded
    model's (a decoder-only model compares its self-attention)."""
    my = p.part("compare")

    def kinds(state, ckpt) -> dict:
        have = [k for k in KINDS if layer_count(ckpt, k)]
        return {
            my.compare_kind: gr.Radio(choices=have, value="cross" if "cross" in have else have[0])
        }

    return [
        Face(
            "compare",
            [my.compare_grid, my.compare_head_plot, my.compare_tokens, my.compare_msg],
            clear=lambda s, v: {
                my.compare_grid: "",
                my.compare_head_plot: None,
                my.compare_tokens: "",
                my.compare_msg: STALE,
            },
            controls=kinds,
            control_outputs=[my.compare_kind],
        )
    ]


def wire(p) -> None:
    """The Compare tab: computed when model B (menu or upload), the head (menus or a click on
    the grid) or the button asks, never on a Step."""
    my = p.part("compare")
    outs = [my.compare_grid, my.compare_head_plot, my.compare_tokens, my.compare_msg, p.stamps,
            my.compare_layer, my.compare_head]  # fmt: skip

    def run(state, stamps, model_b, kind, layer, head, theme):
        kind = compare_lab.kind_of(state, kind)  # a decoder-only model: decoder_self alone
        layers, heads = compare_lab.head_menus(state, kind)
        layer = layer if layer in layers else (layers or [None])[0]
        head = head if head in heads else (heads or [None])[0]
        view = compare_lab.compare(state, model_b, kind, layer, head)
        head_fig = dark([view.head], theme)[0]
        stamps = {**stamps, "compare": stamp(state)["compare"]}
        menus = (gr.Dropdown(choices=layers, value=layer), gr.Dropdown(choices=heads, value=head))
        return (view.grid_html, head_fig, view.tokens_html, view.message, stamps, *menus)

    gr.on(
        [my.compare_model.input, my.compare_btn.click, my.compare_kind.input,
         my.compare_layer.input, my.compare_head.input],
        run, [p.state, p.stamps, my.compare_model, my.compare_kind, my.compare_layer,
              my.compare_head, p.theme], outs, js=THEME_JS, **INTERNAL,
    )  # fmt: skip

    def pick(state, stamps, model_b, value, theme):
        try:
            kind, layer, head = compare_lab.parse_pick(value)
        except AttnvizError as exc:
            return (*[gr.skip()] * 3, f"⚠ {exc}", *[gr.skip()] * 4)
        return (*run(state, stamps, model_b, kind, layer, head, theme), kind)

    my.compare_pick_btn.click(
        pick, [p.state, p.stamps, my.compare_model, my.compare_pick, p.theme],
        [*outs, my.compare_kind], js=PICK_JS, **INTERNAL,
    )  # fmt: skip

    def upload(state, stamps, files, held, model_b, kind, layer, head, theme):
        # the box adds each upload to the files it holds: keep only the new ones
        files = [f for f in files or [] if f]
        new = [f for f in files if f not in (held or [])] or files
        box = gr.File(value=new)
        name, why = compare_lab.upload_b(new, state.device, owner=state.sid)
        if name is None:  # the grid below (labelled A vs B) still shows the last comparison
            shown = f" (the grid below still compares A with B = {model_b})" if model_b else ""
            return (*[gr.skip()] * 3, why.rstrip(". ") + shown, *[gr.skip()] * 4, box, new)
        menu = gr.Dropdown(choices=compare_lab.model_choices(state), value=name)
        return (*run(state, stamps, name, kind, layer, head, theme), menu, box, new)

    my.compare_upload.upload(
        upload, [p.state, p.stamps, my.compare_upload, my.compare_files, my.compare_model,
                 my.compare_kind, my.compare_layer, my.compare_head, p.theme],
        [*outs, my.compare_model, my.compare_upload, my.compare_files], js=THEME_JS, **INTERNAL,
    )  # fmt: skip

    def cleared(state, stamps, model_b, kind, layer, head, theme):
        """The upload box cleared: its warning goes; the comparison with B shown again."""
        if not model_b:
            return (*[gr.skip()] * 3, "", *[gr.skip()] * 3, [])
        return (*run(state, stamps, model_b, kind, layer, head, theme), [])

    my.compare_upload.clear(
        cleared, [p.state, p.stamps, my.compare_model, my.compare_kind, my.compare_layer,
                  my.compare_head, p.theme], [*outs, my.compare_files], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.compare_tab.select(
        lambda s, b: gr.Dropdown(choices=compare_lab.model_choices(s), value=b),
        [p.state, my.compare_model], [my.compare_model], **HIDDEN,
    )  # fmt: skip
