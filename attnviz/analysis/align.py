"""Word alignment from cross-attention: which head aligns, and how well (AER).

A head's cross-attention is read as a word alignment and scored against gold links with the
alignment error rate, AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) over the whole corpus, where A
are the predicted links, S the sure gold links and P the possible ones (S included). The
protocol is the common one (Kobayashi et al. 2020): a word's attention is summed over its
source pieces and averaged over its target pieces (a character model's words are its
characters), special tokens and padding are left out, and each target word is linked to its
argmax source word.

Settings: ``"output"`` reads the decoder row that predicts target word i; ``"input"`` the row
where word i is the decoder input (shift-att, Chen et al. 2020).

Gold links come from the built-in tasks (:meth:`attnviz.data.tasks.Task.links`) or in Pharaoh
format: one line per sentence pair, ``i-j`` a sure link and ``ipj`` a possible one, 0-based
source and target word indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import record
from ..core.sites import head_name
from ..core.specials import not_text_ids
from ..data.batch import make_batch
from .lenses import lens as lens_of

SETTINGS = ("output", "input")
Link = tuple[int, int]  # (source word, target word)


@dataclass(frozen=True)
class Gold:
    """Gold links of one sentence pair: ``sure`` ⊆ ``possible`` (possible includes sure)."""

    sure: frozenset[Link]
    possible: frozenset[Link]


def parse_pharaoh(line: str) -> Gold:
    """``"0-0 1p2 2-1"`` -> :class:`Gold` (``p`` marks a possible link)."""
    sure, possible = set(), set()
    for item in line.split():
        sep = "p" if "p" in item else "-"
        try:
            i, j = (int(x) for x in item.split(sep))
        except ValueError:
            raise InputError(f"not a Pharaoh link: {item!r} (expected i-j or ipj)") from None
        if i < 0 or j < 0:
            raise InputError(f"Pharaoh links are 0-based, got {item!r}")
        (sure if sep == "-" else possible).add((i, j))
    return Gold(frozenset(sure), frozenset(sure | possible))


def to_pharaoh(links: Iterable[Link], possible: Iterable[Link] = ()) -> str:
    """Links -> one Pharaoh line (sure links ``i-j``, then possible-only links ``ipj``)."""
    sure = sorted(set(links))
    extra = sorted(set(possible) - set(sure))
    return " ".join([f"{i}-{j}" for i, j in sure] + [f"{i}p{j}" for i, j in extra])


def read_pharaoh(path) -> list[Gold]:
    """A Pharaoh file (one line per sentence pair) -> gold links per sentence."""
    with open(path, encoding="utf-8") as f:
        return [parse_pharaoh(line) for line in f.read().splitlines()]


def write_pharaoh(path, links: Sequence[Iterable[Link]]) -> None:
    """Predicted links per sentence -> a Pharaoh file."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(to_pharaoh(s) for s in links) + "\n")


def _gold(item) -> Gold:
    if isinstance(item, Gold):
        return item
    if isinstance(item, str):
        return parse_pharaoh(item)
    links = frozenset((int(i), int(j)) for i, j in item)
    return Gold(links, links)


def word_index(pieces: Sequence[str], kind: str) -> list[int]:
    """The word each piece belongs to. Character and word tokenizers: one piece per word;
    sentencepiece pieces: a piece starting with ``▁`` starts a new word."""
    if kind in ("char", "word"):
        return list(range(len(pieces)))
    out, w = [], -1
    for i, p in enumerate(pieces):
        if i == 0 or p.startswith("▁"):
            w += 1
        out.append(w)
    return out


def _to_words(m: np.ndarray, src_words: list[int], tgt_words: list[int]) -> np.ndarray:
    """Piece matrix ``[..., Tt, Ts]`` -> word matrix: summed over source, averaged over target."""
    ns, nt = max(src_words) + 1, max(tgt_words) + 1
    s = np.zeros((len(src_words), ns))
    s[np.arange(len(src_words)), src_words] = 1.0
    t = np.zeros((nt, len(tgt_words)))
    t[tgt_words, np.arange(len(tgt_words))] = 1.0
    t /= t.sum(1, keepdims=True)
    return t @ m @ s


def aer(predicted: Sequence[Iterable[Link]], gold: Sequence[Gold]) -> float:
    """Corpus AER of predicted links against gold (see the module docstring)."""
    a_s = a_p = n_a = n_s = 0
    for pred, g in zip(predicted, gold, strict=True):
        pred = set(pred)
        a_s += len(pred & g.sure)
        a_p += len(pred & g.possible)
        n_a += len(pred)
        n_s += len(g.sure)
    if n_a + n_s == 0:
        raise InputError("no links to score: the gold and the prediction are both empty")
    return 1.0 - (a_s + a_p) / (n_a + n_s)


@dataclass
class AlignmentReport:
    """Per-head AER of cross-attention read as word alignment.

    Attributes:
        aer: ``[n_decoder_layers, n_heads]`` AER of each head.
        layer_aer: ``[n_decoder_layers]`` AER of each layer's head-mean attention.
        mean_aer: AER of the attention averaged over every layer and head.
        best: ``((layer, head), aer)`` of the best head.
        links: per sentence, ``{(layer, head): predicted links}``.
        sources / targets: the sentences aligned (targets: teacher-forced or the output).
        lens, setting: how the attention was read.
    """

    aer: np.ndarray
    layer_aer: np.ndarray
    mean_aer: float
    best: tuple[tuple[int, int], float]
    links: list[dict[tuple[int, int], set[Link]]]
    sources: list[str]
    targets: list[str]
    lens: str
    setting: str
    gold: list[Gold] = field(repr=False, default_factory=list)

    def pharaoh(self, layer: int | None = None, head: int | None = None) -> list[str]:
        """The predicted links of one head (default: the best) as Pharaoh lines."""
        if layer is None or head is None:
            (layer, head), _ = self.best
        return [to_pharaoh(s[layer, head]) for s in self.links]

    def text(self) -> str:
        (layer, head), best = self.best
        rows = [f"alignment ({self.lens}, {self.setting} setting, {len(self.sources)} sentences)"]
        for i, row in enumerate(self.aer):
            cells = "  ".join(f"H{h} {v:.3f}" for h, v in enumerate(row))
            rows.append(f"  cross L{i}: {cells}   (heads averaged {self.layer_aer[i]:.3f})")
        rows.append(
            f"  every head averaged: {self.mean_aer:.3f}; best: {head_name('cross', layer, head)} {best:.3f}"
        )
        return "\n".join(rows)


def alignment(
    ckpt: Checkpoint,
    sources: Sequence[str],
    gold: Sequence,
    targets: Sequence[str] | None = None,
    lens: str = "weights",
    setting: str = "output",
    batch_size: int = 64,
) -> AlignmentReport:
    """Score every cross-attention head as a word aligner against ``gold``.

    Args:
        sources: input sentences.
        gold: per sentence, a set of (source word, target word) links, a Pharaoh line, or a
            :class:`Gold`.
        targets: the target sentences to teacher-force; default the model's greedy output.
        lens: ``"weights"``, ``"norms"`` or ``"rollout"`` (see :mod:`attnviz.analysis.lenses`).
        setting: ``"output"`` or ``"input"`` (see the module docstring).
    Returns:
        An :class:`AlignmentReport`.
    """
    sources = list(sources)
    if setting not in SETTINGS:
        raise InputError(f"setting must be one of {SETTINGS}, got {setting!r}")
    if len(gold) != len(sources):
        raise InputError(f"{len(sources)} sentences but {len(gold)} gold alignments")
    if not sources:
        raise InputError("give at least one sentence to align")
    golds = [_gold(g) for g in gold]
    targets = list(ckpt.predict_batch(sources) if targets is None else targets)
    if len(targets) != len(sources):
        raise InputError(f"{len(sources)} sentences but {len(targets)} targets")
    cfg, model = ckpt.config, ckpt.model
    n_layers, n_heads = cfg.n_decoder_layers, cfg.n_heads
    specials = not_text_ids(cfg)  # unknown words are still words
    per_head: list[dict[tuple[int, int], set[Link]]] = []
    layer_links: list[dict[int, set[Link]]] = []
    mean_links: list[set[Link]] = []
    for start in range(0, len(sources), batch_size):
        src_enc = [ckpt.encode_source(s) for s in sources[start : start + batch_size]]
        tgt_enc = [ckpt.tgt_tokenizer.encode(t) for t in targets[start : start + batch_size]]
        batch = make_batch([e.ids for e in src_enc], [e.ids for e in tgt_enc], cfg, ckpt.device)
        with torch.no_grad(), record(model, capture=("weights", "mask", "values")) as trace:
            batch.forward(model)
        views = {layer: lens_of(model, trace, "cross", layer, lens) for layer in range(n_layers)}
        for b, (se, te) in enumerate(zip(src_enc, tgt_enc, strict=True)):
            keep_s = [j for j, i in enumerate(se.ids) if i not in specials]
            keep_t = [j for j, i in enumerate(te.ids) if i not in specials]
            if not keep_s or not keep_t:
                per_head.append({(ly, h): set() for ly in range(n_layers) for h in range(n_heads)})
                layer_links.append({ly: set() for ly in range(n_layers)})
                mean_links.append(set())
                continue
            rows = [j + (setting == "input") for j in keep_t]  # decoder rows of target pieces
            sw = word_index([se.pieces[j] for j in keep_s], ckpt.src_tokenizer.kind)
            tw = word_index([te.pieces[j] for j in keep_t], ckpt.tgt_tokenizer.kind)
            mats = np.stack([views[layer][b] for layer in range(n_layers)])  # [L, H', Tt, Ts]
            words = _to_words(mats[:, :, rows][..., keep_s], sw, tw)  # [L, H', Wt, Ws]
            per_head.append(
                {
                    (ly, h): _argmax_links(words[ly, min(h, words.shape[1] - 1)])
                    for ly in range(n_layers)
                    for h in range(n_heads)
                }  # fmt: skip
            )
            layer_links.append({ly: _argmax_links(words[ly].mean(0)) for ly in range(n_layers)})
            mean_links.append(_argmax_links(words.mean((0, 1))))
    grid = np.array(
        [
            [aer([s[ly, h] for s in per_head], golds) for h in range(n_heads)]
            for ly in range(n_layers)
        ]
    )
    layer_aer = np.array([aer([s[ly] for s in layer_links], golds) for ly in range(n_layers)])
    best = np.unravel_index(int(np.argmin(grid)), grid.shape)
    return AlignmentReport(
        aer=grid,
        layer_aer=layer_aer,
        mean_aer=aer(mean_links, golds),
        best=((int(best[0]), int(best[1])), float(grid[best])),
        links=per_head,
        sources=sources,
        targets=targets,
        lens=lens,
        setting=setting,
        gold=golds,
    )


def _argmax_links(words: np.ndarray) -> set[Link]:
    """``[Wt, Ws]`` word attention -> {(argmax source word, target word)}."""
    return {(int(np.argmax(row)), t) for t, row in enumerate(words)}
