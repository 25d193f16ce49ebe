"""A tiny model trained a few hundred steps overfits reversal (pre- and post-norm)."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.data import tensorize
from attnviz.data.tasks import get_task
from attnviz.train.evaluate import loss_and_hits


@pytest.mark.parametrize("norm_first", [False, True])
def test_tiny_model_overfits_reversal(norm_first):
    """Gradients flow through every part: a fixed batch of reversed strings is learned."""
    torch.manual_seed(0)
    cfg = attnviz.ModelConfig(
        30, 30, d_model=32, n_heads=4, d_ff=64, dropout=0.0, norm_first=norm_first
    )
    model = attnviz.Transformer(cfg)
    task = get_task("reverse")
    examples = [e for n in range(3, 9) for e in task.examples("train", 3, length=n)][:16]
    batch = tensorize(examples, *task.tokenizers(), cfg)
    src, tgt_out = batch.src, batch.tgt_out
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(250):
        loss, _, _ = loss_and_hits(model, batch)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.0
    assert loss.item() < 0.05, f"loss {loss.item():.3f} after 250 steps"
    model.eval()
    out = attnviz.greedy_decode(model, src, cfg.bos_id, cfg.eos_id, max_len=9)
    for row in range(16):
        n = int(batch.real[row].sum())
        assert out[row, :n].tolist() == tgt_out[row, :n].tolist()
