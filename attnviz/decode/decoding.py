"""How a checkpoint decodes, as one frozen value: what ``generate()``'s ``GenerationConfig``
is to transformers.

Every decode of a checkpoint asks its :class:`Decoding` how many tokens to produce: the
stepper, ``predict``, beam search, the app's Run and Step, the CLI and the bench. So the app's
Run, the stepper and ``predict`` stop at the same token by construction, not by copies of one
rule kept in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.config import ModelConfig
from ..core.memory import available_memory
from .batched import until_eos
from .greedy import LogitRules, default_max_len

#: transformers' default number of new tokens for a decoder-only model (``max_length`` 20,
#: counted on top of the prompt when a folder names no limit).
DEFAULT_NEW_TOKENS = 20


#: Part of the memory this process may use that one decode may hold (the app runs several).
DECODE_FRACTION = 0.25
#: Decodes needing less than this are never checked against the machine.
_ALWAYS_FITS = 64 << 20
#: Numbers recorded per attention cell of a step (scores, mask and weights).
_FIELDS = 3


def decode_memory(cfg: ModelConfig, prompt_len: int, steps: int) -> int:
    """Peak bytes a recorded decode of ``steps`` tokens after ``prompt_len`` ids (or frames)
    may hold, from the config's arithmetic: every step's recorded attention rows (self-
    attention over the keys so far, cross-attention over the source; scores, mask and
    weights of every layer and head), the key/value cache and each step's ``[V]``
    probabilities and logits. Grows as ``steps²`` (the rows) plus ``steps`` (the rest)."""
    layers, heads = cfg.n_decoder_layers, cfg.n_heads
    one_stack = cfg.decoder_only
    first = prompt_len if one_stack else 1  # keys before the first produced token
    self_keys = steps * first + steps * (steps + 1) // 2
    cross_keys = 0 if one_stack else steps * prompt_len
    rows = _FIELDS * 4 * layers * heads * (self_keys + cross_keys)
    kv = (cfg.n_kv_heads or heads) * cfg.head_dim
    cache = layers * 2 * (first + steps) * kv * 4
    per_step = cfg.tgt_vocab_size * 4  # its logits (the probabilities are worked out from them)
    return rows + cache + steps * per_step


def steps_that_fit(cfg: ModelConfig, prompt_len: int, steps: int, budget: int | None = None) -> int:
    """The most of ``steps`` whose recorded decode fits the budget (default a
    :data:`DECODE_FRACTION` of the memory this process may use); at least 1."""
    if decode_memory(cfg, prompt_len, steps) <= _ALWAYS_FITS:
        return steps
    budget = int(available_memory() * DECODE_FRACTION) if budget is None else budget
    lo, hi = 1, steps  # decode_memory grows with steps: the last that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if decode_memory(cfg, prompt_len, mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Decoding:
    """A checkpoint's decoding settings: special ids, logit rules and its length rule.

    Attributes:
        bos_id: the decoder's first input (the start id).
        eos_id, end_ids: ids that end an output.
        pad_id: the padding id.
        rules: constraints on the next-token logits (a folder's generation config), or None.
        max_new: most tokens produced after the start id (None: the model's own default,
            ``2 * Ts + 16`` for a text source, the positions left for audio).
        max_total: a decoder-only folder's ``max_length``, which counts the prompt as
            transformers counts it: ``max_total - prompt_len`` new tokens (wins over
            ``max_new``).
    """

    bos_id: int
    eos_id: int
    end_ids: tuple[int, ...] = ()
    pad_id: int = 0
    rules: LogitRules | None = None
    max_new: int | None = None
    max_total: int | None = None

    def ends(self, token: int) -> bool:
        """``token`` ends an output: ``eos_id`` or one of ``end_ids`` (where a text ends)."""
        return token == self.eos_id or token in self.end_ids

    def until_end(self, row: Sequence[int]) -> list[int]:
        """A decoded row ``[T]`` up to and including its first end id, without the padding
        after it."""
        return until_eos(row, self.eos_id, self.pad_id, self.end_ids)

    def limit(self, cfg: ModelConfig, prompt_len: int, asked: int | None = None) -> int:
        """Most tokens to produce after an input of ``prompt_len`` ids (tokens or frames):
        ``asked`` when given, else this checkpoint's own limit, always within the positions
        the model has and the memory a recorded decode may hold (:func:`steps_that_fit`; a
        folder asking 10^12 new tokens gets what fits, and :meth:`note` says so). ``asked``
        below 1 raises :class:`~attnviz.core.errors.InputError`."""
        return steps_that_fit(cfg, prompt_len, self._positions(cfg, prompt_len, asked))

    def note(self, cfg: ModelConfig, prompt_len: int, asked: int | None = None) -> str | None:
        """One line when :meth:`limit` is below the positions left because of memory."""
        wanted = self._positions(cfg, prompt_len, asked)
        fit = steps_that_fit(cfg, prompt_len, wanted)
        if fit >= wanted:
            return None
        need = decode_memory(cfg, prompt_len, wanted) / 2**30
        return (
            f"decoding stops after {fit:,} tokens: {wanted:,} would need about {need:,.1f} GB "
            "of recorded attention and cache, more than this process may hold"
        )

    def _positions(self, cfg: ModelConfig, prompt_len: int, asked: int | None) -> int:
        if asked is None and self.max_total is not None:
            asked = max(1, self.max_total - prompt_len)
        return default_max_len(cfg, prompt_len, self.max_new if asked is None else asked)

    @classmethod
    def of(
        cls,
        cfg: ModelConfig,
        rules: LogitRules | None,
        max_new: int | None,
        generation_config: dict | None = None,
        counts_prompt: bool = False,
    ) -> Decoding:
        """The decoding of a model with config ``cfg``: its special ids, ``rules`` and
        ``max_new``; where ``counts_prompt`` (a Hugging Face decoder-only folder) and the
        generation config names ``max_length`` without ``max_new_tokens``, that length
        counts the prompt; with neither, 20 new tokens, as ``generate()`` has it."""
        gen = generation_config or {}
        total = None
        if counts_prompt and gen.get("max_new_tokens") is None:
            length = gen.get("max_length")
            if isinstance(length, int) and not isinstance(length, bool):
                total = length
            else:
                max_new = DEFAULT_NEW_TOKENS
        return cls(
            bos_id=cfg.bos_id,
            eos_id=cfg.eos_id,
            end_ids=tuple(cfg.end_ids),
            pad_id=cfg.pad_id,
            rules=rules,
            max_new=max_new,
            max_total=total,
        )
