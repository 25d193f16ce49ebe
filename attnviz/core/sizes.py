"""How many numbers each part of a model holds, from its config alone: nothing is built.

:meth:`attnviz.core.config.ModelConfig.sizes` asks it; :mod:`attnviz.core.memory` sizes a
model from it before anything is allocated.
"""

from __future__ import annotations

from typing import Any


def model_sizes(cfg: Any) -> dict[str, int]:
    """The parameters and buffers of each part of the model of ``cfg`` (a
    :class:`~attnviz.core.config.ModelConfig`), computed from its arithmetic.

    Returns:
        ``{"embeddings", "encoder layers", "decoder layers", "position tables",
        "output projection", "parameters", "buffers"}``; the last two are the totals, equal
        to ``sum(p.numel())`` over a built model's parameters and buffers.
    """
    d, h = cfg.d_model, cfg.n_heads
    inner = h * cfg.head_dim
    kv_inner = cfg.kv_heads * cfg.head_dim
    norm = d if cfg.norm == "rms" else 2 * d
    qkv_bias = 3 * inner if cfg.has_qkv_bias else 0
    out_bias = d if cfg.bias else 0
    cross = 4 * inner * d + qkv_bias + out_bias
    attention = 2 * (inner + kv_inner) * d + out_bias
    attention += (inner + 2 * kv_inner) if cfg.has_qkv_bias else 0
    attention += 2 * cfg.head_dim if cfg.qk_norm else 0
    ff = (3 if cfg.gated_ff else 2) * d * cfg.d_ff
    ff += ((2 if cfg.gated_ff else 1) * cfg.d_ff + d) if cfg.bias else 0
    stack = (norm if cfg.final_norm else 0) + (norm if cfg.embed_norm else 0)
    learned = relative = buffers = 0
    for decoder in (False, True):
        if not (cfg.has_decoder if decoder else cfg.has_encoder):
            continue  # a one-stack model has no table for the other stack
        kind, length = cfg.stack_positions(decoder)
        rows = length + cfg.position_offset
        learned += rows * d if kind == "learned" else 0
        relative += cfg.relative_buckets * h if kind == "relative" else 0
    for kind, length in cfg.fixed_tables():
        buffers += (length + (cfg.position_offset if kind == "fairseq" else 0)) * d
    audio = cfg.reads_audio
    front = 3 * cfg.n_mels * d + d + 3 * d * d + d if audio and cfg.has_encoder else 0
    embeddings = cfg.src_vocab_size * d if cfg.has_encoder and not audio else 0
    if cfg.has_decoder and not (cfg.share_embeddings and cfg.has_encoder and not audio):
        embeddings += cfg.tgt_vocab_size * d
    with_cross = cfg.has_cross
    decoder_layer = attention + ff + 2 * norm + ((cross + norm) if with_cross else 0)
    decoder_layer += 2 * norm if cfg.sandwich_norm else 0
    parts = {
        "embeddings": embeddings + cfg.type_vocab_size * d,
        "encoder layers": cfg.n_encoder_layers * (attention + ff + 2 * norm) + stack
        if cfg.has_encoder
        else 0,
        "decoder layers": cfg.n_decoder_layers * decoder_layer + stack if cfg.has_decoder else 0,
        "position tables": learned + relative + buffers,
        "output projection": (0 if cfg.tie_output else cfg.tgt_vocab_size * d)
        + (cfg.tgt_vocab_size if cfg.output_bias else 0)
        + ((d * d + (d if cfg.bias else 0) + norm) if cfg.head_transform else 0),
        "audio front-end": front,
    }
    parts["parameters"] = sum(parts.values()) - buffers
    parts["buffers"] = buffers
    return parts
