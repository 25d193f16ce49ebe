"""The Gradio page: its assembly. Every callback is one call into the session layer.

``attnviz app`` serves it (:func:`attnviz.app.server.main`). The page is built by
:func:`build_app`: a :class:`Page` whose parts are laid out and wired by one module each
(these, ``ui_speech`` and the ``*_ui`` panel modules are the only ones that import gradio):

- :mod:`~attnviz.app.ui_step`: the top (model, input, decoding buttons, beam panel) and the
  Step-through tab (heatmaps, what-if box, reference box); the named API endpoints ``start``,
  ``step``, ``run``, ``back``, ``reset``, ``force``, ``beam``, ``beam_node``,
  ``beam_continue`` and ``whatif`` (``Client(url).predict("helloworld", api_name="/step")``);
- every other tab, one module of :mod:`attnviz.app.panels` each, laid out in registry order
  (:func:`panel_pages`): the labs (``labs_ui``: mask lab, head ablation, attribution),
  health, playback, export, Alignment (``alignment_ui``), Compare (``compare_ui``),
  Similarity (``similarity_ui``) and Why this token (``why_ui``);
- :mod:`~attnviz.app.ui_common`: the event options and small helpers they share.

Here: what every decoding event returns, the choices that depend on the model, and how the
other panels follow the state (:meth:`Page.follow`). The per-user state lives server-side in
``gr.State``. The heatmaps are drawn in the page (``assets/viz.js`` on ``<canvas>``).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import SimpleNamespace

import gradio as gr

from ..core.errors import AttnvizError
from . import filekinds, llms, session, speech, store, ui_step, uploads
from .decoders import DECODERS
from .inputs import input_label, note
from .panels import PANELS, Face, similarity
from .state import SessionState, checkpoint_of, describe
from .state import follow as follow_plan
from .state import panel_stamps as stamp
from .ui_common import FAST, HIDDEN
from .views import input_placeholder

SESSION_TTL_S = 3600  # a session's state is freed this long after its last decoding event
CACHE_CLEANUP = (3600, 3600)  # every hour, delete gradio's temp files older than an hour


class Page:
    """The page: its own components as attributes (the state, the header, the input, the
    decoding buttons and the Step-through tab, laid out by ``ui_step`` and ``ui_speech``),
    each panel module's in :meth:`part`, and how session results map onto them."""

    def __init__(self, state: SessionState, ttl_s: float = SESSION_TTL_S, upload_cap: str = ""):
        self.upload_cap = upload_cap  # the largest upload, in words ("2 GB")
        self.state = gr.State(state, time_to_live=ttl_s, delete_callback=forget_session)
        self.stamps = gr.State({})  # panel -> the state it was computed for
        self.active = gr.State("step")  # the selected tab
        # where a part does not apply to the model's kind: a sentence, and the part hidden
        self.kind_notes: dict[str, gr.Markdown] = {}
        self.kind_bodies: dict[str, gr.Column] = {}
        #: each panel module's components, by its part name (``"compare"``: see :meth:`part`)
        self.parts: dict[str, SimpleNamespace] = {}
        ui_step.top(self)
        # every tab in view (wrapped onto a second row), none behind a "more" menu
        with gr.Tabs(elem_id="tabs", overflow_behavior="wrap") as self.tabs:
            ui_step.step_tab(self, state)
            for page in panel_pages():  # one module of app/panels each, in registry order
                page.layout(self)
        #: every registered panel on the page, by name (built by the modules that lay them out)
        self.faces: dict[str, Face] = {
            f.name: f
            for f in (
                header_face(self), *ui_step.faces(self),
                *(f for page in panel_pages() for f in page.faces(self)),
            )
        }  # fmt: skip
        missing = {panel.name for panel in PANELS} ^ set(self.faces)
        assert not missing, f"panels registered without a face, or faces of no panel: {missing}"

    def part(self, name: str) -> SimpleNamespace:
        """The components one panel module lays out (``"labs"``, ``"health"``, ``"compare"``,
        ...), as the attributes it gives them: its own to read and wire; another reads
        one by name (the header's health report, the tabs tracked)."""
        return self.parts.setdefault(name, SimpleNamespace())

    # -- what events return --------------------------------------------------------------------
    def decode_outputs(self) -> list:
        """Outputs of every decoding event; the state first (not sent), then ``output-text``."""
        return [self.state, self.output_text, self.status, self.slider, self.viz]

    def controls(self, state: SessionState) -> dict:
        """Choices that depend on the loaded model: the page's own (header, input, decoding
        buttons, where a part does not apply) and each registered panel's (its
        :attr:`~attnviz.app.panels.Face.controls`)."""
        try:
            ckpt = checkpoint_of(state)
        except AttnvizError:
            return {self.model_info: "⚠ no model loaded: pick one or upload a checkpoint"}
        out = self.page_controls(state, ckpt)
        for face in self.faces.values():
            if face.controls is not None:
                out.update(face.controls(state, ckpt))
        return out

    def page_controls(self, state: SessionState, ckpt) -> dict:
        """The header, the input and the decoding buttons for ``ckpt``; where a part does not
        apply to its kind, the one sentence saying why, the part hidden."""
        audio = ckpt.is_audio
        hidden = {  # the parts this model's kind has no use for, and the sentence shown
            place: gr.Markdown(value=note(ckpt, place), visible=bool(note(ckpt, place)))
            for place in self.kind_notes
        }
        if audio and "mask" in hidden:  # said at once: no list of 1500 frames to block first
            hidden["mask"] = gr.Markdown(value=speech.NOT_FOR_AUDIO, visible=True)
        bodies = {place: {"whatif": self.wi_box, "mask": self.part("labs").blocked}.get(place)
                  or self.kind_bodies.get(place) for place in self.kind_notes}  # fmt: skip
        decodes = not note(ckpt, "decode")  # an encoder-only model reads, nothing more
        examples = store.examples_of(ckpt)
        return {
            **{c: type(c)(visible=decodes) for c in self.decoding_parts()},
            self.run_btn: gr.Button("Run ▶▶" if decodes else "Read ▶"),
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
                choices=store.menu(state.model, owner=state.sid),
                value=store.model_name(state.model),
            ),
        }

    def control_outputs(self) -> list:
        """What :meth:`controls` sets: the page's own parts, then each panel's."""
        own = [self.model_info, self.model_pick, self.examples, self.input_text, self.speech_row,
               self.wi_box, self.part("labs").blocked, *self.kind_notes.values(),
               *self.kind_bodies.values(), *self.decoding_parts(), self.run_btn]  # fmt: skip
        return _unique([*own, *(c for f in self.faces.values() for c in f.control_outputs)])

    def decoding_parts(self) -> list:
        """What only a model that decodes uses (hidden for an encoder-only model, whose Run
        button reads "Read")."""
        return [self.step_btn, self.back_btn, self.reset_btn, self.beam_btn, self.beam_size,
                self.slider, self.output_text]  # fmt: skip

    # -- keeping the other panels in step with the state --------------------------------------
    def lab_outputs(self) -> list:
        """Panels computed from the state, cleared (or rerun) when it moves on: the stamps,
        the header, and every registered panel's outputs."""
        faces = self.faces.values()
        return _unique([self.stamps, self.model_info, *(c for f in faces for c in f.outputs)])

    def follow_inputs(self) -> list:
        """What :meth:`follow` reads: the state, the stamps, the tab shown, what each panel
        reads to clear or rerun, and the page's theme last (``THEME_JS`` sets it)."""
        faces = self.faces.values()
        read = [
            c for f in faces for c in (*f.inputs, *([f.opened] if f.opened is not None else []))
        ]
        return _unique([self.state, self.stamps, self.active,
                        *(c for c in read if c is not self.theme), self.theme])  # fmt: skip

    def follow(self, *args) -> dict:
        """After a decoding event: every panel computed for another state is cleared, rerun
        (a lab whose tab is shown) or renewed (what follows the checkpoint file), by its
        registration (:data:`attnviz.app.panels.PANELS`; the rules:
        :func:`attnviz.app.state.follow`). ``args``: the values of :meth:`follow_inputs`."""
        values = dict(zip(self.follow_inputs(), args, strict=True))
        state, stamps, active = values[self.state], values[self.stamps], values[self.active]
        opened = frozenset(
            f.name for f in self.faces.values() if f.opened is not None and values[f.opened]
        )
        plan = follow_plan(stamps, state, active, opened)
        if not plan:
            return {c: gr.skip() for c in self.lab_outputs()}
        out: dict = {}
        for panel in PANELS:  # renewed and rerun first: a cleared panel's note wins
            if panel.name in plan.rerun | plan.renew:
                out.update(self.faces[panel.name].rerun(state, values))
        for panel in PANELS:
            if panel.name in plan.clear:
                out.update(self.faces[panel.name].clear(state, values))
        out[self.stamps] = plan.stamps
        return {c: out.get(c, gr.skip()) for c in self.lab_outputs()}


def header_face(p: Page) -> Face:
    """The header (the model's name, task and device), renewed when the checkpoint file
    changes; a health report then goes (one checked on this input says it went stale)."""

    health = p.part("health")

    def renewed(state: SessionState, values: dict) -> dict:
        try:
            info = describe(state)
        except AttnvizError:
            info = "⚠ no model loaded: pick one or upload a checkpoint"
        return {p.model_info: info, health.health_html: "", health.health_plot: None}

    return Face("model", [p.model_info, health.health_html, health.health_plot], rerun=renewed)


def _unique(components: list) -> list:
    """``components`` once each, in order (a component two panels set is one output)."""
    return list({id(c): c for c in components}.values())


def panel_pages() -> list:
    """The modules of :mod:`attnviz.app.panels` that lay a registered panel out themselves
    (:attr:`~attnviz.app.panels.registry.Panel.page`), once each, in registration order."""
    names = dict.fromkeys(panel.page for panel in PANELS if panel.page)
    return [importlib.import_module(f"{__package__}.panels.{name}") for name in names]


def track_tabs(p: Page) -> None:
    """The selected tab, kept in ``p.active``: a Step reruns the panel shown, clears the rest
    (the Similarity and Why tabs say it in their own select events)."""
    labs = p.part("labs")
    tabs = {p.step_tab: "step", labs.mask_tab: "mask", labs.ablation_tab: "ablation",
            labs.attr_tab: "attr", p.part("align").align_tab: "align",
            p.part("compare").compare_tab: "compare"}  # fmt: skip
    for tab, name in tabs.items():
        tab.select(lambda name=name: name, None, [p.active], **HIDDEN, **FAST)


def renewed_stamps(state: SessionState) -> dict:
    """The stamps of the panels that follow the checkpoint file (the header, the playback
    range), as the page's first load shows them."""
    now = stamp(state)
    return {panel.name: now[panel.name] for panel in PANELS if panel.renew}


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
    similarity.register_models()  # all-MiniLM-L6-v2 when its package is installed
    if model:
        store.model_name(model)  # a --model folder gets its name in the menu
    speech.register_models()  # Whisper tiny.en when its package is installed
    llms.register_models()  # Gemma 3 270M (GGUF) when its package is installed
    # analytics off: a local inspection tool sends nothing anywhere
    with gr.Blocks(title=title, delete_cache=CACHE_CLEANUP, analytics_enabled=False) as demo:
        cap = filekinds.size_label(filekinds.upload_bytes(max_upload))
        p = Page(session.new_state(model, device), session_ttl_s, cap)
        # in this order: a tab's select events run in the order they were wired, the tab
        # tracked (``p.active``) before the what-if, Alignment and Compare draw
        ui_step.wire(p)
        track_tabs(p)
        for page in panel_pages():
            page.wire(p)
        ui_step.wire_whatif(p)
        demo.load(p.controls, [p.state], p.control_outputs(), **HIDDEN).then(
            lambda s: ui_step.answer(session.render(dataclasses.replace(s, page_rows=-1))),
            [p.state], p.decode_outputs(), **HIDDEN, **FAST,
        ).then(lambda s: renewed_stamps(s), [p.state], [p.stamps], **HIDDEN)  # fmt: skip
    return demo
