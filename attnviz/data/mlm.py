"""Masked-LM batches: how an encoder-only model trained by attnviz learns a task's pairs.

Each pair is read whole as ``<bos> source <sep> target <eos>`` (:class:`~attnviz.data.batch.Prompt`
with ``loss="mlm"``). A training row either has its whole target masked (the task itself: the
model fills the answer in one pass, reading the source with bidirectional attention) or, as
BERT, about 15 % of its tokens chosen (at least one), each replaced by ``<mask>`` (80 %), a
random token (10 %) or left as it is (10 %); the loss falls on the chosen tokens only.
Validation and the snapshots mask the whole target (:func:`answer_batch`): exact match is then
the answer filled in right, its length given by the number of masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..core.config import ModelConfig
from ..core.errors import InputError
from ..core.masks import length_mask
from ..core.specials import not_text_ids
from .batch import Batch, Prompt, pad_batch

#: Share of a training batch's rows whose whole target is masked.
WHOLE_TARGET = 0.5
#: Share of the tokens chosen in the other rows (BERT's 15 %).
MASK_RATE = 0.15


def pair_row(
    prompt: Prompt, source: Sequence[int], target: Sequence[int], eos_id: int
) -> list[int]:
    """``<bos> source <sep> target <eos>`` as ids."""
    return [*prompt.ids(source), *target, eos_id]


def make_mlm_batch(
    src_rows: Sequence[Sequence[int]],
    tgt_rows: Sequence[Sequence[int]],
    config: ModelConfig,
    prompt: Prompt,
    rng: np.random.Generator | None = None,
    device: torch.device | str = "cpu",
    whole_target: float = WHOLE_TARGET,
) -> Batch:
    """Pairs -> a masked-LM :class:`Batch`.

    Args:
        src_rows / tgt_rows: each pair's source and target ids (no specials).
        prompt: the layout, its ``mask_id`` set.
        rng: draws which rows mask their whole target and which tokens the others mask (a
            pure function of its seed); None masks every row's whole target (no draws).
        whole_target: share of rows whose whole target is masked.
    Returns:
        ``src [B, T]`` the rows with their masks, ``src_pad`` True at padding, ``tgt_out``
        the original ids, ``tgt_pad`` True where nothing is learned (tokens not chosen,
        padding); ``mlm=True``.
    """
    if prompt.mask_id is None:
        raise InputError("a masked-LM batch needs the layout's mask id")
    if len(src_rows) != len(tgt_rows):
        raise InputError(f"{len(src_rows)} sources but {len(tgt_rows)} targets")
    rows = [pair_row(prompt, s, t, config.eos_id) for s, t in zip(src_rows, tgt_rows, strict=True)]
    if max(len(r) for r in rows) > config.max_len:
        raise InputError(f"a sequence is longer than this model's max_len={config.max_len}")
    special = not_text_ids(config, unk=True, more=[prompt.mask_id, prompt.sep_id])
    content = np.array([i for i in range(config.src_vocab_size) if i not in special])
    masked, chosen = [], []
    for row, src in zip(rows, src_rows, strict=True):
        start = len(prompt.ids(src))  # the target's first position
        answer = list(range(start, len(row) - 1))
        ids, pick = list(row), [False] * len(row)
        if rng is None or (answer and rng.random() < whole_target):
            for p in answer:
                ids[p], pick[p] = prompt.mask_id, True
        else:
            places = [p for p in range(1, len(row) - 1) if row[p] not in special]
            if not places:
                raise InputError("a pair has no token to mask")
            hit = [p for p in places if rng.random() < MASK_RATE] or [int(rng.choice(places))]
            for p in hit:
                pick[p], u = True, rng.random()
                if u < 0.8:
                    ids[p] = prompt.mask_id
                elif u < 0.9:
                    ids[p] = int(rng.choice(content))
        masked.append(ids)
        chosen.append(pick)
    src = pad_batch(masked, config.pad_id, device)
    pad = length_mask([len(r) for r in rows], src.shape[1], src.device)
    learn = pad_batch([[int(c) for c in pick] for pick in chosen], 0, device).bool()
    out = pad_batch(rows, config.pad_id, device)
    return Batch(src, pad, None, out, pad | ~learn, mlm=True)


def answer_batch(
    src_rows: Sequence[Sequence[int]],
    tgt_rows: Sequence[Sequence[int]],
    config: ModelConfig,
    prompt: Prompt,
    device: torch.device | str = "cpu",
) -> Batch:
    """Every row's whole target masked (what validation, the snapshots and evaluation read)."""
    return make_mlm_batch(src_rows, tgt_rows, config, prompt, None, device)
