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
        #: per snapshot, induction and previous-token scores and the two halves' losses
        #: (:meth:`attnviz.train.induction.InductionScores.to_dict`), for the repeat task
        self.scores: list[dict] | None = None

    @property
    def one_sequence(self) -> bool:
        """The probe is one sequence on both axes (a decoder-only run): no cross-attention,
        and its decoder rows start with the sequence's own ``<bos>``."""
        return not any(kind == "cross" for kind, _ in self.weights)

    @property
    def shown_kind(self) -> str:
        """The attention a playback shows: cross-attention, else a one-stack model's own."""
        kinds = {kind for kind, _ in self.weights}
        for kind in ("cross", "decoder_self", "encoder_self"):
            if kind in kinds:
                return kind
        raise CheckpointError("the snapshots hold no attention")

    def add(
        self, step: int, trace: Trace, output: str, loss: float, scores: dict | None = None
    ) -> None:
        """Keep one snapshot: the probe's attention (batch row 0 of ``trace``), output, loss,
        and the run's per-head ``scores`` where it measures them."""
        for kind, layer in trace.keys():
            w = trace.weights(kind, layer)[0]  # [H, Tq, Tk]
            self.weights.setdefault((kind, layer), []).append(w.detach().half().cpu())
        self.steps.append(step)
        self.outputs.append(output)
        self.losses.append(round(float(loss), 5))
        if scores is not None:
            self.scores = [*(self.scores or []), scores]

    def truncate(self, step: int) -> None:
        """Forget snapshots taken after ``step`` (a resumed run takes them again)."""
        keep = sum(s <= step for s in self.steps)
        self.steps, self.outputs, self.losses = (
            self.steps[:keep],
            self.outputs[:keep],
            self.losses[:keep],
        )
        self.weights = {k: v[:keep] for k, v in self.weights.items()}
        if self.scores is not None:
            self.scores = self.scores[:keep]

    def save(self, path: Path) -> None:
        tensors = {f"{k}.{layer}": torch.stack(v) for (k, layer), v in self.weights.items()}
        meta = {
            "probe_src": self.probe_src,
            "probe_tgt": self.probe_tgt,
            "steps": self.steps,
            "outputs": self.outputs,
            "losses": self.losses,
        }
        if self.scores is not None:
            meta["scores"] = self.scores
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
        if meta.get("scores") is not None:
            snaps.scores = _checked_scores(meta["scores"], n, path)
        for name, t in tensors.items():
            kind, _, layer = name.rpartition(".")
            if kind not in KINDS or not layer.isdigit() or t.dim() != 4 or t.shape[0] != n:
                raise CheckpointError(f"{path}: unexpected snapshot tensor {name} {list(t.shape)}")
            snaps.weights[(kind, int(layer))] = list(t.float())
        return snaps


def _checked_scores(scores: object, n: int, path: Path) -> list[dict]:
    """The stored per-snapshot scores, each checked to be numbers in the expected shapes."""

    def number(v: object) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    def table(v: object) -> bool:
        return isinstance(v, list) and all(
            isinstance(r, list) and all(number(x) for x in r) for r in v
        )

    ok = (
        isinstance(scores, list)
        and len(scores) == n
        and all(
            isinstance(s, dict)
            and table(s.get("prev_token"))
            and table(s.get("induction"))
            and all(number(s.get(k)) for k in ("loss_first", "loss_second", "n", "length"))
            for s in scores
        )
    )
    if not ok:
        raise CheckpointError(f"{path}: the snapshot scores are not one table set per step")
    return scores
