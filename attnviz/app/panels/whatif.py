"""The step view's what-if panel: "what if this head had looked elsewhere".

Under the step view a person picks a decoder layer and heads, sees the source tokens shaded
by the *recorded* cross-attention row of the step shown (the weights the model used, read
from the session's decoder), clicks one source token ``j``, and gets
:func:`attnviz.analysis.what_if` at that step with ``attend_to=j`` on the session's own
prefix (``tokens=``: tokens the person forced before that step are fed to both sides and
marked): the output re-decoded after the chosen heads' row was made one-hot on ``j``, set
against the output decoded greedily from the same prefix, token by token. Plain Python, no gradio; user errors come back as one line with the state
untouched (a what-if never changes the session's decode).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...analysis.whatif import WhatIf, what_if
from ...checkpoint import Checkpoint
from ...core.devices import as_numpy
from ...core.errors import AttnvizError, InputError, count
from ...core.sites import parse_head_index
from ..decoders import DECODERS
from ..inputs import refuse
from ..state import SessionState, checkpoint_of, layer_index, warning
from ..views import display_token
from ..workers import remote

#: The strip's shading, from no attention to the row's largest weight: opaque, so the dark text
#: on it reads the same on a light and a dark page (contrast >= 4.5 at both ends).
PALE, STRONG = (255, 247, 237), (249, 115, 22)
#: The marker of a changed position (besides its colour): readable without colour vision.
CHANGED_MARK = "≠"
#: The marker of a position the person forced (fed in both sides: the prefix of the step view).
FORCED_MARK = "✎"
INTRO = (
    "Pick a decoder layer and heads, then click a source token: at this step the chosen heads "
    "attend only to that token (a one-hot row), decoding continues greedily, and the result is "
    "set against the output decoded greedily from the same prefix (tokens you forced before "
    "this step stay, marked ✎). Shading is the recorded cross-attention of this step (the "
    "weights the model used)."
)


@dataclass
class WhatIfView:
    """What the what-if panel shows.

    Attributes:
        strip: HTML of the clickable source tokens (``data-src-pos``), shaded by the recorded
            cross-attention row of the step shown; ``""`` when there is nothing to shade.
        html: HTML of the original vs what-if output, token by token (``""``: nothing run).
        message: one line: what was run, or why not (escaped HTML).
        result: the :class:`~attnviz.analysis.whatif.WhatIf` computed, if any.
        row: ``[Ts]`` the shading: the recorded row of the chosen heads (mean), if any.
    """

    strip: str = ""
    html: str = ""
    message: str = ""
    result: WhatIf | None = None
    row: np.ndarray | None = None


def parse_heads(heads: Sequence[int | str] | None, n_heads: int) -> list[int] | None:
    """``["H0", "H2"]`` / ``[0, 2]`` -> ``[0, 2]``; empty or None -> None (every head).

    Raises:
        InputError: a head that is not ``H<h>`` / an int in ``0..n_heads-1``.
    """
    out = []
    for h in heads or ():
        i = parse_head_index(h)
        if not 0 <= i < n_heads:
            raise InputError(f"head must be in 0..{n_heads - 1}, got {i}")
        out.append(i)
    return sorted(set(out)) or None


def _checked(state: SessionState, layer, heads) -> tuple[Checkpoint, int, list[int] | None, int]:
    """The checkpoint, layer, heads and 0-based decode step of a what-if on ``state``."""
    if not state.started:
        raise InputError("type an input and press Step first, then pick a source token")
    if state.step == 0:
        raise InputError("take at least one Step: a what-if overrides the step shown")
    ckpt = checkpoint_of(state)
    refuse(ckpt, "whatif")
    layer_i = layer_index(layer, list(range(ckpt.config.n_decoder_layers)))
    hs = parse_heads(heads, ckpt.config.n_heads)
    return ckpt, layer_i, hs, state.step - 1


def recorded_row(state: SessionState, ckpt: Checkpoint, layer: int) -> np.ndarray:
    """``[H, Ts]``: the cross-attention row of the step shown at ``layer``, as the session's
    decoder recorded it in the forward pass that chose the token."""
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        return as_numpy(stepper.steps[state.step - 1].attention["cross", layer])


def source_strip(
    pieces: Sequence[str], row: np.ndarray, chosen: int | None = None, title: str = ""
) -> str:
    """The source tokens as clickable chips shaded by ``row`` (``[Ts]``, weights in 0..1).

    Each chip carries ``data-src-pos`` (its key position) and its weight on hover; ``chosen``
    (the position of the last what-if) is outlined.
    """
    top = float(np.max(row)) if len(row) else 0.0
    chips = []
    for j, (piece, w) in enumerate(zip(pieces, row, strict=True)):
        f = float(w) / top if top > 0 else 0.0
        rgb = ",".join(str(round(lo + (hi - lo) * f)) for lo, hi in zip(PALE, STRONG, strict=True))
        cls = "av-wi-src" + (" av-wi-chosen" if j == chosen else "")
        tip = (
            f"position {j} “{display_token(piece)}”: attention {float(w):.3f} — click: attend here"
        )
        chips.append(
            f'<span class="{cls}" data-src-pos="{j}" role="button" tabindex="0" '
            f'style="background:rgb({rgb})" title="{html.escape(tip)}">'
            f"{html.escape(display_token(piece))}</span>"
        )
    head = f'<div class="av-wi-title">{html.escape(title)}</div>' if title else ""
    return f'<div class="av-wi-strip">{head}<div class="av-wi-tokens">{"".join(chips)}</div></div>'


def _heads_label(heads: list[int] | None) -> str:
    return (
        "all heads"
        if heads is None
        else "head" + ("s " if len(heads) > 1 else " ") + ", ".join(map(str, heads))
    )


def _stopped(*args, message: str, **kwargs) -> WhatIfView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return WhatIfView(message=message)


@remote(_stopped)
def strip(state: SessionState, layer=None, heads=None, chosen: int | None = None) -> WhatIfView:
    """The clickable source strip for ``layer`` (``"L1"``/1; default last) and ``heads``
    (``["H0", ...]``; empty = every head), shaded by the recorded row of the step shown."""
    try:
        ckpt, layer_i, hs, step = _checked(state, layer, heads)
        w = recorded_row(state, ckpt, layer_i)  # [H, Ts]
    except AttnvizError as exc:
        return WhatIfView(message=warning(exc))
    row = w[hs if hs is not None else slice(None)].mean(0)  # [Ts]
    title = (
        f"step {step + 1} · cross-attention layer {layer_i} · {_heads_label(hs)}"
        f"{'' if hs is not None and len(hs) == 1 else ' (mean)'}: "
        "click a source token"
    )
    return WhatIfView(strip=source_strip(state.src_pieces, row, chosen, title), row=row)


def compare_html(ckpt: Checkpoint, w: WhatIf, forced: Sequence[int] = ()) -> str:
    """The original and the what-if output, position by position: changed positions marked
    (class ``changed`` and :data:`CHANGED_MARK`), each side's probability on hover.

    ``forced``: positions the person forced; those before the overridden step were fed to
    both sides and are marked (class ``forced`` and :data:`FORCED_MARK`).
    """
    tok = ckpt.tgt_tokenizer
    a, b = w.before, w.after
    changed = set(w.changed)
    fed = {int(p) for p in forced if int(p) < w.step}
    n = max(len(a.tokens), len(b.tokens))

    def cell(side, other, i: int, name: str) -> str:
        if i >= len(side.tokens):
            return '<td class="av-wi-none" title="no token: this side ended earlier">—</td>'
        t = display_token(tok.token(side.tokens[i]))
        tip = f"step {i + 1} · {name}: “{t}” p = {side.probs[i]:.3f}"
        if i < len(other.tokens):
            o = display_token(tok.token(other.tokens[i]))
            tip += f" · {'what-if' if name == 'original' else 'original'}: “{o}” p = {other.probs[i]:.3f}"
        if i == w.step:
            tip += " · the overridden step"
        if i in fed:
            tip += " · forced: fed to both sides"
        cls = (
            ["av-wi-tok"]
            + (["changed"] if i in changed else [])
            + (["edited"] if i == w.step else [])
            + (["forced"] if i in fed else [])
        )
        mark = f'<sup class="av-wi-mark">{CHANGED_MARK}</sup>' if i in changed else ""
        if i in fed:
            mark += f'<sup class="av-wi-fmark">{FORCED_MARK}</sup>'
        return (
            f'<td class="{" ".join(cls)}" data-pos="{i}" title="{html.escape(tip)}">'
            f"{html.escape(t)}{mark}</td>"
        )

    head = "".join(f'<th class="{"edited" if i == w.step else ""}">{i + 1}</th>' for i in range(n))
    rows = "".join(
        f'<tr class="av-wi-{key}"><th>{label}</th>'
        + "".join(cell(side, other, i, label) for i in range(n))
        + "</tr>"
        for key, label, side, other in (
            ("before", "original", a, b),
            ("after", "what-if", b, a),
        )
    )
    where = f"{len(changed)} of {count(n, 'position')} changed" if changed else "no token changed"
    if fed:
        steps = ", ".join(str(p + 1) for p in sorted(fed))
        where += (
            f"; step{'s' if len(fed) > 1 else ''} {steps} forced ({FORCED_MARK}), fed to both sides"
        )
    line = (
        f'<div class="av-wi-compare">“{html.escape(a.text)}” → “{html.escape(b.text)}” '
        f"({where}; {CHANGED_MARK} marks a changed token, the outlined column the overridden step)</div>"
    )
    return f'{line}<div class="av-wi-table"><table><tr><th>step</th>{head}</tr>{rows}</table></div>'


@remote(_stopped)
def run(
    state: SessionState, layer=None, heads=None, position: int | str | None = None
) -> WhatIfView:
    """Click source token ``position``: :func:`~attnviz.analysis.what_if` at the step shown.

    Args:
        state: the step view's state (not changed).
        layer: ``"L1"`` / 1 (default: the last decoder layer).
        heads: ``["H0", ...]`` or ints; empty = every head of the layer.
        position: the source position the chosen heads attend to (``data-src-pos``).
    Returns:
        The strip (the chosen token outlined), the comparison, a one-line message and the
        :class:`~attnviz.analysis.whatif.WhatIf` itself.
    """
    try:
        ckpt, layer_i, hs, step = _checked(state, layer, heads)
        n_src = len(state.src_ids)
        try:
            j = int(str(position).strip())
        except ValueError:
            raise InputError(
                f"not a source position: {position!r}; positions are 0..{n_src - 1}"
            ) from None
        if not 0 <= j < n_src:
            raise InputError(f"source position must be in 0..{n_src - 1}, got {j}")
        result = what_if(
            ckpt,
            state.text,
            step,
            kind="cross",
            layer=layer_i,
            heads=hs,
            attend_to=j,
            tokens=state.tokens[:step],  # the prefix the step view fed (forced tokens too)
        )
    except AttnvizError as exc:
        view = strip(state, layer, heads)
        view.message = warning(exc)
        return view
    view = strip(state, layer_i, heads, chosen=j)
    piece = display_token(state.src_pieces[j])
    view.result = result
    view.html = compare_html(ckpt, result, state.forced)
    view.message = (
        f"What if at step {step + 1} layer {layer_i} {_heads_label(hs)} had attended only to "
        f"source position {j} “{html.escape(piece)}”:"
    )
    if step in state.forced:
        view.message += f" (step {step + 1} was forced: both sides show what the model chose there)"
    return view


#: Styles of the strip and the comparison (the page's theme variables: light and dark alike;
#: scoped to the component, so dark-only shades are in ``assets/app.css``).
CSS = """
.av-wi-title { font-size: 0.9em; color: var(--body-text-color-subdued); margin: 4px 0; }
.av-wi-tokens { display: flex; flex-wrap: wrap; gap: 3px; max-height: 16em; overflow-y: auto; }
.av-wi-src { cursor: pointer; padding: 3px 7px; border-radius: 4px; white-space: pre;
  font-family: var(--font-mono); color: #1f2937; border: 1px solid var(--border-color-primary); }
.av-wi-src:hover, .av-wi-src:focus { outline: 2px solid #2563eb; outline-offset: 1px; }
.av-wi-src.av-wi-chosen { outline: 3px solid #2563eb; outline-offset: 1px; font-weight: 700; }
.av-wi-compare { margin: 6px 0; }
.av-wi-table { overflow-x: auto; }
.av-wi-table table { border-collapse: collapse; font-family: var(--font-mono); }
.av-wi-table th, .av-wi-table td { padding: 2px 6px; text-align: center; white-space: pre;
  border: 1px solid var(--border-color-primary); }
.av-wi-table th { font-weight: 400; color: var(--body-text-color-subdued); }
.av-wi-table td.changed { background: rgba(234, 88, 12, 0.35); font-weight: 700;
  text-decoration: underline 2px; }
.av-wi-table .edited { border-left: 3px solid #2563eb; border-right: 3px solid #2563eb; }
.av-wi-mark { color: #7c2d12; margin-left: 1px; }
.av-wi-table td.forced { box-shadow: inset 0 0 0 2px #7c3aed; }
.av-wi-fmark { color: #5b21b6; margin-left: 1px; }
"""
