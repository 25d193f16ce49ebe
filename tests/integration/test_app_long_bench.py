"""The long-input bench row measures a fresh server process."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnviz.bench.app import long_memory, opus_shaped_checkpoint


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """A small random model whose positions hold 1,100 tokens (character tokenizer)."""
    folder = tmp_path_factory.mktemp("long")
    shape = dict(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64)
    return str(opus_shaped_checkpoint(folder / "m", max_len=1100, **shape))


def test_the_bench_measures_a_fresh_server_process(long_model):
    base, now, peak = long_memory(Path(long_model), 300, 5)
    assert 0 < base <= peak and 0 < now <= peak
