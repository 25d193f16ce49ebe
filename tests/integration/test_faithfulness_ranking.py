"""Faithfulness on the shipped models: a random ranking is the least comprehensive."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.analysis.faithful import METHODS, faithfulness
from attnviz.data.tasks import get_task


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reverse", "copy", "sort", "translate"])
def test_random_ranking_is_the_least_comprehensive(models_dir, name):
    """100 test inputs per shipped model: every real method beats a random order."""
    ckpt = attnviz.load_checkpoint(models_dir / name)
    texts = [e.src for e in get_task(name).examples("test", 100, seed=11)]
    aopc = faithfulness(ckpt, texts, ig_steps=4).aopc()
    for m in METHODS[:-1]:
        assert aopc[m] > aopc["random"] + 0.1, aopc
