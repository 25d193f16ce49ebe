"""Information-flow routes (Ferrando & Voita 2024, "Information Flow Routes: Automatically
Interpreting Language Models at Scale"), written from the paper.

Each residual block writes a sum into the stream: an attention block's output at query
position i is the residual ``x_i`` plus, over key positions j and heads h, ``α_ij^h f_h(x_j)``
(the value of j through head h's slice of the output projection, as in the ``"norms"`` lens),
plus the output bias; an MLP block's is ``x_i + mlp(x_i)``. The importance of one part ``p``
of a sum ``w`` is its proximity ``max(0, ‖w‖₁ - ‖w - p‖₁)``, normalised over the parts of that
sum (per token, per block). Edges below ``threshold`` are dropped; the route is what is left
reachable, going back, from the predicting position after the last layer to the inputs.

Norms are frozen at the scale they had in the run (as in :mod:`.dla`), which makes them
linear maps of the parts: a sandwich norm after a sublayer (Gemma 3) maps that sublayer's
parts; a post-norm model's norm after the residual add (``norm(x + sublayer(x))``: the
original Transformer, BERT, Marian) maps every part of the sum, residual included, and its
bias is one more part of the normaliser. So ``w`` is always the stream after the block and
the parts add up to it.

An encoder-decoder model's graph has both stacks: the encoder's own routes (nodes prefixed
``e``), and each decoder layer's cross-attention block, whose key parts come from the
encoder's output at each source position (``ex{L_enc}_{j}``; the encoder's final norm acts
per position, so it moves no information between tokens). A speech encoder's frames (1500
for Whisper) are the leaves: the route stops at the encoder's output there.

Nodes: ``"x{l}_{i}"`` the stream entering layer l at position i (``l = L``: after the last
layer), ``"a{l}_{i}"`` after layer l's self-attention block, ``"c{l}_{i}"`` after its
cross-attention block, ``"m{l}_{i}"`` layer l's MLP at position i. Every attention edge lists
the heads carrying it, ranked by their own proximity, normalised over the block's parts at
head level (each head through each key, the residual, the biases), as the paper's head-level
graph does: a head's share and the edge's need not agree where heads cancel. Every attention
edge names its module (``site``), whose :class:`HeadMaps` hold each head's attention as the run
recorded it beside its contribution map (that head-level importance at every query x key), so
an edge opens as the paper shows it: each head's attention map beside its contribution map.
Shape legend: H heads, Tq query positions, Tk key positions, D width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from .dla import freeze, sandwich, sublayers
from .lenses import value_contributions
from .why import Exportable, checkpoint_of, label, n_layers, prepare, stack_of, streams_of

#: how many seconds one of Whisper's encoder positions covers (two 10 ms frames)
FRAME_SECONDS = 0.02


@dataclass
class Edge:
    source: str
    target: str
    weight: float
    kind: str  # "attention", "cross", "residual", "mlp"
    heads: list[tuple[int, float]] = field(default_factory=list)
    site: tuple[str, int] | None = None  # an attention edge's module: (kind, layer)


@dataclass
class HeadMaps:
    """One attention module of the run the graph was computed on.

    Attributes:
        attention: ``[H, Tq, Tk]`` its weights as the run recorded them (float32).
        contribution: ``[H, Tq, Tk]`` each head's importance through each key into each
            query's stream after the block (the head-level proximity, normalised per query).
    """

    kind: str
    layer: int
    attention: np.ndarray
    contribution: np.ndarray


@dataclass
class Flow(Exportable):
    """The pruned graph: ``nodes`` (id -> ``{"layer", "position", "kind", "stack"}``),
    ``edges``, and ``route`` (indices into ``edges``) from the inputs to the predicted token.

    ``tokens`` label the positions of the stack that predicts; ``source_tokens`` (an
    encoder-decoder model) those of the encoder's nodes (a speech model: the frames' times).
    """

    tokens: list[str]
    position: int
    threshold: float
    nodes: dict[str, dict]
    edges: list[Edge]
    route: list[int]
    source_tokens: list[str] | None = None
    maps: dict[tuple[str, int], HeadMaps] = field(default_factory=dict, repr=False)

    def edge_heads(self, index: int) -> list[tuple[int, float, float]]:
        """The heads carrying attention edge ``index``, ranked by their contribution:
        ``(head, contribution, attention weight at the edge's query x key)``.

        Raises:
            InputError: an edge that is not an attention (or cross-attention) edge.
        """
        if not 0 <= index < len(self.edges) or self.edges[index].site is None:
            raise InputError(f"edge {index} is not an attention edge of this graph")
        e = self.edges[index]
        m = self.maps[e.site]
        q, k = self.nodes[e.target]["position"], self.nodes[e.source]["position"]
        return [(h, w, float(m.attention[h, q, k])) for h, w in e.heads]

    def token_of(self, node: str) -> str:
        """The token (or frame) at the position of ``node``."""
        info = self.nodes[node]
        toks = (
            self.source_tokens if info["stack"] == "encoder" and self.source_tokens else self.tokens
        )
        return toks[info["position"]]

    def dead_ends(self) -> list[str]:
        """Nodes where the route stops short of the inputs: reached (or the predicting node
        itself) but with no edge into them at this threshold, and not an input stream. There
        no single part is close to the block's output, as where a sublayer's output cancels
        much of the residual: the proximity credits neither."""
        top = next((k for k, v in self.nodes.items() if v["kind"] == "stream"
                    and v["stack"] != "encoder" and v["position"] == self.position
                    and v["layer"] == max(n["layer"] for n in self.nodes.values())), None)  # fmt: skip
        reached = {self.edges[i].source for i in self.route} | ({top} if top else set())
        fed = {self.edges[i].target for i in self.route}
        return sorted(n for n in reached - fed
                      if not (self.nodes[n]["kind"] == "stream" and self.nodes[n]["layer"] == 0))  # fmt: skip

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens, "source_tokens": self.source_tokens,
            "position": self.position, "threshold": self.threshold, "nodes": self.nodes,
            "edges": [{"source": e.source, "target": e.target, "weight": e.weight,
                       "kind": e.kind, "heads": [list(h) for h in e.heads],
                       "site": None if e.site is None else list(e.site)} for e in self.edges],
            "route": self.route,
        }  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        e = self.edges
        return {"edge_source": np.array([x.source for x in e], dtype=str),
                "edge_target": np.array([x.target for x in e], dtype=str),
                "edge_weight": np.array([x.weight for x in e]),
                "edge_kind": np.array([x.kind for x in e], dtype=str),
                "route": np.array(self.route, dtype=np.int64),
                **{f"{name}_{k}_{layer}": getattr(m, name) for (k, layer), m in self.maps.items()
                   for name in ("attention", "contribution")}}  # fmt: skip

    def text(self) -> str:
        lines = [f"information flow to position {self.position} ({self.tokens[self.position]!r}),"
                 f" threshold {self.threshold}: {len(self.route)} route edges of "
                 f"{len(self.edges)}"]  # fmt: skip
        for i in self.route:
            e = self.edges[i]
            if e.kind == "residual":
                continue
            heads = ", ".join(f"h{h} {w:.2f}" for h, w in e.heads[:3])
            lines.append(f"  {e.source:>8} ({self.token_of(e.source)!r}) -> {e.target:<8} "
                         f"{e.kind:<9} {e.weight:.2f}  {heads}")  # fmt: skip
        dead = self.dead_ends()
        if dead:
            lines.append(f"the route stops at {', '.join(dead)}: no part of that block is close "
                         "to its output (its sublayer cancels much of the residual)")  # fmt: skip
        return "\n".join(lines)


def _prox(w: Tensor, parts: Tensor) -> Tensor:
    """``max(0, ‖w‖₁ - ‖w - p‖₁)``: ``w [..., D]``, ``parts [..., D]`` broadcast -> ``[...]``."""
    return (w.abs().sum(-1) - (w - parts).abs().sum(-1)).clamp_min(0)


def flow(ckpt: Checkpoint | str, text, threshold: float = 0.04, step: int | None = None) -> Flow:
    """The information-flow graph of ``text`` at its predicting position.

    Args:
        text: the input (see :func:`attnviz.analysis.why.prepare`; a speech model: a clip).
        threshold: edges whose normalised importance is below it are pruned (0..1).
        step: which decoding step (see :func:`attnviz.analysis.why.prepare`).
    Returns:
        :class:`Flow`: nodes, edges (each attention edge with its heads ranked) and the route.
    Raises:
        InputError: a threshold outside 0..1, a model without an output head.
    """
    if not 0 <= threshold < 1:
        raise InputError(f"threshold must be in 0..1, got {threshold!r}")
    ckpt = checkpoint_of(ckpt)
    prep = prepare(ckpt, text, step)
    _, trace = streams_of(ckpt, prep, capture=("weights", "values"))
    graph = _Graph(ckpt.model, trace, threshold)
    source_tokens, memory = None, None
    with torch.no_grad():
        if ckpt.config.has_cross:
            ts = trace.stream("encoder", 0, "resid_pre").shape[1]
            top = n_layers(ckpt, "encoder")
            if ckpt.is_audio:
                source_tokens = [f"{FRAME_SECONDS * j:.2f}s" for j in range(ts)]
            else:
                source_tokens = [label(ckpt, i, "encoder") for i in prep.source]
                graph.stack("encoder", ts, pre="e")
            memory = [graph.node(f"ex{top}_{j}", top, j, "stream", "encoder") for j in range(ts)]
        graph.stack(prep.stack, len(prep.ids), memory)
    top = f"x{n_layers(ckpt, prep.stack)}_{prep.position}"
    route = _route(graph.edges, top)
    return Flow(prep.tokens, prep.position, threshold, graph.nodes, graph.edges, route,
                source_tokens, graph.maps)  # fmt: skip


class _Graph:
    """The nodes and edges of one pass, built stack by stack, block by block."""

    def __init__(self, model, trace, threshold: float):
        self.model, self.trace, self.threshold = model, trace, threshold
        self.nodes: dict[str, dict] = {}
        self.edges: list[Edge] = []
        self.maps: dict[tuple[str, int], HeadMaps] = {}

    def node(self, name: str, layer: int, pos: int, kind: str, stack: str) -> str:
        self.nodes.setdefault(name, {"layer": layer, "position": pos, "kind": kind,
                                     "stack": stack})  # fmt: skip
        return name

    def stack(self, stack: str, t: int, memory: list[str] | None = None, pre: str = "") -> None:
        """Every block of ``stack`` (``t`` positions), its nodes' names prefixed ``pre``;
        ``memory``: the encoder's output nodes that cross-attention reads."""
        for i, layer in enumerate(stack_of(self.model, stack).layers):
            x = self.trace.stream(stack, i, "resid_pre")[0].double()  # [T, D]
            src = [self.node(f"{pre}x{i}_{q}", i, q, "stream", stack) for q in range(t)]
            blocks = sublayers(layer)
            for n, (point, kind, mod, post) in enumerate(blocks):
                last = n == len(blocks) - 1
                letter = "x" if last else {"attn": "a", "cross": "c"}[point]
                what = "stream" if last else ("attention" if point == "attn" else "cross")
                dst = [self.node(f"{pre}{letter}{i + last}_{q}", i + last, q, what, stack)
                       for q in range(t)]  # fmt: skip
                raw = self.trace.stream(stack, i, point)[0].double()  # [T, D]
                pmap = freeze(sandwich(layer, point), raw)[0]
                if kind == "mlp":
                    x = self._mlp(i, x, pmap(raw), post, src, dst, stack, pre)
                else:
                    keys = memory if kind == "cross" else [self.node(f"{pre}x{i}_{k}", i, k,
                                                                     "stream", stack)
                                                           for k in range(t)]  # fmt: skip
                    x = self._attention(i, kind, mod, x, pmap, post, src, dst, keys)
                src = dst

    def _post(self, post, total: Tensor):
        """A post-norm model's norm frozen at the block's sum ``[T, D]``: ``(map, bias)``."""
        if post is None:
            return (lambda p: p), None
        fmap, bias, _ = freeze(post, total)
        return fmap, bias

    def _attention(self, i, kind, mod, x, pmap, post, src, dst, keys) -> Tensor:
        contrib = value_contributions(self.model, self.trace, kind, i)[0].double()  # [H, Tq, Tk, D]
        contrib = pmap(contrib.transpose(1, 2))  # [H, Tk, Tq, D]: a norm maps each query's row
        bias = mod.out_proj.bias
        bias = torch.zeros_like(x) if bias is None else pmap(bias.double().expand_as(x))  # [Tq, D]
        nmap, nbias = self._post(post, x + contrib.sum((0, 1)) + bias)
        x, contrib, bias = nmap(x), nmap(contrib), nmap(bias)
        per_key = contrib.sum(0)  # [Tk, Tq, D]
        out = x + per_key.sum(0) + bias + (0.0 if nbias is None else nbias)  # [Tq, D]
        p_keys = _prox(out[None], per_key)  # [Tk, Tq]
        p_res = _prox(out, x)  # [Tq]
        z = p_keys.sum(0) + p_res + _prox(out, bias)
        if nbias is not None:
            z = z + _prox(out, nbias.expand_as(out))
        p_heads = _prox(out[None, None], contrib)  # [H, Tk, Tq]
        # heads normalised over the head-level parts (each head x key, the residual, biases)
        z_heads = (z - p_keys.sum(0) + p_heads.sum((0, 1))).clamp_min(1e-30)
        p_heads = (p_heads / z_heads).cpu().numpy()
        recorded = self.trace.weights(kind, i)[0].float().cpu().numpy()  # [H, Tq, Tk], as used
        self.maps[kind, i] = HeadMaps(kind, i, recorded,
                                      p_heads.transpose(0, 2, 1).astype(np.float32))  # fmt: skip
        z = z.clamp_min(1e-30)
        res_w = (p_res / z).cpu().numpy()
        key_w = (p_keys / z).cpu().numpy()  # [Tk, Tq]
        label_ = "cross" if kind == "cross" else "attention"
        for q in np.flatnonzero(res_w >= self.threshold):
            self.edges.append(Edge(src[q], dst[q], float(res_w[q]), "residual"))
        for k, q in zip(*np.nonzero(key_w >= self.threshold), strict=True):
            ranked = sorted(((h, float(p_heads[h, k, q])) for h in range(p_heads.shape[0])),
                            key=lambda hw: -hw[1])  # fmt: skip
            self.edges.append(Edge(keys[k], dst[q], float(key_w[k, q]), label_,
                                   [hw for hw in ranked if hw[1] > 0], (kind, i)))  # fmt: skip
        return out

    def _mlp(self, i, x, mlp, post, src, dst, stack: str, pre: str) -> Tensor:
        nmap, nbias = self._post(post, x + mlp)
        x, mlp = nmap(x), nmap(mlp)
        out = x + mlp + (0.0 if nbias is None else nbias)
        p_mlp, p_res = _prox(out, mlp), _prox(out, x)
        z = p_mlp + p_res
        if nbias is not None:
            z = z + _prox(out, nbias.expand_as(out))
        z = z.clamp_min(1e-30)
        res_w, mlp_w = (p_res / z).cpu().numpy(), (p_mlp / z).cpu().numpy()
        for q in range(len(src)):
            if res_w[q] >= self.threshold:
                self.edges.append(Edge(src[q], dst[q], float(res_w[q]), "residual"))
            if mlp_w[q] >= self.threshold:
                m = self.node(f"{pre}m{i}_{q}", i, q, "mlp", stack)
                self.edges.append(Edge(src[q], m, 1.0, "mlp"))
                self.edges.append(Edge(m, dst[q], float(mlp_w[q]), "mlp"))
        return out


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
