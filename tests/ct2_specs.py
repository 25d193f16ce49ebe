"""Tiny random CTranslate2 ``TransformerSpec`` folders written by ctranslate2's own spec
classes, and a writer of ``model.bin`` files holding any variables (for files that lie)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch
from ctranslate2.specs import common_spec, transformer_spec

SRC_VOCAB = ["<unk>", "<blank>", "<s>", "</s>"] + [f"s{i}" for i in range(20)]
TGT_VOCAB = ["<unk>", "<blank>", "<s>", "</s>"] + [f"t{i}" for i in range(27)]


def spec_folder(
    folder: Path,
    positions: int | None = 64,
    seed: int = 0,
    src_vocab: list[str] = SRC_VOCAB,
    tgt_vocab: list[str] = TGT_VOCAB,
    **spec_options,
) -> Path:
    """A pre-norm GELU TransformerSpec with random weights, saved by ctranslate2 itself.

    ``positions``: rows of a random position table (as OpenNMT-py stores its own), or None
    for none (CTranslate2 computes sinusoids, as for OpenNMT-tf). The vocabularies must hold
    ``<blank>`` (given a logit of -30, as trained models have it).
    """
    rng = np.random.default_rng(seed)
    d, ff = 24, 40

    def rand(*shape, base=0.0):
        return (base + 0.3 * rng.standard_normal(shape)).astype(np.float32)

    def linear(spec, rows, cols):
        spec.weight, spec.bias = rand(rows, cols), rand(rows)

    def norm(spec):
        spec.gamma = rand(d, base=1.0)
        if hasattr(spec, "beta"):  # not in RMS norms
            spec.beta = rand(d)

    options = dict(pre_norm=True, activation=common_spec.Activation.GELU) | spec_options
    spec = transformer_spec.TransformerSpec.from_config((2, 3), 4, **options)
    for layer in [*spec.encoder.layer, *spec.decoder.layer]:
        norm(layer.self_attention.layer_norm)
        linear(layer.self_attention.linear[0], 3 * d, d)
        linear(layer.self_attention.linear[1], d, d)
        if hasattr(layer, "attention"):
            norm(layer.attention.layer_norm)
            for linear_spec, rows in zip(layer.attention.linear, (d, 2 * d, d), strict=True):
                linear(linear_spec, rows, d)
        norm(layer.ffn.layer_norm)
        linear(layer.ffn.linear_0, ff, d)
        linear(layer.ffn.linear_1, d, ff)
        if hasattr(layer.ffn, "linear_0_noact"):
            linear(layer.ffn.linear_0_noact, ff, d)
        for name in ("relative_position_keys", "relative_position_values"):
            if hasattr(layer.self_attention, name):
                setattr(layer.self_attention, name, rand(2 * 8 + 1, d // 4))
    spec.encoder.embeddings[0].weight = rand(len(src_vocab), d)
    spec.decoder.embeddings.weight = rand(len(tgt_vocab), d)
    linear(spec.decoder.projection, len(tgt_vocab), d)
    spec.decoder.projection.weight *= 4  # outputs that depend on the input
    spec.decoder.projection.bias[tgt_vocab.index("<blank>")] = -30  # as trained models have it
    for stack in (spec.encoder, spec.decoder):
        for name in ("layer_norm", "layernorm_embedding"):
            if hasattr(stack, name):
                norm(getattr(stack, name))
        if positions and hasattr(stack, "position_encodings"):
            stack.position_encodings.encodings = rand(positions, d)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.validate()
    spec.optimize(None)
    folder.mkdir(parents=True, exist_ok=True)
    spec.save(str(folder))
    return folder


#: the dtype ids of model.bin
_TYPE_IDS = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4,
             torch.bfloat16: 5}  # fmt: skip


def _text(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<H", len(raw) + 1) + raw + b"\0"


def write_model_bin(
    path: Path,
    variables: dict[str, torch.Tensor | tuple[tuple[int, ...], torch.dtype]],
    spec: str = "TransformerSpec",
    revision: int = 7,
) -> Path:
    """Write a version-6 ``model.bin``: each variable a tensor, or ``(shape, dtype)`` for an
    empty one whose shape may say anything (a file that lies)."""
    out = [struct.pack("<I", 6), _text(spec), struct.pack("<II", revision, len(variables))]
    for name, value in variables.items():
        if isinstance(value, tuple):
            shape, dtype, data = value[0], value[1], b""
        else:
            t = value.contiguous()
            shape, dtype = tuple(t.shape), t.dtype
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out += [_text(name), struct.pack(f"<B{len(shape)}I", len(shape), *shape)]
        out += [struct.pack("<BI", _TYPE_IDS[dtype], len(data)), data]
    out.append(struct.pack("<I", 0))
    path.write_bytes(b"".join(out))
    return path
