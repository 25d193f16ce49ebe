"""The app's experiment panels: mask lab, head ablation, attribution, health, playback, export.

Each function takes the :class:`~attnviz.app.session.SessionState` of the step-through view
and returns a :class:`LabView` (figures and a markdown message); every one is a thin layer
over :mod:`attnviz.analysis` / :mod:`attnviz.report`. User errors come back as the message.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import torch

from .. import analysis, plots
from ..analysis import masking
from ..checkpoint import Checkpoint
from ..errors import AttnvizError, InputError
from ..plots import KIND_TITLES
from ..record import DropMask
from ..tasks import TASKS, get_task
from ..tokenizer import BOS
from . import figures, models
from .state import SessionState, checkpoint, head_label, head_weights, layer_index

#: One sentence per mask-lab toggle, for someone learning.
EXPLAIN = {
    "causal": (
        "**Causal mask off:** the causal mask stops each output position from looking at "
        "later positions; without it, when the whole output is fed in at once (as in "
        "training), a position can peek at the very token it is meant to predict."
    ),
    "padding": (
        "**Padding mask off:** sentences in a batch are padded with `<pad>` to one length and "
        "the padding mask keeps real tokens from attending to those pads; without it the "
        "shorter sentence's attention leaks onto meaningless `<pad>` positions."
    ),
    "block": (
        "**Blocked source tokens:** a blocked token is hidden from every attention layer, as if "
        "it were padding, so the model has to produce its output without ever looking at it."
    ),
}
PADDED_ROWS = (
    "Grey rows belong to `<pad>` query positions: their outputs are thrown away, so their "
    "attention means nothing and is not shown."
)


@dataclass
class LabView:
    """What one panel shows: figures (in panel order) and a markdown message."""

    figures: list[go.Figure] = field(default_factory=list)
    message: str = ""
    rows: list[list] = field(default_factory=list)  # table rows, where the panel has a table
    path: str | None = None  # a written file, for the export buttons


def _error(exc: Exception, n_figures: int = 1) -> LabView:
    figs = [figures.placeholder("see the message above") for _ in range(n_figures)]
    return LabView(figs, f"⚠️ {html.escape(str(exc))}")


def _started(state: SessionState) -> Checkpoint:
    if not state.started:
        raise InputError("type an input and press Step (or Run) first")
    return checkpoint(state)


def parse_sites(sites: Sequence[str]) -> list[tuple[str, int, int]]:
    """``["cross L1 H2", ...]`` -> ``[("cross", 1, 2), ...]``."""
    out = []
    for site in sites or ():
        m = re.fullmatch(r"(\w+) L(\d+) H(\d+)", str(site).strip())
        if not m:
            raise InputError(f"not a head: {site!r}; heads read like 'cross L1 H2'")
        out.append((m[1], int(m[2]), int(m[3])))
    return out


# -- mask lab -----------------------------------------------------------------------------------
def companion(ckpt: Checkpoint, text: str) -> str:
    """A second input that makes a padded batch with ``text`` (longer when possible)."""
    n = len(ckpt.src_tokenizer.split(text))
    task = get_task(ckpt.task) if ckpt.task in TASKS else None
    if task is not None:
        longest = task.lengths.stop - 1
        length = min(n + 4, longest) if n < longest else max(task.lengths.start, n - 4)
        if length != n:
            return task.examples("test", 1, seed=3, length=length)[0].src
    sep = " " if ckpt.src_tokenizer.kind == "word" else ""
    return sep.join([text, text]) if 2 * n <= ckpt.config.max_len else text[: max(1, n // 2)]


def mask_lab(
    state: SessionState,
    causal_off: bool = False,
    padding_off: bool = False,
    blocked: Sequence[int | str] = (),
    kind: str = "auto",
    layer: int | str | None = None,
    head: str = "mean",
) -> LabView:
    """Weights before / after / difference and the output change when masks change.

    Args:
        causal_off: drop the decoder's causal mask (greedy output recomputed without cache).
        padding_off: drop the padding masks; the input runs in a batch with a companion
            input of another length (see :func:`companion`) so there is padding to unmask.
        blocked: source positions of the input to block (ints or ``"3: x"`` labels).
        kind: attention kind shown (``"auto"``: the one the change acts on).
        layer, head: which layer (default last) and ``"mean"`` or ``"H<h>"``.
    Returns:
        Figures: the before/after/difference heatmaps and the next-token distribution
        before vs after at the current step; the message says what changed.
    """
    try:
        ckpt = _started(state)
        positions = [int(str(b).split(":")[0]) for b in blocked or ()]
        text = state.text
        texts = [text, companion(ckpt, text)]
        targets = ckpt.predict_batch(texts)  # teacher-force the model's own outputs
        edits = [DropMask("causal")] * causal_off + [DropMask("padding")] * padding_off
        src_len = [len(ckpt.encode_source(t).ids) for t in texts]
        width = max(src_len)
        block = None
        if positions:
            bad = [p for p in positions if not 0 <= p < src_len[0]]
            if bad:
                raise InputError(f"source positions to block must be in 0..{src_len[0] - 1}")
            block = torch.zeros(2, width, dtype=torch.bool, device=ckpt.device)
            block[0, positions] = True
        exp = masking.experiment(  # one run for any mix of the three changes
            "mask lab", ckpt, texts, targets, edits, blocked=block, recompute=causal_off
        )
    except AttnvizError as exc:
        return _error(exc, 2)
    row = 1 if padding_off and src_len[0] == width and src_len[1] < width else 0
    if kind == "auto":
        kind = "decoder_self" if causal_off else "encoder_self" if padding_off else "cross"
    layers = exp.before.trace.layers(kind)
    # a layer chosen for another kind may not exist here: clip rather than refuse
    layer = layers[-1] if layer in (None, "") else int(str(layer).lstrip("L"))
    layer = int(np.clip(layer, 0, layers[-1]))
    fig, tgt_len, padded = _mask_figure(ckpt, exp, texts, targets, row, kind, layer, head, width)
    pos = min(state.step, tgt_len - 1)
    p0, p1 = exp.before.probs[row, pos], exp.after.probs[row, pos]  # [V] each
    ids = figures.top_ids(p0, p1, k=8)
    tok = ckpt.tgt_tokenizer
    probs = figures.paired_bars(
        {"masks as trained": p0[ids], "after the change": p1[ids]},
        [tok.token(i) for i in ids],
        title=f"next-token distribution at step {pos + 1} (teacher-forced)",
        horizontal=True,
    )
    message = _mask_message(exp, texts, row, causal_off, padding_off, positions)
    return LabView([fig, probs], message + ("  \n" + PADDED_ROWS if padded else ""))


def _mask_figure(ckpt, exp, texts, targets, row, kind, layer, head, width):
    src = [ckpt.encode_source(t).pieces for t in texts]
    tok = ckpt.tgt_tokenizer
    tgt = [[tok.token(BOS), *(tok.token(i) for i in tok.encode(t).ids)] for t in targets]
    t_width = exp.before.trace.weights("cross", 0).shape[2]  # teacher-forced rows, padded
    src_lab = src[row] + ["<pad>"] * (width - len(src[row]))
    tgt_lab = tgt[row] + ["<pad>"] * (t_width - len(tgt[row]))
    keys, queries = {
        "encoder_self": (src_lab, src_lab),
        "decoder_self": (tgt_lab, tgt_lab),
        "cross": (src_lab, tgt_lab),
    }[kind]
    q_pad = np.array([q == "<pad>" for q in queries])[:, None]  # [Tq, 1]
    panels = []
    for run in (exp.before, exp.after):
        w = head_weights(run.trace.numpy(kind, layer)[row], head)  # [Tq, Tk]
        m = run.trace.numpy(kind, layer, "mask")[row, 0].astype(bool) | q_pad  # [Tq, Tk]
        panels.append((w, m))
    title = f"{KIND_TITLES[kind]} · layer {layer} · {head_label(head)} · input “{html.escape(texts[row])}”"
    fig = plots.mask_comparison(
        np.where(panels[0][1], 0, panels[0][0]),
        np.where(panels[1][1], 0, panels[1][0]),
        keys,
        queries,
        title=title,
        before_mask=panels[0][1],
        after_mask=panels[1][1],
    )
    return fig, len(tgt[row]), bool(q_pad.any())


def _mask_message(exp, texts, row, causal_off, padding_off, positions) -> str:
    lines = []
    if causal_off:
        lines.append(EXPLAIN["causal"])
    if padding_off:
        lines.append(EXPLAIN["padding"])
    if positions:
        lines.append(EXPLAIN["block"] + f" Blocked positions: {', '.join(map(str, positions))}.")
    if not lines:
        lines.append("Tick a toggle or choose source tokens to block: nothing is changed yet.")
    for i, t in enumerate(texts):
        b, a = exp.before.outputs[i], exp.after.outputs[i]
        who = "your input" if i == 0 else "the companion input"
        change = "unchanged" if a == b else "**changed**"
        lines.append(
            f"Output for {who} “{html.escape(t)}”: “{html.escape(b)}” → “{html.escape(a)}” "
            f"({change})"
        )
    lines.append(
        f"Teacher-forced token accuracy {exp.before.token_acc:.3f} → {exp.after.token_acc:.3f}; "
        f"largest next-token probability change {exp.max_prob_change:.3f}. "
        f"The heatmaps show {'the padded companion' if row else 'your input'}."
    )
    return "  \n".join(lines)


# -- head ablation ------------------------------------------------------------------------------
def ablation(state: SessionState, sites: Sequence[str]) -> LabView:
    """Zero the heads ``sites`` (``"cross L1 H2"``, ...) and compare output and probabilities.

    Returns:
        One figure: each baseline output token's probability with and without the heads.
    """
    try:
        ckpt = _started(state)
        heads = parse_sites(sites)
        if not heads:
            raise InputError("tick at least one head to switch off")
        res = analysis.ablate(ckpt, state.text, heads)
    except AttnvizError as exc:
        return _error(exc)
    fig = figures.paired_bars(
        {"all heads on": res.prob_baseline, "ablated": res.prob_ablated},
        res.baseline_tokens,
        title="probability of each baseline output token (teacher-forced)",
    )
    change = "**changed**" if res.changed else "unchanged"
    worst = int(np.argmin(res.prob_change)) if len(res.prob_change) else 0
    msg = (
        f"Switched off {len(heads)} head(s): {', '.join(sites)}.  \n"
        f"Output “{html.escape(res.baseline)}” → “{html.escape(res.ablated)}” ({change}); "
        f"largest probability drop {-res.prob_change.min():.3f} at token "
        f"{worst} (“{html.escape(res.baseline_tokens[worst])}”)."
    )
    return LabView([fig], msg)


def rank_heads(state: SessionState, n_inputs: int = 8) -> LabView:
    """Zero each head alone on the input plus a few task examples; largest effect first.

    Returns:
        ``rows``: ``[site, changed outputs, max |Δp|, mean |Δp|]`` per head.
    """
    try:
        ckpt = _started(state)
        texts = [state.text, *models.examples_for(ckpt.task, n_inputs - 1)]
        texts = list(dict.fromkeys(texts))
        effects = analysis.head_effects(ckpt, texts)
    except AttnvizError as exc:
        return _error(exc, 0)
    rows = [
        [e.site, e.changed_outputs, round(e.max_prob_change, 4), round(e.mean_prob_change, 4)]
        for e in effects
    ]
    top = effects[0]
    msg = (
        f"Each head zeroed alone on {len(texts)} inputs (yours first). Most important: "
        f"**{top.site}** (changed {top.changed_outputs} of {len(texts)} outputs)."
    )
    return LabView([], msg, rows=rows)


# -- attribution --------------------------------------------------------------------------------
def attribution(state: SessionState, layer: int | str = 0, n_steps: int = 32) -> LabView:
    """Integrated Gradients for the newest token beside one layer's cross-attention.

    Returns:
        Two figures: source attribution vs cross-attention (mean of heads) of ``layer``, and
        attribution over the previous target tokens; the message gives the agreement scores.
    """
    try:
        ckpt = _started(state)
        if state.step == 0:
            raise InputError("take at least one Step: attribution explains the newest token")
        layer = layer_index(layer or 0, list(range(ckpt.config.n_decoder_layers)))
        a = analysis.attribute(
            ckpt, state.text, state.step - 1, tokens=state.tokens[: state.step], n_steps=n_steps
        )
    except AttnvizError as exc:
        return _error(exc, 2)
    layer = int(np.clip(layer, 0, max(a.cross)))
    src = plots.attribution_vs_attention(
        a.ig_src,
        a.cross[layer],
        a.src_tokens,
        title=f"step {a.step + 1} “{html.escape(a.token)}”: source tokens",
        names=("Integrated Gradients", f"cross-attention L{layer} (mean of heads)"),
    )
    tgt = figures.paired_bars(
        {"Integrated Gradients": a.ig_tgt, "gradient × input": a.gxi_tgt},
        a.tgt_tokens,
        title="attribution to the previous output tokens (decoder input)",
        value_name="attribution",
    )
    scores = ", ".join(f"`{k}` {v:.2f}" for k, v in a.agreement.items())  # ~ is markdown
    msg = (
        f"Explaining step {a.step + 1}: “{html.escape(a.token)}” (p = {a.prob:.3f}). "
        f"Spearman agreement of attribution with attention — {scores}. "
        f"IG convergence delta {a.delta:.2g} (near 0 means the integral converged)."
    )
    return LabView([src, tgt], msg)
