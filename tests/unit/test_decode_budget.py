"""A decode's size is known before it starts: the recorded rows (which grow as T²), the cache
and each step's [V] scores are estimated from the config and the length limit is cut to what
the memory budget holds, with one line saying so."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model

import attnviz
from attnviz.decode import decoding
from attnviz.decode.decoding import Decoding, decode_memory, steps_that_fit


def _held(stepper) -> int:
    """Bytes of tensors a stepper keeps: its steps' scores and recorded rows."""
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()

    for s in stepper.steps:
        add(s.logits)  # probs are worked out from them when asked
        for t in s.attention.values():
            add(t)
    for rec in stepper._records:  # the rows the trace is assembled from
        for r in rec.values():
            for f in ("scores", "mask", "weights"):
                add(getattr(r, f, None))
    return total


@pytest.mark.parametrize("arch", ["encoder-decoder", "decoder-only"])
def test_the_estimate_covers_what_a_stepper_holds(arch):
    extra = (
        dict(arch="decoder-only", n_encoder_layers=0, src_vocab_size=19)
        if arch != "encoder-decoder"
        else {}
    )
    model = make_model(**extra)
    src = torch.randint(4, 19, (9,))
    stepper = attnviz.GreedyStepper(model, src, 1, None, max_len=30)
    stepper.run()
    assert stepper.position == 30
    held = _held(stepper)
    estimate = decode_memory(model.config, 9, 30)
    assert held <= estimate <= 4 * held, (held, estimate)


def test_the_limit_is_cut_to_what_the_budget_holds():
    cfg = attnviz.ModelConfig(src_vocab_size=100, tgt_vocab_size=100, arch="decoder-only",
                              n_encoder_layers=0, n_decoder_layers=16, n_heads=32, d_model=64,
                              max_len=4096)  # fmt: skip
    budget = 1 << 30
    fit = steps_that_fit(cfg, 10, 4086, budget)
    assert decode_memory(cfg, 10, fit) <= budget < decode_memory(cfg, 10, fit + 1)
    assert 1 <= fit < 4086
    assert steps_that_fit(cfg, 10, 5, budget) == 5  # a short decode is never cut


def test_a_folder_asking_for_a_trillion_tokens_gets_what_fits_and_is_told(monkeypatch):
    monkeypatch.setattr(decoding, "available_memory", lambda: 4 << 30)
    cfg = attnviz.ModelConfig(src_vocab_size=100, tgt_vocab_size=100, arch="decoder-only",
                              n_encoder_layers=0, n_decoder_layers=16, n_heads=32, d_model=64,
                              max_len=4096)  # fmt: skip
    dec = Decoding(bos_id=1, eos_id=2, max_new=10**12)
    n = dec.limit(cfg, 6)
    assert n < 4090
    assert decode_memory(cfg, 6, n) <= (4 << 30) * decoding.DECODE_FRACTION
    note = dec.note(cfg, 6)
    assert note and f"{n:,} tokens" in note and "GB" in note
    assert Decoding(bos_id=1, eos_id=2, max_new=20).note(cfg, 6) is None
