"""The labs' tabs: mask lab, head ablation, attribution ("why this token and not that one"), and
their events and faces (:func:`faces`). Each panel is computed when its button or control asks
(stamped with the state it shows), never on a Step. Checkpoint health, training playback and
export are one module each in :mod:`attnviz.app.panels`."""

from __future__ import annotations

import gradio as gr

from ...core.errors import AttnvizError
from ...core.model import KINDS
from ..kinds import is_decoder_only, is_encoder_only
from ..pagetext import MASK_INTRO, STALE, THEME_JS
from ..state import SessionState, head_choices, head_sites, layer_count
from ..state import panel_stamps as stamp
from ..ui_common import (
    FAST,
    HIDDEN,
    INTERNAL,
    MODEL_EVENTS,
    STALE_OK,
    dark,
    decoder_menus,
    kind_note,
)
from ..views import display_token
from . import Face, labs


def layout(p) -> None:
    """The labs' tabs, after the Step-through tab: mask lab, head ablation, attribution."""
    mask_tab(p)
    other_tabs(p, p.state.value)


def mask_tab(p) -> None:
    my = p.part("labs")
    with gr.Tab("Mask lab", elem_id="tab-mask") as my.mask_tab:
        kind_note(p, "mask")  # no source tokens to block (or, encoder-only, no lab): why
        with gr.Column() as my.mask_body:  # hidden for an encoder-only model
            my.mask_intro = gr.Markdown(  # a decoder-only model's: no source tokens to hide
                MASK_INTRO["encoder-decoder"], elem_id="mask-intro", elem_classes="explain"
            )
            with gr.Row():
                my.causal = gr.Checkbox(label="causal mask off", elem_id="causal-toggle")
                my.padding = gr.Checkbox(label="padding mask off", elem_id="padding-toggle")
                my.blocked = gr.CheckboxGroup(label="block source tokens", elem_id="block-tokens")
                my.window_off = gr.CheckboxGroup(  # Gemma 3, Mistral: shown where layers have one
                    label="sliding window off on layers", elem_id="window-off", visible=False
                )
            with gr.Row():
                my.mask_kind = gr.Radio(["auto", *KINDS], value="auto", label="show")
                my.mask_layer = gr.Dropdown(label="layer", allow_custom_value=STALE_OK)
                my.mask_head = gr.Dropdown(
                    ["mean"], value="mean", label="head", allow_custom_value=STALE_OK
                )
            my.mask_msg = gr.Markdown(elem_id="mask-message")
            my.mask_plot = gr.Plot(label="before / after / difference", elem_id="heatmap-mask")
            my.mask_probs = gr.Plot(label="next token before vs after", elem_id="mask-next")


def other_tabs(p, state: SessionState) -> None:
    """Head ablation and attribution."""
    my = p.part("labs")
    layers, heads = decoder_menus(state)
    with gr.Tab("Head ablation", elem_id="tab-ablation") as my.ablation_tab:
        my.ablate_sites = gr.CheckboxGroup(label="heads to switch off", elem_id="ablate-heads")
        with gr.Row():
            my.ablate_btn = gr.Button("Rerun with these heads off", elem_id="ablate-btn")
            my.rank_btn = gr.Button("Rank heads by effect", elem_id="rank-btn")
        my.ablate_msg = gr.Markdown(elem_id="ablate-message")
        my.ablate_plot = gr.Plot(label="probability change", elem_id="ablation-plot")
        my.rank_table = gr.Dataframe(  # shown once heads are ranked (empty, no table)
            headers=["head", "changed outputs", "max |Δp|", "mean |Δp|"], interactive=False,
            elem_id="rank-table", visible=False,
        )  # fmt: skip
    with gr.Tab("Attribution", elem_id="tab-attribution") as my.attr_tab:
        with gr.Row():
            my.attr_layer = gr.Dropdown(
                layers, value=(layers or [None])[-1], label="layer of the attention compared",
                allow_custom_value=STALE_OK,
            )  # fmt: skip
            my.attr_btn = gr.Button("Attribute the newest token", elem_id="attr-btn")
        my.attr_msg = gr.Markdown(elem_id="attr-message")
        my.attr_src = gr.Plot(label="source", elem_id="attribution-src")
        my.attr_tgt = gr.Plot(label="previous tokens", elem_id="attribution-tgt")
        kind_note(p, "contrast")  # an encoder-only model has no next token to contrast
        with gr.Column() as p.kind_bodies["contrast"]:
            gr.Markdown("### Why this token and not that one")
            with gr.Row():
                my.attr_alt = gr.Dropdown(
                    label="…and not this candidate (default: the runner-up; for a forced "
                    "token, the model's own choice)", elem_id="attr-alt", allow_custom_value=True,
                    scale=3,
                )  # fmt: skip
                my.attr_head = gr.Dropdown(
                    ["mean", *heads], value="mean", label="head of the attention rows", scale=1
                )
                my.attr_vs_btn = gr.Button(
                    "Why this token and not that one", elem_id="attr-vs-btn", scale=1
                )
            my.attr_vs_msg = gr.Markdown(elem_id="attr-vs-message")
            my.attr_vs_plot = gr.Plot(
                label="contrastive attribution and next-step attention",
                elem_id="attribution-contrast",
            )


def mask_panels(
    p, state, causal, padding, blocked, kind, layer, head, window=None, theme="light"
) -> dict:
    """The mask lab's panels computed for ``state`` with these switches."""
    my = p.part("labs")
    v = labs.mask_lab(
        state, causal, padding, blocked or [], kind, None if layer == "last" else layer, head,
        window or [],
    )  # fmt: skip
    figs = dark((v.figures + [None, None])[:2], theme)
    return {
        my.mask_plot: figs[0],
        my.mask_probs: figs[1],
        my.mask_msg: v.message,
        my.blocked: block_choices(state, blocked),
    }


def block_choices(state: SessionState, chosen: list[str] | None):
    """Source tokens of the current input as "position: token" choices (a clip's 1500 frames:
    none, the Mask lab does not apply to a speech model and says so)."""
    pieces = [] if state.audio else state.src_pieces
    choices = [f"{i}: {display_token(t)}" for i, t in enumerate(pieces)]
    return gr.CheckboxGroup(choices=choices, value=[c for c in chosen or [] if c in choices])


def alt_choices(state: SessionState, value: str | None = None):
    """The Attribution tab's alternatives: the step shown's other candidates, ``value`` or
    else the default (runner-up, or the model's argmax for a forced token) selected."""
    try:
        choices, default = labs.alternatives(state)
    except AttnvizError:
        choices, default = [], None
    return gr.Dropdown(choices=choices, value=value or default)


#: The Attribution tab's button and its two figures' labels, by what the model does.
ATTR_LABELS = {
    "decode": ("Attribute the newest token", "source", "previous tokens"),
    "read": (
        "Attribute the filler at the first mask",
        "the sentence: attribution beside the mask's self-attention",
        "the sentence: Integrated Gradients and gradient × input",
    ),
}


def faces(p) -> list[Face]:
    """The labs' panels on the page (:class:`~attnviz.app.panels.Face`): what each clears,
    reruns and sets for the loaded model."""
    my = p.part("labs")
    mask_in = [my.causal, my.padding, my.blocked, my.mask_kind, my.mask_layer, my.mask_head,
               my.window_off, p.theme]  # fmt: skip
    return [
        Face(
            "mask",
            [my.mask_plot, my.mask_probs, my.mask_msg, my.blocked],
            clear=lambda s, v: {
                my.mask_plot: None,
                my.mask_probs: None,
                my.mask_msg: STALE,
                my.blocked: block_choices(s, v[my.blocked]),
            },
            rerun=lambda s, v: mask_panels(p, s, *(v[c] for c in mask_in[:-1]), theme=v[p.theme]),
            inputs=mask_in,
            controls=lambda s, ckpt: mask_controls(p, ckpt),
            control_outputs=[
                my.mask_layer,
                my.window_off,
                my.mask_kind,
                my.mask_intro,
                my.mask_head,
                my.mask_body,
            ],
        ),
        Face(
            "attr",
            [my.attr_src, my.attr_tgt, my.attr_msg],
            clear=lambda s, v: {my.attr_src: None, my.attr_tgt: None, my.attr_msg: STALE},
            controls=lambda s, ckpt: attribution_controls(p, ckpt),
            control_outputs=[my.attr_layer, my.attr_head, my.attr_btn, my.attr_src, my.attr_tgt],
        ),
        Face(
            "attr_vs",
            [my.attr_vs_plot, my.attr_vs_msg],
            clear=lambda s, v: {my.attr_vs_plot: None, my.attr_vs_msg: STALE},
        ),
        Face(
            "attr_alt",
            [my.attr_alt],
            clear=lambda s, v: {my.attr_alt: gr.Dropdown(choices=[], value=None)},
            rerun=lambda s, v: {my.attr_alt: alt_choices(s)},  # the shown step's candidates
        ),
        Face(
            "ablate",
            [my.ablate_plot, my.ablate_msg, my.rank_table],
            clear=lambda s, v: {
                my.ablate_plot: None,
                my.ablate_msg: STALE,
                my.rank_table: gr.Dataframe(value=None, visible=False),
            },
            controls=lambda s, ckpt: {
                my.ablate_sites: gr.CheckboxGroup(
                    choices=[x for k in KINDS for x in head_sites(s, k)], value=[]
                )
            },
            control_outputs=[my.ablate_sites],
        ),
    ]


def mask_controls(p, ckpt) -> dict:
    """The mask lab's menus for ``ckpt``: its decoder layers, heads, kinds, local layers."""
    my = p.part("labs")
    cfg = ckpt.config
    dec = [f"L{i}" for i in range(cfg.n_decoder_layers)]
    local = [f"L{i}" for i in range(cfg.n_decoder_layers) if cfg.layer_window(i)]
    heads = [h for h in head_choices(ckpt) if h != "all heads"]
    one = is_decoder_only(ckpt)
    return {  # no mask lab for encoder-only yet, nor for a speech model
        my.mask_body: gr.Column(visible=not is_encoder_only(ckpt) and not ckpt.is_audio),
        my.mask_layer: gr.Dropdown(choices=["last", *dec], value="last"),
        my.window_off: gr.CheckboxGroup(choices=local, value=[], visible=bool(local)),
        my.mask_kind: gr.Radio(  # the kinds this model has
            choices=["auto", *(k for k in KINDS if layer_count(ckpt, k))], value="auto"
        ),
        my.mask_intro: MASK_INTRO["decoder-only" if one else "encoder-decoder"],
        my.mask_head: gr.Dropdown(choices=heads, value="mean"),
    }


def attribution_controls(p, ckpt) -> dict:
    """The Attribution tab for ``ckpt``: an encoder-only model's button and figures explain the
    filler at its first mask token over the sentence (its encoder's layers), not the newest
    decoded token."""
    my = p.part("labs")
    reads = is_encoder_only(ckpt)
    one = is_decoder_only(ckpt)
    cfg = ckpt.config
    layers = [f"L{i}" for i in range(cfg.n_encoder_layers if reads else cfg.n_decoder_layers)]
    rows = ("self-attention of the mask token" if reads else
            "self-attention on the prompt" if one else "cross-attention")  # fmt: skip
    words = ATTR_LABELS["read" if reads else "decode"]
    heads = [h for h in head_choices(ckpt) if h != "all heads"]
    return {
        my.attr_layer: gr.Dropdown(
            choices=layers, value=(layers or [None])[-1], label=f"layer of the {rows} compared"
        ),
        my.attr_head: gr.Dropdown(choices=heads, value="mean"),
        my.attr_btn: gr.Button(words[0]),
        my.attr_src: gr.Plot(label=words[1]),
        my.attr_tgt: gr.Plot(label=words[2]),
    }


def wire(p) -> None:
    """The labs' events (each computes its panel when asked, never on a Step)."""
    my = p.part("labs")
    lab_in = [
        my.causal,
        my.padding,
        my.blocked,
        my.mask_kind,
        my.mask_layer,
        my.mask_head,
        my.window_off,
    ]
    mask_out = [my.mask_plot, my.mask_probs, my.mask_msg, my.blocked, p.stamps]

    def mask(s, stamps, *args):
        *args, theme = args
        out = mask_panels(p, s, *args, theme=theme)
        return (*out.values(), {**stamps, "mask": stamp(s)["mask"]})

    gr.on(
        [my.causal.input, my.padding.input, my.blocked.input, my.mask_kind.input,
         my.mask_layer.input, my.mask_head.input, my.window_off.input, my.mask_tab.select],
        mask, [p.state, p.stamps, *lab_in, p.theme], mask_out, js=THEME_JS, **INTERNAL,
    )  # fmt: skip

    def lab(fn, key: str, n: int):
        def run(s, stamps, *args):
            *args, theme = args
            view = fn(s, *args)
            figs = dark((view.figures + [None] * n)[:n], theme)
            return (*figs, view.message, {**stamps, key: stamp(s)[key]})

        return run

    my.ablate_btn.click(
        lab(labs.ablation, "ablate", 1), [p.state, p.stamps, my.ablate_sites, p.theme],
        [my.ablate_plot, my.ablate_msg, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.rank_btn.click(
        _rank, [p.state, p.stamps, p.theme],
        [my.rank_table, my.ablate_plot, my.ablate_msg, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.attr_btn.click(
        lab(labs.attribution, "attr", 2), [p.state, p.stamps, my.attr_layer, p.theme],
        [my.attr_src, my.attr_tgt, my.attr_msg, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.attr_vs_btn.click(
        _contrast, [p.state, p.stamps, my.attr_alt, my.attr_layer, my.attr_head, p.theme],
        [my.attr_vs_plot, my.attr_vs_msg, p.stamps, my.attr_alt], js=THEME_JS, api_name="contrast",
        **MODEL_EVENTS,
    )  # fmt: skip
    my.attr_tab.select(_alt_menu, [p.state, p.stamps], [my.attr_alt, p.stamps], **HIDDEN, **FAST)


def _alt_menu(state: SessionState, stamps: dict) -> tuple:
    """The alternatives menu filled for the step shown, stamped so that it follows the step."""
    return alt_choices(state), {**stamps, "attr_alt": stamp(state)["attr_alt"]}


def _contrast(state: SessionState, stamps: dict, alt, layer, head, theme: str = "light") -> tuple:
    """Why this token and not that one; the menu then names the alternative explained."""
    view = labs.contrast(state, alt, layer, head)
    fig = dark(view.figures[:1], theme)[0] if view.figures else None
    used = str(view.versus) if view.versus is not None else None
    menu = alt_choices(state, used) if used else gr.skip()
    now = stamp(state)
    stamps = {
        **stamps,
        "attr_vs": now["attr_vs"],
        **({"attr_alt": now["attr_alt"]} if used else {}),
    }
    return fig, view.message, stamps, menu


def _rank(state: SessionState, stamps: dict, theme: str = "light") -> tuple:
    view = labs.rank_heads(state)
    fig = dark(view.figures[:1], theme)[0] if view.figures else None
    table = gr.Dataframe(value=view.rows or None, visible=bool(view.rows))
    return table, fig, view.message, {**stamps, "ablate": stamp(state)["ablate"]}
