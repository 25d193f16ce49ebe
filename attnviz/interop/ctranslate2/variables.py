"""One reader of CTranslate2 model variables for every spec (``TransformerSpec``,
``WhisperSpec``): the path-like names of :mod:`ctranslate2.specs` (``encoder/layer_0/
self_attention/linear_0/weight``) read as numbers, norms, linear layers and layer counts, each
checked, so the spec converters are tables from those names to ours.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from ...core.errors import InteropError, shorten
from ..hf.common import Source

#: CTranslate2's activation ids (``common_spec.Activation``) -> ours
ACTIVATIONS = {0: "relu", 1: "gelu_tanh", 2: "silu", 3: "gelu"}
#: The fewest variables an encoder / decoder layer has (weights of 2 / 3 attention linears and
#: 2 feed-forward linears, gamma and beta of 2 / 3 norms; biases and gates come on top), so a
#: file naming 20,000 layers of one variable each is refused at once.
ENCODER_LAYER_VARIABLES = 2 + 2 + 2 * 2
DECODER_LAYER_VARIABLES = 3 + 2 + 2 + 3 * 2


def scalar(src: Source, name: str) -> float | None:
    """Variable ``name``, one number (None where the file has none)."""
    if not src.has(name):
        return None
    t = src.take(name)
    if t.numel() != 1:
        raise InteropError(f"{src.where}: {name} should be one number, has shape {list(t.shape)}")
    return float(t.reshape(()).item())


def flag(src: Source, name: str, default: float) -> float:
    """Variable ``name``, one number, or ``default`` where the file has none."""
    value = scalar(src, name)
    return default if value is None else value


def norm(src: Source, scope: str, ours: str) -> dict[str, Tensor]:
    """The LayerNorm at ``scope`` (``gamma``, ``beta``) as our ``ours.weight``/``ours.bias``;
    an RMS norm (``gamma`` alone) is refused in one line."""
    if src.has(f"{scope}/gamma") and not src.has(f"{scope}/beta"):
        raise InteropError(
            f"{src.where}: {scope} is an RMS norm, not implemented for CTranslate2 folders"
        )
    return {f"{ours}.weight": src.take(f"{scope}/gamma"), f"{ours}.bias": src.take(f"{scope}/beta")}


def linear(src: Source, scope: str) -> tuple[Tensor, Tensor | None]:
    """The linear layer at ``scope``: its ``weight`` ``[out, in]`` and ``bias`` (or None)."""
    bias = src.take(f"{scope}/bias") if src.has(f"{scope}/bias") else None
    return src.take(f"{scope}/weight"), bias


def put(out: dict[str, Tensor], name: str, weight: Tensor, bias: Tensor | None) -> None:
    """Store a linear layer under our name ``name`` (``name.weight``; an attention's fused
    ``…in_proj`` as ``in_proj_weight``), its bias where it has one."""
    out[f"{name}.weight" if not name.endswith("in_proj") else f"{name}_weight"] = weight
    if bias is not None:
        out[f"{name}.bias" if not name.endswith("in_proj") else f"{name}_bias"] = bias


def count_layers(tensors: dict[str, Tensor], stack: str, where: Path, per_layer: int) -> int:
    """How many ``{stack}/layer_N/`` blocks the variables hold, read in one pass over the
    names; the blocks must be numbered 0..n-1 and each needs at least ``per_layer`` variables
    (so a file of 20,000 names ``encoder/layer_N/x`` is refused at once, not built).

    Raises:
        InteropError: numbers with gaps, or too few variables for the layers they name.
    """
    prefix = f"{stack}/layer_"
    counts: dict[int, int] = {}
    for name in tensors:
        if name.startswith(prefix):
            number = name[len(prefix) :].partition("/")[0]
            if not number.isdigit():
                continue  # layer_norm/..., or a name the leftovers check names
            if len(number) > 6:
                raise InteropError(f"{where}: {shorten(name)} names a layer number too high")
            counts[int(number)] = counts.get(int(number), 0) + 1
    n = len(counts)
    if counts and max(counts) != n - 1:
        raise InteropError(
            f"{where}: the {stack} layers are not numbered 0..{n - 1} (layer {max(counts)} "
            "is named)"
        )
    thin = [i for i, c in sorted(counts.items()) if c < per_layer]
    if thin:
        raise InteropError(
            f"{where}: {stack}/layer_{thin[0]} has {counts[thin[0]]} variables, fewer than the "
            f"{per_layer} a layer needs ({len(thin)} such layers)"
        )
    return n
