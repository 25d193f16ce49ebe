"""The Alignment tab's logic: which cross-attention head aligns words, how well, and how faithful.

Plain Python over :func:`attnviz.analysis.alignment` and :func:`attnviz.analysis.faithfulness`
(no gradio). Computed only when the tab asks (never on a decoding step):

- :func:`grid` — the per-head AER of a corpus: a built-in task's test sentences with their gold
  links, teacher-forced on the task's targets, or an uploaded sources + Pharaoh gold pair
  (aligned on the model's greedy output). Cached per checkpoint version, lens and setting.
- :func:`current` — the current input's word-level cross-attention of one head, its predicted
  links and the gold links (the task's, or a Pharaoh line the user pasted), plus every
  head's sink share on it.
- :func:`download` — the chosen head's predicted links of the grid's sentences as a Pharaoh file.
- :func:`faithfulness_view` — comprehensiveness / sufficiency curves at the shown step.
"""

from __future__ import annotations

import hashlib
import html
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch

from ... import analysis
from ...analysis.align import Gold, parse_pharaoh, to_pharaoh, word_index
from ...analysis.export import key_stats
from ...analysis.stats import SINK_SHARE
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...core.record import record
from ...data.batch import make_batch
from ...data.tasks import TASKS, get_task
from ...data.tokenizer import Encoding
from .. import figures, store
from ..inputs import refuse
from ..state import SessionState, checkpoint_of, warning
from ..workers import remote
from .labs import started_checkpoint

GRID_SENTENCES = 40  # a built-in task's test sentences scored in the grid
MAX_UPLOAD_LINES = 2000
NEEDS_GOLD = (
    "This model has no built-in task, so there are no gold links to score against. For the "
    "grid, upload a **sources** file (one sentence per line) and its **gold** alignment "
    "(Pharaoh: one line per sentence, `i-j` sure and `ipj` possible links, 0-based source "
    "and target word indices); for the current input, paste its Pharaoh line."
)
_GRIDS = store.LRU(16)  # reports by (model, version, device, lens, setting, corpus digest)


@dataclass
class Corpus:
    """Sentences to score, their gold links and (optionally) the targets to teacher-force."""

    sources: list[str]
    gold: list[Gold]
    targets: list[str] | None
    about: str


@dataclass
class Current:
    """The current input read as a word alignment by one head.

    Attributes:
        matrix: ``[Wt, Ws]`` word-level attention of the head (lens applied).
        src_words / tgt_words: word labels; target: the sentence aligned; forced: whether it
            is the task's target (teacher-forced) rather than the model's greedy output.
        predicted / gold: (source word, target word) links; ``gold`` None when there is none.
        sinks: ``{(kind, layer, head): sink share}`` of every head on this input.
    """

    layer: int
    head: int
    matrix: np.ndarray
    src_words: list[str]
    tgt_words: list[str]
    target: str
    forced: bool
    predicted: set[tuple[int, int]]
    gold: Gold | None
    sinks: dict[tuple[str, int, int], float] = field(default_factory=dict)


@dataclass
class AlignView:
    """What the tab shows: figures (grid, overlay), the clickable grid, a message, a file."""

    figures: list[go.Figure] = field(default_factory=list)
    message: str = ""
    grid_html: str = ""
    path: str | None = None
    best: tuple[int, int] | None = None


def _lines(path: str | None, what: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {what} file: {exc}") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise InputError(f"the {what} file is empty")
    if len(lines) > MAX_UPLOAD_LINES:
        raise InputError(f"the {what} file has {len(lines)} lines; at most {MAX_UPLOAD_LINES}")
    return lines


def _pharaoh(lines: list[str], what: str) -> list[Gold]:
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(parse_pharaoh(line))
        except InputError as exc:
            raise InputError(f"{what}, line {n}: {exc}") from None
    return out


def corpus(
    ckpt: Checkpoint, sources_file: str | None = None, gold_file: str | None = None
) -> Corpus:
    """The grid's sentences: an uploaded pair first, else the task's test sentences."""
    if sources_file or gold_file:
        if not (sources_file and gold_file):
            missing = "gold (Pharaoh)" if sources_file else "sources"
            raise InputError(f"upload the {missing} file too: the grid needs both")
        sources = _lines(sources_file, "sources")
        gold = _pharaoh(_lines(gold_file, "gold"), "gold file")
        if len(gold) != len(sources):
            raise InputError(
                f"the sources file has {len(sources)} lines but the gold file {len(gold)}: "
                "one Pharaoh line per sentence"
            )
        return Corpus(sources, gold, None, f"{len(sources)} uploaded sentences (greedy output)")
    if ckpt.task in TASKS:
        task = get_task(ckpt.task)
        ex = task.examples("test", GRID_SENTENCES, seed=1)
        gold = [parse_pharaoh(to_pharaoh(task.links(e.src))) for e in ex]
        about = f"{len(ex)} test sentences of `{ckpt.task}` (teacher-forced on the task's targets)"
        return Corpus([e.src for e in ex], gold, [e.tgt for e in ex], about)
    raise InputError(NEEDS_GOLD)


def report(
    state: SessionState,
    lens: str = "weights",
    setting: str = "output",
    sources_file: str | None = None,
    gold_file: str | None = None,
) -> tuple[analysis.AlignmentReport, Corpus]:
    """The grid's :class:`~attnviz.analysis.AlignmentReport` (cached)."""
    ckpt = checkpoint_of(state)
    refuse(ckpt, "align")
    c = corpus(ckpt, sources_file, gold_file)
    digest = hashlib.sha256(
        repr(
            (c.sources, c.targets, [(sorted(g.sure), sorted(g.possible)) for g in c.gold])
        ).encode()
    ).hexdigest()
    key = (state.model, store.version_of(state.model), state.device, lens, setting, digest)
    rep = _GRIDS.get(key)
    if rep is None:
        rep = analysis.alignment(ckpt, c.sources, c.gold, c.targets, lens=lens, setting=setting)
        _GRIDS.put(key, rep)
    return rep, c


def _words(pieces: list[str], kind: str) -> list[str]:
    idx = word_index(pieces, kind)
    out = [""] * (max(idx) + 1 if idx else 0)
    for p, w in zip(pieces, idx, strict=True):
        out[w] += p
    return [w.replace("▁", "") or "∅" for w in out]


def current(
    state: SessionState,
    layer: int,
    head: int,
    lens: str = "weights",
    setting: str = "output",
    gold_line: str = "",
) -> Current:
    """The current input's alignment by head ``(layer, head)`` (see :class:`Current`).

    A built-in task's input is teacher-forced on the task's target (its gold links refer to
    it); otherwise the model's greedy output is aligned. ``gold_line`` (Pharaoh) overrides
    the task's links.
    """
    ckpt = started_checkpoint(state, "align")
    cfg = ckpt.config
    if not 0 <= layer < cfg.n_decoder_layers or not 0 <= head < cfg.n_heads:
        raise InputError(f"no cross-attention head L{layer} H{head} in this model")
    text, gold, target, forced = state.text, None, None, False
    if ckpt.task in TASKS:
        try:
            task = get_task(ckpt.task)
            target, links = task.target(text), task.links(text)
            ckpt.tgt_tokenizer.encode(target)
            gold, forced = Gold(frozenset(links), frozenset(links)), True
        except Exception:  # an input outside the task: align the greedy output, no gold
            target, gold = None, None
    if (gold_line or "").strip():
        try:
            gold = parse_pharaoh(gold_line)
        except InputError as exc:
            raise InputError(f"the gold line: {exc}") from None
    src = ckpt.encode_source(text)
    if target is None:  # the model's own output as decoded, not its text encoded again
        prediction = ckpt.predict_details(text)
        own, target = prediction.tokens, prediction.text
        tgt = Encoding(own, [ckpt.tgt_tokenizer.token(i) for i in own], [])
        batch = make_batch([src.ids], [own], cfg, ckpt.device, add_eos=False)
    else:
        tgt = ckpt.tgt_tokenizer.encode(target)
        batch = make_batch([src.ids], [tgt.ids], cfg, ckpt.device)
    with torch.no_grad(), record(ckpt.model, capture=("weights", "mask", "values")) as trace:
        batch.forward(ckpt.model)
    specials = {cfg.pad_id, cfg.bos_id, cfg.eos_id}
    keep_s = [j for j, i in enumerate(src.ids) if i not in specials]
    keep_t = [j for j, i in enumerate(tgt.ids) if i not in specials]
    if not keep_s or not keep_t:
        raise InputError("nothing to align: the input or its output has no words")
    view = analysis.lens(ckpt.model, trace, "cross", layer, lens)[0]  # [H', Tt, Ts]
    rows = [j + (setting == "input") for j in keep_t]
    m = view[min(head, view.shape[0] - 1)][rows][:, keep_s].astype(np.float64)  # [nt, ns]
    sw = word_index([src.pieces[j] for j in keep_s], ckpt.src_tokenizer.kind)
    tw = word_index([tgt.pieces[j] for j in keep_t], ckpt.tgt_tokenizer.kind)
    s = np.zeros((len(sw), max(sw) + 1))
    s[np.arange(len(sw)), sw] = 1.0
    t = np.zeros((max(tw) + 1, len(tw)))
    t[tw, np.arange(len(tw))] = 1.0
    words = (t / t.sum(1, keepdims=True)) @ m @ s  # [Wt, Ws]
    predicted = {(int(np.argmax(r)), i) for i, r in enumerate(words)}
    stats = key_stats(ckpt, trace, as_ids(batch.src), as_ids(batch.tgt_in))
    return Current(
        layer=layer,
        head=head,
        matrix=words,
        src_words=_words([src.pieces[j] for j in keep_s], ckpt.src_tokenizer.kind),
        tgt_words=_words([tgt.pieces[j] for j in keep_t], ckpt.tgt_tokenizer.kind),
        target=target,
        forced=forced,
        predicted=predicted,
        gold=gold,
        sinks={(st.kind, st.layer, st.head): float(st.sink) for st in stats},
    )


def as_ids(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# -- the grid as clickable HTML -----------------------------------------------------------------
def _cell_colour(aer: float) -> str:
    """Green (AER 0) to red (AER 1), light enough for dark text in either page theme."""
    hue = int(round(120 * (1 - float(np.clip(aer, 0, 1)))))
    return f"hsl({hue}, 70%, 82%)"


def grid_html(rep: analysis.AlignmentReport, sinks: dict | None = None) -> str:
    """Layers x heads AER as a table of buttons; a button opens its head in the step view
    (``data-av-open``, handled by ``assets/viz.js``). ``sinks``: the sink meter per head."""
    (bl, bh), _ = rep.best
    head_cols = "".join(f"<th>H{h}</th>" for h in range(rep.aer.shape[1]))
    rows = []
    for ly, row in enumerate(rep.aer):
        cells = []
        for h, v in enumerate(row):
            meter = ""
            if sinks and ("cross", ly, h) in sinks:
                share = sinks["cross", ly, h]
                meter = (
                    f'<span class="av-sink" title="sink share on this input: {share:.2f}">'
                    f'<span class="av-sinkfill" style="width:{share * 100:.0f}%"></span></span>'
                    f'<span class="av-sinkval">sink {share:.2f}</span>'
                )
            best = " best" if (ly, h) == (bl, bh) else ""
            cells.append(
                f'<td><button type="button" class="av-aer{best}" data-av-open="cross {ly} {h}" '
                f'style="background:{_cell_colour(v)}" title="open cross L{ly} H{h} in the step '
                f'view">{v:.3f}{meter}</button></td>'
            )
        rows.append(
            f"<tr><th>L{ly}</th>{''.join(cells)}<td class='av-mean'>{rep.layer_aer[ly]:.3f}</td></tr>"
        )
    return (
        '<div class="av-aergrid"><table><thead><tr><th>AER</th>'
        f"{head_cols}<th>heads averaged</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        '<p class="explain">Lower is better. <i>Heads averaged</i>: the AER of the layer\'s '
        "attention averaged over its heads (not the mean of the heads' AERs). Click a head to "
        "open it in the step view's cross-attention heatmap.</p></div>"
    )


def _summary(rep: analysis.AlignmentReport, c: Corpus) -> str:
    (bl, bh), best = rep.best
    layers = ", ".join(f"L{i} {v:.3f}" for i, v in enumerate(rep.layer_aer))
    return (
        f"AER on {c.about}, lens `{rep.lens}`, {rep.setting} setting. "
        f"Best head: **cross L{bl} H{bh} — AER {best:.3f}**. AER of each layer's "
        f"head-averaged attention: {layers}; of every head averaged: {rep.mean_aer:.3f}."
    )


def _stopped(*args, message: str, **kwargs) -> AlignView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return AlignView(message=message)


@remote(_stopped)
def view(
    state: SessionState,
    lens: str = "weights",
    setting: str = "output",
    layer: str | int | None = None,
    head: str | int | None = None,
    gold_line: str = "",
    sources_file: str | None = None,
    gold_file: str | None = None,
) -> AlignView:
    """The whole tab: grid (when there is gold for one), the current input's overlay and
    sink meters. ``layer``/``head`` (``"L1"``/``"H2"``; default the best head)."""
    out = AlignView()
    lines: list[str] = []
    rep = None
    try:
        gold_line, gold_file = _one_line_gold(gold_line, sources_file, gold_file)
    except AttnvizError as exc:
        lines.append(warning(exc))
        gold_file = None
    try:
        rep, c = report(state, lens, setting, sources_file, gold_file)
        lines.append(_summary(rep, c))
        out.best = rep.best[0]
        out.figures.append(figures.aer_grid(rep.aer, rep.layer_aer, rep.mean_aer, rep.best))
    except AttnvizError as exc:
        lines.append(str(exc) if str(exc) == NEEDS_GOLD else warning(exc))
        out.figures.append(figures.placeholder("no AER grid: see the message above"))
    try:
        ly = _index(layer, out.best[0] if out.best else 0)
        hd = _index(head, out.best[1] if out.best else 0)
        cur = current(state, ly, hd, lens, setting, gold_line)
        out.figures.append(figures.alignment_overlay(cur, lens, setting))
        lines.append(_current_message(cur))
    except AttnvizError as exc:
        cur = None
        out.figures.append(figures.placeholder("no alignment of the current input"))
        lines.append(warning(exc))
    if rep is not None:
        out.grid_html = grid_html(rep, cur.sinks if cur else None)
    out.message = "  \n".join(lines)
    return out


def _one_line_gold(
    gold_line: str, sources_file: str | None, gold_file: str | None
) -> tuple[str, str | None]:
    """A one-line gold file uploaded without sources is the current input's gold (unless a
    line is typed): returns ``(gold line, gold file left for the grid)``."""
    if gold_file and not sources_file:
        lines = _lines(gold_file, "gold")
        if len(lines) == 1:
            return (gold_line or "").strip() or lines[0], None
    return gold_line, gold_file


def _index(value, default: int) -> int:
    if value in (None, "", "best"):
        return default
    try:
        return int(str(value).lstrip("LH"))
    except ValueError:
        raise InputError(f"not a layer or head: {value!r}") from None


def _current_message(cur: Current) -> str:
    src = "teacher-forced on the task's target" if cur.forced else "the model's greedy output"
    msg = (
        f"Current input, cross L{cur.layer} H{cur.head}, aligned with “{html.escape(cur.target)}” "
        f"({src}): {len(cur.predicted)} predicted links"
    )
    if cur.gold is None:
        msg += "; no gold links for it (paste a Pharaoh line to compare)."
    else:
        hit = len(cur.predicted & cur.gold.sure) + len(cur.predicted & cur.gold.possible)
        n = len(cur.predicted) + len(cur.gold.sure)
        msg += f", {len(cur.gold.sure)} gold; AER on this sentence {1 - hit / n if n else 0:.3f}."
    sinks = [f"{k} L{ly} H{h} ({v:.2f})" for (k, ly, h), v in cur.sinks.items() if v >= SINK_SHARE]
    if sinks:
        msg += f"  \nMostly-sink heads on this input (≥ {SINK_SHARE:.0%} of their weight on start, "
        msg += f"end, punctuation or first tokens): {', '.join(sinks)}."
    return msg


@remote(_stopped)
def download(
    state: SessionState,
    layer: str | int | None,
    head: str | int | None,
    lens: str = "weights",
    setting: str = "output",
    sources_file: str | None = None,
    gold_file: str | None = None,
) -> AlignView:
    """The chosen head's predicted links of the grid's sentences as a Pharaoh file."""
    try:
        _, gold_file = _one_line_gold("", sources_file, gold_file)
        rep, _ = report(state, lens, setting, sources_file, gold_file)
        ly = _index(layer, rep.best[0][0])
        hd = _index(head, rep.best[0][1])
        if not (0 <= ly < rep.aer.shape[0] and 0 <= hd < rep.aer.shape[1]):
            raise InputError(f"no cross-attention head L{ly} H{hd} in this model")
        folder = Path(tempfile.mkdtemp(prefix="align-", dir=store.private_dir("exports")))
        path = folder / f"attnviz-cross-L{ly}-H{hd}-{lens}-{setting}.pharaoh"
        path.write_text("\n".join(rep.pharaoh(ly, hd)) + "\n", encoding="utf-8")
    except AttnvizError as exc:
        return AlignView(message=warning(exc))
    return AlignView(
        message=f"Wrote {path.name}: {len(rep.sources)} lines, one per sentence.", path=str(path)
    )


# -- faithfulness -------------------------------------------------------------------------------
@remote(_stopped)
def faithfulness_view(state: SessionState, k_max: int = 5) -> AlignView:
    """Comprehensiveness and sufficiency curves per method at the shown step's newest token."""
    try:
        ckpt = started_checkpoint(state, "faith")
        if state.step == 0:
            raise InputError("take at least one Step: faithfulness explains the newest token")
        rep = analysis.faithfulness(ckpt, [state.text], step=state.step - 1, k_max=k_max)
    except AttnvizError as exc:
        return AlignView([figures.placeholder("see the message above")], warning(exc))
    comp, suff = rep.aopc("comprehensiveness"), rep.aopc("sufficiency")
    rows = ", ".join(f"`{m}` {comp[m]:+.3f} / {suff[m]:+.3f}" for m in comp)
    msg = (
        f"Step {state.step}: the drop in the chosen token's probability when each method's "
        f"top-k source tokens are blocked (comprehensiveness: higher is more faithful) or are "
        f"the only ones kept (sufficiency: lower is better). AOPC comprehensiveness / "
        f"sufficiency — {rows}. Methods that rank the tokens alike draw one line over another."
    )
    return AlignView([figures.faithfulness_curves(rep.comprehensiveness, rep.sufficiency)], msg)
