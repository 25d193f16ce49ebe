"""Attention views for notebooks: :func:`show` and :meth:`Trace.show <attnviz.Trace.show>`.

A :class:`View` is one attention kind of one decode (every layer and head) as a
self-contained piece of HTML: the app's canvas renderer (``assets/viz.js``) inlined, the
weights inlined as base64 float32, nothing fetched from the network (no CDN, no require.js).
Each view has its own element id, so several views in one notebook all draw. Plain HTML with
inline scripts: JupyterLab, classic Notebook, VS Code and Colab run it as it is.
"""

from __future__ import annotations

import html
import json
import uuid
from functools import cache
from pathlib import Path

import numpy as np

from ..analysis.masked_lm import read_pass
from ..checkpoint import Checkpoint, load_checkpoint
from ..core.errors import InputError
from ..core.model import KINDS
from ..core.record import Trace
from .arrays import b64_f32, mask_bits

ASSETS = Path(__file__).resolve().parents[2] / "assets"
_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}
_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder masked self-attention",
    "cross": "cross-attention",
}
# the view is a light card whatever the notebook's theme (the canvas draws on white)
_CSS = """
#{id} {{ background: #fff; color: #1f2937; font: 13px sans-serif; padding: 8px;
  border: 1px solid #e5e7eb; border-radius: 8px; overflow-x: auto; }}
#{id} .av-line {{ display: flex; gap: 8px; align-items: flex-start; margin: 3px 0; }}
#{id} .av-label {{ width: 4.5rem; flex: none; color: #6b7280; padding-top: 2px; }}
#{id} .tokens {{ display: flex; flex-wrap: wrap; gap: 3px; font-family: ui-monospace, monospace; }}
#{id} .tok {{ padding: 1px 5px; border-radius: 4px; background: #f3f4f6; white-space: pre; }}
#{id} .av-head {{ display: flex; gap: 12px; margin: 6px 0; align-items: center; }}
#{id} .av-export {{ margin-left: auto; display: flex; gap: 4px; }}
#{id} .av-png {{ font: 12px sans-serif; padding: 1px 8px; border: 1px solid #d1d5db;
  border-radius: 4px; background: #f9fafb; color: #1f2937; cursor: pointer; }}
#{id} select {{ background: #fff; color: #1f2937; border: 1px solid #d1d5db; border-radius: 4px; }}
#{id} .av-sub {{ color: #6b7280; margin: 8px 0 2px; }}
#{id} canvas {{ display: block; }}
.av-tip {{ position: fixed; z-index: 1000; display: none; pointer-events: none;
  background: #111827; color: #f9fafb; padding: 4px 8px; border-radius: 4px; font-size: 12px; }}
"""


# what the view says where its scripts do not run (an untrusted notebook, a static viewer)
_NO_SCRIPT = (
    "attnviz view: this output draws with JavaScript; run the cell again or trust the "
    "notebook to see it."
)


def display_token(token: str) -> str:
    """A token as display text: whitespace made visible, the empty string as ``∅``."""
    return "".join(_VISIBLE.get(c, c) for c in str(token)) or "∅"


@cache
def renderer_js() -> str:
    """The app's page-side canvas renderer (``assets/viz.js``), read once."""
    return (ASSETS / "viz.js").read_text(encoding="utf-8")


def script_safe(text: str) -> str:
    """Text safe inside ``<script>``: no ``</`` that could close it early."""
    return text.replace("</", "<\\/")


class View:
    """One attention kind of one decode, shown in a notebook (``_repr_html_``) or saved as
    an HTML file (:meth:`save_html`).

    Attributes:
        data: what the page draws from: ``title``, ``kind``, ``heads`` (H), ``layer``,
            ``head`` (``"mean"``, ``"all heads"`` or ``"H<h>"``), ``keys`` (Tk labels),
            ``queries`` (Tq labels), ``src``, ``out`` (token chips) and ``layers``: per layer
            ``w`` (base64 float32 ``[H, Tq, Tk]``) and ``m`` (``"0"/"1"`` per cell of the
            recorded mask ``[Tq, Tk]``, ``1`` = blocked).
    """

    def __init__(self, data: dict):
        self.data = data

    @classmethod
    def from_trace(
        cls,
        trace: Trace,
        src_tokens: list[str],
        tgt_tokens: list[str],
        *,
        kind: str | None = None,
        layer: int | None = None,
        head: int | str | None = None,
        out_tokens: list[str] | None = None,
        title: str | None = None,
    ) -> View:
        """A view of batch item 0 of ``trace``.

        Args:
            src_tokens: the ``Ts`` source tokens (keys of ``"cross"``, both axes of
                ``"encoder_self"``).
            tgt_tokens: the ``Tq`` decoder input tokens (the queries of the decoder kinds,
                the keys of ``"decoder_self"``): BOS first.
            kind: ``"cross"`` (default where recorded), ``"decoder_self"``, ``"encoder_self"``.
            layer: the layer shown first (default: the last); ``head``: a head index,
                ``"mean"`` (default) or ``"all heads"``. The page switches layer and head.
            out_tokens: the chips of the "Output" line (default: ``tgt_tokens`` after BOS).
        Raises:
            InputError: an unknown kind, layer or head, or token lists whose lengths are not
                the recorded matrices' sizes.
        """
        held = trace.kinds()
        kind = kind or ("cross" if "cross" in held else (held[0] if held else "cross"))
        if kind not in KINDS:
            raise InputError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind not in held:
            raise InputError(f"the trace holds no {kind!r} attention; it holds {held or 'none'}")
        layers = trace.layers(kind)
        w0 = trace.numpy(kind, layers[0])
        n_heads, tq, tk = w0.shape[1:]
        queries = src_tokens if kind == "encoder_self" else tgt_tokens
        keys = tgt_tokens if kind == "decoder_self" else src_tokens
        for name, toks, n in (("queries", queries, tq), ("keys", keys, tk)):
            if len(toks) != n:
                raise InputError(
                    f"{kind} has {n} {name} but {len(toks)} tokens were given for them "
                    f"({'src_tokens' if toks is src_tokens else 'tgt_tokens'})"
                )
        layer = layers[-1] if layer is None else layer
        if layer not in layers:
            raise InputError(f"layer must be one of {layers} for {kind!r}, got {layer!r}")
        head = _head(head, n_heads)
        blocks = []
        for i in layers:
            w = trace.numpy(kind, i)[0]  # [H, Tq, Tk]
            m = np.broadcast_to(trace.numpy(kind, i, "mask")[0, 0], (tq, tk))  # [Tq, Tk]
            blocks.append({"w": b64_f32(w), "m": mask_bits(m)})
        out = tgt_tokens[1:] if out_tokens is None else out_tokens
        return cls(
            {
                "title": title or _TITLES[kind],
                "kind": kind,
                "heads": int(n_heads),
                "layer": layers.index(layer),
                "head": head,
                "keys": [display_token(t) for t in keys],
                "queries": [display_token(t) for t in queries],
                "src": [display_token(t) for t in src_tokens],
                "out": [display_token(t) for t in out],
                "layers": blocks,
            }
        )

    def _repr_html_(self) -> str:
        """Self-contained HTML: a ``<div>`` with a fresh id, its style, the renderer and the
        call that draws this view into that ``<div>`` (inline scripts only)."""
        vid = f"attnviz-{uuid.uuid4().hex[:12]}"
        data = script_safe(json.dumps(self.data, separators=(",", ":"), ensure_ascii=False))
        return (
            f'<div id="{vid}" class="attnviz-view">{_NO_SCRIPT}</div>\n'
            f"<style>{_CSS.format(id=vid)}</style>\n"
            f"<script>{script_safe(renderer_js())}</script>\n"
            f'<script>window.AttnViz.drawStatic(document.getElementById("{vid}"), {data});</script>'
        )

    def save_html(self, path: str | Path) -> Path:
        """Write the view as a standalone HTML page (works offline); returns the path."""
        path = Path(path)
        title = html.escape(self.data["title"])
        page = (
            f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body>\n{self._repr_html_()}\n</body></html>\n"
        )
        path.write_text(page, encoding="utf-8")
        return path

    def __repr__(self) -> str:
        d = self.data
        return (
            f"View({d['kind']}, {len(d['layers'])} layers x {d['heads']} heads, "
            f"{len(d['queries'])} queries x {len(d['keys'])} keys)"
        )


def show(
    ckpt_or_folder: Checkpoint | str | Path,
    text: str,
    *,
    steps: int | None = None,
    kind: str | None = None,
    layer: int | None = None,
    head: int | str | None = None,
) -> View:
    """Decode ``text`` greedily and return a :class:`View` of its attention (an encoder-only
    model: its one pass over ``text``, the self-attention over the sentence; the output line
    its top filler at each mask token, or its prediction of each token).

    Args:
        ckpt_or_folder: a loaded :class:`~attnviz.Checkpoint`, or a checkpoint folder (an
            attnviz one or a Hugging Face one) to load on the CPU.
        steps: decode at most this many steps (default: until the end token or the limit).
        kind: ``"cross"``, ``"decoder_self"`` or ``"encoder_self"`` (default: cross-attention,
            a decoder-only model's self-attention over prompt + output).
        layer / head: what the view shows first (default: the last layer, the mean of heads).
    Returns:
        A :class:`View`: ``Tq`` = the steps decoded (queries: BOS and the tokens fed back),
        ``Tk`` = the source tokens (``"cross"``) or ``Tq`` (``"decoder_self"``).
    Raises:
        CheckpointError / InputError: an unreadable checkpoint, an empty or over-long input,
            ``steps < 1``, or an unknown kind, layer or head.
    """
    if kind is not None and kind not in KINDS:
        raise InputError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise InputError(f"steps must be a whole number of at least 1, got {steps!r}")
    ckpt = (
        ckpt_or_folder
        if isinstance(ckpt_or_folder, Checkpoint)
        else load_checkpoint(ckpt_or_folder)
    )
    if ckpt.config.encoder_only:  # one pass over the sentence: its self-attention
        read = read_pass(ckpt, text)
        src = list(read.enc.pieces)
        out = [ckpt.tgt_tokenizer.token(i) for i in read.argmax()]  # fillers (or each token)
        return View.from_trace(read.trace, src, [], kind=kind or "encoder_self", layer=layer,
                               head=head, out_tokens=out)  # fmt: skip
    stepper = ckpt.stepper(text)
    enc = ckpt.encode_source(text)
    while not stepper.done and (steps is None or stepper.position < steps):
        stepper.step()
    tok, cfg = ckpt.tgt_tokenizer, ckpt.config
    src = ["<unk>" if i == cfg.unk_id else p for p, i in zip(enc.pieces, enc.ids, strict=True)]
    out = [tok.token(t) for t in stepper.tokens]
    # what each step fed the decoder: the start token (a decoder-only model: the prompt)
    start = src if cfg.decoder_only else [tok.token(cfg.bos_id)]
    tgt = [*start, *out[:-1]]
    return View.from_trace(
        stepper.trace(), src, tgt, kind=kind, layer=layer, head=head, out_tokens=out
    )


def _head(head: int | str | None, n_heads: int) -> str:
    if head is None or head == "mean":
        return "mean"
    if head == "all heads":
        return "all heads"
    if isinstance(head, str) and head[:1] == "H" and head[1:].isdigit():
        head = int(head[1:])
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_heads:
        raise InputError(f"head must be 0..{n_heads - 1}, 'mean' or 'all heads', got {head!r}")
    return f"H{head}"


Trace.viewer = View.from_trace  # trace.show(...) draws with this module
