"""Which ids are not text: the one answer to "which special ids do I skip?".

A model's config and a tokenizer both carry ``pad_id``, ``bos_id`` and ``eos_id`` (and a
config its further ``end_ids``); every place that leaves the special ids out of words,
alignments, random sequences or masked-LM targets asks :func:`not_text_ids`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def not_text_ids(owner: Any, unk: bool = False, more: Iterable[int | None] = ()) -> frozenset[int]:
    """The ids of ``owner`` that are not text: pad, start and end ids (with a config's further
    end ids).

    Args:
        owner: a :class:`~attnviz.core.config.ModelConfig` or a tokenizer (anything with
            ``pad_id``, ``bos_id``, ``eos_id``; ``unk_id`` and ``end_ids`` where it has them).
        unk: the unknown id too (unknown words are still words where words are counted).
        more: further ids to skip (a prompt layout's separator or mask id); None is ignored.
    Returns:
        a frozenset of ids.
    """
    ids = {owner.pad_id, owner.bos_id, owner.eos_id, *getattr(owner, "end_ids", ()), *more}
    if unk:
        ids.add(owner.unk_id)
    ids.discard(None)
    return frozenset(ids)
