"""The Training playback panel: the attention on the probe input at each training snapshot (and,
where the run measured them, the induction scores over training); snapshots cached per file
version; no gradio."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from ...core.devices import as_numpy
from ...core.errors import AttnvizError, InputError
from ...core.masks import causal_mask
from ...render import plots
from ...train.induction import best_of
from ...train.snapshots import Snapshots
from ..lab_view import stopped
from ..labs import LabView, error_view
from ..lru import LRU
from ..state import (
    SessionState,
    checkpoint_of,
    has_snapshots,
    head_label,
    head_weights,
    layer_index,
)
from ..views import pieces_text
from ..workers import remote

_SNAPS = LRU(16)  # snapshots by (model, version)


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
        blocked = as_numpy(causal_mask(*w.shape))
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
