"""The app's model-level panels: checkpoint health, training playback, and export.

Health reports and snapshot files are cached per checkpoint version (they do not depend on
the user); exports are written to a private temporary folder for the download buttons.
"""

from __future__ import annotations

import contextlib
import html
import re
import tempfile
from pathlib import Path

import numpy as np

from .. import analysis
from ..analysis import Inspection
from ..core.devices import as_numpy
from ..core.errors import AttnvizError, InputError
from ..render import plots, report
from ..train.evaluate import dev_pairs
from ..train.induction import best_of
from ..train.snapshots import Snapshots
from . import store
from .decoders import DECODERS
from .kinds import is_encoder_only
from .lab_view import stopped
from .labs import LabView, error_view, started_checkpoint
from .state import (
    SessionState,
    checkpoint_of,
    has_snapshots,
    head_label,
    head_weights,
    layer_index,
)
from .views import pieces_text
from .workers import remote

LEVELS = {"ok": "✓", "info": "ℹ", "warning": "⚠", "error": "✗"}
_HEALTH = store.LRU(16)  # reports by (model, version, device, n)
_SNAPS = store.LRU(16)  # snapshots by (model, version)


# -- health -------------------------------------------------------------------------------------
@remote(stopped)
def health(state: SessionState, extra: str = "", n: int = 100) -> LabView:
    """The health check of the loaded checkpoint (cached per checkpoint file version).

    A checkpoint with a built-in task is checked on ``n`` of its validation inputs; one
    without is checked on the current input plus the lines of ``extra`` (one input a line).

    Returns:
        The report as HTML (problems highlighted) in ``message``, and a figure of every
        head's normalised entropy with its role.
    """
    try:
        ckpt = checkpoint_of(state)
        texts = None if ckpt.task else health_inputs(state, extra)
        key = (state.model, store.version_of(state.model), state.device, n, texts)
        rep = _HEALTH.get(key)
        if rep is None:
            rep = analysis.check(ckpt, texts=texts, n=n, ablation_sample=16)
            _HEALTH.put(key, rep)
    except AttnvizError as exc:
        return error_view(exc)
    items = []
    for f in rep.findings:
        items.append(
            f'<li class="finding {f.level}"><span class="level">{LEVELS[f.level]} {f.level}</span>'
            f" <b>{html.escape(f.check)}</b>: {html.escape(f.message)}</li>"
        )
    verdict = "passed" if rep.passed else "FAILED"
    body = (
        f'<div class="health {"pass" if rep.passed else "fail"}"><p><b>Health check {verdict}</b> '
        f"on {html.escape(rep.inputs)}.</p><ul>{''.join(items)}</ul></div>"
    )
    rows = [s.to_dict() for s in rep.stats]
    fig = plots.head_stats_figure(rows, "norm_entropy")
    return LabView([fig], body, on_input=texts is not None)


#: Dev sources a corpus checkpoint's health check adds to the inputs given.
HEALTH_DEV_SOURCES = 15


def health_inputs(state: SessionState, extra: str = "") -> tuple[str, ...]:
    """Inputs to check a checkpoint without a task on: the current input, each non-empty line
    of ``extra``, then up to :data:`HEALTH_DEV_SOURCES` dev sources a corpus run stored
    beside it (duplicates once): one input alone makes most heads look like they change
    nothing."""
    lines = [state.text.strip(), *(line.strip() for line in (extra or "").splitlines())]
    with contextlib.suppress(AttnvizError):  # no model loaded: the inputs given alone
        lines += [s.strip() for s, _ in dev_pairs(checkpoint_of(state))[:HEALTH_DEV_SOURCES]]
    texts = tuple(dict.fromkeys(t for t in lines if t))
    if not texts:
        raise InputError(
            "this checkpoint names no task, so it is checked on your inputs: type an input "
            "above (and, if you like, more inputs one per line in the box here)"
        )
    return texts


# -- training playback --------------------------------------------------------------------------
def snapshots(state: SessionState) -> Snapshots:
    """The training snapshots of the loaded checkpoint (cached per file version)."""
    if not has_snapshots(state):
        raise InputError("this checkpoint has no attention snapshots (snapshots.safetensors)")
    path = Path(state.model)
    key = (str(path), (path / "snapshots.safetensors").stat().st_mtime_ns)
    snaps = _SNAPS.get(key)
    if snaps is None:
        snaps = Snapshots.load(path)
        _SNAPS.put(key, snaps)
    return snaps


def playback_steps(state: SessionState) -> list[int]:
    """Training steps with a snapshot ([] when the checkpoint has none)."""
    try:
        return list(snapshots(state).steps)
    except AttnvizError:
        return []


@remote(stopped)
def playback(
    state: SessionState, index: int = 0, layer: int | str | None = None, head: str = "mean"
) -> LabView:
    """The probe input's cross-attention at snapshot ``index`` (with loss and output then);
    a decoder-only model's self-attention over its probe sequence. Where the run measured
    induction (the repeat task), a second figure: the scores and each half's loss over
    training, the snapshot shown marked."""
    try:
        snaps = snapshots(state)
        kind = snaps.shown_kind
        layers = sorted(layer for k, layer in snaps.weights if k == kind)
        layer = layer_index(layer, layers)
    except AttnvizError as exc:
        return error_view(exc)
    i = int(np.clip(int(index or 0), 0, len(snaps.steps) - 1))
    w = head_weights(as_numpy(snaps.weights[kind, layer][i]), head)  # [Tq, Tk]
    tok = checkpoint_of(state).tgt_tokenizer
    which = head_label(head)
    title = (
        f"{'cross' if kind == 'cross' else 'self'}-attention L{layer} ({which})<br>"
        f"<sup>at training step {snaps.steps[i]} · loss {snaps.losses[i]:.4f}</sup>"
    )
    if kind == "cross":
        y = [tok.token(checkpoint_of(state).config.bos_id), *snaps.probe_tgt][: w.shape[0]]
        fig = plots.heatmap(w, snaps.probe_src, y, title=title, zmax=1.0)
    else:  # one sequence on both axes, the causal mask grey
        seq = list(snaps.probe_src)[: w.shape[0]]
        blocked = np.triu(np.ones(w.shape, dtype=bool), 1)
        fig = plots.heatmap(w, seq, seq, title=title, zmax=1.0, mask=blocked)
    figs = [fig]
    if snaps.scores:
        figs.append(plots.induction_curves(snaps.steps, snaps.scores, at=i))
    msg = (
        f"Probe input “{html.escape(pieces_text(snaps.probe_src, getattr(tok, 'kind', None)))}” "
        f"at step {snaps.steps[i]} of {snaps.steps[-1]}: loss {snaps.losses[i]:.4f}, "
        f"greedy output “{html.escape(snaps.outputs[i])}”."
    )
    if snaps.scores:
        s = snaps.scores[i]
        best, prev = best_of(s)
        msg += (
            f" Best induction score {best:.2f}, previous-token score "
            f"{prev:.2f}; loss {s['loss_first']:.2f} on the first run of "
            f"random tokens, {s['loss_second']:.2f} on its repeat."
        )
    return LabView(figs, msg)


# -- export -------------------------------------------------------------------------------------
def inspection(state: SessionState) -> Inspection:
    """The current view as an :class:`~attnviz.analysis.Inspection` (the steps shown so far;
    the whole greedy decode when nothing is decoded yet)."""
    ckpt = started_checkpoint(state, "export")
    if state.step == 0:
        return analysis.inspect_text(ckpt, state.text)
    enc = ckpt.encode_source(state.text)  # a decoder-only model's prompt: its framing too
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        return analysis.export.from_stepper(ckpt, state.text, enc, stepper, upto=state.step)


@remote(stopped)
def export(state: SessionState, what: str, unit: str = "pieces") -> LabView:
    """Write the current state as ``"html"`` (offline report), ``"json"`` or ``"npz"``.

    Args:
        unit: ``"pieces"`` or ``"words"`` (the page's pieces | words switch): the attention
            in the file pooled into words, the file name ending ``-words``.
    Returns:
        ``path`` set to the written file (None on error, with the reason in ``message``).
    """
    if what not in ("html", "json", "npz"):
        return error_view(InputError(f"export html, json or npz, not {what!r}"), 0)
    try:
        unit = analysis.export.check_unit(unit)
        ins = inspection(state)
        folder = Path(tempfile.mkdtemp(prefix="export-", dir=store.private_dir("exports")))
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", ins.text)[:32].strip("_") or "input"
        words = "-words" if unit == "words" else ""
        # a sentence read (encoder-only) has no steps: its one pass is what is written
        ckpt = checkpoint_of(state)
        when = "read" if is_encoder_only(ckpt) else f"step{len(ins.out_ids)}"
        path = folder / f"attnviz-{name}-{when}{words}.{what}"
        if what == "html":
            report.write_html(ins, path, ckpt, unit)
        elif what == "json":
            analysis.write_json(ins, path, unit)
        else:
            analysis.write_npz(ins, path, unit)
    except AttnvizError as exc:
        return error_view(exc, 0)
    size = f"{path.stat().st_size / 1024:.1f} KB"
    return LabView([], f"Wrote {path.name} ({size}{', words' if words else ''}).", path=str(path))


__all__ = [
    "export",
    "health",
    "health_inputs",
    "inspection",
    "playback",
    "playback_steps",
    "snapshots",
]
