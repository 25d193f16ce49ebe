"""Batched greedy decoding: every row of a batch decoded at once, each stopping at its own end
id, with a KV cache and (where nothing records or edits the decoder) the fused cached step.
The one-sequence, recorded, step-by-step decoder is :class:`attnviz.decode.greedy.GreedyStepper`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..core.model import Transformer
from ..core.record import Edit, record
from ..core.step import fused_step
from ..data.batch import Prompt, source_batch
from ..data.tokenizer import Tokenizer
from .greedy import (
    LogitRules,
    as_batch,
    choose,
    default_max_len,
    end_ids,
    eval_no_grad,
    source_pad_mask,
    start_decoding,
)


def until_eos(row: Sequence[int], eos_id: int, pad_id: int, more: Sequence[int] = ()) -> list[int]:
    """One decoded row up to and including its first end id (``eos_id`` or one of ``more``:
    a config's further ``end_ids``), without the padding after a row ends."""
    row = list(row)
    ends = {eos_id, *more}
    cut = next((i for i, t in enumerate(row) if t in ends), None)
    return row[: cut + 1] if cut is not None else [t for t in row if t != pad_id]


def greedy_decode(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int | None,
    max_len: int | None = None,
    src_pad_mask: Tensor | None = None,
    edits: Sequence[Edit] = (),
    cache: bool = True,
    rules: LogitRules | None = None,
    fused: bool = True,
) -> Tensor:
    """Batched greedy decoding; each row stops at its own end id.

    Args:
        src: ``[B, Ts]`` (or ``[Ts]``) source ids, padded with ``config.pad_id``; for a
            decoder-only model, prompts ``[B, P]`` of one length.
        bos_id: the decoder start id (it may equal the pad id; unused by a decoder-only
            model); ``eos_id``: the end id, or None to decode ``max_len`` tokens.
        max_len: most tokens per row (default ``2 * Ts + 16``).
        src_pad_mask: ``[B, Ts]`` bool; default from ``config.pad_id``.
        edits: attention edits applied to every pass (see :func:`attnviz.core.record`).
        cache: with a KV cache (default) each step runs one decoder position. ``False``
            recomputes the whole prefix every step, so earlier positions are re-run too:
            what a mask experiment needs when the causal mask is off (with a cache there is
            no future for the mask to hide).
        rules: :class:`LogitRules` applied before each argmax.
        fused: with a cache, run each step as one fused function (:mod:`attnviz.core.step`,
            which attends through a recorder's hooks as the modules do); ``False`` runs it
            module by module (same tokens; the benchmark compares the two).
    Returns:
        ``[B, T]`` ids without the start id; a row ends with its end id followed by padding
        (``config.pad_id``), or is cut at ``max_len``. T is the longest row.
    """
    src = as_batch(src, model=model).to(next(model.parameters()).device)
    n_max = default_max_len(model, src.shape[1], max_len)
    pad_id = model.config.pad_id
    b = src.shape[0]
    with eval_no_grad(model), record(model, edits, capture=None):
        pad = source_pad_mask(model, src, src_pad_mask)
        start = start_decoding(model, src, pad, bos_id, n_max, cache)
        memory, kv = start.memory, start.cache
        step_fn = fused_step(model, kv) if kv is not None and fused else None
        prefix = start.prefix  # [B, 1 + t] (or the prompt and t)
        last = start.first  # [B], checked by start_decoding
        finished = torch.zeros(b, dtype=torch.bool, device=src.device)
        ends = torch.tensor(end_ids(model, eos_id), dtype=torch.long, device=src.device)
        out = []
        for step in range(n_max):
            if step_fn is not None:  # the same math as the next branch, without module calls
                logits = step_fn(last)  # [B, V]
            elif kv is not None:
                logits = model.decode(last[:, None], None, cache=kv)[:, -1]  # [B, V]
            else:  # rows are independent: a finished row's tail needs no mask
                logits = model.decode(prefix, memory, src_pad_mask=pad)[:, -1]  # [B, V]
            seqs = torch.stack(out, dim=1) if out else prefix[:, 1:]  # [B, step]
            last = choose(logits, rules, step, n_max, seqs)  # [B]
            if eos_id is None:
                out.append(last)
            else:
                out.append(last.masked_fill(finished, pad_id))
                finished |= torch.isin(last, ends)
                if bool(finished.all()):
                    break
            if kv is None:
                prefix = torch.cat([prefix, last.unsqueeze(1)], dim=1)
    return torch.stack(out, dim=1)


def greedy_texts(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    texts: Sequence[str],
    batch_size: int = 512,
    rules: LogitRules | None = None,
    max_len: int | None = None,
    prompt: Prompt | None = None,
) -> list[str]:
    """Batched greedy decoding of texts to texts; the same outputs as one at a time.

    ``rules`` and ``max_len`` (most new tokens) as :func:`~attnviz.decode.batched.greedy_decode`;
    ``prompt``: how a decoder-only model trained by attnviz reads a source (its prompts are
    never padded, so they are batched by length).

    Inputs are sorted by length to waste less padding; each row is cut at its own length
    limit (:func:`~attnviz.decode.greedy.default_max_len`), not the padded batch's.
    """
    device, cfg = next(model.parameters()).device, model.config
    size = [len(src_tokenizer.split(t)) for t in texts]  # each text split once
    order = sorted(range(len(texts)), key=size.__getitem__)
    out: list[str] = [""] * len(texts)
    groups = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    if cfg.decoder_only:  # one prompt length a batch
        groups = [
            g[s : s + batch_size] for g in _runs(order, size) for s in range(0, len(g), batch_size)
        ]
    for idx in groups:
        ids = [src_tokenizer.encode(texts[i]).ids for i in idx]
        if prompt is not None:
            ids = [prompt.ids(row) for row in ids]
        batch = source_batch(ids, cfg, device)
        decoded = greedy_decode(
            model,
            batch.src,
            cfg.bos_id,
            cfg.eos_id,
            src_pad_mask=batch.src_pad,
            rules=rules,
            max_len=max_len,
        )
        for i, row, own in zip(idx, decoded.tolist(), ids, strict=True):
            out[i] = tgt_tokenizer.decode(row[: default_max_len(model, len(own), max_len)])
    return out


def _runs(order: list[int], size: Sequence[int]) -> list[list[int]]:
    """``order`` (sorted by ``size``) cut into runs of equal size."""
    runs: list[list[int]] = []
    for i in order:
        if runs and size[runs[-1][0]] == size[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs
