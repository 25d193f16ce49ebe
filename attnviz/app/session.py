"""Per-user actions of the app: plain Python, no gradio (unit-tested without a browser).

An action runs in one pass: the checkpoint and its file's version are read once
(:func:`_open`; a decode whose file changed on disk restarts), the state changes (pure, may be
refused), then, under the session's own lock, the decoder is synced once and, for the actions
that decode (:func:`step`, :func:`run`, :func:`continue_beam`), called right there; the rows
the page lacks are taken as the decoder kept them, and :func:`attnviz.app.views.render` turns
state + rows into what the page shows, the page's payload built once.

Every action takes a state and returns a :class:`DecodeView`: the new state plus everything
the page shows. A user error (bad input, bad file) never raises: it comes back as
``view.message`` with the previous state kept (or, for a refused new input, a cleared view).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from ..checkpoint import Checkpoint
from ..core.errors import AttnvizError, InputError, shorten
from ..core.model import KINDS
from ..data.tokenizer import check_token_id
from ..decode.greedy import GreedyStepper
from ..train.evaluate import expected_output
from . import inputs, reading, speech, store, uploads, views
from .decoders import DECODERS
from .encoder_requests import encoder_view as encoder_view  # a page action too
from .panels import beam as beamview
from .panels.beam import BeamView, beam_node, beam_view  # the beam panel's actions
from .state import (
    SessionState,
    layer_number,
    loaded,
    new_state,
    panel_stamps,
    warning,
)
from .state import (
    checkpoint_of as checkpoint_of,  # asked of the session by tests and notebooks
)
from .stepfigures import step_figures as figures  # a page action too
from .workers import ON_START, remote

__all__ = [
    "BeamView", "DecodeView", "encoder_view", "SessionState", "back", "beam", "beam_node",
    "beam_view", "choose_model", "continue_beam", "figures", "force", "goto", "new_state",
    "open_head", "remember_view", "render", "reset", "run", "set_model_kind", "set_view",
    "start", "step", "upload_model",
]  # fmt: skip


def _worker_budget(memory: int) -> None:
    """In a new worker: its sessions' decoders may hold a third of its memory limit."""
    DECODERS.budget = memory // 3


ON_START.append(_worker_budget)  # this module is preloaded in every worker

# One torch thread per request (what `attnviz app` sets): users' events run side by side, and
# on a small shared CPU two threads per request spin against each other (a Step on
# models/reverse went from ~17 ms to ~150 ms).
APP_THREADS = 1
RESTARTED = "The checkpoint changed on disk: decoding restarted with the new weights."


class DecodeView(views.Shown):
    """What an action returns: the new state and everything the step-through page shows
    (see :class:`attnviz.app.views.Shown`), plus the same views as plotly figures."""

    @property
    def figures(self) -> dict[str, go.Figure]:
        """Every view of the state as a plotly figure, built on demand (the page itself draws
        from :attr:`payload`); see :func:`figures`."""
        return figures(self.state)


@dataclasses.dataclass(frozen=True)
class Opened:
    """What one request read of the state's checkpoint, once: the checkpoint, its weights
    file's version, and :data:`RESTARTED` when that version is not the one the decode shown
    started on."""

    ckpt: Checkpoint
    version: int
    notice: str = ""


def _stopped(state: SessionState, *args, message: str, **kwargs) -> DecodeView:
    """An action whose model's worker stopped: the state kept, the one line shown."""
    return views.render(state, None, message=message, view=DecodeView)


def _stopped_pair(state: SessionState, *args, message: str, **kwargs) -> tuple:
    return _stopped(state, message=message), None


# -- the one path every action takes --------------------------------------------------------------
def _open(state: SessionState) -> tuple[SessionState, Opened]:
    """The state's checkpoint and its version, read once for this request; a decode whose
    file changed on disk restarts on the new weights (tokens chosen by the old ones are not
    replayed as the new model's choices).

    Raises:
        AttnvizError: no model, or its files do not load.
    """
    ckpt, version = loaded(state)
    return _current(state, Opened(ckpt, version))


def _current(state: SessionState, op: Opened) -> tuple[SessionState, Opened]:
    if state.started and state.version != op.version:
        restarted = inputs.start(state, op.ckpt, state.text, op.version)
        return restarted, dataclasses.replace(op, notice=RESTARTED)
    return dataclasses.replace(state, version=op.version), op


def missing_rows(state: SessionState) -> tuple[int, int] | None:
    """The decoded rows ``(start, stop)`` the page lacks for ``state``, or None when it lacks
    nothing (Back and scrub). ``start == stop`` when only the encoder is missing."""
    n = len(state.tokens)
    if not state.started or (state.page_rows >= 0 and n <= state.page_rows):
        return None
    return (0 if state.page_rows < 0 else state.page_rows), n


def _decoded(state: SessionState, stepper: GreedyStepper) -> views.Decoded:
    """What the view needs of the held decoder: the rows the page lacks (only new rows are
    sent: Back and scrub none) and the steps' results."""
    missing = missing_rows(state)
    if missing is None:
        return views.Decoded(steps=stepper.steps)
    rows = stepper.rows(*missing, window=True)  # a local layer's window marked apart
    return views.Decoded(stepper.encoder_trace, rows, stepper.steps)


def _show(
    state: SessionState, op: Opened, message: str = "", decoded: views.Decoded | None = None
) -> DecodeView:
    """The view of ``state``: ``decoded`` (read from the decoder an action held), else read
    from the session's decoder; the files' say (examples, the expected output, a clip's
    part) read here, so that the views stay pure."""
    ckpt, message = op.ckpt, message or op.notice
    if not inputs.input_of(ckpt).decodes:  # reads the sentence at once: nothing to decode
        return reading.render(state, ckpt, message, view=DecodeView)
    if decoded is None and state.started:
        with DECODERS.hold(state, ckpt, op.version) as stepper:
            decoded = _decoded(state, stepper)
    full = state.page_rows < 0
    said = views.Said(
        example=None if state.started else next(iter(store.examples_of(ckpt, 1)), None),
        expected=expected_output(ckpt, state.text) if state.started and full else None,
        speech=speech.part(state, ckpt, full) if ckpt.is_audio and state.audio else None,
    )
    return views.render(state, ckpt, decoded or views.Decoded(), message, said,
                        restarted=message == RESTARTED, view=DecodeView)  # fmt: skip


def _refused(keep: SessionState, exc: AttnvizError, op: Opened | None) -> DecodeView:
    """A refused action: ``keep`` shown with the reason (``op``: what this request read
    before it was refused; None when the checkpoint itself did not load)."""
    if op is None:
        return render(keep, message=warning(exc))
    keep, op = _current(keep, dataclasses.replace(op, notice=""))
    try:
        return _show(keep, op, op.notice or warning(exc))
    except AttnvizError as again:
        return views.render(keep, None, message=warning(again), view=DecodeView)


def _apply(
    state: SessionState,
    change: Callable[[SessionState, Checkpoint], SessionState],
    refused: Callable[[SessionState], SessionState] | None = None,
) -> DecodeView:
    """``change`` the state (pure), then show it (the decoder synced once, nothing decoded).

    Args:
        change: ``(state, ckpt) -> state``; raises :class:`AttnvizError` to refuse.
        refused: the state to show when the action is refused (default: the previous one).
    """
    op = None
    try:
        s, op = _open(state)
        return _show(change(s, op.ckpt), op)
    except AttnvizError as exc:
        return _refused(refused(state) if refused else state, exc, op)


@remote(_stopped)
def render(state: SessionState, message: str = "") -> DecodeView:
    """The view of ``state`` as it is (no action)."""
    try:
        s, op = _open(state)
        return _show(s, op, op.notice or message)
    except AttnvizError as exc:
        return views.render(state, None, message=message or warning(exc), view=DecodeView)


# -- actions ------------------------------------------------------------------------------------
def _ensure(state: SessionState, op: Opened, text: str | None) -> SessionState:
    """Start on ``text`` when it is new (the Step button works right after typing)."""
    if text is not None and (not state.started or text != state.text):
        return inputs.start(state, op.ckpt, text, op.version)
    if not state.started:
        raise InputError("type an input first (or pick an example), then press Step")
    return state


@remote(_stopped)
def start(state: SessionState, text: str | None, clip: str | None = None) -> DecodeView:
    """Encode ``text`` (a speech model: ``clip``, the page's audio; see :func:`attnviz.app.inputs.given`) and
    get ready to decode (nothing decoded yet)."""
    op, given = None, text
    try:
        s, op = _open(state)
        given = inputs.given(op.ckpt, text, clip)
        return _show(inputs.start(s, op.ckpt, given, op.version), op)
    except AttnvizError as exc:
        return _refused(inputs.cleared(state, given), exc, op)


@remote(_stopped)
def step(state: SessionState, text: str | None = None, clip: str | None = None) -> DecodeView:
    """One greedy token further (replayed from history after Back, otherwise decoded); a
    speech model's input is ``clip`` (see :func:`attnviz.app.inputs.given`)."""
    op, given = None, text
    try:
        s, op = _open(state)
        inputs.input_of(op.ckpt).refuse_decoding()  # a sentence read generates nothing
        given = inputs.given(op.ckpt, text, clip)
        s = _ensure(s, op, given)
        if s.done:
            raise InputError("the output is complete: press Back, Reset or scrub")
        with DECODERS.hold(s, op.ckpt, op.version) as stepper:  # holds s.tokens
            if s.step == len(s.tokens):  # nothing kept from before a Back: the model decodes
                s = dataclasses.replace(s, tokens=[*s.tokens, stepper.step().token])
            s = dataclasses.replace(s, step=s.step + 1)
            decoded = _decoded(s, stepper)
        return _show(s, op, decoded=decoded)
    except AttnvizError as exc:
        return _refused(inputs.cleared(state, given), exc, op)


@remote(_stopped)
def run(state: SessionState, text: str | None = None, clip: str | None = None) -> DecodeView:
    """Decode to EOS (or the length limit) from where the view is (an encoder-only model:
    read the sentence; a speech model: ``clip``, see :func:`attnviz.app.inputs.given`)."""
    op, given = None, text
    try:
        s, op = _open(state)
        given = inputs.given(op.ckpt, text, clip)
        s = _ensure(s, op, given)
        if not inputs.input_of(op.ckpt).decodes:  # Read: one pass over the sentence
            return _show(s, op)
        with DECODERS.hold(s, op.ckpt, op.version) as stepper:
            tokens = stepper.run()
            s = dataclasses.replace(s, tokens=list(tokens), step=len(tokens))
            decoded = _decoded(s, stepper)
        return _show(s, op, decoded=decoded)
    except AttnvizError as exc:
        return _refused(inputs.cleared(state, given), exc, op)


@remote(_stopped)
def back(state: SessionState) -> DecodeView:
    """One step back (the later tokens are kept for stepping forward again), except that a
    forced token stepped back over is undone: the tokens from it on are dropped, so the next
    Step decodes greedily again."""

    def change(s: SessionState, ckpt: Checkpoint) -> SessionState:
        inputs.input_of(ckpt).refuse_decoding()
        to = max(0, s.step - 1)
        undone = [p for p in s.forced if p >= to]
        if not undone:
            return dataclasses.replace(s, step=to)
        cut = min(undone)
        return dataclasses.replace(
            s, step=to, tokens=s.tokens[:cut], forced=[p for p in s.forced if p < cut],
            page_rows=min(s.page_rows, cut),
        )  # fmt: skip

    return _apply(state, change)


@remote(_stopped)
def reset(state: SessionState) -> DecodeView:
    """Back to the start of decoding this input (nothing decoded, nothing forced)."""

    def change(s: SessionState, ckpt: Checkpoint) -> SessionState:
        inputs.input_of(ckpt).refuse_decoding()
        return dataclasses.replace(s, tokens=[], step=0, page_rows=min(s.page_rows, 0), forced=[])

    return _apply(state, change)


@remote(_stopped)
def force(state: SessionState, token: int | str, at: int | str | None = None) -> DecodeView:
    """Feed ``token`` (an output vocabulary id) at step ``at`` instead of the argmax.

    Args:
        token: the id to feed (``0..V-1``); the page sends a candidate's ``data-token-id``.
        at: the 1-based step whose token is replaced: ``state.step`` (default, the step whose
            candidates the page shows) or ``state.step + 1`` (the next token, as Step would
            choose it). Later tokens are dropped: Steps continue greedily from the new prefix.
    """

    def change(s: SessionState, ckpt: Checkpoint) -> SessionState:
        inputs.input_of(ckpt).refuse_decoding()
        if not s.started:
            raise InputError("type an input and press Step first, then force a candidate")
        vocab = ckpt.config.tgt_vocab_size
        tok = check_token_id(str(token), vocab)
        last = s.step if s.done else min(s.step + 1, s.max_steps)
        try:
            where = s.step if at in (None, "") else int(str(at).strip())
        except ValueError:
            raise InputError(
                f"not a step: {shorten(repr(at))}; can force a token at step 1..{last}"
            ) from None
        if not 1 <= where <= last:
            why = " (the output is complete)" if s.done else ""
            raise InputError(f"can force a token at step 1..{last}{why}, got {shorten(where, 20)}")
        pos = where - 1
        return dataclasses.replace(
            s, tokens=[*s.tokens[:pos], tok], step=where, page_rows=min(s.page_rows, pos),
            forced=[*(p for p in s.forced if p < pos), pos],
        )  # fmt: skip

    return _apply(state, change)


@remote(_stopped)
def goto(state: SessionState, position: int) -> DecodeView:
    """Show the first ``position`` decoded tokens (the step slider)."""

    def change(s: SessionState, ckpt: Checkpoint) -> SessionState:
        inputs.input_of(ckpt).refuse_decoding()
        try:
            pos = int(float(position or 0))
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"not a step: {shorten(repr(position))}") from None
        return dataclasses.replace(s, step=int(np.clip(pos, 0, len(s.tokens))))

    return _apply(state, change)


@remote(_stopped)
def set_view(state: SessionState, kind: str, layer: str | int, head: str) -> DecodeView:
    """Choose layer (``"L1"`` or 1) and head (``"mean"``, ``"all heads"``, ``"H2"``) of a kind."""

    def change(s: SessionState, ckpt: Checkpoint) -> SessionState:
        if kind not in KINDS:
            raise InputError(f"unknown attention kind {kind!r}")
        layer_i = layer_number(layer or 0)
        return dataclasses.replace(s, view={**s.view, kind: [layer_i, str(head)]})

    return _apply(state, change)


def remember_view(state: SessionState, value: str) -> SessionState:
    """The page's step view now shows ``value`` (``"cross 1 H2"``: kind, layer, head): kept in
    the state so the panels drawn by the server (Reference, a beam node) show the same layer
    and head. Anything else (a stale or hand-made value) leaves the state as it is."""
    try:
        kind, layer, head = str(value).split(" ", 2)
        layer_i = layer_number(layer)
    except (ValueError, InputError):
        return state
    if kind not in KINDS or not (head in ("mean", "all heads") or re.fullmatch(r"H\d{1,4}", head)):
        return state
    return dataclasses.replace(state, view={**state.view, kind: [layer_i, head]})


@remote(_stopped)
def set_model_kind(state: SessionState, kind: str) -> DecodeView:
    """Which attention kind the layers x heads model view shows."""

    def change(s: SessionState, ckpt: Checkpoint) -> SessionState:
        if kind not in KINDS:
            raise InputError(f"unknown attention kind {kind!r}")
        return dataclasses.replace(s, model_kind=kind)

    return _apply(state, change)


@remote(_stopped)
def open_head(state: SessionState, site: str) -> DecodeView:
    """Open one head of the model view (``"cross L1 H2"``) in its kind's heatmap."""
    try:
        kind, layer, head = site.split()
    except (AttributeError, ValueError):
        return _apply(state, lambda s, c: _raise(InputError(f"not a head: {site!r}")))
    return set_view(state, kind, layer, head)


def _chosen(state: SessionState, model: str, *args, **kwargs) -> str:
    """The folder ``model`` (a menu name or a folder) names for this session: another
    session's upload is not found by its name, and its folder is refused (""), as is a name
    that is neither in the menu nor a folder."""
    path = store.resolve_model(model, owner=state.sid)
    if path == model and not Path(model).expanduser().exists():
        return ""  # no menu name and no folder: said so without the server's paths
    return path if store.visible(path, state.sid) else ""


@remote(_stopped, model_of=_chosen)
def choose_model(state: SessionState, model: str, text: str | None = None) -> DecodeView:
    """Switch to another checkpoint (a menu name or a folder); the typed input is kept.
    Another session's upload is not this session's to choose (#39)."""
    typed = state.text if text is None else text
    path = _chosen(state, model)
    if not path:
        return render(
            state, message=warning(InputError("that model is not in this session's menu"))
        )
    new = dataclasses.replace(
        new_state(path, state.device), text=typed, sid=state.sid, epoch=state.epoch + 1
    )
    try:
        new, op = _open(new)  # load now: a broken file is reported here, not at the first step
    except AttnvizError as exc:
        return render(state, message=warning(exc))
    if not typed.strip() or inputs.input_of(op.ckpt) is inputs.CLIP:  # a clip, not the text
        return _show(new, op)
    try:
        return _show(inputs.start(new, op.ckpt, typed, op.version), op)
    except AttnvizError as exc:
        return _refused(new, exc, op)


def upload_model(state: SessionState, paths: list[str], text: str | None = None) -> DecodeView:
    """Load an uploaded checkpoint (a folder's files or one .zip); refused with a message.

    The files are unpacked into this session's own folder and opened in the model's worker
    (:mod:`attnviz.app.workers`, when the app runs them); once the session shows it, the
    session's earlier upload is deleted (:func:`attnviz.app.uploads.adopt`)."""
    state = dataclasses.replace(state, sid=state.sid or uuid.uuid4().hex)
    try:
        folder, _ = store.import_upload(paths, state.device, owner=state.sid)
    except AttnvizError as exc:
        return render(state, message=warning(exc))
    view = choose_model(state, folder, text)
    if view.state.model == folder:
        uploads.adopt(state.sid, folder)
    return view


def beam(state: SessionState, beam_size: int | str = 4, text: str | None = None) -> str:
    """HTML comparing the greedy output with beam search's best hypothesis, for ``text``
    (default: the state's input), and the search tree (see :func:`beam_view`)."""
    return beam_view(state, beam_size, text).html


@remote(_stopped_pair)
def continue_beam(
    state: SessionState, panel: beamview.BeamPanel | None, node: int | str
) -> tuple[DecodeView, beamview.BeamPanel | None]:
    """Put the step view at the prefix of ``node``'s hypothesis: its tokens are fed one by one,
    forced (and marked) where they differ from the greedy choice, so later Steps continue
    greedily and Back undoes a forced token, as after :func:`force`.

    Returns:
        The step view, and the panel with its stamp renewed (the input may have been started
        on the panel's text: the tree belongs to the new decode too); None when refused
        (``view.message`` says why, the step view is the previous one).
    """
    op = None
    try:
        s, op = _open(state)
        beamview.current(s, panel)
        tokens = beamview.hypothesis(panel, node)
        if not s.started or s.text != panel.text:
            s = inputs.start(s, op.ckpt, panel.text, op.version)
        if len(tokens) > s.max_steps:
            raise InputError(f"the hypothesis has {len(tokens)} tokens; at most {s.max_steps}")
        s = dataclasses.replace(s, tokens=[], step=0, page_rows=min(s.page_rows, 0), forced=[])
        with DECODERS.hold(s, op.ckpt, op.version) as stepper:
            forced = []
            for i, token in enumerate(tokens):
                if stepper.step().token != token:  # greedy would choose another: feed this one
                    stepper.back(i)
                    stepper.step(token=token)
                    forced.append(i)
            s = dataclasses.replace(s, tokens=list(tokens), step=len(tokens), forced=forced)
            decoded = _decoded(s, stepper)
        view = _show(s, op, decoded=decoded)
    except AttnvizError as exc:  # a message starting with ⚠ may be a mere warning
        return _refused(state, exc, op), None
    return view, dataclasses.replace(panel, stamp=panel_stamps(view.state)["beam"])


def _raise(exc: Exception):
    raise exc
