"""Evaluation: teacher-forced loss and token accuracy, greedy exact match (overall and by
source length), and corpus BLEU and chrF computed by sacrebleu on detokenized text.

Exact match compares texts with runs of whitespace collapsed (a word tokenizer cannot
reproduce a double space; nothing else is normalised). BLEU and chrF are sacrebleu's
defaults (``13a`` tokenization, chrF with character n-grams up to 6 and beta 2), so the
numbers equal ``sacrebleu.corpus_bleu`` / ``corpus_chrf`` on the same outputs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ..checkpoint import Checkpoint, load_checkpoint
from ..core.errors import CheckpointError, InputError
from ..core.model import Transformer
from ..data.batch import Batch, Prompt, make_lm_batch, tensorize
from ..data.mlm import answer_batch
from ..data.tasks import TASKS, Example, Task, get_task
from ..data.tokenizer import Tokenizer
from ..decode.batched import greedy_texts
from ..decode.fill import fill_texts


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


#: The dev pairs stored beside a corpus-trained checkpoint (``{"pairs": [[src, tgt], ...]}``).
DEV_PAIRS = "dev_pairs.json"


def same_text(a: str, b: str) -> bool:
    """Exact match up to runs of whitespace."""
    return a == b or a.split() == b.split()


def _metrics():
    from sacrebleu.metrics import BLEU, CHRF

    return BLEU(), CHRF()


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU and chrF of detokenized outputs against one reference each (sacrebleu).

    Returns:
        ``{"bleu": float, "chrf": float}`` on sacrebleu's 0-100 scale.
    """
    if len(hypotheses) != len(references):
        raise InputError(f"{len(hypotheses)} outputs but {len(references)} references")
    bleu, chrf = _metrics()
    refs = [list(references)]
    return {
        "bleu": bleu.corpus_score(list(hypotheses), refs).score,
        "chrf": chrf.corpus_score(list(hypotheses), refs).score,
    }


@lru_cache(maxsize=1)
def metric_signatures() -> str:
    """sacrebleu's signatures of the BLEU and chrF used here (what a paper would quote)."""
    bleu, chrf = _metrics()
    for metric in (bleu, chrf):  # a signature names the reference count: score once first
        metric.corpus_score(["a"], [["a"]])
    return f"BLEU {bleu.get_signature()}  chrF {chrf.get_signature()}"


@torch.no_grad()
def evaluate(
    model: Transformer,
    examples: Sequence[Example],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    batch_size: int = 500,
    prompt: Prompt | None = None,
) -> dict:
    """Teacher-forced loss and token accuracy, greedy exact match, BLEU and chrF.

    ``prompt``: how a decoder-only model reads each pair (:class:`~attnviz.data.batch.Prompt`).

    Returns:
        ``{"val_loss", "val_token_acc", "val_exact_match", "val_bleu", "val_chrf", "n"}``.
    """
    return validate(model, examples, src_tok, tgt_tok, batch_size, prompt)[0]


def teacher_batch(
    examples: Sequence[Example],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    model: Transformer,
    prompt: Prompt | None = None,
) -> Batch:
    """Examples -> the teacher-forcing batch of the model's kind (a decoder-only model's
    pairs read through its ``prompt``)."""
    device = next(model.parameters()).device
    if prompt is None:
        return tensorize(examples, src_tok, tgt_tok, model.config, device)
    if prompt.mlm:  # the whole target masked
        src = [src_tok.encode(e.src).ids for e in examples]
        tgt = [tgt_tok.encode(e.tgt).ids for e in examples]
        return answer_batch(src, tgt, model.config, prompt, device)
    return make_lm_batch(
        [prompt.ids(src_tok.encode(e.src).ids) for e in examples],
        [tgt_tok.encode(e.tgt).ids for e in examples],
        model.config,
        prompt.loss,
        device,
    )


@torch.no_grad()
def validate(
    model: Transformer,
    examples: Sequence[Example],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    batch_size: int = 500,
    prompt: Prompt | None = None,
) -> tuple[dict, list[str]]:
    """:func:`evaluate`'s metrics and the greedy outputs, one per example."""
    was_training = model.training
    model.eval()
    loss_sum = hits = total = 0
    for i in range(0, len(examples), batch_size):
        part = examples[i : i + batch_size]
        batch = teacher_batch(part, src_tok, tgt_tok, model, prompt)
        loss, h, n = loss_and_hits(model, batch)
        loss_sum, hits, total = loss_sum + float(loss) * n, hits + h, total + n
    outputs = model_outputs(model, examples, src_tok, tgt_tok, prompt, batch_size)
    exact = sum(same_text(o, e.tgt) for o, e in zip(outputs, examples, strict=True))
    scores = corpus_scores(outputs, [e.tgt for e in examples])
    model.train(was_training)
    metrics = {
        "val_loss": round(loss_sum / total, 5),
        "val_token_acc": round(hits / total, 5),
        "val_exact_match": round(exact / len(examples), 5),
        "val_bleu": scores["bleu"],
        "val_chrf": scores["chrf"],
        "n": len(examples),
    }
    return metrics, outputs


def model_outputs(
    model: Transformer,
    examples: Sequence[Example],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    prompt: Prompt | None = None,
    batch_size: int = 500,
) -> list[str]:
    """The model's answer to each example: greedy decoding, or for a masked-LM model the
    whole target masked and filled in one pass (:func:`~attnviz.decode.fill.fill_texts`)."""
    if prompt is not None and prompt.mlm:
        return fill_texts(model, src_tok, tgt_tok, prompt, examples)
    return greedy_texts(model, src_tok, tgt_tok, [e.src for e in examples], batch_size,
                        prompt=prompt)  # fmt: skip


def load_for_eval(path: str | Path) -> tuple[Checkpoint, Task]:
    """The checkpoint and its registered task (for evaluation on the task's test split)."""
    ckpt = load_checkpoint(path)
    return ckpt, task_of(ckpt, path)


def task_of(ckpt: Checkpoint, where: str | Path = "the checkpoint") -> Task:
    """The built-in task a checkpoint was trained on; an error when it names none."""
    if not ckpt.task:
        raise CheckpointError(
            f"{where}: the metadata names no built-in task; score it on a corpus with --data"
        )
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
        preds = ckpt.task_outputs(exs)  # a masked-LM model: the answer filled in
        out[length] = (sum(p == e.tgt for p, e in zip(preds, exs, strict=True)), len(exs))
    return out


# -- a checkpoint on a corpus ---------------------------------------------------------------
@dataclass
class Report:
    """What ``attnviz evaluate DIR --data ...`` prints.

    Attributes:
        n: pairs evaluated.
        exact: outputs equal to the reference (up to whitespace runs).
        by_length: ``{source length in tokens: (exact, n)}``.
        bleu / chrf: sacrebleu's corpus scores (0-100).
        predictions: the outputs (as predict_batch decodes them), one per pair, in order.
    """

    n: int
    exact: int
    by_length: dict[int, tuple[int, int]]
    bleu: float
    chrf: float
    predictions: list[str] = field(repr=False)
    signatures: str = ""

    @property
    def exact_match(self) -> float:
        return self.exact / self.n if self.n else 0.0

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "exact_match": round(self.exact_match, 5),
            "exact": self.exact,
            "by_source_length": {
                str(k): {"exact": r, "n": n} for k, (r, n) in self.by_length.items()
            },
            "bleu": self.bleu,
            "chrf": self.chrf,
            "signatures": self.signatures,
        }

    def text(self) -> str:
        lines = [f"length {k:3d}: {r}/{n} = {r / n:.4f}" for k, (r, n) in self.by_length.items()]
        lines += [
            f"exact match: {self.exact}/{self.n} = {self.exact_match:.4f}",
            f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}",
            f"({self.signatures})",
        ]
        return "\n".join(lines)


def evaluate_pairs(
    ckpt: Checkpoint | str | Path, pairs: Sequence[tuple[str, str]], batch_size: int = 256
) -> Report:
    """Greedy-decode every source and score the outputs against the references.

    Sources the model cannot take (empty, or longer than its ``max_len``) raise
    :class:`~attnviz.core.errors.InputError`, naming the pair.
    """
    if not isinstance(ckpt, Checkpoint):
        ckpt = load_checkpoint(ckpt)
    if not pairs:
        raise InputError("no pairs to evaluate")
    lengths = []
    for i, (src, _) in enumerate(pairs, 1):
        try:
            lengths.append(len(ckpt.encode_source(src).ids))
        except InputError as exc:
            raise InputError(
                f"pair {i}: {exc} (remove it from the file to score the rest)"
            ) from None
    preds = ckpt.predict_batch([s for s, _ in pairs], batch_size)
    right = [same_text(p, t) for p, (_, t) in zip(preds, pairs, strict=True)]
    by_length: dict[int, list[int]] = {}
    for n, ok in zip(lengths, right, strict=True):
        by_length.setdefault(n, [0, 0])
        by_length[n][0] += ok
        by_length[n][1] += 1
    scores = corpus_scores(preds, [t for _, t in pairs])
    return Report(
        n=len(pairs),
        exact=sum(right),
        by_length={k: tuple(v) for k, v in sorted(by_length.items())},
        bleu=scores["bleu"],
        chrf=scores["chrf"],
        predictions=preds,
        signatures=metric_signatures(),
    )


_DEV: dict[tuple[str, int], tuple[list[tuple[str, str]], dict[str, str]]] = {}


def _dev(ckpt: Checkpoint) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The stored dev pairs of a corpus-trained checkpoint and a source -> reference map
    (read once per file version); empty without ``dev_pairs.json``."""
    path = Path(ckpt.path) / DEV_PAIRS if ckpt.path else None
    if path is None or not path.is_file():
        return [], {}
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _DEV:
        try:
            pairs = [
                (str(s), str(t)) for s, t in json.loads(path.read_text(encoding="utf-8"))["pairs"]
            ]
        except (OSError, ValueError, KeyError, TypeError):
            pairs = []
        if len(_DEV) > 16:
            _DEV.clear()
        _DEV[key] = (pairs, dict(pairs))
    return _DEV[key]


def dev_pairs(ckpt: Checkpoint) -> list[tuple[str, str]]:
    """The ``(source, reference)`` dev pairs stored beside a corpus-trained checkpoint (up to
    the 2,000 training kept), in their order; ``[]`` when it has none."""
    return list(_dev(ckpt)[0])


def dev_reference(ckpt: Checkpoint, text: str) -> str | None:
    """The reference of ``text`` when it is a dev source of a corpus-trained checkpoint."""
    return _dev(ckpt)[1].get(text)


def expected_output(ckpt: Checkpoint, text: str) -> str | None:
    """The output ``ckpt`` should give for ``text``: its built-in task's target, or the
    reference of a dev source a corpus run stored beside it (:func:`dev_reference`); None
    when neither knows it (an empty input, an input outside the task)."""
    if not (text or "").strip():
        return None
    if ckpt.task not in TASKS:
        return dev_reference(ckpt, text)
    try:
        return get_task(ckpt.task).target(text)
    except Exception:  # noqa: BLE001 (an input outside the task, unknown symbols: none)
        return None
