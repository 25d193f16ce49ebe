"""A folder's generation settings as transformers' ``generate()`` reads them: the length
limit (with transformers' defaults for what a folder leaves out) and the logit rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.config import ModelConfig
from ...core.errors import InteropError
from ...decode.greedy import LogitRules

#: transformers' ``GenerationConfig`` default ``max_length`` (it counts the decoder start).
DEFAULT_MAX_LENGTH = 20


def gen_int(gen: dict, key: str, where: Path | None = None) -> int | None:
    """An integer generation setting, None when unset; anything else is refused in one line."""
    value = gen.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        place = f"{where}: " if where is not None else ""
        raise InteropError(
            f"{place}generation setting {key} must be a whole number >= 0, got {value!r}"
        )
    return value


def max_new_tokens(gen: dict, hf: dict | None = None, where: Path | None = None) -> int:
    """The most tokens ``generate()`` produces after the decoder start under ``gen``.

    ``max_new_tokens`` wins; else ``max_length``, which counts the start token. A folder that
    names neither gets transformers' default: ``max_length=20`` counted on top of the start
    token (20 new tokens), cut at ``max_position_embeddings`` where config.json has one.
    """
    new = gen_int(gen, "max_new_tokens", where)
    if new is not None:
        return max(1, new)
    length = gen_int(gen, "max_length", where)
    if length is not None:
        return max(1, length - 1)
    total = DEFAULT_MAX_LENGTH + 1  # the start token plus 20 new ones
    positions = (hf or {}).get("max_position_embeddings")
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0:
        total = min(total, positions)
    return max(1, total - 1)


def token_ids(value: Any, key: str, vocab: int, where: Path | None) -> tuple[int, ...]:
    """A list of token ids (or one id) of the generation config, each inside the vocabulary."""
    items = value if isinstance(value, list) else [value]
    for i in items:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < vocab:
            place = f"{where}: " if where is not None else ""
            raise InteropError(
                f"{place}generation setting {key} must hold token ids in 0..{vocab - 1}, "
                f"got {str(value)[:80]}"
            )
    return tuple(items)


def check_generation(gen: dict, vocab: int, where: Path | None = None) -> None:
    """Every setting the rules read has the type transformers gives it; one line if not."""
    for key in ("max_length", "max_new_tokens", "min_length", "min_new_tokens"):
        gen_int(gen, key, where)
    for key in ("suppress_tokens", "begin_suppress_tokens", "forced_bos_token_id",
                "forced_eos_token_id"):  # fmt: skip
        if gen.get(key) is not None:
            token_ids(gen[key], key, vocab, where)
    bad = gen.get("bad_words_ids")
    if bad is not None:
        if not isinstance(bad, list) or not all(isinstance(w, list) and w for w in bad):
            raise InteropError(
                f"{where}: generation setting bad_words_ids must be a list of id lists, "
                f"got {str(bad)[:80]}"
            )
        for w in bad:
            token_ids(w, "bad_words_ids", vocab, where)


def generation_rules(
    gen: dict, cfg: ModelConfig, hf: dict | None = None, where: Path | None = None
) -> tuple[LogitRules, int, list[str]]:
    """:class:`LogitRules`, the most new tokens (:func:`max_new_tokens`), and the settings
    greedy decoding ignores.

    Raises:
        InteropError: a setting of the wrong type, or a token id outside the vocabulary.
    """
    check_generation(gen, cfg.tgt_vocab_size, where)
    bad = gen.get("bad_words_ids") or []
    single = tuple(w[0] for w in bad if isinstance(w, list) and len(w) == 1)
    ignored = [f"bad_words_ids {w}" for w in bad if not (isinstance(w, list) and len(w) == 1)]
    for key in ("no_repeat_ngram_size", "repetition_penalty"):
        if gen.get(key) not in (None, 0, 1, 1.0):
            ignored.append(f"{key}={gen[key]}")
    forced_eos = gen.get("forced_eos_token_id")
    if isinstance(forced_eos, list):  # several: the argmax of equal scores is the lowest id
        forced_eos = min(forced_eos) if forced_eos else None
    # min_new_tokens takes precedence; min_length counts the start token
    min_new = gen_int(gen, "min_new_tokens", where)
    min_length = gen_int(gen, "min_length", where) or 0
    if min_new is None and cfg.decoder_only:  # min_length counts each prompt
        if min_length:
            ignored.append(f"min_length={min_length} (it counts the prompt)")
        min_new = 0
    elif min_new is None:
        min_new = max(min_length - 1, 0)
    banned = single + tuple(gen.get("suppress_tokens") or ())
    if len(set(banned)) >= cfg.tgt_vocab_size:  # decoding would produce a banned id 0
        place = f"{where}: " if where is not None else ""
        raise InteropError(
            f"{place}generation settings suppress_tokens and bad_words_ids ban every one of the "
            f"{cfg.tgt_vocab_size:,} tokens: nothing could be decoded"
        )
    rules = LogitRules(
        forced_bos_id=gen.get("forced_bos_token_id"),
        forced_eos_id=forced_eos,
        banned=banned,
        begin_banned=tuple(gen.get("begin_suppress_tokens") or ()),
        min_new_tokens=min_new,
        eos_id=cfg.eos_id,
        end_ids=cfg.end_ids,
    )
    return rules, max_new_tokens(gen, hf, where), ignored
