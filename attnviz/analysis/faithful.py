"""Faithfulness: does blocking the source tokens a view ranks highest change the prediction?

At one decoding step each method ranks the source tokens for the token the model chose:

- ``"weights"``, ``"norms"``: that step's cross-attention row through the lens, averaged over
  layers and heads (:mod:`attnviz.analysis.lenses`);
- ``"rollout"``: the encoder-decoder rollout of the last layer;
- ``"ig"``: Integrated Gradients on the source embeddings (:func:`attnviz.analysis.attribute`);
- ``"random"``: a random order (a floor every real method should beat).

Then, teacher-forced on the same prefix, the top-k source tokens are blocked through the source
padding mask (every attention then ignores them, as it ignores padding):

- **comprehensiveness** (k) = p(chosen) − p(chosen | top-k blocked): high when the top-k matter;
- **sufficiency** (k) = p(chosen) − p(chosen | all but the top-k blocked): low when they suffice.

Curves for k = 1..K and their means (AOPC) over the inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import record
from ..data.batch import source_batch
from .attribution import attribute
from .lenses import lens

METHODS = ("weights", "norms", "rollout", "ig", "random")


@dataclass
class FaithfulnessReport:
    """Comprehensiveness and sufficiency curves per method.

    Attributes:
        comprehensiveness / sufficiency: ``{method: [K]}`` mean over inputs at k = 1..K.
        n: inputs measured.
    """

    comprehensiveness: dict[str, np.ndarray]
    sufficiency: dict[str, np.ndarray]
    n: int

    def aopc(self, which: str = "comprehensiveness") -> dict[str, float]:
        """Area over the perturbation curve: the mean of a curve over k."""
        curves = getattr(self, which)
        return {m: float(np.mean(c)) for m, c in curves.items()}

    def text(self) -> str:
        comp, suff = self.aopc("comprehensiveness"), self.aopc("sufficiency")
        rows = [f"faithfulness over {self.n} inputs (AOPC over k = 1..{self.k})"]
        rows += [
            f"  {m:8s} comprehensiveness {comp[m]:+.3f}  sufficiency {suff[m]:+.3f}" for m in comp
        ]
        return "\n".join(rows)

    @property
    def k(self) -> int:
        return len(next(iter(self.comprehensiveness.values())))


def rankings(
    ckpt: Checkpoint,
    text: str,
    step: int,
    tokens: Sequence[int],
    methods: Sequence[str] = METHODS,
    seed: int = 0,
    ig_steps: int = 16,
) -> dict[str, np.ndarray]:
    """Each method's scores of the source tokens ``[Ts]`` for output ``tokens[step]``."""
    cfg, model = ckpt.config, ckpt.model
    src = torch.tensor([ckpt.encode_source(text).ids], device=ckpt.device)
    tgt = torch.tensor([[cfg.bos_id, *tokens[:step]]], device=ckpt.device)
    with torch.no_grad(), record(model, capture=("weights", "mask", "values")) as trace:
        model(src, tgt)
    layers = trace.layers("cross")
    out: dict[str, np.ndarray] = {}
    for m in methods:
        if m in ("weights", "norms"):
            out[m] = np.mean(
                [lens(model, trace, "cross", ly, m)[0, :, step] for ly in layers], (0, 1)
            )
        elif m == "rollout":
            out[m] = lens(model, trace, "cross", layers[-1], "rollout")[0, 0, step]
        elif m == "ig":
            out[m] = attribute(ckpt, text, step, tokens=list(tokens), n_steps=ig_steps).ig_src
        elif m == "random":
            out[m] = np.random.default_rng([seed, step, len(text)]).random(src.shape[1])
        else:
            raise InputError(f"method must be one of {METHODS}, got {m!r}")
    return out


@torch.no_grad()
def _chosen_probs(ckpt: Checkpoint, src: torch.Tensor, tgt: torch.Tensor, blocked, chosen: int):
    """p(chosen) at the last decoder position for each row of ``blocked`` ``[R, Ts]``."""
    r = blocked.shape[0]
    logits = ckpt.model(src.expand(r, -1), tgt.expand(r, -1), blocked)[:, -1]  # [R, V]
    return logits.float().softmax(-1)[:, chosen].cpu().numpy()


def faithfulness(
    ckpt: Checkpoint,
    texts: Sequence[str],
    step: int | None = None,
    k_max: int = 5,
    methods: Sequence[str] = METHODS,
    seed: int = 0,
    ig_steps: int = 16,
) -> FaithfulnessReport:
    """Comprehensiveness and sufficiency of each method's ranking (see the module docstring).

    Args:
        texts: inputs; each is greedy-decoded and measured at ``step`` (default: the middle
            of its output, clipped to the output's length).
        k_max: K, the most source tokens blocked or kept (clipped to each input's length).
    """
    if not ckpt.config.has_cross:
        raise InputError(
            "faithfulness blocks source tokens from the cross-attention of an encoder-decoder "
            f"model; this one is {ckpt.config.arch}"
        )
    if not texts:
        raise InputError("give at least one input")
    if k_max < 1:
        raise InputError(f"k_max must be at least 1, got {k_max}")
    cfg = ckpt.config
    comp = {m: np.zeros(k_max) for m in methods}
    suff = {m: np.zeros(k_max) for m in methods}
    for i, text in enumerate(texts):
        batch = source_batch([ckpt.encode_source(text).ids], cfg, ckpt.device)
        out = ckpt.greedy(batch.src)[0].tolist()  # the checkpoint's generation rules
        tokens = ckpt.decoding.until_end(out)
        t = min(len(tokens) // 2 if step is None else step, len(tokens) - 1)
        tgt = torch.tensor([[cfg.bos_id, *tokens[:t]]], device=ckpt.device)
        scores = rankings(ckpt, text, t, tokens, methods, seed=seed + i, ig_steps=ig_steps)
        n = batch.src.shape[1]
        ks = [min(k, n) for k in range(1, k_max + 1)]
        rows = []
        for m in methods:
            order = np.argsort(-scores[m], kind="stable")
            for k in ks:
                top = torch.zeros(n, dtype=torch.bool, device=ckpt.device)
                top[torch.as_tensor(order[:k].copy(), device=ckpt.device)] = True
                rows += [top, ~top]  # comprehensiveness row, sufficiency row
        blocked = torch.stack([torch.zeros(n, dtype=torch.bool, device=ckpt.device), *rows])
        p = _chosen_probs(ckpt, batch.src, tgt, blocked, tokens[t])
        full, rest = p[0], p[1:].reshape(len(methods), len(ks), 2)
        for j, m in enumerate(methods):
            comp[m] += full - rest[j, :, 0]
            suff[m] += full - rest[j, :, 1]
    n_in = len(texts)
    return FaithfulnessReport(
        {m: c / n_in for m, c in comp.items()}, {m: s / n_in for m, s in suff.items()}, n_in
    )
