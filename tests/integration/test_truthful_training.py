"""The truthfulness check fails a model trained too little."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.analysis import health
from attnviz.cli import main


# -- the health check fails a model that cannot do its task -------------------------------------
@pytest.mark.slow
def test_check_fails_an_undertrained_reverse_model(tmp_path):
    from attnviz.train.loop import TrainOptions, train

    out = tmp_path / "reverse150"
    opts = TrainOptions(task="reverse", out=str(out), steps=150, d_model=32, n_heads=2, d_ff=64,
                        batch_size=32, eval_size=50, eval_every=150, snapshot_every=150)  # fmt: skip
    train(opts, progress=False)
    ckpt = attnviz.load_checkpoint(out)
    rep = health.check(ckpt, n=60, ablation_sample=8)
    found = {f.check: f for f in rep.findings}
    assert not rep.passed and "verdict: FAIL" in rep.text()
    acc = found["accuracy"]
    assert acc.level == "error" and acc.details["exact_match"] < 0.5, rep.text()
    by_length = acc.details["by_length"]
    assert "by source length" in acc.message and len(by_length) >= 10
    assert sum(v["n"] for v in by_length.values()) == acc.details["n"] == 50  # as recorded
    assert set(by_length) <= {str(n) for n in range(1, 21)}
    # the masks hold: the failure is the task, not a leak
    assert found["padding"].level == found["causal"].level == "ok"
    assert (
        found["task pattern"].level == "warning" and "none has it" in found["task pattern"].message
    )
    assert main(["check", str(out), "--n", "20", "--ablation-sample", "0"]) == 1
