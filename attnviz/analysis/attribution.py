"""Gradient attribution (Captum) for one decoding step, and its agreement with attention.

A one-stack model is attributed over its one sequence: a decoder-only model's prompt and
output so far, an encoder-only model's sentence for the filler at one mask token (its attention
compared is that mask position's self-attention row, agreement keys ``~self``).

For the token the model chose at step ``t`` (its probability is the explained quantity):

- **Integrated Gradients** on the source and target token embeddings
  (``captum.attr.LayerIntegratedGradients`` on ``src_embed`` and ``tgt_embed``), from a
  baseline of the pad id at every position, with the convergence delta (how far the attributions'
  sum is from ``f(input) - f(baseline)``);
- **gradient x input** on the same embeddings.

Scores are per token: the attribution summed over the embedding dimensions (signed: positive
supports the chosen token). Agreement with attention is Spearman's rank correlation between
the source scores and (a) each decoder layer's cross-attention row for step ``t`` (mean over
heads) and (b) attention rollout: the mean over decoder layers of those rows, pushed through
the encoder's rollout ``prod_l (0.5 A_l + 0.5 I)`` (A_l the head-mean self-attention).

Attribution always runs a fresh forward with gradients on (never on inference-mode tensors),
on a private copy of the model, so Captum's hooks and the backward pass never reach the
shared model other users are running; a test runs it beside decoding in another thread.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import InputError, index_in
from ..core.record import record
from ..data.batch import source_batch
from .lenses import self_rollout
from .masked_lm import mask_positions, read_inputs, type_ids


@dataclass
class Attribution:
    """Attribution of the token chosen at one step (shapes: Ts source, t+1 target prefix).

    Attributes:
        ig_src / ig_tgt: Integrated Gradients per source token ``[Ts]`` / prefix token ``[t+1]``.
        delta: IG convergence delta (small means the path integral converged).
        gxi_src / gxi_tgt: gradient x input per token.
        cross: ``{layer: [Ts]}`` head-mean cross-attention of this step's query (a
            decoder-only model: its self-attention on the prompt; agreement keys ``~self``).
        rollout: ``[Ts]`` attention rollout to the source for this step.
        agreement: Spearman rank correlations, e.g. ``{"ig~cross L0": 0.9, "ig~rollout": ...}``.
        versus: the alternative token of a contrastive attribution (None: plain). Then the
            explained quantity is ``log p(token) - log p(versus)`` (``contrast``), and positive
            scores are evidence for ``token`` over ``versus``.
        versus_prob: the alternative's probability at this step.
    """

    text: str
    step: int
    token: str
    prob: float
    src_tokens: list[str]
    tgt_tokens: list[str]
    ig_src: np.ndarray
    ig_tgt: np.ndarray
    delta: float
    gxi_src: np.ndarray
    gxi_tgt: np.ndarray
    cross: dict[int, np.ndarray]
    rollout: np.ndarray
    agreement: dict[str, float] = field(default_factory=dict)
    versus: str | None = None
    versus_prob: float | None = None
    contrast: float | None = None


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two 1-D arrays (NaN when either is constant)."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def rollout(trace, step: int) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """Head-mean cross-attention rows of ``step`` per layer ``{layer: [Ts]}`` and rollout ``[Ts]``."""
    r = self_rollout(trace, "encoder_self", max(trace.layers("encoder_self")))[0]  # [Ts, Ts]
    cross = {layer: trace.numpy("cross", layer)[0].mean(0)[step] for layer in trace.layers("cross")}
    return cross, np.mean(list(cross.values()), 0) @ r


def attribute(
    ckpt: Checkpoint,
    text: str,
    step: int,
    tokens: list[int] | None = None,
    n_steps: int = 32,
    versus: int | None = None,
) -> Attribution:
    """Attribute the token chosen at ``step`` of the greedy output of ``text`` (an
    encoder-only model: the filler at its ``step``-th mask token, over the sentence's tokens;
    refused in one line where ``text`` has no mask token).

    Args:
        tokens: the output ids to condition on (default: the model's greedy output); the
            prefix ``tokens[:step]`` is the decoder input and ``tokens[step]`` the explained token
            (an encoder-only model: one filler id per mask token, default its top fillers).
        n_steps: Integrated Gradients path steps.
        versus: an alternative token id: explain ``log p(chosen) - log p(versus)`` ("why this
            token and not that one") instead of ``p(chosen)``.
    """
    from captum.attr import LayerIntegratedGradients

    # A private copy: Captum's hooks, the backward pass and eval() must not touch the shared
    # model that other users (app sessions, threads) are running at the same time. Same
    # weights, so the attention and attributions are those of the model itself.
    model = copy.deepcopy(ckpt.model).eval()
    cfg = ckpt.config
    if cfg.encoder_only:  # one pass over the sentence: explain a mask's filler
        return _attribute_mask(ckpt, model, text, step, tokens, n_steps, versus)
    if model.src_embed is model.tgt_embed:  # one table (most imported models): untie the copy
        model.tgt_embed = copy.deepcopy(model.src_embed)  # same weights, attributable apart
    enc = ckpt.encode_source(text)
    batch = source_batch([enc.ids], cfg, ckpt.device)
    src, src_pad = batch.src, batch.src_pad
    if tokens is None:  # the model's own output, under the checkpoint's generation rules
        tokens = ckpt.predict_details(text).tokens
    vocab = cfg.tgt_vocab_size
    tokens = [index_in(t, "tokens", vocab, "ids") for t in tokens]
    step = index_in(step, "step", len(tokens), note=f" (the output has {len(tokens)} tokens)")
    tgt = torch.tensor([[cfg.bos_id, *tokens[:step]]], device=ckpt.device)
    chosen = tokens[step]
    explained = _explained(chosen, versus, vocab)

    if cfg.decoder_only:  # one sequence through one embedding: the prompt, then
        seq = torch.tensor([[*enc.ids, *tokens[:step]]], device=ckpt.device)  # [1, T]
        one = _OneStack(seq, model.tgt_embed, lambda ids: model(ids)[:, -1].float(), "decoder_self",
                        -1, len(enc.ids))  # fmt: skip
        return _attribute_one_stack(ckpt, model, text, enc, one, step, chosen, explained,
                                    n_steps, versus)  # fmt: skip

    def prob(src_ids, tgt_ids, pad):
        return explained(model(src_ids, tgt_ids, pad)[:, -1].float())

    with torch.enable_grad():
        with warnings.catch_warnings():  # two separate embedding layers: the case it allows
            warnings.filterwarnings("ignore", "Multiple layers provided")
            lig = LayerIntegratedGradients(prob, [model.src_embed, model.tgt_embed])
        (ig_src, ig_tgt), delta = lig.attribute(
            (src, tgt),
            baselines=(torch.full_like(src, cfg.pad_id), torch.full_like(tgt, cfg.pad_id)),
            additional_forward_args=(src_pad,),
            n_steps=n_steps,
            return_convergence_delta=True,
        )
        gxi_src, gxi_tgt, p, trace = _grad_x_input(model, src, tgt, src_pad, prob)
    extra = {}
    if versus is not None:
        with torch.no_grad():
            probs = model(src, tgt, src_pad)[0, -1].float().softmax(-1)
        extra = dict(
            versus=ckpt.tgt_tokenizer.token(versus),
            versus_prob=float(probs[versus]),
            contrast=p,
        )
        p = float(probs[chosen])
    cross, roll = rollout(trace, step)
    result = Attribution(
        text=text,
        step=step,
        token=ckpt.tgt_tokenizer.token(chosen),
        prob=p,
        src_tokens=enc.pieces,
        tgt_tokens=[ckpt.tgt_tokenizer.token(i) for i in tgt[0].tolist()],
        ig_src=as_numpy(ig_src.sum(-1)[0]),
        ig_tgt=as_numpy(ig_tgt.sum(-1)[0]),
        delta=float(delta.abs().max()),
        gxi_src=gxi_src,
        gxi_tgt=gxi_tgt,
        cross=cross,
        rollout=roll,
        **extra,
    )
    for name, scores in (("ig", result.ig_src), ("gxi", result.gxi_src)):
        for layer, row in cross.items():
            result.agreement[f"{name}~cross L{layer}"] = spearman(scores, row)
        result.agreement[f"{name}~rollout"] = spearman(scores, roll)
    return result


def _explained(chosen: int, versus: int | None, vocab: int):
    """The quantity explained, ``[B, V]`` logits -> ``[B]``: ``p(chosen)``, or with ``versus``
    ``log p(chosen) - log p(versus)`` (refused where ``versus`` is not another token id)."""
    other = f" other than the explained {chosen}"
    if versus is not None and index_in(versus, "versus", vocab, "a token id", other) == chosen:
        raise InputError(f"versus must be a token id in 0..{vocab - 1}{other}, got {versus}")

    def explained(logits):  # [B, V] -> [B]
        if versus is None:
            return logits.softmax(-1)[:, chosen]
        logp = logits.log_softmax(-1)
        return logp[:, chosen] - logp[:, versus]

    return explained


@dataclass
class _OneStack:
    """How a one-stack model is attributed: ``seq`` ``[1, T]`` through the one embedding
    ``embed``; ``run(ids)`` gives the explained position's logits ``[B, V]``; ``kind``'s
    row ``row`` is the attention compared, on the first ``prompt`` keys."""

    seq: torch.Tensor
    embed: torch.nn.Module
    run: object
    kind: str
    row: int
    prompt: int


def _attribute_mask(ckpt, model, text, step, tokens, n_steps, versus):
    """An encoder-only model: IG and gradient x input over the sentence's token embeddings
    for the filler at mask token ``step`` (default: the model's top filler); the attention
    compared is that mask position's self-attention row (agreement keys ``~self``)."""
    positions = mask_positions(ckpt, text)  # refuses a sentence without a mask token
    enc, types = read_inputs(ckpt, text)
    note = f" (the input has {len(positions)} mask token{'s' * (len(positions) > 1)})"
    step = index_in(step, "step", len(positions), note=note)
    pos = positions[step]
    seq = torch.tensor([enc.ids], device=ckpt.device)  # [1, T]
    type_row = type_ids(ckpt, [types])

    def run(ids):  # Captum widens the batch: the types follow
        kinds = None if type_row is None else type_row.expand(ids.shape[0], -1)
        return model(ids, token_type_ids=kinds)[:, pos].float()

    vocab = ckpt.config.tgt_vocab_size
    if tokens is None:  # the model's top filler
        with torch.no_grad():
            chosen = int(run(seq)[0].argmax())
    else:
        chosen = index_in(list(tokens)[step], "tokens", vocab, "ids")
    one = _OneStack(seq, model.src_embed, run, "encoder_self", pos, len(enc.ids))
    return _attribute_one_stack(ckpt, model, text, enc, one, step, chosen,
                                _explained(chosen, versus, vocab), n_steps, versus)  # fmt: skip


def _attribute_one_stack(ckpt, model, text, enc, one, step, chosen, explained, n_steps, versus):
    """A one-stack model: IG and gradient x input over its one sequence through its one
    embedding, split into the prompt (``*_src``) and what follows (``*_tgt``: a decoder-only
    model's output so far; nothing for an encoder-only model, whose sentence is all prompt);
    the attention compared is each layer's head-mean self-attention of the explained
    position on the prompt, and the self-attention rollout's."""
    from captum.attr import LayerIntegratedGradients

    cfg = ckpt.config
    prompt, seq = one.prompt, one.seq

    def prob(ids):
        return explained(one.run(ids))

    outputs = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        outputs.append(output)

    with torch.enable_grad():
        lig = LayerIntegratedGradients(prob, one.embed)
        ig, delta = lig.attribute(
            seq, baselines=torch.full_like(seq, cfg.pad_id), n_steps=n_steps,
            return_convergence_delta=True,
        )  # fmt: skip
        handle = one.embed.register_forward_hook(keep)
        try:
            with record(model, capture=("weights",)) as trace:
                p = prob(seq)
            p.sum().backward()
        finally:
            handle.remove()
    emb = outputs[0]
    gxi = as_numpy((emb.grad * emb).sum(-1)[0])  # [T]
    ig = as_numpy(ig.sum(-1)[0])  # [T]
    kind = one.kind
    rows = {
        layer: trace.numpy(kind, layer)[0].mean(0)[one.row][:prompt] for layer in trace.layers(kind)
    }  # {layer: [P]}
    roll = self_rollout(trace, kind, max(trace.layers(kind)))[0][one.row][:prompt]
    extra = {}
    value = float(p.item())
    if versus is not None:
        with torch.no_grad():
            probs = one.run(seq)[0].float().softmax(-1)
        extra = dict(versus=ckpt.tgt_tokenizer.token(versus), versus_prob=float(probs[versus]),
                     contrast=value)  # fmt: skip
        value = float(probs[chosen])
    tok = ckpt.tgt_tokenizer
    result = Attribution(
        text=text, step=step, token=tok.token(chosen), prob=value, src_tokens=enc.pieces,
        tgt_tokens=[tok.token(i) for i in seq[0, prompt:].tolist()], ig_src=ig[:prompt],
        ig_tgt=ig[prompt:], delta=float(delta.abs().max()), gxi_src=gxi[:prompt],
        gxi_tgt=gxi[prompt:], cross=rows, rollout=roll, **extra,
    )  # fmt: skip
    for name, scores in (("ig", result.ig_src), ("gxi", result.gxi_src)):
        for layer, row in rows.items():
            result.agreement[f"{name}~self L{layer}"] = spearman(scores, row)
        result.agreement[f"{name}~rollout"] = spearman(scores, roll)
    return result


def _grad_x_input(model, src, tgt, src_pad, prob):
    """Gradient x input on both embeddings, and the attention of the same forward pass."""
    outputs = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        outputs.append(output)

    handles = [
        model.src_embed.register_forward_hook(keep),
        model.tgt_embed.register_forward_hook(keep),
    ]
    try:
        with record(model, capture=("weights",)) as trace:
            p = prob(src, tgt, src_pad)
        p.sum().backward()
    finally:
        for h in handles:
            h.remove()
    src_emb, tgt_emb = outputs
    gxi = [as_numpy((e.grad * e).sum(-1)[0]) for e in (src_emb, tgt_emb)]
    return gxi[0], gxi[1], p.item(), trace
