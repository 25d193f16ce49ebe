"""Attention snapshots: how attention on a fixed probe input formed during training.

Every ``snapshot_every`` steps, training records the teacher-forced attention of every layer
and head on the task's probe input (its correct output as the decoder input) plus the greedy
output and loss at that step. The app plays these back as frames.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ..checkpoint import read_tensors, write_tensors
from ..core.errors import CheckpointError
from ..core.model import KINDS
from ..core.record import Trace

SNAPSHOTS = "snapshots.safetensors"


class Snapshots:
    """Attention on the probe input over training: ``weights[(kind, layer)]`` is ``[S, H, Tq, Tk]``.

    Stored as float16 in ``snapshots.safetensors`` (tensor ``"{kind}.{layer}"``), with the
    probe tokens, the steps, and the probe's greedy output and loss at each step in the header.
    """

    def __init__(self, probe_src: list[str], probe_tgt: list[str]):
        self.probe_src, self.probe_tgt = probe_src, probe_tgt
        self.steps: list[int] = []
        self.outputs: list[str] = []
        self.losses: list[float] = []
        self.weights: dict[tuple[str, int], list[Tensor]] = {}

    def add(self, step: int, trace: Trace, output: str, loss: float) -> None:
        """Keep one snapshot: the probe's attention (batch row 0 of ``trace``), output, loss."""
        for kind, layer in trace.keys():
            w = trace.weights(kind, layer)[0]  # [H, Tq, Tk]
            self.weights.setdefault((kind, layer), []).append(w.detach().half().cpu())
        self.steps.append(step)
        self.outputs.append(output)
        self.losses.append(round(float(loss), 5))

    def truncate(self, step: int) -> None:
        """Forget snapshots taken after ``step`` (a resumed run takes them again)."""
        keep = sum(s <= step for s in self.steps)
        self.steps, self.outputs, self.losses = (
            self.steps[:keep],
            self.outputs[:keep],
            self.losses[:keep],
        )
        self.weights = {k: v[:keep] for k, v in self.weights.items()}

    def save(self, path: Path) -> None:
        tensors = {f"{k}.{layer}": torch.stack(v) for (k, layer), v in self.weights.items()}
        meta = {
            "probe_src": self.probe_src,
            "probe_tgt": self.probe_tgt,
            "steps": self.steps,
            "outputs": self.outputs,
            "losses": self.losses,
        }
        write_tensors(path, tensors, meta)

    @classmethod
    def load(cls, path: str | Path) -> Snapshots:
        """Read ``snapshots.safetensors`` (a folder or the file); a malformed one raises
        :class:`~attnviz.core.errors.CheckpointError`."""
        path = Path(path)
        tensors, meta = read_tensors(path / SNAPSHOTS if path.is_dir() else path)
        keys = ("probe_src", "probe_tgt", "steps", "outputs", "losses")
        if not isinstance(meta, dict) or any(not isinstance(meta.get(k), list) for k in keys):
            raise CheckpointError(
                f"{path}: not an attention snapshot file (needs {', '.join(keys)})"
            )
        n = len(meta["steps"])
        if not n or len(meta["outputs"]) != n or len(meta["losses"]) != n:
            raise CheckpointError(f"{path}: snapshot steps, outputs and losses do not line up")
        snaps = cls(meta["probe_src"], meta["probe_tgt"])
        snaps.steps, snaps.outputs, snaps.losses = meta["steps"], meta["outputs"], meta["losses"]
        for name, t in tensors.items():
            kind, _, layer = name.rpartition(".")
            if kind not in KINDS or not layer.isdigit() or t.dim() != 4 or t.shape[0] != n:
                raise CheckpointError(f"{path}: unexpected snapshot tensor {name} {list(t.shape)}")
            snaps.weights[(kind, int(layer))] = list(t.float())
        return snaps
