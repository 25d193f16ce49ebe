"""One path from tensors to a model: names and shapes checked on the meta device, then
loaded, then checked for NaN and inf.

Used by :func:`attnviz.load_checkpoint`, :mod:`attnviz.interop.hf` and
:func:`attnviz.interop.from_torch_state_dict`. A leaf module: it imports only the config,
the model and the errors.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import torch
from torch import Tensor

from .config import ModelConfig
from .devices import one_thread
from .errors import CheckpointError, shorten
from .model import Transformer


def unique_state_dict(model: torch.nn.Module) -> dict[str, Tensor]:
    """The state dict with tied tensors stored once (the first name wins).

    Ties are found by parameter identity, so this works on a ``meta``-device model as well.
    """
    keep = {name for name, _ in model.named_parameters()}  # a shared parameter appears once
    keep |= {name for name, _ in model.named_buffers()}
    return {k: v for k, v in model.state_dict().items() if k in keep}


def check_tensors(expected: dict[str, Tensor], tensors: dict[str, Tensor], where) -> None:
    """Every expected tensor present, no others, shapes as the config says, all float.

    Raises:
        CheckpointError: one line naming the first few offenders.
    """
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong = [
        f"{shorten(k)} {list(tensors[k].shape)} (config wants {list(expected[k].shape)})"
        for k in expected
        if k in tensors and tensors[k].shape != expected[k].shape
    ]
    not_float = [k for k in tensors if k in expected and not tensors[k].is_floating_point()]
    for label, names in (
        ("missing tensors", [shorten(k) for k in missing]),
        ("unexpected tensors", [shorten(k) for k in unexpected]),
        ("shapes that do not match the config", wrong),
        ("non-float tensors", [shorten(k) for k in not_float]),
    ):
        if names:
            more = f" and {len(names) - 4} more" if len(names) > 4 else ""
            raise CheckpointError(f"{where}: {label}: {', '.join(names[:4])}{more}")


def finite(t: Tensor) -> bool:
    """Whether every number of ``t`` is finite: its sum first, in its own dtype (NaN and inf
    carry into it; no copy is made, where a float64 sum copies the whole tensor to float64),
    the cells only when the sum is not finite (an overflowing sum of finite numbers)."""
    if not t.is_floating_point() or t.numel() == 0:
        return True
    with torch.no_grad():
        if bool(torch.isfinite(t.sum())):
            return True
        return all(bool(torch.isfinite(part).all()) for part in t.reshape(-1).split(1 << 20))


def load_tensors(
    model: torch.nn.Module, tensors: dict[str, Tensor], where, owned: bool = False
) -> None:
    """Put ``tensors`` into ``model`` (names and shapes already checked); refuse NaN/inf.

    Args:
        owned: the tensors are the caller's to give away (read from a file for this model):
            each parameter then takes its tensor's memory instead of a copy, so the weights
            exist once (the parameter's own, never-written allocation is handed back
            untouched). Otherwise they are copied (a user's state dict stays theirs).
    """
    # keep_vars: the parameter and buffer objects themselves (state_dict() detaches them,
    # and a detached alias given new data leaves the module's tensor as it was)
    kept = model.state_dict(keep_vars=True)
    expected = {k: kept[k] for k in unique_state_dict(model)}
    with torch.no_grad():
        for k, t in expected.items():
            given = tensors[k].to(t.dtype)
            if owned and given.device == t.device:
                t.data = given.contiguous()  # the same Parameter object: ties are kept
            else:
                t.copy_(given)
    bad = [k for k, t in expected.items() if not finite(t)]
    if bad:
        raise CheckpointError(f"{where}: NaN or inf in {', '.join(shorten(k) for k in bad[:4])}")


#: torch.nn.init's in-place initialisers: skipped while a model that is about to receive a
#: checkpoint's tensors is built (its random start was thrown away at once)
_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_")  # fmt: skip
_INIT_LOCK = threading.Lock()


@contextlib.contextmanager
def _no_init():
    """Parameters left as allocated (every one is then overwritten: check_tensors made sure
    each has a tensor); buffers computed in the constructors (position tables) are kept."""
    init = torch.nn.init
    with _INIT_LOCK:
        saved = {name: getattr(init, name) for name in _INITS}
        try:
            for name in _INITS:
                setattr(init, name, lambda tensor, *args, **kwargs: tensor)
            yield
        finally:
            for name, fn in saved.items():
                setattr(init, name, fn)


def build_model(
    config: ModelConfig, tensors: dict[str, Tensor], where: str | Path, owned: bool = False
) -> Transformer:
    """A :class:`Transformer` of ``config`` holding ``tensors``, in eval mode on the CPU.

    Names and shapes are checked against a meta-device skeleton before anything is
    allocated, so a config asking for a huge model fails cheaply; the loaded weights are
    checked for NaN and inf.

    Args:
        tensors: the state dict, tied tensors once (as :func:`unique_state_dict` names them).
        where: the file or folder named in errors.
        owned: the model may keep the tensors' memory (see :func:`load_tensors`).
    Raises:
        CheckpointError: missing, unexpected, misshapen, non-float or non-finite tensors.
    """
    # No init on the skeleton either: normal_ on the meta device goes through torch's
    # reference ops, whose first use imports torch._dynamo (1.5 s).
    with torch.device("meta"), _no_init():
        skeleton = Transformer(config)
    check_tensors(unique_state_dict(skeleton), tensors, where)
    with _no_init():  # every parameter is overwritten just below
        model = Transformer(config)
    with one_thread():
        load_tensors(model, tensors, where, owned)
    return model.eval()
