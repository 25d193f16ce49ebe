"""What the step-through page shows for an encoder-only model (BERT, RoBERTa, DistilBERT).

An encoder-only model reads the whole sentence (or pair, ``first [SEP] second``) at once and
generates nothing: Read (the Run button, or Enter) runs one pass
(:func:`attnviz.analysis.read_sentence`, which :func:`attnviz.analysis.fill_mask` runs too),
and the page shows that pass's recorded self-attention (every layer and head, in the
encoder's heatmap and the model view) and, for each mask token, its ``k`` best fillers.

No gradio: :mod:`attnviz.app.session` routes an encoder-only model's actions here. The pass
is kept per (model, file version, text) in a small process-wide cache, so redrawing a view
does not run the model again.
"""

from __future__ import annotations

import html
from typing import Any

from ..analysis.masked_lm import MaskFill, read_sentence, special_token
from ..checkpoint import Checkpoint
from ..core.model import KINDS
from ..render.arrays import b64_f32, mask_bits
from ..render.plots import KIND_TITLES
from .encoder_blocks import encoder_block, encoder_inline
from .inputs import ENCODER_NOTES
from .lru import LRU
from .state import SessionState, layer_count
from .views import Payload, Shown, display_token, page_model, view_of

#: Fillers shown per mask token.
TOP_K = 5
NO_MASK = "no {mask} in the input: nothing to fill"
TITLE = "Self-attention over the sentence"
_CACHE = LRU(8)  # (model, device, version, text) -> MaskFill


def read(state: SessionState, ckpt: Checkpoint) -> MaskFill:
    """The pass over the state's sentence (run once per model file version and text)."""
    key = (state.model, state.device, state.version, state.text)
    fill = _CACHE.get(key)
    if fill is None:
        fill = read_sentence(ckpt, state.text, TOP_K)
        _CACHE.put(key, fill)
    return fill


def mask_name(ckpt: Checkpoint) -> str:
    token = special_token(ckpt, "mask")
    return token[0] if token else "[MASK]"


def render(
    state: SessionState, ckpt: Checkpoint, message: str = "", view: type[Shown] = Shown
) -> Shown:
    """The page for ``state``: the encoder's heatmaps, the fillers, the status line (built
    once as a ``view``: :class:`Shown` or the session's subclass of it)."""
    fill = read(state, ckpt) if state.started else None
    fillers = fillers_of(fill) if fill else []
    info: dict[str, Any] = {"step": 0, "done": False, "output": "", "fillers": fillers}
    data = payload(state, ckpt, fill, info)
    return view(state, "", status(state, ckpt, fill, message), info, data)


def fillers_of(fill: MaskFill) -> list[dict[str, Any]]:
    """``[{"position", "piece", "top": [[piece, probability], ...]}, ...]`` per mask token."""
    return [
        {"position": pos, "piece": display_token(fill.pieces[pos]),
         "top": [[display_token(p), round(q, 6)] for p, q in top]}
        for pos, top in fill.fillers
    ]  # fmt: skip


def status(state: SessionState, ckpt: Checkpoint, fill: MaskFill | None, message: str) -> str:
    """The status line as HTML (escaped)."""
    out = [message] if message else []
    mask = html.escape(mask_name(ckpt))
    if fill is None:
        if not message.startswith("⚠"):
            out.append(
                f"Type a sentence with <code>{mask}</code> where a token should be filled in "
                "and press <b>Read</b> (or Enter)."
            )
        return "<br>".join(out)
    if state.unknown:
        pieces = ", ".join(f"<code>{html.escape(u)}</code>" for u in state.unknown)
        out.append(f"⚠ Not in this model's vocabulary, read as its unknown token: {pieces}.")
    n = len(fill.pieces)
    if fill.fillers:
        best = "; ".join(
            f"position {pos}: <code>{html.escape(display_token(top[0][0]))}</code> "
            f"(p = {top[0][1]:.3f})"
            for pos, top in fill.fillers
        )
        out.append(f"✓ Read {n} tokens at once. Best fillers: {best}.")
    else:
        out.append(
            f"✓ Read {n} tokens at once; {html.escape(NO_MASK.format(mask=mask_name(ckpt)))}."
        )
    return "<br>".join(out)


def payload(
    state: SessionState, ckpt: Checkpoint, fill: MaskFill | None, info: dict[str, Any]
) -> Payload:
    """What the page draws: as :func:`attnviz.app.views.payload` gives it for a decode with
    nothing decoded (``n = 0``), the encoder's ``[H, T, T]`` weights and masks of each layer
    as the pass recorded them (a long sentence: the layer and head shown, the page asking for
    others through :func:`attnviz.app.encoder_requests.encoder_view`), and the fillers."""
    head: dict[str, Any] = {
        "done": False, "view": state.view, "model_kind": "encoder_self", "forced": [],
        "arch": ckpt.config.arch, "layers": {k: layer_count(ckpt, k) for k in KINDS},
        "model": page_model(state),
        "kind_note": ENCODER_NOTES["step"],
    }  # fmt: skip
    fillers = info["fillers"]
    reading = {
        "fillers": fillers,
        "no_fill": NO_MASK.format(mask=mask_name(ckpt)) if fill and not fillers else "",
    }
    if fill is None:
        return Payload("", 0, 0, False, True, 0, head, info=info, reading=reading)
    trace = fill.trace
    decoded: dict[str, Any] = {"tokens": [], "prob": [], "topk": [], "rows": {}}
    source: dict[str, Any] = {
        "heads": ckpt.config.n_heads, "src": [display_token(p) for p in fill.pieces],
        "pieces": [display_token(p) for p in fill.pieces],
        "unk": [i for i, t in enumerate(fill.ids) if t == ckpt.config.unk_id], "bos": "",
        "expected": None, "max_steps": 0, "titles": {**KIND_TITLES, "encoder_self": TITLE},
        "src_words": None,
    }  # fmt: skip
    if encoder_inline(ckpt, len(fill.ids)):
        source["encoder"] = [
            {
                "w": b64_f32(trace.numpy("encoder_self", i)[0]),  # [H, T, T]
                "m": mask_bits(trace.numpy("encoder_self", i, "mask")[0, 0]),  # [T, T]
            }
            for i in trace.layers("encoder_self")
        ]
    else:
        source["encoder"] = []
        source["enc_block"] = encoder_block(state, trace, *view_of(state, ckpt, "encoder_self"))
    reading["types"] = fill.types
    return Payload(f"{state.sid}:{state.epoch}", 0, 0, True, True, 0, head, decoded, source,
                   info, reading=reading)  # fmt: skip
