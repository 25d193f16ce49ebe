"""Which validation's weights a run keeps (``--keep best|last``) and when ``--patience``
runs out: :class:`Keeper`, used by :mod:`attnviz.train.loop`."""

from __future__ import annotations

import copy

from ..core.errors import CheckpointError
from ..core.model import Transformer
from .options import TrainOptions


class Keeper:
    """Which validation's weights the checkpoint keeps, and when patience runs out.

    Better means a higher exact match (a task) or chrF (a corpus), then a lower loss. With
    ``keep="best"`` a CPU copy of the best weights is held, saved as the checkpoint at every
    validation and kept in the training state, so ``--resume`` carries on with the same best.
    """

    def __init__(self, opts: TrainOptions, model: Transformer, task: bool, hold: bool = True):
        self.keep, self.patience = opts.keep, opts.patience
        self.metric, self.name = ("val_exact_match", "exact match") if task else (
            "val_chrf", "chrF")  # fmt: skip
        self.model = None  # a copy (no random draws: a resumed run's noise stays the same)
        if opts.keep == "best" and hold:  # rank 0 alone validates and saves
            self.model = copy.deepcopy(model).cpu().eval().requires_grad_(False)
        self.best: dict = {}
        self.since = 0  # validations since the best

    def _score(self, m: dict) -> tuple[float, float]:
        return m[self.metric], -m["val_loss"]

    def add(self, m: dict, model: Transformer) -> bool:
        """Count a validation; True (and the weights copied) when it is the best so far."""
        if self.best and self._score(m) <= self._score(self.best):
            self.since += 1
            return False
        self.best, self.since = m, 0
        if self.model is not None:
            self.model.load_state_dict(model.state_dict())
        return True

    def resume(self, history: list[dict], kept_step: int) -> None:
        """The best (the validation at ``kept_step``, whose weights the training state holds)
        and the validations since it, from a saved run's history."""
        at = max((i for i, m in enumerate(history) if m["step"] == kept_step),
                 default=len(history) - 1)  # fmt: skip
        if history and not all(
            isinstance(history[at].get(k), (int, float)) for k in (self.metric, "val_loss")
        ):
            raise CheckpointError(
                f"the saved run's history has no {self.name} and validation loss at step "
                f"{history[at].get('step')}: it is not a history --resume continues"
            )
        self.best, self.since = history[at], len(history) - 1 - at

    def out_of_patience(self) -> str | None:
        if self.patience is None or self.since < self.patience:
            return None
        return (
            f"no better {self.name} in {self.patience} validations "
            f"(best {self.best[self.metric]:.4g} at step {self.best['step']})"
        )

    def record(self, step: int, stopped: str | None) -> dict:
        """What the checkpoint's metadata says about the kept weights."""
        return {"keep": self.keep, "by": self.name, "step": self.best["step"],
                "value": self.best[self.metric], "last_step": step,
                "patience": self.patience, "stopped": stopped}  # fmt: skip

    def summary(self, step: int) -> str:
        """One line for the end of a run: which step's weights the checkpoint holds."""
        b = self.best
        best = f"step {b['step']} ({self.name} {b[self.metric]:.4g}, val loss {b['val_loss']:.4f})"
        if self.keep == "last":
            return f"kept the last step, {step}; the best validation was {best}"
        if b["step"] == step:
            return f"kept step {step}, the last, also the best validation: {best}"
        return f"kept the best validation, {best}; the last step, {step}, was not better"
