"""Direct logit attribution: the chosen token's logit (or the difference of two logits, "why
A and not B") split into the parts of the residual stream that wrote it: token embeddings,
positions, every attention head (its per-head output times its slice of the output
projection), every MLP and every bias, each read through the final norm with its scale frozen
at the value it had in the run (TransformerLens's ``apply_ln_to_stack``).

Sandwich norms (Gemma 3's post-attention and post-feed-forward norms) are frozen the same way:
a head's part is its share of the sublayer's output times that norm's frozen scale, so the
parts of a sublayer still add up to its normed output. T5's output scale multiplies every part;
an output bias and a final LayerNorm's bias are parts of their own. The parts add up to the
logit up to float rounding (float64 arithmetic on the run's float32 streams).

Shape legend: T positions, D width, H heads, Dh head width, N parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from ..checkpoint import Checkpoint
from ..core.errors import InputError
from ..core.layers import RMSNorm
from ..core.model import embed_scale
from .why import Exportable, checkpoint_of, label, prepare, streams_of, token_id


@dataclass
class Part:
    """One writer to the residual stream and what it adds to the logit (difference)."""

    name: str
    value: float
    kind: str  # "embed", "positions", "head", "attn_bias", "mlp", "mlp_bias", "norm", ...
    layer: int | None = None
    head: int | None = None


@dataclass
class DirectAttribution(Exportable):
    """The logit of ``token`` (minus that of ``versus``) split into :class:`Part` s.

    ``total`` is the sum of the parts; ``logit`` what the model computed (float32 run:
    they agree to float rounding).
    """

    tokens: list[str]
    position: int
    token: str
    token_id: int
    versus: str | None
    versus_id: int | None
    parts: list[Part] = field(default_factory=list)
    total: float = 0.0
    logit: float = 0.0

    def values(self) -> np.ndarray:
        return np.array([p.value for p in self.parts], dtype=np.float64)

    def names(self) -> list[str]:
        return [p.name for p in self.parts]

    def head_grid(self, kind: str = "head") -> np.ndarray:
        """The heads' parts as ``[L, H]`` (``kind="cross_head"``: cross-attention's)."""
        heads = [p for p in self.parts if p.kind == kind]
        if not heads:
            return np.zeros((0, 0))
        grid = np.zeros((max(p.layer for p in heads) + 1, max(p.head for p in heads) + 1))
        for p in heads:
            grid[p.layer, p.head] = p.value
        return grid

    def top(self, n: int = 10) -> list[Part]:
        return sorted(self.parts, key=lambda p: -abs(p.value))[:n]

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens, "position": self.position, "token": self.token,
            "token_id": self.token_id, "versus": self.versus, "versus_id": self.versus_id,
            "names": self.names(), "values": self.values().tolist(),
            "total": self.total, "logit": self.logit,
        }  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        return {"values": self.values(), "names": np.array(self.names(), dtype=str),
                "heads": self.head_grid(), "total": np.array(self.total),
                "logit": np.array(self.logit)}  # fmt: skip

    def text(self, n: int = 12) -> str:
        what = repr(self.token) + (f" and not {self.versus!r}" if self.versus else "")
        lines = [f"why {what} at position {self.position}: logit"
                 f"{' difference' if self.versus else ''} {self.logit:.4f} = sum of parts "
                 f"{self.total:.4f}"]  # fmt: skip
        lines += [f"  {p.name:<24} {p.value:+.4f}" for p in self.top(n)]
        return "\n".join(lines)


def freeze(norm: nn.Module | None, x: Tensor, center: bool = True):
    """A norm made linear at the input ``x [D]`` it saw (float64): ``(map, bias)``, where
    ``map(parts [N, D]) -> [N, D]`` scales by the frozen factor (and centres each part, for a
    LayerNorm with ``center``) and ``bias`` is the norm's own constant part ``[D]`` or None;
    without ``center`` the centring is one more part, ``-mean(x)`` mapped."""
    if norm is None:
        return (lambda p: p), None, None
    x = x.double()
    if isinstance(norm, RMSNorm):
        scale = torch.rsqrt(x.pow(2).mean() + norm.eps)
        gain = norm.weight.double() + norm.offset
        return (lambda p: p * scale * gain), None, None
    if isinstance(norm, nn.LayerNorm):
        mean = x.mean()
        scale = torch.rsqrt((x - mean).pow(2).mean() + norm.eps)
        gain = norm.weight.double() if norm.weight is not None else 1.0
        bias = norm.bias.double() if norm.bias is not None else None
        if center:
            return (lambda p: (p - p.mean(-1, keepdim=True)) * scale * gain), bias, None
        return (lambda p: p * scale * gain), bias, -mean * scale * gain
    raise InputError(f"cannot freeze a {type(norm).__name__}")


def _refuse_dla(ckpt: Checkpoint, stack: str) -> None:
    cfg = ckpt.config
    if stack == "encoder":
        raise InputError(
            "direct attribution reads the stream straight into the unembedding; a masked-LM "
            "head has a dense layer and an activation in between: use logit_lens"
        )
    if not cfg.norm_first:
        raise InputError(
            "direct attribution needs a pre-norm model (an additive residual stream); this "
            "one norms after each block: use logit_lens or patch"
        )


def direct_attribution(
    ckpt: Checkpoint | str,
    text,
    token: int | str | None = None,
    versus: int | str | None = None,
    step: int | None = None,
    center: bool = True,
) -> DirectAttribution:
    """Direct logit attribution at the predicting position of ``text``.

    Args:
        token: the token explained (id or text; default the model's argmax there).
        versus: a second token: explain ``logit(token) - logit(versus)``.
        step: which decoding step (see :func:`prepare`).
        center: fold a final LayerNorm's centring into each part (TransformerLens); False
            reports it as its own part (``"final norm centering"``).
    Returns:
        :class:`DirectAttribution`: parts named ``"embed"``, ``"positions"``,
        ``"L{l}H{h}"`` (self-attention heads), ``"L{l}X{h}"`` (cross-attention heads),
        ``"L{l} attn bias"``, ``"L{l} mlp"``, ``"L{l} mlp bias"``, ``"final norm bias"``,
        ``"output bias"``; their sum ``total`` equals the model's ``logit`` to rounding.
    Raises:
        InputError: a post-norm model, a masked-LM model, a token that is not one token.
    """
    ckpt = checkpoint_of(ckpt)
    prep = prepare(ckpt, text, step)
    _refuse_dla(ckpt, prep.stack)
    with torch.no_grad():
        return _attribute(ckpt, prep, token, versus, center)


def _attribute(ckpt: Checkpoint, prep, token, versus, center: bool) -> DirectAttribution:
    model, cfg = ckpt.model, ckpt.config
    logits, trace = streams_of(ckpt, prep, capture=("head_output",))
    p = prep.position
    a = int(logits[0, p].argmax()) if token is None else token_id(ckpt, token)
    b = None if versus is None else token_id(ckpt, versus, "versus")
    w_u = model.generator.weight.double()
    u = w_u[a] - (w_u[b] if b is not None else 0.0)  # [D]
    layers = model.decoder.layers
    final = trace.stream("decoder", len(layers) - 1, "resid_post")[0, p]
    fmap, fbias, fcenter = freeze(model.decoder.norm, final, center)
    out_scale = cfg.d_model**-0.5 if cfg.scale_decoder_output else 1.0
    names, vecs = [], []

    def add(name: str, kind: str, vec: Tensor, layer=None, head=None) -> None:
        names.append((name, kind, layer, head))
        vecs.append(vec.double().reshape(-1))

    x0 = trace.stream("decoder", 0, "resid_pre")[0, p].double()
    if model.decoder.embed_norm is None:
        tok = model.tgt_embed.weight[prep.ids[p]].double()
        if cfg.scale_embeddings:
            tok = tok * float(embed_scale(cfg, model.tgt_embed.weight.dtype))
        add("embed", "embed", tok)
        add("positions", "positions", x0 - tok)
    else:
        add("embed", "embed", x0)
    for i, layer in enumerate(layers):
        sites = [("attn", layer.self_attn, "decoder_self", "H", layer.post_norm1)]
        if layer.cross_attn is not None:
            sites.append(("cross", layer.cross_attn, "cross", "X", None))
        for point, attn, kind, letter, post in sites:
            z = trace.head_output(kind, i)[0, :, p].double()  # [H, Dh]
            w_o = attn.out_proj.weight.double().view(-1, attn.n_heads, attn.head_dim)
            heads = torch.einsum("hd,ehd->he", z, w_o)  # [H, D]
            pmap = _post_map(post, trace.stream("decoder", i, point)[0, p])
            heads = pmap(heads)
            for h in range(attn.n_heads):
                add(f"L{i}{letter}{h}", "head" if letter == "H" else "cross_head", heads[h], i, h)
            if attn.out_proj.bias is not None:
                add(f"L{i} {point} bias", f"{point}_bias", pmap(attn.out_proj.bias.double()), i)
        if layer.ff is not None:
            raw = trace.stream("decoder", i, "mlp")[0, p].double()
            pmap = _post_map(layer.post_norm3, raw)
            b2 = layer.ff.linear2.bias
            b2 = torch.zeros_like(raw) if b2 is None else b2.double()
            add(f"L{i} mlp", "mlp", pmap(raw - b2), i)
            if layer.ff.linear2.bias is not None:
                add(f"L{i} mlp bias", "mlp_bias", pmap(b2), i)
    stacked = fmap(torch.stack(vecs)) * out_scale  # [N, D]
    values = (stacked @ u).tolist()
    extra = [("final norm centering", "norm", fcenter), ("final norm bias", "norm", fbias)]
    for name, kind, vec in extra:
        if vec is not None:
            names.append((name, kind, None, None))
            values.append(float((vec * out_scale) @ u))
    if model.generator.bias is not None:
        gb = model.generator.bias.double()
        names.append(("output bias", "bias", None, None))
        values.append(float(gb[a] - (gb[b] if b is not None else 0.0)))
    parts = [Part(n, v, k, layer, h) for (n, k, layer, h), v in zip(names, values, strict=True)]
    row = logits[0, p].double()
    logit = float(row[a] - (row[b] if b is not None else 0.0))
    return DirectAttribution(
        prep.tokens, p, label(ckpt, a), a, None if b is None else label(ckpt, b), b,
        parts, float(np.sum(values)), logit,
    )  # fmt: skip


def _post_map(norm: nn.Module | None, raw: Tensor):
    """A post-sublayer norm (sandwich) frozen at the sublayer output ``raw [D]`` it saw."""
    fmap, bias, _ = freeze(norm, raw, center=True)
    if bias is not None:
        raise InputError("a post-sublayer LayerNorm with a bias is not supported here")
    return fmap
