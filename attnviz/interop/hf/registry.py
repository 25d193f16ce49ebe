"""The Hugging Face families attnviz opens: one :class:`Family` per ``model_type``.

Adding a family is one file that builds a :class:`Family` and calls :func:`register`, and
one import line in ``attnviz/interop/hf/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from ...core.model_kind import ModelKind
from .mapping import Table


@dataclass(frozen=True)
class Family(ModelKind):
    """How one ``model_type`` maps onto attnviz's Transformer (its kind's questions,
    ``has_encoder`` / ``decoder_only`` / ..., asked as of a :class:`~attnviz.ModelConfig`).

    Attributes:
        model_type: config.json's ``model_type``.
        pad_id, eos_id, unk_id: transformers' defaults where config.json names none (a
            tokenizer in the folder overrides the unknown id).
        start_is_pad: the decoder starts from the pad id (Marian, Pegasus, T5) when the
            folder names no ``decoder_start_token_id``; otherwise from the end id.
        config: ``(config.json, folder, tensors, special ids) -> ModelConfig fields``: sizes,
            norms (pre/post, final, embedding, RMS), positions, scales, biases.
        table: the family's name mapping, read both ways (:mod:`.mapping`):
            ``(ModelConfig, the folder's tensor names or None on export) -> rules`` for
            layers, norms, positions, head (token tables and the output matrix are common to
            all families, named by ``embed_prefix`` / ``embed_keys`` and ``lm_keys``).
        embed_prefix: where the shared / per-side token embeddings live (``"model."``).
        lm_keys: names the output matrix may have (the first is the one export writes).
        audio: the encoder reads audio features: no source token table.
        generation: ``(generation config, ModelConfig, config.json, folder) -> (rules, most
            new tokens, settings not followed)`` where the family's rules are its own
            (Whisper); None = :func:`~attnviz.interop.hf.generation.generation_rules`.
        exported: ``export-hf`` writes this family (Whisper's is not written yet).
        arch: the kind of model (``ModelConfig.arch``); a decoder-only or encoder-only family
            has one token table, found under one of ``embed_keys``; its ``pad_id`` None
            means "pad with the end id", as ``generate()`` does where a folder names none.
        embed_keys: names a one-stack family's token table may have.
    """

    model_type: str
    pad_id: int | None
    eos_id: int
    unk_id: int
    start_is_pad: bool
    config: Callable[[dict, Path, dict[str, Tensor], dict[str, int]], dict[str, Any]]
    table: Table
    embed_prefix: str = "model."
    lm_keys: tuple[str, ...] = ("lm_head.weight",)
    exported: bool = True
    audio: bool = False
    generation: Callable[..., tuple[Any, int, list[str]]] | None = None
    arch: str = "encoder-decoder"
    embed_keys: tuple[str, ...] = ()


#: model_type -> Family, in the order families were registered.
REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` to :data:`REGISTRY` (one entry per ``model_type``)."""
    if family.model_type in REGISTRY:
        raise ValueError(f"model_type {family.model_type!r} is registered twice")
    REGISTRY[family.model_type] = family
    return family
