"""Checkpoint health check: accuracy, task pattern, leaks, NaN, dead and removable heads.

:func:`check` runs a checkpoint on its task's validation inputs (or given texts) in padded
batches, lets it greedy-decode, then re-runs each batch teacher-forced on its own output while
recording attention, and checks what the model actually did:

- **padding** (error): attention weight on keys that are padding, from any valid query;
- **causal** (error): decoder self-attention on future positions (an encoder-only model has
  no causal mask: named as not applying);
- **finite** (error): NaN or inf in logits, attention weights or head outputs;
- **dead heads** (warning): near-uniform attention or an output near zero next to its layer,
  *and* zeroing the head changes nothing. A uniform-looking head whose zeroing moves outputs
  is reported as **broad** (info): it is needed; one that only moves probabilities, changing
  no output, as **weak** (info). Without the ablation run nothing is called
  dead (info: uniform-looking, not ablated);
- **removable heads** (info): heads whose zeroing changes no greedy output and moves no
  next-token probability by more than 0.01 on a sample;
- **accuracy** (error below 0.5, warning below 0.95): greedy exact match against the task's
  true targets, per source length (checkpoints that name a built-in task);
- **task pattern** (warning when missing): the attention pattern the task needs, e.g. a
  cross-attention head on the mirrored source position for reversal, the same position for
  copying;
- **recorded accuracy** (warning): the validation exact match stored in the checkpoint vs.
  measured again now on the same examples.

An encoder-only model (BERT) is read in one pass a batch: its output is its top filler at each
mask token, or its prediction of each token of a sentence without one
(:func:`~attnviz.analysis.ablation.greedy_batch`); sinks count weight on [CLS] (the first
token) and [SEP].

Padding and causal leaks are measured against the true input masks, not the masks the model
recorded, so a model that ignores its masks is caught. ``edits`` runs the whole check under
attention edits (e.g. ``DropMask("padding")``), which is how a broken model is simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import InputError, count
from ..core.masks import causal_mask
from ..core.record import Edit, record
from ..core.sites import head_name
from ..data.tasks import Task, get_task
from .ablation import HeadEffect, greedy_batch, head_effects
from .export import dumps, key_stats
from .masked_lm import task_input
from .stats import (
    BROAD_ROLE,
    PATTERN_SHARE,
    SINK_SHARE,
    UNIFORM_ENTROPY,
    HeadStats,
    changes_nothing,
    sink_heads,
    with_ablation,
)

LEAK_TOLERANCE = 1e-6
SILENT = 0.01  # head output RMS below this share of its layer's mean counts as silent
ACCURACY_ERROR = 0.5  # exact match below this against true targets is an error
ACCURACY_WARNING = 0.95  # ... and below this a warning
#: Role of a uniform-looking head whose zeroing moves probabilities but changes no output.
WEAK_ROLE = "weak head (uniform, moves p only)"
#: The causal finding of a model without decoder self-attention (encoder-only).
NO_CAUSAL = (
    "does not apply: an encoder-only model reads the whole sentence both ways, with no causal "
    "mask to leak through"
)
#: Per task: (attention kind, statistic, what the pattern is) the task cannot be done without.
TASK_PATTERNS = {
    "reverse": ("cross", "anti_diagonal", "the mirrored source position"),
    "copy": ("cross", "diagonal", "the same source position"),
}


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
        return dumps(self.to_dict(), indent=2)

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
            ahead = as_numpy(causal_mask(*w.shape[-2:]))  # [Tq, Tk], True = future
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
        n: validation inputs to run (without ``texts``). The exact match against the task's
            targets uses the validation examples the recorded exact match used (``n`` when
            none is recorded), so the two compare directly.
        edits: attention edits applied to every pass (to simulate a broken model).
        ablation_sample: inputs used to zero each head (0 skips it; then no head is called
            dead or removable).
    Returns:
        the findings and the head statistics (roles refined by the ablation when it ran).
    """
    if n < 1 or (texts is not None and not list(texts)):
        raise InputError("check needs at least one input (--n 1 or more)")
    task = get_task(ckpt.task) if ckpt.task else None
    if texts is None:
        if task is None:
            raise InputError("this checkpoint names no task: give inputs to check it on")
        examples = task.examples("validation", n, seed=0)
        texts = [task_input(ckpt, e.src, e.tgt) for e in examples]  # as trained to read
        inputs = f"{count(len(texts), 'validation input')} of task {task.name!r}"
    else:
        inputs = count(len(texts), "given input")
    inputs += f", in padded batches of {batch_size}"
    if task is not None and (size := _accuracy_size(ckpt, n)) != len(texts):
        # the exact match runs on the examples the recorded score used: say so up front
        inputs += f"; exact match on {count(size, 'validation input')}, as recorded"
    model = ckpt.model
    findings: list[Finding] = []
    texts = list(texts)
    worst: dict[str, dict[str, float]] = {"padding": {}, "causal": {}}
    nonfinite: list[str] = []
    rms: dict[tuple[str, int], list[np.ndarray]] = {}
    stats: list[HeadStats] = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            b = greedy_batch(ckpt, texts[i : i + batch_size], edits)
            with record(model, edits, capture=("weights", "mask", "head_output")) as trace:
                logits = b.forward(model)  # [B, Tt, V]
            # a one-stack batch (decoder-only, encoder-only): its queries and keys are the inputs
            tgt_in, tgt_pad = (b.src, b.src_pad) if b.one_stack else (b.tgt_in, b.tgt_pad)
            if not stats:  # statistics over the first batch (the trace keeps every head)
                stats = key_stats(ckpt, trace, as_numpy(b.src), as_numpy(tgt_in),
                                  b.src_pad, tgt_pad)  # fmt: skip
            if not torch.isfinite(logits).all():
                nonfinite.append("logits")
            for kind, layer in trace.keys():
                for what in ("weights", "head_output"):
                    if not torch.isfinite(getattr(trace.get(kind, layer), what)).all():
                        nonfinite.append(f"{kind} L{layer} {what}")
                ho = trace.head_output(kind, layer)  # [B, H, Tq, Dh]
                rms.setdefault((kind, layer), []).append(as_numpy(ho.pow(2).mean((0, 2, 3)).sqrt()))
            for name, per_site in _leaks(trace, as_numpy(b.src_pad), as_numpy(tgt_pad)).items():
                for site, value in per_site.items():
                    worst[name][site] = max(worst[name].get(site, 0.0), value)

    if task is not None:
        findings += _accuracy(ckpt, task, n, edits)
        findings.append(_task_pattern(task, stats))
    else:
        findings.append(
            Finding("accuracy", "info", "the checkpoint names no task: no true targets to compare")
        )
    findings += _leak_findings(worst)
    if nonfinite:
        findings.append(
            Finding("finite", "error", f"NaN or inf in {', '.join(sorted(set(nonfinite)))}")
        )
    else:
        findings.append(
            Finding("finite", "ok", "no NaN or inf in logits, attention weights or head outputs")
        )
    effects = None
    if ablation_sample:
        effects = head_effects(ckpt, texts[:ablation_sample], edits=edits)
        stats = _weak_roles(with_ablation(stats, effects), effects)
    findings += _dead_heads(stats, rms, effects, min(ablation_sample, len(texts)))
    findings.append(_sinks(stats))
    if effects is not None:
        findings.append(_removable_heads(effects, min(ablation_sample, len(texts))))
    return HealthReport(str(ckpt.path), inputs, findings, stats)


def _weak_roles(stats: list[HeadStats], effects: list[HeadEffect]) -> list[HeadStats]:
    """A broad head whose zeroing changes no output is not "needed": call it weak."""
    by_site = {e.site: e for e in effects}
    return [
        replace(s, role=WEAK_ROLE)
        if s.role == BROAD_ROLE and not by_site[head_name(s.kind, s.layer, s.head)].changed_outputs
        else s
        for s in stats
    ]


def _leak_findings(worst: dict[str, dict[str, float]]) -> list[Finding]:
    out = []
    for name, what in (("padding", "padded keys"), ("causal", "future positions")):
        if not worst[name] and name == "causal":  # nothing measured: no decoder self-attention
            out.append(Finding(name, "info", NO_CAUSAL))
            continue
        bad = {s: v for s, v in worst[name].items() if v > LEAK_TOLERANCE}
        if bad:
            site, value = max(bad.items(), key=lambda kv: kv[1])
            message = (
                f"attention on {what} in {', '.join(bad)} "
                f"(up to {value:.3f} of a row's weight, in {site})"
            )
            out.append(Finding(name, "error", message, bad))
        else:
            largest = max(worst[name].values(), default=0.0)
            out.append(Finding(name, "ok", f"no attention on {what} (largest {largest:.1e})"))
    return out


def _effect_words(e: HeadEffect, n: int) -> str:
    return (
        f"zeroing it changes {e.changed_outputs} of {count(n, 'output')}, "
        f"moves a token's probability by up to {e.max_prob_change:.2f}"
    )


def _dead_heads(
    stats: list[HeadStats], rms: dict, effects: list[HeadEffect] | None, n_ablated: int
) -> list[Finding]:
    """Dead = looks unused (uniform or silent) and zeroing it changes nothing."""
    looks: dict[str, str] = {}
    for s in stats:
        if s.norm_entropy >= UNIFORM_ENTROPY:
            looks[head_name(s.kind, s.layer, s.head)] = (
                f"uniform-looking (normalised entropy {s.norm_entropy:.2f})"
            )
    for (kind, layer), parts in rms.items():
        r = np.mean(parts, 0)  # [H]
        for h, value in enumerate(r):
            if value < SILENT * r.mean():
                looks[head_name(kind, layer, h)] = (
                    f"silent (output {value / r.mean():.1%} of its layer's mean)"
                )
    if effects is None:
        if not looks:
            return [Finding("dead heads", "ok", "no uniform or silent heads")]
        return [
            Finding(
                "dead heads",
                "info",
                f"{count(len(looks), 'head')} {_verb(len(looks), 'look')} unused but "
                f"{'was' if len(looks) == 1 else 'were'} not zeroed (ablation sample 0), so "
                "none is called dead: " + "; ".join(f"{k} {v}" for k, v in looks.items()),
                looks,
            )
        ]
    by_site = {e.site: e for e in effects}
    dead = {k: v for k, v in looks.items() if k in by_site and changes_nothing(by_site[k])}
    moving = {k: by_site[k] for k in looks if k in by_site and not changes_nothing(by_site[k])}
    # "needed" only where zeroing changes an output; a head that only moves probabilities
    # is not dead, but is not needed for the output either
    broad = {
        k: f"{looks[k]}, but {_effect_words(e, n_ablated)}"
        for k, e in moving.items()
        if e.changed_outputs
    }
    nudging = {
        k: f"{looks[k]}, zeroing it changes none of {count(n_ablated, 'output')} but moves a token's "
        f"probability by up to {e.max_prob_change:.2f}"
        for k, e in moving.items()
        if not e.changed_outputs
    }
    out = []
    if dead:
        out.append(
            Finding(
                "dead heads",
                "warning",
                f"{count(len(dead), 'head')} {_verb(len(dead), 'look')} unused and zeroing each "
                f"changes nothing on "
                f"{count(n_ablated, 'input')}: " + "; ".join(f"{k} {v}" for k, v in dead.items()),
                dead,
            )
        )
    else:
        out.append(Finding("dead heads", "ok", "no head both looks unused and changes nothing"))
    if broad:
        out.append(
            Finding(
                "broad heads",
                "info",
                "uniform-looking but needed: " + "; ".join(f"{k} {v}" for k, v in broad.items()),
                broad,
            )
        )
    if nudging:
        out.append(
            Finding(
                "weak heads",
                "info",
                "uniform-looking, needed for no output, yet not dead: "
                + "; ".join(f"{k} {v}" for k, v in nudging.items()),
                nudging,
            )
        )
    return out


def _removable_heads(effects: list[HeadEffect], n: int) -> Finding:
    removable = [e.site for e in effects if changes_nothing(e)]
    if removable:
        return Finding(
            "removable heads",
            "info",
            f"{len(removable)} of {count(len(effects), 'head')} change nothing when zeroed "
            f"on {count(n, 'input')}: {', '.join(removable)}",
            {"heads": removable},
        )
    return Finding(
        "removable heads", "ok", f"every head changes the output when zeroed ({count(n, 'input')})"
    )


def _verb(n: int, verb: str) -> str:
    """A present-tense verb agreeing with ``n`` things: "1 head looks", "2 heads look"."""
    return verb + "s" if n == 1 else verb


def _accuracy_size(ckpt: Checkpoint, n: int) -> int:
    """Validation examples the exact match runs on: those the recorded score used, else ``n``."""
    metrics = ckpt.meta.get("metrics") or {}
    return int(metrics.get("n", n)) if metrics.get("val_exact_match") is not None else n


def _accuracy(ckpt: Checkpoint, task: Task, n: int, edits: Sequence[Edit]) -> list[Finding]:
    """Greedy exact match against the task's true targets, per source length, and against
    the exact match recorded at training time (measured on the same validation examples)."""
    recorded = (ckpt.meta.get("metrics") or {}).get("val_exact_match")
    size = _accuracy_size(ckpt, n)
    examples = task.examples("validation", size, seed=0)
    with record(ckpt.model, edits, capture=None):
        outputs = ckpt.task_outputs(examples)
    tally: dict[int, list[int]] = {}
    for example, output in zip(examples, outputs, strict=True):
        right_n = tally.setdefault(task.length_of(example.src), [0, 0])
        right_n[0] += output == example.tgt
        right_n[1] += 1
    by_length = dict(sorted(tally.items()))
    exact = sum(r for r, _ in by_length.values()) / len(examples)
    breakdown = ", ".join(f"{length}: {r}/{m}" for length, (r, m) in by_length.items())
    details = {
        "exact_match": exact,
        "n": len(examples),
        "by_length": {str(k): {"right": r, "n": m} for k, (r, m) in by_length.items()},
    }
    level = "error" if exact < ACCURACY_ERROR else "warning" if exact < ACCURACY_WARNING else "ok"
    why = {
        "error": f" (below {ACCURACY_ERROR}: the model does not do its task)",
        "warning": f" (below {ACCURACY_WARNING})",
        "ok": "",
    }[level]
    message = (
        f"{'filled-in' if ckpt.config.encoder_only else 'greedy'} exact match "
        f"{exact:.3f} against the task's true targets on {len(examples)} "
        f"validation {'input' if len(examples) == 1 else 'inputs'}{why}; right by source length: {breakdown}"
    )
    return [Finding("accuracy", level, message, details), _recorded(recorded, exact, examples)]


def _sinks(stats: list[HeadStats]) -> Finding:
    """Heads that park most of their weight on start, end, punctuation or first tokens."""
    sinks = sink_heads(stats)
    if not sinks:
        return Finding("sinks", "ok", f"no head puts {SINK_SHARE:.0%} or more of its weight on "
                       "start, end, punctuation or first tokens")  # fmt: skip
    names = "; ".join(f"{head_name(s.kind, s.layer, s.head)} ({s.sink:.2f})" for s in sinks)
    return Finding(
        "sinks",
        "info",
        f"{count(len(sinks), 'head')} {_verb(len(sinks), 'put')} most of their weight on start, end, punctuation or first "
        f"tokens (a sink: read their maps with care, the weight there carries little): {names}",
        {head_name(s.kind, s.layer, s.head): round(s.sink, 4) for s in sinks},
    )


def _task_pattern(task: Task, stats: list[HeadStats]) -> Finding:
    """Whether some head has the attention pattern the task needs (when the task has one)."""
    if task.name not in TASK_PATTERNS:
        return Finding(
            "task pattern", "info", f"task {task.name!r} needs no fixed positional pattern"
        )
    kind, metric, where = TASK_PATTERNS[task.name]
    if kind == "cross" and not any(s.kind == "cross" for s in stats):
        return Finding(
            "task pattern", "info",
            f"{task.name}'s pattern is read from cross-attention, which a one-stack model "
            "does not have (its source and output are one sequence)",
        )  # fmt: skip
    mine = [s for s in stats if s.kind == kind and np.isfinite(getattr(s, metric))]
    if not mine:
        return Finding("task pattern", "warning", f"no {kind} heads were measured")
    best = max(mine, key=lambda s: getattr(s, metric))
    share = float(getattr(best, metric))
    site = head_name(best.kind, best.layer, best.head)
    details = {"head": site, metric: share, "needed": PATTERN_SHARE}
    if share >= PATTERN_SHARE:
        return Finding(
            "task pattern",
            "ok",
            f"{task.name} needs a {kind} head on {where}: {site} puts {share:.2f} of its "
            "weight there",
            details,
        )
    return Finding(
        "task pattern",
        "warning",
        f"{task.name} needs a {kind} head on {where}, and none has it: the best, {site}, "
        f"puts {share:.2f} of its weight there (a head with the pattern puts {PATTERN_SHARE} "
        "or more)",
        details,
    )


def _recorded(recorded: float | None, measured: float, examples: list) -> Finding:
    """The exact match stored at training time vs. measured now on the same examples."""
    if recorded is None:
        return Finding("recorded accuracy", "info", "no validation exact match was recorded")
    n = len(examples)
    details = {"recorded": recorded, "measured": measured, "n": n}
    if abs(measured - recorded) > 0.01:
        return Finding(
            "recorded accuracy",
            "warning",
            f"recorded validation exact match {recorded:.4f}, measured now {measured:.4f} "
            f"on the same {count(n, 'input')}",
            details,
        )
    return Finding(
        "recorded accuracy",
        "ok",
        f"validation exact match {measured:.4f} as recorded ({recorded:.4f}, {count(n, 'input')})",
        details,
    )
