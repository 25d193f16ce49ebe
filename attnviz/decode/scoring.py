"""Score a reference: how likely the model finds a given target, token by token.

The target is teacher-forced through the model once, inside :func:`~attnviz.record`, so the
attention that comes back with the scores is the attention of that very pass. ``ckpt`` is a
loaded :class:`attnviz.Checkpoint` (which calls in here); this layer does not import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.errors import InputError, shorten
from ..core.record import Trace, record
from ..data.batch import make_batch, with_eos
from ..data.tokenizer import check_text, check_token_id


@dataclass
class Scored:
    """A reference scored under a model (teacher-forced).

    Attributes:
        tokens: the target's pieces as the target tokenizer labels them, EOS last.
        ids: their ids ``[Tt]`` (EOS last).
        probs: ``[Tt]`` the model's probability of each target token given the source and the
            target prefix before it (softmax of the raw logits; generation rules not applied).
        ranks: ``[Tt]`` 1 = the model's argmax at that position; ties rank the target first.
        argmax: ``[Tt]`` the model's own top token at each position.
        trace: the recorded teacher-forced pass (batch of one; ``Tt`` query rows per kind;
            a decoder-only model's ``"decoder_self"`` holds prompt + reference, ``P + Tt - 1``
            rows, row ``P - 1 + i`` predicting token ``i``).
        first_divergence: the first position whose argmax is not the target token, or None.
    """

    tokens: list[str]
    ids: list[int]
    probs: list[float]
    ranks: list[int]
    argmax: list[int]
    trace: Trace
    first_divergence: int | None

    @property
    def logprob(self) -> float:
        """Sum of the natural-log probabilities of the target tokens."""
        return float(sum(torch.tensor(self.probs, dtype=torch.float64).log()))


def target_ids(ckpt: Any, target: str | list[int]) -> list[int]:
    """A reference -> target ids ending with the model's EOS (added where the tokenizer does not)."""
    cfg = ckpt.config
    if isinstance(target, str):
        if ckpt.tgt_tokenizer is None:
            why = ckpt.meta.get("tokenizer_missing") or "this checkpoint has no target tokenizer"
            raise InputError(f"cannot read the reference text: {why}; give target ids instead")
        if not target.strip():
            raise InputError("the reference is empty: type the output you expect")
        check_text(target, cfg.max_len, "the reference")  # before the tokenizer reads it
        ids = list(ckpt.tgt_tokenizer.encode(target).ids)
        if not ids or ids == [cfg.eos_id]:
            raise InputError(f"the reference {shorten(repr(target))} has no tokens to score")
    else:
        ids = [check_token_id(i, cfg.tgt_vocab_size, "target id") for i in target]
        if not ids:
            raise InputError("the reference is empty: give target ids (the end id is added)")
    ids = with_eos(ids, cfg.eos_id)
    if len(ids) > cfg.max_len:
        raise InputError(
            f"the reference has {len(ids)} tokens with its end token; "
            f"this model takes at most {cfg.max_len}"
        )
    bad = [i for i in ids if not 0 <= i < cfg.tgt_vocab_size]
    if bad:  # a tokenizer that gives ids the model does not have
        raise InputError(
            f"target id {bad[0]} is outside the vocabulary 0..{cfg.tgt_vocab_size - 1}"
        )
    return ids


def score_reference(ckpt: Any, source: str, target: str | list[int]) -> Scored:
    """Teacher-force ``target`` on ``source``: per-token probability, rank and attention.

    Args:
        ckpt: a loaded checkpoint.
        source: the input text (the same refusals as :meth:`Checkpoint.predict`).
        target: the reference as text, or as target ids (EOS appended when missing).
    Returns:
        :class:`Scored`; ``probs``/``ranks``/``argmax`` have one entry per target token.
    """
    if ckpt.is_audio:  # features in; the target follows the start id and the rules' prompt
        features = ckpt.source_tensor(source)
        ids = target_ids(ckpt, target)
        prompt = list(getattr(ckpt.rules, "prompt", ()) or ())
        if ids[0] == ckpt.config.bos_id:  # Whisper's tokenizer writes the prompt itself
            ids = ids[1:]
        if ids[: len(prompt)] != prompt:
            ids = prompt + ids
        tgt_in = torch.tensor([[ckpt.config.bos_id, *ids[:-1]]], device=ckpt.device)
        with torch.no_grad(), record(ckpt.model) as trace:
            logits = ckpt.model(features, tgt_in)[0].float()  # [Tt, V]
        gold = torch.tensor(ids, device=ckpt.device)  # [Tt]
    elif ckpt.config.decoder_only:  # prompt + reference, one sequence
        prompt = ckpt.encode_source(source).ids  # the input's refusals come first
        ids = target_ids(ckpt, target)
        if isinstance(target, str) and len(ids) > 1 and ids[0] == ckpt.config.bos_id:
            ids = ids[1:]  # a tokenizer that starts every text (Llama, Gemma): the prompt has it
        if len(prompt) + len(ids) - 1 > ckpt.config.max_len:
            raise InputError(
                f"the prompt and the reference hold {len(prompt) + len(ids) - 1} tokens; "
                f"this model takes at most {ckpt.config.max_len}"
            )
        seq = torch.tensor([[*prompt, *ids[:-1]]], device=ckpt.device)  # [1, P + Tt - 1]
        with torch.no_grad(), record(ckpt.model) as trace:
            # position P - 1 + i predicts reference token i
            logits = ckpt.model(seq)[0, len(prompt) - 1 :].float()  # [Tt, V]
        gold = torch.tensor(ids, device=ckpt.device)  # [Tt]
    else:
        enc = ckpt.encode_source(source)  # the input's refusals come first
        ids = target_ids(ckpt, target)
        batch = make_batch([enc.ids], [ids], ckpt.config, ckpt.device, add_eos=False)
        with torch.no_grad(), record(ckpt.model) as trace:  # a checkpoint's model is in eval mode
            logits = batch.forward(ckpt.model)[0].float()  # [Tt, V]
        gold = batch.tgt_out[0]  # [Tt]
    gold_logit = logits.gather(-1, gold[:, None])  # [Tt, 1]
    ranks = (logits > gold_logit).sum(-1) + 1  # [Tt]
    probs = logits.softmax(-1).gather(-1, gold[:, None])[:, 0]  # [Tt]
    top = logits.argmax(-1)  # [Tt]
    wrong = (top != gold).nonzero()
    tok = ckpt.tgt_tokenizer
    labels = [tok.token(i) if tok is not None else f"#{i}" for i in ids]
    return Scored(
        tokens=labels,
        ids=ids,
        probs=probs.tolist(),
        ranks=ranks.tolist(),
        argmax=top.tolist(),
        trace=trace,
        first_divergence=int(wrong[0, 0]) if len(wrong) else None,
    )
