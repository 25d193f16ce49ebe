"""Per-user actions of the app: plain Python, no gradio (unit-tested without a browser).

The state (:class:`~attnviz.app.state.SessionState`) is small and deep-copyable, never a
model or a tensor; see :mod:`attnviz.app.state` for the shared model and stepper caches and
:mod:`attnviz.app.views` for what the page shows. The experiment panels (mask lab, ablation,
attribution, health, playback, export) are in :mod:`attnviz.app.labs` and
:mod:`attnviz.app.panels`.

Every action takes a state and returns a :class:`DecodeView`: the new state plus everything
the page shows. A user error (bad input, bad file) never raises: it comes back as
``view.message`` with the previous state kept.
"""

from __future__ import annotations

import dataclasses
import html
import statistics
import time
import uuid
from collections.abc import Callable

import numpy as np
import torch

from ..decoding import beam_search, default_max_len
from ..errors import AttnvizError, InputError
from ..model import KINDS
from ..tokenizer import BOS, EOS
from . import models
from .state import (
    _STEP_LOCK,
    _STEPPERS,
    DecodeView,
    SessionState,
    checkpoint,
    layer_count,
    new_state,
    synced_stepper,
)
from .views import render

__all__ = [
    "DecodeView",
    "SessionState",
    "back",
    "beam",
    "bench_step",
    "choose_model",
    "goto",
    "new_state",
    "open_head",
    "render",
    "reset",
    "run",
    "set_model_kind",
    "set_view",
    "start",
    "step",
    "upload_model",
]


def choose_model(state: SessionState, model: str) -> DecodeView:
    """Switch to another checkpoint (a shipped name or a folder); the input is kept."""
    shipped = models.shipped_models()
    path = shipped.get(model, model)
    new = dataclasses.replace(new_state(path, state.device), text=state.text, sid=state.sid)

    def act(s: SessionState) -> SessionState:
        checkpoint(s)  # load now: a broken file is reported here, not at the first step
        return _start_state(s, s.text) if s.text.strip() else s

    return _guard(new, act, fallback=state)


def upload_model(state: SessionState, paths: list[str]) -> DecodeView:
    """Load an uploaded checkpoint (a folder's files or one .zip); refused with a message."""

    def act(s: SessionState) -> SessionState:
        folder, _ = models.import_upload(paths, s.device)
        new = dataclasses.replace(new_state(folder, s.device), text=s.text, sid=s.sid)
        return _start_state(new, new.text) if new.text.strip() else new

    return _guard(state, act)


# -- actions ------------------------------------------------------------------------------------
def _start_state(state: SessionState, text: str) -> SessionState:
    ckpt = checkpoint(state)
    if not (text or "").strip():
        raise InputError("the input is empty: type something (or pick an example) first")
    enc = ckpt.encode_source(text)  # InputError: empty or too long
    return dataclasses.replace(
        state,
        sid=state.sid or uuid.uuid4().hex,
        text=text,
        src_ids=list(enc.ids),
        src_pieces=list(enc.pieces),
        unknown=list(enc.unknown),
        tokens=[],
        step=0,
        max_steps=default_max_len(ckpt.model, len(enc.ids)),
        version=models.version_of(state.model),
    )


def start(state: SessionState, text: str) -> DecodeView:
    """Encode ``text`` and get ready to decode (nothing decoded yet)."""
    return _guard(state, lambda s: _start_state(s, text))


def _ensure(state: SessionState, text: str | None) -> SessionState:
    """Start on ``text`` when it is new (the Step button works right after typing)."""
    if text is not None and (not state.started or text != state.text):
        return _start_state(state, text)
    if not state.started:
        raise InputError("type an input first (or pick an example), then press Step")
    return state


def step(state: SessionState, text: str | None = None) -> DecodeView:
    """One greedy token further (replayed from history after Back, otherwise decoded)."""

    def act(s: SessionState) -> SessionState:
        s = _ensure(s, text)
        if s.done:
            raise InputError("the output is complete (EOS): press Back, Reset or scrub")
        if s.step < len(s.tokens):
            return dataclasses.replace(s, step=s.step + 1)
        ckpt = checkpoint(s)
        with _STEP_LOCK:
            stepper = synced_stepper(s, ckpt)
            token = stepper.step().token
        return dataclasses.replace(s, tokens=[*s.tokens, token], step=s.step + 1)

    return _guard(state, act)


def run(state: SessionState, text: str | None = None) -> DecodeView:
    """Decode to EOS (or the length limit) from where the view is."""

    def act(s: SessionState) -> SessionState:
        s = _ensure(s, text)
        ckpt = checkpoint(s)
        with _STEP_LOCK:
            stepper = synced_stepper(s, ckpt)
            tokens = stepper.run()
        return dataclasses.replace(s, tokens=list(tokens), step=len(tokens))

    return _guard(state, act)


def back(state: SessionState) -> DecodeView:
    """One step back (the later tokens are kept for stepping forward again)."""
    return _guard(state, lambda s: dataclasses.replace(s, step=max(0, s.step - 1)))


def reset(state: SessionState) -> DecodeView:
    """Back to the start of decoding this input (nothing decoded)."""
    return _guard(state, lambda s: dataclasses.replace(s, tokens=[], step=0))


def goto(state: SessionState, position: int) -> DecodeView:
    """Show the first ``position`` decoded tokens (the step slider)."""
    pos = int(np.clip(int(position or 0), 0, len(state.tokens)))
    return _guard(state, lambda s: dataclasses.replace(s, step=pos))


def set_view(state: SessionState, kind: str, layer: str | int, head: str) -> DecodeView:
    """Choose layer (``"L1"`` or 1) and head (``"mean"``, ``"all heads"``, ``"H2"``) of a kind."""
    if kind not in KINDS:
        return _guard(state, lambda s: _raise(InputError(f"unknown attention kind {kind!r}")))
    layer_i = int(str(layer).lstrip("L") or 0)
    view = {**state.view, kind: [layer_i, str(head)]}
    return _guard(state, lambda s: dataclasses.replace(s, view=view))


def set_model_kind(state: SessionState, kind: str) -> DecodeView:
    """Which attention kind the layers x heads model view shows."""
    if kind not in KINDS:
        return _guard(state, lambda s: _raise(InputError(f"unknown attention kind {kind!r}")))
    return _guard(state, lambda s: dataclasses.replace(s, model_kind=kind))


def open_head(state: SessionState, site: str) -> DecodeView:
    """Open one head of the model view (``"cross L1 H2"``) in its kind's heatmap."""
    try:
        kind, layer, head = site.split()
    except (AttributeError, ValueError):
        return _guard(state, lambda s: _raise(InputError(f"not a head: {site!r}")))
    return set_view(state, kind, layer, head)


def head_sites(state: SessionState, kind: str | None = None) -> list[str]:
    """``["cross L0 H0", ...]``: every head of ``kind`` (default: the model view's kind)."""
    ckpt = checkpoint(state)
    kind = kind or state.model_kind
    return [
        f"{kind} L{i} H{h}"
        for i in range(layer_count(ckpt, kind))
        for h in range(ckpt.config.n_heads)
    ]


def beam(state: SessionState, beam_size: int = 4) -> str:
    """Markdown comparing the greedy output with beam search's best hypothesis."""
    try:
        s = _ensure(state, None)
        ckpt = checkpoint(s)
        src = torch.tensor([s.src_ids], device=ckpt.device)
        best = beam_search(ckpt.model, src, BOS, EOS, beam_size=int(beam_size))[0]
        greedy = ckpt.predict(s.text)
    except AttnvizError as exc:
        return f"⚠️ {html.escape(str(exc))}"
    text = ckpt.tgt_tokenizer.decode(best.tokens)
    same = "the same as" if text == greedy else "**different from**"
    return (
        f"Beam search (beam {int(beam_size)}): **{html.escape(text)}** "
        f"(log-prob {best.score:.3f}, per token {best.normalized_score:.3f}) — {same} greedy "
        f"**{html.escape(greedy)}**."
    )


def _raise(exc: Exception):
    raise exc


def _guard(
    state: SessionState,
    act: Callable[[SessionState], SessionState],
    fallback: SessionState | None = None,
) -> DecodeView:
    """Run ``act``; a user error becomes the message and the previous state stays.

    If the checkpoint file was rewritten since decoding started, decoding restarts first.
    """
    notice = None
    try:
        if state.started and state.version != models.version_of(state.model):
            state = _start_state(state, state.text)
            notice = "The checkpoint changed on disk: decoding restarted with the new weights."
        new = act(state)
    except AttnvizError as exc:
        keep = fallback or state
        return render(keep, message=f"⚠️ {html.escape(str(exc))}")
    return render(new, message=notice) if notice else render(new)


# -- measuring ----------------------------------------------------------------------------------
def bench_step(ckpt_path: str, text: str, repeats: int = 20) -> float:
    """Median seconds of one Step, figure building included (view rendered from scratch).

    Each repeat starts ``text`` afresh, decodes all but the last token, then times the last
    Step with a cold stepper cache half the time (rebuild by forcing) — the realistic mix.
    """
    state = start(new_state(ckpt_path), text).state
    full = run(state).state
    n = len(full.tokens)
    times = []
    for i in range(repeats):
        s = dataclasses.replace(full, tokens=full.tokens[: n - 1], step=n - 1)
        if i % 2:
            with _STEP_LOCK:
                _STEPPERS.pop(s.sid, None)
        t0 = time.perf_counter()
        view = step(s)
        for fig in view.figures.values():
            fig.to_json()  # what gradio does with every figure
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
