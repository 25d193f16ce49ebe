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
    with gr.Tab("Mask lab", elem_id="tab-mask") as p.mask_tab:
        kind_note(p, "mask")  # no source tokens to block (or, encoder-only, no lab): why
        with gr.Column() as p.mask_body:  # hidden for an encoder-only model
            p.mask_intro = gr.Markdown(  # a decoder-only model's: no source tokens to hide
                MASK_INTRO["encoder-decoder"], elem_id="mask-intro", elem_classes="explain"
            )
            with gr.Row():
                p.causal = gr.Checkbox(label="causal mask off", elem_id="causal-toggle")
                p.padding = gr.Checkbox(label="padding mask off", elem_id="padding-toggle")
                p.blocked = gr.CheckboxGroup(label="block source tokens", elem_id="block-tokens")
                p.window_off = gr.CheckboxGroup(  # Gemma 3, Mistral: shown where layers have one
                    label="sliding window off on layers", elem_id="window-off", visible=False
                )
            with gr.Row():
                p.mask_kind = gr.Radio(["auto", *KINDS], value="auto", label="show")
                p.mask_layer = gr.Dropdown(label="layer", allow_custom_value=STALE_OK)
                p.mask_head = gr.Dropdown(
                    ["mean"], value="mean", label="head", allow_custom_value=STALE_OK
                )
            p.mask_msg = gr.Markdown(elem_id="mask-message")
            p.mask_plot = gr.Plot(label="before / after / difference", elem_id="heatmap-mask")
            p.mask_probs = gr.Plot(label="next token before vs after", elem_id="mask-next")


def other_tabs(p, state: SessionState) -> None:
    """Head ablation and attribution."""
    layers, heads = decoder_menus(state)
    with gr.Tab("Head ablation", elem_id="tab-ablation") as p.ablation_tab:
        p.ablate_sites = gr.CheckboxGroup(label="heads to switch off", elem_id="ablate-heads")
        with gr.Row():
            p.ablate_btn = gr.Button("Rerun with these heads off", elem_id="ablate-btn")
            p.rank_btn = gr.Button("Rank heads by effect", elem_id="rank-btn")
        p.ablate_msg = gr.Markdown(elem_id="ablate-message")
        p.ablate_plot = gr.Plot(label="probability change", elem_id="ablation-plot")
        p.rank_table = gr.Dataframe(  # shown once heads are ranked (empty, no table)
            headers=["head", "changed outputs", "max |Δp|", "mean |Δp|"], interactive=False,
            elem_id="rank-table", visible=False,
        )  # fmt: skip
    with gr.Tab("Attribution", elem_id="tab-attribution") as p.attr_tab:
        with gr.Row():
            p.attr_layer = gr.Dropdown(
                layers, value=(layers or [None])[-1], label="layer of the attention compared",
                allow_custom_value=STALE_OK,
            )  # fmt: skip
            p.attr_btn = gr.Button("Attribute the newest token", elem_id="attr-btn")
        p.attr_msg = gr.Markdown(elem_id="attr-message")
        p.attr_src = gr.Plot(label="source", elem_id="attribution-src")
        p.attr_tgt = gr.Plot(label="previous tokens", elem_id="attribution-tgt")
        kind_note(p, "contrast")  # an encoder-only model has no next token to contrast
        with gr.Column() as p.kind_bodies["contrast"]:
            gr.Markdown("### Why this token and not that one")
            with gr.Row():
                p.attr_alt = gr.Dropdown(
                    label="…and not this candidate (default: the runner-up; for a forced "
                    "token, the model's own choice)", elem_id="attr-alt", allow_custom_value=True,
                    scale=3,
                )  # fmt: skip
                p.attr_head = gr.Dropdown(
                    ["mean", *heads], value="mean", label="head of the attention rows", scale=1
                )
                p.attr_vs_btn = gr.Button(
                    "Why this token and not that one", elem_id="attr-vs-btn", scale=1
                )
            p.attr_vs_msg = gr.Markdown(elem_id="attr-vs-message")
            p.attr_vs_plot = gr.Plot(
                label="contrastive attribution and next-step attention",
                elem_id="attribution-contrast",
            )


def mask_panels(
    p, state, causal, padding, blocked, kind, layer, head, window=None, theme="light"
) -> dict:
    """The mask lab's panels computed for ``state`` with these switches."""
    v = labs.mask_lab(
        state, causal, padding, blocked or [], kind, None if layer == "last" else layer, head,
        window or [],
    )  # fmt: skip
    figs = dark((v.figures + [None, None])[:2], theme)
    return {
        p.mask_plot: figs[0],
        p.mask_probs: figs[1],
        p.mask_msg: v.message,
        p.blocked: block_choices(state, blocked),
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
    mask_in = [p.causal, p.padding, p.blocked, p.mask_kind, p.mask_layer, p.mask_head,
               p.window_off, p.theme]  # fmt: skip
    return [
        Face(
            "mask",
            [p.mask_plot, p.mask_probs, p.mask_msg, p.blocked],
            clear=lambda s, v: {
                p.mask_plot: None,
                p.mask_probs: None,
                p.mask_msg: STALE,
                p.blocked: block_choices(s, v[p.blocked]),
            },
            rerun=lambda s, v: mask_panels(p, s, *(v[c] for c in mask_in[:-1]), theme=v[p.theme]),
            inputs=mask_in,
            controls=lambda s, ckpt: mask_controls(p, ckpt),
            control_outputs=[
                p.mask_layer,
                p.window_off,
                p.mask_kind,
                p.mask_intro,
                p.mask_head,
                p.mask_body,
            ],
        ),
        Face(
            "attr",
            [p.attr_src, p.attr_tgt, p.attr_msg],
            clear=lambda s, v: {p.attr_src: None, p.attr_tgt: None, p.attr_msg: STALE},
            controls=lambda s, ckpt: attribution_controls(p, ckpt),
            control_outputs=[p.attr_layer, p.attr_head, p.attr_btn, p.attr_src, p.attr_tgt],
        ),
        Face(
            "attr_vs",
            [p.attr_vs_plot, p.attr_vs_msg],
            clear=lambda s, v: {p.attr_vs_plot: None, p.attr_vs_msg: STALE},
        ),
        Face(
            "attr_alt",
            [p.attr_alt],
            clear=lambda s, v: {p.attr_alt: gr.Dropdown(choices=[], value=None)},
            rerun=lambda s, v: {p.attr_alt: alt_choices(s)},  # the shown step's candidates
        ),
        Face(
            "ablate",
            [p.ablate_plot, p.ablate_msg, p.rank_table],
            clear=lambda s, v: {
                p.ablate_plot: None,
                p.ablate_msg: STALE,
                p.rank_table: gr.Dataframe(value=None, visible=False),
            },
            controls=lambda s, ckpt: {
                p.ablate_sites: gr.CheckboxGroup(
                    choices=[x for k in KINDS for x in head_sites(s, k)], value=[]
                )
            },
            control_outputs=[p.ablate_sites],
        ),
    ]


def mask_controls(p, ckpt) -> dict:
    """The mask lab's menus for ``ckpt``: its decoder layers, heads, kinds, local layers."""
    cfg = ckpt.config
    dec = [f"L{i}" for i in range(cfg.n_decoder_layers)]
    local = [f"L{i}" for i in range(cfg.n_decoder_layers) if cfg.layer_window(i)]
    heads = [h for h in head_choices(ckpt) if h != "all heads"]
    one = is_decoder_only(ckpt)
    return {  # no mask lab for encoder-only yet, nor for a speech model
        p.mask_body: gr.Column(visible=not is_encoder_only(ckpt) and not ckpt.is_audio),
        p.mask_layer: gr.Dropdown(choices=["last", *dec], value="last"),
        p.window_off: gr.CheckboxGroup(choices=local, value=[], visible=bool(local)),
        p.mask_kind: gr.Radio(  # the kinds this model has
            choices=["auto", *(k for k in KINDS if layer_count(ckpt, k))], value="auto"
        ),
        p.mask_intro: MASK_INTRO["decoder-only" if one else "encoder-decoder"],
        p.mask_head: gr.Dropdown(choices=heads, value="mean"),
    }


def attribution_controls(p, ckpt) -> dict:
    """The Attribution tab for ``ckpt``: an encoder-only model's button and figures explain the
    filler at its first mask token over the sentence (its encoder's layers), not the newest
    decoded token."""
    reads = is_encoder_only(ckpt)
    one = is_decoder_only(ckpt)
    cfg = ckpt.config
    layers = [f"L{i}" for i in range(cfg.n_encoder_layers if reads else cfg.n_decoder_layers)]
    rows = ("self-attention of the mask token" if reads else
            "self-attention on the prompt" if one else "cross-attention")  # fmt: skip
    words = ATTR_LABELS["read" if reads else "decode"]
    heads = [h for h in head_choices(ckpt) if h != "all heads"]
    return {
        p.attr_layer: gr.Dropdown(
            choices=layers, value=(layers or [None])[-1], label=f"layer of the {rows} compared"
        ),
        p.attr_head: gr.Dropdown(choices=heads, value="mean"),
        p.attr_btn: gr.Button(words[0]),
        p.attr_src: gr.Plot(label=words[1]),
        p.attr_tgt: gr.Plot(label=words[2]),
    }


def wire(p) -> None:
    """The labs' events (each computes its panel when asked, never on a Step)."""
    lab_in = [p.causal, p.padding, p.blocked, p.mask_kind, p.mask_layer, p.mask_head, p.window_off]
    mask_out = [p.mask_plot, p.mask_probs, p.mask_msg, p.blocked, p.stamps]

    def mask(s, stamps, *args):
        *args, theme = args
        out = mask_panels(p, s, *args, theme=theme)
        return (*out.values(), {**stamps, "mask": stamp(s)["mask"]})

    gr.on(
        [p.causal.input, p.padding.input, p.blocked.input, p.mask_kind.input,
         p.mask_layer.input, p.mask_head.input, p.window_off.input, p.mask_tab.select],
        mask, [p.state, p.stamps, *lab_in, p.theme], mask_out, js=THEME_JS, **INTERNAL,
    )  # fmt: skip

    def lab(fn, key: str, n: int):
        def run(s, stamps, *args):
            *args, theme = args
            view = fn(s, *args)
            figs = dark((view.figures + [None] * n)[:n], theme)
            return (*figs, view.message, {**stamps, key: stamp(s)[key]})

        return run

    p.ablate_btn.click(
        lab(labs.ablation, "ablate", 1), [p.state, p.stamps, p.ablate_sites, p.theme],
        [p.ablate_plot, p.ablate_msg, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    p.rank_btn.click(
        _rank, [p.state, p.stamps, p.theme],
        [p.rank_table, p.ablate_plot, p.ablate_msg, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    p.attr_btn.click(
        lab(labs.attribution, "attr", 2), [p.state, p.stamps, p.attr_layer, p.theme],
        [p.attr_src, p.attr_tgt, p.attr_msg, p.stamps], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    p.attr_vs_btn.click(
        _contrast, [p.state, p.stamps, p.attr_alt, p.attr_layer, p.attr_head, p.theme],
        [p.attr_vs_plot, p.attr_vs_msg, p.stamps, p.attr_alt], js=THEME_JS, api_name="contrast",
        **MODEL_EVENTS,
    )  # fmt: skip
    p.attr_tab.select(_alt_menu, [p.state, p.stamps], [p.attr_alt, p.stamps], **HIDDEN, **FAST)


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
