"""Training: ``attnviz train --task reverse --out models/reverse`` or ``--data corpus.tsv``.

AdamW with linear warm-up then cosine decay, optional label smoothing, gradient clipping,
bf16 autocast on CUDA, progress that suits where it runs (a tqdm bar on a terminal, a line
every ~30 s in a log), and a validation pass every ``eval_every`` steps: teacher-forced loss
and token accuracy, greedy exact match, corpus BLEU and chrF (sacrebleu), and three fixed dev
sentences printed with the model's output. After each validation the checkpoint folder is
rewritten atomically:

- ``model.safetensors`` + ``config.json``: the model (see :mod:`attnviz.checkpoint`), with
  the tokenizers, the metrics history, the task or corpus and the exact command in its
  metadata;
- ``train_state.safetensors``: model, AdamW moments, step and elapsed time in one file, what
  ``--resume`` reads (one file, so a kill can never pair weights with another step's state);
- ``snapshots.safetensors``: the attention of every layer and head on the probe input (the
  task's, or a corpus's first dev sentence), taken every ``snapshot_every`` steps, for
  playing back how attention formed;
- ``dev_pairs.json`` (corpus runs): the dev pairs, so the app shows a dev source's reference.

``--init FOLDER`` fine-tunes a checkpoint instead of starting from scratch: any folder
:func:`~attnviz.load_checkpoint` opens (attnviz's own, an ``nn.Transformer`` import, a Hugging
Face folder). Its weights, config and tokenizers are kept (a Hugging Face tokenizer reads the
corpus; its files and ``generation_config.json`` are copied into ``--out``, and the folder's
config and generation config go into the metadata, so the new checkpoint reopens with the same
tokenizer and generation rules); the optimiser starts fresh.

The data comes from a :class:`~attnviz.train.feeds.Feed`: a built-in task's generator or a corpus
encoded once. The batch at each step depends only on (seed, rank, step), so a resumed run
sees exactly the data it would have seen. Under ``torchrun --nproc_per_node N`` the same
command trains with DistributedDataParallel (NCCL on GPUs, gloo on CPU): each rank draws its
own shard of every step's data, rank 0 alone evaluates, logs and saves.

The options and how unset ones are filled live in :mod:`attnviz.train.options`
(:class:`TrainOptions` imports from here too).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..checkpoint import (
    Checkpoint,
    load_checkpoint,
    read_tensors,
    save_checkpoint,
    write_json_atomically,
)
from ..core.config import ModelConfig
from ..core.devices import resolve_device
from ..core.errors import CheckpointError, InputError
from ..core.model import Transformer
from ..core.record import record
from ..data.batch import make_batch, make_lm_batch
from ..data.mlm import make_mlm_batch
from ..data.tokenizer import Tokenizer, config_ids
from .evaluate import (
    DEV_PAIRS,
    loss_and_hits,
    metric_signatures,
    model_outputs,
    teacher_batch,
    validate,
)
from .feeds import (
    CORPUS_ONLY,
    CorpusFeed,
    Feed,
    batch_at,
    hf_training_tokenizers,
    make_feed,
    one_stack,
)
from .induction import measure, repeated_tokens
from .keeper import Keeper
from .options import MODEL_FIELDS, TrainOptions, check_batch, same_source
from .runstate import Progress, check_run_info, load_train_state, save_train_state
from .snapshots import SNAPSHOTS, Snapshots

__all__ = ["MODEL_FIELDS", "TRAIN_STATE", "TrainOptions", "batch_at", "lr_at", "train"]

TRAIN_STATE = "train_state.safetensors"
DEV_PAIRS_KEPT = 2000
#: Repeated random sequences on which the ``repeat`` task's snapshots measure induction.
INDUCTION_N, INDUCTION_LENGTH = 64, 20  # dev pairs stored beside a corpus checkpoint for the app

#: Files of a fine-tuned folder copied beside the new checkpoint (its generation rules).
KEPT_FILES = ("generation_config.json",)
#: What a Hugging Face folder's files are not: the rest (its tokenizer's) go along.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".ckpt", ".pt", ".index.json")
#: A Hugging Face folder's metadata kept with the fine-tuned checkpoint (its rules).
_HF_META = ("model_type", "hf_config", "generation_config")


def _kept_files(init: Checkpoint) -> list[Path]:
    """The files of ``init``'s folder that go along with the fine-tuned checkpoint."""
    if init.meta.get("format") != "huggingface":
        return [init.path / n for n in KEPT_FILES if (init.path / n).is_file()]
    return [
        f
        for f in sorted(init.path.iterdir())
        if f.is_file() and f.name != "config.json" and not f.name.endswith(_WEIGHT_SUFFIXES)
    ]


def init_checkpoint(opts: TrainOptions) -> tuple[Checkpoint, TrainOptions]:
    """The checkpoint ``opts.init`` names, and the options with its model config filled in.

    Fine-tuning keeps the checkpoint's model and tokenizers, so the options that choose them
    (model sizes, ``preset``, the corpus tokenizer's) are refused, as is a built-in ``task``
    (a task brings its own tokenizers).

    Raises:
        InputError: such an option given, or a Hugging Face folder without a tokenizer.
        CheckpointError: the folder does not load.
    """
    given = [n for n in (*MODEL_FIELDS, *CORPUS_ONLY, "preset") if getattr(opts, n) is not None]
    if given:
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in given)
        raise InputError(f"--init keeps the checkpoint's model and tokenizers; drop {flags}")
    if opts.task is not None:
        raise InputError("--init fine-tunes on a corpus: give --data instead of --task")
    ckpt = load_checkpoint(opts.init)
    if ckpt.meta.get("tokenizer_missing"):
        raise InputError(f"--init {opts.init}: no tokenizer to read the corpus with "
                         f"({ckpt.meta['tokenizer_missing']})")  # fmt: skip
    sizes = {k: getattr(ckpt.config, k) for k in MODEL_FIELDS}
    sizes["max_len"] -= CorpusFeed.extra_positions  # the feed adds the decoder's start back
    return ckpt, dataclasses.replace(opts, **sizes)


def model_config(feed: Feed, opts: TrainOptions, src: Tokenizer, tgt: Tokenizer) -> ModelConfig:
    """The model config of a run: vocabularies from the tokenizers, sizes from the options."""
    sizes = {k: getattr(opts, k) for k in MODEL_FIELDS if getattr(opts, k) is not None}
    sizes["max_len"] = feed.positions(
        sizes.get("max_len", feed.default_max_len()), opts.kind.decoder_only
    )
    if src.specials != tgt.specials:
        raise InputError("the source and target tokenizers disagree on special ids")
    ids = config_ids(src.specials)
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


def train(
    opts: TrainOptions,
    progress: bool = True,
    stop_after: int | None = None,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    dev_pairs: Sequence[tuple[str, str]] | None = None,
    progress_every: float = 30.0,
) -> dict:
    """Run (or resume) training; returns the final metrics (rank 0; other ranks get ``{}``).

    Args:
        opts: the run; ``pairs`` / ``dev_pairs`` here are the same as setting them on it.
        progress: a bar on a terminal, else a line every ``progress_every`` seconds (the
            evaluation lines show either way).
        stop_after: stop (validating and saving first) after this many steps of this call,
            as an interrupted run would; ``--resume`` then carries on exactly where it stopped.

    Raises:
        InputError: a bad option (unknown task, no GPU for ``--device cuda``, a bad corpus...).
    """
    if pairs is not None or dev_pairs is not None:
        opts = dataclasses.replace(
            opts,
            pairs=pairs if pairs is not None else opts.pairs,
            dev_pairs=dev_pairs or opts.dev_pairs,
        )
    out = Path(opts.out) if opts.out else None
    state = None
    if opts.resume:
        if out is None or not (out / TRAIN_STATE).is_file():
            raise InputError(f"--resume: no {TRAIN_STATE} in {out}; start without --resume")
        state = read_tensors(out / TRAIN_STATE)
        check_run_info(state[1], out / TRAIN_STATE)
    elif out is not None and (out / TRAIN_STATE).is_file():
        raise InputError(
            f"{out} already holds a training run; add --resume or choose another --out"
        )
    saved = state[1]["options"] if state else None
    if saved and all(getattr(opts, n) is None for n in ("task", "data", "pairs")):
        if not (saved.get("task") or saved.get("data")):
            raise InputError("this run trained on pairs given in Python: pass them again")
        keep = {n: getattr(opts, n) or saved.get(n) for n in ("task", "data", "dev", "langs")}
        opts = dataclasses.replace(opts, **keep)
    what = opts.source()
    same_source(opts, saved)  # before reading a corpus for nothing
    check_batch(opts, saved)  # before a batch is read: the probe batch is one
    init = None
    if opts.init is not None and state is None:
        init, opts = init_checkpoint(opts)
    rank, world, device = _dist_setup(resolve_device(opts.device))
    say = print if rank == 0 else (lambda _msg: None)
    toks = None
    if init is not None:
        toks = (init.src_tokenizer, init.tgt_tokenizer)
        if not isinstance(init.tgt_tokenizer, Tokenizer):  # a Hugging Face folder's
            toks = hf_training_tokenizers(*toks)
    feed = make_feed(opts, saved, out, rank, world, say, tokenizers=toks)
    opts = opts.resolved(feed, saved)
    prompt = one_stack(feed, opts.kind)  # a decoder-only model: one vocabulary, its prompt
    src_tok, tgt_tok = feed.src_tok, feed.tgt_tok
    cfg = model_config(feed, opts, src_tok, tgt_tok)
    torch.manual_seed(opts.seed)
    model = Transformer(cfg).to(device)
    if init is not None:
        if cfg != init.config:
            raise CheckpointError(f"{opts.init}: its config does not rebuild ({init.config})")
        model.load_state_dict(init.model.state_dict())
        what = f"fine-tune {opts.init} on {what}"
    opt = optimizer(model, opts)
    probe = feed.probe
    probe_batch = teacher_batch([probe], src_tok, tgt_tok, model, prompt)
    if prompt is None:
        snaps = Snapshots(src_tok.encode(probe.src).pieces, tgt_tok.encode(probe.tgt).pieces)
    else:  # one sequence on both axes of the decoder's self-attention
        seq = [src_tok.token(i) for i in probe_batch.src[0].tolist()]
        snaps = Snapshots(seq, seq)
    induction = None
    if feed.task is not None and feed.task.induction and prompt is not None:
        symbols = [i for i, t in enumerate(src_tok.tokens) if t in set(feed.task.source_symbols())]
        induction = repeated_tokens(symbols, src_tok.bos_id, INDUCTION_N, INDUCTION_LENGTH)
    step, elapsed, history = 0, 0.0, []
    keeper = Keeper(opts, model, feed.task is not None, hold=rank == 0)
    if state is not None:
        load_train_state(state[0], out / TRAIN_STATE, model, opt, keeper.model)
        info = state[1]
        step, elapsed, history = info["step"], info["elapsed"], info["history"]
        # the kept weights are the state's best.* (an earlier step's), else its model's
        earlier = any(k.startswith("best.") for k in state[0])
        keeper.resume(history, info.get("kept_step", step) if earlier else step)
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
        if init is not None:
            for f in _kept_files(init):  # generation rules (and a folder's tokenizer files)
                shutil.copyfile(f, out / f.name)
        if isinstance(feed, CorpusFeed):
            kept = feed.all_dev()[:DEV_PAIRS_KEPT]
            write_json_atomically(out / DEV_PAIRS, {"pairs": [[e.src, e.tgt] for e in kept]})
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    val = feed.dev(opts.eval_size)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    meta = {
        "task": feed.task.name if feed.task else None,
        "command": opts.command,
        "world_size": world,
        "options": opts.saved(),
    }
    if prompt is not None:
        meta["prompt"] = prompt.to_dict()
    if opts.init is not None:  # on --resume, the saved run's record of it
        if init is not None:
            meta["init"] = {"path": str(opts.init), "task": init.task,
                            "step": init.meta.get("step")}  # fmt: skip
            meta.update({k: init.meta[k] for k in _HF_META if k in init.meta})
        elif state:
            meta.update({k: state[1][k] for k in ("init", *_HF_META) if k in state[1]})
    if isinstance(feed, CorpusFeed):
        meta["corpus"] = {
            "train": opts.data or "pairs given in Python",
            "dev": opts.dev or ("held out" if opts.dev_pairs is None else "given in Python"),
            "train_pairs": len(feed),
            "dropped": feed.dropped,
            "dev_pairs": len(feed.all_dev()),
        }
        if feed.pieces:  # how the trained tokenizers cut the corpus (not on --resume)
            meta["corpus"]["pieces"] = feed.pieces
    last: dict = {}

    @torch.no_grad()
    def snapshot(step: int) -> None:
        model.eval()
        with record(model, capture=("weights",)) as trace:
            loss, _, _ = loss_and_hits(model, probe_batch, 0.0)
        output = model_outputs(model, [probe], src_tok, tgt_tok, prompt)[0]
        scores = None if induction is None else measure(model, induction, INDUCTION_LENGTH)
        snaps.add(step, trace, output, loss, None if scores is None else scores.to_dict())
        model.train()

    def save(step: int) -> tuple[dict, list[str], str | None]:
        """Validate and save; returns the metrics, the dev outputs and why to stop (or None)."""
        nonlocal last
        metrics, outputs = validate(model, val, src_tok, tgt_tok, prompt=prompt)
        last = {"step": step, "elapsed_s": round(time.perf_counter() - start, 1), **metrics}
        history.append(last)
        keeper.add(last, model)
        stopped = _reached(last, opts) or keeper.out_of_patience()
        if out is not None:
            info = {"step": step, "elapsed": last["elapsed_s"], "history": history,
                    "options": meta["options"], "kept_step": keeper.best["step"],
                    **{k: meta[k] for k in ("init", *_HF_META) if k in meta}}  # fmt: skip
            earlier = keeper.model if keeper.best["step"] != step else None
            save_train_state(out / TRAIN_STATE, model, opt, info, earlier)
            kept = keeper.best if opts.keep == "best" else last
            record = keeper.record(step, stopped)
            save_checkpoint(
                out,
                keeper.model if opts.keep == "best" else model,
                src_tok,
                tgt_tok,
                {**meta, "step": kept["step"], "metrics": kept, "history": history, "kept": record},
            )
            snaps.save(out / SNAPSHOTS)
        return last, outputs, stopped

    model.train()
    bar = Progress(opts.steps, step, f"train {what}", progress and rank == 0, progress_every)
    if rank == 0:
        bar.write(
            f"{what}: {_layers(cfg)}, d_model {cfg.d_model}, {cfg.n_heads} heads, "
            f"{'no feed-forward' if cfg.attn_only else f'd_ff {cfg.d_ff}'}; "
            f"{model.num_parameters():,} parameters; {opts.steps} steps of {opts.batch_size}"
        )
        bar.write(f"metrics: {metric_signatures()}")
    if rank == 0 and step == 0:
        snapshot(0)
    start = time.perf_counter() - elapsed  # wall time, evaluation included, across resumes
    first = step
    while step < opts.steps:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, opts)
        src_rows, tgt_rows = feed.batch(step, opts, rank, world)
        if prompt is None:
            batch = make_batch(src_rows, tgt_rows, cfg, device)
        elif prompt.mlm:  # masks drawn from (seed, rank, step)
            rng = np.random.default_rng([opts.seed, rank, step])
            batch = make_mlm_batch(src_rows, tgt_rows, cfg, prompt, rng, device)
        else:
            prompts = [prompt.ids(row) for row in src_rows]
            batch = make_lm_batch(prompts, tgt_rows, cfg, prompt.loss, device)
        with autocast:
            loss, hits, n = loss_and_hits(net, batch, opts.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.clip)
        opt.step()
        step += 1
        elapsed = time.perf_counter() - start
        bar.update(
            step,
            loss=f"{loss.item():.3f}",
            acc=f"{hits / n:.3f}",
            lr=f"{lr_at(step - 1, opts):.1e}",
        )
        interrupted = stop_after is not None and step - first >= stop_after
        done = step == opts.steps or interrupted
        if rank == 0 and (step % opts.snapshot_every == 0 or done):
            snapshot(step)
        stop = False
        if step % opts.eval_every == 0 or done:
            if rank == 0:
                m, outputs, reason = save(step)
                best = " (best)" if keeper.best["step"] == step and len(history) > 1 else ""
                bar.write(_eval_line(m, elapsed) + best)
                for e, o in list(zip(val, outputs, strict=True))[:3]:
                    bar.write(f"  src: {e.src}\n  ref: {e.tgt}\n  out: {o}")
                stop = reason is not None
            if world > 1:
                flag = torch.tensor([float(stop)], device=device)
                dist.broadcast(flag, 0)
                stop = bool(flag.item())
            if stop:
                if rank == 0:
                    bar.write(f"reached {reason} at step {step}; stopping")
                break
        if interrupted:
            break
    if rank == 0 and history:
        bar.write(keeper.summary(step))
    bar.close()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return {**last, "kept_step": keeper.best["step"]} if last else last


def _layers(cfg: ModelConfig) -> str:
    """The stacks in words: ``"2+2 layers"``, ``"decoder-only, 2 layers"``."""
    if cfg.has_cross:
        return f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers"
    n = cfg.n_decoder_layers if cfg.has_decoder else cfg.n_encoder_layers
    return f"{cfg.arch}, {n} layers"


def _eval_line(m: dict, elapsed: float) -> str:
    return (
        f"step {m['step']}: val loss {m['val_loss']:.4f}  token acc {m['val_token_acc']:.4f}  "
        f"exact match {m['val_exact_match']:.4f}  BLEU {m['val_bleu']:.2f}  "
        f"chrF {m['val_chrf']:.2f}  ({elapsed:.0f}s)"
    )


def _reached(m: dict, opts: TrainOptions) -> str | None:
    """Which early-stopping target a validation reached (None: train on)."""
    if opts.target_exact_match is not None and m["val_exact_match"] >= opts.target_exact_match:
        return f"exact match {m['val_exact_match']:.4f} >= {opts.target_exact_match}"
    if opts.target_chrf is not None and m["val_chrf"] >= opts.target_chrf:
        return f"chrF {m['val_chrf']:.2f} >= {opts.target_chrf}"
    return None
