"""The Gradio page: its assembly. Every callback is one call into the session layer.

``attnviz app`` serves it (:func:`attnviz.app.server.main`). The page is built by
:func:`build_app`: a :class:`Page` whose parts are laid out and wired by one module each
(the ``ui_*`` modules, the only ones besides this that import gradio):

- :mod:`~attnviz.app.ui_step`: the top (model, input, decoding buttons, beam panel) and the
  Step-through tab (heatmaps, what-if box, reference box); the named API endpoints ``start``,
  ``step``, ``run``, ``back``, ``reset``, ``force``, ``beam``, ``beam_node``,
  ``beam_continue`` and ``whatif`` (``Client(url).predict("helloworld", api_name="/step")``);
- :mod:`~attnviz.app.ui_labs`: mask lab, head ablation, attribution, health, playback, export;
- :mod:`~attnviz.app.ui_align`: the Alignment tab; :mod:`~attnviz.app.ui_compare`: Compare;
- :mod:`~attnviz.app.ui_common`: the event options and small helpers they share.

Here: what every decoding event returns, the choices that depend on the model, and how the
other panels follow the state (:meth:`Page.follow`). The per-user state lives server-side in
``gr.State``. The heatmaps are drawn in the page (``assets/viz.js`` on ``<canvas>``).
"""

from __future__ import annotations

import dataclasses

import gradio as gr

from ..core.errors import AttnvizError
from ..core.model import KINDS
from . import (
    filekinds,
    llms,
    panels,
    reference,
    session,
    similarity_view,
    speech,
    store,
    ui_align,
    ui_compare,
    ui_labs,
    ui_similarity,
    ui_step,
    ui_why,
    uploads,
)
from .decoders import DECODERS
from .kinds import input_label, is_decoder_only, is_encoder_only, note
from .pagetext import MASK_INTRO, STALE
from .stamps import follow as follow_plan
from .stamps import panel_stamps as stamp
from .state import SessionState, checkpoint_of, describe, head_choices, layer_count
from .ui_common import FAST, HIDDEN, dark, shown_plot
from .views import input_placeholder

SESSION_TTL_S = 3600  # a session's state is freed this long after its last decoding event
CACHE_CLEANUP = (3600, 3600)  # every hour, delete gradio's temp files older than an hour
#: The Attribution tab's button and its two figures' labels, by what the model does.
ATTR_LABELS = {
    "decode": ("Attribute the newest token", "source", "previous tokens"),
    "read": (
        "Attribute the filler at the first mask",
        "the sentence: attribution beside the mask's self-attention",
        "the sentence: Integrated Gradients and gradient × input",
    ),
}


class Page:
    """Every component of the page (laid out by the ``ui_*`` modules, as its attributes) and
    how session results map onto them."""

    def __init__(self, state: SessionState, ttl_s: float = SESSION_TTL_S, upload_cap: str = ""):
        self.upload_cap = upload_cap  # the largest upload, in words ("2 GB")
        self.state = gr.State(state, time_to_live=ttl_s, delete_callback=forget_session)
        self.stamps = gr.State({})  # panel -> the state it was computed for
        self.active = gr.State("step")  # the selected tab
        # where a part does not apply to the model's kind: a sentence, and the part hidden
        self.kind_notes: dict[str, gr.Markdown] = {}
        self.kind_bodies: dict[str, gr.Column] = {}
        ui_step.top(self)
        with gr.Tabs(elem_id="tabs") as self.tabs:
            ui_step.step_tab(self, state)
            ui_labs.mask_tab(self)
            ui_labs.other_tabs(self, state)
            ui_align.align_tab(self)
            ui_compare.compare_tab(self)
            ui_similarity.similarity_tab(self)
            ui_why.why_tab(self)

    # -- what events return --------------------------------------------------------------------
    def decode_outputs(self) -> list:
        """Outputs of every decoding event; the state first (not sent), then ``output-text``."""
        return [self.state, self.output_text, self.status, self.slider, self.viz]

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
        attended = "causal self-attention" if note(ckpt, "step") else "cross-attention"
        one = is_decoder_only(ckpt)
        kinds = [k for k in KINDS if layer_count(ckpt, k)]
        hidden = {  # the parts this model's kind has no use for, and the sentence shown
            place: gr.Markdown(value=note(ckpt, place), visible=bool(note(ckpt, place)))
            for place in self.kind_notes
        }
        if audio and "mask" in hidden:  # said at once: no list of 1500 frames to block first
            hidden["mask"] = gr.Markdown(value=speech.NOT_FOR_AUDIO, visible=True)
        bodies = {place: {"whatif": self.wi_box, "mask": self.blocked}.get(place)
                  or self.kind_bodies.get(place) for place in self.kind_notes}  # fmt: skip
        decodes = not note(ckpt, "decode")  # an encoder-only model reads, nothing more
        examples = store.examples_of(ckpt)
        last = dec[-1] if dec else None
        reads = is_encoder_only(ckpt)  # its attribution compares a mask's encoder row
        enc = [f"L{i}" for i in range(ckpt.config.n_encoder_layers)]
        cfg = ckpt.config
        local = [f"L{i}" for i in range(cfg.n_decoder_layers) if cfg.layer_window(i)]
        attr_rows = ("self-attention of the mask token" if reads else
                     "self-attention on the prompt" if one else "cross-attention")  # fmt: skip
        return {
            **{c: type(c)(visible=decodes) for c in self.decoding_parts()},
            self.run_btn: gr.Button("Run ▶▶" if decodes else "Read ▶"),
            # no mask lab for encoder-only yet, nor for a speech model
            self.mask_body: gr.Column(visible=not reads and not audio),
            **{self.kind_notes[k]: v for k, v in hidden.items()},
            **{b: type(b)(visible=not note(ckpt, k)) for k, b in bodies.items() if b},
            self.input_text: gr.Textbox(
                visible=not audio,
                label=input_label(ckpt),
                placeholder=input_placeholder(ckpt, examples),
            ),  # fmt: skip
            self.examples: gr.Dropdown(
                choices=[] if audio else examples,
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
            self.window_off: gr.CheckboxGroup(choices=local, value=[], visible=bool(local)),
            self.mask_kind: gr.Radio(  # the kinds this model has
                choices=["auto", *(k for k in KINDS if layer_count(ckpt, k))], value="auto"
            ),
            self.mask_intro: MASK_INTRO["decoder-only" if one else "encoder-decoder"],
            self.compare_kind: gr.Radio(  # a decoder-only model compares its self-attention
                choices=kinds, value="cross" if "cross" in kinds else kinds[0]
            ),
            self.beam_attn: gr.Plot(label=f"the hypothesis's {attended}"),
            self.ref_plot: gr.Plot(label=f"reference {attended}"),
            self.reference: reference.default_reference(state),  # this model's answer
            self.mask_head: gr.Dropdown(choices=heads, value="mean"),
            self.attr_layer: gr.Dropdown(
                choices=enc if reads else dec,
                value=(enc or [None])[-1] if reads else last,
                label=f"layer of the {attr_rows} compared",
            ),  # fmt: skip
            self.attr_head: gr.Dropdown(choices=heads, value="mean"),
            **self.attribution_labels(reads),
            self.wi_layer: gr.Dropdown(choices=dec, value=last),
            self.wi_heads: gr.CheckboxGroup(
                choices=[f"H{h}" for h in range(ckpt.config.n_heads)], value=[]
            ),
            self.play_slider: gr.Slider(maximum=max(len(steps) - 1, 1), value=0),
            self.play_layer: gr.Dropdown(choices=dec, value=last),
            self.play_head: gr.Dropdown(choices=heads, value="mean"),
            self.play_btn: gr.Button(interactive=bool(steps)),
            self.align_layer: gr.Dropdown(choices=["best", *dec], value="best"),
            self.align_head: gr.Dropdown(
                choices=["best", *(f"H{h}" for h in range(ckpt.config.n_heads))], value="best"
            ),
        }

    def attribution_labels(self, reads: bool) -> dict:
        """The Attribution tab's button and figure labels: an encoder-only model's explain the
        filler at its first mask token over the sentence, not the newest decoded token."""
        words = ATTR_LABELS["read" if reads else "decode"]
        return {
            self.attr_btn: gr.Button(words[0]),
            self.attr_src: gr.Plot(label=words[1]),
            self.attr_tgt: gr.Plot(label=words[2]),
        }

    def control_outputs(self) -> list:
        return [
            self.model_info, self.model_pick, self.examples, self.ablate_sites, self.mask_layer,
            self.mask_head, self.attr_layer, self.play_slider, self.play_layer, self.play_head,
            self.play_btn, self.align_layer, self.align_head, self.attr_head, self.wi_layer,
            self.wi_heads, self.input_text, self.speech_row, self.wi_box, self.blocked,
            self.mask_kind, self.beam_attn, self.ref_plot, self.reference, self.mask_intro,
            self.compare_kind, self.attr_btn, self.attr_src, self.attr_tgt,
            *self.kind_notes.values(), *self.kind_bodies.values(), *self.decoding_parts(),
            self.run_btn, self.mask_body, self.window_off,
        ]  # fmt: skip

    def decoding_parts(self) -> list:
        """What only a model that decodes uses (hidden for an encoder-only model, whose Run
        button reads "Read")."""
        return [self.step_btn, self.back_btn, self.reset_btn, self.beam_btn, self.beam_size,
                self.slider, self.output_text]  # fmt: skip

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
            *ui_similarity.outputs(self), *ui_why.outputs(self),
        ]  # fmt: skip

    def follow(self, state: SessionState, stamps: dict, active: str, *args) -> dict:
        """After a decoding event: every panel computed for another state is cleared, the
        mask lab rerun when it is the tab shown, the header and playback range renewed when
        the checkpoint changed on disk (the rules: :func:`attnviz.app.stamps.follow`)."""
        *mask_args, wi_open, wi_layer, wi_heads, ref_text, theme = args
        plan = follow_plan(stamps, state, active, frozenset({"whatif"} if wi_open else ()))
        if not plan:
            return {c: gr.skip() for c in self.lab_outputs()}
        out: dict = {}
        stale = plan.clear  # emptied, marked as computed for an earlier state
        if "mask" in plan.rerun:
            out.update(ui_labs.mask_panels(self, state, *mask_args, theme=theme))
        elif "mask" in stale:
            out.update({self.mask_plot: None, self.mask_probs: None, self.mask_msg: STALE})
            out[self.blocked] = ui_labs.block_choices(state, mask_args[2] if mask_args else [])
        if "beam" in stale:
            out.update({self.beam_out: "", self.beam_state: None})
            out.update({self.beam_node_box: gr.Column(visible=False)})
            out[self.beam_files] = gr.File(value=None, visible=False)
        if "attr" in stale:
            out.update({self.attr_src: None, self.attr_tgt: None, self.attr_msg: STALE})
        if "attr_vs" in stale:  # only once it was run: never "changed since" before that
            out.update({self.attr_vs_plot: None, self.attr_vs_msg: STALE})
        if "attr_alt" in plan.rerun:  # the Attribution tab is shown: the shown step's candidates
            out[self.attr_alt] = ui_labs.alt_choices(state)
        elif "attr_alt" in stale:  # refilled when the tab is selected
            out[self.attr_alt] = gr.Dropdown(choices=[], value=None)
        if "whatif" in plan.rerun:
            out.update(ui_step.whatif_strip(self, state, wi_layer, wi_heads, menus=True))
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
            out[self.ref_plot] = shown_plot(dark([v.figure], theme)[0])
        elif "reference" in stale:
            out.update({self.ref_msg: STALE, self.ref_strip: "", self.ref_plot: shown_plot(None)})
        if "similarity" in stale:
            out.update(ui_similarity.cleared(self, state))
        out.update(ui_why.follow(self, state, plan))  # the Why this token tab
        if "health" in stale:
            out.update({self.health_html: STALE, self.health_plot: None})
        if "model" in plan.renew:
            ctl = self.controls(state)
            out[self.model_info] = ctl[self.model_info]
            out[self.play_slider] = ctl.get(self.play_slider, gr.skip())
            # a report checked on this input says it went stale, as the other labs do
            out.update(
                {self.health_html: STALE if "health" in stale else "", self.health_plot: None}
            )
        out[self.stamps] = plan.stamps
        return {c: out.get(c, gr.skip()) for c in self.lab_outputs()}


def forget_session(state: SessionState) -> None:
    """Free the server-side decoder of a session whose state gradio deletes.

    The ``delete_callback`` of the page's ``gr.State``: gradio calls it when the state
    expires (``SESSION_TTL_S`` without a decoding event) or an hour after the tab closed.
    """
    sid = getattr(state, "sid", "")
    if sid:
        DECODERS.forget(sid)
        uploads.end_session(sid)  # its uploads deleted, their workers ended


def build_app(
    model: str | None = None,
    device: str = "cpu",
    *,
    session_ttl_s: float = SESSION_TTL_S,
    max_upload: str | int = filekinds.MAX_UPLOAD,
) -> gr.Blocks:
    """The whole page, on ``model`` (a folder; default the first shipped model); the page
    says the upload cap ``max_upload`` (what ``launch`` is given).

    A session's state (and its server-side decoder) is freed ``session_ttl_s`` seconds after
    its last decoding event; gradio's temporary files (uploads, exports) after an hour.
    """
    title = "attnviz — attention inspector"
    similarity_view.register_models()  # all-MiniLM-L6-v2 when its package is installed
    if model:
        store.model_name(model)  # a --model folder gets its name in the menu
    speech.register_models()  # Whisper tiny.en when its package is installed
    llms.register_models()  # Gemma 3 270M (GGUF) when its package is installed
    # analytics off: a local inspection tool sends nothing anywhere
    with gr.Blocks(title=title, delete_cache=CACHE_CLEANUP, analytics_enabled=False) as demo:
        cap = filekinds.size_label(filekinds.upload_bytes(max_upload))
        p = Page(session.new_state(model, device), session_ttl_s, cap)
        # in this order: a tab's select events run in the order they were wired, the tab
        # tracked (``p.active``, by ui_labs) before the what-if, Alignment and Compare draw
        ui_step.wire(p)
        ui_labs.wire(p)
        ui_step.wire_whatif(p)
        ui_align.wire(p)
        ui_compare.wire(p)
        ui_similarity.wire(p)
        ui_why.wire(p)
        demo.load(p.controls, [p.state], p.control_outputs(), **HIDDEN).then(
            lambda s: ui_step.answer(session.render(dataclasses.replace(s, page_rows=-1))),
            [p.state], p.decode_outputs(), **HIDDEN, **FAST,
        ).then(lambda s: {"model": stamp(s)["model"]}, [p.state], [p.stamps], **HIDDEN)  # fmt: skip
    return demo
