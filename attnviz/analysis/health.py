"""Checkpoint health check: leaks, NaN, dead and removable heads, accuracy drift.

:func:`check` runs a checkpoint on its task's validation inputs (or given texts) in padded
batches, lets it greedy-decode, then re-runs each batch teacher-forced on its own output while
recording attention, and checks what the model actually did:

- **padding** (error): attention weight on keys that are padding, from any valid query;
- **causal** (error): decoder self-attention on future positions;
- **finite** (error): NaN or inf in logits, attention weights or head outputs;
- **dead heads** (warning): near-uniform attention, or an output near zero next to its layer;
- **removable heads** (info): heads whose zeroing changes no greedy output and moves no
  next-token probability by more than 0.01 on a sample;
- **accuracy** (warning): the validation exact match stored in the checkpoint vs. measured
  again now on the same examples.

Padding and causal leaks are measured against the true input masks, not the masks the model
recorded, so a model that ignores its masks is caught. ``edits`` runs the whole check under
attention edits (e.g. ``DropMask("padding")``), which is how a broken model is simulated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..devices import as_numpy
from ..errors import InputError
from ..record import Edit, record
from ..tasks import get_task
from ..tokenizer import PAD
from .ablation import greedy_batch, head_effects
from .export import json_default
from .stats import UNIFORM_ENTROPY, HeadStats, head_stats

LEAK_TOLERANCE = 1e-6
SILENT = 0.01  # head output RMS below this share of its layer's mean counts as silent
NO_EFFECT = 0.01  # largest next-token probability change of a removable head


@dataclass(frozen=True)
class Finding:
    """One line of the report. ``level``: ``"ok"``, ``"info"``, ``"warning"`` or ``"error"``."""

    check: str
    level: str
    message: str
    details: dict = field(default_factory=dict)


@dataclass
class HealthReport:
    """Findings of :func:`check`; ``passed`` is False when any finding is an error."""

    checkpoint: str
    inputs: str
    findings: list[Finding]
    stats: list[HeadStats]

    @property
    def passed(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "inputs": self.inputs,
            "passed": self.passed,
            "findings": [asdict(f) for f in self.findings],
            "head_stats": [s.to_dict() for s in self.stats],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=json_default)

    def text(self) -> str:
        """The report as lines a person reads top to bottom."""
        tags = {"ok": "ok", "info": "info", "warning": "WARN", "error": "ERROR"}
        lines = [f"health check of {self.checkpoint}", f"  inputs: {self.inputs}"]
        lines += [f"  [{tags[f.level]:>5}] {f.check}: {f.message}" for f in self.findings]
        lines.append(f"  verdict: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)


def _leaks(trace, src_pad: np.ndarray, tgt_pad: np.ndarray) -> dict[str, dict]:
    """Largest weight on padded keys / future keys per (kind, layer), over valid queries."""
    sides = {
        "encoder_self": (src_pad, src_pad),
        "decoder_self": (tgt_pad, tgt_pad),
        "cross": (tgt_pad, src_pad),
    }
    pad, future = {}, {}
    for kind, layer in trace.keys():
        w = trace.numpy(kind, layer, "weights")  # [B, H, Tq, Tk]
        q_pad, k_pad = sides[kind]
        rows = ~q_pad[:, None, :]  # [B, 1, Tq]
        on_pad = (w * k_pad[:, None, None, :]).sum(-1)  # [B, H, Tq]
        pad[f"{kind} L{layer}"] = float(np.where(rows, on_pad, 0).max())
        if kind == "decoder_self":
            ahead = np.triu(np.ones(w.shape[-2:], bool), 1)
            on_future = (w * ahead).sum(-1)
            future[f"{kind} L{layer}"] = float(np.where(rows, on_future, 0).max())
    return {"padding": pad, "causal": future}


def check(
    ckpt: Checkpoint,
    texts: Sequence[str] | None = None,
    n: int = 200,
    edits: Sequence[Edit] = (),
    ablation_sample: int = 32,
    batch_size: int = 64,
) -> HealthReport:
    """Run the health check (see the module docstring).

    Args:
        ckpt: a loaded checkpoint.
        texts: inputs to run; default ``n`` validation inputs of the checkpoint's task.
        edits: attention edits applied to every pass (to simulate a broken model).
        ablation_sample: inputs used to find removable heads (0 skips that check).
    """
    if n < 1 or (texts is not None and not list(texts)):
        raise InputError("check needs at least one input (--n 1 or more)")
    task = get_task(ckpt.task) if ckpt.task else None
    examples = None
    if texts is None:
        if task is None:
            raise InputError("this checkpoint names no task: give inputs to check it on")
        examples = task.examples("validation", n, seed=0)
        texts = [e.src for e in examples]
        inputs = f"{len(texts)} validation inputs of task {task.name!r}, in padded batches of {batch_size}"
    else:
        inputs = f"{len(texts)} given inputs, in padded batches of {batch_size}"
    model = ckpt.model
    findings: list[Finding] = []
    texts = list(texts)
    batches = [
        greedy_batch(ckpt, texts[i : i + batch_size], edits)
        for i in range(0, len(texts), batch_size)
    ]
    worst = {"padding": {}, "causal": {}}
    nonfinite: list[str] = []
    rms: dict[tuple[str, int], list[np.ndarray]] = {}
    traces = []
    with torch.no_grad():
        for b in batches:
            src_pad, tgt_pad = b.src == PAD, b.tgt_in == PAD
            with record(model, edits, capture=("weights", "mask", "head_output")) as trace:
                logits = model(b.src, b.tgt_in, src_pad, tgt_pad)
            traces.append((trace, src_pad, tgt_pad))
            if not torch.isfinite(logits).all():
                nonfinite.append("logits")
            for kind, layer in trace.keys():
                for what in ("weights", "head_output"):
                    if not torch.isfinite(getattr(trace.get(kind, layer), what)).all():
                        nonfinite.append(f"{kind} L{layer} {what}")
                ho = trace.head_output(kind, layer)  # [B, H, Tq, Dh]
                rms.setdefault((kind, layer), []).append(as_numpy(ho.pow(2).mean((0, 2, 3)).sqrt()))
            for name, per_site in _leaks(
                trace, as_numpy(src_pad).astype(bool), as_numpy(tgt_pad).astype(bool)
            ).items():
                for site, value in per_site.items():
                    worst[name][site] = max(worst[name].get(site, 0.0), value)

    for name, what in (("padding", "padded keys"), ("causal", "future positions")):
        bad = {s: v for s, v in worst[name].items() if v > LEAK_TOLERANCE}
        if bad:
            site, value = max(bad.items(), key=lambda kv: kv[1])
            findings.append(
                Finding(
                    name,
                    "error",
                    f"attention on {what} in {', '.join(bad)} "
                    f"(up to {value:.3f} of a row's weight, in {site})",
                    bad,
                )
            )
        else:
            findings.append(
                Finding(
                    name,
                    "ok",
                    f"no attention on {what} (largest {max(worst[name].values(), default=0.0):.1e})",
                )
            )
    if nonfinite:
        findings.append(
            Finding("finite", "error", f"NaN or inf in {', '.join(sorted(set(nonfinite)))}")
        )
    else:
        findings.append(
            Finding("finite", "ok", "no NaN or inf in logits, attention weights or head outputs")
        )

    # statistics over the first batch with padding (the trace keeps every head)
    trace, src_pad, tgt_pad = traces[0]
    stats = head_stats(trace, src_pad, tgt_pad)
    findings.append(_dead_heads(stats, rms))
    if ablation_sample:
        findings.append(_removable_heads(ckpt, list(texts)[:ablation_sample], edits))
    if examples is not None:
        findings.append(_accuracy(ckpt, task, edits))
    return HealthReport(str(ckpt.path), inputs, findings, stats)


def _dead_heads(stats: list[HeadStats], rms: dict) -> Finding:
    dead = {}
    for s in stats:
        if s.norm_entropy >= UNIFORM_ENTROPY:  # the same rule that names it "uniform/dead"
            dead[f"{s.kind} L{s.layer} H{s.head}"] = (
                f"uniform (normalised entropy {s.norm_entropy:.2f})"
            )
    for (kind, layer), parts in rms.items():
        r = np.mean(parts, 0)  # [H]
        for h, value in enumerate(r):
            if value < SILENT * r.mean():
                dead[f"{kind} L{layer} H{h}"] = (
                    f"silent (output {value / r.mean():.1%} of its layer's mean)"
                )
    if dead:
        return Finding(
            "dead heads", "warning", "; ".join(f"{k} {v}" for k, v in dead.items()), dead
        )
    return Finding("dead heads", "ok", "no uniform or silent heads")


def _removable_heads(ckpt: Checkpoint, texts: list[str], edits: Sequence[Edit]) -> Finding:
    effects = head_effects(ckpt, texts, edits=edits)
    removable = [e.site for e in effects if not e.changed_outputs and e.max_prob_change < NO_EFFECT]
    if removable:
        return Finding(
            "removable heads",
            "info",
            f"{len(removable)} of {len(effects)} heads change nothing when zeroed "
            f"on {len(texts)} inputs: {', '.join(removable)}",
            {"heads": removable},
        )
    return Finding(
        "removable heads", "ok", f"every head changes the output when zeroed ({len(texts)} inputs)"
    )


def _accuracy(ckpt: Checkpoint, task, edits: Sequence[Edit]) -> Finding:
    from ..train import evaluate

    recorded = (ckpt.meta.get("metrics") or {}).get("val_exact_match")
    n = (ckpt.meta.get("metrics") or {}).get("n", 500)
    with record(ckpt.model, edits, capture=None):
        now = evaluate(
            ckpt.model,
            task.examples("validation", n, seed=0),
            ckpt.src_tokenizer,
            ckpt.tgt_tokenizer,
        )
    measured = now["val_exact_match"]
    if recorded is None:
        return Finding(
            "accuracy", "info", f"validation exact match {measured:.4f} (none recorded)", now
        )
    details = {"recorded": recorded, "measured": measured, "n": n}
    if abs(measured - recorded) > 0.01:
        return Finding(
            "accuracy",
            "warning",
            f"recorded validation exact match {recorded:.4f}, measured now {measured:.4f}",
            details,
        )
    return Finding(
        "accuracy",
        "ok",
        f"validation exact match {measured:.4f} as recorded ({recorded:.4f}, {n} inputs)",
        details,
    )
