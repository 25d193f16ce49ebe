"""The page's top and the Step-through tab: model, input (text or a speech clip), the decoding
buttons, the beam panel, the heatmaps (``assets/viz.js`` on ``<canvas>``), the what-if box and
the reference box, and their events.

The named API endpoints ``start``, ``step``, ``run``, ``back``, ``reset`` drive step-through
decoding from ``gradio_client`` (``Client(url).predict("helloworld", api_name="/step")``);
``beam``, ``beam_node`` and ``beam_continue`` drive the beam panel, ``force`` and ``whatif``
the in-page clicks. A decoding event sends the page only the attention rows it does not hold
yet; Back, scrub and layer/head changes redraw from what the page holds.
"""

from __future__ import annotations

import dataclasses
import time

import gradio as gr

from . import lenses, session, store, ui_speech
from .inputs import note
from .pagetext import (
    BEAM_NODE_JS,
    ENC_JS,
    FORCE_JS,
    INTRO,
    STALE,
    THEME_JS,
    UPLOAD_LABEL,
    VIEW_JS,
    VIZ_ON_LOAD,
    VIZ_TEMPLATE,
    WHATIF_JS,
    WHATIF_ON_LOAD,
    upload_help,
)
from .panels import Face, labs, reference
from .panels import whatif as whatif_view
from .state import SessionState, stale_panels
from .state import panel_stamps as stamp
from .ui_common import (
    FAST,
    HIDDEN,
    INTERNAL,
    MODEL_EVENTS,
    STALE_OK,
    dark,
    decoder_menus,
    kind_note,
    shown_plot,
)

JS_FILE = store.ASSETS_DIR / "viz.js"
SPEECH_JS_FILE = store.ASSETS_DIR / "speech.js"  # a speech model's time axis, words, audio


def step_tab(p, state: SessionState) -> None:
    """The Step-through tab: the heatmaps, the what-if box, the reference box."""
    with gr.Tab("Step through", id="step", elem_id="tab-step") as p.step_tab:
        p.viz = gr.HTML(
            value=None,
            html_template=VIZ_TEMPLATE,
            js_on_load=VIZ_ON_LOAD,
            head=f"<script>{JS_FILE.read_text()}</script>"
            f"<script>{SPEECH_JS_FILE.read_text()}</script>",
            elem_id="viz",
            padding=False,
        )
        whatif_box(p, state)
        kind_note(p, "whatif")  # the what-if box hidden: no cross-attention to redirect
        reference_box(p)


def wire(p) -> None:
    """The top's and the Step-through tab's events (the what-if box: :func:`wire_whatif`)."""
    wire_decoding(p)
    wire_reference(p)


def top(p) -> None:
    """Above the tabs: the model, the input, the decoding buttons, the beam panel, the output."""
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=2):
            p.model_pick = gr.Dropdown(choices=store.menu(), label="Model", elem_id="model-picker")
            p.model_info = gr.Markdown(elem_id="model-info")
        with gr.Column(scale=1):
            p.upload = gr.File(label=UPLOAD_LABEL, file_count="multiple", elem_id="upload")
            gr.Markdown(upload_help(p.upload_cap), elem_classes="explain", elem_id="upload-help")
    with gr.Row():
        p.input_text = gr.Textbox(
            label="Input", placeholder="type an input", elem_id="input-text", scale=3
        )
        p.examples = gr.Dropdown(label="Examples", choices=[], elem_id="examples", scale=1)
    ui_speech.speech_input(p)
    p.input_note = gr.Markdown(elem_id="input-note", elem_classes="explain")
    with gr.Row():
        p.step_btn = gr.Button("Step ▶", variant="primary", elem_id="step-btn")
        p.run_btn = gr.Button("Run ▶▶", elem_id="run-btn")
        p.back_btn = gr.Button("◀ Back", elem_id="back-btn")
        p.reset_btn = gr.Button("Reset", elem_id="reset-btn")
        p.beam_btn = gr.Button("Decode with beam search", elem_id="beam-btn")
        p.beam_size = gr.Number(
            4, label="beams", elem_id="beam-size", scale=0, min_width=90
        )  # checked by the session: a bad value is one line, not a toast
    kind_note(p, "decode")  # an encoder-only model: Read only, nothing to step through
    p.resync_btn = gr.Button("resync", elem_id="resync-btn", elem_classes="av-hidden")
    p.follow_btn = gr.Button("follow", elem_id="follow-btn", elem_classes="av-hidden")
    # a candidate clicked in the next-token panel: the page sets "step:id" and presses this
    p.force_btn = gr.Button("force", elem_id="force-btn", elem_classes="av-hidden")
    p.force_value = gr.Textbox("", elem_id="force-value", elem_classes="av-hidden")
    p.lens_btns = {  # the page asks for another lens's matrices through these
        name: gr.Button(name, elem_id=f"lens-{name}-btn", elem_classes="av-hidden")
        for name in ("norms", "rollout")
    }
    # a long input's page asks for the encoder layer and head it shows through these
    p.enc_btn = gr.Button("encoder", elem_id="enc-btn", elem_classes="av-hidden")
    p.enc_value = gr.Textbox("", elem_id="enc-value", elem_classes="av-hidden")
    # the step view's layer/head menus: the page tells the session what it shows
    p.view_btn = gr.Button("view", elem_id="view-btn", elem_classes="av-hidden")
    p.view_value = gr.Textbox("", elem_id="view-value", elem_classes="av-hidden")
    p.theme = gr.Textbox("light", elem_id="theme", elem_classes="av-hidden")
    p.status = gr.HTML(elem_id="status")
    beam_box(p)
    p.output_text = gr.Textbox(label="Output so far", interactive=False, elem_id="output-text")
    p.slider = gr.Slider(0, 1, value=0, step=1, label="Step (scrub)", elem_id="step-slider")


def whatif_box(p, state: SessionState) -> None:
    layers, heads = decoder_menus(state)
    p.wi_open = gr.State(False)  # the what-if panel is open: it follows each step
    with gr.Accordion(
        "What if this head had looked elsewhere", open=False, elem_id="whatif-box"
    ) as p.wi_box:
        gr.Markdown(whatif_view.INTRO, elem_classes="explain")
        with gr.Row():
            p.wi_layer = gr.Dropdown(
                layers, value=(layers or [None])[-1], label="decoder layer",
                elem_id="whatif-layer", allow_custom_value=STALE_OK,
            )  # fmt: skip
            p.wi_heads = gr.CheckboxGroup(
                heads,
                label="heads (none ticked: every head of the layer)",
                elem_id="whatif-heads",
            )
        p.wi_strip = gr.HTML(
            elem_id="whatif-strip", css_template=whatif_view.CSS, js_on_load=WHATIF_ON_LOAD
        )
        p.wi_msg = gr.HTML(elem_id="whatif-message")
        p.wi_result = gr.HTML(elem_id="whatif-result", css_template=whatif_view.CSS)
        p.wi_btn = gr.Button("what-if", elem_id="whatif-btn", elem_classes="av-hidden")
        p.wi_value = gr.Textbox("", elem_id="whatif-value", elem_classes="av-hidden")


def beam_box(p) -> None:
    """The beam panel: summary and tree, the clicked node's attention, the files."""
    p.beam_state = gr.State(None)  # the BeamPanel drawn (its tree), for node clicks
    p.beam_out = gr.HTML(elem_id="beam-result")
    # a node clicked in the tree: the page sets its id and presses this
    p.beam_node_btn = gr.Button("node", elem_id="beam-node-btn", elem_classes="av-hidden")
    p.beam_node_value = gr.Textbox("", elem_id="beam-node-value", elem_classes="av-hidden")
    with gr.Column(visible=False, elem_id="beam-node") as p.beam_node_box:
        p.beam_node_msg = gr.HTML(elem_id="beam-node-message")
        p.beam_attn = gr.Plot(label="the hypothesis's cross-attention", elem_id="beam-attn")
        with gr.Row():
            p.beam_continue = gr.Button(
                "Continue greedily from here", variant="primary", elem_id="beam-continue",
                scale=0, min_width=280,
            )  # fmt: skip
    p.beam_files = gr.File(
        label="the beam tree: SVG and JSON", file_count="multiple", visible=False,
        elem_id="beam-files",
    )  # fmt: skip


def reference_box(p) -> None:
    kind_note(p, "reference")  # an encoder-only model: no output to score a reference against
    with gr.Column(elem_id="reference-box") as p.kind_bodies["reference"]:
        with gr.Row():
            p.reference = gr.Textbox(
                label="Reference (the output you expect; pre-filled with the task's answer)",
                elem_id="reference-text", scale=4,
            )  # fmt: skip
            p.ref_btn = gr.Button("Score the reference", elem_id="reference-btn", scale=1)
        p.ref_msg = gr.HTML(elem_id="reference-message")
        p.ref_strip = gr.HTML(elem_id="reference-strip")
        p.ref_plot = gr.Plot(
            label="reference cross-attention", elem_id="reference-attn", visible=False
        )  # shown once a reference is scored


def whatif_strip(p, state: SessionState, layer, heads, menus: bool = False) -> dict:
    """The what-if panel drawn afresh for ``state``: the strip, no result yet.

    ``menus``: the layer and heads come from menus that may still list another model's
    (a model switch renews them just after): choices this model lacks are dropped.
    """
    if menus:
        layers, names = decoder_menus(state)
        layer = layer if layer in layers else None
        heads = [h for h in heads or () if h in names]
    v = whatif_view.strip(state, layer, heads)
    return {p.wi_strip: v.strip, p.wi_msg: v.message, p.wi_result: ""}


def faces(p) -> list[Face]:
    """The Step-through tab's panels that follow the state: the what-if panel (rerun while
    open and shown), the Reference box (rescored when only the output shown moved) and the
    beam panel."""
    return [
        Face(
            "whatif",
            [p.wi_strip, p.wi_msg, p.wi_result],
            clear=lambda s, v: {p.wi_strip: "", p.wi_result: "", p.wi_msg: STALE},
            rerun=lambda s, v: _whatif_followed(p, s, v[p.wi_layer], v[p.wi_heads]),
            inputs=[p.wi_layer, p.wi_heads],
            opened=p.wi_open,
            controls=lambda s, ckpt: _whatif_menus(p, ckpt),
            control_outputs=[p.wi_layer, p.wi_heads],
        ),
        Face(
            "reference",
            [p.ref_msg, p.ref_strip, p.ref_plot],
            clear=lambda s, v: {p.ref_msg: STALE, p.ref_strip: "", p.ref_plot: shown_plot(None)},
            rerun=lambda s, v: _reference_followed(p, s, v[p.reference], v[p.theme]),
            inputs=[p.reference, p.theme],
            controls=lambda s, ckpt: {
                p.ref_plot: gr.Plot(label=f"reference {_attended(ckpt)}"),
                p.reference: reference.default_reference(s),  # this model's answer
            },
            control_outputs=[p.ref_plot, p.reference],
        ),
        Face(
            "beam",
            [p.beam_out, p.beam_state, p.beam_node_box, p.beam_files],
            clear=lambda s, v: {
                p.beam_out: "",
                p.beam_state: None,
                p.beam_node_box: gr.Column(visible=False),
                p.beam_files: gr.File(value=None, visible=False),
            },
            controls=lambda s, ckpt: {
                p.beam_attn: gr.Plot(label=f"the hypothesis's {_attended(ckpt)}")
            },
            control_outputs=[p.beam_attn],
        ),
    ]


def _attended(ckpt) -> str:
    """What the step view's rows attend over: a decoder-only model's own prefix."""
    return "causal self-attention" if note(ckpt, "step") else "cross-attention"


def _whatif_menus(p, ckpt) -> dict:
    dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
    return {
        p.wi_layer: gr.Dropdown(choices=dec, value=dec[-1] if dec else None),
        p.wi_heads: gr.CheckboxGroup(
            choices=[f"H{h}" for h in range(ckpt.config.n_heads)], value=[]
        ),
    }


def _whatif_followed(p, state: SessionState, layer, heads) -> dict:
    out = whatif_strip(p, state, layer, heads, menus=True)
    if not out[p.wi_msg]:  # no reason to refuse: say why the result went
        out[p.wi_msg] = f"The step shown is now {state.step}: click a source token."
    return out


def _reference_followed(p, state: SessionState, ref: str, theme: str) -> dict:
    """The reference rescored: the mark of where it leaves the output shown follows."""
    v = reference.score(state, ref)
    return {
        p.ref_msg: v.message,
        p.ref_strip: v.html,
        p.ref_plot: shown_plot(dark([v.figure], theme)[0]),
    }


def wire_decoding(p) -> None:
    """Step, Run, Back, Reset, scrub, a forced token, the model menu and uploads: each one
    session action, its view sent as the decoding outputs."""
    outs = p.decode_outputs()
    # the page presses the hidden follow button when a payload says other panels are stale
    p.follow_btn.click(p.follow, p.follow_inputs(), p.lab_outputs(), js=THEME_JS, **INTERNAL)
    with_text = (
        (p.step_btn.click, session.step, "step"),
        (p.run_btn.click, session.run, "run"),
        (p.input_text.submit, session.start, "start"),
    )
    for trigger, fn, name in with_text:  # a speech model's input: the clip on screen alone
        trigger(
            lambda t, s, stamps, clip=None, fn=fn: answer(fn(s, t, clip=clip or ""), stamps),
            [p.input_text, p.state, p.stamps, p.audio_in], outs, api_name=name, **FAST,
        )  # fmt: skip
    for trigger, fn, name in ((p.back_btn.click, session.back, "back"),
                              (p.reset_btn.click, session.reset, "reset")):  # fmt: skip
        trigger(
            lambda s, stamps, fn=fn: answer(fn(s), stamps), [p.state, p.stamps], outs,
            api_name=name, **FAST,
        )  # fmt: skip
    p.slider.input(
        lambda s, v, stamps: answer(session.goto(s, v), stamps), [p.state, p.slider, p.stamps],
        outs, trigger_mode="always_last", **HIDDEN, **FAST,
    )  # fmt: skip
    p.force_btn.click(
        lambda s, stamps, v: answer(session.force(s, *_force_args(v)), stamps),
        [p.state, p.stamps, p.force_value], outs, js=FORCE_JS, api_name="force", **FAST,
    )  # fmt: skip
    p.resync_btn.click(
        lambda s, stamps: answer(
            session.render(dataclasses.replace(s, page_rows=-1)), stamps, resent=True
        ),
        [p.state, p.stamps], outs, **HIDDEN, **FAST,
    )  # fmt: skip
    p.examples.input(lambda e: e or gr.skip(), [p.examples], [p.input_text], **HIDDEN)
    ui_speech.wire(p, answer)  # a speech model: its clip is the input
    p.input_text.change(  # the input edited but not run: say the panels show another
        labs.edited_note, [p.state, p.input_text], [p.input_note], **HIDDEN, **FAST
    )
    gr.on([p.step_btn.click, p.run_btn.click, p.input_text.submit, p.model_pick.input],
          lambda: "", None, [p.input_note], **HIDDEN, **FAST)  # fmt: skip
    for name, btn in p.lens_btns.items():  # only when the page shows a lens other than weights
        btn.click(lambda s, name=name: lenses.payload(s, name), [p.state], [p.viz], **INTERNAL)
    p.enc_btn.click(
        session.encoder_view, [p.state, p.enc_value], [p.viz], js=ENC_JS, **HIDDEN, **FAST
    )  # fmt: skip
    p.view_btn.click(
        session.remember_view, [p.state, p.view_value], [p.state], js=VIEW_JS, **HIDDEN, **FAST
    )  # fmt: skip
    wire_beam(p)
    p.model_pick.input(
        lambda s, m, t, stamps: answer(session.choose_model(s, m, t), stamps),
        [p.state, p.model_pick, p.input_text, p.stamps], outs, **INTERNAL,
    ).then(p.controls, [p.state], p.control_outputs(), **HIDDEN)  # fmt: skip
    p.upload.upload(
        lambda s, f, t, stamps: answer(session.upload_model(s, f or [], t), stamps),
        [p.state, p.upload, p.input_text, p.stamps], outs, api_name="upload", **INTERNAL,
    ).then(p.controls, [p.state], p.control_outputs(), **HIDDEN)  # fmt: skip


def _force_args(value: str) -> tuple[str, str | None]:
    """The page's ``"step:id"`` (or a bare id: the shown step) -> ``(token, at)``."""
    at, _, token = str(value or "").rpartition(":")
    return token, at or None


def wire_beam(p) -> None:
    """The beam panel: decode, click a node (the page's handler presses the hidden button),
    continue the step view from the node's hypothesis."""
    p.beam_btn.click(
        _beam, [p.state, p.input_text, p.beam_size, p.stamps],
        [p.beam_out, p.stamps, p.beam_state, p.beam_node_box, p.beam_files],
        api_name="beam", **INTERNAL,
    )  # fmt: skip
    p.beam_node_btn.click(
        _beam_node, [p.state, p.beam_state, p.beam_node_value, p.theme],
        [p.beam_out, p.beam_state, p.beam_node_msg, p.beam_attn, p.beam_node_box],
        js=BEAM_NODE_JS, api_name="beam_node", **INTERNAL,
    )  # fmt: skip
    p.beam_continue.click(
        lambda s, stamps, panel: _beam_continue(p, s, stamps, panel),
        [p.state, p.stamps, p.beam_state],
        [*p.decode_outputs(), p.stamps, p.beam_state, p.beam_node_msg, p.tabs, p.active],
        api_name="beam_continue", **INTERNAL,
    )  # fmt: skip


def _beam(state: SessionState, text: str, size, stamps: dict) -> tuple:
    v = session.beam_view(state, size, text)
    shown = v.panel is not None
    files = gr.File(value=v.files or None, visible=shown)
    return (v.html, {**stamps, "beam": stamp(state)["beam"]}, v.panel,
            gr.Column(visible=False), files)  # fmt: skip


def answer(view: session.DecodeView, stamps: dict | None = None, resent: bool = False) -> tuple:
    """A session result as the decoding outputs (state, output text, status, slider, the
    page's JSON); ``stamps`` (what the other panels show) decides whether the page should ask
    for them to follow (``"follow"`` in the JSON sent); ``resent``: the page asked for
    everything again, and a reply equal to the last one it was sent would not reach it (an
    unchanged value fires no change), so each resend is marked as new."""
    top = max(len(view.state.tokens), 1)
    follow = None if stamps is None else bool(stale_panels(stamps, view.state))
    return (
        view.state,
        view.output,
        view.message,
        gr.Slider(maximum=top, value=view.state.step),
        view.payload.to_page(follow, time.monotonic_ns() if resent else None),
    )


def _beam_node(state: SessionState, panel, node: str, theme: str = "light") -> tuple:
    v = session.beam_node(state, panel, node)
    fig = gr.skip() if v.figure is None else dark([v.figure], theme)[0]  # refused: kept
    return v.html or gr.skip(), v.panel, v.message, fig, gr.Column(visible=True)


def _beam_continue(p, state: SessionState, stamps: dict, panel) -> tuple:
    view, panel = session.continue_beam(state, panel, panel.selected if panel else None)
    if panel is None:  # refused: the step view stays, the panel says why
        return (*(gr.skip() for _ in p.decode_outputs()), gr.skip(), gr.skip(), view.message,
                gr.skip(), gr.skip())  # fmt: skip
    stamps = {**stamps, "beam": stamp(view.state)["beam"]}
    return (*answer(view, stamps), stamps, panel, gr.skip(), gr.Tabs(selected="step"), "step")


def wire_reference(p) -> None:
    """The Reference box: pre-filled from the input, scored on the button or Enter."""
    p.input_text.change(  # a new input: its task answer, and nothing scored for the old one
        lambda s, t, st: (reference.default_reference(s, t), "", "", shown_plot(None),
                          {k: v for k, v in st.items() if k != "reference"}),
        [p.state, p.input_text, p.stamps],
        [p.reference, p.ref_msg, p.ref_strip, p.ref_plot, p.stamps], **HIDDEN,
    )  # fmt: skip
    for trigger in (p.ref_btn.click, p.reference.submit):
        trigger(_reference, [p.state, p.reference, p.stamps, p.theme],
                [p.ref_msg, p.ref_strip, p.ref_plot, p.stamps], js=THEME_JS, **INTERNAL)  # fmt: skip


def _reference(state: SessionState, ref: str, stamps: dict, theme: str = "light") -> tuple:
    """Score the reference; stamped (when it scored) so that it follows the step view."""
    v = reference.score(state, ref)
    stamps = {k: x for k, x in stamps.items() if k != "reference"}
    if v.scored is not None:
        stamps["reference"] = stamp(state)["reference"]
    return v.message, v.html, shown_plot(dark([v.figure], theme)[0]), stamps


def wire_whatif(p) -> None:
    """The step view's what-if panel: drawn when it opens, when the layer or heads change and
    (while open) after each step; a clicked source token runs the what-if."""
    strip_out = [p.wi_strip, p.wi_msg, p.wi_result, p.stamps]

    def draw(state, stamps, layer, heads):
        out = whatif_strip(p, state, layer, heads)
        return (*out.values(), {**stamps, "whatif": stamp(state)["whatif"]})

    p.wi_box.expand(lambda: True, None, [p.wi_open], **HIDDEN, **FAST).then(
        draw, [p.state, p.stamps, p.wi_layer, p.wi_heads], strip_out, **HIDDEN, **FAST
    )
    p.wi_box.collapse(lambda: False, None, [p.wi_open], **HIDDEN, **FAST)
    gr.on([p.wi_layer.input, p.wi_heads.input], draw,
          [p.state, p.stamps, p.wi_layer, p.wi_heads], strip_out, **HIDDEN, **FAST)  # fmt: skip
    p.step_tab.select(  # a hidden tab's strip was cleared: draw it again when it shows
        lambda s, stamps, o, ly, hd: draw(s, stamps, ly, hd) if o else [gr.skip()] * 4,
        [p.state, p.stamps, p.wi_open, p.wi_layer, p.wi_heads], strip_out, **HIDDEN, **FAST,
    )  # fmt: skip

    def run(state, stamps, layer, heads, position):
        v = whatif_view.run(state, layer, heads, position)
        return v.strip, v.message, v.html, {**stamps, "whatif": stamp(state)["whatif"]}

    p.wi_btn.click(
        run, [p.state, p.stamps, p.wi_layer, p.wi_heads, p.wi_value], strip_out, js=WHATIF_JS,
        api_name="whatif", **MODEL_EVENTS,
    )  # fmt: skip
