"""Crash safety: a process killed while it writes checkpoints never leaves one that loads wrong."""

from __future__ import annotations

import pytest

import attnviz

_WRITER = """
import sys, torch, attnviz
from attnviz.data.tokenizer import Tokenizer
config = attnviz.ModelConfig(
    src_vocab_size=23, tgt_vocab_size=19, d_model=64, n_heads=4, n_encoder_layers=2,
    n_decoder_layers=2, d_ff=256, dropout=0.0, max_len=200,
)
torch.manual_seed(0)
model = attnviz.Transformer(config).eval()
cfg = model.config
src = Tokenizer("word", [f"s{i}" for i in range(cfg.src_vocab_size - 4)])
tgt = Tokenizer("word", [f"t{i}" for i in range(cfg.tgt_vocab_size - 4)])
step = 0
while True:
    step += 1
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(step)
    attnviz.save_checkpoint(sys.argv[1], model, src, tgt, {"step": step, "pad": "x" * step})
    print(step, flush=True)
"""


@pytest.mark.slow
def test_sigkill_during_writes_never_leaves_a_checkpoint_that_loads_wrong(tmp_path):
    """Kill a process that rewrites a checkpoint in a loop at random moments: what is on
    disk always loads, and its weights are those of the step its metadata names."""
    import random
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    folder = tmp_path / "ck"
    rng = random.Random(0)
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(folder)], cwd=root,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        proc.stdout.readline()  # at least one checkpoint written
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        ckpt = attnviz.load_checkpoint(folder)
        step = ckpt.meta["step"]
        assert all(bool((p == step).all()) for p in ckpt.model.parameters()), step
        assert ckpt.meta["pad"] == "x" * step
