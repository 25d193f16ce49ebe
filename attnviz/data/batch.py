"""Batches: token ids -> padded tensors and their padding masks, with the model's own ids
(parallel text files -> pairs: :mod:`attnviz.data.corpus`).

One :class:`Batch` holds what a teacher-forced pass needs (source, decoder input, decoder
target and their padding masks), like the Annotated Transformer's ``Batch``. Rows are padded
at the end with the config's ``pad_id``; the masks come from the rows' lengths
(:func:`attnviz.core.masks.length_mask`), so a decoder start id equal to the pad id (T5, Marian) is
never taken for padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.config import ModelConfig
from ..core.errors import InputError
from ..core.masks import length_mask
from .tasks import Example
from .tokenizer import Tokenizer


def pad_batch(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
) -> Tensor:
    """Id lists -> ``[B, T]`` long tensor, each row padded at the end with ``pad_id``."""
    if not rows:
        raise InputError("a batch needs at least one row")
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.long)
    return out.to(device)


@dataclass
class Batch:
    """A padded batch and its padding masks (True = padding, the masks.py convention).

    Attributes:
        src: ``[B, Ts]`` source ids.
        src_pad: ``[B, Ts]`` bool.
        tgt_in: ``[B, Tt]`` decoder input (start id, then the target without its last token),
            or None for a source-only batch.
        tgt_out: ``[B, Tt]`` what each decoder position should predict.
        tgt_pad: ``[B, Tt]`` bool, True after each target row.
    """

    src: Tensor
    src_pad: Tensor
    tgt_in: Tensor | None = None
    tgt_out: Tensor | None = None
    tgt_pad: Tensor | None = None
    #: a decoder-only batch (:func:`make_lm_batch`): ``src`` is the whole input sequence,
    #: ``tgt_out`` the next token at each position, ``tgt_pad`` True where nothing is learned.
    lm: bool = False
    #: a decoder-only batch's prompt length per row (its sources are ``src[i, :n]``)
    prompt_lengths: list[int] | None = None
    #: an encoder-only (masked-LM) batch (:func:`scored_batch`, or training's
    #: :func:`attnviz.data.mlm.make_mlm_batch`): ``src`` is read once,
    #: ``tgt_out`` the token each position is scored on, ``tgt_pad`` True where none is.
    mlm: bool = False
    #: ``[B, Ts]`` token types of an encoder-only batch (None: all 0, or no type table)
    types: Tensor | None = None

    @property
    def one_stack(self) -> bool:
        """The queries and keys of every attention are the inputs ``src`` (no decoder input)."""
        return self.lm or self.mlm

    def prompts(self) -> list[list[int]]:
        """A decoder-only batch's prompts, one id list per row."""
        if self.prompt_lengths is None:
            raise InputError("only a decoder-only batch has prompts")
        return [self.src[i, :n].tolist() for i, n in enumerate(self.prompt_lengths)]

    def targets(self) -> list[list[int]]:
        """Each row's target ids as teacher-forced (the real ``tgt_out`` positions)."""
        real = self.real
        return [self.tgt_out[i][real[i]].tolist() for i in range(self.tgt_out.shape[0])]

    @property
    def real(self) -> Tensor:
        """``[B, Tt]`` bool: the target positions that count (not padding)."""
        if self.tgt_pad is None:
            raise InputError("this batch has no targets")
        return ~self.tgt_pad

    def forward(self, model: torch.nn.Module) -> Tensor:
        """Teacher-forced logits ``[B, Tt, V]`` of ``model`` on this batch."""
        if self.lm:  # padding sits after every real token: the causal mask keeps it out
            return model(self.src)
        if self.mlm:  # read whole: the padding is masked out of every row
            return model(self.src, pad_mask=self.src_pad, token_type_ids=self.types)
        if self.tgt_in is None:
            raise InputError("this batch has no targets to teacher-force")
        return model(self.src, self.tgt_in, self.src_pad, self.tgt_pad)


def source_batch(
    rows: Sequence[Sequence[int]], config: ModelConfig, device: torch.device | str = "cpu"
) -> Batch:
    """A batch of source id lists only (for encoding or greedy decoding)."""
    src = pad_batch(rows, config.pad_id, device)
    return Batch(src, length_mask([len(r) for r in rows], src.shape[1], src.device))


def with_eos(ids: Sequence[int], eos_id: int) -> list[int]:
    """Target ids ending with the end id: appended only where missing. The one place a target
    text's ids get their end: a tokenizer that adds ``</s>`` itself (Hugging Face targets)
    is not given a second one."""
    ids = list(ids)
    return ids if ids and ids[-1] == eos_id else [*ids, eos_id]


def make_batch(
    src_rows: Sequence[Sequence[int]],
    tgt_rows: Sequence[Sequence[int]],
    config: ModelConfig,
    device: torch.device | str = "cpu",
    *,
    add_eos: bool = True,
) -> Batch:
    """Source and target id lists -> a teacher-forcing :class:`Batch`.

    Args:
        src_rows: source ids per row (no start/end ids).
        tgt_rows: target ids per row, without the start id. With ``add_eos`` (references)
            the end id is appended where the row does not end with it (:func:`with_eos`);
            without it (a model's own greedy output, which already
            ends with the end id or stops at the length limit) the rows are taken as they are.
        config: the model's config: ``pad_id``, ``bos_id`` (decoder start), ``eos_id``.
    Returns:
        ``tgt_in`` = start + target[:-1], ``tgt_out`` = target (+ end), masks from lengths.
    """
    if len(src_rows) != len(tgt_rows):
        raise InputError(f"{len(src_rows)} sources but {len(tgt_rows)} targets")
    outs = [with_eos(t, config.eos_id) if add_eos else list(t) for t in tgt_rows]
    if any(not o for o in outs):
        raise InputError("a target row is empty")
    batch = source_batch(src_rows, config, device)
    dev = batch.src.device
    tgt_in = pad_batch([[config.bos_id, *o[:-1]] for o in outs], config.pad_id, dev)
    tgt_out = pad_batch(outs, config.pad_id, dev)
    batch.tgt_in, batch.tgt_out = tgt_in, tgt_out
    batch.tgt_pad = length_mask([len(o) for o in outs], tgt_out.shape[1], dev)
    return batch


def tensorize(
    examples: Sequence[Example],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    config: ModelConfig,
    device: torch.device | str = "cpu",
) -> Batch:
    """Examples (source and reference text) -> a teacher-forcing :class:`Batch`."""
    return make_batch(
        [src_tok.encode(e.src).ids for e in examples],
        [tgt_tok.encode(e.tgt).ids for e in examples],
        config,
        device,
    )


@dataclass(frozen=True)
class Prompt:
    """How a one-stack model trained by attnviz reads a (source, target) pair.

    A decoder-only model: ``<bos> source <sep> target <eos>`` (a prefix LM), or without
    ``<sep>`` when the target continues the source. The prompt is ``<bos> source [<sep>]``;
    decoding continues it. An encoder-only model (``loss="mlm"``) reads the same sequence
    whole, with some tokens replaced by ``<mask>``, and learns what they were.

    Attributes:
        bos_id: the id that starts every sequence.
        sep_id: the separator's id, or None for a continuation.
        loss: ``"target"`` (learn the target and its end), ``"all"`` (every token after
            ``<bos>``) or ``"mlm"`` (the masked tokens).
        mask_id: the ``<mask>`` id of a masked-LM model (None otherwise).
    """

    bos_id: int
    sep_id: int | None = None
    loss: str = "target"
    mask_id: int | None = None

    @property
    def mlm(self) -> bool:
        """A masked-LM layout (an encoder-only model reads the pair whole, masks filled)."""
        return self.loss == "mlm"

    def ids(self, source: Sequence[int]) -> list[int]:
        """Source ids -> the prompt's ids ``[bos, *source, (sep)]``."""
        return [self.bos_id, *source, *([] if self.sep_id is None else [self.sep_id])]

    def to_dict(self) -> dict:
        out = {"bos_id": self.bos_id, "sep_id": self.sep_id, "loss": self.loss}
        return out if self.mask_id is None else {**out, "mask_id": self.mask_id}

    @classmethod
    def from_dict(cls, data: object, vocab: int) -> Prompt:
        """Rebuild from :meth:`to_dict`, checking every value (a file's contents are data)."""
        keys = {"bos_id", "sep_id", "loss"}
        mlm = isinstance(data, dict) and data.get("loss") == "mlm"
        if not isinstance(data, dict) or set(data) != (keys | {"mask_id"} if mlm else keys):
            raise InputError(
                "a stored prompt layout needs exactly bos_id, sep_id, loss (and mask_id for mlm)"
            )
        for name in ("bos_id", "sep_id", "mask_id"):
            value = data.get(name)
            if value is None and name != "bos_id" and not (mlm and name == "mask_id"):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
                raise InputError(f"prompt {name} must be an id below {vocab}, got {value!r}")
        if data["loss"] not in ("target", "all", "mlm"):
            raise InputError(f"prompt loss must be 'target', 'all' or 'mlm', got {data['loss']!r}")
        return cls(data["bos_id"], data["sep_id"], data["loss"], data.get("mask_id"))


def make_lm_batch(
    prompt_rows: Sequence[Sequence[int]],
    tgt_rows: Sequence[Sequence[int]],
    config: ModelConfig,
    loss: str = "target",
    device: torch.device | str = "cpu",
) -> Batch:
    """Prompts and continuations -> a decoder-only teacher-forcing :class:`Batch`.

    Each row is ``prompt + target + [eos]`` (the end id added where missing); the model
    reads all but its last token and predicts all but its first.

    Args:
        prompt_rows: each row's prompt ids (:meth:`Prompt.ids` of a source, or a Hugging Face
            model's prompt as its tokenizer encodes it).
        loss: ``"target"`` (the continuation and its end are learned) or ``"all"``.
    Returns:
        ``src [B, T]`` the inputs, ``tgt_out [B, T]`` the next tokens, ``tgt_pad [B, T]``
        True where nothing is learned (the prompt but its last position, which predicts the
        continuation's first token, with ``loss="target"``; padding); ``src_pad`` True at
        padding.
    """
    if len(prompt_rows) != len(tgt_rows):
        raise InputError(f"{len(prompt_rows)} prompts but {len(tgt_rows)} targets")
    if any(not p for p in prompt_rows):
        raise InputError("a prompt is empty")
    seqs = [[*p, *with_eos(t, config.eos_id)] for p, t in zip(prompt_rows, tgt_rows, strict=True)]
    starts = [len(p) - 1 if loss == "target" else 0 for p in prompt_rows]
    if max(len(s) for s in seqs) - 1 > config.max_len:
        raise InputError(f"a sequence is longer than this model's max_len={config.max_len}")
    inputs = pad_batch([s[:-1] for s in seqs], config.pad_id, device)
    outputs = pad_batch([s[1:] for s in seqs], config.pad_id, device)
    dev = inputs.device
    pad = length_mask([len(s) - 1 for s in seqs], inputs.shape[1], dev)
    cols = torch.arange(inputs.shape[1], device=dev)[None, :]
    ahead = cols < torch.tensor(starts, device=dev)[:, None]
    lengths = [len(p) for p in prompt_rows]
    return Batch(inputs, pad, None, outputs, pad | ahead, lm=True, prompt_lengths=lengths)


def scored_batch(
    rows: Sequence[Sequence[int]],
    types: Sequence[Sequence[int]] | None,
    targets: Sequence[Sequence[int]],
    scored: Sequence[Sequence[int]],
    config: ModelConfig,
    device: torch.device | str = "cpu",
) -> Batch:
    """Encoder-only inputs and what each is scored on -> a masked-LM :class:`Batch`.

    Args:
        rows: each row's ids (specials included), read at once.
        types: each row's token types (None: no types given).
        targets: per row, the id each scored position is scored on.
        scored: per row, the positions scored (``len(targets[i])`` of them).
    Returns:
        ``src [B, T]``, ``src_pad``, ``types``, ``tgt_out [B, T]`` (the target at a scored
        position, pad elsewhere) and ``tgt_pad [B, T]`` True where nothing is scored.
    """
    batch = source_batch(rows, config, device)
    dev = batch.src.device
    tgt_out = torch.full_like(batch.src, config.pad_id)
    tgt_pad = torch.ones_like(batch.src_pad)
    for i, (pos, ids) in enumerate(zip(scored, targets, strict=True)):
        tgt_out[i, list(pos)] = torch.as_tensor(list(ids), dtype=torch.long, device=dev)
        tgt_pad[i, list(pos)] = False
    batch.tgt_out, batch.tgt_pad, batch.mlm = tgt_out, tgt_pad, True
    if types is not None:
        batch.types = pad_batch(types, 0, dev)
    return batch
