"""Mask experiments: switch a mask off (or block chosen source tokens) in the real model.

Each experiment runs the same inputs twice through the same model: as trained, and with one
mask changed through the recorder's edits (or an extra source padding mask). It returns both
traces, the weight differences, and what changed in the output: teacher-forced next-token
distributions and accuracy against the reference, and the greedy output.

- :func:`causal_experiment`: the decoder's causal mask off. Under teacher forcing the decoder
  can then see the very token it must predict, and its accuracy jumps; greedy decoding has no
  future to see, but every earlier position now attends to later ones when the prefix is
  recomputed, so the output can still change.
- :func:`padding_experiment`: the padding masks off on a padded batch: short inputs attend to
  PAD positions and their outputs can change.
- :func:`block_source`: chosen source positions blocked as if they were padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..decoding import default_max_len, greedy_decode
from ..devices import as_numpy
from ..errors import InputError
from ..record import DropMask, Edit, Trace, record
from ..tasks import TASKS, Example, get_task
from ..tokenizer import BOS, EOS, PAD
from ..train import tensorize


@dataclass
class Run:
    """One teacher-forced pass and one greedy decode of a batch.

    Attributes:
        trace: the recorded attention of the teacher-forced pass.
        probs: ``[B, Tt, V]`` next-token distributions.
        token_acc: share of reference tokens (EOS included, PAD excluded) that are the argmax.
        outputs: greedy outputs as text.
    """

    trace: Trace
    probs: np.ndarray
    token_acc: float
    outputs: list[str]


@dataclass
class MaskExperiment:
    """Before/after of one mask change; see the module docstring."""

    name: str
    texts: list[str]
    before: Run
    after: Run

    def weight_diff(self, kind: str, layer: int) -> np.ndarray:
        """``[B, H, Tq, Tk]`` weights after minus before."""
        return self.after.trace.numpy(kind, layer) - self.before.trace.numpy(kind, layer)

    @property
    def max_weight_change(self) -> dict[tuple[str, int], float]:
        return {k: float(np.abs(self.weight_diff(*k)).max()) for k in self.before.trace.keys()}

    @property
    def max_prob_change(self) -> float:
        """Largest change of any next-token probability (teacher-forced)."""
        return float(np.abs(self.after.probs - self.before.probs).max())

    @property
    def changed_outputs(self) -> int:
        return sum(a != b for a, b in zip(self.before.outputs, self.after.outputs, strict=True))

    def summary(self) -> str:
        return (
            f"{self.name}: teacher-forced token accuracy {self.before.token_acc:.3f} -> "
            f"{self.after.token_acc:.3f}; greedy output changed for {self.changed_outputs} of "
            f"{len(self.texts)} inputs; largest next-token probability change "
            f"{self.max_prob_change:.3f}"
        )


def _references(ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None) -> list[str]:
    if targets is not None:
        if len(targets) != len(texts):
            raise InputError(f"{len(texts)} inputs but {len(targets)} targets")
        return list(targets)
    own = None
    refs = []
    task = get_task(ckpt.task) if ckpt.task in TASKS else None
    for i, text in enumerate(texts):
        try:
            refs.append(task.target(text) if task is not None else None)
        except (KeyError, IndexError, ValueError):  # not an input of the task's own form
            refs.append(None)
        if refs[-1] is None:  # no reference: the model's own output
            own = own or ckpt.predict_batch(texts)
            refs[-1] = own[i]
    return refs


def _greedy(ckpt, src, src_pad, edits, recompute: bool) -> list[str]:
    """Greedy texts; ``recompute`` re-runs the whole prefix each step (no KV cache)."""
    model, tok = ckpt.model, ckpt.tgt_tokenizer
    if not recompute:
        out = greedy_decode(model, src, BOS, EOS, src_pad_mask=src_pad, edits=edits)
        return [tok.decode(row) for row in out.tolist()]
    prefix = torch.full((src.shape[0], 1), BOS, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    with torch.no_grad(), record(model, edits, capture=None):
        for _ in range(default_max_len(model, src.shape[1])):
            nxt = model(src, prefix, src_pad, prefix == PAD)[:, -1].argmax(-1)
            nxt = nxt.masked_fill(done, PAD)
            prefix = torch.cat([prefix, nxt[:, None]], 1)
            done |= nxt == EOS
            if bool(done.all()):
                break
    return [tok.decode(row[1:]) for row in prefix.tolist()]


def _run(ckpt, src, src_pad, tgt_in, tgt_out, edits: Sequence[Edit], recompute: bool) -> Run:
    model = ckpt.model
    with torch.no_grad(), record(model, edits) as trace:
        logits = model(src, tgt_in, src_pad, tgt_in == PAD)  # [B, Tt, V]
    real = tgt_out != PAD
    acc = float(((logits.argmax(-1) == tgt_out) & real).sum() / real.sum())
    probs = as_numpy(logits.float().softmax(-1))
    return Run(trace, probs, acc, _greedy(ckpt, src, src_pad, edits, recompute))


def experiment(
    name: str,
    ckpt: Checkpoint,
    texts: Sequence[str],
    targets: Sequence[str] | None,
    edits: Sequence[Edit] = (),
    blocked: torch.Tensor | None = None,
    recompute: bool = False,
) -> MaskExperiment:
    """Any mix of mask changes in one before/after run (the named experiments use this).

    Args:
        texts: inputs, run as one padded batch; ``targets``: references (default: the task's
            correct outputs, else the model's own).
        edits: edits of the "after" run (e.g. ``DropMask("causal")``).
        blocked: ``[B, Ts]`` bool, source positions to block in the "after" run.
        recompute: greedy decoding recomputes the prefix each step (needed to see the causal
            mask matter; with a KV cache there is no future to attend to).
    """
    texts = list(texts)
    if not texts:
        raise InputError("give at least one input")
    if blocked is not None and any(
        isinstance(e, DropMask) and e.which in ("padding", "both") for e in edits
    ):
        raise InputError(
            "blocked source tokens are blocked through the padding mask, so they cannot be "
            "combined with the padding mask switched off: choose one"
        )
    for text in texts:
        ckpt.encode_source(text)  # empty or too long: refused here, with the limit
    refs = _references(ckpt, texts, targets)
    examples = [Example(t, r) for t, r in zip(texts, refs, strict=True)]
    src, tgt_in, tgt_out = tensorize(examples, ckpt.src_tokenizer, ckpt.tgt_tokenizer, ckpt.device)
    src_pad = src == PAD
    before = _run(ckpt, src, src_pad, tgt_in, tgt_out, (), recompute)
    after_pad = src_pad if blocked is None else src_pad | blocked
    after = _run(ckpt, src, after_pad, tgt_in, tgt_out, edits, recompute)
    return MaskExperiment(name, texts, before, after)


def causal_experiment(
    ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None = None
) -> MaskExperiment:
    """The decoder's causal mask off, teacher-forced on ``targets`` (default: the task's
    correct outputs) and in greedy decoding (prefix recomputed each step)."""
    return experiment("causal mask off", ckpt, texts, targets, [DropMask("causal")], recompute=True)


def padding_experiment(
    ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None = None
) -> MaskExperiment:
    """The padding masks off (every kind and layer) on one padded batch of ``texts``."""
    lengths = {len(ckpt.src_tokenizer.split(t)) for t in texts}
    if len(lengths) < 2:
        raise InputError("give inputs of different lengths, so the batch has padding to unmask")
    return experiment("padding mask off", ckpt, texts, targets, [DropMask("padding")])


def block_source(
    ckpt: Checkpoint, text: str, positions: Sequence[int], target: str | None = None
) -> MaskExperiment:
    """Block source ``positions`` (0-based) of ``text`` from every attention, as if padding."""
    n = len(ckpt.encode_source(text).ids)
    bad = [p for p in positions if not 0 <= p < n]
    if bad or not positions:
        raise InputError(f"choose source positions in 0..{n - 1} to block, got {list(positions)}")
    blocked = torch.zeros(1, n, dtype=torch.bool, device=ckpt.device)
    blocked[0, list(positions)] = True
    name = f"source positions {', '.join(map(str, positions))} blocked"
    return experiment(name, ckpt, [text], None if target is None else [target], blocked=blocked)
