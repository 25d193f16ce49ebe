"""The options of a training run (:class:`TrainOptions`) and how unset ones are filled:
from the saved run on ``--resume``, the ``preset``, the task's or corpus's defaults, then the
global defaults. :mod:`attnviz.train.loop` runs them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.config import ModelConfig, is_int, is_real
from ..core.errors import InputError, shorten
from ..core.memory import BYTES_PER_NUMBER, MEMORY_FRACTION, available_memory
from ..core.model_kind import ARCHS, Kind
from .feeds import PRESETS, Feed

#: ModelConfig fields that are not options: the vocabularies and special ids come from the
#: tokenizers (and a folder's further end ids from its generation config).
_FROM_TOKENIZERS = (
    "src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id", "unk_id", "end_ids",
)  # fmt: skip
#: ModelConfig fields of speech models, which ``attnviz train`` does not train (text only).
_AUDIO_ONLY = ("source", "n_mels", "encoder_positions", "max_source_len")
#: Every other ModelConfig field is a training option (and an ``attnviz train`` flag).
MODEL_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(ModelConfig)
    if f.name not in _FROM_TOKENIZERS and f.name not in _AUDIO_ONLY
)
#: Options that describe where the data comes from rather than how to train on it.
_NOT_SAVED = ("pairs", "dev_pairs", "resume", "command")

_DEFAULTS = dict(
    weight_decay=0.01,
    label_smoothing=0.0,
    clip=1.0,
    eval_every=250,
    eval_size=500,
    snapshot_every=100,
    seed=0,
    keep="best",
)
#: What ``--keep`` takes: the checkpoint holds the best validation's weights, or the last's.
KEEP = ("best", "last")


def _model_options(cls):
    """Add one ``None``-defaulted option per :data:`MODEL_FIELDS` entry to a dataclass."""
    types = {f.name: f.type for f in dataclasses.fields(ModelConfig)}
    for name in MODEL_FIELDS:
        if name not in cls.__annotations__:
            cls.__annotations__[name] = f"{types[name]} | None"
            setattr(cls, name, None)
    return dataclass(cls)


@_model_options
class TrainOptions:
    """Everything that defines a training run.

    The data is one of: ``task`` (a built-in task), ``data`` (corpus files: one ``.tsv`` or
    ``.jsonl``, or two aligned plain-text files; ``dev`` likewise, else a held-out slice of
    ``data``), or ``pairs`` (``(source, target)`` strings given in Python; ``dev_pairs``
    likewise). Every :class:`~attnviz.ModelConfig` field but the vocabulary sizes and special
    ids is an option too (``d_model``, ``activation``, ``positions``, ...).

    ``init`` is a checkpoint folder to fine-tune (see :func:`init_checkpoint`): the run
    starts from its weights, config and tokenizers, with a fresh optimiser.

    ``None`` means: on ``--resume``, the saved run's value; else the ``preset``'s model size;
    else the task's or the corpus's defaults (:class:`~attnviz.train.feeds.Feed`); else a global
    default (weight decay 0.01, no label smoothing, clipping at 1.0, validation every 250
    steps on 500 examples, a snapshot every 100 steps, seed 0, keep the best validation's
    weights, no early stopping).

    ``keep`` is ``"best"`` (the checkpoint holds the weights of the best validation: exact
    match for a task, chrF for a corpus, then the lower loss) or ``"last"``; ``patience``
    stops the run after that many validations without a better one.
    """

    task: str | None = None
    init: str | None = None
    data: list[str] | None = None
    dev: list[str] | None = None
    langs: list[str] | None = None
    pairs: Sequence[tuple[str, str]] | None = None
    dev_pairs: Sequence[tuple[str, str]] | None = None
    tokenizer: str | None = None
    vocab_size: int | None = None
    shared_vocab: bool | None = None
    byte_fallback: bool | None = None
    preset: str | None = None
    out: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    warmup: int | None = None
    weight_decay: float | None = None
    label_smoothing: float | None = None
    clip: float | None = None
    eval_every: int | None = None
    eval_size: int | None = None
    snapshot_every: int | None = None
    target_exact_match: float | None = None
    target_chrf: float | None = None
    keep: str | None = None
    patience: int | None = None
    seed: int | None = None
    device: str = "auto"
    resume: bool = False
    command: str = ""

    def source(self) -> str:
        """What the data is: the task's name, ``"corpus files"`` or ``"pairs"``."""
        given = [n for n in ("task", "data", "pairs") if getattr(self, n) is not None]
        if len(given) != 1:
            raise InputError("give one of --task or --data (or pairs=... in Python)")
        return {"data": "corpus files", "pairs": "pairs"}.get(given[0], self.task)

    @property
    def kind(self) -> Kind:
        """The kind of model the run trains (``arch``; unset: the config's default).

        Raises:
            InputError: ``arch`` names no kind.
        """
        arch = ModelConfig.arch if self.arch is None else self.arch
        if arch not in ARCHS:
            raise InputError(f"--arch must be {', '.join(ARCHS[:-1])} or {ARCHS[-1]}, got {arch!r}")
        return Kind(arch)

    def saved(self) -> dict:
        """The options as stored in the checkpoint (without the pairs themselves)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in _NOT_SAVED
        }

    def resolved(self, feed: Feed | object, saved: dict | None = None) -> TrainOptions:
        """A copy with every ``None`` filled: saved run, preset, feed defaults, globals.

        Args:
            feed: a :class:`~attnviz.train.feeds.Feed` or a :class:`~attnviz.tasks.Task` (anything
                with ``training`` and ``model`` default dicts).

        Raises:
            InputError: a bad value, or (with ``saved``) a model size that differs from the
                saved run's (a resumed run keeps its model).
        """
        saved = saved or {}
        same_source(self, saved)
        clash = [
            k
            for k in MODEL_FIELDS
            if getattr(self, k) is not None and getattr(self, k) != saved.get(k, getattr(self, k))
        ]
        if clash:
            raise InputError(
                f"--resume keeps the saved model; these options differ from it: {', '.join(clash)}"
            )
        if self.preset is not None and self.preset not in PRESETS:
            raise InputError(f"--preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        layers = [
            {k: v for k, v in saved.items() if v is not None},
            PRESETS.get(self.preset or saved.get("preset"), {}),
            feed.training,
            feed.model,
            _DEFAULTS,
        ]
        fill = {}
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is None and f.name not in ("pairs", "dev_pairs"):
                fill[f.name] = next((d[f.name] for d in layers if f.name in d), None)
        out = dataclasses.replace(self, **fill)
        for name in ("steps", "batch_size", "eval_every", "eval_size", "snapshot_every", "warmup"):
            v = getattr(out, name)
            if not is_int(v) or v < 1 or v > MAX_COUNT:
                raise InputError(
                    f"--{name.replace('_', '-')} must be at least 1 (a whole number up to "
                    f"{MAX_COUNT:,}), got {shorten(repr(v), 40)}"
                )
        for name, (fits, says) in _RANGES.items():
            v = getattr(out, name)
            if v is None and name != "lr":  # unset: the optimiser's or model's own; lr: none
                continue
            if not is_real(v) or not fits(v):
                raise InputError(
                    f"--{name.replace('_', '-')} must be {says}, got {shorten(repr(v), 40)}"
                )
        if out.seed is not None and not is_int(out.seed):
            raise InputError(f"--seed must be a whole number, got {shorten(repr(out.seed), 40)}")
        if out.keep not in KEEP:
            raise InputError(f"--keep must be one of {', '.join(KEEP)}, got {out.keep!r}")
        if out.patience is not None and out.patience < 1:
            raise InputError("--patience must be at least 1")
        return out


#: The largest count of steps, examples or a batch size a run takes.
MAX_COUNT = 10**9
#: What each number option must be: (a test of its value, what the message says).
_RANGES = {
    "lr": (lambda v: 0 < v <= 10, "positive, at most 10"),
    "weight_decay": (lambda v: 0 <= v <= 10, "a number in [0, 10]"),
    "label_smoothing": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "dropout": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "clip": (lambda v: 0 <= v <= 1e6, "a number in [0, 1e6] (0: no clipping)"),
}


def check_batch(opts: TrainOptions, saved: dict | None = None) -> None:
    """Refuse a batch whose activations alone (kept for the backward pass) could not fit in
    the memory this process may use, before anything is built or read. The estimate is a
    floor, so no batch that would fit is refused: per example, each layer keeps at least 4
    numbers per position and model width and its heads' ``[T, T]`` scores, at the model's
    ``max_len`` positions (a real run keeps several times that). A size
    not given yet is the saved run's (``saved``), else :class:`~attnviz.ModelConfig`'s
    default.

    Raises:
        InputError: one line with the batch size that fits.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}

    def size(name: str):
        for v in (getattr(opts, name), (saved or {}).get(name), defaults.get(name)):
            if v is not None:
                return v
        return None

    batch = size("batch_size")
    d, heads, t = size("d_model"), size("n_heads"), size("max_len")
    layers = (size("n_encoder_layers"), size("n_decoder_layers"))
    if not all(is_int(v) and v > 0 for v in (batch, d, heads, t)):
        return  # checked where the options are resolved, or by the model's config
    n = sum(v for v in layers if is_int(v) and v > 0)
    per_example = BYTES_PER_NUMBER * max(n, 1) * t * (4 * d + heads * t)
    budget = int(available_memory() * MEMORY_FRACTION)
    if batch * per_example > budget:
        fits = max(1, budget // per_example)
        raise InputError(
            f"--batch-size {batch:,} would hold at least {batch * per_example / 2**30:,.1f} GB of "
            f"activations at {t} positions, more than the {budget / 2**30:.1f} GB this "
            f"process may use: at most {fits:,} fit"
        )


def same_source(opts: TrainOptions, saved: dict | None) -> None:
    """Refuse to resume a run on another source (a task vs a corpus, or another task).

    Args:
        saved: the saved run's options (None: nothing to resume).
    Raises:
        InputError: the sources differ.
    """
    if saved and saved.get("task") != opts.task:
        was = repr(saved["task"]) if saved.get("task") else "corpus"
        now = repr(opts.task) if opts.task else "corpus"
        raise InputError(f"the saved run is a {was} run, not {now}")
