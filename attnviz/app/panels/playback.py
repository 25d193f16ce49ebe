"""The Training playback panel, whole: its logic (the attention on the probe input at each
training snapshot and, where the run measured them, the induction scores over training;
snapshots cached per file version) and, at the end, its tab on the page (:func:`layout`,
:func:`wire`, :func:`faces`: the snapshots' range follows the checkpoint file).

Registered by one line in :data:`attnviz.app.panels.PANELS` (``page="playback"``). The logic
imports no gradio; the page part imports it when the page is built.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from ...core.devices import as_numpy
from ...core.errors import AttnvizError, InputError
from ...core.masks import causal_mask
from ...render import plots
from ...train.induction import best_of
from ...train.snapshots import Snapshots
from ..lru import LRU
from ..pagetext import THEME_JS
from ..state import (
    SessionState,
    checkpoint_of,
    has_snapshots,
    head_choices,
    head_label,
    head_weights,
    layer_index,
)
from ..views import pieces_text
from ..workers import remote
from .lab_result import stopped
from .labs import LabView, error_view
from .registry import Face

_SNAPS = LRU(16)  # snapshots by (model, version)


# -- training playback --------------------------------------------------------------------------
def snapshots(state: SessionState) -> Snapshots:
    """The training snapshots of the loaded checkpoint (cached per file version)."""
    if not has_snapshots(state):
        raise InputError("this checkpoint has no attention snapshots (snapshots.safetensors)")
    path = Path(state.model)
    key = (str(path), (path / "snapshots.safetensors").stat().st_mtime_ns)
    snaps = _SNAPS.get(key)
    if snaps is None:
        snaps = Snapshots.load(path)
        _SNAPS.put(key, snaps)
    return snaps


def playback_steps(state: SessionState) -> list[int]:
    """Training steps with a snapshot ([] when the checkpoint has none)."""
    try:
        return list(snapshots(state).steps)
    except AttnvizError:
        return []


@remote(stopped)
def playback(
    state: SessionState, index: int = 0, layer: int | str | None = None, head: str = "mean"
) -> LabView:
    """The probe input's cross-attention at snapshot ``index`` (with loss and output then);
    a decoder-only model's self-attention over its probe sequence. Where the run measured
    induction (the repeat task), a second figure: the scores and each half's loss over
    training, the snapshot shown marked."""
    try:
        snaps = snapshots(state)
        kind = snaps.shown_kind
        layers = sorted(layer for k, layer in snaps.weights if k == kind)
        layer = layer_index(layer, layers)
    except AttnvizError as exc:
        return error_view(exc)
    i = int(np.clip(int(index or 0), 0, len(snaps.steps) - 1))
    w = head_weights(as_numpy(snaps.weights[kind, layer][i]), head)  # [Tq, Tk]
    tok = checkpoint_of(state).tgt_tokenizer
    which = head_label(head)
    title = (
        f"{'cross' if kind == 'cross' else 'self'}-attention L{layer} ({which})<br>"
        f"<sup>at training step {snaps.steps[i]} · loss {snaps.losses[i]:.4f}</sup>"
    )
    if kind == "cross":
        y = [tok.token(checkpoint_of(state).config.bos_id), *snaps.probe_tgt][: w.shape[0]]
        fig = plots.heatmap(w, snaps.probe_src, y, title=title, zmax=1.0)
    else:  # one sequence on both axes, the causal mask grey
        seq = list(snaps.probe_src)[: w.shape[0]]
        blocked = as_numpy(causal_mask(*w.shape))
        fig = plots.heatmap(w, seq, seq, title=title, zmax=1.0, mask=blocked)
    figs = [fig]
    if snaps.scores:
        figs.append(plots.induction_curves(snaps.steps, snaps.scores, at=i))
    msg = (
        f"Probe input “{html.escape(pieces_text(snaps.probe_src, getattr(tok, 'kind', None)))}” "
        f"at step {snaps.steps[i]} of {snaps.steps[-1]}: loss {snaps.losses[i]:.4f}, "
        f"greedy output “{html.escape(snaps.outputs[i])}”."
    )
    if snaps.scores:
        s = snaps.scores[i]
        best, prev = best_of(s)
        msg += (
            f" Best induction score {best:.2f}, previous-token score "
            f"{prev:.2f}; loss {s['loss_first']:.2f} on the first run of "
            f"random tokens, {s['loss_second']:.2f} on its repeat."
        )
    return LabView(figs, msg)


# -- on the page --------------------------------------------------------------------------------
def layout(p) -> None:
    """The Training playback tab: the snapshot slider, layer, head, Play, the figures."""
    my = p.part("playback")
    import gradio as gr

    from ..ui_common import STALE_OK

    with gr.Tab("Training playback", elem_id="tab-playback") as my.play_tab:
        with gr.Row():
            my.play_slider = gr.Slider(0, 1, value=0, step=1, label="snapshot", scale=3)
            my.play_layer = gr.Dropdown(label="layer", scale=1, allow_custom_value=STALE_OK)
            my.play_head = gr.Dropdown(
                ["mean"], value="mean", label="head", scale=1, allow_custom_value=STALE_OK
            )
            my.play_btn = gr.Button("Play ▶", elem_id="play-btn", scale=1)
        my.play_timer = gr.Timer(0.6, active=False)
        my.play_msg = gr.Markdown(elem_id="play-message")
        my.play_plot = gr.Plot(label="attention on the probe", elem_id="playback-plot")
        my.play_curves = gr.Plot(  # a run that measured induction heads (the repeat task)
            label="induction heads forming", elem_id="playback-curves", visible=False
        )


def wire(p) -> None:
    """A snapshot drawn when the slider, layer or head changes or the tab shows; Play steps
    the slider on a timer until the last snapshot; the tab tracked in ``p.active``."""
    my = p.part("playback")
    import gradio as gr

    from ..ui_common import FAST, HIDDEN, INTERNAL

    play_in = [p.state, my.play_slider, my.play_layer, my.play_head, p.theme]
    gr.on(
        [my.play_slider.input, my.play_layer.input, my.play_head.input, my.play_tab.select],
        _shown, play_in, [my.play_plot, my.play_curves, my.play_msg], js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.play_btn.click(_toggle, [my.play_btn], [my.play_btn, my.play_timer], **HIDDEN, **FAST)
    my.play_timer.tick(
        _tick, play_in,
        [my.play_slider, my.play_plot, my.play_curves, my.play_msg, my.play_btn, my.play_timer],
        js=THEME_JS, **INTERNAL,
    )  # fmt: skip
    my.play_tab.select(lambda: "play", None, [p.active], **HIDDEN, **FAST)


def faces(p) -> list[Face]:
    """The menus for the loaded model; the snapshots' range renewed with the checkpoint file."""
    my = p.part("playback")

    def renewed(state: SessionState, values: dict) -> dict:
        try:
            ckpt = checkpoint_of(state)
        except AttnvizError:
            return {}
        return {my.play_slider: controls(p, state, ckpt)[my.play_slider]}

    return [
        Face(
            "playback",
            [my.play_slider],
            rerun=renewed,
            controls=lambda s, ckpt: controls(p, s, ckpt),
            control_outputs=[my.play_slider, my.play_layer, my.play_head, my.play_btn],
        )
    ]


def controls(p, state: SessionState, ckpt) -> dict:
    """The tab's menus for ``ckpt``: the snapshots' range, the decoder layers and heads."""
    my = p.part("playback")
    import gradio as gr

    steps = playback_steps(state)
    dec = [f"L{i}" for i in range(ckpt.config.n_decoder_layers)]
    heads = [h for h in head_choices(ckpt) if h != "all heads"]
    return {
        my.play_slider: gr.Slider(maximum=max(len(steps) - 1, 1), value=0),
        my.play_layer: gr.Dropdown(choices=dec, value=dec[-1] if dec else None),
        my.play_head: gr.Dropdown(choices=heads, value="mean"),
        my.play_btn: gr.Button(interactive=bool(steps)),
    }


def _shown(state: SessionState, index, layer, head, theme: str = "light") -> tuple:
    """The attention at one snapshot, and (where the run measured them) the induction
    scores and losses over training with that snapshot marked."""
    import gradio as gr

    from ..ui_common import dark

    view = playback(state, index, layer, head)
    figs = dark(view.figures, theme) if view.figures else []
    curves = gr.Plot(value=figs[1], visible=True) if len(figs) > 1 else gr.Plot(visible=False)
    return (figs[0] if figs else None), curves, view.message


def _toggle(label: str) -> tuple:
    import gradio as gr

    playing = str(label).startswith("Pause")
    return gr.Button("Play ▶" if playing else "Pause ⏸"), gr.Timer(active=not playing)


def _tick(state: SessionState, index, layer, head, theme: str) -> tuple:
    import gradio as gr

    nxt = int(index or 0) + 1
    if nxt >= len(playback_steps(state)):  # the end: stop
        return (gr.skip(),) * 4 + (gr.Button("Play ▶"), gr.Timer(active=False))
    fig, curves, msg = _shown(state, nxt, layer, head, theme)
    return nxt, fig, curves, msg, gr.skip(), gr.skip()
