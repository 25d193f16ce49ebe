"""Head ablation: zero chosen heads inside the real forward pass and measure what changes.

Effects are measured two ways: the greedy output with and without the ablation, and, teacher-
forced on the unablated greedy output, the probability the model gives to each of those
tokens at each step (so a change shows even when the argmax survives).

An encoder-only model generates nothing: its output is its top filler at each mask token (in a
sentence without one, its own prediction of each token), and the probabilities are those of
the unablated fillers (of the sentence's own tokens), read in one pass
(:func:`attnviz.analysis.masked_lm.read_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import EditError
from ..core.model import KINDS
from ..core.record import Edit, ZeroHeads, record
from ..core.sites import head_name
from ..data.batch import Batch, make_batch, make_lm_batch, source_batch
from .labsize import lab_memory, refuse_oversized
from .masked_lm import fillers_text, predictions, read_batch

Head = tuple[str, int, int]  # (kind, layer, head)


def greedy_batch(ckpt: Checkpoint, texts: Sequence[str], edits: Sequence[Edit] = ()) -> Batch:
    """Encode ``texts`` into one padded batch and greedy-decode it (under ``edits``).

    Returns:
        A :class:`~attnviz.data.Batch` teacher-forcing the model's own greedy outputs:
        ``tgt_out`` ``[B, Tt]`` is each output (its end id included), ``tgt_in`` the start id
        then the output without its last token; for a decoder-only model, each prompt then
        its output as one sequence (:func:`~attnviz.data.batch.make_lm_batch`); for an
        encoder-only model, the sentences read once (:func:`~attnviz.analysis.masked_lm.read_batch`).
    """
    cfg = ckpt.config
    if cfg.encoder_only:
        return read_batch(ckpt, texts, edits)
    ids = [ckpt.encode_source(t).ids for t in texts]
    if cfg.decoder_only:
        rows = greedy_each(ckpt, ids, edits)
        return make_lm_batch(ids, rows, cfg, "target", ckpt.device)
    src = source_batch(ids, cfg, ckpt.device)
    out = ckpt.greedy(src.src, src.src_pad, edits)  # the checkpoint's generation rules
    rows = [ckpt.decoding.until_end(r) for r in out.tolist()]
    return make_batch(ids, rows, cfg, ckpt.device, add_eos=False)


def greedy_each(
    ckpt: Checkpoint,
    prompts: Sequence[Sequence[int]],
    edits: Sequence[Edit] = (),
    cache: bool = True,
) -> list[list[int]]:
    """A decoder-only model's greedy outputs (end id included), one prompt at a time: a
    decoder-only prompt is never padded, so prompts of several lengths are decoded apart."""
    rows = []
    for p in prompts:
        one = torch.tensor([list(p)], device=ckpt.device)  # [1, P]
        out = ckpt.greedy(one, None, edits, cache=cache)[0].tolist()
        rows.append(ckpt.decoding.until_end(out))
    return rows


def decode_again(ckpt: Checkpoint, batch: Batch, edits: Sequence[Edit]) -> list[list[int]]:
    """The greedy outputs (end id included) of ``batch``'s inputs under ``edits`` (an
    encoder-only model's: its top token at each scored position)."""
    if batch.mlm:
        return predictions(ckpt, batch, edits)
    if batch.lm:
        return greedy_each(ckpt, batch.prompts(), edits)
    out = ckpt.greedy(batch.src, batch.src_pad, edits)
    return [ckpt.decoding.until_end(r) for r in out.tolist()]


def outputs_of(ckpt: Checkpoint, batch: Batch, edits: Sequence[Edit] = ()) -> list[list[int]]:
    """The outputs ``batch`` was made from under ``edits``: its targets, but for an
    encoder-only sentence without a mask token, whose targets are its own tokens and whose
    output is the model's prediction of each."""
    return decode_again(ckpt, batch, edits) if batch.mlm else batch.targets()


@torch.no_grad()
def token_probs(ckpt: Checkpoint, batch: Batch, edits: Sequence[Edit] = ()) -> np.ndarray:
    """Teacher-forced probability of each output token of ``batch``: ``[B, Tt]`` (0 at padding)."""
    with record(ckpt.model, edits, capture=None):
        logits = batch.forward(ckpt.model)  # [B, Tt, V]
    probs = logits.float().softmax(-1).gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)
    return as_numpy(probs.masked_fill(batch.tgt_pad, 0.0))


def check_size(ckpt: Checkpoint, batch: Batch) -> None:
    """Refuse, in one line, an ablation whose teacher-forced runs (:func:`token_probs`: one
    ``[B, Tt, V]`` at a time, not recorded) this process cannot hold, before they run."""
    b, tt = batch.tgt_in.shape if batch.tgt_in is not None else batch.src.shape
    needed = lab_memory(ckpt.config, b, batch.src.shape[-1], tt, runs=1, recorded=False)
    refuse_oversized("head ablation", ckpt.config, needed, tt, recorded=False)


def zero_heads(heads: Sequence[Head]) -> list[ZeroHeads]:
    """``[(kind, layer, head), ...]`` -> one :class:`ZeroHeads` edit per (kind, layer)."""
    grouped: dict[tuple[str, int], list[int]] = {}
    for item in heads:
        if len(item) != 3:
            raise EditError(f"a head is (kind, layer, head), got {item!r}")
        kind, layer, head = item
        grouped.setdefault((kind, layer), []).append(head)
    return [ZeroHeads(kind, layer, hs) for (kind, layer), hs in grouped.items()]


def all_heads(ckpt: Checkpoint, kinds: Sequence[str] = KINDS) -> list[Head]:
    """Every (kind, layer, head) of the model, optionally for some kinds only."""
    cfg = ckpt.config
    layers = {"encoder_self": cfg.n_encoder_layers * cfg.has_encoder,
              "decoder_self": cfg.n_decoder_layers * cfg.has_decoder,
              "cross": cfg.n_decoder_layers * cfg.has_cross}  # fmt: skip
    return [(k, layer, h) for k in kinds for layer in range(layers[k]) for h in range(cfg.n_heads)]


@dataclass
class AblationResult:
    """Effect of zeroing ``heads`` on one input.

    Attributes:
        baseline / ablated: greedy output text without / with the ablation.
        baseline_tokens: the unablated output tokens (strings, EOS included); an
            encoder-only model's: the top filler at each mask (else each token itself).
        prob_baseline / prob_ablated: ``[T]`` probability of each baseline token at its step,
            teacher-forced on the baseline output, without / with the ablation.
        ablated_tokens: the output tokens with the ablation (an encoder-only model's top
            token at each of ``positions``).
        positions: an encoder-only model's scored positions in the sentence (else empty).
    """

    heads: list[Head]
    text: str
    baseline: str
    ablated: str
    baseline_tokens: list[str]
    prob_baseline: np.ndarray
    prob_ablated: np.ndarray
    ablated_tokens: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    @property
    def prob_change(self) -> np.ndarray:
        """``[T]`` ablated minus baseline probability of each baseline token."""
        return self.prob_ablated - self.prob_baseline

    @property
    def changed(self) -> bool:
        return self.ablated != self.baseline


def ablate(
    ckpt: Checkpoint, text: str, heads: Sequence[Head], edits: Sequence[Edit] = ()
) -> AblationResult:
    """Zero ``heads`` (any kinds and layers) and compare outputs on ``text``."""
    ablation = [*edits, *zero_heads(heads)]
    base = greedy_batch(ckpt, [text], edits)
    check_size(ckpt, base)
    ablated = decode_again(ckpt, base, ablation)[0]
    real = as_numpy(base.real[0])
    tok = ckpt.tgt_tokenizer
    positions = [int(i) for i in np.flatnonzero(real)] if base.mlm else []
    baseline = outputs_of(ckpt, base, edits)[0]
    if base.mlm:  # fillers at masks apart are not one word
        said, ablated_said = (fillers_text(ckpt, ids, positions) for ids in (baseline, ablated))
    else:
        said, ablated_said = tok.decode(baseline), tok.decode(ablated)
    return AblationResult(
        heads=list(heads),
        text=text,
        baseline=said,
        ablated=ablated_said,
        baseline_tokens=[tok.token(i) for i in base.targets()[0]],
        prob_baseline=token_probs(ckpt, base, edits)[0][real],
        prob_ablated=token_probs(ckpt, base, ablation)[0][real],
        ablated_tokens=[tok.token(i) for i in ablated],
        positions=positions,
    )


@dataclass(frozen=True)
class HeadEffect:
    """Effect of zeroing one head over some inputs (sorted by :func:`head_effects`)."""

    kind: str
    layer: int
    head: int
    changed_outputs: int  # inputs whose greedy output changed
    max_prob_change: float  # largest |change| in a baseline token's probability
    mean_prob_change: float  # mean |change| over all output tokens

    @property
    def site(self) -> str:
        """``"cross L1 H2"`` (:func:`attnviz.core.sites.head_name`)."""
        return head_name(self.kind, self.layer, self.head)


def head_effects(
    ckpt: Checkpoint,
    texts: Sequence[str],
    heads: Sequence[Head] | None = None,
    edits: Sequence[Edit] = (),
) -> list[HeadEffect]:
    """Zero each head alone and rank the heads by effect (largest first).

    Args:
        texts: inputs, run as one padded batch.
        heads: heads to try (default: every head).
        edits: edits kept on for every run (the baseline included).
    """
    base = greedy_batch(ckpt, texts, edits)
    check_size(ckpt, base)
    p0 = token_probs(ckpt, base, edits)
    real = as_numpy(base.real)
    baseline = outputs_of(ckpt, base, edits)
    out = []
    for kind, layer, head in heads or all_heads(ckpt):
        ablation = [*edits, ZeroHeads(kind, layer, head)]
        ablated = decode_again(ckpt, base, ablation)
        changed = sum(a != b for a, b in zip(ablated, baseline, strict=True))
        delta = np.abs(token_probs(ckpt, base, ablation) - p0)[real]
        out.append(HeadEffect(kind, layer, head, changed, float(delta.max()), float(delta.mean())))
    return sorted(out, key=lambda e: (e.changed_outputs, e.mean_prob_change), reverse=True)
