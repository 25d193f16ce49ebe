"""Masked-language-model fillers: what an encoder-only model (BERT, RoBERTa, DistilBERT)
puts at each mask token of a sentence or a pair, with the attention it used to do so.

    from attnviz.analysis import fill_mask
    f = fill_mask(ckpt, "the cat sat on the [MASK] .", k=5)
    f.fillers[0]          # (position, [(piece, probability), ...]) best first
    f.trace.weights("encoder_self", 0)   # [1, H, T, T]: the pass that gave those fillers

What the analyses read as an encoder-only model's output (:func:`read_pass`): the top filler at
each mask token, or, in a sentence without one, the model's own prediction of each token
(:func:`scored_positions`); ablation, health, attribution, Compare and the export all read it
here.

A pair is written with the tokenizer's separator between the two texts (``first [SEP]
second``); where the model has token types, the tokens after the first separator get type 1,
as ``tokenizer(first, second)`` gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import Edit, Trace, record
from ..data.batch import Batch, scored_batch
from ..data.tokenizer import Encoding
from ..decode.scoring import Scored


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
    if not ckpt.masked_lm or prompt.sep_id is None:
        raise InputError("only a masked-LM model trained by attnviz reads `source <sep> <mask>…`")
    tok = ckpt.src_tokenizer
    n = len(tok.encode(target).ids)
    glue = "" if tok.kind == "char" else " "
    return glue.join([source, tok.token(prompt.sep_id), *[tok.token(prompt.mask_id)] * n])


def task_input(ckpt: Checkpoint, source: str, target: str) -> str:
    """What the model reads for a task's ``source``: the source itself, or for a masked-LM
    model trained here, :func:`answer_query` (the answer masked, one mask per token)."""
    return answer_query(ckpt, source, target) if ckpt.masked_lm else source


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
    mask_positions(ckpt, text)
    return read_sentence(ckpt, text, k)


def mask_positions(ckpt: Checkpoint, text: str) -> list[int]:
    """The positions of the mask tokens of ``text``.

    Raises:
        InputError: a tokenizer without a mask token, or no mask token in ``text``.
    """
    mask = special_token(ckpt, "mask")
    if mask is None:
        raise InputError("this model's tokenizer has no mask token: there is nothing to fill")
    ids = ckpt.encode_source(text).ids
    if mask[1] not in ids:
        raise InputError(f"write {mask[0]} where a token should be filled in, e.g. "
                         f"“the cat sat on the {mask[0]} .”")  # fmt: skip
    return [i for i, t in enumerate(ids) if t == mask[1]]


def read_inputs(ckpt: Checkpoint, text: str) -> tuple[Encoding, list[int]]:
    """``text`` (a sentence or ``first [SEP] second``) as an encoder-only model reads it: its
    encoding and token types (1 after the first separator where the model has types)."""
    enc = ckpt.encode_source(text)
    types = [0] * len(enc.ids)
    sep = special_token(ckpt, "sep")
    if ckpt.config.type_vocab_size > 1 and sep is not None and sep[1] in enc.ids[:-1]:
        first = enc.ids.index(sep[1])
        types = [0] * (first + 1) + [1] * (len(enc.ids) - first - 1)
    return enc, types


def scored_positions(ckpt: Checkpoint, ids: Sequence[int]) -> list[int]:
    """Where an encoder-only model's output is read: each mask token, or, with none, every
    position (the model's own prediction of each token)."""
    mask = special_token(ckpt, "mask")
    masks = [i for i, t in enumerate(ids) if mask is not None and t == mask[1]]
    return masks or list(range(len(ids)))


def fillers_text(ckpt: Checkpoint, ids: Sequence[int], positions: Sequence[int]) -> str:
    """An encoder-only model's output as text: the filler ``ids[i]`` read at ``positions[i]``.
    Fillers of adjacent positions are decoded together (one word may span masks); runs apart
    are joined with `` … `` (two masks apart are two answers, not one word)."""
    if len(ids) != len(positions):
        raise InputError(f"{len(ids)} fillers for {len(positions)} positions")
    runs: list[list[int]] = []
    for i, (token, pos) in enumerate(zip(ids, positions, strict=True)):
        if i and pos == positions[i - 1] + 1:
            runs[-1].append(int(token))
        else:
            runs.append([int(token)])
    return " … ".join(ckpt.tgt_tokenizer.decode(run) for run in runs)


@dataclass
class ReadPass:
    """One recorded pass of an encoder-only model over a text (batch of one).

    Attributes:
        enc, types: the tokens read (``T``) and their token types.
        scored: the positions read as output (:func:`scored_positions`); ``masked``: they
            are mask tokens (else every position).
        probs: ``[T, V]`` each position's distribution; ``trace``: the pass's attention
            (``"encoder_self"`` ``[1, H, T, T]``, values included).
    """

    enc: Encoding
    types: list[int]
    scored: list[int]
    masked: bool
    probs: torch.Tensor
    trace: Trace

    def argmax(self) -> list[int]:
        """The model's top token at each scored position (a mask's top filler)."""
        return self.probs[self.scored].argmax(-1).tolist()

    def targets(self) -> list[int]:
        """What each scored position is scored on: the top filler at a mask, else the token."""
        return self.argmax() if self.masked else [self.enc.ids[i] for i in self.scored]


def type_ids(ckpt: Checkpoint, types: Sequence[Sequence[int]]) -> torch.Tensor | None:
    """Token types ``[B, T]`` as the model takes them (None where it has no type table)."""
    return torch.tensor(types, device=ckpt.device) if ckpt.config.type_vocab_size else None


@torch.no_grad()
def read_pass(ckpt: Checkpoint, text: str, edits: Sequence[Edit] = ()) -> ReadPass:
    """Run an encoder-only model once over ``text`` (under ``edits``), recording its attention."""
    _check(ckpt, 1)
    enc, types = read_inputs(ckpt, text)
    ids = torch.tensor([enc.ids], device=ckpt.device)
    with record(ckpt.model, edits) as trace:
        logits = ckpt.model(ids, token_type_ids=type_ids(ckpt, [types]))  # [1, T, V]
    scored = scored_positions(ckpt, enc.ids)
    mask = special_token(ckpt, "mask")
    masked = mask is not None and enc.ids[scored[0]] == mask[1]
    return ReadPass(enc, types, scored, masked, logits[0].float().softmax(-1), trace)


def read_sentence(ckpt: Checkpoint, text: str, k: int = 5) -> MaskFill:
    """One pass of an encoder-only model over ``text`` (a sentence or ``first [SEP] second``):
    its attention, and the ``k`` best fillers at each mask token (none where there is none:
    the attention of a sentence without a mask token is read all the same; a base encoder,
    without a head, gives its attention and no fillers).

    Raises:
        InputError: not an encoder-only model, a bad ``k``, an empty or too long text.
    """
    _check(ckpt, k, head=False)
    if not ckpt.config.lm_head:  # a base encoder (a sentence embedder): its attention alone
        enc, types = read_inputs(ckpt, text)
        ids = torch.tensor([enc.ids], device=ckpt.device)
        with torch.no_grad(), record(ckpt.model) as trace:
            ckpt.model.encode(ids, None, type_ids(ckpt, [types]))
        return MaskFill(list(enc.pieces), list(enc.ids), types, [], trace)
    read = read_pass(ckpt, text)
    fillers = []
    for pos in read.scored if read.masked else []:
        p, top = read.probs[pos].topk(min(k, read.probs.shape[-1]))
        tops = [(ckpt.src_tokenizer.token(int(i)), float(q)) for q, i in zip(p, top, strict=True)]
        fillers.append((pos, tops))
    enc = read.enc
    return MaskFill(list(enc.pieces), list(enc.ids), read.types, fillers, read.trace)


def score_read(
    ckpt: Checkpoint, text: str, targets: Sequence[int] | None = None, edits: Sequence[Edit] = ()
) -> Scored:
    """An encoder-only model's output scored as :meth:`Checkpoint.score` scores a decoder's:
    the probability and rank of each target at the scored positions of one read pass.

    Args:
        targets: one id per scored position (default: :meth:`ReadPass.targets`: the top filler
            at each mask, or each token itself).
    Returns:
        :class:`~attnviz.decode.scoring.Scored` (``trace``: the pass's ``"encoder_self"``).
    """
    read = read_pass(ckpt, text, edits)
    ids = read.targets() if targets is None else [int(i) for i in targets]
    if len(ids) != len(read.scored):
        raise InputError(f"{len(read.scored)} positions are scored but {len(ids)} targets given")
    rows = read.probs[read.scored]  # [N, V]
    probs = rows.gather(-1, torch.tensor(ids, device=rows.device)[:, None])[:, 0]  # [N]
    ranks = (rows > probs[:, None]).sum(-1) + 1
    argmax = read.argmax()
    first = next((i for i, (a, t) in enumerate(zip(argmax, ids, strict=True)) if a != t), None)
    tok = ckpt.tgt_tokenizer
    return Scored([tok.token(i) for i in ids], ids, probs.tolist(), ranks.tolist(), argmax,
                  read.trace, first)  # fmt: skip


@torch.no_grad()
def read_batch(ckpt: Checkpoint, texts: Sequence[str], edits: Sequence[Edit] = ()) -> Batch:
    """``texts`` as one padded masked-LM :class:`~attnviz.data.Batch`, each scored position's
    target :meth:`ReadPass.targets` under ``edits`` (the top filler at a mask, else the token)."""
    _check(ckpt, 1)
    reads = [read_inputs(ckpt, t) for t in texts]
    rows = [enc.ids for enc, _ in reads]
    scored = [scored_positions(ckpt, r) for r in rows]
    own = [[r[i] for i in s] for r, s in zip(rows, scored, strict=True)]
    types = [t for _, t in reads] if ckpt.config.type_vocab_size else None
    batch = scored_batch(rows, types, own, scored, ckpt.config, ckpt.device)
    mask = special_token(ckpt, "mask")
    if mask is not None and any(mask[1] in r for r in rows):  # fillers: the model's own
        top = predictions(ckpt, batch, edits)
        targets = [t if mask[1] in r else o for t, r, o in zip(top, rows, own, strict=True)]
        batch = scored_batch(rows, types, targets, scored, ckpt.config, ckpt.device)
    return batch


@torch.no_grad()
def predictions(ckpt: Checkpoint, batch: Batch, edits: Sequence[Edit] = ()) -> list[list[int]]:
    """A masked-LM batch's top token at each scored position, per row (under ``edits``)."""
    with record(ckpt.model, edits, capture=None):
        top = batch.forward(ckpt.model).argmax(-1)  # [B, T]
    real = batch.real
    return [top[i][real[i]].tolist() for i in range(top.shape[0])]


def _check(ckpt: Checkpoint, k: int, head: bool = True) -> None:
    if ckpt.config.has_decoder:
        raise InputError(
            f"mask filling needs an encoder-only model (BERT, RoBERTa); this one is "
            f"{ckpt.config.arch}"
        )
    if head and not ckpt.config.lm_head:
        raise InputError(
            "this base encoder has no masked-LM head: it fills no mask (its attention and "
            "embeddings are read with attnviz.record / Checkpoint.embed)"
        )
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 100:
        raise InputError(f"k must be 1 to 100, got {k!r}")
