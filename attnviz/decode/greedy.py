"""Decoding: a step-by-step greedy decoder with a KV cache, batched greedy, beam search.

Every function runs the model in eval mode (restoring the caller's mode afterwards) and
without gradients. Attention shown for a decoded sequence is recorded while the tokens are
produced, from the cached forward passes that produced them. Each cached step runs as one fused
function (:mod:`attnviz.core.step`: the same math without the module calls), which attends
through the recorder's hooks wherever one records or edits, as the modules would.

A decoder-only model (``ModelConfig.arch``) decodes a prompt: where an encoder-decoder takes
source ids and starts its decoder from ``bos_id``, it takes the prompt's ids in their place
(``bos_id`` is unused); the prompt but its last token runs once into the cache (recorded like
an encoder pass), the last token is the first one fed, and what is returned is the
continuation alone, as ``generate(max_new_tokens=n)`` produces it after the prompt.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core import masks
from ..core.cache import DecoderCache
from ..core.config import ModelConfig
from ..core.errors import InputError
from ..core.gemv import Copies
from ..core.model import Transformer
from ..core.record import AttentionRecord, Edit, Trace, record
from ..core.step import fused_step
from ..data.tokenizer import check_token_id
from .assemble import STEP_FIELDS, assemble_trace, step_records


@contextmanager
def eval_no_grad(model: Transformer) -> Iterator[None]:
    """Eval mode and no grad for the block; a model already in eval mode is not touched."""
    was_training = model.training
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()


def as_batch(src: Tensor, name: str = "src", model: Transformer | None = None) -> Tensor:
    """Source ids ``[Ts]`` -> ``[1, Ts]``; for an audio model, features ``[n_mels, T]`` ->
    ``[1, n_mels, T]`` (the model checks the rest)."""
    if model is not None and model.config.reads_audio:
        if not isinstance(src, Tensor):
            src = torch.as_tensor(src, dtype=torch.float32)
        return src.unsqueeze(0) if src.dim() == 2 else src
    if not isinstance(src, Tensor):
        src = torch.as_tensor(src, dtype=torch.long)
    if src.dim() == 1:
        src = src.unsqueeze(0)
    if src.dim() != 2:
        raise InputError(f"{name} must be token ids [Ts] or [B, Ts], got shape {list(src.shape)}")
    return src


def source_pad_mask(model: Transformer, src: Tensor, src_pad_mask: Tensor | None) -> Tensor | None:
    """The caller's mask, else PAD positions of ``src`` (None when there are none; always None
    for audio features, which are padded to their fixed length as the model was trained).

    A decoder-only model's prompt is never padded by id (GPT-2 pads with its end id, which a
    prompt may hold); a mask with padding is refused: decode prompts of one length together.
    """
    if model.config.decoder_only:
        if src_pad_mask is not None and bool(torch.as_tensor(src_pad_mask).bool().any()):
            raise InputError(
                "a decoder-only model decodes unpadded prompts: give prompts of one length, "
                "or decode them one at a time"
            )
        return None
    if model.config.reads_audio:
        return None
    if src_pad_mask is not None:
        return src_pad_mask.to(src.device)
    pad = masks.padding_mask(src, model.config.pad_id)
    return pad if bool(pad.any()) else None


def default_max_len(
    model: Transformer | ModelConfig, src_len: int, max_len: int | None = None
) -> int:
    """Most tokens to decode for a source of `src_len` tokens: `max_len`, else `2 * Ts + 16`,
    within the positions the model (or config) has (after a decoder-only model's prompt).
    A checkpoint's own limit is :meth:`attnviz.decode.decoding.Decoding.limit`."""
    cfg = model if isinstance(model, ModelConfig) else model.config
    if cfg.decoder_only:
        limit = cfg.max_len - src_len
        if limit < 1:
            raise InputError(
                f"the prompt holds {src_len} tokens, and this model's max_len="
                f"{cfg.max_len} leaves no position to decode into"
            )
    else:
        limit = cfg.max_len - 1  # BOS takes position 0
    if max_len is None:  # an audio source's length says nothing about its text's
        return limit if cfg.reads_audio else min(limit, 2 * src_len + 16)
    if max_len < 1:
        raise InputError(f"max_len must be at least 1, got {max_len}")
    return min(limit, max_len)


@dataclass(frozen=True)
class LogitRules:
    """Constraints on next-token logits before the argmax, as transformers' ``generate`` has them.

    Greedy decoding with these rules gives the tokens of ``generate(num_beams=1,
    do_sample=False)`` under a folder's ``generation_config.json`` (see
    :func:`attnviz.interop.hf.generation_rules`). The logits a step reports stay the model's
    own; only the choice is constrained, and a token given to ``GreedyStepper.step`` is fed
    whatever the rules say.

    Attributes:
        forced_bos_id: the first token produced (BART's ``<s>``, mBART's target language).
        forced_eos_id: the token forced at the last step the length limit allows.
        banned: ids never chosen (single-token ``bad_words_ids``, ``suppress_tokens``).
        begin_banned: ids not chosen as the first token (``begin_suppress_tokens``); after
            a forced first token, as the second (transformers moves the step there).
        min_new_tokens: the end ids (``eos_id`` and ``end_ids``) are banned before this many
            tokens.
        eos_id: the end id that ``min_new_tokens`` holds back; ``end_ids``: the others (a
            generation config that lists several).
    """

    forced_bos_id: int | None = None
    forced_eos_id: int | None = None
    banned: tuple[int, ...] = ()
    begin_banned: tuple[int, ...] = ()
    min_new_tokens: int = 0
    eos_id: int | None = None
    end_ids: tuple[int, ...] = ()

    def apply(self, logits: Tensor, step: int, limit: int, seqs: Tensor | None = None) -> Tensor:
        """Constrained copy of ``logits`` ``[B, V]`` for producing token ``step`` (0-based)
        of at most ``limit``; blocked ids get -inf, a forced id is the only finite one.
        ``seqs`` ``[B, step]`` (the tokens produced so far) is for rules that read them
        (:class:`~attnviz.decode.rules.WhisperRules`); these do not."""
        logits = logits.clone()
        vocab = logits.shape[-1]

        def ban(ids) -> None:
            ids = [i for i in ids if 0 <= i < vocab]
            if ids:
                logits[:, ids] = float("-inf")

        def force(i: int) -> None:
            logits.fill_(float("-inf"))
            logits[:, i] = 0.0

        if self.eos_id is not None and step < self.min_new_tokens:
            ban([self.eos_id, *self.end_ids])
        ban(self.banned)
        # transformers' SuppressTokensAtBegin acts one step later when the first is forced
        if step == (0 if self.forced_bos_id is None else 1):
            ban(self.begin_banned)
        if step == 0 and self.forced_bos_id is not None:
            force(self.forced_bos_id)
        elif step == limit - 1 and self.forced_eos_id is not None:
            force(self.forced_eos_id)
        return logits


def end_ids(model: Transformer, eos_id: int | None) -> tuple[int, ...]:
    """The ids that end a decoded sequence: none for ``eos_id=None``; ``eos_id``, and where it
    is the model's own end id, the config's further ``end_ids`` (Llama 3 lists several)."""
    if eos_id is None:
        return ()
    cfg = model.config
    more = cfg.end_ids if eos_id == cfg.eos_id else ()
    return (eos_id, *[i for i in more if i != eos_id])


@dataclass
class Start:
    """What runs before the first decoder step, and the tokens that step feeds.

    Attributes:
        memory: encoder output ``[B, Ts, D]``; None for a decoder-only model.
        cache: the decoder cache (cross K/V, or a decoder-only prompt but its last token),
            None when decoding without one.
        first: ``[B]`` ids fed at the first step: ``bos_id``, or each prompt's last token.
        prefix: ``[B, 1 + P']`` what an uncached decode feeds in full at the first step
            (the start id, or the whole prompt).
    """

    memory: Tensor | None
    cache: DecoderCache | None
    first: Tensor
    prefix: Tensor


def start_decoding(
    model: Transformer,
    src: Tensor,
    pad: Tensor | None,
    bos_id: int,
    n_new: int,
    cache: bool = True,
) -> Start:
    """Run the encoder (or a decoder-only model's prompt) for a decode of ``n_new`` tokens.

    Call inside the caller's ``eval_no_grad`` and ``record`` blocks: the encoder's (or the
    prompt's) attention is recorded where the caller records.

    Raises:
        InputError: an id fed at the first step outside the vocabulary, before anything runs
            (later ids are the argmax or a checked forced token).
    """
    b = src.shape[0]
    decoder_only = model.config.decoder_only
    if decoder_only:
        first = src[:, -1]
    else:
        first = torch.full((b,), bos_id, dtype=torch.long, device=src.device)
    vocab = model.config.tgt_vocab_size
    outside = (first < 0) | (first >= vocab)
    if bool(outside.any()):
        bad = int(first[outside][0])
        raise InputError(f"tgt holds id {bad}, outside the vocabulary 0..{vocab - 1}")
    if decoder_only:
        kv = None
        if cache:
            kv = model.init_cache(None, capacity=src.shape[1] + n_new, batch=b)
            if src.shape[1] > 1:  # the prompt but its last token, into the cache (no logits)
                model.decode(src[:, :-1], None, cache=kv, logits=False)
        return Start(None, kv, first, src)
    memory = model.encode(src, pad)
    kv = model.init_cache(memory, pad, capacity=n_new) if cache else None
    return Start(memory, kv, first, first[:, None])


def choose(
    logits: Tensor, rules: LogitRules | None, step: int, limit: int, seqs: Tensor | None = None
) -> Tensor:
    """Greedy choice ``[B]`` from ``[B, V]`` logits under the rules; ``seqs`` ``[B, step]``:
    the tokens produced so far."""
    if rules is not None:
        logits = rules.apply(logits, step, limit, seqs)
    return logits.argmax(-1)


@dataclass
class StepResult:
    """One greedy step.

    Attributes:
        step: index of the produced token (0 = first token after BOS).
        token: the token id chosen (argmax under the stepper's rules, unless forced).
        prob: its probability.
        logits: ``[V]`` (float32, CPU): the model's own, before any :class:`LogitRules`.
        probs: (a property) the next-token distribution ``[V]``, ``softmax(logits)``: worked
            out when asked (the same numbers each time), so a step keeps one ``[V]`` vector,
            not two (Gemma 3's 262,144-token vocabulary: 1 MB a step).
        attention: ``(kind, layer) -> [H, Tk]`` weights of this step's query row for
            ``"decoder_self"`` (Tk = step + 1) and ``"cross"`` (Tk = Ts).
        done: EOS produced or the length limit reached.
    """

    step: int
    token: int
    prob: float
    logits: Tensor
    attention: dict[tuple[str, int], Tensor]
    done: bool

    @property
    def probs(self) -> Tensor:
        """The next-token distribution ``[V]`` (float32, CPU), before any rules."""
        return torch.softmax(self.logits, dim=-1)


class GreedyStepper:
    """Greedy decoding of one sequence, one token per :meth:`step`.

    The encoder runs once; cross-attention keys/values are computed once per layer and
    self-attention keys/values are cached, so a step costs one decoder position. The stepper
    can go back to an earlier step (:meth:`back`) or to the start (:meth:`reset`) without
    running the encoder again, and :meth:`trace` rebuilds the full attention matrices.

    Args:
        model: the Transformer (not modified; run in eval mode).
        src_ids: source ids ``[Ts]`` or ``[1, Ts]``.
        bos_id, eos_id: special ids; ``eos_id=None`` decodes until ``max_len``. A
            decoder-only model takes the prompt as ``src_ids`` (``bos_id`` unused): the
            prompt but its last token runs at once, and :attr:`encoder_trace` holds its
            attention.
        max_len: most tokens to produce (default ``2 * Ts + 16``, within the model's max_len).
        src_pad_mask: ``[1, Ts]`` bool, default from ``config.pad_id``.
        edits: attention edits (``ZeroHeads``, ``DropMask``, ...) applied to every pass,
            the encoder's included, so the whole decode runs the edited model.
        rules: :class:`LogitRules` for the argmax (a Hugging Face folder's generation config).
        capture: what is recorded of every attention (default scores, mask and weights); the
            app keeps ``("mask", "weights")``: a long input's encoder scores are as big as
            its weights and no view of the app reads them.
        copies: column-major copies of the model's weights (:class:`~attnviz.core.gemv.Copies`)
            for faster steps on the CPU; the caller keeps the weights' values while it holds
            them (the app does, for the checkpoints it loads read-only).
    """

    def __init__(
        self,
        model: Transformer,
        src_ids: Tensor,
        bos_id: int,
        eos_id: int | None,
        max_len: int | None = None,
        src_pad_mask: Tensor | None = None,
        edits: Sequence[Edit] = (),
        rules: LogitRules | None = None,
        capture: Sequence[str] = STEP_FIELDS,
        copies: Copies | None = None,
    ):
        src = as_batch(src_ids, "src_ids", model)
        if src.shape[0] != 1:
            raise InputError(f"GreedyStepper decodes one sequence; got a batch of {src.shape[0]}")
        self.model, self.bos_id, self.eos_id = model, bos_id, eos_id
        self.end_ids = end_ids(model, eos_id)
        self.edits = tuple(edits)
        self.rules = rules
        self.capture = tuple(capture)
        self.copies = copies
        self.src = src.to(next(model.parameters()).device)
        self.max_len = default_max_len(model, src.shape[1], max_len)
        pad = source_pad_mask(model, self.src, src_pad_mask)
        with eval_no_grad(model), record(model, self.edits, capture=self.capture) as enc_trace:
            start = start_decoding(model, self.src, pad, bos_id, self.max_len)
        self._cache, self._first = start.cache, int(start.first[0])
        self._prompt = start.cache.length  # positions before the first step
        self.encoder_trace = enc_trace
        self._steps: list[StepResult] = []
        self._records: list[dict[tuple[str, int], AttentionRecord]] = []

    # -- state -------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        """Tokens produced so far (BOS excluded)."""
        return [s.token for s in self._steps]

    @property
    def steps(self) -> list[StepResult]:
        return list(self._steps)

    @property
    def position(self) -> int:
        """Number of steps taken."""
        return len(self._steps)

    @property
    def done(self) -> bool:
        if not self._steps:
            return False
        last = self._steps[-1].token
        return last in self.end_ids or self.position >= self.max_len

    def _seqs(self) -> Tensor:
        """The tokens produced so far as ``[1, step]`` (what history-reading rules see)."""
        return torch.tensor([self.tokens], dtype=torch.long, device=self.src.device).view(1, -1)

    # -- moving ------------------------------------------------------------------------------
    def step(self, token: int | None = None) -> StepResult:
        """Produce the next token (or feed ``token`` instead of the argmax).

        Returns:
            The :class:`StepResult` of this step.
        """
        if self.done:
            raise InputError("decoding is finished; call back() or reset() to step again")
        prev = self._first if not self._steps else self._steps[-1].token
        ids = torch.tensor([[prev]], device=self.src.device)
        vocab = self.model.config.tgt_vocab_size
        if token is not None:  # checked before the model runs, so a refusal leaves no trace
            token = check_token_id(token, vocab)  # int, numpy or 0-d tensor ints
        with (
            eval_no_grad(self.model),
            record(self.model, self.edits, capture=self.capture) as trace,
        ):
            fused = fused_step(self.model, self._cache, self.copies)  # records through the hooks
            if fused is not None:
                logits = fused(ids[0])[0].float()  # [V]
            else:
                logits = self.model.decode(ids, None, cache=self._cache)[0, -1].float()
        kept = logits.cpu()
        probs = torch.softmax(kept, dim=-1)  # as StepResult.probs works it out
        step = len(self._steps)
        chosen = (
            token
            if token is not None
            else int(choose(logits[None], self.rules, step, self.max_len, self._seqs())[0])
        )
        recs = step_records(trace)
        attention = {key: r.weights[0, :, 0] for key, r in recs.items()}  # [H, Tk]
        result = StepResult(
            step=len(self._steps),
            token=chosen,
            prob=float(probs[chosen]),
            logits=kept,
            attention=attention,
            done=False,
        )
        self._steps.append(result)
        self._records.append(recs)
        result.done = self.done
        return result

    def run(self) -> list[int]:
        """Step until EOS or ``max_len``; returns all tokens produced."""
        while not self.done:
            self.step()
        return self.tokens

    def back(self, position: int) -> None:
        """Return to ``position`` steps taken (0 = nothing decoded); the encoder is not rerun."""
        if not 0 <= position <= len(self._steps):
            raise InputError(f"position must be in 0..{len(self._steps)}, got {position}")
        del self._steps[position:]
        del self._records[position:]
        self._cache.truncate(self._prompt + position)

    def reset(self) -> None:
        """Back to the start, keeping the encoder output and cross-attention keys/values."""
        self.back(0)

    def sync(self, tokens: Sequence[int]) -> None:
        """Hold exactly ``tokens`` (BOS excluded): keep the common prefix, redo the rest.

        Steps already taken that agree with ``tokens`` are kept (their cache too); the first
        disagreement and everything after it is rewound and ``tokens`` are forced from there.
        """
        tokens = [operator.index(t) for t in tokens]
        have = self.tokens
        n = 0
        while n < min(len(have), len(tokens)) and have[n] == tokens[n]:
            n += 1
        if n < len(have):
            self.back(n)
        for t in tokens[n:]:
            self.step(token=t)

    def trace(self, upto: int | None = None) -> Trace:
        """Full attention matrices of the first ``upto`` steps (default: all), batch 1."""
        upto = len(self._records) if upto is None else upto
        if not 0 <= upto <= len(self._records):
            raise InputError(f"upto must be in 0..{len(self._records)}, got {upto}")
        return assemble_trace(self.encoder_trace, self._records[:upto])

    def rows(
        self, start: int = 0, stop: int | None = None, window: bool = False
    ) -> dict[tuple[str, int], list[tuple[Tensor, Tensor]]]:
        """The recorded query rows of steps ``start..stop-1`` as each step kept them.

        Unlike :meth:`trace`, nothing is assembled or padded: a caller that needs only the
        newest rows (the app sends a Step's rows to the page) reads them here.

        Returns:
            ``(kind, layer) -> [(weights [H, Tk], mask [Tk]), ...]``, one pair per step, for
            ``"decoder_self"`` (Tk = step + 1: the keys that row had) and ``"cross"``
            (Tk = Ts); mask bool, True = blocked, as recorded. Views of the kept tensors, on
            the model's device. With ``window``, each mask is uint8 instead: 1 = blocked,
            2 = blocked by a local layer's sliding window (where the stepper captured
            ``"window"``).
        """
        n = len(self._records)
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise InputError(f"rows need 0 <= start <= stop <= {n}, got start={start}, stop={stop}")
        out: dict[tuple[str, int], list[tuple[Tensor, Tensor]]] = {}
        for recs in self._records[start:stop]:
            for key, r in recs.items():
                tk = r.weights.shape[-1]
                m = r.mask.expand(1, 1, 1, tk)[0, 0, 0]  # [Tk]
                if window:  # the window's cells are blocked too: 1 + 1
                    m = m.to(torch.uint8)
                    if r.window is not None:
                        m = m + r.window.expand(1, 1, 1, tk)[0, 0, 0].to(torch.uint8)
                out.setdefault(key, []).append((r.weights[0, :, 0], m))  # [H, Tk], [Tk]
        return out
