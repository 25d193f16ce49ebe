"""The step view as plotly figures, for Python users, exports and tests (the page draws the
same views itself, from :func:`attnviz.app.views.payload`): pure functions of the state, the
decoder's trace and its steps."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.model import KINDS
from ..core.record import Trace
from ..decode.greedy import StepResult
from ..render import plots
from ..render.plots import KIND_TITLES
from . import figures
from .decoders import DECODERS
from .inputs import note
from .kinds import is_encoder_only
from .reading import read
from .state import SessionState, checkpoint_of, head_label, head_weights, layer_count
from .views import src_labels, view_of
from .workers import remote

FIGURES = ("encoder_self", "decoder_self", "cross", "topk", "rows_cross", "rows_decoder", "model")


# -- the same views as plotly figures (Python users, exports, tests) ------------------------------
def _axes(state: SessionState, ckpt: Checkpoint) -> dict[str, tuple[list[str], list[str]]]:
    """(key tokens, query tokens) of each kind at the shown step."""
    src = src_labels(state, ckpt)
    tok = ckpt.tgt_tokenizer
    one_stack = not ckpt.config.has_cross  # a prompt, or (encoder-only) no output
    start = src if one_stack else [tok.token(ckpt.config.bos_id)]
    tgt = [*start, *(tok.token(t) for t in state.tokens[: max(state.step - 1, 0)])]
    return {"encoder_self": (src, src), "decoder_self": (tgt, tgt), "cross": (src, tgt)}


def kind_figure(
    trace: Trace, kind: str, layer: int, head: str, keys: list[str], queries: list[str], step: int
) -> go.Figure:
    """One kind's attention at one layer: a head ``"H<h>"``, the ``"mean"``, or ``"all heads"``.

    Args:
        trace: batch-1 trace holding ``kind`` (weights ``[1, H, Tq, Tk]``).
        keys / queries: ``Tk`` / ``Tq`` token labels.
        step: decoding step shown; its row is outlined for decoder kinds.
    """
    w = trace.numpy(kind, layer)[0]  # [H, Tq, Tk]
    mask = trace.numpy(kind, layer, "mask")[0, 0].astype(bool)  # [Tq, Tk]
    title = f"{KIND_TITLES[kind]} · layer {layer} · {head_label(head)}"
    if kind != "encoder_self":
        title += f" · step {step}"
    if head == "all heads":
        fig = plots.heads_grid(w, keys, queries, mask=np.broadcast_to(mask, w.shape))
        return fig.update_layout(title=title)
    z = head_weights(w, head)  # [Tq, Tk]
    fig = plots.heatmap(z, keys, queries, mask=mask, title=title)
    if kind != "encoder_self":
        figures.mark_row(fig, w.shape[1] - 1, w.shape[2])
    return fig


def figures_of(
    state: SessionState, ckpt: Checkpoint, trace: Trace, steps: Sequence[StepResult]
) -> dict[str, go.Figure]:
    """Every view of ``state`` as a plotly figure, by name (:data:`FIGURES`).

    Args:
        trace: the decoder's trace of the first ``state.step`` rows (batch 1).
    """
    axes = _axes(state, ckpt)
    figs: dict[str, go.Figure] = {}
    for kind in KINDS:
        if not layer_count(ckpt, kind):  # a kind this model does not have
            figs[kind] = figures.placeholder(note(ckpt, "step") or f"no {KIND_TITLES[kind]}")
            continue
        if kind != "encoder_self" and state.step == 0:
            figs[kind] = figures.placeholder(f"{KIND_TITLES[kind]}: press Step to add rows")
            continue
        layer, head = view_of(state, ckpt, kind)
        figs[kind] = kind_figure(trace, kind, layer, head, *axes[kind], state.step)
    kind = state.model_kind if layer_count(ckpt, state.model_kind) else "decoder_self"
    kind = kind if state.step or kind == "encoder_self" else None
    if kind is None:
        figs["model"] = figures.placeholder("model view: press Step (or pick encoder_self)")
    else:
        layers = trace.layers(kind)
        w = np.stack([trace.numpy(kind, i)[0] for i in layers])  # [L, H, Tq, Tk]
        m = np.stack([trace.numpy(kind, i, "mask")[0, 0] for i in layers]).astype(bool)
        figs["model"] = plots.heads_grid(
            w, *axes[kind], mask=np.broadcast_to(m[:, None], w.shape), token_hover=False
        )
        figs["model"].update_layout(title=f"Model view: {KIND_TITLES[kind]}, layers × heads")
    if state.step == 0:
        for name in ("topk", "rows_cross", "rows_decoder"):
            figs[name] = figures.placeholder("press Step: each step's numbers appear here")
        return figs
    last = steps[state.step - 1]
    tok = ckpt.tgt_tokenizer
    query = axes["decoder_self"][1][-1]
    figs["topk"] = plots.topk_bar(
        as_numpy(last.probs),
        tok.tokens,
        k=state.top_k,
        chosen=last.token,
        title=f"step {last.step + 1}: after “{html.escape(query)}”, chose "
        f"“{html.escape(tok.token(last.token))}” (p = {last.prob:.3f})",
    )
    for name, kind in (("rows_cross", "cross"), ("rows_decoder", "decoder_self")):
        if not layer_count(ckpt, kind):
            figs[name] = figures.placeholder(note(ckpt, "step") or f"no {KIND_TITLES[kind]}")
            continue
        w = np.stack([trace.numpy(kind, i)[0, :, -1:] for i in trace.layers(kind)])
        fig = plots.heads_grid(w, axes[kind][0], [query])  # [L, H, 1, Tk]
        fig.update_layout(title=f"{KIND_TITLES[kind]}: rows added at step {last.step + 1}")
        figs[name] = fig
    return figs


@remote()
def step_figures(state: SessionState) -> dict[str, go.Figure]:
    """Every view of ``state`` as a plotly figure (see :func:`figures_of`); ``session.figures``."""
    if not state.started:
        return {name: figures.placeholder("type an input and press Step") for name in FIGURES}
    ckpt = checkpoint_of(state)
    if is_encoder_only(ckpt):  # the one pass over the sentence
        return figures_of(state, ckpt, read(state, ckpt).trace, [])
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        trace = stepper.trace(upto=state.step)
        steps = stepper.steps
    return figures_of(state, ckpt, trace, steps)
