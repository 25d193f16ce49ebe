"""The step view's heatmaps through another lens (norms, rollout), sent once on request.

The step view draws attention weights from the rows it holds (the fast path). When the page
asks for another lens, :func:`payload` records one teacher-forced pass over the decoded
tokens (the same tokens the stepper chose, now fed in at once, with the values the norms lens
needs) and sends every kind and layer of that lens; the page keeps it for this decode and
redraws Back/scrub from it, asking again only when a Step goes past what it holds.
"""

from __future__ import annotations

import html
from typing import Any

import torch

from ..analysis import LENSES, lens
from ..errors import AttnvizError, InputError
from ..model import KINDS
from ..record import record
from .state import SessionState, checkpoint_of
from .views import b64


def payload(state: SessionState, name: str) -> dict[str, Any]:
    """``{"lens": {...}}`` for the page: ``name``, ``epoch``, ``n`` (decoded rows covered)
    and per kind a list per layer of ``{"h", "tq", "tk", "w"}`` (base64 float32
    ``[h, tq, tk]``; rollout has ``h`` = 1). ``"weights"`` carries no matrices (the page
    has them); an error comes back as ``"error"`` with the page left on weights."""
    epoch = f"{state.sid}:{state.epoch}"
    base = {"name": name, "epoch": epoch, "n": len(state.tokens), "kinds": {}}
    try:
        if name not in LENSES:
            raise InputError(f"lens must be one of {', '.join(LENSES)}, got {name!r}")
        if name == "weights" or not state.started:
            return {"lens": base}
        ckpt = checkpoint_of(state)
        cfg, model = ckpt.config, ckpt.model
        n = len(state.tokens)
        src = torch.tensor([state.src_ids], device=ckpt.device)
        kinds = KINDS if n else ("encoder_self",)
        with torch.no_grad(), record(model, capture=("weights", "mask", "values")) as trace:
            if n:
                model(src, torch.tensor([[cfg.bos_id, *state.tokens[: n - 1]]], device=ckpt.device))
            else:
                model.encode(src)
        for kind in kinds:
            layers = []
            for layer in trace.layers(kind):
                m = lens(model, trace, kind, layer, name)[0]  # [H', Tq, Tk]
                layers.append({"h": m.shape[0], "tq": m.shape[1], "tk": m.shape[2], "w": b64(m)})
            base["kinds"][kind] = layers
    except AttnvizError as exc:
        return {"lens": {**base, "name": "weights", "error": f"⚠ {html.escape(str(exc))}"}}
    return {"lens": base}
