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

A post-norm model (the original Transformer, BERT, Marian: ``norm(x + sublayer(x))``) has no
additive residual stream, but each of its norms, frozen at the scale it had in the run, is a
linear map: every part written before a norm goes through it (centred, scaled, times its
gain), and the norm's bias is one more part (``"L{l} attn norm bias"``). The parts then add
up to the logit exactly as for a pre-norm model; what they mean is "this part's share of the
stream, as the frozen norms passed it on".

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
    """A norm made linear at the input ``x [..., D]`` it saw (float64): ``(map, bias,
    centring)``, where ``map(parts [..., N?, D])`` scales each vector by the frozen factor of
    its row of ``x`` (``x [T, D]`` maps ``parts [..., T, D]``; ``x [D]`` maps any ``[..., D]``)
    and, for a LayerNorm with ``center``, centres it; ``bias`` is the norm's own constant part
    ``[D]`` or None; ``centring`` (LayerNorm without ``center``) is ``-mean(x)`` mapped, the
    part that centring adds, else None."""
    if norm is None:
        return (lambda p: p), None, None
    x = x.double()
    if isinstance(norm, RMSNorm):
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)  # [..., 1]
        gain = norm.weight.double() + norm.offset
        return (lambda p: p * scale * gain), None, None
    if isinstance(norm, nn.LayerNorm):
        mean = x.mean(-1, keepdim=True)  # [..., 1]
        scale = torch.rsqrt((x - mean).pow(2).mean(-1, keepdim=True) + norm.eps)
        gain = norm.weight.double() if norm.weight is not None else 1.0
        bias = norm.bias.double() if norm.bias is not None else None
        if center:
            return (lambda p: (p - p.mean(-1, keepdim=True)) * scale * gain), bias, None
        return (lambda p: p * scale * gain), bias, -mean * scale * gain
    raise InputError(f"cannot freeze a {type(norm).__name__}")


def sublayers(layer: nn.Module) -> list[tuple[str, str, nn.Module, nn.Module | None]]:
    """A layer's residual blocks in forward order: ``(point, kind, module, post-norm)``,
    where ``point`` is the stream tap of the block's output (``"attn"``, ``"cross"``,
    ``"mlp"``), ``kind`` the attention kind (``"mlp"`` for the feed-forward) and the
    post-norm the norm after the residual add of a post-norm model (None: pre-norm)."""
    post = not layer.norm_first
    enc = layer.stack == "encoder"
    out = [("attn", "encoder_self" if enc else "decoder_self", layer.self_attn,
            layer.norm1 if post else None)]  # fmt: skip
    if getattr(layer, "cross_attn", None) is not None:
        out.append(("cross", "cross", layer.cross_attn, layer.norm2 if post else None))
    if layer.ff is not None:
        last = layer.norm2 if enc else layer.norm3
        out.append(("mlp", "mlp", layer.ff, last if post else None))
    return out


def sandwich(layer: nn.Module, point: str) -> nn.Module | None:
    """The norm on a sublayer's output before the residual add (Gemma 3), or None."""
    return getattr(layer, {"attn": "post_norm1", "mlp": "post_norm3"}.get(point, ""), None)


def _refuse_dla(stack: str) -> None:
    if stack == "encoder":
        raise InputError(
            "direct attribution reads the stream straight into the unembedding; a masked-LM "
            "head has a dense layer and an activation in between: use logit_lens"
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
        A post-norm model adds ``"L{l} attn norm bias"`` (``cross``, ``mlp``): each norm
        after a residual add is frozen at its scale in the run, every part before it goes
        through it, and its bias is one more part.
    Raises:
        InputError: a masked-LM model, a token that is not one token.
    """
    ckpt = checkpoint_of(ckpt)
    prep = prepare(ckpt, text, step)
    _refuse_dla(prep.stack)
    with torch.no_grad():
        return _attribute(ckpt, prep, token, versus, center)


def _attribute(ckpt: Checkpoint, prep, token, versus, center: bool) -> DirectAttribution:
    model, cfg = ckpt.model, ckpt.config
    logits, trace = streams_of(ckpt, prep, capture=("head_output",))
    p = prep.position
    a = int(logits[0].argmax()) if token is None else token_id(ckpt, token)
    b = None if versus is None else token_id(ckpt, versus, "versus")
    w_u = model.generator.weight.double()
    u = w_u[a] - (w_u[b] if b is not None else 0.0)  # [D]
    names: list[tuple] = []
    vecs: list[Tensor] = []  # each part's vector in the stream as it is now, [D] float64

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
    stream = x0  # the stream at p, rebuilt block by block through the frozen norms
    for i, layer in enumerate(model.decoder.layers):
        for point, kind, mod, post in sublayers(layer):
            raw = trace.stream("decoder", i, point)[0, p].double()
            pmap = _post_map(sandwich(layer, point), raw)
            if kind == "mlp":
                b2 = mod.linear2.bias
                b2 = torch.zeros_like(raw) if b2 is None else b2.double()
                add(f"L{i} mlp", "mlp", pmap(raw - b2), i)
                if mod.linear2.bias is not None:
                    add(f"L{i} mlp bias", "mlp_bias", pmap(b2), i)
            else:
                z = trace.head_output(kind, i)[0, :, p].double()  # [H, Dh]
                w_o = mod.out_proj.weight.double().view(-1, mod.n_heads, mod.head_dim)
                heads = pmap(torch.einsum("hd,ehd->he", z, w_o))  # [H, D]
                letter = "H" if kind != "cross" else "X"
                for h in range(mod.n_heads):
                    add(f"L{i}{letter}{h}", "head" if letter == "H" else "cross_head",
                        heads[h], i, h)  # fmt: skip
                if mod.out_proj.bias is not None:
                    add(f"L{i} {point} bias", f"{point}_bias", pmap(mod.out_proj.bias.double()), i)
            stream = stream + pmap(raw)
            if post is not None:  # post-norm: everything so far goes through this norm
                nmap, nbias, _ = freeze(post, stream, center=True)
                vecs = list(nmap(torch.stack(vecs)))
                stream = nmap(stream)
                if nbias is not None:
                    add(f"L{i} {point} norm bias", "norm_bias", nbias, i)
                    stream = stream + nbias
    fmap, fbias, fcenter = freeze(model.decoder.norm, stream, center)
    out_scale = cfg.d_model**-0.5 if cfg.scale_decoder_output else 1.0
    stacked = fmap(torch.stack(vecs)) * out_scale  # [N, D]
    values = (stacked @ u).tolist()
    extra = [("final norm centering", "norm", fcenter), ("final norm bias", "norm", fbias)]
    for name, kind, vec in extra:
        if vec is not None:
            names.append((name, kind, None, None))
            values.append(float((vec.reshape(-1) * out_scale) @ u))
    if model.generator.bias is not None:
        gb = model.generator.bias.double()
        names.append(("output bias", "bias", None, None))
        values.append(float(gb[a] - (gb[b] if b is not None else 0.0)))
    parts = [Part(n, v, k, layer, h) for (n, k, layer, h), v in zip(names, values, strict=True)]
    row = logits[0].double()
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
