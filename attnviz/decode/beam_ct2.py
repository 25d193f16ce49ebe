"""Beam search as CTranslate2 runs it (``BeamSearch::search``), for folders whose engine is
CTranslate2: the same hypotheses as ``ctranslate2`` on the same model.

It differs from transformers' beam search (:func:`attnviz.decode.beam.beam_search`) in three ways
that change which hypothesis wins: the generation rules act on the logits *before* the
log-softmax (blocked ids renormalise the rest); the search stops once ``beam_size *
patience`` hypotheses have ended; and a hypothesis is ranked by its log-probability over
``len ** length_penalty`` counting its text tokens only (not the start id, the forced
prompt or the end id).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.errors import InputError
from ..core.model import Transformer
from ..core.record import record
from ..core.step import fused_step
from .greedy import LogitRules, as_batch, default_max_len, eval_no_grad, source_pad_mask
from .tree import BeamResult, Hypothesis


def _prompt_of(rules) -> tuple[int, ...]:
    return tuple(getattr(rules, "prompt", ()) or ())


def ct2_beam_search(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 5,
    max_len: int | None = None,
    length_penalty: float = 1.0,
    patience: float = 1.0,
    rules: LogitRules | None = None,
    num_hypotheses: int = 1,
) -> BeamResult:
    """CTranslate2's beam search on one source.

    Args:
        src: ``[1, Ts]`` ids or, for an audio model, features ``[1, n_mels, T]``.
        bos_id, eos_id: the start and end ids.
        beam_size, length_penalty, patience, num_hypotheses: CTranslate2's options.
        max_len: most tokens after the start id, the rules' forced prompt included (default:
            the model's positions).
        rules: the generation rules (their ``prompt`` is fed before the search starts).
    Returns:
        :class:`BeamResult`: the best hypothesis (the prompt, then its text tokens, then the
        end id when it ended), ``score`` its log-probability and ``normalized_score`` the
        ranking score; ``hypotheses`` the best ``num_hypotheses``.
    """
    if not isinstance(beam_size, int) or isinstance(beam_size, bool) or beam_size < 1:
        raise InputError(f"beam_size must be an integer of at least 1, got {beam_size!r}")
    if not patience > 0:
        raise InputError(f"patience must be positive, got {patience!r}")
    k = beam_size
    device = next(model.parameters()).device
    src = as_batch(src, model=model).to(device)
    if src.shape[0] != 1:
        raise InputError(f"ct2_beam_search decodes one source; got a batch of {src.shape[0]}")
    prompt = _prompt_of(rules)
    n_max = default_max_len(model, src.shape[-1], max_len)
    steps = n_max - len(prompt)  # text tokens at most
    if steps < 1:
        raise InputError(f"max_len={n_max} leaves no room after the {len(prompt)}-token prompt")
    max_candidates = round(k * patience)
    vocab = model.config.tgt_vocab_size
    with eval_no_grad(model), record(model, capture=None):
        pad = source_pad_mask(model, src, None)
        memory = model.encode(src, pad)  # [1, Ts, D]
        cache = model.init_cache(memory, pad, capacity=n_max + 1)
        feed = torch.tensor([[bos_id, *prompt]], device=device)  # [1, 1 + n]
        logits = model.decode(feed, None, cache=cache)[:, -1]  # [1, V]
        cache.select(torch.zeros(k, dtype=torch.long, device=device))  # k copies of one row
        logits = logits.expand(k, vocab)
        step_fn = fused_step(model, cache)
        scores = torch.full((k,), float("-inf"), device=device)
        scores[0] = 0.0  # only the first beam is live at the first step
        alive = torch.tensor(prompt, dtype=torch.long, device=device).expand(k, len(prompt))
        finished: list[tuple[float, list[int], bool]] = []  # (log-prob, tokens, ended)
        top_finished = False
        for t in range(steps):
            last_step = t + 1 == steps
            if rules is not None:
                logits = rules.apply(logits, len(prompt) + t, n_max, alive)
            logp = logits.float().log_softmax(-1) + scores[:, None]  # [k, V]
            top, flat = logp.view(-1).topk(2 * k)  # [2k]
            origins, tokens = (flat // vocab).tolist(), (flat % vocab).tolist()
            vals = top.tolist()
            chosen = []
            offset = k
            for i in range(k):
                pick = i
                if tokens[i] == eos_id or last_step:
                    top_finished |= i == 0
                    ended = tokens[i] == eos_id
                    text = alive[origins[i], len(prompt) :].tolist()
                    finished.append((vals[i], text + ([] if ended else [tokens[i]]), ended))
                    for j in range(offset, 2 * k):  # another live candidate takes its place
                        if tokens[j] != eos_id:
                            pick, offset = j, j + 1
                            break
                chosen.append(pick)
            if last_step or len(finished) >= max_candidates:
                break
            index = torch.tensor([origins[c] for c in chosen], device=device)
            new = torch.tensor([tokens[c] for c in chosen], device=device)
            scores = torch.tensor([vals[c] for c in chosen], device=device)
            alive = torch.cat([alive[index], new[:, None]], dim=1)
            cache.select(index)
            if step_fn is not None:  # it reads the cache, reordered in place, at each call
                logits = step_fn(new)  # [k, V]
            else:
                logits = model.decode(new[:, None], None, cache=cache)[:, -1]
    ranked = []
    for logprob, text, ended in finished:
        length = len(text)
        norm = logprob / length**length_penalty if length else float("-inf")
        ranked.append((norm, logprob, text, ended))
    ranked.sort(key=lambda r: r[0], reverse=True)
    ranked = ranked[:num_hypotheses]
    hyps = [
        Hypothesis(list(prompt) + text + ([eos_id] if ended else []), lp, norm)
        for norm, lp, text, ended in ranked
    ]
    best = hyps[0]
    return BeamResult(best.tokens, best.score, best.normalized_score, hypotheses=hyps)
