"""Beam search as transformers' ``generate(num_beams=k)`` runs it, with the search tree kept.

Each step scores every extension of the ``k`` running hypotheses, keeps the best ``2k``
candidates, lets those among the first ``k`` that end (EOS, or the length limit) join the
``k`` finished hypotheses (ranked by ``score / length ** length_penalty``), and continues
with the best ``k`` that did not end. The search stops as transformers' does
(``early_stopping`` True, False or ``"never"``). Like transformers, it starts from ``k``
copies of the start token, all but one at score -1e9, so the arithmetic and every tie are
the same; those placeholder copies are never drawn in the tree.

:func:`beam_search` can return the tree of every extension kept at each step
(:class:`BeamTree`) and the attention of the winning hypothesis, recorded during the
search. :func:`beam_predict` runs it on a checkpoint under the folder's generation config.
The tree and result types live in :mod:`attnviz.decode.tree`, the logits processors and the
generation config in :mod:`attnviz.decode.rules`; their public names import from here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.errors import InputError
from ..core.memory import MEMORY_FRACTION, available_memory
from ..core.model import Transformer
from ..core.record import AttentionRecord, Edit, record
from ..core.step import fused_step
from .assemble import STEP_FIELDS, assemble_trace, step_records
from .greedy import (
    LogitRules,
    as_batch,
    default_max_len,
    end_ids,
    eval_no_grad,
    source_pad_mask,
    start_decoding,
)
from .rules import Constraints, beam_options, generation_settings
from .tree import BeamNode, BeamResult, BeamTree, Hypothesis

__all__ = [
    "BeamNode", "BeamResult", "BeamTree", "Hypothesis", "beam_options", "beam_predict",
    "beam_search", "folder_num_beams", "generation_settings",
]  # fmt: skip

_PLACEHOLDER = -1.0e9  # transformers' score for beams that must not be chosen


def beam_search(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int | None,
    beam_size: int = 4,
    max_len: int | None = None,
    length_penalty: float = 1.0,
    src_pad_mask: Tensor | None = None,
    return_attention: bool = False,
    edits: Sequence[Edit] = (),
    rules: LogitRules | None = None,
    early_stopping: bool | str = False,
    no_repeat_ngram_size: int = 0,
    bad_words: Sequence[Sequence[int]] = (),
    repetition_penalty: float = 1.0,
    return_tree: bool = False,
    fused: bool = True,
) -> list[BeamResult]:
    """Beam search, one source sequence at a time, as transformers' ``generate`` runs it.

    With ``beam_size=1`` this is greedy decoding (transformers switches to greedy there too).

    Args:
        src: ``[B, Ts]`` (or ``[Ts]``) source ids, padded with ``config.pad_id``; for a
            decoder-only model, prompts (one searched at a time; hypotheses are their
            continuations, and the n-gram and repetition rules see the prompt too, as
            transformers' do).
        bos_id: the decoder start id (unused by a decoder-only model); ``eos_id``: the end
            id (None: decode ``max_len``).
        beam_size: ``num_beams``.
        max_len: most tokens to produce (default ``2 * Ts + 16``, within the model's
            max_len); a hypothesis reaching it is finished.
        length_penalty: finished hypotheses rank by ``score / len ** length_penalty``.
        src_pad_mask: ``[B, Ts]`` bool, default from ``config.pad_id``.
        return_attention: also return the winner's attention, recorded during the search.
        edits: attention edits applied to every pass (see :func:`attnviz.core.record`).
        rules: :class:`LogitRules` (forced BOS/EOS, banned ids, minimum length) applied to
            each step's log-probabilities.
        early_stopping: True stops once ``beam_size`` hypotheses are finished; False stops
            when the best running score can no longer beat the worst finished one at the
            current length; ``"never"`` judges that at the longest length allowed.
        no_repeat_ngram_size: no n-gram of this size (start token included) occurs twice.
        bad_words: token sequences never produced (a sequence of one bans that id).
        repetition_penalty: transformers' ``repetition_penalty`` on tokens already present.
        return_tree: also return :class:`BeamTree` of the search in ``.tree``.
        fused: run each cached step as one fused function (:mod:`attnviz.core.step`, which
            records and edits through the same hooks as the modules); ``False`` runs it module
            by module (same hypotheses, scores and attention; the benchmark compares the two).
    Returns:
        One :class:`BeamResult` per source row.
    """
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
        raise InputError(f"beam_size must be an integer of at least 1, got {beam_size!r}")
    if not (early_stopping is True or early_stopping is False or early_stopping == "never"):
        raise InputError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
    if not isinstance(no_repeat_ngram_size, int) or no_repeat_ngram_size < 0:
        raise InputError(
            f"no_repeat_ngram_size must be a whole number >= 0, got {no_repeat_ngram_size!r}"
        )
    if not repetition_penalty > 0:
        raise InputError(f"repetition_penalty must be positive, got {repetition_penalty!r}")
    if not math.isfinite(float(length_penalty)):
        raise InputError(f"length_penalty must be a finite number, got {length_penalty!r}")
    vocab = model.config.tgt_vocab_size
    words = [tuple(int(t) for t in w) for w in bad_words]
    for w in words:
        if not w or not all(0 <= t < vocab for t in w):
            raise InputError(f"bad word {list(w)} must be ids in 0..{vocab - 1}")
    if eos_id is not None:  # transformers never bans the end id on its own
        words = [w for w in words if w != (eos_id,)]
    if beam_size == 1:  # transformers decodes greedily: the first hypothesis to end wins
        early_stopping = True
    src = as_batch(src, model=model).to(next(model.parameters()).device)
    pad = source_pad_mask(model, src, src_pad_mask)
    search = _Search(
        model, bos_id, eos_id, beam_size, float(length_penalty), early_stopping,
        Constraints(rules, no_repeat_ngram_size, words, float(repetition_penalty), eos_id),
        return_attention, return_tree, fused,
    )  # fmt: skip
    results = []
    with record(model, edits, capture=None):  # the search's own record blocks nest inside
        for i in range(src.shape[0]):
            row_pad = None if pad is None else pad[i : i + 1]
            results.append(search.run(src[i : i + 1], row_pad, max_len))
    return results


#: Steps the first memory check of a beam search looks ahead (then twice as many each time
#: the decode reaches the horizon).
_FIRST_HORIZON = 64
#: Bytes of Python objects per hypothesis and step: a tree node, a token and a log-prob in
#: the slot's lists (measured: ~300 bytes; counted generously).
_BYTES_PER_NODE = 512


def beam_memory(config: ModelConfig, beams: int, steps: int, src_len: int,
                attention: bool = False) -> int:  # fmt: skip
    """Peak bytes a beam search of ``beams`` hypotheses over ``steps`` steps may hold, from
    the config's arithmetic: the self- and cross-attention caches of every beam, a step's
    ``[k, V]`` scores (a few copies), the tree and the slots, and with ``attention`` every
    step's recorded rows."""
    d_kv = config.n_heads * config.head_dim
    layers = config.n_decoder_layers
    cache = layers * 2 * beams * (steps + src_len) * d_kv * 4  # [k, H, T, Dh] K and V
    scores = 6 * beams * config.tgt_vocab_size * 4  # logits, log-probs, sums, rules, top-k
    nodes = 3 * beams * steps * _BYTES_PER_NODE  # running + finished slots, tree nodes
    rows = 0
    if attention:  # weights and masks of every layer of both kinds, per step and beam
        rows = 2 * 2 * layers * config.n_heads * beams * steps * (steps + src_len) * 4
    return cache + scores + nodes + rows


def check_beam_size(config: ModelConfig, beams: int, steps: int, src_len: int,
                    attention: bool = False) -> None:  # fmt: skip
    """Refuse a beam search whose hypotheses cannot fit in the memory this process may use
    (the same budget as :func:`attnviz.core.memory.check_size`), in one line saying the limit.

    Raises:
        InputError: ``num_beams`` times the length limit needs more than the budget.
    """
    needed = beam_memory(config, beams, steps, src_len, attention)
    if needed <= 64 << 20:
        return
    budget = int(available_memory() * MEMORY_FRACTION)
    if needed <= budget:
        return
    per_beam = max(beam_memory(config, 1, steps, src_len, attention), 1)
    fit = budget // per_beam
    raise InputError(
        f"num_beams {beams:,} over {steps:,} steps needs about {_size(needed)}, more "
        f"than the {_size(budget)} this process can use: at most {fit:,} beams fit at this "
        "length (fewer beams or a lower max_len)"
    )


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**28 else f"{n / 2**20:.0f} MB"


@dataclass
class _Slot:
    """One of the ``k`` running (or finished) places: the hypothesis and what it carries."""

    tokens: list[int]
    logps: list[float]
    node: int | None  # None: descends from a placeholder copy (never drawn)
    records: list[dict[tuple[str, int], AttentionRecord]]
    score: float = 0.0  # sum of log-probs


@dataclass
class _Candidates:
    """One step's best ``2k`` extensions, as lists: their scores, parent slots, tokens,
    whether they ended and whether they may finish (``just``), and the step's records."""

    step: int
    logp: Tensor  # [k, V] after the rules
    vals: list[float]
    parents: list[int]
    tokens: list[int]
    just: list[bool]
    ends: list[bool]
    records: dict[tuple[str, int], AttentionRecord]


class _Search:
    def __init__(
        self, model, bos_id, eos_id, k, length_penalty, early_stopping, constraints,
        return_attention, return_tree, fused,
    ):  # fmt: skip
        self.model, self.bos_id, self.eos_id, self.k = model, bos_id, eos_id, k
        self.lp, self.early_stopping, self.constraints = length_penalty, early_stopping, constraints
        self.return_attention, self.return_tree = return_attention, return_tree
        self.fused = fused

    def run(self, src: Tensor, pad: Tensor | None, max_len: int | None) -> BeamResult:
        model, k, eos, lp = self.model, self.k, self.eos_id, self.lp
        n_max = default_max_len(model, src.shape[1], max_len)
        # beams x length is checked for the steps ahead, the horizon doubling as the decode
        # reaches it (as the KV cache grows): a huge length limit costs only what is decoded
        horizon = min(n_max, _FIRST_HORIZON)
        check_beam_size(model.config, k, horizon, src.shape[1], self.return_attention)
        capture = STEP_FIELDS if self.return_attention else ()
        device = src.device
        top_mask = torch.zeros(1, 2 * k, dtype=torch.bool, device=device)
        top_mask[:, :k] = True  # only the best k candidates may finish
        stops = torch.tensor(end_ids(model, eos), dtype=torch.long, device=device)
        with eval_no_grad(model):
            with record(model, capture=capture) as enc_trace:
                start = start_decoding(model, src, pad, self.bos_id, n_max)  # batch 1
            cache = start.cache
            first = int(start.first[0])
            nodes = [BeamNode(0, None, first, -1, 0.0, 0.0, False)]
            step_fn = fused_step(model, cache) if self.fused else None
            running = [_Slot([], [], 0 if i == 0 else None, []) for i in range(k)]
            run_scores = torch.zeros(1, k, device=device)  # [1, k], as transformers lays it out
            run_scores[:, 1:] = _PLACEHOLDER
            done: list[_Slot | None] = [None] * k  # finished places (None: nothing yet)
            done_scores = torch.full((1, k), _PLACEHOLDER, device=device)  # normalized
            done_flags = torch.zeros(1, k, dtype=torch.bool, device=device)
            improvable = True
            seqs = start.prefix.expand(k, -1)  # [k, 1 + step] (or the prompt and step)
            for step in range(n_max):
                if step == horizon:
                    horizon = min(2 * horizon, n_max)
                    check_beam_size(model.config, k, horizon, src.shape[1], self.return_attention)
                # the k start copies are the same at step 0: run one, use it k times
                last = seqs[:1, -1:] if step == 0 else seqs[:, -1:]  # [1 or k, 1]
                with record(model, capture=capture) if capture else nullcontext() as trace:
                    if step_fn is not None:  # the module path's math, through the same hooks
                        logits = step_fn(last[:, 0]).float()
                    else:
                        logits = model.decode(last, None, cache=cache)[:, -1].float()
                logits = logits.expand(k, -1)  # [k, V]
                vocab = logits.shape[-1]  # [k, V]
                logp = torch.log_softmax(logits, dim=-1)
                logp = self.constraints.apply(logp, seqs, step, n_max)
                acc = (logp + run_scores[0, :, None]).reshape(1, -1)  # [1, k * V]
                top_vals, top_idx = torch.topk(acc, k=2 * k)  # [1, 2k]
                parents, tokens = top_idx // vocab, top_idx % vocab
                ends = torch.full_like(top_mask, step + 1 >= n_max)
                if stops.numel():
                    ends |= torch.isin(tokens, stops)
                # the best k that did not end keep running
                kept = top_vals + ends.to(torch.float32) * _PLACEHOLDER
                nxt = torch.topk(kept, k=k)[1]  # [1, k]
                new_scores = kept.gather(1, nxt)
                # those among the best k that ended join the finished, if good enough
                just = ends & top_mask
                cand = top_vals / ((step + 1) ** lp)
                full = bool(done_flags.all()) and self.early_stopping is True
                cand = cand + float(full) * _PLACEHOLDER
                cand = cand + float(not improvable) * _PLACEHOLDER
                cand = cand + (~just) * _PLACEHOLDER
                merged = torch.cat([done_scores, cand], dim=1)  # [1, 3k]
                pick = torch.topk(merged, k=k)[1][0].tolist()

                step_of = _Candidates(
                    step=step,
                    logp=logp,
                    vals=top_vals[0].tolist(),
                    parents=parents[0].tolist(),
                    tokens=tokens[0].tolist(),
                    just=just[0].tolist(),
                    ends=ends[0].tolist(),
                    records=step_records(trace) if trace is not None and capture else {},
                )

                new_done = []
                for j in pick:
                    if j < k:
                        new_done.append(done[j])
                    else:
                        new_done.append(
                            self._extend(nodes, running, step_of, j - k, True)
                            if step_of.just[j - k]
                            else None
                        )
                flags = torch.cat([done_flags, just], dim=1)
                done = new_done
                done_scores = merged[:, pick]
                done_flags = flags[:, pick]
                nxt_l = nxt[0].tolist()
                running = [self._extend(nodes, running, step_of, c, False) for c in nxt_l]
                run_scores = new_scores
                if bool(ends.all()):
                    break
                # the stopping test of transformers' beam search, after this step
                never = self.early_stopping == "never" and lp > 0.0
                best_len = n_max if never else step + 1
                best_possible = run_scores[:, :1] / (best_len**lp)
                worst = torch.where(
                    done_flags, done_scores.min(dim=1, keepdim=True)[0], _PLACEHOLDER
                )
                improvable = improvable and bool((best_possible > worst).any())
                if not improvable or (bool(done_flags.all()) and self.early_stopping is True):
                    break
                par_index = torch.tensor([step_of.parents[c] for c in nxt_l], device=device)
                index = par_index
                if step == 0:
                    index = torch.zeros_like(par_index)  # the cache holds one start copy
                cache.select(index)
                seqs = torch.cat([seqs[par_index], tokens[0, nxt[0]][:, None]], dim=1)

        flags = done_flags[0].tolist()
        hyps = [
            (s, score)
            for s, score, flag in zip(done, done_scores[0].tolist(), flags, strict=True)
            if s is not None and flag
        ]
        tree = BeamTree(nodes, 0) if self.return_tree else None
        if done[0] is None or not flags[0]:  # the rules blocked every ending: nothing won
            return BeamResult([], float("-inf"), float("-inf"), tree=tree)
        best, norm = hyps[0]
        if best.node is None:  # a placeholder copy won (only with a huge length_penalty)
            best.node = _graft(nodes, best)
        if tree is not None:
            tree.best = best.node
        trace = assemble_trace(enc_trace, best.records) if self.return_attention else None
        return BeamResult(
            tokens=best.tokens,
            score=best.score,
            normalized_score=norm,
            trace=trace,
            tree=tree,
            hypotheses=[Hypothesis(s.tokens, s.score, n, s.node) for s, n in hyps],
        )

    def _extend(
        self,
        nodes: list[BeamNode],
        running: list[_Slot],
        cands: _Candidates,
        c: int,
        finished: bool,
    ) -> _Slot:
        """Candidate ``c`` as a slot, and a tree node when it descends from the real start
        (not a placeholder copy), has a finite score and is kept as running or finished."""
        parent = running[cands.parents[c]]
        tok, score = cands.tokens[c], cands.vals[c]
        logp = float(cands.logp[cands.parents[c], tok])
        node = None
        real = parent.node is not None and math.isfinite(score)
        if real and (cands.just[c] if finished else not cands.ends[c]):
            node = len(nodes)
            nodes.append(BeamNode(node, parent.node, tok, cands.step, logp, score, finished))
        rows = parent.records
        if self.return_attention:
            row = 0 if cands.step == 0 else cands.parents[c]  # step 0 ran one start copy
            rows = rows + [{key: _row(r, row) for key, r in cands.records.items()}]
        return _Slot(parent.tokens + [tok], parent.logps + [logp], node, rows, score)


def _graft(nodes: list[BeamNode], slot: _Slot) -> int:
    """Add a path for a hypothesis that has none (one grown from a placeholder copy)."""
    parent, score = 0, 0.0
    for step, (tok, logp) in enumerate(zip(slot.tokens, slot.logps, strict=True)):
        score += logp
        end = step == len(slot.tokens) - 1
        nodes.append(
            BeamNode(len(nodes), parent, tok, step, logp, slot.score if end else score, end)
        )
        parent = len(nodes) - 1
    return parent


def _row(rec: AttentionRecord, beam: int) -> AttentionRecord:
    """One hypothesis's slice of a batched step record (batch 1 again)."""
    out = AttentionRecord(rec.kind, rec.layer, rec.name)
    for f in STEP_FIELDS:
        value = getattr(rec, f)  # None: not captured, or no window on this layer
        setattr(out, f, None if value is None else value[beam : beam + 1])
    return out


def beam_predict(
    ckpt: Any,
    text: str,
    num_beams: int | None = None,
    max_len: int | None = None,
    *,
    length_penalty: float | None = None,
    early_stopping: bool | str | None = None,
    no_repeat_ngram_size: int | None = None,
    return_tree: bool = False,
    return_attention: bool = False,
) -> BeamResult:
    """Beam search on one input of a :class:`~attnviz.Checkpoint`, following its generation
    config (rules, length limit, ``num_beams``, ``length_penalty``, ``early_stopping``, ...);
    arguments given (not None) override it."""
    options = beam_options(
        generation_settings(ckpt),
        beam_size=num_beams,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    cfg = ckpt.config
    src = ckpt.source_tensor(text)  # [1, Ts] ids, or [1, n_mels, 3000] features
    return beam_search(
        ckpt.model,
        src,
        cfg.bos_id,
        cfg.eos_id,
        max_len=ckpt.limit(src.shape[-1], max_len),  # 0 is refused, not replaced
        rules=ckpt.rules,
        return_tree=return_tree,
        return_attention=return_attention,
        **options,
    )[0]


def folder_num_beams(ckpt: Any) -> int:
    """The checkpoint's default ``num_beams`` (1 unless its generation config says more)."""
    value = generation_settings(ckpt).get("num_beams", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1
