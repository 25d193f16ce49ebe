"""What the step-through page shows for a :class:`SessionState`: text, HTML and figures."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import plotly.graph_objects as go
import torch

from .. import plots
from ..checkpoint import Checkpoint
from ..devices import as_numpy
from ..errors import AttnvizError
from ..model import KINDS
from ..plots import KIND_TITLES
from ..record import Trace
from ..tasks import TASKS, get_task
from ..tokenizer import BOS, UNK
from . import figures, models
from .state import (
    _STEP_LOCK,
    FIGURES,
    DecodeView,
    SessionState,
    checkpoint,
    head_choices,
    head_label,
    head_weights,
    layer_count,
    synced_stepper,
)


def _token_html(pieces: list[str], mark: set[int], cls: str, tip: str = "") -> str:
    spans = []
    for i, p in enumerate(pieces):
        label = html.escape(p.replace(" ", "␣")) or "∅"
        extra = f' {cls}" title="{html.escape(tip)}' if i in mark else ""
        spans.append(f'<span class="tok{extra}">{label}</span>')
    return f'<div class="tokens">{"".join(spans) or "&nbsp;"}</div>'


def _messages(state: SessionState, ckpt: Checkpoint) -> list[str]:
    out = []
    if not state.started:
        task = ckpt.task or "this model's task"
        examples = models.examples_for(ckpt.task, 1)
        eg = f" (e.g. `{examples[0]}`)" if examples else ""
        return [f"Type an input for {task}{eg} and press **Step** or **Run**."]
    if state.unknown:
        pieces = ", ".join(f"`{html.escape(u)}`" for u in state.unknown)
        out.append(f"⚠️ Not in this model's vocabulary, read as `<unk>`: {pieces}.")
    if ckpt.task in TASKS:
        lengths = get_task(ckpt.task).lengths
        if len(state.src_ids) > lengths.stop - 1:
            out.append(
                f"⚠️ {len(state.src_ids)} tokens: longer than anything this model was trained on "
                f"({lengths.start}–{lengths.stop - 1}); expect mistakes."
            )
    if state.done:
        out.append(f"✅ Done after {state.step} steps.")
    elif state.step == 0:
        out.append("Ready: press **Step** to decode one token, **Run** to decode to the end.")
    return out


def render(state: SessionState, message: str = "") -> DecodeView:
    """Build the whole step-through view of ``state`` (outputs, figures, messages)."""
    try:
        ckpt = checkpoint(state)
    except AttnvizError as exc:
        msg = message or f"⚠️ {html.escape(str(exc))}"
        figs = {name: figures.placeholder("no model loaded") for name in FIGURES}
        return DecodeView(state, "", "", "", msg, {"step": 0, "done": False}, figs)
    tok = ckpt.tgt_tokenizer
    shown = state.tokens[: state.step]
    out_pieces = [tok.token(t) for t in shown]
    output = tok.decode(shown)
    unk_at = {i for i, t in enumerate(state.src_ids) if t == UNK}
    newest = {len(shown) - 1} if shown else set()
    info: dict[str, Any] = {
        "step": state.step,
        "done": state.done,
        "output": output,
        "tokens": out_pieces,
        "max_steps": state.max_steps,
        "decoded": len(state.tokens),
    }
    if state.started:
        with _STEP_LOCK:
            stepper = synced_stepper(state, ckpt)
            trace = stepper.trace(upto=state.step)
            last = stepper.steps[state.step - 1] if state.step else None
        if last is not None:
            info.update(newest=tok.token(last.token), prob=round(last.prob, 6))
        figs = _figures(state, ckpt, trace, last)
    else:
        figs = {name: figures.placeholder("type an input and press Step") for name in FIGURES}
    lines = ([message] if message else []) + _messages(state, ckpt)
    return DecodeView(
        state=state,
        output=output,
        output_html=_token_html(out_pieces, newest, "newest", "the token this step added"),
        source_html=_token_html(state.src_pieces, unk_at, "unk", "unknown: read as <unk>"),
        message="  \n".join(lines),
        info=info,
        figures=figs,
    )


def _axes(state: SessionState, ckpt: Checkpoint) -> dict[str, tuple[list[str], list[str]]]:
    """(key tokens, query tokens) of each kind at the shown step."""
    src = [p if i != UNK else "<unk>" for p, i in zip(state.src_pieces, state.src_ids, strict=True)]
    tok = ckpt.tgt_tokenizer
    tgt = [tok.token(BOS), *(tok.token(t) for t in state.tokens[: max(state.step - 1, 0)])]
    return {"encoder_self": (src, src), "decoder_self": (tgt, tgt), "cross": (src, tgt)}


def _view_of(state: SessionState, ckpt: Checkpoint, kind: str) -> tuple[int, str]:
    layer, head = state.view.get(kind, [layer_count(ckpt, kind) - 1, "mean"])
    layer = int(np.clip(int(layer), 0, layer_count(ckpt, kind) - 1))
    if head not in head_choices(ckpt):
        head = "mean"
    return layer, head


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
        return plots.heads_grid(w, keys, queries, mask=np.broadcast_to(mask, w.shape))
    z = head_weights(w, head)  # [Tq, Tk]
    fig = plots.heatmap(z, keys, queries, mask=mask, title=title)
    if kind != "encoder_self":
        figures.mark_row(fig, w.shape[1] - 1, w.shape[2])
    return fig


def _figures(state: SessionState, ckpt: Checkpoint, trace: Trace, last) -> dict[str, go.Figure]:
    axes = _axes(state, ckpt)
    figs: dict[str, go.Figure] = {}
    for kind in KINDS:
        if kind != "encoder_self" and state.step == 0:
            figs[kind] = figures.placeholder(f"{KIND_TITLES[kind]}: press Step to add rows")
            continue
        layer, head = _view_of(state, ckpt, kind)
        figs[kind] = kind_figure(trace, kind, layer, head, *axes[kind], state.step)
    kind = state.model_kind if state.step or state.model_kind == "encoder_self" else None
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
    if last is None:
        for name in ("topk", "rows_cross", "rows_decoder"):
            figs[name] = figures.placeholder("press Step: each step's numbers appear here")
        return figs
    tok = ckpt.tgt_tokenizer
    query = axes["cross"][1][-1]
    figs["topk"] = plots.topk_bar(
        as_numpy(last.probs),
        tok.tokens,
        k=state.top_k,
        chosen=last.token,
        title=f"step {last.step + 1}: after “{html.escape(query)}”, chose "
        f"“{html.escape(tok.token(last.token))}” (p = {last.prob:.3f})",
    )
    for name, kind in (("rows_cross", "cross"), ("rows_decoder", "decoder_self")):
        rows = [last.attention[kind, i] for i in trace.layers(kind)]  # each [H, Tk]
        w = as_numpy(torch.stack(rows))[:, :, None]  # [L, H, 1, Tk]
        fig = plots.heads_grid(w, axes[kind][0], [query])
        fig.update_layout(
            title=f"{KIND_TITLES[kind]}: rows added at step {last.step + 1}", height=300
        )
        figs[name] = fig
    return figs
