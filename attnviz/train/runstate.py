"""What a training run keeps besides its checkpoint: the resumable state (the model, the
kept weights when they are an earlier step's, the optimiser's moments, the random state) and
its progress line (a tqdm bar on a terminal, a plain line now and then in a log)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from ..core.config import is_int, is_real
from ..core.errors import CheckpointError, shorten
from ..core.files import write_tensors
from ..core.model import Transformer
from ..core.weights import unique_state_dict


def save_train_state(
    path: Path,
    model: Transformer,
    opt: torch.optim.Optimizer,
    info: dict,
    best: Transformer | None = None,
) -> None:
    # tied parameters stored once, as in a checkpoint
    tensors = {f"model.{k}": v for k, v in unique_state_dict(model).items()}
    if best is not None:  # the kept weights, when they are an earlier step's
        tensors.update({f"best.{k}": v for k, v in unique_state_dict(best).items()})
    for i, st in opt.state_dict()["state"].items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            tensors[f"opt.{i}.{name}"] = torch.as_tensor(st[name]).float()
    # the random state, so dropout after a resume draws what it would have drawn
    tensors["rng.cpu"] = torch.get_rng_state()
    if model_device(model).type == "cuda":
        tensors["rng.cuda"] = torch.cuda.get_rng_state(model_device(model))
    write_tensors(path, tensors, info)


def load_train_state(
    tensors: dict,
    path: Path,
    model: Transformer,
    opt: torch.optim.Optimizer,
    best: Transformer | None = None,
) -> None:
    try:
        with torch.no_grad():  # copying into the tied parameter fills every name it has
            for k, t in unique_state_dict(model).items():
                t.copy_(tensors[f"model.{k}"])
            if best is not None:  # the kept weights: an earlier step's, else the model's
                prefix = "best." if any(k.startswith("best.") for k in tensors) else "model."
                for k, t in unique_state_dict(best).items():
                    t.copy_(tensors[f"{prefix}{k}"])
        state = opt.state_dict()
        for i in (i for group in state["param_groups"] for i in group["params"]):
            if f"opt.{i}.step" in tensors:
                state["state"][i] = {
                    n: tensors[f"opt.{i}.{n}"] for n in ("exp_avg", "exp_avg_sq", "step")
                }
        opt.load_state_dict(state)
        if "rng.cpu" in tensors:
            torch.set_rng_state(tensors["rng.cpu"].to(torch.uint8))
        if "rng.cuda" in tensors and model_device(model).type == "cuda":
            torch.cuda.set_rng_state(tensors["rng.cuda"].to(torch.uint8), model_device(model))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path} does not match this model and optimiser ({exc})") from None


def _count(v) -> bool:
    return is_int(v) and v >= 0


def check_run_info(info: object, path: Path) -> dict:
    """A training state's metadata as ``--resume`` reads it, each value checked: its
    options (a table), step and kept step (counts), elapsed seconds (a finite number >= 0) and
    history (validations: tables with a step and finite numbers). The values of the options
    are checked where they are resolved (:meth:`~attnviz.train.options.TrainOptions.resolved`).

    Raises:
        CheckpointError: one line naming the first value that is not what a run writes.
    """

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: {what}; it is not a training state --resume continues")

    if not isinstance(info, dict) or "step" not in info:
        raise bad("not an attnviz training state")
    if not isinstance(info.get("options"), dict):
        raise bad("it holds no options")
    for key in ("step", "kept_step"):
        if key in info and not _count(info[key]):
            raise bad(f"its {key.replace('_', ' ')} is {shorten(repr(info[key]), 40)}, not a count")
    if not is_real(info.get("elapsed")) or info["elapsed"] < 0:
        raise bad(f"its elapsed time is {shorten(repr(info.get('elapsed')), 40)}")
    history = info.get("history")
    ok = isinstance(history, list) and all(
        isinstance(m, dict) and _count(m.get("step"))
        and all(is_real(v) for k, v in m.items() if k != "step" and not isinstance(v, str))
        for m in history
    )  # fmt: skip
    if not ok:
        raise bad("its history is not a list of validations (a step and finite numbers each)")
    return info


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


class Progress:
    """A tqdm bar on a terminal; without one (a log file, CI, nohup), one plain line every
    ``every_s`` seconds instead of bar redraws. :meth:`write` lines (evaluations) always show.
    """

    def __init__(self, total: int, initial: int, desc: str, enabled: bool, every_s: float = 30.0):
        from tqdm import tqdm

        self.tty = enabled and sys.stderr.isatty()
        self.enabled, self.every_s, self.total, self.desc = enabled, every_s, total, desc
        self.bar = tqdm(total=total, initial=initial, desc=desc, disable=not self.tty)
        self.last = time.perf_counter()

    def update(self, step: int, **postfix: str) -> None:
        if self.tty:
            self.bar.update(1)
            self.bar.set_postfix(postfix, refresh=False)
        elif self.enabled and time.perf_counter() - self.last >= self.every_s:
            self.last = time.perf_counter()
            stats = "  ".join(f"{k} {v}" for k, v in postfix.items())
            print(f"{self.desc}: step {step}/{self.total}  {stats}", file=sys.stderr, flush=True)

    def write(self, text: str) -> None:
        self.last = time.perf_counter()  # an evaluation line counts as a progress line
        if self.tty:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        self.bar.close()
