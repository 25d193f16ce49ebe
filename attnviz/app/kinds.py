"""What the page shows for each kind of model (``ModelConfig.arch``): no gradio, no state.

An encoder-decoder shows all three attention kinds. A decoder-only model continues a prompt:
its prompt and its output are one sequence, so the step view shows one causal
self-attention over prompt + generated tokens, and the places that read an encoder or
cross-attention (the encoder and cross-attention heatmaps, what-if targets, AER, blocking
source tokens) are hidden, each with one sentence saying why (:data:`attnviz.app.inputs.NOTES`: which panels
apply is the input's to say). The labs run it on its one sequence (decoder self-attention
heads only). An encoder-only model reads the sentence once. Here: the model's kind asked of
its config, and the parts of the payload a kind adds (the prompt, scored rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checkpoint import Checkpoint
from ..core.config import ModelConfig
from ..core.devices import as_numpy
from ..core.record import Trace
from ..decode.scoring import Scored
from ..render.arrays import b64_f32, mask_bits


def is_encoder_only(ckpt: Checkpoint | ModelConfig) -> bool:
    cfg = ckpt if isinstance(ckpt, ModelConfig) else ckpt.config
    return cfg.encoder_only


def is_decoder_only(ckpt: Checkpoint | ModelConfig) -> bool:
    cfg = ckpt if isinstance(ckpt, ModelConfig) else ckpt.config
    return cfg.decoder_only


def layers_text(cfg: ModelConfig) -> str:
    """``"decoder-only, 2 layers"`` / ``"2 encoder + 2 decoder layers"`` / ``"encoder-only, …"``."""
    if cfg.decoder_only:
        return f"decoder-only, {cfg.n_decoder_layers} layers"
    if cfg.encoder_only:
        return f"encoder-only, {cfg.n_encoder_layers} layers"
    return f"{cfg.n_encoder_layers} encoder + {cfg.n_decoder_layers} decoder layers"


def prompt_part(pieces: list[str], encoder: Trace) -> dict[str, Any]:
    """The page payload's prompt of a decoder-only model (with the first Step's rows).

    The stepper runs the prompt but its last token at once (``P' = P - 1`` rows, recorded in
    its encoder trace); the last prompt token is the first one fed. The page labels the
    self-attention ``pre_labels + [bos] + tokens``, ``bos`` being the last prompt piece, and
    its rows are ``prompt_rows`` then one row per step.

    Args:
        pieces: the prompt's display pieces ``[P]``.
        encoder: the stepper's encoder trace (``"decoder_self"`` ``[1, H, P', P']``).
    Returns:
        ``{"pre", "pre_labels", "bos", "prompt_rows"}``; ``prompt_rows``: per layer
        ``{"w", "m"}``, row ``r`` holding its ``r + 1`` keys (as the page's step rows do).
    """
    pre = len(pieces) - 1
    rows = []
    for layer in encoder.layers("decoder_self") if pre else []:
        w = encoder.numpy("decoder_self", layer)[0]  # [H, P', P']
        m = np.broadcast_to(encoder.numpy("decoder_self", layer, "mask")[0, 0], w.shape[1:])
        win = as_numpy(encoder.window("decoder_self", layer)[0, 0])  # [P', P'] a local layer's
        rows.append({
            "w": b64_f32(np.concatenate([w[:, r, : r + 1].ravel() for r in range(pre)])),
            "m": mask_bits(np.concatenate([m[r, : r + 1] for r in range(pre)]),
                           np.concatenate([win[r, : r + 1] for r in range(pre)])),
        })  # fmt: skip
    return {"pre": pre, "pre_labels": pieces[:pre], "bos": pieces[pre], "prompt_rows": rows}


def scored_rows(
    ckpt: Checkpoint, scored: Scored, text: str, n: int, layer: int
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A decoder-only scored pass's rows that predict its first ``n`` tokens.

    Args:
        scored: :meth:`Checkpoint.score` of ``text`` (its ``"decoder_self"`` spans prompt +
            reference; row ``P - 1 + i`` predicts token ``i``).
    Returns:
        ``(weights [H, n, T], mask [n, T], keys [T])``: every key of the sequence, labelled
        by the prompt's pieces and then the reference's tokens.
    """
    prompt = ckpt.encode_source(text).pieces
    w = scored.trace.numpy("decoder_self", layer)[0]  # [H, T, T]
    rows = slice(len(prompt) - 1, len(prompt) - 1 + n)
    m = np.broadcast_to(scored.trace.numpy("decoder_self", layer, "mask")[0, 0], w.shape[1:])
    keys = [*prompt, *scored.tokens][: w.shape[-1]]
    return w[:, rows], m[rows].astype(bool), keys
