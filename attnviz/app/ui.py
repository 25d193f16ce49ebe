"""The Gradio page: layout and wiring only. Every callback is one call into the session layer.

``attnviz app`` serves it (:func:`attnviz.app.server.main`). The page is built by
:func:`build_app`; the named API
endpoints ``start``, ``step``, ``run``, ``back``, ``reset`` drive step-through decoding from
``gradio_client`` (``Client(url).predict("helloworld", api_name="/step")``); the per-user
state lives server-side in ``gr.State``; ``beam``, ``beam_node`` and ``beam_continue``
drive the beam panel. This is the only module that imports gradio, so all
of the page's layout and wiring is here (hence its length).

The heatmaps are drawn in the page (``assets/viz.js`` on ``<canvas>``): a decoding event
sends the page only the attention rows it does not hold yet; Back, scrub and layer/head
changes redraw from what the page holds.
"""

from __future__ import annotations

import dataclasses
import time

import gradio as gr

from ..analysis import LENSES
from ..core.errors import AttnvizError
from ..core.model import KINDS
from ..render import plots
from . import (
    alignment,
    compare_lab,
    labs,
    lensview,
    panels,
    reference,
    session,
    speech,
    store,
    whatif_view,
)
from .decoders import DECODERS
from .pagetext import (  # the page's texts and in-page scripts
    ALIGN_INTRO,
    BEAM_NODE_JS,
    COMPARE_ON_LOAD,
    ENC_JS,
    FORCE_JS,
    INTRO,
    PICK_JS,
    STALE,
    THEME_JS,
    UNIT_JS,
    UPLOAD_HELP,
    UPLOAD_LABEL,
    VIZ_ON_LOAD,
    VIZ_TEMPLATE,
    WHATIF_JS,
    WHATIF_ON_LOAD,
)
from .state import SessionState, checkpoint_of, describe, head_choices
from .views import follow as follow_plan
from .views import input_placeholder, stale_panels
from .views import panel_stamps as stamp

JS_FILE = store.ASSETS_DIR / "viz.js"
SPEECH_JS_FILE = store.ASSETS_DIR / "speech.js"  # a speech model's time axis, words, audio
SESSION_TTL_S = 3600  # a session's state is freed this long after its last decoding event
CACHE_CLEANUP = (3600, 3600)  # every hour, delete gradio's temp files older than an hour
# Decoding events skip gradio's queue (a queued event costs ~50 ms more round trip); each
# session's decoder has its own lock, and a Step costs milliseconds of model time.
FAST = dict(queue=False, show_progress="hidden")
MODEL_EVENTS = dict(concurrency_id="model", concurrency_limit=2)
HIDDEN = dict(api_visibility="undocumented")
INTERNAL = dict(HIDDEN, **MODEL_EVENTS)


class Page:
    """Every component of the page, declared here, and how session results map onto them."""

    def __init__(self, state: SessionState, ttl_s: float = SESSION_TTL_S):
        self.state = gr.State(state, time_to_live=ttl_s, delete_callback=forget_session)
        self.stamps = gr.State({})  # panel -> the state it was computed for
        self.active = gr.State("step")  # the selected tab
        self._top()
        with gr.Tabs(elem_id="tabs") as self.tabs:
            with gr.Tab("Step through", id="step", elem_id="tab-step") as self.step_tab:
                self.viz = gr.HTML(
                    value=None,
                    html_template=VIZ_TEMPLATE,
                    js_on_load=VIZ_ON_LOAD,
                    head=f"<script>{JS_FILE.read_text()}</script>"
                    f"<script>{SPEECH_JS_FILE.read_text()}</script>",
                    elem_id="viz",
                    padding=False,
                )
                self._whatif_box(state)
                self._reference_box()
            self._mask_tab()
            self._other_tabs(state)
            self._align_tab()
            self._compare_tab()

    # -- layout --------------------------------------------------------------------------------
    def _top(self) -> None:
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=2):
                self.model_pick = gr.Dropdown(
                    choices=store.menu(), label="Model", elem_id="model-picker"
                )
                self.model_info = gr.Markdown(elem_id="model-info")
            with gr.Column(scale=1):
                self.upload = gr.File(label=UPLOAD_LABEL, file_count="multiple", elem_id="upload")
                gr.Markdown(UPLOAD_HELP, elem_classes="explain")
        with gr.Row():
            self.input_text = gr.Textbox(
                label="Input", placeholder="type an input", elem_id="input-text", scale=3
            )
            self.examples = gr.Dropdown(label="Examples", choices=[], elem_id="examples", scale=1)
        self._speech_input()
        self.input_note = gr.Markdown(elem_id="input-note", elem_classes="explain")
        with gr.Row():
            self.step_btn = gr.Button("Step ▶", variant="primary", elem_id="step-btn")
            self.run_btn = gr.Button("Run ▶▶", elem_id="run-btn")
            self.back_btn = gr.Button("◀ Back", elem_id="back-btn")
            self.reset_btn = gr.Button("Reset", elem_id="reset-btn")
            self.beam_btn = gr.Button("Decode with beam search", elem_id="beam-btn")
            self.beam_size = gr.Number(
                4, label="beams", elem_id="beam-size", scale=0, min_width=90
            )  # checked by the session: a bad value is one line, not a toast
        self.resync_btn = gr.Button("resync", elem_id="resync-btn", elem_classes="av-hidden")
        self.follow_btn = gr.Button("follow", elem_id="follow-btn", elem_classes="av-hidden")
        # a candidate clicked in the next-token panel: the page sets "step:id" and presses this
        self.force_btn = gr.Button("force", elem_id="force-btn", elem_classes="av-hidden")
        self.force_value = gr.Textbox("", elem_id="force-value", elem_classes="av-hidden")
        self.lens_btns = {  # the page asks for another lens's matrices through these
            name: gr.Button(name, elem_id=f"lens-{name}-btn", elem_classes="av-hidden")
            for name in ("norms", "rollout")
        }
        # a long input's page asks for the encoder layer and head it shows through these
        self.enc_btn = gr.Button("encoder", elem_id="enc-btn", elem_classes="av-hidden")
        self.enc_value = gr.Textbox("", elem_id="enc-value", elem_classes="av-hidden")
        self.theme = gr.Textbox("light", elem_id="theme", elem_classes="av-hidden")
        self.status = gr.HTML(elem_id="status")
        self._beam_box()
        self.output_text = gr.Textbox(
            label="Output so far", interactive=False, elem_id="output-text"
        )
        self.slider = gr.Slider(0, 1, value=0, step=1, label="Step (scrub)", elem_id="step-slider")

    def _speech_input(self) -> None:
        """A speech model's input: a clip (upload or microphone) and example clips, shown
        instead of the text box; the clip's path goes into the (hidden) text box, so Step,
        Run and the API take it as the input."""
        with gr.Row(visible=False, elem_id="speech-input") as self.speech_row:
            self.audio_in = gr.Audio(
                sources=["upload", "microphone"], type="filepath", label="Input clip (≤ 30 s)",
                elem_id="input-audio", scale=3,
            )  # fmt: skip
            self.speech_examples = gr.Dropdown(
                label="Example clips (espeak-ng)", choices=speech_example_choices(),
                elem_id="speech-examples", scale=1,
            )  # fmt: skip

    def _whatif_box(self, state: SessionState) -> None:
        layers, heads = decoder_menus(state)
        self.wi_open = gr.State(False)  # the what-if panel is open: it follows each step
        with gr.Accordion(
            "What if this head had looked elsewhere", open=False, elem_id="whatif-box"
        ) as self.wi_box:
            gr.Markdown(whatif_view.INTRO, elem_classes="explain")
            with gr.Row():
                self.wi_layer = gr.Dropdown(
                    layers, value=(layers or [None])[-1], label="decoder layer",
                    elem_id="whatif-layer",
                )  # fmt: skip
                self.wi_heads = gr.CheckboxGroup(
                    heads,
                    label="heads (none ticked: every head of the layer)",
                    elem_id="whatif-heads",
                )
            self.wi_strip = gr.HTML(
                elem_id="whatif-strip", css_template=whatif_view.CSS, js_on_load=WHATIF_ON_LOAD
            )
            self.wi_msg = gr.HTML(elem_id="whatif-message")
            self.wi_result = gr.HTML(elem_id="whatif-result", css_template=whatif_view.CSS)
            self.wi_btn = gr.Button("what-if", elem_id="whatif-btn", elem_classes="av-hidden")
            self.wi_value = gr.Textbox("", elem_id="whatif-value", elem_classes="av-hidden")

    def _beam_box(self) -> None:
        """The beam panel: summary and tree, the clicked node's attention, the files."""
        self.beam_state = gr.State(None)  # the BeamPanel drawn (its tree), for node clicks
        self.beam_out = gr.HTML(elem_id="beam-result")
        # a node clicked in the tree: the page sets its id and presses this
        self.beam_node_btn = gr.Button("node", elem_id="beam-node-btn", elem_classes="av-hidden")
        self.beam_node_value = gr.Textbox("", elem_id="beam-node-value", elem_classes="av-hidden")
        with gr.Column(visible=False, elem_id="beam-node") as self.beam_node_box:
            self.beam_node_msg = gr.HTML(elem_id="beam-node-message")
            self.beam_attn = gr.Plot(label="the hypothesis's cross-attention", elem_id="beam-attn")
            with gr.Row():
                self.beam_continue = gr.Button(
                    "Continue greedily from here", variant="primary", elem_id="beam-continue",
                    scale=0, min_width=280,
                )  # fmt: skip
        self.beam_files = gr.File(
            label="the beam tree: SVG and JSON", file_count="multiple", visible=False,
            elem_id="beam-files",
        )  # fmt: skip

    def _reference_box(self) -> None:
        with gr.Group(elem_id="reference-box"):
            with gr.Row():
                self.reference = gr.Textbox(
                    label="Reference (the output you expect; pre-filled with the task's answer)",
                    elem_id="reference-text", scale=4,
                )  # fmt: skip
                self.ref_btn = gr.Button("Score the reference", elem_id="reference-btn", scale=1)
            self.ref_msg = gr.HTML(elem_id="reference-message")
            self.ref_strip = gr.HTML(elem_id="reference-strip")
            self.ref_plot = gr.Plot(
                label="reference cross-attention", elem_id="reference-attn", visible=False
            )  # shown once a reference is scored

    def _mask_tab(self) -> None:
        with gr.Tab("Mask lab", elem_id="tab-mask") as self.mask_tab:
            gr.Markdown(
                "Switch a mask off or hide source tokens, and compare the attention and the "
                "output with the masks as trained. Your input runs in a batch with a companion "
                "input of another length, so there is padding to unmask.",
                elem_classes="explain",
            )
            with gr.Row():
                self.causal = gr.Checkbox(label="causal mask off", elem_id="causal-toggle")
                self.padding = gr.Checkbox(label="padding mask off", elem_id="padding-toggle")
                self.blocked = gr.CheckboxGroup(label="block source tokens", elem_id="block-tokens")
            with gr.Row():
                self.mask_kind = gr.Radio(["auto", *KINDS], value="auto", label="show")
                self.mask_layer = gr.Dropdown(label="layer")
                self.mask_head = gr.Dropdown(["mean"], value="mean", label="head")
            self.mask_msg = gr.Markdown(elem_id="mask-message")
            self.mask_plot = gr.Plot(label="before / after / difference", elem_id="heatmap-mask")
            self.mask_probs = gr.Plot(label="next token before vs after", elem_id="mask-next")

    def _other_tabs(self, state: SessionState) -> None:
        layers, heads = decoder_menus(state)
        with gr.Tab("Head ablation", elem_id="tab-ablation") as self.ablation_tab:
            self.ablate_sites = gr.CheckboxGroup(
                label="heads to switch off", elem_id="ablate-heads"
            )
            with gr.Row():
                self.ablate_btn = gr.Button("Rerun with these heads off", elem_id="ablate-btn")
                self.rank_btn = gr.Button("Rank heads by effect", elem_id="rank-btn")
            self.ablate_msg = gr.Markdown(elem_id="ablate-message")
            self.ablate_plot = gr.Plot(label="probability change", elem_id="ablation-plot")
            self.rank_table = gr.Dataframe(  # shown once heads are ranked (empty, no table)
                headers=["head", "changed outputs", "max |Δp|", "mean |Δp|"], interactive=False,
                elem_id="rank-table", visible=False,
            )  # fmt: skip
        with gr.Tab("Attribution", elem_id="tab-attribution") as self.attr_tab:
            with gr.Row():
                self.attr_layer = gr.Dropdown(
                    layers, value=(layers or [None])[-1], label="cross-attention layer to compare"
                )
                self.attr_btn = gr.Button("Attribute the newest token", elem_id="attr-btn")
            self.attr_msg = gr.Markdown(elem_id="attr-message")
            self.attr_src = gr.Plot(label="source", elem_id="attribution-src")
            self.attr_tgt = gr.Plot(label="previous tokens", elem_id="attribution-tgt")
            gr.Markdown("### Why this token and not that one")
            with gr.Row():
                self.attr_alt = gr.Dropdown(
                    label="…and not this candidate (default: the runner-up; for a forced "
                    "token, the model's own choice)", elem_id="attr-alt", allow_custom_value=True,
                    scale=3,
                )  # fmt: skip
                self.attr_head = gr.Dropdown(
                    ["mean", *heads], value="mean", label="head of the attention rows", scale=1
                )
                self.attr_vs_btn = gr.Button(
                    "Why this token and not that one", elem_id="attr-vs-btn", scale=1
                )
            self.attr_vs_msg = gr.Markdown(elem_id="attr-vs-message")
            self.attr_vs_plot = gr.Plot(
                label="contrastive attribution and next-step attention",
                elem_id="attribution-contrast",
            )
        with gr.Tab("Checkpoint health", elem_id="tab-health") as self.health_tab:
            self.health_extra = gr.Textbox(
                label="for a model without a task: the current input is checked, and these "
                "inputs too (one per line)", lines=2, elem_id="health-inputs",
            )  # fmt: skip
            self.health_btn = gr.Button("Run the health check", elem_id="health-btn")
            self.health_html = gr.HTML(elem_id="health-report")
            self.health_plot = gr.Plot(label="head roles", elem_id="health-heads")
        with gr.Tab("Training playback", elem_id="tab-playback") as self.play_tab:
            with gr.Row():
                self.play_slider = gr.Slider(0, 1, value=0, step=1, label="snapshot", scale=3)
                self.play_layer = gr.Dropdown(label="layer", scale=1)
                self.play_head = gr.Dropdown(["mean"], value="mean", label="head", scale=1)
                self.play_btn = gr.Button("Play ▶", elem_id="play-btn", scale=1)
            self.play_timer = gr.Timer(0.6, active=False)
            self.play_msg = gr.Markdown(elem_id="play-message")
            self.play_plot = gr.Plot(label="cross-attention on the probe", elem_id="playback-plot")
        with gr.Tab("Export", elem_id="tab-export") as self.export_tab:
            gr.Markdown(
                "Every heatmap has a PNG button; every lab figure a camera button. "
                "Files of the state shown (their attention follows the step view's "
                "**show: pieces | words** switch):"
            )
            with gr.Row():
                self.exp_html = gr.Button("HTML report", elem_id="export-html")
                self.exp_json = gr.Button("JSON trace", elem_id="export-json")
                self.exp_npz = gr.Button("NPZ trace", elem_id="export-npz")
            # the step view's pieces | words switch, read by UNIT_JS when a button is pressed
            self.exp_unit = gr.Textbox("pieces", elem_id="export-unit", elem_classes="av-hidden")
            self.exp_msg = gr.Markdown(elem_id="export-message")
            self.exp_file = gr.File(label="download", elem_id="export-file")

    def _align_tab(self) -> None:
        with gr.Tab("Alignment", elem_id="tab-align") as self.align_tab:
            gr.Markdown(ALIGN_INTRO, elem_classes="explain")
            with gr.Row():
                self.align_lens = gr.Radio(list(LENSES), value="weights", label="lens")
                self.align_setting = gr.Radio(["output", "input"], value="output", label="setting")
                self.align_layer = gr.Dropdown(["best"], value="best", label="layer")
                self.align_head = gr.Dropdown(["best"], value="best", label="head")
            with gr.Row():
                self.align_gold = gr.Textbox(
                    label="gold links of the current input (Pharaoh line, e.g. 0-2 1-1 2p0)",
                    elem_id="align-gold", scale=2,
                )  # fmt: skip
                self.align_sources = gr.File(label="grid: sources, one per line", scale=1)
                self.align_gold_file = gr.File(
                    label="gold links (Pharaoh): one line per source line, or one line for "
                    "the current input", scale=1,
                )  # fmt: skip
            with gr.Row():
                self.align_btn = gr.Button(
                    "Score every head", variant="primary", elem_id="align-btn"
                )
                self.align_dl = gr.Button("Download the head's links (Pharaoh)", elem_id="align-dl")
            self.align_msg = gr.Markdown(elem_id="align-message")
            self.align_grid = gr.HTML(elem_id="align-grid")
            with gr.Row():
                self.align_plot = gr.Plot(label="AER per head", elem_id="align-aer")
                self.align_overlay = gr.Plot(
                    label="links on the current input", elem_id="align-links"
                )
            self.align_file = gr.File(label="download", elem_id="align-file", height=90)
            gr.Markdown("### Faithfulness at this step")
            self.faith_btn = gr.Button(
                "Measure faithfulness of the newest token", elem_id="faith-btn"
            )
            self.faith_msg = gr.Markdown(elem_id="faith-message")
            self.faith_plot = gr.Plot(label="comprehensiveness / sufficiency", elem_id="faith-plot")

    def _compare_tab(self) -> None:
        with gr.Tab("Compare", elem_id="tab-compare") as self.compare_tab:
            gr.Markdown(compare_lab.INTRO, elem_classes="explain")
            with gr.Row(equal_height=True):
                self.compare_model = gr.Dropdown(
                    choices=store.menu(), value=None, label="model B", elem_id="compare-model",
                    scale=2,
                )  # fmt: skip
                self.compare_upload = gr.File(
                    label="…or upload model B", file_count="multiple", elem_id="compare-upload",
                    scale=1, height=110,
                )  # fmt: skip
                self.compare_files = gr.State([])  # the box's files: a new upload replaces them
                self.compare_btn = gr.Button(
                    "Compare", variant="primary", elem_id="compare-btn", scale=0
                )
            self.compare_msg = gr.Markdown(elem_id="compare-message")
            # a grid cell clicked: the page puts "kind layer head" here and presses the button
            self.compare_grid = gr.HTML(elem_id="compare-grid", js_on_load=COMPARE_ON_LOAD)
            self.compare_pick_btn = gr.Button(
                "pick", elem_id="compare-pick-btn", elem_classes="av-hidden"
            )
            self.compare_pick = gr.Textbox("", elem_id="compare-pick", elem_classes="av-hidden")
            with gr.Row():
                self.compare_kind = gr.Radio(
                    list(KINDS), value="cross", label="head drawn (or click a cell above)",
                    elem_id="compare-kind",
                )  # fmt: skip
                self.compare_layer = gr.Dropdown(["L0"], value="L0", label="layer")
                self.compare_head = gr.Dropdown(
                    ["H0"], value="H0", label="head", elem_id="compare-head-menu"
                )
            self.compare_head_plot = gr.Plot(label="A | B | A − B", elem_id="compare-head")
            self.compare_tokens = gr.HTML(elem_id="compare-tokens")

    def align_inputs(self) -> list:
        return [self.align_lens, self.align_setting, self.align_layer, self.align_head,
                self.align_gold, self.align_sources, self.align_gold_file]  # fmt: skip

    # -- what events return --------------------------------------------------------------------
    def decode_outputs(self) -> list:
        """Outputs of every decoding event; the state first (not sent), then ``output-text``."""
        return [self.state, self.output_text, self.status, self.slider, self.viz]

    def decode(self, view: session.DecodeView, stamps: dict | None = None) -> tuple:
        """A session result as the decoding outputs; ``stamps`` (what the other panels show)
        decides whether the page should ask for them to follow (``payload["follow"]``)."""
        top = max(len(view.state.tokens), 1)
        if stamps is not None:
            view.payload["follow"] = bool(stale_panels(stamps, view.state))
        return (
            view.state,
            view.output,
            view.message,
            gr.Slider(maximum=top, value=view.state.step),
            view.payload,
        )

    def controls(self, state: SessionState) -> dict:
        """Choices that depend on the loaded model (layers, heads, examples, snapshots)."""
        try:
            ckpt = checkpoint_of(state)
        except AttnvizError:
            return {self.model_info: "⚠ no model loaded: pick one or upload a checkpoint"}
        heads = [h for h in head_choices(ckpt) if h != "all heads"]
        dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
        steps = panels.playback_steps(state)
        audio = ckpt.is_audio
        return {
            self.input_text: gr.Textbox(visible=not audio, placeholder=input_placeholder(ckpt)),
            self.examples: gr.Dropdown(
                choices=[] if audio else store.examples_of(ckpt),
                value=None,
                visible=not audio,
            ),
            self.speech_row: gr.Row(visible=audio),
            self.model_info: describe(state),
            self.model_pick: gr.Dropdown(
                choices=store.menu(state.model), value=store.model_name(state.model)
            ),
            self.ablate_sites: gr.CheckboxGroup(
                choices=[s for k in KINDS for s in session.head_sites(state, k)], value=[]
            ),
            self.mask_layer: gr.Dropdown(choices=["last", *dec], value="last"),
            self.mask_head: gr.Dropdown(choices=heads, value="mean"),
            self.attr_layer: gr.Dropdown(choices=dec, value=dec[-1]),
            self.attr_head: gr.Dropdown(choices=heads, value="mean"),
            self.wi_layer: gr.Dropdown(choices=dec, value=dec[-1]),
            self.wi_heads: gr.CheckboxGroup(
                choices=[f"H{h}" for h in range(ckpt.config.n_heads)], value=[]
            ),
            self.play_slider: gr.Slider(maximum=max(len(steps) - 1, 1), value=0),
            self.play_layer: gr.Dropdown(choices=dec, value=dec[-1]),
            self.play_head: gr.Dropdown(choices=heads, value="mean"),
            self.play_btn: gr.Button(interactive=bool(steps)),
            self.align_layer: gr.Dropdown(choices=["best", *dec], value="best"),
            self.align_head: gr.Dropdown(
                choices=["best", *(f"H{h}" for h in range(ckpt.config.n_heads))], value="best"
            ),
        }

    def control_outputs(self) -> list:
        return [
            self.model_info, self.model_pick, self.examples, self.ablate_sites, self.mask_layer,
            self.mask_head, self.attr_layer, self.play_slider, self.play_layer, self.play_head,
            self.play_btn, self.align_layer, self.align_head, self.attr_head, self.wi_layer,
            self.wi_heads, self.input_text, self.speech_row,
        ]  # fmt: skip

    # -- keeping the other panels in step with the state --------------------------------------
    def lab_outputs(self) -> list:
        """Panels computed from the state, cleared (or rerun) when it moves on."""
        return [
            self.stamps, self.mask_plot, self.mask_probs, self.mask_msg, self.blocked,
            self.beam_out, self.beam_state, self.beam_node_box, self.beam_files,
            self.attr_src, self.attr_tgt, self.attr_msg, self.ablate_plot, self.ablate_msg,
            self.rank_table, self.exp_file, self.exp_msg, self.model_info,
            self.play_slider, self.health_html, self.health_plot, self.align_grid,
            self.align_plot, self.align_overlay, self.align_msg, self.faith_plot, self.faith_msg,
            self.compare_grid, self.compare_head_plot, self.compare_tokens, self.compare_msg,
            self.attr_vs_plot, self.attr_vs_msg, self.attr_alt, self.wi_strip, self.wi_msg,
            self.wi_result, self.ref_msg, self.ref_strip, self.ref_plot,
        ]  # fmt: skip

    def follow(self, state: SessionState, stamps: dict, active: str, *args) -> dict:
        """After a decoding event: every panel computed for another state is cleared, the
        mask lab rerun when it is the tab shown, the header and playback range renewed when
        the checkpoint changed on disk (the rules: :func:`attnviz.app.views.follow`)."""
        *mask_args, wi_open, wi_layer, wi_heads, ref_text, theme = args
        plan = follow_plan(stamps, state, active, frozenset({"whatif"} if wi_open else ()))
        if not plan:
            return {c: gr.skip() for c in self.lab_outputs()}
        out: dict = {}
        stale = plan.clear  # emptied, marked as computed for an earlier state
        if "mask" in plan.rerun:
            out.update(self.mask(state, *mask_args, theme=theme))
        elif "mask" in stale:
            out.update({self.mask_plot: None, self.mask_probs: None, self.mask_msg: STALE})
            out[self.blocked] = block_choices(state, mask_args[2] if mask_args else [])
        if "beam" in stale:
            out.update({self.beam_out: "", self.beam_state: None})
            out.update({self.beam_node_box: gr.Column(visible=False)})
            out[self.beam_files] = gr.File(value=None, visible=False)
        if "attr" in stale:
            out.update({self.attr_src: None, self.attr_tgt: None, self.attr_msg: STALE})
        if "attr_vs" in stale:  # only once it was run: never "changed since" before that
            out.update({self.attr_vs_plot: None, self.attr_vs_msg: STALE})
        if "attr_alt" in plan.rerun:  # the Attribution tab is shown: the shown step's candidates
            out[self.attr_alt] = alt_choices(state)
        elif "attr_alt" in stale:  # refilled when the tab is selected
            out[self.attr_alt] = gr.Dropdown(choices=[], value=None)
        if "whatif" in plan.rerun:
            out.update(self.whatif_strip(state, wi_layer, wi_heads, menus=True))
            if not out[self.wi_msg]:  # no reason to refuse: say why the result went
                out[self.wi_msg] = f"The step shown is now {state.step}: click a source token."
        elif "whatif" in stale:
            out.update({self.wi_strip: "", self.wi_result: "", self.wi_msg: STALE})
        if "ablate" in stale:
            out.update({self.ablate_plot: None, self.ablate_msg: STALE})
            out[self.rank_table] = gr.Dataframe(value=None, visible=False)
        if "export" in stale:
            out.update({self.exp_file: None, self.exp_msg: STALE})
        if "align" in stale:
            out.update({self.align_grid: "", self.align_plot: None, self.align_overlay: None})
            out[self.align_msg] = STALE
        if "faith" in stale:
            out.update({self.faith_plot: None, self.faith_msg: STALE})
        if "compare" in stale:
            out.update({self.compare_grid: "", self.compare_head_plot: None})
            out.update({self.compare_tokens: "", self.compare_msg: STALE})
        if "reference" in plan.rerun:  # the mark of where it leaves the output shown follows
            v = reference.score(state, ref_text)
            out.update({self.ref_msg: v.message, self.ref_strip: v.html})
            out[self.ref_plot] = _shown_plot(_dark([v.figure], theme)[0])
        elif "reference" in stale:
            out.update({self.ref_msg: STALE, self.ref_strip: "", self.ref_plot: _shown_plot(None)})
        if "model" in plan.renew:
            ctl = self.controls(state)
            out[self.model_info] = ctl[self.model_info]
            out[self.play_slider] = ctl.get(self.play_slider, gr.skip())
            out.update({self.health_html: "", self.health_plot: None})
        out[self.stamps] = plan.stamps
        return {c: out.get(c, gr.skip()) for c in self.lab_outputs()}

    def whatif_strip(self, state: SessionState, layer, heads, menus: bool = False) -> dict:
        """The what-if panel drawn afresh for ``state``: the strip, no result yet.

        ``menus``: the layer and heads come from menus that may still list another model's
        (a model switch renews them just after): choices this model lacks are dropped.
        """
        if menus:
            layers, names = decoder_menus(state)
            layer = layer if layer in layers else None
            heads = [h for h in heads or () if h in names]
        v = whatif_view.strip(state, layer, heads)
        return {self.wi_strip: v.strip, self.wi_msg: v.message, self.wi_result: ""}

    def mask(self, state, causal, padding, blocked, kind, layer, head, theme="light") -> dict:
        v = labs.mask_lab(
            state, causal, padding, blocked or [], kind, None if layer == "last" else layer, head
        )
        figs = _dark((v.figures + [None, None])[:2], theme)
        return {
            self.mask_plot: figs[0],
            self.mask_probs: figs[1],
            self.mask_msg: v.message,
            self.blocked: block_choices(state, blocked),
        }


def block_choices(state: SessionState, chosen: list[str] | None):
    """Source tokens of the current input as "position: token" choices."""
    from .views import display_token

    choices = [f"{i}: {display_token(t)}" for i, t in enumerate(state.src_pieces)]
    return gr.CheckboxGroup(choices=choices, value=[c for c in chosen or [] if c in choices])


def _resent(view: session.DecodeView) -> session.DecodeView:
    """The page asked for everything again: a reply equal to the last one it was sent would
    not reach it (an unchanged value fires no change), so each resend is marked as new."""
    view.payload["resent"] = time.monotonic_ns()
    return view


def decoder_menus(state: SessionState) -> tuple[list[str], list[str]]:
    """``(["L0", ...], ["H0", ...])`` of the state's model (empty when none loads), so the
    menus hold valid values before the page's first load event renews them."""
    try:
        cfg = checkpoint_of(state).config
    except AttnvizError:
        return [], []
    return [f"L{i}" for i in range(cfg.n_decoder_layers)], [f"H{h}" for h in range(cfg.n_heads)]


def alt_choices(state: SessionState, value: str | None = None):
    """The Attribution tab's alternatives: the step shown's other candidates, ``value`` or
    else the default (runner-up, or the model's argmax for a forced token) selected."""
    try:
        choices, default = labs.alternatives(state)
    except AttnvizError:
        choices, default = [], None
    return gr.Dropdown(choices=choices, value=value or default)


def _alt_menu(state: SessionState, stamps: dict) -> tuple:
    """The alternatives menu filled for the step shown, stamped so that it follows the step."""
    return alt_choices(state), {**stamps, "attr_alt": stamp(state)["attr_alt"]}


def _contrast(state: SessionState, stamps: dict, alt, layer, head, theme: str = "light") -> tuple:
    """Why this token and not that one; the menu then names the alternative explained."""
    view = labs.contrast(state, alt, layer, head)
    fig = _dark(view.figures[:1], theme)[0] if view.figures else None
    used = str(view.versus) if view.versus is not None else None
    menu = alt_choices(state, used) if used else gr.skip()
    now = stamp(state)
    stamps = {
        **stamps,
        "attr_vs": now["attr_vs"],
        **({"attr_alt": now["attr_alt"]} if used else {}),
    }
    return fig, view.message, stamps, menu


def speech_example_choices() -> list[str]:
    return [speech.example_name(p) for p in speech.examples()]


def speech_example_path(name: str | None) -> str | None:
    """An example clip's menu name -> a copy in this process's temporary folder (gradio
    serves files from there, and the session reads clips only from there or the examples)."""
    for path in speech.examples():
        if speech.example_name(path) == name:
            return speech.example_copy(path)
    return None


def forget_session(state: SessionState) -> None:
    """Free the server-side decoder of a session whose state gradio deletes.

    The ``delete_callback`` of the page's ``gr.State``: gradio calls it when the state
    expires (``SESSION_TTL_S`` without a decoding event) or an hour after the tab closed.
    """
    sid = getattr(state, "sid", "")
    if sid:
        DECODERS.forget(sid)


def _wire_decoding(p: Page) -> None:
    outs = p.decode_outputs()
    follow_in = [p.state, p.stamps, p.active, p.causal, p.padding, p.blocked, p.mask_kind,
                 p.mask_layer, p.mask_head, p.wi_open, p.wi_layer, p.wi_heads, p.reference,
                 p.theme]  # fmt: skip
    # the page presses the hidden follow button when a payload says other panels are stale
    p.follow_btn.click(p.follow, follow_in, p.lab_outputs(), js=THEME_JS, **INTERNAL)
    with_text = (
        (p.step_btn.click, session.step, "step"),
        (p.run_btn.click, session.run, "run"),
        (p.input_text.submit, session.start, "start"),
    )
    for trigger, fn, name in with_text:
        trigger(
            lambda t, s, stamps, fn=fn: p.decode(fn(s, t), stamps), [p.input_text, p.state, p.stamps],
            outs, api_name=name, **FAST,
        )  # fmt: skip
    for trigger, fn, name in ((p.back_btn.click, session.back, "back"),
                              (p.reset_btn.click, session.reset, "reset")):  # fmt: skip
        trigger(
            lambda s, stamps, fn=fn: p.decode(fn(s), stamps), [p.state, p.stamps], outs,
            api_name=name, **FAST,
        )  # fmt: skip
    p.slider.input(
        lambda s, v, stamps: p.decode(session.goto(s, v), stamps), [p.state, p.slider, p.stamps],
        outs, trigger_mode="always_last", **HIDDEN, **FAST,
    )  # fmt: skip
    p.force_btn.click(
        lambda s, stamps, v: p.decode(session.force(s, *_force_args(v)), stamps),
        [p.state, p.stamps, p.force_value], outs, js=FORCE_JS, api_name="force", **FAST,
    )  # fmt: skip
    p.resync_btn.click(
        lambda s, stamps: p.decode(_resent(session.render(dataclasses.replace(s, page_rows=-1))), stamps),
        [p.state, p.stamps], outs, **HIDDEN, **FAST,
    )  # fmt: skip
    p.examples.input(lambda e: e or gr.skip(), [p.examples], [p.input_text], **HIDDEN)
    # a speech model: the clip chosen, uploaded or recorded is the input (its path)
    p.speech_examples.input(
        lambda e: speech_example_path(e) or gr.skip(), [p.speech_examples], [p.audio_in], **HIDDEN
    )
    p.audio_in.change(lambda a: a or gr.skip(), [p.audio_in], [p.input_text], **HIDDEN, **FAST)
    p.input_text.change(  # the input edited but not run: say the panels show another
        labs.edited_note, [p.state, p.input_text], [p.input_note], **HIDDEN, **FAST
    )
    gr.on([p.step_btn.click, p.run_btn.click, p.input_text.submit, p.model_pick.input],
          lambda: "", None, [p.input_note], **HIDDEN, **FAST)  # fmt: skip
    for name, btn in p.lens_btns.items():  # only when the page shows a lens other than weights
        btn.click(lambda s, name=name: lensview.payload(s, name), [p.state], [p.viz], **INTERNAL)
    p.enc_btn.click(
        session.encoder_view, [p.state, p.enc_value], [p.viz], js=ENC_JS, **HIDDEN, **FAST
    )  # fmt: skip
    _wire_beam(p)
    p.model_pick.input(
        lambda s, m, t, stamps: p.decode(session.choose_model(s, m, t), stamps),
        [p.state, p.model_pick, p.input_text, p.stamps], outs, **INTERNAL,
    ).then(p.controls, [p.state], p.control_outputs(), **HIDDEN)  # fmt: skip
    p.upload.upload(
        lambda s, f, t, stamps: p.decode(session.upload_model(s, f or [], t), stamps),
        [p.state, p.upload, p.input_text, p.stamps], outs, **INTERNAL,
    ).then(p.controls, [p.state], p.control_outputs(), **HIDDEN)  # fmt: skip


def _wire_reference(p: Page) -> None:
    """The Reference box: pre-filled from the input, scored on the button or Enter."""
    p.input_text.change(  # a new input: its task answer, and nothing scored for the old one
        lambda s, t, st: (reference.default_reference(s, t), "", "", _shown_plot(None),
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
    return v.message, v.html, _shown_plot(_dark([v.figure], theme)[0]), stamps


def _shown_plot(fig):
    """A plot that takes no room until it has a figure (an empty plot is a blank box)."""
    return gr.Plot(value=fig, visible=fig is not None)


def _force_args(value: str) -> tuple[str, str | None]:
    """The page's ``"step:id"`` (or a bare id: the shown step) -> ``(token, at)``."""
    at, _, token = str(value or "").rpartition(":")
    return token, at or None


def _wire_beam(p: Page) -> None:
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


def _beam_node(state: SessionState, panel, node: str, theme: str = "light") -> tuple:
    v = session.beam_node(state, panel, node)
    fig = gr.skip() if v.figure is None else _dark([v.figure], theme)[0]  # refused: kept
    return v.html or gr.skip(), v.panel, v.message, fig, gr.Column(visible=True)


def _beam_continue(p: Page, state: SessionState, stamps: dict, panel) -> tuple:
    view, panel = session.continue_beam(state, panel, panel.selected if panel else None)
    if panel is None:  # refused: the step view stays, the panel says why
        return (*(gr.skip() for _ in p.decode_outputs()), gr.skip(), gr.skip(), view.message,
                gr.skip(), gr.skip())  # fmt: skip
    stamps = {**stamps, "beam": stamp(view.state)["beam"]}
    return (*p.decode(view, stamps), stamps, panel, gr.skip(), gr.Tabs(selected="step"), "step")


def _dark(figs: list, theme: str) -> list:
    return [plots.themed(f, theme == "dark") if f is not None else None for f in figs]


def _wire_labs(p: Page) -> None:
    lab_in = [p.causal, p.padding, p.blocked, p.mask_kind, p.mask_layer, p.mask_head]
    mask_out = [p.mask_plot, p.mask_probs, p.mask_msg, p.blocked, p.stamps]

    def mask(s, stamps, *args):
        *args, theme = args
        out = p.mask(s, *args, theme=theme)
        return (*out.values(), {**stamps, "mask": stamp(s)["mask"]})

    gr.on(
        [p.causal.input, p.padding.input, p.blocked.input, p.mask_kind.input,
         p.mask_layer.input, p.mask_head.input, p.mask_tab.select],
        mask, [p.state, p.stamps, *lab_in, p.theme], mask_out, js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    tabs = {p.step_tab: "step", p.mask_tab: "mask", p.ablation_tab: "ablation",
            p.attr_tab: "attr", p.health_tab: "health", p.play_tab: "play",
            p.export_tab: "export", p.align_tab: "align", p.compare_tab: "compare"}  # fmt: skip
    for tab, name in tabs.items():
        tab.select(lambda name=name: name, None, [p.active], **HIDDEN, **FAST)

    def lab(fn, key: str, n: int):
        def run(s, stamps, *args):
            *args, theme = args
            view = fn(s, *args)
            figs = _dark((view.figures + [None] * n)[:n], theme)
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
    _wire_whatif(p)
    p.health_btn.click(
        _health, [p.state, p.stamps, p.health_extra, p.theme],
        [p.health_html, p.health_plot, p.stamps],
        js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    play_in = [p.state, p.play_slider, p.play_layer, p.play_head, p.theme]
    gr.on(
        [p.play_slider.input, p.play_layer.input, p.play_head.input, p.play_tab.select],
        _play, play_in, [p.play_plot, p.play_msg], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    p.play_btn.click(_play_toggle, [p.play_btn], [p.play_btn, p.play_timer], **HIDDEN, **FAST)
    p.play_timer.tick(
        _play_tick, play_in, [p.play_slider, p.play_plot, p.play_msg, p.play_btn, p.play_timer],
        js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    _wire_alignment(p)
    _wire_compare(p)
    for btn, what in ((p.exp_html, "html"), (p.exp_json, "json"), (p.exp_npz, "npz")):
        btn.click(
            lambda s, stamps, unit, what=what: _file(panels.export(s, what, unit), s, stamps),
            [p.state, p.stamps, p.exp_unit], [p.exp_file, p.exp_msg, p.stamps], js=UNIT_JS,
            **INTERNAL,
        )  # fmt: skip


def _wire_whatif(p: Page) -> None:
    """The step view's what-if panel: drawn when it opens, when the layer or heads change and
    (while open) after each step; a clicked source token runs the what-if."""
    strip_out = [p.wi_strip, p.wi_msg, p.wi_result, p.stamps]

    def draw(state, stamps, layer, heads):
        out = p.whatif_strip(state, layer, heads)
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


def _wire_alignment(p: Page) -> None:
    """The Alignment tab: computed when it opens or a control changes, never on a Step."""
    outs = [p.align_grid, p.align_plot, p.align_overlay, p.align_msg, p.stamps]

    def run(state, stamps, *args):
        *args, theme = args
        view = alignment.view(state, *args)
        figs = _dark(view.figures, theme)
        return (view.grid_html, *figs, view.message, {**stamps, "align": stamp(state)["align"]})

    gr.on(
        [p.align_tab.select, p.align_btn.click, p.align_lens.input, p.align_setting.input,
         p.align_layer.input, p.align_head.input, p.align_gold.submit, p.align_sources.upload,
         p.align_gold_file.upload, p.align_sources.clear, p.align_gold_file.clear],
        run, [p.state, p.stamps, *p.align_inputs(), p.theme], outs, js=THEME_JS, **INTERNAL,
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
        fig = _dark(view.figures, theme)[0]
        return fig, view.message, {**stamps, "faith": stamp(state)["faith"]}

    p.faith_btn.click(
        faith, [p.state, p.stamps, p.theme], [p.faith_plot, p.faith_msg, p.stamps],
        js=THEME_JS, **INTERNAL,
    )  # fmt: skip


def _wire_compare(p: Page) -> None:
    """The Compare tab: computed when model B (menu or upload), the head (menus or a click on
    the grid) or the button asks, never on a Step."""
    outs = [p.compare_grid, p.compare_head_plot, p.compare_tokens, p.compare_msg, p.stamps,
            p.compare_layer, p.compare_head]  # fmt: skip

    def run(state, stamps, model_b, kind, layer, head, theme):
        layers, heads = compare_lab.head_menus(state, kind)
        layer = layer if layer in layers else (layers or [None])[0]
        head = head if head in heads else (heads or [None])[0]
        view = compare_lab.compare(state, model_b, kind, layer, head)
        head_fig = _dark([view.head], theme)[0]
        stamps = {**stamps, "compare": stamp(state)["compare"]}
        menus = (gr.Dropdown(choices=layers, value=layer), gr.Dropdown(choices=heads, value=head))
        return (view.grid_html, head_fig, view.tokens_html, view.message, stamps, *menus)

    gr.on(
        [p.compare_model.input, p.compare_btn.click, p.compare_kind.input,
         p.compare_layer.input, p.compare_head.input],
        run, [p.state, p.stamps, p.compare_model, p.compare_kind, p.compare_layer,
              p.compare_head, p.theme], outs, js=THEME_JS, **INTERNAL,
    )  # fmt: skip

    def pick(state, stamps, model_b, value, theme):
        try:
            kind, layer, head = compare_lab.parse_pick(value)
        except AttnvizError as exc:
            return (*[gr.skip()] * 3, f"⚠ {exc}", *[gr.skip()] * 4)
        return (*run(state, stamps, model_b, kind, layer, head, theme), kind)

    p.compare_pick_btn.click(
        pick, [p.state, p.stamps, p.compare_model, p.compare_pick, p.theme],
        [*outs, p.compare_kind], js=PICK_JS, **INTERNAL,
    )  # fmt: skip

    def upload(state, stamps, files, held, model_b, kind, layer, head, theme):
        # the box adds each upload to the files it holds: keep only the new ones
        files = [f for f in files or [] if f]
        new = [f for f in files if f not in (held or [])] or files
        box = gr.File(value=new)
        name, why = compare_lab.upload_b(new, state.device)
        if name is None:  # the grid below (labelled A vs B) still shows the last comparison
            shown = f" (the grid below still compares A with B = {model_b})" if model_b else ""
            return (*[gr.skip()] * 3, why.rstrip(". ") + shown, *[gr.skip()] * 4, box, new)
        menu = gr.Dropdown(choices=compare_lab.model_choices(state), value=name)
        return (*run(state, stamps, name, kind, layer, head, theme), menu, box, new)

    p.compare_upload.upload(
        upload, [p.state, p.stamps, p.compare_upload, p.compare_files, p.compare_model,
                 p.compare_kind, p.compare_layer, p.compare_head, p.theme],
        [*outs, p.compare_model, p.compare_upload, p.compare_files], js=THEME_JS, **INTERNAL,
    )  # fmt: skip

    def cleared(state, stamps, model_b, kind, layer, head, theme):
        """The upload box cleared: its warning goes; the comparison with B shown again."""
        if not model_b:
            return (*[gr.skip()] * 3, "", *[gr.skip()] * 3, [])
        return (*run(state, stamps, model_b, kind, layer, head, theme), [])

    p.compare_upload.clear(
        cleared, [p.state, p.stamps, p.compare_model, p.compare_kind, p.compare_layer,
                  p.compare_head, p.theme], [*outs, p.compare_files], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    p.compare_tab.select(
        lambda s, b: gr.Dropdown(choices=compare_lab.model_choices(s), value=b),
        [p.state, p.compare_model], [p.compare_model], **HIDDEN,
    )  # fmt: skip


def _file_only(view) -> tuple:
    return view.path, view.message


def _rank(state: SessionState, stamps: dict, theme: str = "light") -> tuple:
    view = labs.rank_heads(state)
    fig = _dark(view.figures[:1], theme)[0] if view.figures else None
    table = gr.Dataframe(value=view.rows or None, visible=bool(view.rows))
    return table, fig, view.message, {**stamps, "ablate": stamp(state)["ablate"]}


def _health(state: SessionState, stamps: dict, extra: str, theme: str) -> tuple:
    view = panels.health(state, extra)
    fig = _dark(view.figures[:1], theme)[0] if view.figures else None
    return view.message, fig, stamps


def _play(state: SessionState, index, layer, head, theme: str = "light") -> tuple:
    view = panels.playback(state, index, layer, head)
    return (_dark(view.figures[:1], theme)[0] if view.figures else None), view.message


def _play_toggle(label: str) -> tuple:
    playing = str(label).startswith("Pause")
    return gr.Button("Play ▶" if playing else "Pause ⏸"), gr.Timer(active=not playing)


def _play_tick(state: SessionState, index, layer, head, theme: str) -> tuple:
    steps = panels.playback_steps(state)
    nxt = int(index or 0) + 1
    if nxt >= len(steps):  # the end: stop
        return gr.skip(), gr.skip(), gr.skip(), gr.Button("Play ▶"), gr.Timer(active=False)
    fig, msg = _play(state, nxt, layer, head, theme)
    return nxt, fig, msg, gr.skip(), gr.skip()


def _file(view: labs.LabView, state: SessionState, stamps: dict) -> tuple:
    return view.path, view.message, {**stamps, "export": stamp(state)["export"]}


def build_app(
    model: str | None = None, device: str = "cpu", *, session_ttl_s: float = SESSION_TTL_S
) -> gr.Blocks:
    """The whole page, on ``model`` (a folder; default the first shipped model).

    A session's state (and its server-side decoder) is freed ``session_ttl_s`` seconds after
    its last decoding event; gradio's temporary files (uploads, exports) after an hour.
    """
    title = "attnviz — attention inspector"
    if model:
        store.model_name(model)  # a --model folder gets its name in the menu
    speech.register_models()  # Whisper tiny.en when its package is installed
    # analytics off: a local inspection tool sends nothing anywhere
    with gr.Blocks(title=title, delete_cache=CACHE_CLEANUP, analytics_enabled=False) as demo:
        p = Page(session.new_state(model, device), session_ttl_s)
        _wire_decoding(p)
        _wire_reference(p)
        _wire_labs(p)
        demo.load(p.controls, [p.state], p.control_outputs(), **HIDDEN).then(
            lambda s: p.decode(session.render(dataclasses.replace(s, page_rows=-1))),
            [p.state], p.decode_outputs(), **HIDDEN, **FAST,
        ).then(lambda s: {"model": stamp(s)["model"]}, [p.state], [p.stamps], **HIDDEN)  # fmt: skip
    return demo
