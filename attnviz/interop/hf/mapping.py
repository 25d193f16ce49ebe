"""Each family's name mapping, declared once and read both ways.

A family's table is a list of rules, each one our parameter name beside the family's tensor
name; where the way from one to the other is not a pure rename (GPT-2's ``Conv1D`` matrices
are transposed, separate q/k/v linears are joined into our ``in_proj``, a key projection
without a bias gets zeros, a bias is reshaped) the rule carries both directions side by side.
:func:`to_ours` reads a folder through the table (import), :func:`to_theirs` writes our state
dict through the same table (``export-hf``). The token tables and the output matrix, tied or
not, are the pair :func:`~attnviz.interop.hf.common.embeddings` / :func:`token_tables`, named
by each :class:`~attnviz.interop.hf.registry.Family`'s ``embed_keys`` and ``lm_keys``.

Rule names are relative: a layer's rules are written once and placed under each layer's
prefixes with :func:`layers`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError, count, shorten
from .common import TOKEN_TABLES, Source


def param(base: str, part: str) -> str:
    """Our name of a linear's ``part`` (weight / bias): ``in_proj_weight`` for the joined
    q/k/v projection (``nn.MultiheadAttention``'s names), ``<base>.<part>`` otherwise."""
    return f"{base}_{part}" if base.endswith("in_proj") else f"{base}.{part}"


@dataclass(frozen=True)
class Rule:
    """One entry of a family's table: ``ours`` and ``theirs`` are names (or prefixes)."""

    ours: str
    theirs: str

    def under(self, ours: str, theirs: str) -> Rule:
        """This rule with ``ours`` / ``theirs`` put in front of its names."""
        return dataclasses.replace(self, ours=ours + self.ours, theirs=theirs + self.theirs)

    def take(self, src: Source) -> dict[str, Tensor]:  # pragma: no cover - abstract
        """Import: the folder's tensors -> ours (names checked, shapes where they join)."""
        raise NotImplementedError

    def give(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:  # pragma: no cover
        """Export: our tensors -> the family's names."""
        raise NotImplementedError


@dataclass(frozen=True)
class One(Rule):
    """One tensor under two names; ``load`` / ``save``: the change each way (e.g. a reshape
    of BART's ``final_logits_bias`` ``[1, V]`` to our ``[V]`` and back), None = as is."""

    load: Callable[[Tensor], Tensor] | None = None
    save: Callable[[Tensor], Tensor] | None = None

    def take(self, src: Source) -> dict[str, Tensor]:
        t = src.take(self.theirs)
        return {self.ours: self.load(t) if self.load else t}

    def give(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        t = ours[self.ours]
        return {self.theirs: self.save(t) if self.save else t}


@dataclass(frozen=True)
class Linear(Rule):
    """A linear (or norm, or convolution): ``.weight`` and, where the file has one, ``.bias``.
    ``conv1d``: GPT-2's ``Conv1D`` keeps the weight as ``[in, out]``; ours is ``[out, in]``,
    so it is transposed both ways."""

    conv1d: bool = False

    def take(self, src: Source) -> dict[str, Tensor]:
        weight = src.take(f"{self.theirs}.weight")
        out = {param(self.ours, "weight"): weight.T.contiguous() if self.conv1d else weight}
        if src.has(f"{self.theirs}.bias"):
            out[param(self.ours, "bias")] = src.take(f"{self.theirs}.bias")
        return out

    def give(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        weight = ours[param(self.ours, "weight")]
        out = {f"{self.theirs}.weight": weight.T if self.conv1d else weight}
        if param(self.ours, "bias") in ours:
            out[f"{self.theirs}.bias"] = ours[param(self.ours, "bias")]
        return out


@dataclass(frozen=True)
class Attention(Rule):
    """Separate q/k/v/out linears (``names`` under ``theirs``) <-> our joined ``in_proj``
    (``[(H + 2 * Hkv) * Dh, D]``, q then k then v) and ``out_proj``. On import the three
    must agree in shape (one line naming them where not); ``zero_key``: the key projection
    has no bias (Whisper): zeros stand in on import and are left out on export."""

    names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "out_proj")
    zero_key: bool = False

    def take(self, src: Source) -> dict[str, Tensor]:
        q, k, v, o = (f"{self.theirs}{n}" for n in self.names)
        out = {
            f"{self.ours}in_proj_weight": stacked(src, (q, k, v), "weight", 2),
            f"{self.ours}out_proj.weight": src.take(f"{o}.weight"),
        }
        if src.has(f"{q}.bias"):
            out[f"{self.ours}in_proj_bias"] = stacked(src, (q, k, v), "bias", 1, self.zero_key)
        if src.has(f"{o}.bias"):  # Qwen2 has Q/K/V biases and none on the output
            out[f"{self.ours}out_proj.bias"] = src.take(f"{o}.bias")
        return out

    def give(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        q, k, v, o = (f"{self.theirs}{n}" for n in self.names)
        weight = ours[f"{self.ours}in_proj_weight"]  # [(H + 2 * Hkv) * Dh, D]
        out = dict(zip((f"{q}.weight", f"{k}.weight", f"{v}.weight"),
                       split_qkv(weight, ours[f"{self.ours}out_proj.weight"]), strict=True))  # fmt: skip
        out[f"{o}.weight"] = ours[f"{self.ours}out_proj.weight"]
        bias = ours.get(f"{self.ours}in_proj_bias")
        if bias is not None:
            parts = split_qkv(bias, ours[f"{self.ours}out_proj.weight"])
            out |= dict(zip((f"{q}.bias", f"{k}.bias", f"{v}.bias"), parts, strict=True))
            if self.zero_key and not parts[1].any():
                del out[f"{k}.bias"]
        if f"{self.ours}out_proj.bias" in ours:
            out[f"{o}.bias"] = ours[f"{self.ours}out_proj.bias"]
        return out


@dataclass(frozen=True)
class Dropped(Rule):
    """A tensor some folders keep that is not a weight (a causal-mask buffer, position ids,
    a second copy of a bias): taken where present on import, never written."""

    def take(self, src: Source) -> dict[str, Tensor]:
        if src.has(self.theirs):
            src.take(self.theirs)
        return {}

    def give(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        return {}


@dataclass(frozen=True)
class Computed(Rule):
    """A table the model computes rather than stores (sinusoidal positions): skipped on
    import, written on export (``make()``) so that transformers does not initialise it."""

    make: Callable[[], Tensor | None] = lambda: None

    def take(self, src: Source) -> dict[str, Tensor]:
        if src.has(self.theirs):
            src.take(self.theirs)
        return {}

    def give(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        table = self.make()
        return {} if table is None else {self.theirs: table}


#: a family's table: ``(our config, the folder's tensor names, or None on export) -> rules``
Table = Callable[[ModelConfig, set[str] | None], list[Rule]]


def layers(rules: Iterable[Rule], n: int, ours: str, theirs: str) -> list[Rule]:
    """``rules`` of one layer placed under layer ``i``'s prefixes (``f"{ours}{i}."``,
    ``f"{theirs}{i}."``) for ``i`` in ``range(n)``."""
    rules = tuple(rules)
    return [r.under(f"{ours}{i}.", f"{theirs}{i}.") for i in range(n) for r in rules]


def to_ours(rules: Iterable[Rule], src: Source) -> dict[str, Tensor]:
    """Import: every rule's tensors from ``src`` -> our state dict (leftovers stay in ``src``)."""
    out: dict[str, Tensor] = {}
    for rule in rules:
        out |= rule.take(src)
    return out


def to_theirs(rules: Iterable[Rule], ours: dict[str, Tensor]) -> dict[str, Tensor]:
    """Export: our state dict -> the family's tensors, through the same rules."""
    out: dict[str, Tensor] = {}
    for rule in rules:
        out |= rule.give(ours)
    return out


def split_qkv(joined: Tensor, out_weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Our ``in_proj`` weight ``[(H + 2 * Hkv) * Dh, D]`` (or bias) -> q, k, v. The query has
    as many rows as the output projection has columns (``H * Dh``); keys and values split the
    rest evenly (fewer with grouped-query attention)."""
    rows_q = out_weight.shape[1]
    rows_kv = (joined.shape[0] - rows_q) // 2
    q, k, v = joined.split((rows_q, rows_kv, rows_kv))
    return q, k, v


def stacked(
    src: Source, linears: tuple[str, ...], part: str, dims: int, zero_key: bool = False
) -> Tensor:
    """The ``part`` (weight or bias) of the q/k/v linears, one after another; their shapes
    must agree before they are joined: one input width, keys and values of one shape, and as
    many query rows or a multiple of them (grouped-query attention). ``zero_key``: a key
    projection without this part (Whisper's key has no bias) gets zeros shaped as the value's."""
    keys = [f"{name}.{part}" for name in linears]
    if zero_key and not src.has(keys[1]):
        value = src.take(keys[2])
        tensors = [src.take(keys[0]), torch.zeros_like(value), value]
    else:
        tensors = [src.take(key) for key in keys]
    shapes = [list(t.shape) for t in tensors]
    q, k, v = shapes
    agree = all(t.dim() == dims for t in tensors) and k == v and q[1:] == k[1:]
    agree = agree and k[0] > 0 and q[0] % k[0] == 0
    if not agree:
        listed = ", ".join(f"{shorten(key)} {s}" for key, s in zip(keys, shapes, strict=True))
        raise InteropError(
            f"{src.where}: the query/key/value {'weights' if dims == 2 else 'biases'} must "
            f"share one shape of {count(dims, 'dimension')}; the file has {listed}"
        )
    return torch.cat(tensors)


def token_tables(
    ours: dict[str, Tensor],
    cfg: ModelConfig,
    prefix: str,
    embed_keys: tuple[str, ...],
    lm_key: str,
    write_lm: bool = False,
) -> dict[str, Tensor]:
    """The reverse of :func:`~attnviz.interop.hf.common.embeddings` and
    :func:`~attnviz.interop.hf.common.one_table`: an encoder-decoder's one ``shared`` table
    where both sides share it (as ``save_pretrained`` writes it), else one per side; a
    one-stack model's table under ``embed_keys[0]``; the output matrix (``[V, D]``) under
    ``lm_key`` where it is its own, or where ``write_lm`` asks for it even when tied (a
    config.json with ``tie_word_embeddings: false`` would otherwise get a random one)."""
    if not cfg.has_cross:
        table = ours["tgt_embed.weight" if cfg.has_decoder else "src_embed.weight"]
        out = {embed_keys[0]: table}
    elif cfg.share_embeddings:
        out = {prefix + TOKEN_TABLES["shared"]: ours["src_embed.weight"]}
    else:
        out = {prefix + TOKEN_TABLES[side]: ours[f"{side}_embed.weight"] for side in ("src", "tgt")}
    if not cfg.tie_output or write_lm:
        out[lm_key] = ours["generator.weight"]
    return out
