"""How a checkpoint decodes, as one frozen value: what ``generate()``'s ``GenerationConfig``
is to transformers.

Every decode of a checkpoint asks its :class:`Decoding` how many tokens to produce: the
stepper, ``predict``, beam search, the app's Run and Step, the CLI and the bench. So the app's
Run, the stepper and ``predict`` stop at the same token by construction, not by copies of one
rule kept in step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import ModelConfig
from .greedy import LogitRules, default_max_len

#: transformers' default number of new tokens for a decoder-only model (``max_length`` 20,
#: counted on top of the prompt when a folder names no limit).
DEFAULT_NEW_TOKENS = 20


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

    def limit(self, cfg: ModelConfig, prompt_len: int, asked: int | None = None) -> int:
        """Most tokens to produce after an input of ``prompt_len`` ids (tokens or frames):
        ``asked`` when given, else this checkpoint's own limit, always within the positions
        the model has. ``asked`` below 1 raises :class:`~attnviz.core.errors.InputError`."""
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
