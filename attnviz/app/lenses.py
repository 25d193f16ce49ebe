"""The step view's heatmaps through another lens (norms, rollout), sent once on request.

The step view draws attention weights from the rows it holds (the fast path). When the page
asks for another lens, :func:`payload` records one teacher-forced pass over the decoded
tokens (the same tokens the stepper chose, now fed in at once, with the values the norms lens
needs) and sends every kind and layer of that lens; the page keeps it for this decode and
redraws Back/scrub from it, asking again only when a Step goes past what it holds.

A long input (its encoder not sent whole,
:func:`attnviz.app.encoder_blocks.encoder_inline`) gets the decoder's kinds only in that
payload; the page asks for the encoder layer and head it shows (:func:`encoder_lens_block`;
rollout: the layer's one matrix) and the model view gets max-pooled thumbnails
(:func:`encoder_lens_thumbs`), through :func:`attnviz.app.encoder_requests.encoder_view`.
Every matrix is :func:`attnviz.analysis.lens` of a recorded pass, never an approximation: an
encoder-only model's is the read pass its heatmaps show (:func:`attnviz.app.reading.read`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..analysis import LENSES, lens
from ..analysis.words import word_index
from ..checkpoint import Checkpoint
from ..core.errors import AttnvizError, InputError
from ..core.model import KINDS
from ..core.record import Trace, record
from ..render.arrays import b64_f32
from . import encoder_blocks, reading
from .inputs import refuse
from .kinds import is_encoder_only
from .state import SessionState, checkpoint_of, layer_number, warning
from .workers import remote


@remote()
def payload(state: SessionState, name: str) -> dict[str, Any]:
    """``{"lens": {...}}`` for the page: ``name``, ``epoch``, ``n`` (decoded rows covered)
    and per kind a list per layer of ``{"h", "tq", "tk", "w"}`` (base64 float32
    ``[h, tq, tk]``; rollout has ``h`` = 1). ``"weights"`` carries no matrices (the page
    has them); an error comes back as ``"error"`` with the page left on weights. A long input
    (:func:`attnviz.app.encoder_blocks.encoder_inline` false) gets no ``encoder_self`` here:
    the page asks for the layer and head it shows (:func:`encoder_lens_block`)."""
    epoch = f"{state.sid}:{state.epoch}"
    base = {"name": name, "epoch": epoch, "n": len(state.tokens), "kinds": {}}
    try:
        if name not in LENSES:
            raise InputError(f"lens must be one of {', '.join(LENSES)}, got {name!r}")
        if name == "weights" or not state.started:
            return {"lens": base}
        ckpt = checkpoint_of(state)
        refuse(ckpt, "lens")
        cfg, model = ckpt.config, ckpt.model
        n = len(state.tokens)
        src = torch.tensor([state.src_ids], device=ckpt.device)
        long = not encoder_blocks.encoder_inline(ckpt, len(state.src_ids))
        kinds = KINDS if n else ("encoder_self",)
        if long:
            kinds = tuple(k for k in kinds if k != "encoder_self")
            base["long"] = True
        if is_encoder_only(ckpt):  # the read pass the heatmaps show (values recorded)
            trace = reading.read(state, ckpt).trace
        else:
            with torch.no_grad(), record(model, capture=("weights", "mask", "values")) as trace:
                if n:
                    tgt = torch.tensor([[cfg.bos_id, *state.tokens[: n - 1]]], device=ckpt.device)
                    model(src, tgt)
                else:
                    model.encode(src)
        for kind in kinds:
            if kind == "encoder_self" and long:
                continue
            layers = []
            for layer in trace.layers(kind):
                m = lens(model, trace, kind, layer, name)[0]  # [H', Tq, Tk]
                layers.append(
                    {"h": m.shape[0], "tq": m.shape[1], "tk": m.shape[2], "w": b64_f32(m)}
                )
            base["kinds"][kind] = layers
    except AttnvizError as exc:
        return {"lens": {**base, "name": "weights", "error": warning(exc)}}
    return {"lens": base}


def _encoder_pass(state: SessionState) -> tuple[Any, Trace]:
    """The encoder of this input recorded with the values the norms lens needs (an
    encoder-only model's: its read pass, token types and all)."""
    ckpt = checkpoint_of(state)
    if is_encoder_only(ckpt):
        return ckpt, reading.read(state, ckpt).trace
    src = torch.tensor([state.src_ids], device=ckpt.device)
    with torch.no_grad(), record(ckpt.model, capture=("weights", "mask", "values")) as trace:
        ckpt.model.encode(src)
    return ckpt, trace


def _check(name: str) -> None:
    if name not in LENSES or name == "weights":
        raise InputError(f"an encoder lens must be norms or rollout, got {name!r}")


def encoder_lens_block(state: SessionState, name: str, layer: int, head: str) -> dict[str, Any]:
    """One encoder layer through lens ``name`` for a long input's page.

    Args:
        name: ``"norms"`` or ``"rollout"``; layer: 0-based; head: ``"H<h>"``, ``"mean"`` or
            ``"all heads"`` (rollout has one matrix per layer: any head gets it).
    Returns:
        :func:`attnviz.app.encoder_blocks.encoder_block`'s dict plus ``"lens"``: ``w``
        base64 float32 ``[h, Ts, Ts]`` of :func:`attnviz.analysis.lens` on a recorded encoder
        pass.
    """
    _check(name)
    ckpt, trace = _encoder_pass(state)
    layers = trace.layers("encoder_self")
    if layer not in layers:
        raise InputError(f"encoder layer must be one of {layers}, got {layer}")
    w = lens(ckpt.model, trace, "encoder_self", layer, name)[0]  # [H', Ts, Ts]
    if name == "rollout":
        head = "mean"  # heads averaged: one matrix
    m = trace.numpy("encoder_self", layer, "mask")[0, 0]
    return {**encoder_blocks.block_of(state, w, m, layer, head), "lens": name}


def encoder_lens_thumbs(
    state: SessionState, name: str, words: Any = None, size: int = encoder_blocks.THUMB
) -> dict[str, Any]:
    """Every encoder layer (and head; rollout: one per layer) through lens ``name``, max-pooled
    to at most ``size x size`` for the model view: :func:`attnviz.app.encoder_blocks.thumbs_of` of
    :func:`attnviz.analysis.lens` stacked ``[L, H', Ts, Ts]``, plus ``"lens"``."""
    _check(name)
    ckpt, trace = _encoder_pass(state)
    layers = trace.layers("encoder_self")
    w = np.stack([lens(ckpt.model, trace, "encoder_self", i, name)[0] for i in layers])
    m = trace.numpy("encoder_self", layers[0], "mask")[0, 0].astype(bool)
    return {**encoder_blocks.thumbs_of(state, w, m, words, size), "lens": name}


def encoder_lens(state: SessionState, ckpt: Checkpoint, name: str, what: str) -> dict:
    """:func:`attnviz.app.encoder_requests.encoder_view`'s ``"<epoch> <lens> thumbs[ words]"`` /
    ``"<epoch> <lens> <layer> <head>"``: the part after the lens name, ``what``."""
    refuse(ckpt, "lens")
    if what in ("thumbs", "thumbs words"):
        words = (
            word_index(state.src_pieces, ckpt.src_tokenizer.kind)
            if what == "thumbs words" and ckpt.src_tokenizer is not None
            else None
        )
        return encoder_lens_thumbs(state, name, words)
    layer, _, head = what.partition(" ")
    return encoder_lens_block(state, name, layer_number(layer), head)
