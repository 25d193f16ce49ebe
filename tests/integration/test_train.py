"""Training: checkpoints, metrics, snapshots, resume after SIGKILL, 2-process DDP, options."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import attnviz
from attnviz.cli.commands import build_parser, main
from attnviz.core.errors import InputError
from attnviz.data.tasks import get_task
from attnviz.train.loop import (
    TRAIN_STATE,
    TrainOptions,
    batch_at,
    lr_at,
    train,
)
from attnviz.train.snapshots import SNAPSHOTS, Snapshots

TINY = [
    "--d-model", "32", "--heads", "2", "--d-ff", "64", "--encoder-layers", "2",
    "--decoder-layers", "2", "--batch-size", "16", "--eval-size", "20", "--snapshot-every", "5",
]  # fmt: skip


def _tiny(task="copy", **kw) -> TrainOptions:
    base = dict(task=task, d_model=32, n_heads=2, d_ff=64, batch_size=16, eval_size=20,
                snapshot_every=5, eval_every=10, steps=20)  # fmt: skip
    return TrainOptions(**{**base, **kw})


def test_a_short_run_saves_a_loadable_checkpoint_with_history_and_snapshots(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "reverse",
                "--out",
                str(out),
                "--steps",
                "20",
                "--eval-every",
                "10",
                "--quiet",
                *TINY,
            ]
        )
        == 0
    )
    assert "saved" in capsys.readouterr().out
    ckpt = attnviz.load_checkpoint(out)
    meta = ckpt.meta
    assert meta["task"] == "reverse" and meta["step"] == 20
    assert meta["command"].startswith("attnviz train --task reverse --out ")
    assert [h["step"] for h in meta["history"]] == [10, 20]
    for key in ("val_loss", "val_token_acc", "val_exact_match", "elapsed_s"):
        assert key in meta["metrics"]
    assert ckpt.config.d_model == 32 and ckpt.config.n_heads == 2
    assert ckpt.src_tokenizer == get_task("reverse").tokenizers()[0]
    assert isinstance(ckpt.predict("abc"), str)

    snaps = Snapshots.load(out)
    assert snaps.steps == [0, 5, 10, 15, 20]
    assert snaps.probe_src == list("helloworld") and snaps.probe_tgt == list("dlrowolleh")
    cross = torch.stack(snaps.weights["cross", 1])  # [S, H, Tt+1, Ts]
    assert cross.shape == (5, 2, 11, 10)
    torch.testing.assert_close(cross.sum(-1), torch.ones(5, 2, 11), atol=5e-3, rtol=0)
    dec = torch.stack(snaps.weights["decoder_self", 0])
    assert (dec.triu(1) == 0).all()  # no future attention in any snapshot
    assert len(snaps.outputs) == len(snaps.losses) == 5
    assert not list(out.glob(".*tmp*"))


def test_validation_loss_falls_during_training(tmp_path):
    out = tmp_path / "learn"
    train(_tiny("copy", out=str(out), steps=150, eval_every=50, lr=3e-3, warmup=20), progress=False)
    losses = [h["val_loss"] for h in attnviz.load_checkpoint(out).meta["history"]]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2]


def test_same_seed_same_weights_and_data_depends_only_on_step(tmp_path):
    a = train(_tiny(out=str(tmp_path / "a"), steps=6, eval_every=6), progress=False)
    b = train(_tiny(out=str(tmp_path / "b"), steps=6, eval_every=6), progress=False)
    assert a["val_loss"] == b["val_loss"]
    opts = _tiny().resolved(get_task("copy"))
    assert batch_at(get_task("copy"), 3, opts, 0) == batch_at(get_task("copy"), 3, opts, 0)
    assert batch_at(get_task("copy"), 3, opts, 0) != batch_at(get_task("copy"), 3, opts, 1)
    assert batch_at(get_task("copy"), 3, opts, 0) != batch_at(get_task("copy"), 4, opts, 0)


def test_resume_continues_from_the_saved_step(tmp_path):
    out = str(tmp_path / "run")
    train(_tiny(out=out, steps=20), progress=False)
    with pytest.raises(InputError, match="already holds a training run"):
        train(_tiny(out=out, steps=20), progress=False)
    with pytest.raises(InputError, match="differ from it: d_model"):
        train(_tiny(out=out, steps=30, d_model=48, resume=True), progress=False)
    with pytest.raises(InputError, match="'copy' run, not 'reverse'"):
        train(_tiny("reverse", out=out, steps=30, resume=True), progress=False)
    with pytest.raises(InputError, match="at step 20; ask for more --steps"):
        train(TrainOptions(task="copy", out=out, steps=20, resume=True), progress=False)
    metrics = train(TrainOptions(task="copy", out=out, steps=30, resume=True), progress=False)
    assert metrics["step"] == 30
    meta = attnviz.load_checkpoint(out).meta
    assert [h["step"] for h in meta["history"]] == [10, 20, 30]
    assert meta["options"]["d_model"] == 32  # the saved run's model, not the task default
    assert Snapshots.load(out).steps == [0, 5, 10, 15, 20, 25, 30]
    with pytest.raises(InputError, match="no train_state"):
        train(TrainOptions(task="copy", out=str(tmp_path / "none"), resume=True), progress=False)


@pytest.mark.slow
def test_sigkill_mid_run_leaves_a_loadable_checkpoint_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnviz.cli", "train", "--task", "copy", "--out", str(out),
           "--steps", "100000", "--eval-every", "3", "--quiet", *TINY]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            meta = out / "config.json"
            if meta.exists() and json.loads(meta.read_text() or "{}").get("step", 0) >= 9:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # mid-run: possibly mid-write
    finally:
        proc.kill()
        proc.wait()
    ckpt = attnviz.load_checkpoint(out)
    _, info = attnviz.checkpoint.read_tensors(out / TRAIN_STATE)
    saved = info["step"]
    assert saved >= 9 and saved % 3 == 0 and ckpt.meta["step"] in (saved, saved - 3)
    Snapshots.load(out)
    metrics = train(
        TrainOptions(task="copy", out=str(out), steps=saved + 3, resume=True), progress=False
    )
    assert metrics["step"] == saved + 3
    history = attnviz.load_checkpoint(out).meta["history"]
    assert [h["step"] for h in history] == list(range(3, saved + 4, 3))
    assert not list(out.glob(".*tmp*"))


@pytest.mark.slow
def test_two_process_gloo_ddp_run_saves_one_checkpoint(tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "attnviz.cli", "train", "--task", "copy", "--out", str(out), "--steps", "6",
           "--eval-every", "3", "--device", "cpu", "--quiet", *TINY]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = attnviz.load_checkpoint(out)
    assert ckpt.meta["world_size"] == 2 and ckpt.meta["kept"]["last_step"] == 6
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        SNAPSHOTS,
        TRAIN_STATE,
    ]
    assert done.stdout.count("saved ") == 1  # rank 0 alone reports and saves


def test_learning_rate_warms_up_then_decays_to_zero():
    opts = _tiny(lr=1e-3, warmup=10, steps=100).resolved(get_task("copy"))
    lrs = [lr_at(s, opts) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10], strict=False))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] < 1e-6


def test_task_defaults_fill_unset_options():
    opts = TrainOptions(task="translate").resolved(get_task("translate"))
    assert opts.d_model == 128 and opts.steps > 0 and opts.weight_decay == 0.01 and opts.seed == 0


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(steps=0), "--steps must be at least 1"),
        (dict(lr=-1.0), "--lr must be positive"),
        (dict(device="tpu"), "--device must be auto, cpu or cuda"),
    ],
)
def test_bad_options_are_refused(kw, match):
    with pytest.raises(InputError, match=match):
        train(_tiny(**kw), progress=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="has a GPU")
def test_cuda_without_a_gpu_is_a_clear_error(capsys):
    assert main(["train", "--task", "copy", "--device", "cuda", "--quiet"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_training_run(tmp_path):
    metrics = train(_tiny(out=str(tmp_path / "g"), steps=10, device="cuda"), progress=False)
    assert metrics["step"] == 10 and 0.0 <= metrics["val_exact_match"] <= 1.0
    ckpt = attnviz.load_checkpoint(tmp_path / "g")  # bf16 autocast, float32 weights saved
    for name, t in ckpt.model.state_dict().items():
        assert t.dtype == torch.float32 and bool(torch.isfinite(t).all()), name
    on_gpu = attnviz.load_checkpoint(tmp_path / "g", device="cuda")
    src = torch.tensor([ckpt.encode_source("abcabc").ids])
    cpu_logits = ckpt.model(src, torch.tensor([[1, 4, 5]]))
    gpu_logits = on_gpu.model(src.cuda(), torch.tensor([[1, 4, 5]]).cuda()).cpu()
    torch.testing.assert_close(gpu_logits, cpu_logits, atol=1e-3, rtol=1e-3)


def test_cli_unknown_task_is_an_argparse_error():
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error
        main(["train", "--task", "nope"])


def test_snapshot_file_is_not_a_checkpoint(tmp_path):
    out = tmp_path / "x"
    train(_tiny(out=str(out), steps=5, eval_every=5), progress=False)
    with pytest.raises(attnviz.CheckpointError, match="no model 'config'"):
        attnviz.load_checkpoint(out / SNAPSHOTS)
    assert Path(out / TRAIN_STATE).is_file()


def test_malformed_snapshot_files_are_refused(tmp_path):
    import torch as _torch

    from attnviz.checkpoint import write_tensors

    path = tmp_path / SNAPSHOTS
    for meta, tensors, match in (
        ({"steps": [0]}, {}, "needs probe_src"),
        ({"probe_src": [], "probe_tgt": [], "steps": [], "outputs": [], "losses": []}, {}, "line up"),
        ({"probe_src": ["a"], "probe_tgt": ["a"], "steps": [0], "outputs": ["a"], "losses": [1.0]},
         {"nodot": _torch.zeros(1, 1, 1, 1)}, "unexpected snapshot tensor"),
    ):  # fmt: skip
        write_tensors(path, tensors, meta)
        with pytest.raises(attnviz.CheckpointError, match=match):
            Snapshots.load(tmp_path)


def test_an_interrupted_and_resumed_run_equals_an_uninterrupted_one(tmp_path):
    """Model, AdamW moments, schedule, data and dropout noise all carry across a resume."""
    from attnviz.checkpoint import read_tensors

    kw = dict(steps=16, eval_every=8, dropout=0.1, batch_size=8)
    straight, parts = str(tmp_path / "straight"), str(tmp_path / "parts")
    a = train(_tiny(out=straight, **kw), progress=False)
    train(_tiny(out=parts, **kw), progress=False, stop_after=5)  # interrupted at step 5
    assert attnviz.load_checkpoint(parts).meta["step"] == 5
    b = train(TrainOptions(task="copy", out=parts, resume=True), progress=False)
    assert a["step"] == b["step"] == 16 and a["val_loss"] == b["val_loss"]
    wa, _ = read_tensors(Path(straight) / "model.safetensors")
    wb, _ = read_tensors(Path(parts) / "model.safetensors")
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


def test_training_state_round_trips_tied_weights(tmp_path):
    from attnviz.checkpoint import read_tensors
    from attnviz.train.runstate import load_train_state, save_train_state

    model = attnviz.Transformer(attnviz.ModelConfig(30, 30, d_model=32, n_heads=2, d_ff=64,
                                                    tie_output=True, share_embeddings=True))  # fmt: skip
    opt = torch.optim.AdamW(model.parameters())
    path = tmp_path / "state.safetensors"
    save_train_state(path, model, opt, {"step": 0})
    other = attnviz.Transformer(model.config)
    load_train_state(read_tensors(path)[0], path, other, torch.optim.AdamW(other.parameters()))
    assert other.generator.weight is other.tgt_embed.weight is other.src_embed.weight
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_the_checkpoint_keeps_the_best_validation_and_resume_goes_on_with_it(tmp_path, capsys):
    """A run that gets worse (resumed at a learning rate that wrecks it) keeps the best
    validation's weights; train_state stays the latest state; --patience stops it."""
    from attnviz.checkpoint import read_tensors

    out = tmp_path / "run"
    train(_tiny(out=str(out), steps=40, lr=3e-3, warmup=5), progress=False)
    before = read_tensors(out / "model.safetensors")[0]
    capsys.readouterr()
    metrics = train(TrainOptions(task="copy", out=str(out), steps=100, lr=5.0, warmup=1,
                                 patience=2, resume=True), progress=False)  # fmt: skip
    printed = capsys.readouterr().out
    meta = attnviz.load_checkpoint(out).meta
    assert metrics["step"] == 60 and metrics["kept_step"] == 40  # two worse, then stopped
    assert meta["step"] == 40 and meta["metrics"]["step"] == 40
    assert [h["step"] for h in meta["history"]] == [10, 20, 30, 40, 50, 60]
    kept = meta["kept"]
    assert kept["keep"] == "best" and kept["by"] == "exact match" and kept["last_step"] == 60
    assert kept["patience"] == 2 and kept["stopped"].startswith("no better exact match in 2")
    assert "kept the best validation, step 40" in printed and "no better exact match" in printed
    weights = read_tensors(out / "model.safetensors")[0]
    state, info = read_tensors(out / TRAIN_STATE)
    assert info["step"] == 60 and info["kept_step"] == 40
    for name, w in weights.items():
        assert torch.equal(w, before[name]) and torch.equal(w, state[f"best.{name}"]), name
    assert any(not torch.equal(state[f"model.{n}"], w) for n, w in weights.items())
    # resumed again, the run goes on from step 60 with step 40 still the one to beat
    train(TrainOptions(task="copy", out=str(out), steps=70, resume=True, patience=5),
          progress=False)  # fmt: skip
    meta = attnviz.load_checkpoint(out).meta
    assert meta["step"] == 40 and meta["kept"]["last_step"] == 70


def test_keep_last_holds_the_last_step_and_bad_keep_options_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    train(_tiny(out=str(out), steps=20, keep="last"), progress=False)
    assert "kept the last step, 20" in capsys.readouterr().out
    meta = attnviz.load_checkpoint(out).meta
    assert meta["step"] == 20 and meta["kept"]["keep"] == "last"
    # resumed keeping the best: the state holds step 20's weights, so the best starts there
    train(TrainOptions(task="copy", out=str(out), steps=30, keep="best", resume=True),
          progress=False)  # fmt: skip
    assert attnviz.load_checkpoint(out).meta["kept"]["step"] in (20, 30)
    with pytest.raises(InputError, match="--keep must be one of best, last"):
        train(_tiny(out=str(tmp_path / "x"), keep="first"), progress=False)
    with pytest.raises(InputError, match="--patience must be at least 1"):
        train(_tiny(out=str(tmp_path / "y"), patience=0), progress=False)
    args = build_parser().parse_args(["train", "--task", "copy", "--keep", "last",
                                      "--patience", "3"])  # fmt: skip
    assert args.keep == "last" and args.patience == 3
