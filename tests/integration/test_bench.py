"""`attnviz bench --quick`: every row present and finite (no timing assertions)."""

from __future__ import annotations

import json
import math
import tempfile

import pytest
import torch

from attnviz.bench.app import GPT2_CASE
from attnviz.bench.kinds import GPT2_ATTN_ROW, GPT2_PLAIN_ROW, GPT2_ROW
from attnviz.bench.suite import HF_ROW, TRAIN_ROW, bench_training
from attnviz.cli.commands import build_parser, main


@pytest.mark.slow
def test_quick_bench_writes_every_row(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--quiet", "--device", "cpu", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["quick"] is True and "threads" in result["machine"]
    names = [r["name"] for r in result["rows"]]
    for expected in ("train step vs nn.Transformer", "inference forward vs nn.Transformer",
                     "forward with recording / without", "app step", "page payload per step",
                     "beam search", "trace of 6+6 layers",
                     "peak RSS after 10 app sessions", HF_ROW, GPT2_ROW, GPT2_ATTN_ROW, GPT2_PLAIN_ROW,
                     "greedy 64 tokens: naive loop / cached, module by module (before)",
                     "greedy 64 tokens: naive loop / cached, fused step (after)"):  # fmt: skip
        assert any(n.startswith(expected) for n in names), (expected, names)
    assert TRAIN_ROW not in names  # measured only with --full (minutes), never read from disk
    hf = next(r for r in result["rows"] if r["name"] == HF_ROW)
    assert hf["unit"] == "ratio" and hf["target"] == "<= 1.2", hf
    browser = [r for r in result["rows"] if r["name"].startswith("browser")]
    assert browser, names  # measured, or one row saying why not
    for row in result["rows"]:
        assert set(row) == {"name", "value", "unit", "target", "met", "detail"}
        if row["detail"].startswith("skipped"):
            continue
        assert math.isfinite(row["value"]) and row["value"] > 0, row
    for action in ("step", "back", "scrub", "layer/head"):
        assert any(f"redrawn: {action}," in r["name"] for r in browser) or len(browser) == 1
    assert any(r["name"].startswith("browser force a token:") for r in browser) or len(browser) == 1
    gpt2 = [r for r in browser if r["name"].endswith(GPT2_CASE)]  # the decoder-only page
    assert any("redrawn: step" in r["name"] for r in gpt2) or len(browser) == 1
    for name in (GPT2_ROW, GPT2_ATTN_ROW, GPT2_PLAIN_ROW):
        gen = next(r for r in result["rows"] if r["name"] == name)
        target = "-" if name == GPT2_PLAIN_ROW else "<= 1.0"  # the library default: reported
        assert gen["unit"] == "ratio" and gen["target"] == target
        assert "tokens differ" not in gen["detail"]
    from attnviz.bench.gguf import ROWS as GEMMA_ROWS
    from attnviz.bench.gguf import STEP_ROW as GEMMA_STEP

    for name in GEMMA_ROWS:  # the real Gemma 3 270M GGUF: measured, or skipped saying why
        assert name in names, name
    gemma = next(r for r in result["rows"] if r["name"] == GEMMA_STEP)
    assert gemma["detail"].startswith("skipped") or "tokens differ" not in gemma["detail"]
    assert "| train step vs nn.Transformer |" in capsys.readouterr().out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="has a GPU")
def test_cuda_bench_without_a_gpu_is_skipped_with_a_message(capsys):
    assert main(["bench", "--quick", "--device", "cuda"]) == 0
    assert "GPU rows are skipped: this machine has no CUDA GPU" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_cuda_bench_rows(tmp_path):
    out = tmp_path / "gpu.json"
    assert main(["bench", "--quick", "--quiet", "--device", "cuda", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert "cuda" in result["machine"]
    rows = {r["name"]: r for r in result["rows"]}
    for name in ("train step vs nn.Transformer", "inference forward vs nn.Transformer",
                 "forward with recording / without",
                 "greedy 64 tokens: naive loop / cached, module by module (before)",
                 "greedy 64 tokens: naive loop / cached, fused step (after)"):  # fmt: skip
        row = rows[name]
        assert math.isfinite(row["value"]) and row["value"] > 0, row
        assert " ms" in row["detail"], row  # measured on the GPU, not skipped
    for row in result["rows"]:
        assert set(row) == {"name", "value", "unit", "target", "met", "detail"}
        assert row["detail"].startswith("skipped") or math.isfinite(row["value"]), row


def test_the_training_row_is_a_measurement_behind_full(tmp_path, monkeypatch):
    """Without --full no training row; with it, a run measured now (cut short here)."""
    assert bench_training(torch.device("cpu"), full=False) == []
    tiny = dict(steps=4, eval_every=2, d_model=32, n_heads=2, d_ff=64, batch_size=8, eval_size=8)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's folder
    (row,) = bench_training(torch.device("cpu"), full=True, **tiny)
    assert row.name == TRAIN_ROW and row.unit == "s" and row.value > 0 and row.met is False
    assert row.detail.startswith("did not reach 0.99 in 4 steps; measured: step 4")
    assert build_parser().parse_args(["bench", "--full"]).full
