"""Per-user state of the app and the shared server-side caches behind it (no gradio).

A :class:`SessionState` is small and deep-copyable (paths, ids, the step shown, view choices),
never a model or a tensor: the model comes from the process-wide cache in
:mod:`attnviz.app.models`. Step-through decoding keeps a :class:`~attnviz.GreedyStepper` per
session in a bounded server-side cache (:func:`synced_stepper`); when it is missing or stale
(evicted, another process, a new checkpoint version) it is rebuilt by forcing the recorded
tokens, about a millisecond per token, with the same attention (eval mode is deterministic).
"""

from __future__ import annotations

import html
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import torch

from ..checkpoint import Checkpoint
from ..decoding import GreedyStepper
from ..errors import InputError
from ..snapshots import SNAPSHOTS
from ..tasks import TASKS
from ..tokenizer import BOS, EOS
from . import models

HEAD_CHOICES = ("mean", "all heads")  # then "H0", "H1", ...


def layer_index(layer, layers: list[int]) -> int:
    """A layer choice (``None``/``""`` = last, ``"L1"`` or ``1``) -> an index in ``layers``."""
    if layer in (None, ""):
        return layers[-1]
    try:
        i = int(str(layer).lstrip("L"))
    except ValueError:
        raise InputError(f"not a layer: {layer!r}; layers read like 'L1'") from None
    if i not in layers:
        raise InputError(f"layer must be one of {layers}, got {i}")
    return i


def head_label(head: str) -> str:
    """``"mean"`` / ``"all heads"`` / ``"H2"`` -> words for a title."""
    return {"mean": "mean of heads", "all heads": "all heads"}.get(
        str(head), f"head {str(head)[1:]}"
    )


def head_weights(w, head: str):
    """``[H, Tq, Tk]`` -> ``[Tq, Tk]`` for ``"mean"`` or ``"H<h>"``."""
    return w.mean(0) if not str(head).startswith("H") else w[int(str(head)[1:])]


FIGURES = ("encoder_self", "decoder_self", "cross", "topk", "rows_cross", "rows_decoder", "model")
MAX_STEPPERS = 64


@dataclass
class SessionState:
    """What one user is looking at. Deep-copyable: no model, no tensors.

    Attributes:
        model: checkpoint folder (shipped or uploaded); device: where it runs.
        sid: session id keying the server-side stepper cache ("" until the first start).
        text, src_ids, src_pieces, unknown: the input and its encoding (``[Ts]`` each).
        tokens: output ids produced so far (BOS excluded); ``step`` of them are shown, the
            rest are kept so stepping forward again after Back is free.
        max_steps: the decoding length limit of this input.
        version: the checkpoint file's version when decoding started (a rewritten file
            restarts decoding: tokens chosen by old weights are not replayed as the new
            model's choices).
        view: ``{kind: [layer, head]}`` with head ``"mean"``, ``"all heads"`` or ``"H<h>"``.
        model_kind: the attention kind of the layers x heads model view.
        top_k: bars in the next-token figure.
    """

    model: str = ""
    device: str = "cpu"
    sid: str = ""
    text: str = ""
    src_ids: list[int] = field(default_factory=list)
    src_pieces: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    step: int = 0
    max_steps: int = 0
    version: int = 0
    view: dict[str, list] = field(default_factory=dict)
    model_kind: str = "cross"
    top_k: int = 10

    @property
    def started(self) -> bool:
        return bool(self.src_ids)

    @property
    def done(self) -> bool:
        """The shown output is complete: EOS produced or the length limit reached."""
        t = self.tokens[: self.step]
        return bool(t) and (t[-1] == EOS or len(t) >= self.max_steps)


@dataclass
class DecodeView:
    """Everything the step-through page shows for one state.

    Attributes:
        output: output text so far (EOS not shown).
        output_html / source_html: tokens as HTML, the newest output token and unknown
            source pieces marked.
        message: markdown for the status line (hints, errors, warnings).
        info: JSON-ready ``{"step", "done", "output", "tokens", "newest", "prob", ...}``.
        figures: ``{name: figure}`` for every name in :data:`FIGURES`.
    """

    state: SessionState
    output: str
    output_html: str
    source_html: str
    message: str
    info: dict[str, Any]
    figures: dict[str, go.Figure]


# -- state creation and the model -----------------------------------------------------------------
def new_state(model: str | None = None, device: str = "cpu") -> SessionState:
    """A fresh state on ``model`` (a folder; default: the first shipped model)."""
    if model is None:
        shipped = models.shipped_models()
        model = next(iter(shipped.values()), "")
    return SessionState(model=str(model), device=device)


def checkpoint(state: SessionState) -> Checkpoint:
    """The shared, read-only checkpoint of ``state`` (loaded once per process)."""
    if not state.model:
        raise InputError("no model is loaded: pick a shipped model or upload a checkpoint")
    return models.get_checkpoint(state.model, state.device)


def layer_count(ckpt: Checkpoint, kind: str) -> int:
    cfg = ckpt.config
    return cfg.n_encoder_layers if kind == "encoder_self" else cfg.n_decoder_layers


def head_choices(ckpt: Checkpoint) -> list[str]:
    return [*HEAD_CHOICES, *(f"H{h}" for h in range(ckpt.config.n_heads))]


def has_snapshots(state: SessionState) -> bool:
    """Whether the checkpoint folder holds training snapshots (for playback)."""
    return bool(state.model) and (Path(state.model) / SNAPSHOTS).is_file()


def describe(state: SessionState) -> str:
    """Markdown naming the loaded model, its task and the device it runs on."""
    ckpt = checkpoint(state)
    cfg, task = ckpt.config, ckpt.task
    about = TASKS[task].description if task in TASKS else "no built-in task recorded"
    acc = (ckpt.meta.get("metrics") or {}).get("val_exact_match")
    acc_text = f" · validation exact match {acc:.3f}" if isinstance(acc, int | float) else ""
    return (
        f"**{html.escape(ckpt.path.name)}** — task `{task}`: {html.escape(about)}{acc_text}  \n"
        f"{cfg.n_encoder_layers} encoder + {cfg.n_decoder_layers} decoder layers, "
        f"{cfg.n_heads} heads, d_model {cfg.d_model} · running on **{ckpt.device}**"
    )


# -- the stepper cache ------------------------------------------------------------------------
_STEPPERS: OrderedDict[str, tuple[tuple, GreedyStepper]] = OrderedDict()
_STEP_LOCK = threading.Lock()


def synced_stepper(state: SessionState, ckpt: Checkpoint) -> GreedyStepper:
    """This session's stepper, holding exactly ``state.tokens`` (call under ``_STEP_LOCK``)."""
    sig = (state.model, models.version_of(state.model), state.device, tuple(state.src_ids))
    hit = _STEPPERS.get(state.sid)
    if hit is not None and hit[0] == sig:
        stepper = hit[1]
        _STEPPERS.move_to_end(state.sid)
    else:
        src = torch.tensor(state.src_ids, dtype=torch.long)
        stepper = GreedyStepper(ckpt.model, src, BOS, EOS)
        _STEPPERS[state.sid] = (sig, stepper)
        while len(_STEPPERS) > MAX_STEPPERS:
            _STEPPERS.popitem(last=False)
    stepper.sync(state.tokens)
    return stepper
