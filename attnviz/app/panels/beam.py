"""The beam panel: beam search's tree as inline SVG, one hypothesis's attention (no gradio).

A :class:`BeamPanel` is one search on one input, small and deep-copyable (the page keeps it
in a ``gr.State``): the :class:`~attnviz.decode.beam.BeamTree`, a display label per node, the
finished hypotheses and the node the person selected. :func:`tree_svg` lays the tree out by
step (x, one column per produced token) and rank (y, best score at the top), each node with
its token and log-probability and a ``data-node-id`` the page's click handler sends back;
the winning path is drawn in red, finished hypotheses get a green ring, the selected node a
purple one. The same SVG is offered as a file, beside the tree as JSON.

A selected node's attention is the attention of a real forward pass: the hypothesis's tokens
are teacher-forced through the recording path (:meth:`attnviz.Checkpoint.score`).

The panel's actions, :func:`beam_view` (search and draw) and :func:`beam_node` (select), are
re-exported by :mod:`attnviz.app.session`, which also continues the step view from a node
(``session.continue_beam``: it drives the session's own stepper).
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...decode.beam import BeamResult, BeamTree, Hypothesis, beam_predict
from ...render import plots
from ...render.plots import KIND_TITLES
from .. import store
from ..inputs import refuse
from ..kinds import is_decoder_only, scored_rows
from ..state import SessionState, checkpoint_of, head_label, head_weights, panel_stamps, warning
from ..views import display_token, view_of
from ..workers import remote

MAX_BEAMS = 8
COL_W, ROW_H = 86, 58  # one column per step, one row per rank: room for the edges
NODE_W, NODE_H = 62, 46
PAD_X, PAD_TOP, PAD_BOTTOM = 12, 30, 10
LABEL_CHARS = 7  # longer tokens are cut in the box (the full token is in the tooltip)
STYLE = """
.av-beam { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.av-beam .edge { fill: none; stroke: #9ca3af; stroke-width: 1.5; }
.av-beam .edge.best { stroke: #e45756; stroke-width: 3.5; }
.av-beam .box { fill: #f3f4f6; stroke: #6b7280; stroke-width: 1; }
.av-beam .best .box { fill: #fde4e3; stroke: #e45756; stroke-width: 2.5; }
.av-beam .ring { fill: none; stroke: none; }
.av-beam .finished .ring { stroke: #16a34a; stroke-width: 2.5; }
.av-beam .selected .ring { stroke: #7c3aed; stroke-width: 3.5; }
.av-beam .tok { fill: #111827; font-size: 13px; font-weight: 600; }
.av-beam .lp, .av-beam .score { fill: #374151; font-size: 10px; }
.av-beam .rank { fill: #15803d; font-size: 10px; font-weight: 700; }
.av-beam .colhead { fill: #4b5563; font-size: 10px; }
.av-beam .node { cursor: pointer; }
.av-beam .node:hover .box, .av-beam .node:focus .box { stroke: #7c3aed; stroke-width: 2; }
.av-beam .node:focus { outline: none; }
.dark .av-beam .edge { stroke: #6b7280; }
.dark .av-beam .edge.best { stroke: #f87171; }
.dark .av-beam .box { fill: #1f2937; stroke: #9ca3af; }
.dark .av-beam .best .box { fill: #4c1d1d; stroke: #f87171; }
.dark .av-beam .finished .ring { stroke: #4ade80; }
.dark .av-beam .selected .ring { stroke: #c4b5fd; }
.dark .av-beam .tok { fill: #f9fafb; }
.dark .av-beam .lp, .dark .av-beam .score, .dark .av-beam .colhead { fill: #d1d5db; }
.dark .av-beam .rank { fill: #4ade80; }
"""
LEGEND = (
    "One column per step, hypotheses ranked by score (best at the top); each node shows its "
    "token, the log-probability it added and (Σ) its hypothesis's score, the sum so far. <b class='av-beam-red'>Red</b>: the winning "
    "path. <b class='av-beam-green'>Green ring</b>: a finished hypothesis (#1 is the "
    "winner). Click a node to see its hypothesis's {attended} and continue from it."
)


@dataclasses.dataclass
class BeamPanel:
    """One beam search on one input, as the page keeps it between events.

    Attributes:
        text: the input searched; beam_size: ``num_beams``.
        stamp: :func:`attnviz.app.state.panel_stamps` ``["beam"]`` of the state it was
            computed for (another stamp: the tree is stale).
        tree: every extension kept at each step (:class:`~attnviz.decode.beam.BeamTree`).
        labels: a display label per node (``labels[i]`` for ``tree.nodes[i]``).
        hypotheses: the finished hypotheses at the end, best first.
        score, normalized_score: the winner's log-probability and its length-normalised score.
        selected: the node the person clicked, or None.
        line: the one-line summary shown above the tree (HTML).
        attended: what a clicked node draws: ``"cross-attention"``, or a decoder-only
            model's ``"causal self-attention"``.
    """

    text: str
    beam_size: int
    stamp: Any
    tree: BeamTree
    labels: list[str]
    hypotheses: list[Hypothesis]
    score: float = 0.0
    normalized_score: float = 0.0
    selected: int | None = None
    line: str = ""
    attended: str = "cross-attention"

    @property
    def best_path(self) -> list[int]:
        """Node ids from the start token to the winner's last node."""
        return [0, *(n.id for n in self.tree.path(self.tree.best))]

    @property
    def best_tokens(self) -> list[int]:
        return self.tree.tokens(self.tree.best)


# -- searching -----------------------------------------------------------------------------------
def beam_size_of(value: Any) -> int:
    """The page's beam size (a number box) as an int in ``1..MAX_BEAMS``, else InputError."""
    try:
        size = float(str(value).strip())
    except (TypeError, ValueError):
        size = float("nan")
    if not (size.is_integer() and 1 <= size <= MAX_BEAMS):
        raise InputError(f"the beam size must be a whole number 1..{MAX_BEAMS}, got {value!r}")
    return int(size)


def search(ckpt: Checkpoint, text: str, beam_size: int, stamp: Any = None) -> BeamPanel:
    """Beam search on ``text`` under the checkpoint's generation config, with its tree.

    Args:
        beam_size: ``num_beams`` (checked by :func:`beam_size_of`).
        stamp: the panel stamp of the state this is computed for.
    """
    result: BeamResult = beam_predict(ckpt, text, beam_size, return_tree=True)
    tree = result.tree
    assert tree is not None  # return_tree=True
    tok = ckpt.tgt_tokenizer
    labels = [
        display_token(tok.token(n.token)) if tok is not None else str(n.token) for n in tree.nodes
    ]
    return BeamPanel(
        text=text, beam_size=beam_size, stamp=stamp, tree=tree, labels=labels,
        hypotheses=list(result.hypotheses), score=result.score,
        normalized_score=result.normalized_score,
    )  # fmt: skip


def node_of(panel: BeamPanel, node: Any) -> int:
    """The page's node id (text) as an id of a produced token's node, else InputError."""
    last = len(panel.tree.nodes) - 1
    if node is None or str(node).strip() == "":
        raise InputError("click a node of the tree first")
    try:
        i = int(str(node).strip())
    except (TypeError, ValueError):
        raise InputError(f"not a node id: {node!r}; nodes are 1..{last}") from None
    if not 1 <= i <= last:
        why = " (node 0 is the start token: it has no attention row)" if i == 0 else ""
        raise InputError(f"node must be in 1..{last}, got {i}{why}")
    return i


# -- drawing -------------------------------------------------------------------------------------
def layout(tree: BeamTree) -> dict[int, tuple[int, int]]:
    """``{node id: (column, row)}``: column = step + 1 (the start token in column 0), row =
    rank among the nodes of that step by score (0 = the best)."""
    by_step: dict[int, list] = {}
    for n in tree.nodes:
        by_step.setdefault(n.step, []).append(n)
    pos = {}
    for step, nodes in by_step.items():
        for row, n in enumerate(sorted(nodes, key=lambda n: (-n.score, n.id))):
            pos[n.id] = (step + 1, row)
    return pos


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


def tree_svg(panel: BeamPanel, standalone: bool = False) -> str:
    """The tree as one ``<svg>``: a ``<g class="node" data-node-id=...>`` per tree node.

    Args:
        standalone: a file of its own (XML declaration, white background) rather than
            inline in the page (which follows the page's light or dark theme).
    """
    tree = panel.tree
    pos = layout(tree)
    cols = max(c for c, _ in pos.values()) + 1
    rows = max(r for _, r in pos.values()) + 1
    width = PAD_X * 2 + cols * COL_W
    height = PAD_TOP + rows * ROW_H + PAD_BOTTOM
    best = set(panel.best_path)
    ranks = {h.node: i + 1 for i, h in enumerate(panel.hypotheses) if h.node is not None}

    def xy(i: int) -> tuple[float, float]:
        c, r = pos[i]
        return PAD_X + c * COL_W, PAD_TOP + r * ROW_H

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="av-beam" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="beam search tree, beam {panel.beam_size}">',
        f"<style>{STYLE}</style>",
    ]
    if standalone:
        out.append(f'<rect width="{width}" height="{height}" fill="#ffffff"/>')
    for c in range(1, cols):
        x = PAD_X + c * COL_W + NODE_W / 2
        out.append(f'<text class="colhead" x="{x}" y="14" text-anchor="middle">step {c}</text>')
    edges, nodes = [], []
    for n in tree.nodes:
        x, y = xy(n.id)
        if n.parent is not None:
            px, py = xy(n.parent)
            x0, y0, x1, y1 = px + NODE_W, py + NODE_H / 2, x, y + NODE_H / 2
            mid = (x0 + x1) / 2
            cls = "edge best" if n.id in best and n.parent in best else "edge"
            edges.append(
                f'<path class="{cls}" d="M{x0:.1f},{y0:.1f} C{mid:.1f},{y0:.1f} '
                f'{mid:.1f},{y1:.1f} {x1:.1f},{y1:.1f}"/>'
            )
        classes = ["node"]
        classes += ["best"] if n.id in best else []
        classes += ["finished"] if n.finished else []
        classes += ["selected"] if n.id == panel.selected else []
        label = panel.labels[n.id]
        score = ""
        if n.parent is None:
            tip, lp = f"node 0: the start token “{label}”", "start"
        else:
            score = (
                f'<text class="score" x="{NODE_W / 2}" y="41" text-anchor="middle">'
                + f"Σ {n.score:.2f}".replace("-", "−")
                + "</text>"
            )
            tip = (
                f"node {n.id} · step {n.step + 1} · “{label}” · log p {n.logp:.3f} · "
                f"score {n.score:.3f}" + (" · finished hypothesis" if n.finished else "")
            )
            lp = f"{n.logp:.2f}".replace("-", "−")
        rank = ""
        if n.id in ranks:
            rank = f'<text class="rank" x="{NODE_W + 5}" y="12">#{ranks[n.id]}</text>'
        nodes.append(
            f'<g class="{" ".join(classes)}" data-node-id="{n.id}" transform="translate({x},{y})"'
            + ("" if standalone or n.parent is None else ' tabindex="0" role="button"')
            + f"><title>{html.escape(tip)}</title>"
            f'<rect class="ring" x="-3" y="-3" width="{NODE_W + 6}" height="{NODE_H + 6}" rx="8"/>'
            f'<rect class="box" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
            f'<text class="tok" x="{NODE_W / 2}" y="14" text-anchor="middle">'
            f"{html.escape(_short(label))}</text>"
            f'<text class="lp" x="{NODE_W / 2}" y="28" text-anchor="middle">{lp}</text>'
            f"{score}{rank}</g>"
        )
    out += ['<g class="edges">', *edges, "</g>", '<g class="nodes">', *nodes, "</g>", "</svg>"]
    svg = "".join(out)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg if standalone else svg


def summary(panel: BeamPanel, greedy: str, tgt_tokenizer) -> str:
    """One line: the winner against greedy decoding (HTML)."""
    out = tgt_tokenizer.decode(panel.best_tokens)
    same = "the same as" if out == greedy else "<b>different from</b>"
    return (
        f"Beam search (beam {panel.beam_size}) on “{html.escape(panel.text)}”: "
        f"<b>{html.escape(out)}</b> (log-prob {panel.score:.3f}, per token "
        f"{panel.normalized_score:.3f}) — {same} greedy <b>{html.escape(greedy)}</b>."
    )


def panel_html(panel: BeamPanel) -> str:
    """The panel as the page shows it: its summary line, the legend, the tree (scrolls
    sideways), the selected node ringed."""
    n = len(panel.tree.nodes)
    return (
        f'<div class="av-beam-panel" data-nodes="{n}" data-best="{panel.tree.best}">'
        f"<p>{panel.line}</p><p class='explain' style='margin:4px 0'>"
        f"{LEGEND.format(attended=panel.attended)}</p>"
        '<div id="beam-tree" style="overflow-x:auto;overflow-y:hidden;max-width:100%;'
        f'padding:4px 0">{tree_svg(panel)}</div></div>'
    )


def write_files(panel: BeamPanel) -> list[str]:
    """The tree as an SVG file and as JSON (``BeamTree.to_dict()`` plus the input, the beam
    size, each node's label and the finished hypotheses), in a private folder."""
    folder = Path(tempfile.mkdtemp(prefix="beam-", dir=store.private_dir("exports")))
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", panel.text)[:32].strip("_") or "input"
    stem = folder / f"attnviz-beam-{name}-k{panel.beam_size}"
    svg, js = stem.with_suffix(".svg"), stem.with_suffix(".json")
    svg.write_text(tree_svg(panel, standalone=True), encoding="utf-8")
    data = {
        "text": panel.text,
        "beam_size": panel.beam_size,
        **panel.tree.to_dict(),
        "labels": panel.labels,
        "hypotheses": [dataclasses.asdict(h) for h in panel.hypotheses],
    }
    js.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
    return [str(svg), str(js)]


# -- one hypothesis --------------------------------------------------------------------------------
def hypothesis(panel: BeamPanel, node: Any) -> list[int]:
    """Token ids of the hypothesis ending at ``node`` (a page node id), start token excluded."""
    return panel.tree.tokens(node_of(panel, node))


def node_line(panel: BeamPanel, node: int, tgt_tokenizer) -> str:
    """One line about a node: where it is, its log-probabilities, its hypothesis (HTML)."""
    n = panel.tree.nodes[node]
    tokens = panel.tree.tokens(node)
    text = tgt_tokenizer.decode(tokens) if tgt_tokenizer is not None else str(tokens)
    where = "on the winning path" if node in panel.best_path else "off the winning path"
    end = " · a finished hypothesis" if n.finished else ""
    return (
        f"Node {node}: step {n.step + 1}, “{html.escape(panel.labels[node])}” (log p "
        f"{n.logp:.3f}, score {n.score:.3f}), {where}{end} — hypothesis "
        f"<b>{html.escape(text)}</b> ({len(tokens)} tokens)."
    )


def node_figure(ckpt: Checkpoint, panel: BeamPanel, node: int, layer: int, head: str) -> go.Figure:
    """The cross-attention rows of the hypothesis ending at ``node``: its tokens are
    teacher-forced through the recording path, rows = the queries that chose the
    hypothesis's tokens (row ``i`` chose token ``i``; labelled by the token fed there, as in
    the step view), columns = the source tokens.

    Args:
        layer: a decoder layer; head: ``"mean"`` (of heads) or ``"H<h>"``.
    Returns:
        A heatmap of ``[n, Ts]`` weights (``n`` = the hypothesis's length).
    """
    tokens = panel.tree.tokens(node)
    scored = ckpt.score(panel.text, tokens)  # EOS appended when the hypothesis has none
    n = len(tokens)
    kind = "decoder_self" if is_decoder_only(ckpt) else "cross"
    if kind == "cross":
        w = scored.trace.numpy("cross", layer)[0, :, :n]  # [H, n, Ts]
        mask = scored.trace.numpy("cross", layer, "mask")[0, 0].astype(bool)  # [Tq or 1, Ts]
        mask = mask[:n] if mask.shape[0] > 1 else mask
        keys = [display_token(p) for p in ckpt.encode_source(panel.text).pieces]
    else:  # one sequence: the prompt, then the hypothesis
        w, mask, keys = scored_rows(ckpt, scored, panel.text, n, layer)  # [H, n, P + n - 1]
        keys = [display_token(k) for k in keys]
    z = head_weights(w, head)
    path = panel.tree.path(node)
    # row i is labelled by the token fed to it (the start token, then the hypothesis so far),
    # as the step view labels its rows
    queries = [panel.labels[0], *(panel.labels[p.id] for p in path[:-1])]
    title = f"Node {node}'s hypothesis: {KIND_TITLES[kind].lower()} · layer {layer} · {head_label(head)}"
    fig = plots.heatmap(z, keys, queries, mask=np.broadcast_to(mask, z.shape), title=title)
    fig.update_layout(height=min(max(280, 140 + 26 * n), 900))
    return fig


# -- the panel's actions (the session re-exports them) ----------------------------------------
@dataclasses.dataclass
class BeamView:
    """What the beam panel shows.

    Attributes:
        panel: the search (kept by the page for node clicks), None when refused or cleared.
        html: the summary line and the tree ("" when nothing is shown or the tree is
            unchanged: a refused node click keeps the page's tree).
        message: one line about the selected node, or what to fix (starts with "⚠").
        figure: the selected hypothesis's cross-attention rows, or None.
        files: the tree as an SVG file and as JSON (paths), [] when nothing is shown.
    """

    panel: BeamPanel | None
    html: str
    message: str = ""
    figure: go.Figure | None = None
    files: list[str] = dataclasses.field(default_factory=list)


def _stopped(state: SessionState, *args, message: str, **kwargs) -> BeamView:
    return BeamView(None, "", message)


@remote(_stopped)
def beam_view(state: SessionState, beam_size: int | str = 4, text: str | None = None) -> BeamView:
    """Beam search on ``text`` (default: the state's input) with its tree, beside greedy.

    Args:
        beam_size: ``num_beams``, 1..:data:`MAX_BEAMS` (the page's box).
    """
    try:
        ckpt = checkpoint_of(state)
        refuse(ckpt, "beam")  # an encoder-only model generates nothing
        size = beam_size_of(beam_size)
        if ckpt.is_audio:  # the clip the step view started on: never a path typed in a box
            if not state.started:
                raise InputError("no clip: pick, upload or record one, then Step, then beam")
            text = state.text
        text = state.text if text is None else text
        if not (text or "").strip():
            raise InputError("type an input first")
        # the folder's generation config: its rules, length limit, length penalty, ...
        panel = search(ckpt, text, size, panel_stamps(state)["beam"])
        greedy = ckpt.predict(text)
    except AttnvizError as exc:
        return BeamView(None, warning(exc))
    panel.line = summary(panel, greedy, ckpt.tgt_tokenizer)
    if ckpt.is_audio:  # the clip's file name, not the server's folders
        panel.line = panel.line.replace(html.escape(text), html.escape(Path(text).name))
    panel.attended = "causal self-attention" if is_decoder_only(ckpt) else "cross-attention"
    return BeamView(panel, panel_html(panel), files=write_files(panel))


def current(state: SessionState, panel: BeamPanel | None) -> Checkpoint:
    """The checkpoint of a beam panel that is still current for ``state``, else InputError."""
    if panel is None:
        raise InputError("press “Decode with beam search” first, then click a node")
    if panel.stamp != panel_stamps(state)["beam"]:
        raise InputError("the input or model changed since this tree was drawn: decode again")
    return checkpoint_of(state)


@remote(_stopped)
def beam_node(state: SessionState, panel: BeamPanel | None, node: int | str) -> BeamView:
    """Select ``node`` of the tree: its hypothesis's cross-attention rows (a decoder-only
    model's self-attention) at the step view's layer and head (the mean for "all heads").
    A bad node id is one line
    and the panel is kept as it was."""
    try:
        ckpt = current(state, panel)
        i = node_of(panel, node)
        layer, head = view_of(state, ckpt, "decoder_self" if is_decoder_only(ckpt) else "cross")
        fig = node_figure(ckpt, panel, i, layer, "mean" if head == "all heads" else head)
    except AttnvizError as exc:
        return BeamView(panel, "", warning(exc))
    chosen = dataclasses.replace(panel, selected=i)
    line = node_line(chosen, i, ckpt.tgt_tokenizer)
    return BeamView(chosen, panel_html(chosen), line, fig)
