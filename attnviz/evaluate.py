"""Evaluation: teacher-forced loss and token accuracy, greedy exact match, by source length."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from .checkpoint import Checkpoint, greedy_texts, load_checkpoint
from .data import Batch, tensorize
from .errors import CheckpointError
from .model import Transformer
from .tasks import Example, Task, get_task
from .tokenizer import Tokenizer


def loss_and_hits(
    model: torch.nn.Module, batch: Batch, smoothing: float = 0.0
) -> tuple[Tensor, int, int]:
    """Teacher-forced cross-entropy over the real target tokens, and the argmax hits.

    Returns:
        ``(mean loss, tokens predicted right, real tokens)``; padding never counts.
    """
    logits = batch.forward(model)  # [B, Tt, V]
    real = batch.real
    loss = F.cross_entropy(logits[real].float(), batch.tgt_out[real], label_smoothing=smoothing)
    hits = int(((logits.argmax(-1) == batch.tgt_out) & real).sum())
    return loss, hits, int(real.sum())


@torch.no_grad()
def evaluate(
    model: Transformer,
    examples: Sequence[Example],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    batch_size: int = 500,
) -> dict:
    """Teacher-forced loss and token accuracy, and greedy exact-match accuracy.

    Returns:
        ``{"val_loss", "val_token_acc", "val_exact_match", "n"}``.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum = hits = total = 0
    for i in range(0, len(examples), batch_size):
        part = examples[i : i + batch_size]
        batch = tensorize(part, src_tok, tgt_tok, model.config, device)
        loss, h, n = loss_and_hits(model, batch)
        loss_sum, hits, total = loss_sum + float(loss) * n, hits + h, total + n
    outputs = greedy_texts(model, src_tok, tgt_tok, [e.src for e in examples], batch_size)
    exact = sum(o == e.tgt for o, e in zip(outputs, examples, strict=True))
    model.train(was_training)
    return {
        "val_loss": round(loss_sum / total, 5),
        "val_token_acc": round(hits / total, 5),
        "val_exact_match": round(exact / len(examples), 5),
        "n": len(examples),
    }


def load_for_eval(path: str | Path) -> tuple[Checkpoint, Task]:
    """The checkpoint and its registered task (for evaluation on the task's test split)."""
    ckpt = load_checkpoint(path)
    return ckpt, task_of(ckpt, path)


def task_of(ckpt: Checkpoint, where: str | Path = "the checkpoint") -> Task:
    """The built-in task a checkpoint was trained on; an error when it names none."""
    if not ckpt.task:
        raise CheckpointError(f"{where}: the metadata names no task")
    return get_task(ckpt.task)


def exact_match_by_length(
    ckpt: Checkpoint | str | Path, per_length: int = 200, split: str = "test", seed: int = 0
) -> dict[int, tuple[int, int]]:
    """Greedy exact matches per source length on a task's split: ``{length: (right, n)}``.

    Args:
        ckpt: a loaded checkpoint or its folder; its metadata must name a built-in task.
    """
    if not isinstance(ckpt, Checkpoint):
        ckpt, task = load_for_eval(ckpt)
    else:
        task = task_of(ckpt)
    out = {}
    for length in task.lengths:
        exs = task.examples(split, per_length, seed=seed, length=length)
        preds = ckpt.predict_batch([e.src for e in exs])
        out[length] = (sum(p == e.tgt for p, e in zip(preds, exs, strict=True)), len(exs))
    return out
