"""The Gradio page: layout and wiring only. Every callback is one call into the session layer.

``attnviz app`` runs :func:`main`. The page is built by :func:`build_app`; the named API
endpoints ``start``, ``step``, ``run``, ``back``, ``reset`` drive step-through decoding from
``gradio_client`` (``Client(url).predict("helloworld", api_name="/step")``); the per-user
state lives server-side in ``gr.State``. This is the only module that imports gradio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gradio as gr

from ..errors import AttnvizError
from ..model import KINDS
from ..plots import KIND_TITLES
from . import labs, models, panels, session
from .state import (
    _STEP_LOCK,
    _STEPPERS,
    FIGURES,
    SessionState,
    checkpoint,
    describe,
    head_choices,
    layer_count,
)

CSS_FILE = models.ASSETS_DIR / "app.css"
MAX_FILE_SIZE = "200mb"
SESSION_TTL_S = 3600  # a session's state is freed this long after its last decoding event
MAX_SESSIONS = 1000  # sessions gradio keeps in memory at most (oldest dropped; default 10000)
CACHE_CLEANUP = (3600, 3600)  # every hour, delete gradio's temp files older than an hour
SHARE_WARNING = (
    "attnviz app: WARNING: --share makes this app PUBLIC on the internet through a "
    "gradio.live link for as long as it runs: anyone with the link can use it, run the "
    "model on this machine and upload files to it. Stop it with Ctrl+C."
)
MODEL_EVENTS = dict(concurrency_id="model", concurrency_limit=2)
HIDDEN = dict(api_visibility="undocumented")
INTERNAL = dict(HIDDEN, **MODEL_EVENTS)
INTRO = (
    "# attnviz — attention inspector\n"
    "Type an input, then **Step** through greedy decoding one token at a time and watch the "
    "attention matrices grow. Every weight shown is the one the model used in that forward "
    "pass. Grey cells are *masked* (blocked by construction); dark purple cells are weights "
    "the model *learned* to be near zero."
)


class Page:
    """The components of one page and how session results map onto them."""

    def __init__(self, state: SessionState, ttl_s: float = SESSION_TTL_S):
        self.state = gr.State(state, time_to_live=ttl_s, delete_callback=forget_session)
        self.plots: dict[str, gr.Plot] = {}

    def decode_outputs(self) -> list:
        """Outputs of every decoding event; the state first, then ``output-text``."""
        return [
            self.state,
            self.output_text,
            self.output_html,
            self.source_html,
            self.status,
            self.info,
            self.slider,
            *(self.plots[n] for n in FIGURES),
        ]

    def decode(self, view: session.DecodeView) -> dict:
        out = {
            self.state: view.state,
            self.output_text: view.output,
            self.output_html: view.output_html,
            self.source_html: view.source_html,
            self.status: view.message,
            self.info: view.info,
            self.slider: gr.Slider(maximum=max(len(view.state.tokens), 1), value=view.state.step),
        }
        out.update({self.plots[n]: view.figures[n] for n in FIGURES})
        return out

    def controls(self, state: SessionState) -> dict:
        """Choices that depend on the loaded model (layers, heads, examples, snapshots)."""
        try:
            ckpt = checkpoint(state)
        except AttnvizError:
            return {self.model_info: "⚠️ no model loaded: pick one or upload a checkpoint"}
        heads = head_choices(ckpt)
        out: dict = {
            self.model_info: describe(state),
            self.model_pick: gr.Dropdown(
                choices=list(models.shipped_models()), value=Path(state.model).name
            ),
            self.examples: gr.Dropdown(choices=models.examples_for(ckpt.task), value=None),
            self.open_head: gr.Dropdown(choices=session.head_sites(state), value=None),
            self.ablate_sites: gr.CheckboxGroup(
                choices=[s for k in KINDS for s in session.head_sites(state, k)], value=[]
            ),
        }
        for kind in KINDS:
            layers = [f"L{i}" for i in range(layer_count(ckpt, kind))]
            out[self.layer[kind]] = gr.Dropdown(choices=layers, value=layers[-1])
            out[self.head[kind]] = gr.Radio(choices=heads, value="mean")
        dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
        out[self.mask_layer] = gr.Dropdown(choices=["last", *dec], value="last")
        out[self.mask_head] = gr.Dropdown(choices=[h for h in heads if h != "all heads"])
        out[self.attr_layer] = gr.Dropdown(choices=dec, value=dec[-1])
        steps = panels.playback_steps(state)
        out[self.play_slider] = gr.Slider(maximum=max(len(steps) - 1, 1), value=0)
        out[self.play_layer] = gr.Dropdown(choices=dec, value=dec[-1])
        out[self.play_head] = gr.Dropdown(choices=[h for h in heads if h != "all heads"])
        return out

    def control_outputs(self) -> list:
        return [
            self.model_info,
            self.model_pick,
            self.examples,
            self.open_head,
            self.ablate_sites,
            *self.layer.values(),
            *self.head.values(),
            self.mask_layer,
            self.mask_head,
            self.attr_layer,
            self.play_slider,
            self.play_layer,
            self.play_head,
        ]


def _layout_top(p: Page) -> None:
    gr.Markdown(INTRO)
    with gr.Row():
        with gr.Column(scale=2):
            p.model_pick = gr.Dropdown(
                choices=list(models.shipped_models()), label="Model", elem_id="model-picker"
            )
            p.model_info = gr.Markdown(elem_id="model-info")
        with gr.Column(scale=1):
            p.upload = gr.File(
                label="…or upload a checkpoint (model.safetensors + config.json, or a .zip)",
                file_count="multiple",
                elem_id="upload",
            )
    with gr.Row():
        p.input_text = gr.Textbox(
            label="Input", placeholder="e.g. helloworld", elem_id="input-text", scale=3
        )
        p.examples = gr.Dropdown(label="Examples", choices=[], elem_id="examples", scale=1)
    with gr.Row():
        p.step_btn = gr.Button("Step ▶", variant="primary", elem_id="step-btn")
        p.run_btn = gr.Button("Run ▶▶", elem_id="run-btn")
        p.back_btn = gr.Button("◀ Back", elem_id="back-btn")
        p.reset_btn = gr.Button("Reset", elem_id="reset-btn")
        p.beam_btn = gr.Button("Decode with beam search", elem_id="beam-btn")
    p.status = gr.Markdown(elem_id="status")
    p.beam_out = gr.Markdown(elem_id="beam-result")
    with gr.Row():
        with gr.Column():
            p.source_html = gr.HTML(label="Source tokens", elem_id="source-tokens")
        with gr.Column():
            p.output_html = gr.HTML(label="Output tokens", elem_id="output-tokens")
    p.output_text = gr.Textbox(label="Output so far", interactive=False, elem_id="output-text")
    p.slider = gr.Slider(0, 1, value=0, step=1, label="Step (scrub)", elem_id="step-slider")


def _layout_step_tab(p: Page) -> None:
    with gr.Row():
        with gr.Column(scale=2):
            p.plots["topk"] = gr.Plot(label="Next-token probabilities", elem_id="topk-plot")
        with gr.Column(scale=3):
            p.plots["rows_cross"] = gr.Plot(
                label="Rows this step added", elem_id="heatmap-rows-cross"
            )
            p.plots["rows_decoder"] = gr.Plot(
                label="Rows this step added", elem_id="heatmap-rows-decoder"
            )
    p.layer, p.head = {}, {}
    for kind in KINDS:
        with gr.Row():
            p.layer[kind] = gr.Dropdown(label=f"{KIND_TITLES[kind]}: layer", scale=1)
            p.head[kind] = gr.Radio(label="head", scale=3)
        p.plots[kind] = gr.Plot(label=KIND_TITLES[kind], elem_id=f"heatmap-{kind}")
    with gr.Accordion("Model view: every layer × head", open=False):
        gr.Markdown(
            "Pick a head below to open it above (clicking a plotly panel cannot be wired to "
            "Gradio's plot component, so the picker stands in for a click)."
        )
        with gr.Row():
            p.model_kind = gr.Radio(list(KINDS), value="cross", label="attention kind")
            p.open_head = gr.Dropdown(label="open head", choices=[])
        p.plots["model"] = gr.Plot(label="Model view", elem_id="heatmap-model")
    with gr.Accordion("Raw step data (JSON)", open=False):
        p.info = gr.JSON(elem_id="step-info")


def _layout_labs(p: Page) -> None:
    with gr.Tab("Mask lab", elem_id="tab-mask") as p.mask_tab:
        gr.Markdown(
            "Switch a mask off or hide source tokens, and compare the attention and the output "
            "with the masks as trained. Your input runs in a batch with a companion input of "
            "another length, so there is padding to unmask.",
            elem_classes="explain",
        )
        with gr.Row():
            p.causal = gr.Checkbox(label="causal mask off", elem_id="causal-toggle")
            p.padding = gr.Checkbox(label="padding mask off", elem_id="padding-toggle")
            p.blocked = gr.CheckboxGroup(label="block source tokens", elem_id="block-tokens")
        with gr.Row():
            p.mask_kind = gr.Radio(["auto", *KINDS], value="auto", label="show")
            p.mask_layer = gr.Dropdown(label="layer")
            p.mask_head = gr.Dropdown(["mean"], value="mean", label="head")
        p.mask_msg = gr.Markdown(elem_id="mask-message")
        p.mask_plot = gr.Plot(label="before / after / difference", elem_id="heatmap-mask")
        p.mask_probs = gr.Plot(label="next token before vs after", elem_id="mask-next")
    with gr.Tab("Head ablation", elem_id="tab-ablation"):
        p.ablate_sites = gr.CheckboxGroup(label="heads to switch off", elem_id="ablate-heads")
        with gr.Row():
            p.ablate_btn = gr.Button("Rerun with these heads off", elem_id="ablate-btn")
            p.rank_btn = gr.Button("Rank heads by effect", elem_id="rank-btn")
        p.ablate_msg = gr.Markdown()
        p.ablate_plot = gr.Plot(label="probability change", elem_id="ablation-plot")
        p.rank_table = gr.Dataframe(
            headers=["head", "changed outputs", "max |Δp|", "mean |Δp|"], interactive=False
        )
    with gr.Tab("Attribution", elem_id="tab-attribution"):
        with gr.Row():
            p.attr_layer = gr.Dropdown(label="cross-attention layer to compare")
            p.attr_btn = gr.Button("Attribute the newest token", elem_id="attr-btn")
        p.attr_msg = gr.Markdown()
        p.attr_src = gr.Plot(label="source", elem_id="attribution-src")
        p.attr_tgt = gr.Plot(label="previous tokens", elem_id="attribution-tgt")
    with gr.Tab("Checkpoint health", elem_id="tab-health"):
        p.health_btn = gr.Button("Run the health check", elem_id="health-btn")
        p.health_html = gr.HTML(elem_id="health-report")
        p.health_plot = gr.Plot(label="head roles", elem_id="health-heads")
    with gr.Tab("Training playback", elem_id="tab-playback") as p.play_tab:
        with gr.Row():
            p.play_slider = gr.Slider(0, 1, value=0, step=1, label="snapshot", scale=3)
            p.play_layer = gr.Dropdown(label="layer", scale=1)
            p.play_head = gr.Dropdown(["mean"], value="mean", label="head", scale=1)
        p.play_msg = gr.Markdown()
        p.play_plot = gr.Plot(label="cross-attention on the probe", elem_id="playback-plot")
    with gr.Tab("Export", elem_id="tab-export"):
        gr.Markdown("Every figure has a camera button (PNG) in its toolbar. Files of the state:")
        with gr.Row():
            p.exp_html = gr.Button("HTML report", elem_id="export-html")
            p.exp_json = gr.Button("JSON trace", elem_id="export-json")
            p.exp_npz = gr.Button("NPZ trace", elem_id="export-npz")
        p.exp_msg = gr.Markdown()
        p.exp_file = gr.File(label="download", elem_id="export-file")


def _wire_decoding(p: Page) -> None:
    outs = p.decode_outputs()
    for btn, fn, name in ((p.step_btn, session.step, "step"), (p.run_btn, session.run, "run")):
        btn.click(
            lambda t, s, fn=fn: p.decode(fn(s, t)), [p.input_text, p.state], outs,
            api_name=name, **MODEL_EVENTS,
        )  # fmt: skip
    p.input_text.submit(
        lambda t, s: p.decode(session.start(s, t)), [p.input_text, p.state], outs,
        api_name="start", **MODEL_EVENTS,
    )  # fmt: skip
    p.back_btn.click(
        lambda s: p.decode(session.back(s)), [p.state], outs, api_name="back", **MODEL_EVENTS
    )
    p.reset_btn.click(
        lambda s: p.decode(session.reset(s)), [p.state], outs, api_name="reset", **MODEL_EVENTS
    )
    p.slider.release(
        lambda s, v: p.decode(session.goto(s, v)), [p.state, p.slider], outs, **INTERNAL
    )
    for kind in KINDS:
        p.layer[kind].input(
            lambda s, lay, h, kind=kind: p.decode(session.set_view(s, kind, lay, h)),
            [p.state, p.layer[kind], p.head[kind]], outs, **INTERNAL,
        )  # fmt: skip
        p.head[kind].input(
            lambda s, lay, h, kind=kind: p.decode(session.set_view(s, kind, lay, h)),
            [p.state, p.layer[kind], p.head[kind]], outs, **INTERNAL,
        )  # fmt: skip
    p.model_kind.input(
        lambda s, k: p.decode(session.set_model_kind(s, k)), [p.state, p.model_kind], outs,
        **INTERNAL,
    ).then(lambda s: gr.Dropdown(choices=session.head_sites(s)), [p.state], [p.open_head], **HIDDEN)  # fmt: skip
    p.open_head.input(
        lambda s, site: p.decode(session.open_head(s, site)), [p.state, p.open_head], outs,
        **INTERNAL,
    )  # fmt: skip
    p.examples.input(lambda e: e or gr.skip(), [p.examples], [p.input_text], **HIDDEN)
    p.beam_btn.click(session.beam, [p.state], [p.beam_out], **INTERNAL)
    p.model_pick.input(
        lambda s, m, t: p.decode(session.choose_model(_with_text(s, t), m)),
        [p.state, p.model_pick, p.input_text], outs, **INTERNAL,
    ).then(p.controls, [p.state], p.control_outputs(), **HIDDEN)  # fmt: skip
    p.upload.upload(
        lambda s, f, t: p.decode(session.upload_model(_with_text(s, t), f)),
        [p.state, p.upload, p.input_text], outs, **INTERNAL,
    ).then(p.controls, [p.state], p.control_outputs(), **HIDDEN)  # fmt: skip


def forget_session(state: SessionState) -> None:
    """Free the server-side stepper of a session whose state gradio deletes.

    The ``delete_callback`` of the page's ``gr.State``: gradio calls it when the state
    expires (``SESSION_TTL_S`` without a decoding event) or an hour after the tab closed.
    """
    sid = getattr(state, "sid", "")
    if sid:
        with _STEP_LOCK:
            _STEPPERS.pop(sid, None)


def _with_text(state: SessionState, text: str) -> SessionState:
    """The state with the typed text as its input (decoding restarts on it)."""
    from dataclasses import replace

    return replace(state, text=text or "")


def _wire_labs(p: Page) -> None:
    mask_in = [p.state, p.causal, p.padding, p.blocked, p.mask_kind, p.mask_layer, p.mask_head]
    mask_out = [p.mask_plot, p.mask_probs, p.mask_msg]

    def mask(s, causal, padding, blocked, kind, layer, head):
        v = labs.mask_lab(
            s, causal, padding, blocked, kind, None if layer == "last" else layer, head
        )
        return *v.figures, v.message

    for control in mask_in[1:]:
        control.input(mask, mask_in, mask_out, **INTERNAL)
    p.mask_tab.select(_block_choices, [p.state, p.blocked], [p.blocked], **HIDDEN).then(
        mask, mask_in, mask_out, **INTERNAL
    )
    p.ablate_btn.click(
        lambda s, sites: _lab(labs.ablation(s, sites), 1), [p.state, p.ablate_sites],
        [p.ablate_plot, p.ablate_msg], **INTERNAL,
    )  # fmt: skip
    p.rank_btn.click(
        lambda s: _table(labs.rank_heads(s)), [p.state], [p.rank_table, p.ablate_msg], **INTERNAL
    )
    p.attr_btn.click(
        lambda s, lay: _lab(labs.attribution(s, lay), 2), [p.state, p.attr_layer],
        [p.attr_src, p.attr_tgt, p.attr_msg], **INTERNAL,
    )  # fmt: skip
    p.health_btn.click(
        lambda s: _swap(_lab(panels.health(s), 1)), [p.state], [p.health_html, p.health_plot],
        **INTERNAL,
    )  # fmt: skip
    play_in = [p.state, p.play_slider, p.play_layer, p.play_head]
    for event in (p.play_slider.input, p.play_layer.input, p.play_head.input, p.play_tab.select):
        event(
            lambda s, i, lay, h: _lab(panels.playback(s, i, lay, h), 1), play_in,
            [p.play_plot, p.play_msg], **INTERNAL,
        )  # fmt: skip
    for btn, what in ((p.exp_html, "html"), (p.exp_json, "json"), (p.exp_npz, "npz")):
        btn.click(
            lambda s, what=what: _file(panels.export(s, what)), [p.state],
            [p.exp_file, p.exp_msg], **INTERNAL,
        )  # fmt: skip


def _block_choices(state: SessionState, chosen: list[str]):
    """Source tokens of the current input as "position: token" choices."""
    choices = [f"{i}: {t}" for i, t in enumerate(state.src_pieces)]
    return gr.CheckboxGroup(choices=choices, value=[c for c in chosen or [] if c in choices])


def _lab(view: labs.LabView, n: int) -> tuple:
    figs = (view.figures + [None] * n)[:n]
    return *figs, view.message


def _swap(values: tuple) -> tuple:
    return values[-1], *values[:-1]


def _table(view: labs.LabView) -> tuple:
    return view.rows, view.message


def _file(view: labs.LabView) -> tuple:
    return view.path, view.message


def build_app(
    model: str | None = None, device: str = "cpu", *, session_ttl_s: float = SESSION_TTL_S
) -> gr.Blocks:
    """The whole page, on ``model`` (a folder; default the first shipped model).

    A session's state (and its server-side stepper) is freed ``session_ttl_s`` seconds after
    its last decoding event; gradio's temporary files (uploads, exports) after an hour.
    """
    title = "attnviz — attention inspector"
    # analytics off: a local inspection tool sends nothing anywhere
    with gr.Blocks(title=title, delete_cache=CACHE_CLEANUP, analytics_enabled=False) as demo:
        p = Page(session.new_state(model, device), session_ttl_s)
        _layout_top(p)
        with gr.Tabs():
            with gr.Tab("Step through", elem_id="tab-step"):
                _layout_step_tab(p)
            _layout_labs(p)
        _wire_decoding(p)
        _wire_labs(p)
        demo.load(p.controls, [p.state], p.control_outputs(), **HIDDEN).then(
            lambda s: p.decode(session.render(s)), [p.state], p.decode_outputs(), **INTERNAL
        )
    demo.page = p  # for tests and scripts
    return demo


def launch_kwargs(host: str = "127.0.0.1", port: int | None = 7860, share: bool = False) -> dict:
    """Arguments of ``demo.launch`` shared by :func:`main` and the tests.

    Binds ``host`` only (default loopback: this machine alone); gradio serves no file outside
    its own cache and the files the app returns (nothing in ``allowed_paths``).
    """
    css = CSS_FILE.read_text() if CSS_FILE.is_file() else None
    return dict(
        server_name=host,
        server_port=port,
        share=share,
        max_file_size=MAX_FILE_SIZE,
        state_session_capacity=MAX_SESSIONS,
        css=css,
        theme=gr.themes.Soft(),
        show_error=True,
    )


def exposure_warnings(host: str, share: bool) -> list[str]:
    """Warnings to print before launching when the app is reachable beyond this machine."""
    out = [SHARE_WARNING] if share else []
    if host not in ("127.0.0.1", "localhost", "::1"):
        out.append(
            f"attnviz app: WARNING: binding {host}: the app is reachable from other machines "
            "on your network(s), without a password."
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """``attnviz app [--model PATH] [--host H] [--port P] [--device D] [--share] [--no-browser]``."""
    ap = argparse.ArgumentParser(prog="attnviz app", description="the attention inspector")
    ap.add_argument("--model", help="checkpoint folder (default: the first under models/)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=7860)
    ap.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    ap.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    ap.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    args = ap.parse_args(argv)
    try:
        device = models.resolve_device(args.device)
        model = args.model or next(iter(models.shipped_models().values()), None)
        if model is None:
            raise AttnvizError("no model under models/: train one or pass --model PATH")
        models.get_checkpoint(model, device)  # fail now, with one line, not in the page
    except AttnvizError as exc:
        print(f"attnviz app: {exc}", file=sys.stderr)
        return 2
    for line in exposure_warnings(args.host, args.share):
        print(line, file=sys.stderr, flush=True)
    demo = build_app(model, device)
    demo.queue(default_concurrency_limit=2)
    inbrowser = sys.stdout.isatty() and not args.no_browser
    demo.launch(inbrowser=inbrowser, **launch_kwargs(args.host, args.port, args.share))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
