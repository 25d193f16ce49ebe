"""Information-flow routes (Ferrando & Voita 2024, "Information Flow Routes: Automatically
Interpreting Language Models at Scale"), written from the paper.

Each block of a pre-norm model adds to the residual stream: the attention block's output at
query position i is a sum over key positions j (and heads h) of ``α_ij^h f_h(x_j)`` (the
value of j through head h's slice of the output projection, as in the ``"norms"`` lens), plus
the output bias; the stream after the block is that sum plus the residual ``x_i``. The MLP
block likewise adds ``mlp(x_i)`` to its residual. The importance of one part ``p`` of a sum
``w`` is its proximity ``max(0, ‖w‖₁ - ‖w - p‖₁)``, normalised over the parts of that sum
(per token, per block). Edges below ``threshold`` are dropped; the route is what is left
reachable, going back, from the predicting position after the last layer to the inputs.

Nodes: ``"x{l}_{i}"`` the stream entering layer l at position i (``l = L``: after the last
layer), ``"a{l}_{i}"`` the stream after layer l's attention block, ``"m{l}_{i}"`` layer l's
MLP at position i. Every attention edge lists the heads carrying it, ranked by their own
proximity (normalised as the edge's). A sandwich norm after a sublayer is frozen at the scale
it had in the run (as in :mod:`.dla`). Shape legend: H heads, T positions, D width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from .dla import freeze
from .lenses import value_contributions
from .why import Exportable, checkpoint_of, n_layers, prepare, stack_of, streams_of


@dataclass
class Edge:
    source: str
    target: str
    weight: float
    kind: str  # "attention", "residual", "mlp"
    heads: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Flow(Exportable):
    """The pruned graph: ``nodes`` (id -> ``{"layer", "position", "kind"}``), ``edges``, and
    ``route`` (indices into ``edges``) from the inputs to the predicted token."""

    tokens: list[str]
    position: int
    threshold: float
    nodes: dict[str, dict]
    edges: list[Edge]
    route: list[int]

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens, "position": self.position, "threshold": self.threshold,
            "nodes": self.nodes,
            "edges": [{"source": e.source, "target": e.target, "weight": e.weight,
                       "kind": e.kind, "heads": [list(h) for h in e.heads]} for e in self.edges],
            "route": self.route,
        }  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        e = self.edges
        return {"edge_source": np.array([x.source for x in e], dtype=str),
                "edge_target": np.array([x.target for x in e], dtype=str),
                "edge_weight": np.array([x.weight for x in e]),
                "edge_kind": np.array([x.kind for x in e], dtype=str),
                "route": np.array(self.route, dtype=np.int64)}  # fmt: skip

    def text(self) -> str:
        lines = [f"information flow to position {self.position} ({self.tokens[self.position]!r}),"
                 f" threshold {self.threshold}: {len(self.route)} route edges of "
                 f"{len(self.edges)}"]  # fmt: skip
        for i in self.route:
            e = self.edges[i]
            if e.kind == "residual":
                continue
            heads = ", ".join(f"h{h} {w:.2f}" for h, w in e.heads[:3])
            src = self.nodes[e.source]
            lines.append(f"  {e.source:>8} ({self.tokens[src['position']]!r}) -> {e.target:<8} "
                         f"{e.kind:<9} {e.weight:.2f}  {heads}")  # fmt: skip
        return "\n".join(lines)


def _prox(w: Tensor, parts: Tensor) -> Tensor:
    """``max(0, ‖w‖₁ - ‖w - p‖₁)``: ``w [..., D]``, ``parts [..., D]`` broadcast -> ``[...]``."""
    return (w.abs().sum(-1) - (w - parts).abs().sum(-1)).clamp_min(0)


def flow(ckpt: Checkpoint | str, text, threshold: float = 0.04, step: int | None = None) -> Flow:
    """The information-flow graph of ``text`` at its predicting position (``step`` as
    :func:`attnviz.analysis.why.prepare`).

    Raises:
        InputError: a post-norm model (no additive residual stream), an encoder-decoder model
            (cross-attention's routes are not drawn yet), a threshold outside 0..1.
    """
    if not 0 <= threshold < 1:
        raise InputError(f"threshold must be in 0..1, got {threshold!r}")
    ckpt = checkpoint_of(ckpt)
    if not ckpt.config.norm_first:
        raise InputError("flow needs a pre-norm model (an additive residual stream); this one "
                         "norms after each block")  # fmt: skip
    if ckpt.config.arch == "encoder-decoder":
        raise InputError("flow reads one-stack models (decoder-only or encoder-only) for now")
    prep = prepare(ckpt, text, step)
    _, trace = streams_of(ckpt, prep, capture=("weights", "values"))
    kind = "decoder_self" if prep.stack == "decoder" else "encoder_self"
    with torch.no_grad():
        nodes, edges = _graph(ckpt, prep.stack, kind, trace, len(prep.ids), threshold)
    top = f"x{n_layers(ckpt, prep.stack)}_{prep.position}"
    route = _route(edges, top)
    return Flow(prep.tokens, prep.position, threshold, nodes, edges, route)


def _graph(ckpt, stack: str, kind: str, trace, t: int, threshold: float):
    model = ckpt.model
    nodes: dict[str, dict] = {}
    edges: list[Edge] = []

    def node(name: str, layer: int, pos: int, what: str) -> str:
        nodes.setdefault(name, {"layer": layer, "position": pos, "kind": what})
        return name

    for i, layer in enumerate(stack_of(model, stack).layers):
        x = trace.stream(stack, i, "resid_pre")[0].double()  # [T, D]
        contrib = value_contributions(model, trace, kind, i)[0].double()  # [H, Tq, Tk, D]
        attn = layer.self_attn
        raw = trace.stream(stack, i, "attn")[0].double()  # [T, D]
        post = getattr(layer, "post_norm1", None)
        bias = attn.out_proj.bias
        bias = torch.zeros_like(raw[0]) if bias is None else bias.double()
        if post is not None:  # sandwich: each query's parts through its frozen norm
            maps = [freeze(post, raw[q])[0] for q in range(t)]
            contrib = torch.stack([maps[q](contrib[:, q]) for q in range(t)], 1)
            bias_q = torch.stack([maps[q](bias) for q in range(t)])  # [T, D]
        else:
            bias_q = bias.expand(t, -1)
        keys = contrib.sum(0)  # [Tq, Tk, D]
        mid = x + keys.sum(1) + bias_q  # [T, D], the stream after the attention block
        p_keys = _prox(mid[:, None], keys)  # [Tq, Tk]
        p_res = _prox(mid, x)  # [Tq]
        z = p_keys.sum(1) + p_res + _prox(mid, bias_q)  # [Tq]
        z = z.clamp_min(1e-30)
        p_heads = _prox(mid[None, :, None], contrib) / z[None, :, None]  # [H, Tq, Tk]
        a_or_x = "a" if layer.ff is not None else "x"
        for q in range(t):
            target = node(f"{a_or_x}{i if a_or_x == 'a' else i + 1}_{q}", i, q,
                          "attention" if a_or_x == "a" else "stream")  # fmt: skip
            w = float(p_res[q] / z[q])
            if w >= threshold:
                edges.append(Edge(node(f"x{i}_{q}", i, q, "stream"), target, w, "residual"))
            for k in range(t):
                w = float(p_keys[q, k] / z[q])
                if w < threshold:
                    continue
                ranked = sorted(((h, float(p_heads[h, q, k])) for h in range(attn.n_heads)),
                                key=lambda hw: -hw[1])  # fmt: skip
                edges.append(Edge(node(f"x{i}_{k}", i, k, "stream"), target, w, "attention",
                                  [hw for hw in ranked if hw[1] > 0]))  # fmt: skip
        if layer.ff is None:
            continue
        out = trace.stream(stack, i, "resid_post")[0].double()  # [T, D]
        mlp = out - mid
        p_mlp, p_mid = _prox(out, mlp), _prox(out, mid)
        z = (p_mlp + p_mid).clamp_min(1e-30)
        for q in range(t):
            target = node(f"x{i + 1}_{q}", i + 1, q, "stream")
            src = node(f"a{i}_{q}", i, q, "attention")
            if float(p_mid[q] / z[q]) >= threshold:
                edges.append(Edge(src, target, float(p_mid[q] / z[q]), "residual"))
            if float(p_mlp[q] / z[q]) >= threshold:
                m = node(f"m{i}_{q}", i, q, "mlp")
                edges.append(Edge(src, m, 1.0, "mlp"))
                edges.append(Edge(m, target, float(p_mlp[q] / z[q]), "mlp"))
    return nodes, edges


def _route(edges: list[Edge], top: str) -> list[int]:
    """Indices of the edges reachable backwards from ``top``."""
    into: dict[str, list[int]] = {}
    for n, e in enumerate(edges):
        into.setdefault(e.target, []).append(n)
    seen, todo, keep = {top}, [top], []
    while todo:
        for n in into.get(todo.pop(), ()):
            keep.append(n)
            if edges[n].source not in seen:
                seen.add(edges[n].source)
                todo.append(edges[n].source)
    return sorted(keep)
