"""Why two sentences are similar: the cosine of a sentence embedder's two embeddings split
into token pairs, and attributed to the input tokens.

**Token pairs.** Each text's pooled vector is a sum of per-token parts ``u = Σ_i U_i``: mean
pooling gives ``U_i = h_i / T`` (``h_i`` the final token state), mean-sqrt-len ``h_i / √T``,
weighted mean ``w_i h_i / Σ w``, CLS and last-token the one token's state, max the token state
kept only in the dimensions where that token holds the maximum; several modes concatenate
their parts. A linear Dense (no activation) maps each part, ``W U_i + b / T`` (its bias
shared evenly by the text's tokens), and Normalize divides every part by the vector's length:
the parts still sum to the embedding. So

    cos(a, b) = Σ_ij U_i · V_j / (|Σ U| |Σ V|)      pairs[i, j] = U_i · V_j / (|Σ U| |Σ V|)

exactly (float64; ``pairs.sum()`` is the cosine). With CLS or last-token pooling alone one
cell holds the whole cosine: the pairs say nothing there, the attribution below does. A
Dense with an activation (Tanh) is not linear: the pairs then split the cosine of the vectors
before it, and :attr:`Similarity.covers` says so with both cosines.

**Attribution to the input tokens.** Integrated Gradients of the cosine over one text's token
embeddings (the rows of the token table, before positions and the embedding norm), through
the whole encoder, the other text's embedding held fixed; from a baseline that keeps the
text's first and last tokens (the specials: ``[CLS]``/``[SEP]``, ``<s>``/``</s>``) and puts
the pad id's row everywhere else (both texts at such a baseline would be near-identical, so
each text is attributed against the real other). Completeness: ``a``'s scores sum to
``cos(a, b) - cos(baseline(a), b)``; :attr:`Similarity.ig_delta` is how far either side
misses. It runs on a private copy of the model: hooks and gradients never reach the shared
one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.record import Trace, record


@dataclass
class Similarity:
    """Why two texts are similar (Ta, Tb: their token counts).

    Attributes:
        cosine: the cosine of the two embeddings (as :meth:`Checkpoint.embed` gives them).
        tokens_a, tokens_b: the tokens read (specials included, after truncation).
        pairs: ``[Ta, Tb]`` float64 token-pair contributions; ``pairs.sum()`` is ``covered``.
        share_a, share_b: ``[Ta]`` / ``[Tb]`` each token's share (row / column sums).
        covered: the cosine the pairs split (``cosine`` unless a Dense has an activation).
        covers: what the pairs split, in words.
        ig_a, ig_b: ``[Ta]`` / ``[Tb]`` Integrated Gradients of the cosine per input token
            (one text moved along the path, the other held at its embedding).
        baseline_a, baseline_b: the cosine with that text at its baseline, the other not.
        ig_delta: completeness error, the larger of ``|Σ ig_a - (cosine - baseline_a)|`` and
            the same for ``b``.
        trace_a, trace_b: each text's recorded attention (``"encoder_self"`` ``[1, H, T, T]``).
    """

    cosine: float
    tokens_a: list[str]
    tokens_b: list[str]
    pairs: Tensor
    share_a: Tensor
    share_b: Tensor
    covered: float
    covers: str
    ig_a: Tensor | None = None
    ig_b: Tensor | None = None
    ig_delta: float | None = None
    baseline_a: float | None = None
    baseline_b: float | None = None
    trace_a: Trace | None = field(default=None, repr=False)
    trace_b: Trace | None = field(default=None, repr=False)

    def top(self, k: int = 10) -> list[tuple[int, int, str, str, float]]:
        """The ``k`` pairs of largest magnitude: ``(i, j, token_i, token_j, contribution)``."""
        flat = self.pairs.flatten()
        order = flat.abs().argsort(descending=True)[:k].tolist()
        tb = len(self.tokens_b)
        return [(i // tb, i % tb, self.tokens_a[i // tb], self.tokens_b[i % tb],
                 float(flat[i])) for i in order]  # fmt: skip

    def text(self, k: int = 10) -> str:
        """A few lines: the cosine, what the pairs cover and the top ``k`` pairs."""
        lines = [f"cosine {self.cosine:.4f} ({self.covers})"]
        for i, j, ta, tb, v in self.top(k):
            lines.append(f"  {v:+.4f}  {ta!r} [{i}] ~ {tb!r} [{j}]")
        if self.ig_a is not None:
            for name, toks, ig in (
                ("a", self.tokens_a, self.ig_a),
                ("b", self.tokens_b, self.ig_b),
            ):
                best = ig.abs().argsort(descending=True)[:5].tolist()
                shown = ", ".join(f"{toks[i]!r} {float(ig[i]):+.3f}" for i in best)
                lines.append(f"input tokens of {name} (Integrated Gradients): {shown}")
            lines.append(f"  completeness error {self.ig_delta:.2g}")
        return "\n".join(lines)


def token_parts(embedder, h: Tensor, real: Tensor) -> tuple[Tensor, str]:
    """Per-token parts ``[T, E']`` of one text (batch of one) that sum to its embedding (up to
    Normalize's scale), in float64, and what they cover.

    Args:
        embedder: the checkpoint's sentence pipeline; h: ``[1, T, D]`` final states;
            real: ``[1, T]`` bool.
    """
    h = h.double()
    parts = torch.cat(embedder.pooling.parts(h, real), -1)[0]  # [T, P]
    t = int(real.sum())
    covers = "exact: the pairs sum to the cosine"
    for m in embedder.after:
        if getattr(m, "weight", None) is None:  # Normalize: every part scaled alike
            parts = parts / parts.sum(0).norm().clamp(min=1e-12)
        elif m.linear:
            bias = 0 if m.bias is None else m.bias.double() / t
            parts = parts @ m.weight.double().T + bias * real[0, :, None].double()
        else:
            act = m.activation.rsplit(".", 1)[-1]
            covers = f"the pooled vectors before the Dense with {act}"
            break
    return parts, covers


def similarity(
    ckpt: Checkpoint, a: str, b: str, attribute: bool = True, n_steps: int = 50
) -> Similarity:
    """Why ``a`` and ``b`` are similar under a sentence embedder (see the module's doc).

    Args:
        ckpt: a sentence-transformers folder (:meth:`Checkpoint.embed` works on it).
        a, b: the two texts.
        attribute: also run Integrated Gradients (``n_steps`` Gauss-Legendre points).
    Returns:
        :class:`Similarity`.
    Raises:
        InputError: not a sentence embedder, an empty or bad text, a bad ``n_steps``.
    """
    emb = ckpt.embedder
    if emb is None:
        raise InputError(
            "similarity needs a sentence embedder: open a sentence-transformers folder "
            "(one with modules.json)"
        )
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or not 2 <= n_steps <= 500:
        raise InputError(f"n_steps must be 2 to 500, got {n_steps!r}")
    encs = [emb.read(ckpt, a), emb.read(ckpt, b)]
    sides = []
    for enc in encs:
        ids, real = emb.batch(ckpt, [enc])
        with torch.inference_mode(), record(ckpt.model) as trace:
            h = ckpt.model.encode(ids, ~real)  # [1, T, D]
            vec = emb.finish(emb.pooling(h.double(), real))[0]  # [E] float64
        parts, covers = token_parts(emb, h, real)
        sides.append((ids, real, trace, vec, parts))
    (_, _, trace_a, va, ua), (_, _, trace_b, vb, ub) = sides
    cosine = float(F.cosine_similarity(va, vb, dim=0))
    norm = ua.sum(0).norm() * ub.sum(0).norm()
    pairs = (ua @ ub.T) / norm  # [Ta, Tb]
    covered = float(pairs.sum())
    if not covers.startswith("exact"):
        covers = f"{covers}: the pairs sum to {covered:.4f}, the embeddings' cosine is {cosine:.4f}"
    out = Similarity(
        cosine, list(encs[0].pieces), list(encs[1].pieces), pairs, pairs.sum(1), pairs.sum(0),
        covered, covers, trace_a=trace_a, trace_b=trace_b,
    )  # fmt: skip
    if attribute:
        ig_a, base_a, full = integrated_gradients(ckpt, sides[0][:2], vb, n_steps)
        ig_b, base_b, _ = integrated_gradients(ckpt, sides[1][:2], va, n_steps)
        out.ig_a, out.ig_b, out.baseline_a, out.baseline_b = ig_a, ig_b, base_a, base_b
        out.ig_delta = max(abs(float(ig_a.sum()) - (full - base_a)),
                           abs(float(ig_b.sum()) - (full - base_b)))  # fmt: skip
    return out


def integrated_gradients(
    ckpt: Checkpoint, side: tuple[Tensor, Tensor], other: Tensor, n_steps: int
) -> tuple[Tensor, float, float]:
    """IG of ``cos(embed(text), other)`` over the text's token embeddings.

    Args:
        side: the text's ``(ids [1, T], real [1, T])``; other: the other embedding ``[E]``.
    Returns:
        ``ig [T]`` (float64, CPU), the baseline's cosine and the text's.
    """
    model = copy.deepcopy(ckpt.model).eval()  # private: the hook and gradients stay here
    model.requires_grad_(False)
    table = model.src_embed
    x, g = np.polynomial.legendre.leggauss(n_steps)
    alphas = torch.tensor([0.0, 1.0, *((x + 1) / 2)], device=ckpt.device)  # [2 + n]
    weights = torch.tensor([0.0, 0.0, *(g / 2)], device=ckpt.device, dtype=torch.float64)
    ids, real = side
    base = torch.full_like(ids, ckpt.config.pad_id)
    base[:, 0], base[:, -1] = ids[:, 0], ids[:, -1]  # the specials stay
    xs, bs = table.weight[ids[0]], table.weight[base[0]]  # [T, D]
    path = (bs + alphas[:, None, None].to(xs) * (xs - bs)).requires_grad_()  # [2 + n, T, D]
    handle = table.register_forward_hook(lambda _m, _i, _o: path)
    try:
        n = path.shape[0]
        vecs = ckpt.embedder.forward(model, ids.expand(n, -1), real.expand(n, -1))  # [2 + n, E]
    finally:
        handle.remove()
    cos = F.cosine_similarity(vecs.double(), other.double()[None], dim=-1)  # [2 + n]
    (cos * weights).sum().backward()
    ig = ((xs - bs).double() * path.grad.double().sum(0)).sum(-1).cpu()  # [T]
    return ig, float(cos[0].detach()), float(cos[1].detach())
