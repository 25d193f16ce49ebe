"""Per-user state of the app and the small questions asked of it (no gradio, no tensors).

A :class:`SessionState` is small and deep-copyable (paths, ids, the step shown, view choices),
never a model or a tensor: the model comes from the process-wide cache in
:mod:`attnviz.app.store` and the decoder from :mod:`attnviz.app.decoders`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.sites import parse_layer
from ..data.tasks import TASKS
from ..train.snapshots import SNAPSHOTS
from . import store
from .kinds import layers_text


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
