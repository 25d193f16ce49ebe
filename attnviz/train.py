"""Training: ``attnviz train --task reverse --out models/reverse``.

AdamW with linear warm-up then cosine decay, optional label smoothing, gradient clipping,
bf16 autocast on CUDA, a tqdm bar with loss and token accuracy, and a validation pass every
``eval_every`` steps (teacher-forced loss and token accuracy, and exact-match accuracy of
greedy decoding). After each validation the checkpoint folder is rewritten atomically:

- ``model.safetensors`` + ``config.json``: the model (see :mod:`attnviz.checkpoint`), with
  the metrics history, the task and the exact command in its metadata;
- ``train_state.safetensors``: model, AdamW moments, step and elapsed time in one file, what
  ``--resume`` reads (one file, so a kill can never pair weights with another step's state);
- ``snapshots.safetensors``: the attention of every layer and head on the task's fixed probe
  input, taken every ``snapshot_every`` steps, for playing back how attention formed.

The batch at each step depends only on (seed, rank, step), so a resumed run sees exactly the
data it would have seen. Under ``torchrun --nproc_per_node N`` the same command trains with
DistributedDataParallel (NCCL on GPUs, gloo on CPU): each rank draws its own shard of every
step's data, rank 0 alone evaluates, logs and saves.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from .checkpoint import (
    greedy_texts,
    read_tensors,
    save_checkpoint,
    unique_state_dict,
    write_tensors,
)
from .config import ModelConfig
from .data import tensorize
from .devices import resolve_device
from .errors import CheckpointError, InputError
from .evaluate import evaluate, loss_and_hits
from .model import Transformer
from .record import record
from .snapshots import SNAPSHOTS, Snapshots
from .tasks import Example, Task, get_task
from .tokenizer import Tokenizer

TRAIN_STATE = "train_state.safetensors"
MODEL_FIELDS = (
    "d_model",
    "n_heads",
    "n_encoder_layers",
    "n_decoder_layers",
    "d_ff",
    "dropout",
    "norm_first",
    "activation",
    "max_len",
)


_DEFAULTS = dict(
    weight_decay=0.01,
    label_smoothing=0.0,
    clip=1.0,
    eval_every=250,
    eval_size=500,
    snapshot_every=100,
    seed=0,
)


@dataclass
class TrainOptions:
    """Everything that defines a training run.

    ``None`` means: on ``--resume``, the saved run's value; otherwise the task's default
    (:attr:`attnviz.tasks.Task.training` / ``.model``), else a global default
    (weight decay 0.01, no label smoothing, clipping at 1.0, validation every 250 steps on 500
    examples, a snapshot every 100 steps, seed 0).
    """

    task: str
    out: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    warmup: int | None = None
    weight_decay: float | None = None
    label_smoothing: float | None = None
    clip: float | None = None
    d_model: int | None = None
    n_heads: int | None = None
    n_encoder_layers: int | None = None
    n_decoder_layers: int | None = None
    d_ff: int | None = None
    dropout: float | None = None
    norm_first: bool | None = None
    activation: str | None = None
    max_len: int | None = None
    eval_every: int | None = None
    eval_size: int | None = None
    snapshot_every: int | None = None
    target_exact_match: float | None = None
    seed: int | None = None
    device: str = "auto"
    resume: bool = False
    command: str = ""

    def resolved(self, task: Task, saved: dict | None = None) -> TrainOptions:
        """A copy with every ``None`` filled: saved run, then task defaults, then globals.

        Raises:
            InputError: a bad value, or (with ``saved``) a model size that differs from the
                saved run's (a resumed run keeps its model).
        """
        saved = saved or {}
        if saved and saved.get("task") != self.task:
            raise InputError(f"the saved run is a {saved.get('task')!r} run, not {self.task!r}")
        clash = [
            k
            for k in MODEL_FIELDS
            if getattr(self, k) is not None and getattr(self, k) != saved.get(k, getattr(self, k))
        ]
        if clash:
            raise InputError(
                f"--resume keeps the saved model; these options differ from it: {', '.join(clash)}"
            )
        layers = [
            {k: v for k, v in saved.items() if v is not None},
            task.training,
            task.model,
            _DEFAULTS,
        ]
        fill = {}
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is None:
                fill[f.name] = next((d[f.name] for d in layers if f.name in d), None)
        out = dataclasses.replace(self, **fill)
        for name in ("steps", "batch_size", "eval_every", "eval_size", "snapshot_every", "warmup"):
            if getattr(out, name) is None or getattr(out, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1")
        if out.lr is None or out.lr <= 0:
            raise InputError("--lr must be positive")
        return out


def model_config(task: Task, opts: TrainOptions, src: Tokenizer, tgt: Tokenizer) -> ModelConfig:
    """The model config of a run: vocabularies from the tokenizers, sizes from the options."""
    sizes = {k: getattr(opts, k) for k in MODEL_FIELDS if getattr(opts, k) is not None}
    sizes.setdefault("max_len", 2 * max(task.lengths) + 24)
    if src.specials != tgt.specials:
        raise InputError("the task's source and target tokenizers disagree on special ids")
    ids = {f"{role}_id": i for role, i in src.specials.items()}
    return ModelConfig(src_vocab_size=len(src), tgt_vocab_size=len(tgt), **ids, **sizes)


def optimizer(model: torch.nn.Module, opts: TrainOptions) -> torch.optim.AdamW:
    """AdamW that decays matrices only: biases and LayerNorm weights (1-d) are not decayed."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": opts.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=opts.lr, betas=(0.9, 0.98))


def lr_at(step: int, opts: TrainOptions) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to 0 at ``steps``."""
    if step < opts.warmup:
        return opts.lr * (step + 1) / opts.warmup
    progress = (step - opts.warmup) / max(1, opts.steps - opts.warmup)
    return opts.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def batch_at(task: Task, step: int, opts: TrainOptions, rank: int) -> list[Example]:
    """The training examples of one step on one rank (a pure function of seed, rank, step)."""
    stream = task.stream("train", seed=f"{opts.seed}/{rank}/{step}")
    return [next(stream) for _ in range(opts.batch_size)]


# -- the run --------------------------------------------------------------------------------
def _dist_setup(device: torch.device) -> tuple[int, int, torch.device]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    return dist.get_rank(), world, device


def _save_train_state(
    path: Path, model: Transformer, opt: torch.optim.Optimizer, info: dict
) -> None:
    # tied parameters stored once, as in a checkpoint
    tensors = {f"model.{k}": v for k, v in unique_state_dict(model).items()}
    for i, st in opt.state_dict()["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            tensors[f"opt.{i}.{name}"] = torch.as_tensor(st[name]).float()
    # the random state, so dropout after a resume draws what it would have drawn
    tensors["rng.cpu"] = torch.get_rng_state()
    if model_device(model).type == "cuda":
        tensors["rng.cuda"] = torch.cuda.get_rng_state(model_device(model))
    write_tensors(path, tensors, info)


def _load_train_state(
    tensors: dict, path: Path, model: Transformer, opt: torch.optim.Optimizer
) -> None:
    try:
        with torch.no_grad():  # copying into the tied parameter fills every name it has
            for k, t in unique_state_dict(model).items():
                t.copy_(tensors[f"model.{k}"])
        state = opt.state_dict()
        for i in (i for group in state["param_groups"] for i in group["params"]):
            if f"opt.{i}.step" in tensors:
                state["state"][i] = {
                    n: tensors[f"opt.{i}.{n}"] for n in ("exp_avg", "exp_avg_sq", "step")
                }
        opt.load_state_dict(state)
        if "rng.cpu" in tensors:
            torch.set_rng_state(tensors["rng.cpu"].to(torch.uint8))
        if "rng.cuda" in tensors and model_device(model).type == "cuda":
            torch.cuda.set_rng_state(tensors["rng.cuda"].to(torch.uint8), model_device(model))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path} does not match this model and optimiser ({exc})") from None


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def train(opts: TrainOptions, progress: bool = True, stop_after: int | None = None) -> dict:
    """Run (or resume) training; returns the final metrics (rank 0; other ranks get ``{}``).

    ``stop_after``: stop (validating and saving first) after this many steps of this call,
    as an interrupted run would; ``--resume`` then carries on exactly where it stopped.

    Raises:
        InputError: a bad option (unknown task, no GPU for ``--device cuda``, ...).
    """
    from tqdm import tqdm

    task = get_task(opts.task)
    out = Path(opts.out) if opts.out else None
    state = None
    if opts.resume:
        if out is None or not (out / TRAIN_STATE).is_file():
            raise InputError(f"--resume: no {TRAIN_STATE} in {out}; start without --resume")
        state = read_tensors(out / TRAIN_STATE)
        if not state[1] or "step" not in state[1]:
            raise CheckpointError(f"{out / TRAIN_STATE}: not an attnviz training state")
    elif out is not None and (out / TRAIN_STATE).is_file():
        raise InputError(
            f"{out} already holds a training run; add --resume or choose another --out"
        )
    opts = opts.resolved(task, state[1]["options"] if state else None)
    rank, world, device = _dist_setup(resolve_device(opts.device))
    src_tok, tgt_tok = task.tokenizers()
    cfg = model_config(task, opts, src_tok, tgt_tok)
    torch.manual_seed(opts.seed)
    model = Transformer(cfg).to(device)
    opt = optimizer(model, opts)
    probe = Example(task.probe, task.target(task.probe))
    probe_batch = tensorize([probe], src_tok, tgt_tok, cfg, device)
    snaps = Snapshots(src_tok.split(probe.src), tgt_tok.split(probe.tgt))
    step, elapsed, history = 0, 0.0, []
    if state is not None:
        _load_train_state(state[0], out / TRAIN_STATE, model, opt)
        info = state[1]
        step, elapsed, history = info["step"], info["elapsed"], info["history"]
        if step >= opts.steps:
            raise InputError(f"the saved run is at step {step}; ask for more --steps to go on")
        if (out / SNAPSHOTS).is_file():
            snaps = Snapshots.load(out)
            snaps.truncate(step)
        if world > 1:  # each rank its own dropout noise (the saved state is rank 0's)
            torch.manual_seed(opts.seed + step + 1000 * rank)
    if out is not None and rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob(".*.tmp*"):  # left by a run killed in the middle of a write
            stale.unlink(missing_ok=True)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    val = task.examples("validation", opts.eval_size, seed=0)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    meta = {
        "task": task.name,
        "command": opts.command,
        "world_size": world,
        "options": dataclasses.asdict(opts),
    }
    last: dict = {}

    @torch.no_grad()
    def snapshot(step: int) -> None:
        model.eval()
        with record(model, capture=("weights",)) as trace:
            loss, _, _ = loss_and_hits(model, probe_batch, 0.0)
        snaps.add(step, trace, greedy_texts(model, src_tok, tgt_tok, [probe.src])[0], loss)
        model.train()

    def save(step: int) -> dict:
        nonlocal last
        metrics = evaluate(model, val, src_tok, tgt_tok)
        last = {"step": step, "elapsed_s": round(time.perf_counter() - start, 1), **metrics}
        history.append(last)
        if out is not None:
            _save_train_state(
                out / TRAIN_STATE,
                model,
                opt,
                {
                    "step": step,
                    "elapsed": last["elapsed_s"],
                    "history": history,
                    "options": meta["options"],
                },
            )
            save_checkpoint(
                out,
                model,
                src_tok,
                tgt_tok,
                {**meta, "step": step, "metrics": last, "history": history},
            )
            snaps.save(out / SNAPSHOTS)
        return last

    model.train()
    bar = tqdm(
        total=opts.steps, initial=step, desc=f"train {task.name}", disable=not progress or rank != 0
    )
    if rank == 0 and step == 0:
        snapshot(0)
    start = time.perf_counter() - elapsed  # wall time, evaluation included, across resumes
    first = step
    while step < opts.steps:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, opts)
        batch = tensorize(batch_at(task, step, opts, rank), src_tok, tgt_tok, cfg, device)
        with autocast:
            loss, hits, n = loss_and_hits(net, batch, opts.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.clip)
        opt.step()
        step += 1
        elapsed = time.perf_counter() - start
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss.item():.3f}", acc=f"{hits / n:.3f}", lr=f"{lr_at(step - 1, opts):.1e}"
        )
        interrupted = stop_after is not None and step - first >= stop_after
        done = step == opts.steps or interrupted
        if rank == 0 and (step % opts.snapshot_every == 0 or done):
            snapshot(step)
        stop = False
        if step % opts.eval_every == 0 or done:
            if rank == 0:
                m = save(step)
                bar.write(
                    f"step {step}: val loss {m['val_loss']:.4f}  token acc "
                    f"{m['val_token_acc']:.4f}  exact match {m['val_exact_match']:.4f}  "
                    f"({elapsed:.0f}s)"
                )
                stop = (
                    opts.target_exact_match is not None
                    and m["val_exact_match"] >= opts.target_exact_match
                )
            if world > 1:
                flag = torch.tensor([float(stop)], device=device)
                dist.broadcast(flag, 0)
                stop = bool(flag.item())
            if stop:
                if rank == 0:
                    bar.write(
                        f"reached exact match {last['val_exact_match']:.4f} >= "
                        f"{opts.target_exact_match} at step {step}; stopping"
                    )
                break
        if interrupted:
            break
    bar.close()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return last
