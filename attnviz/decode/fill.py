"""Filling a masked-LM model's answers: an encoder-only model trained by attnviz reads
``<bos> source <sep> <mask>… <eos>`` once and its answer is the most likely token at each mask
(:mod:`attnviz.data.mlm`). The batched counterpart of greedy decoding for that kind."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.model import Transformer
from ..data.batch import Prompt
from ..data.mlm import answer_batch
from .greedy import eval_no_grad


def fill_answers(
    model: Transformer,
    prompt: Prompt,
    src_rows: Sequence[Sequence[int]],
    lengths: Sequence[int],
    batch_size: int = 500,
) -> list[list[int]]:
    """Each source's answer of ``lengths[i]`` tokens, filled in one pass.

    Args:
        src_rows: source ids (no specials); ``lengths``: how many masks follow ``<sep>``.
    Returns:
        per row, the argmax id at each of its masks (``lengths[i]`` ids).
    """
    device = next(model.parameters()).device
    out: list[list[int]] = []
    with eval_no_grad(model):
        for s in range(0, len(src_rows), batch_size):
            part = list(src_rows[s : s + batch_size])
            dummy = [[prompt.mask_id] * n for n in lengths[s : s + batch_size]]
            batch = answer_batch(part, dummy, model.config, prompt, device)
            best = batch.forward(model).argmax(-1)  # [B, T]
            chosen = batch.real
            out += [best[i][chosen[i]].tolist() for i in range(len(part))]
    return out


def fill_texts(model: Transformer, src_tok, tgt_tok, prompt: Prompt, examples) -> list[str]:
    """Examples (``.src``, ``.tgt``) -> the filled answers as text, each as long (in tokens)
    as its reference."""
    rows = [src_tok.encode(e.src).ids for e in examples]
    lengths = [len(tgt_tok.encode(e.tgt).ids) for e in examples]
    filled = fill_answers(model, prompt, rows, lengths)  # an end filled in is shown, not cut
    return [tgt_tok.decode(ids, stop_at_eos=False) for ids in filled]
