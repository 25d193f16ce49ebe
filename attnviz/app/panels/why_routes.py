"""What opens from the "Why this token" tab's results (:mod:`attnviz.app.panels.why`).

- :func:`flow_graph`: :func:`attnviz.analysis.flow` drawn with tokens along x, layers up y,
  edges as lines as wide as their importance (an encoder-decoder model: the source's tokens
  on the left, cross-attention edges from them); :func:`open_edge`: one of its attention
  edges opened, the heads carrying it ranked, each with the attention map the run recorded
  beside its contribution map;
- :func:`open_cell`: one cell of a patching grid run again, its next tokens and its attention
  (the patched run's recorded weights at a module and head, beside the unpatched run's).

Plain Python, no gradio; each returns a :class:`~attnviz.app.panels.why.WhyView`.
"""

from __future__ import annotations

import html

from ... import analysis
from ...analysis.patched_run import patched_run
from ...analysis.patching import modules
from ...analysis.why import label, n_layers, prepare
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...render.plots_why import cell_attention_figure, edge_figure, edge_name, flow_figure
from ..kinds import is_encoder_only
from ..state import SessionState, panel_stamps, warning
from ..views import display_token
from ..workers import remote
from .why import WhyView, patch_inputs, shown, stopped_view, token_md

CELL_HEADERS = ["next token", "p patched", "p clean", "p corrupted"]


def site_name(value: str) -> str:
    """A head as the menus write it: ``"decoder_self 0 1"`` -> ``decoder_self 0 · H1``."""
    kind, layer, head = value.split()
    return f"{kind} {layer} · H{head}"


def head_sites(ckpt: Checkpoint) -> list[tuple[str, str]]:
    """Every attention head as a menu choice ``(decoder_self 0 · H1, "decoder_self 0 1")``."""
    values = [f"{kind} {layer} {h}" for kind, layer in modules(ckpt)
              for h in range(ckpt.config.n_heads)]  # fmt: skip
    return [(site_name(v), v) for v in values]


def _cell_site(ckpt: Checkpoint, what: str, index: list[int], stack: str) -> str:
    """The head an opened cell shows first: the cell's own (heads, patterns, head
    positions), else head 0 of the patched layer's self-attention (resid)."""
    if what == "resid":
        return f"{'encoder_self' if stack == 'encoder' else 'decoder_self'} {index[0]} 0"
    kind, layer = modules(ckpt)[index[0]]
    return f"{kind} {layer} {index[1]}"


def _axis_tokens(ckpt: Checkpoint, prep, kind: str) -> tuple[list[str], list[str]]:
    """``(keys, queries)`` labelling a ``kind`` attention map of a prepared run."""
    source = ([label(ckpt, i, "encoder") for i in prep.source] if prep.source is not None
              else list(prep.tokens))  # fmt: skip
    if kind == "encoder_self":
        return source, source
    return (source if kind == "cross" else list(prep.tokens)), list(prep.tokens)


def _labels(tokens: list[str], n: int) -> list[str]:
    return tokens if len(tokens) == n else [str(i) for i in range(n)]


@remote(stopped_view)
def open_cell(
    state: SessionState,
    corrupted: str | None,
    answer: str | None,
    wrong: str | None,
    what: str,
    direction: str,
    cell: str | None,
    site: str | None = None,
) -> WhyView:
    """One cell of the patching grid run again on its own (:func:`attnviz.analysis.
    patched_run.patched_run`): the patched run's top next tokens beside the clean and
    corrupted runs' probabilities of them, and its attention at ``site`` (``"decoder_self 0
    1"``: module and head; default the cell's own head) as that run recorded it, beside the
    unpatched run's. ``cell``: its indices, ``"0,2"``.

    Returns:
        :class:`WhyView`: ``rows`` the next tokens, ``figure`` the attention, ``cells`` every
        head to show (``cell`` the one shown).
    """
    try:
        if not cell:
            raise InputError("run patching, then choose one of its cells")
        try:
            index = [int(i) for i in str(cell).split(",")]
        except ValueError:
            raise InputError(f"a cell is its indices, as '0,2'; got {str(cell)[:20]!r}") from None
        s, bad, a, b = patch_inputs(state, corrupted, answer, wrong, what)
        res = patched_run(s.ckpt, s.text, bad, a, b, what, index, step=s.step,
                          direction=direction)  # fmt: skip
        sites = head_sites(s.ckpt)
        prep = prepare(s.ckpt, bad if res.direction == "denoising" else s.text, s.step)
        site = site if site in {v for _, v in sites} else _cell_site(s.ckpt, what, index,
                                                                      prep.stack)  # fmt: skip
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    rows = [[display_token(t), round(p, 4), round(c, 4), round(k, 4)]
            for t, p, c, k in zip(res.top_tokens, res.probs, res.clean_probs,
                                  res.corrupted_probs, strict=True)]  # fmt: skip
    # as the grid's axes write them: L3 · ␣Paris, decoder_self 0 · H0 · ␣is
    prefix = {"resid": ["L", None], "head_positions": ["", "H", None]}.get(what, ["", "H"])
    name = " · ".join(display_token(c) if p is None else p + c
                      for p, c in zip(prefix, res.cell, strict=True))  # fmt: skip
    kind, layer, head = site.split()
    patched = res.trace.numpy(kind, int(layer))[0, int(head)]  # [Tq, Tk], as the run used it
    base = res.base.numpy(kind, int(layer))[0, int(head)]
    keys, queries = _axis_tokens(s.ckpt, prep, kind)
    run = "corrupted" if res.direction == "denoising" else "clean"
    fig = cell_attention_figure(patched, base, _labels(keys, patched.shape[1]),
                                _labels(queries, patched.shape[0]), site_name(site), run)  # fmt: skip
    moved = float(abs(patched - base).max())
    msg = (f"The {res.direction} run with only **{html.escape(name)}** patched:"
           f" its metric {res.metric:.3f} (0 = corrupted, 1 = clean); it predicts "
           f"{token_md(res.top_tokens[0])} ({res.probs[0]:.3f}). Its attention at "
           f"**{html.escape(site_name(site))}**, as that run recorded it, moved by at most "
           f"{moved:.3f} from the {run} run's.")  # fmt: skip
    data = {**res.to_dict(), "attention": {"site": site, "patched": patched.tolist(),
                                           "unpatched": base.tolist()}}  # fmt: skip
    return WhyView(msg, fig, rows=rows, data=data, result=res, cells=sites, cell=site)


# -- information flow --------------------------------------------------------------------------
@remote(stopped_view)
def flow_graph(state: SessionState, threshold: float = 0.04) -> WhyView:
    """The information-flow routes to the step shown's prediction at ``threshold``."""
    try:
        s = shown(state)
        res = analysis.flow(s.ckpt, s.text, float(threshold), step=s.step)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    layers = n_layers(s.ckpt, "encoder" if is_encoder_only(s.ckpt) else "decoder")
    said = ""
    for kind in ("attention", "cross"):
        edges = [res.edges[i] for i in res.route if res.edges[i].kind == kind]
        # what reaches the predicting position from elsewhere says most; else any edge
        far = [e for e in edges if res.nodes[e.target]["position"] == res.position
               and (kind == "cross" or res.nodes[e.source]["position"] != res.position)]  # fmt: skip
        strongest = max(far or edges, key=lambda e: e.weight, default=None)
        if strongest is None:
            continue
        src = res.nodes[strongest.source]["position"]
        heads = ", ".join(f"H{h}" for h, _ in strongest.heads[:2])
        what = "source " if kind == "cross" else ""
        said += (f" The strongest {'cross-' if kind == 'cross' else ''}attention edge reads "
                 f"{what}position {src} ({token_md(res.token_of(strongest.source))}) into "
                 f"{strongest.target} ({strongest.weight:.2f}, carried by "
                 f"{heads or 'no single head'}).")  # fmt: skip
    dead = res.dead_ends()
    if dead:
        said += (f" The route stops at {', '.join(dead[:4])}: no single part of that block is "
                 "close to its output (its sublayer cancels much of the residual), so the "
                 "measure credits none; the direct attribution still splits the logit.")  # fmt: skip
    msg = (
        f"Edges whose importance (the proximity of a part to the block's output, normalised "
        f"per token) is below {float(threshold):g} are dropped; {len(res.route)} of "
        f"{len(res.edges)} remain on the route to the prediction.{said} Click an attention "
        "edge (or choose it below) for the heads that carry it."
    )
    cells, first = edge_choices(res)
    return WhyView(msg, flow_figure(res, layers), data=res.to_dict(), result=res, cells=cells,
                   cell=first)  # fmt: skip


def edge_choices(res) -> tuple[list[tuple[str, str]], str | None]:
    """The route's attention and cross-attention edges as menu choices ``(words, "index")``,
    strongest first, and the one chosen first: the strongest into the predicting position
    from another position (else the strongest)."""
    route = sorted((i for i in res.route if res.edges[i].site is not None),
                   key=lambda i: -res.edges[i].weight)  # fmt: skip
    if not route:
        return [], None

    def far(i: int) -> bool:
        e = res.edges[i]
        into = res.nodes[e.target]
        return (into["position"] == res.position and into["stack"] != "encoder"
                and (e.kind == "cross" or res.nodes[e.source]["position"] != res.position))  # fmt: skip

    first = next((i for i in route if far(i)), route[0])
    return [(edge_name(res, i, plain=True), str(i)) for i in route], str(first)


EDGE_HEADERS = ["rank", "head", "contribution to the edge", "attention at the edge (recorded)"]


def open_edge(state: SessionState, kept: tuple | None, edge: str | int | None,
              top: int = 3) -> WhyView:  # fmt: skip
    """Attention edge ``edge`` (its index) of the graph in ``kept`` (``(stamp, Flow)`` as the
    page keeps it after :func:`flow_graph`): the heads carrying it ranked by contribution,
    and for the ``top`` first each head's attention map, as the run the graph was computed
    on recorded it, beside its contribution map.

    Returns:
        :class:`WhyView`: ``rows`` the ranked heads, ``figure`` the maps; a one-line refusal
        when there is no graph, it was drawn for another state, or the edge is not one.
    """
    try:
        if not kept:
            raise InputError("draw the routes first, then click an attention edge")
        stamp, res = kept
        if stamp != panel_stamps(state)["why_flow"]:
            raise InputError("the graph was drawn for an earlier step or input: draw it again")
        try:
            index = int(str(edge).strip())
        except ValueError:
            raise InputError(
                f"an edge is its number in the graph, got {str(edge)[:20]!r}"
            ) from None
        heads = res.edge_heads(index)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    rows = [[n, f"H{h}", round(w, 4), round(a, 4)] for n, (h, w, a) in enumerate(heads, 1)]
    e = res.edges[index]
    shown_ = ", ".join(f"H{h}" for h, _, _ in heads[:top]) or "none"
    name = html.escape(edge_name(res, index, plain=True))
    msg = (f"**{name}**: {len(heads)} heads carry it, ranked by "
           f"their contribution; shown: {shown_}. Left, each head's attention as the run "
           "recorded it; right, its contribution map (its importance through each key into "
           "each query's stream after the block); the edge's cell is outlined.")  # fmt: skip
    m = res.maps[e.site]
    q, k = res.nodes[e.target]["position"], res.nodes[e.source]["position"]
    data = {"edge": index, "site": list(e.site), "query": q, "key": k, "weight": e.weight,
            "heads": [{"head": h, "contribution": w, "attention": a,
                       "attention_map": m.attention[h].tolist(),
                       "contribution_map": m.contribution[h].tolist()}
                      for h, w, a in heads[:top]]}  # fmt: skip
    fig = edge_figure(res, index, top) if heads else None
    return WhyView(msg, fig, rows=rows, data=data, result=res)
