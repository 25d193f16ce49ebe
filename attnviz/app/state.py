"""Per-user state of the app, the small questions asked of it, and what each of the page's
panels computed from it depends on (its stamp); no gradio, no tensors.

A :class:`SessionState` is small and deep-copyable (paths, ids, the step shown, view choices),
never a model or a tensor: the model comes from the process-wide cache in
:mod:`attnviz.app.store` and the decoder from :mod:`attnviz.app.decoders`.
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.sites import head_name, parse_layer
from ..data.tasks import TASKS
from ..train.snapshots import SNAPSHOTS
from . import store
from .kinds import layers_text
from .panels import BY_NAME, PANELS


def warning(exc: Exception) -> str:
    """A refused action as the page shows it: one ``⚠`` line, the message escaped."""
    return f"⚠ {html.escape(str(exc))}"


HEAD_CHOICES = ("mean", "all heads")
NO_MODEL = "no model is loaded: pick a shipped model or upload a checkpoint"  # then "H0", "H1", ...


def layer_number(layer) -> int:
    """A layer as the page names it (``"L1"``, ``"1"`` or ``1``) -> its number; the one place
    a layer's name is read."""
    return parse_layer(layer)


def layer_index(layer, layers: list[int]) -> int:
    """A layer choice (``None``/``""`` = last, ``"L1"`` or ``1``) -> an index in ``layers``."""
    if layer in (None, ""):
        return layers[-1]
    i = layer_number(layer)
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


@dataclass
class SessionState:
    """What one user is looking at. Deep-copyable: no model, no tensors.

    Attributes:
        model: checkpoint folder (shipped or uploaded); device: where it runs.
        sid: session id keying the server-side decoder ("" until the first start).
        text, src_ids, src_pieces, unknown: the input and its encoding (``[Ts]`` each).
        tokens: output ids produced so far (BOS excluded); ``step`` of them are shown, the
            rest are kept so stepping forward again after Back is free.
        max_steps: the decoding length limit of this input.
        version: the checkpoint file's version as the last action read it (a decode is
            always on this version: a rewritten file restarts decoding, so tokens chosen by
            old weights are not replayed as the new model's choices).
        epoch: counts the decodes this session started; the page keeps one decode's rows.
        page_rows: decoded rows the page already holds for ``epoch`` (-1: nothing, not even
            the encoder), so an event sends only what is new.
        view: ``{kind: [layer, head]}`` with head ``"mean"``, ``"all heads"`` or ``"H<h>"``.
        model_kind: the attention kind of the layers x heads model view.
        top_k: bars in the next-token chart.
        forced: positions in ``tokens`` that the user forced instead of the argmax (sorted);
            the stepper replays them like any other token, the page marks them.
        audio: a speech model's clip, as this process keeps it (16 kHz samples, ``.npy``);
            then ``src_ids`` are the encoder's frames and ``src_pieces`` their times
            (:mod:`attnviz.app.speech`). ``""`` for a text input.
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
    epoch: int = 0
    page_rows: int = -1
    eos_id: int = 2
    #: further ids that end the output as ``eos_id`` does (``Checkpoint.decoding.end_ids``)
    end_ids: tuple[int, ...] = ()
    view: dict[str, list] = field(default_factory=dict)
    model_kind: str = "cross"
    top_k: int = 10
    forced: list[int] = field(default_factory=list)
    audio: str = ""

    @property
    def shown(self) -> tuple[int, ...]:
        """The output the step view shows: its first ``step`` tokens."""
        return tuple(self.tokens[: self.step])

    @property
    def started(self) -> bool:
        return bool(self.src_ids)

    @property
    def stopped_at_limit(self) -> bool:
        """Decoding of the shown output ended at the length limit, without EOS."""
        t = self.tokens[: self.step]
        return bool(t) and not self.ended(t[-1]) and len(t) >= self.max_steps

    @property
    def done(self) -> bool:
        """The shown output is complete: EOS produced or the length limit reached."""
        t = self.tokens[: self.step]
        return bool(t) and (self.ended(t[-1]) or len(t) >= self.max_steps)

    def ended(self, token: int) -> bool:
        """``token`` ends the output (as :meth:`attnviz.decode.decoding.Decoding.ends`)."""
        return token == self.eos_id or token in self.end_ids


# -- state creation and the model -----------------------------------------------------------------
def new_state(model: str | None = None, device: str = "cpu") -> SessionState:
    """A fresh state on ``model`` (a folder; default: the first shipped model)."""
    if model is None:
        shipped = store.shipped_models()
        model = next(iter(shipped.values()), "")
    return SessionState(model=str(model), device=device)


def checkpoint_of(state: SessionState) -> Checkpoint:
    """The shared, read-only checkpoint of ``state`` (loaded once per process)."""
    if not state.model:
        raise InputError(NO_MODEL)
    return store.get_checkpoint(state.model, state.device)


def loaded(state: SessionState) -> tuple[Checkpoint, int]:
    """The checkpoint of ``state`` and its weights file's version, read once
    (:func:`attnviz.app.store.load`)."""
    if not state.model:
        raise InputError(NO_MODEL)
    return store.load(state.model, state.device)


def layer_count(ckpt: Checkpoint, kind: str) -> int:
    """Layers of ``kind`` in this model (0 where it has none: a decoder-only model's
    ``"encoder_self"`` and ``"cross"``)."""
    cfg = ckpt.config
    if kind == "encoder_self":
        return cfg.n_encoder_layers if cfg.has_encoder else 0
    if kind == "cross" and not (cfg.has_encoder and cfg.has_decoder):
        return 0
    return cfg.n_decoder_layers if cfg.has_decoder else 0


def head_sites(state: SessionState, kind: str | None = None) -> list[str]:
    """``["cross L0 H0", ...]``: every head of ``kind`` (default: the model view's kind)."""
    ckpt = checkpoint_of(state)
    kind = kind or state.model_kind
    return [
        head_name(kind, i, h)
        for i in range(layer_count(ckpt, kind))
        for h in range(ckpt.config.n_heads)
    ]


def head_choices(ckpt: Checkpoint) -> list[str]:
    return [*HEAD_CHOICES, *(f"H{h}" for h in range(ckpt.config.n_heads))]


def has_snapshots(state: SessionState) -> bool:
    """Whether the checkpoint folder holds training snapshots (for playback)."""
    return bool(state.model) and (Path(state.model) / SNAPSHOTS).is_file()


def describe(state: SessionState) -> str:
    """Markdown naming the loaded model, its task and the device it runs on."""
    ckpt = checkpoint_of(state)
    cfg, task = ckpt.config, ckpt.task
    about = TASKS[task].description if task in TASKS else "no built-in task recorded"
    acc = (ckpt.meta.get("metrics") or {}).get("val_exact_match")
    acc_text = f" · validation exact match {acc:.3f}" if isinstance(acc, int | float) else ""
    stored = ckpt.meta.get("gguf_description")  # a GGUF file: each tensor's stored type
    windows = sorted({w for i in range(cfg.n_decoder_layers) if (w := cfg.layer_window(i))})
    local = sum(1 for i in range(cfg.n_decoder_layers) if cfg.layer_window(i))
    return (
        f"**{html.escape(store.model_name(state.model))}** — "
        + (f"task `{task}`: " if task else "")
        + f"{html.escape(about)}{acc_text}  \n"
        f"{layers_text(cfg)}, "
        f"{cfg.n_heads} heads, d_model {cfg.d_model} · running on **{ckpt.device}**"
        + (f"  \n{local} of {cfg.n_decoder_layers} layers local (sliding window "
           f"{', '.join(map(str, windows))}), the rest global" if windows else "")
        + (f"  \nstored as {html.escape(str(stored))}, dequantized to float32" if stored else "")
    )  # fmt: skip


# -- what each panel depends on: rerun, renew or clear when another state is current --------
def panel_stamps(state: SessionState) -> dict[str, Any]:
    """What each of the page's other panels depends on, by panel (every panel of
    :data:`attnviz.app.panels.PANELS`, by its stamp): a panel computed for a stamp other than
    the current one shows an earlier state (the page clears or reruns it)."""
    return {panel.name: tuple(getattr(state, f) for f in panel.stamp) for panel in PANELS}


def stale_panels(stamps: dict[str, Any], state: SessionState) -> set[str]:
    """The panels whose stamp (the state they were computed for, by panel, as
    :func:`panel_stamps` gives it) is not the current state's: they show an earlier state."""
    now = panel_stamps(state)
    return {k for k, v in stamps.items() if v != now.get(k)}


@dataclasses.dataclass(frozen=True)
class Follow:
    """How the page's other panels follow an event (see :func:`follow`).

    Attributes:
        rerun: panels computed again now, for the current state (the mask lab when it is
            the tab shown: a person watching it sees it follow every step; the Attribution
            tab's alternatives menu when that tab is shown; the Reference box when only the
            output shown moved, same input and checkpoint file).
        renew: panels that follow the checkpoint (``"model"``: the header, the playback
            range and the health report) and are renewed from the current state.
        clear: every other stale panel: emptied and marked as computed for an earlier state
            (computing labs the person is not looking at would make every Step wait).
        stamps: the stamps after following: the current ones for ``rerun`` and ``renew``,
            none for ``clear``ed panels, unchanged for the rest.
    """

    rerun: frozenset[str]
    renew: frozenset[str]
    clear: frozenset[str]
    stamps: dict[str, Any]

    def __bool__(self) -> bool:
        return bool(self.rerun or self.renew or self.clear)


def follow(
    stamps: dict[str, Any], state: SessionState, active: str, opened: frozenset[str] = frozenset()
) -> Follow:
    """What each panel computed for another state does now that ``state`` is current.

    Args:
        stamps: what the panels show (:func:`panel_stamps` of the states they were computed
            for, by panel); panels never computed have no stamp and nothing to follow.
        active: the tab shown (``"step"``, ``"mask"``, ``"align"``, ...).
        opened: collapsible panels open on their tab (``"whatif"``: the step view's what-if
            panel follows each step while it is open and its tab shown).

    Each panel's rule is its registration's (:meth:`attnviz.app.panels.registry.Panel.reruns`).
    """
    stale = stale_panels(stamps, state)
    now = panel_stamps(state)
    rerun = {
        k for k in stale
        if k in BY_NAME and not BY_NAME[k].renew
        and BY_NAME[k].reruns(stamps[k], now[k], active, opened)
    }  # fmt: skip
    renew = {k for k in stale if k in BY_NAME and BY_NAME[k].renew}
    keep = {k: v for k, v in stamps.items() if k not in stale}
    keep.update({k: now[k] for k in rerun | renew})
    return Follow(frozenset(rerun), frozenset(renew), frozenset(stale - rerun - renew), keep)
