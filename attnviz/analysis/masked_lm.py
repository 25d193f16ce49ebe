"""Masked-language-model fillers: what an encoder-only model (BERT, RoBERTa, DistilBERT)
puts at each mask token of a sentence or a pair, with the attention it used to do so.

    from attnviz.analysis import fill_mask
    f = fill_mask(ckpt, "the cat sat on the [MASK] .", k=5)
    f.fillers[0]          # (position, [(piece, probability), ...]) best first
    f.trace.weights("encoder_self", 0)   # [1, H, T, T]: the pass that gave those fillers

A pair is written with the tokenizer's separator between the two texts (``first [SEP]
second``); where the model has token types, the tokens after the first separator get type 1,
as ``tokenizer(first, second)`` gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import Trace, record


@dataclass
class MaskFill:
    """One masked-LM pass.

    Attributes:
        pieces: the tokens read (specials included), ``T`` of them.
        ids: their ids; ``types``: their token types (all 0 for one text).
        fillers: per mask token, ``(position, [(piece, probability), ...])``, ``k`` best.
        trace: the attention of that pass (``"encoder_self"``, ``[1, H, T, T]`` per layer).
    """

    pieces: list[str]
    ids: list[int]
    types: list[int]
    fillers: list[tuple[int, list[tuple[str, float]]]]
    trace: Trace

    def text(self) -> str:
        lines = []
        for pos, top in self.fillers:
            best = ", ".join(f"{p} {q:.3f}" for p, q in top)
            lines.append(f"position {pos} ({self.pieces[pos]}): {best}")
        return "\n".join(lines)


def answer_query(ckpt: Checkpoint, source: str, target: str) -> str:
    """The text a masked-LM model trained by attnviz on a task reads to answer ``source``:
    ``source <sep> <mask>…``, one mask per token of ``target`` (``"abc<sep><mask><mask><mask>"``).

    Raises:
        InputError: a model without that layout (an imported BERT has its own).
    """
    prompt = ckpt.prompt
    if prompt is None or prompt.loss != "mlm" or prompt.sep_id is None:
        raise InputError("only a masked-LM model trained by attnviz reads `source <sep> <mask>…`")
    tok = ckpt.src_tokenizer
    n = len(tok.encode(target).ids)
    glue = "" if tok.kind == "char" else " "
    return glue.join([source, tok.token(prompt.sep_id), *[tok.token(prompt.mask_id)] * n])


def special_token(ckpt: Checkpoint, which: str) -> tuple[str, int] | None:
    """The tokenizer's ``"mask"`` or ``"sep"`` token and id, None when it has none."""
    return getattr(ckpt.src_tokenizer, f"{which}_token", None)


def fill_mask(ckpt: Checkpoint, text: str, k: int = 5) -> MaskFill:
    """The ``k`` most likely tokens at every mask token of ``text``.

    Raises:
        InputError: not an encoder-only model, a tokenizer without a mask token, or no mask
            token in ``text`` (one line naming the token to write).
    """
    _check(ckpt, k)
    mask = special_token(ckpt, "mask")
    if mask is None:
        raise InputError("this model's tokenizer has no mask token: there is nothing to fill")
    if mask[1] not in ckpt.encode_source(text).ids:
        raise InputError(f"write {mask[0]} where a token should be filled in, e.g. "
                         f"“the cat sat on the {mask[0]} .”")  # fmt: skip
    return read_sentence(ckpt, text, k)


@torch.no_grad()
def read_sentence(ckpt: Checkpoint, text: str, k: int = 5) -> MaskFill:
    """One pass of an encoder-only model over ``text`` (a sentence or ``first [SEP] second``):
    its attention, and the ``k`` best fillers at each mask token (none where there is none:
    the attention of a sentence without a mask token is read all the same).

    Raises:
        InputError: not an encoder-only model, a bad ``k``, an empty or too long text.
    """
    _check(ckpt, k)
    mask = special_token(ckpt, "mask")
    enc = ckpt.encode_source(text)
    types = [0] * len(enc.ids)
    sep = special_token(ckpt, "sep")
    if ckpt.config.type_vocab_size > 1 and sep is not None and sep[1] in enc.ids[:-1]:
        first = enc.ids.index(sep[1])
        types = [0] * (first + 1) + [1] * (len(enc.ids) - first - 1)
    ids = torch.tensor([enc.ids], device=ckpt.device)
    type_ids = torch.tensor([types], device=ckpt.device) if ckpt.config.type_vocab_size else None
    with record(ckpt.model) as trace:
        probs = ckpt.model(ids, token_type_ids=type_ids)[0].float().softmax(-1)  # [T, V]
    fillers = []
    for pos in [i for i, t in enumerate(enc.ids) if mask is not None and t == mask[1]]:
        p, top = probs[pos].topk(min(k, probs.shape[-1]))
        fillers.append(
            (
                pos,
                [(ckpt.src_tokenizer.token(int(i)), float(q)) for q, i in zip(p, top, strict=True)],
            )
        )
    return MaskFill(list(enc.pieces), list(enc.ids), types, fillers, trace)


def _check(ckpt: Checkpoint, k: int) -> None:
    if ckpt.config.arch != "encoder-only":
        raise InputError(
            f"mask filling needs an encoder-only model (BERT, RoBERTa); this one is "
            f"{ckpt.config.arch}"
        )
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 100:
        raise InputError(f"k must be 1 to 100, got {k!r}")
