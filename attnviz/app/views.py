"""What the step-through page shows for a state: pure functions of (state, what the decoder
holds, what the checkpoint's files say).

No lock, no decoding, no file read, no gradio: :mod:`attnviz.app.session` reads the checkpoint
and its version once, syncs the decoder once, and hands the state, the decoder's rows and steps
(:class:`Decoded`) and what the files say (:class:`Said`) here; :func:`render` builds the
page's :class:`Payload` once. :func:`attnviz.app.stepfigures.figures_of` builds the same views
as plotly figures for Python users and exports; :func:`stale_panels` and :func:`follow` say
which of the page's other panels an event left behind.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import html
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..analysis.words import piece_text, word_index, word_labels
from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import count
from ..core.model import KINDS
from ..core.record import Trace
from ..data.tasks import TASKS, get_task
from ..decode.greedy import StepResult
from ..render.arrays import b64_f32, mask_bits
from ..render.plots import KIND_TITLES
from .encoder_blocks import encoder_block, encoder_inline
from .inputs import note
from .kinds import prompt_part
from .state import (
    SessionState,
    head_choices,
    layer_count,
)

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}


def display_token(token: str) -> str:
    """A token as plain display text: whitespace made visible, the empty string as ``∅``."""
    return "".join(_VISIBLE.get(c, c) for c in str(token)) or "∅"


def pieces_text(pieces: Sequence[str], kind: str | None) -> str:
    """Tokenizer pieces back as the text a person reads: characters joined, else the words
    (:mod:`attnviz.analysis.words`: markers such as ``▁`` dropped) spaced."""
    if kind == "char":
        return "".join(pieces)
    return " ".join(word_labels(list(pieces), word_index(list(pieces), kind)))


def _code(token: str) -> str:
    return f"<code>{html.escape(display_token(token))}</code>"


#: ``(kind, layer) -> [(weights [H, Tk], mask [Tk]), ...]``: decoded rows as the stepper keeps
#: them (:meth:`attnviz.GreedyStepper.rows`).
Rows = dict[tuple[str, int], list[tuple[torch.Tensor, torch.Tensor]]]


@dataclasses.dataclass(frozen=True, eq=False)
class Payload(Mapping[str, Any]):
    """What the page's renderer (``assets/viz.js``) draws from: built once per event, by
    :func:`render` (an encoder-only model's: :func:`attnviz.app.reading.render`), and sent
    as the JSON :meth:`to_page` gives; read like that JSON (``payload["tokens"]``).

    Attributes:
        epoch: ``"sid:epoch"`` of the decode shown (the page drops what it holds when it
            changes); ``""`` before an input is started.
        step, n: rows shown, rows decoded.
        started: an input is started; full: the page is sent everything (it held nothing
            of this decode); start: the first decoded row in ``decoded["rows"]`` (``"from"``).
        head: what every payload of a model says (``done``, ``view``, ``model_kind``,
            ``forced``, ``arch``, ``layers``, ``kind_note``); None without a model.
        decoded: the decoded part (``tokens``, ``prob``, ``topk``, ``tgt_words``, ``rows``).
        source: the full payload's part (labels, ``expected``, the encoder's matrices, a
            decoder-only model's prompt rows).
        info: the step's summary (:attr:`Shown.info`); limit: stopped at the length limit.
        speech: a speech model's part (:func:`attnviz.app.speech.part`).
        reading: an encoder-only model's fillers (``fillers``, ``no_fill``, ``types``).
        restarted: the checkpoint changed on disk and decoding restarted.
    """

    epoch: str
    step: int
    n: int
    started: bool
    full: bool
    start: int
    head: dict[str, Any] | None = None
    decoded: dict[str, Any] | None = None
    source: dict[str, Any] | None = None
    info: dict[str, Any] | None = None
    limit: bool | None = None
    speech: dict[str, Any] | None = None
    reading: dict[str, Any] | None = None
    restarted: bool = False

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"epoch": self.epoch, "step": self.step, "n": self.n,
                               **(self.head or {}), "started": self.started,
                               "full": self.full, "from": self.start}  # fmt: skip
        for part in (self.decoded, self.source, self.reading):
            out.update(part or {})
        named = {"info": self.info, "limit": self.limit, "speech": self.speech}
        out.update({k: v for k, v in named.items() if v is not None})
        if self.restarted:
            out["restarted"] = True
        return out

    def to_page(self, follow: bool | None = None, resent: int | None = None) -> dict[str, Any]:
        """The JSON the page receives; ``follow``: the page should ask the other panels to
        follow; ``resent``: a resend of everything, marked new (an equal value fires no
        change in the page)."""
        extra = {"follow": follow, "resent": resent}
        return {**self._json, **{k: v for k, v in extra.items() if v is not None}}

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)


@dataclasses.dataclass(frozen=True)
class Shown:
    """Everything the step-through page shows for one state.

    Attributes:
        state: the state shown (with ``page_rows`` updated to what ``payload`` brings).
        output: output text so far (EOS not shown).
        message: HTML for the status line (hints, errors, warnings), escaped.
        info: JSON-ready ``{"step", "done", "output", "tokens", "newest", "prob", ...}``.
        payload: what the page draws from (:class:`Payload`): the rows the page lacks, the
            step to show, tokens and labels.
    """

    state: SessionState
    output: str
    message: str
    info: dict[str, Any]
    payload: Payload


@dataclasses.dataclass(frozen=True)
class Decoded:
    """What the decoder holds that a view shows (read under the session's lock).

    Attributes:
        encoder: the decoder's encoder trace (``"encoder_self"``, batch 1); read only when
            the page holds nothing of this decode (``page_rows < 0``).
        rows: the decoded rows :func:`attnviz.app.session.missing_rows` names, as the stepper keeps them.
        steps: the decoder's step results (at least ``len(state.tokens)``).
    """

    encoder: Trace | None = None
    rows: Rows = dataclasses.field(default_factory=dict)
    steps: Sequence[StepResult] = ()


@dataclasses.dataclass(frozen=True)
class Said:
    """What the checkpoint's files say about the input, read by the session (views read no
    file).

    Attributes:
        example: one of the model's example inputs (the hint before an input is started).
        expected: the output expected for the input
            (:func:`attnviz.train.evaluate.expected_output`), on a full payload.
        speech: a speech model's part of the payload (:func:`attnviz.app.speech.part`).
    """

    example: str | None = None
    expected: str | None = None
    speech: dict[str, Any] | None = None


def expected_tokens(ckpt: Checkpoint, expected: str | None) -> list[str] | None:
    """The expected output (:func:`attnviz.train.evaluate.expected_output`) as display
    tokens, EOS last (the Expected line); None when there is none or it does not tokenize."""
    if expected is None:
        return None
    try:
        pieces = ckpt.tgt_tokenizer.encode(expected).pieces
    except Exception:  # an input outside the task (unknown symbols): nothing to expect
        return None
    eos = ckpt.tgt_tokenizer.token(ckpt.config.eos_id)
    return [display_token(p) for p in pieces] + [eos]


def input_placeholder(ckpt: Checkpoint, examples: Sequence[str]) -> str:
    """The input box's placeholder: one of the model's own ``examples``
    (:func:`attnviz.app.store.examples_of`; a decoder-only model's: a prompt to continue)."""
    if ckpt.config.decoder_only:
        return f"a prompt to continue, e.g. {examples[0]}" if examples else "type a prompt"
    return f"e.g. {examples[0]}" if examples else "type an input for this model"


def messages(
    state: SessionState,
    ckpt: Checkpoint,
    message: str = "",
    forced: float | None = None,
    example: str | None = None,
) -> str:
    """The status line as HTML (already escaped): ``message`` first, then hints; ``forced``:
    the model's own probability of an end token the length limit forced; ``example``: an
    input to suggest before one is started."""
    out = [message] if message else []
    failed = message.startswith("⚠")
    if not state.started:
        if not failed:
            task = ckpt.task or "this model"
            eg = f" (e.g. {_code(example)}; more under Examples)" if example else ""
            out.append(
                f"Type an input for {html.escape(task)}{eg} and press <b>Step</b> or <b>Run</b>."
            )
        return "<br>".join(out)
    if state.unknown:
        pieces = ", ".join(_code(u) for u in state.unknown)
        out.append(f"⚠ Not in this model's vocabulary, read as <code>&lt;unk&gt;</code>: {pieces}.")
    if ckpt.task in TASKS:
        lengths = get_task(ckpt.task).lengths
        if len(state.src_ids) > lengths.stop - 1:
            out.append(
                f"⚠ {len(state.src_ids)} tokens: longer than anything this model was trained on "
                f"({lengths.start}–{lengths.stop - 1}); expect mistakes."
            )
    limit_note = state.src_ids and ckpt.decoding.note(ckpt.config, len(state.src_ids))
    if limit_note and state.step == 0:
        out.append(f"⚠ {html.escape(limit_note)}.")
    if state.stopped_at_limit:
        out.append(
            f"■ Stopped at the length limit ({state.max_steps} tokens) without producing "
            "<code>&lt;eos&gt;</code>."
        )
    elif state.done and forced is not None:  # the length limit chose the end, not the model
        out.append(
            f"✓ Done after {count(state.step, 'step')}: the length limit ({state.max_steps} tokens) "
            f"forced <code>&lt;eos&gt;</code> (the model gave it p = {forced:.3f})."
        )
    elif state.done:
        out.append(
            f"✓ Done after {count(state.step, 'step')} (the model produced <code>&lt;eos&gt;</code>)."
        )
    elif state.step == 0 and not failed:
        out.append("Ready: press <b>Step</b> to decode one token, <b>Run</b> to decode to the end.")
    return "<br>".join(out)


def src_labels(state: SessionState, ckpt: Checkpoint) -> list[str]:
    unk = ckpt.config.unk_id
    return [
        "<unk>" if i == unk else display_token(p)
        for p, i in zip(state.src_pieces, state.src_ids, strict=True)
    ]


def payload(
    state: SessionState,
    ckpt: Checkpoint,
    decoded: Decoded,
    said: Said = Said(),
    info: dict[str, Any] | None = None,
    restarted: bool = False,
) -> Payload:
    """What the page needs to show ``state``, given what it holds (``state.page_rows``).

    Args:
        decoded: the decoder's encoder trace, the rows :func:`attnviz.app.session.missing_rows` names and the
            steps (:class:`Decoded`).
        said: what the files say (:class:`Said`): the expected output, a speech model's part.
        info: the step's summary (:func:`render`); restarted: decoding restarted on a file
            rewritten on disk.
    Returns:
        The :class:`Payload`; its ``n`` is what the page holds once it applied it. Per kind
        and layer, the rows are ``w`` (base64 float32 ``[rows, H, Tk_row]``) and ``m``
        (``"0"/"1"`` per cell, ``1`` = blocked by the recorded mask). The encoder's
        ``[H, Ts, Ts]`` matrices come once per epoch.
    """
    n = len(state.tokens)
    head: dict[str, Any] = {
        "done": state.done,
        "view": state.view,
        "model_kind": state.model_kind,
        "forced": [p for p in state.forced if p < n],
        "arch": ckpt.config.arch,  # the page hides the kinds this model lacks, saying why
        "layers": {k: layer_count(ckpt, k) for k in KINDS},
        "kind_note": note(ckpt, "step"),
        "model": page_model(state),  # another model: the page's own choices start afresh
        "windows": [ckpt.config.layer_window(i) or 0 for i in range(ckpt.config.n_decoder_layers)],
    }
    limit = state.stopped_at_limit
    if not state.started:
        return Payload("", state.step, n, False, True, 0, head, info=info, limit=limit)
    full = state.page_rows < 0
    start = 0 if full else min(state.page_rows, n)
    steps = decoded.steps
    tok = ckpt.tgt_tokenizer
    prompt = state.src_pieces if ckpt.config.decoder_only else []
    part: dict[str, Any] = {
        "tokens": [display_token(tok.token(t)) for t in state.tokens],
        "prob": [round(float(s.prob), 6) for s in steps[start:n]],
        "topk": [_topk(s, tok, state.top_k) for s in steps[start:n]],
        "tgt_words": _words(  # a decoder-only model's sequence: the prompt, then its output
            [
                *(state.src_pieces[:-1] if prompt else []),
                prompt[-1] if prompt else tok.token(ckpt.config.bos_id),
                *(tok.token(t) for t in state.tokens),
            ],
            tok.kind,
        ),  # fmt: skip
        "rows": {},
    }
    if n > start:  # decoder_self row r holds keys 0..r (the rest is the future), cross Ts
        for kind in ("decoder_self", "cross"):
            layers = sorted(i for k, i in decoded.rows if k == kind)
            part["rows"][kind] = [_row_block(decoded.rows[kind, i]) for i in layers]
    source = _source(state, ckpt, decoded.encoder, said) if full else None
    return Payload(f"{state.sid}:{state.epoch}", state.step, n, True, full, start, head, part,
                   source, info, limit, said.speech, restarted=restarted)  # fmt: skip


def _source(state: SessionState, ckpt: Checkpoint, encoder: Trace | None, said: Said) -> dict:
    """A full payload's part: labels, the expected output, the encoder's matrices (a long
    input's: the layer and head shown; a clip's: none, the page asks), a prompt's rows."""
    cfg, tok = ckpt.config, ckpt.tgt_tokenizer
    prompt = state.src_pieces if ckpt.config.decoder_only else []
    out: dict[str, Any] = dict(
        heads=cfg.n_heads,
        layers={k: layer_count(ckpt, k) for k in KINDS},
        src=src_labels(state, ckpt),
        # a clip's source line names the clip, not 1500 frame chips
        pieces=[] if said.speech else [display_token(p) for p in state.src_pieces],
        unk=[i for i, t in enumerate(state.src_ids) if t == cfg.unk_id],
        bos=display_token(tok.token(cfg.bos_id)),
        expected=expected_tokens(ckpt, said.expected),
        max_steps=state.max_steps,
        titles={**KIND_TITLES, "decoder_self": "Causal self-attention: prompt + output"}
        if prompt
        else KIND_TITLES,
        src_words=_words(state.src_pieces, ckpt.src_tokenizer.kind)
        if ckpt.src_tokenizer is not None  # a speech model's keys are times, not words
        else None,
    )
    if prompt:  # no encoder: the prompt's own rows come first in the self-attention
        out["encoder"] = []
        out.update(prompt_part([display_token(p) for p in prompt], encoder))
    elif encoder_inline(ckpt, len(state.src_ids)):
        out["encoder"] = [
            {
                "w": b64_f32(encoder.numpy("encoder_self", i)[0]),  # [H, Ts, Ts]
                "m": mask_bits(encoder.numpy("encoder_self", i, "mask")[0, 0]),  # [Ts, Ts]
            }
            for i in encoder.layers("encoder_self")
        ]
    else:  # a long input: the layer and head shown now; the page asks for others
        out["encoder"] = []
        if not said.speech:  # a clip's 1500 x 1500: the page asks once the Step is drawn
            out["enc_block"] = encoder_block(state, encoder, *view_of(state, ckpt, "encoder_self"))
    return out


def _words(pieces: Sequence[str], kind: str) -> dict[str, list]:
    """``{"index": the word of each piece, "text": each piece's share of its word's text}``
    for the page's pieces | words switch (a word's label: its pieces' texts joined)."""
    return {"index": word_index(pieces, kind), "text": [piece_text(p) for p in pieces]}


def _row_block(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, str]:
    """One layer's rows for the page: weights of each row ``[H, Tk]`` flattened one after
    another (one device-to-host copy), and the mask bits of each row ``[Tk]`` likewise."""
    w = as_numpy(torch.cat([w.reshape(-1) for w, _ in pairs]))
    m = as_numpy(torch.cat([m.reshape(-1) for _, m in pairs]))
    return {"w": b64_f32(w), "m": mask_bits(m)}


def top_ids(p: np.ndarray, k: int) -> np.ndarray:
    """The ids of the ``k`` largest of ``p`` ``[V]``, largest first, ties by the smaller id:
    ``np.argsort(-p, kind="stable")[:k]`` in O(V) (a 262,144-token vocabulary's full sort took
    ~30 ms a Step)."""
    k = min(k, p.size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(p, p.size - k)[p.size - k]  # the k-th largest value
    above = np.flatnonzero(p > kth)
    ties = np.flatnonzero(p == kth)[: k - above.size]  # the smallest ids among equals
    ids = np.concatenate([above, ties])
    return ids[np.lexsort((ids, -p[ids]))]


def _topk(step: StepResult, tok, k: int) -> list[list]:
    p = as_numpy(step.probs)  # [V]
    ids = top_ids(p, k)
    top = [
        [display_token(tok.token(int(i))), round(float(p[i]), 6), int(i) == step.token, int(i)]
        for i in ids
    ]
    if step.token not in ids:
        top.append(
            [display_token(tok.token(step.token)), round(float(step.prob), 6), True, step.token]
        )
    return top


def render(
    state: SessionState,
    ckpt: Checkpoint | None,
    decoded: Decoded = Decoded(),
    message: str = "",
    said: Said = Said(),
    restarted: bool = False,
    view: type[Shown] = Shown,
) -> Shown:
    """The whole step-through view of ``state``: text, status, info and the page payload
    (``decoded``, ``said``: as :func:`payload` takes them), built once as a ``view``
    (:class:`Shown` or the session's subclass of it)."""
    if ckpt is None:
        info = {"step": 0, "done": False, "output": ""}
        return view(state, "", message, info, Payload("", 0, 0, False, True, 0, info=info))
    tok = ckpt.tgt_tokenizer
    shown = state.tokens[: state.step]
    output = tok.decode(shown)
    info: dict[str, Any] = {
        "step": state.step,
        "done": state.done,
        "output": output,
        "tokens": [tok.token(t) for t in shown],
        "max_steps": state.max_steps,
        "decoded": len(state.tokens),
        "forced": [p for p in state.forced if p < state.step],
    }
    forced = None
    if shown:
        last = decoded.steps[state.step - 1]
        info.update(newest=tok.token(last.token), prob=round(float(last.prob), 6))
        rules = ckpt.rules
        if (rules and getattr(rules, "forced_eos_id", None) == last.token and state.step >= state.max_steps
                and int(last.probs.argmax()) != last.token):  # fmt: skip
            forced = float(last.probs[last.token])
    data = payload(state, ckpt, decoded, said, info, restarted)
    held = data.n if data.started else -1
    new = state if held == state.page_rows else _with_rows(state, held)
    status = messages(state, ckpt, message, forced, said.example)
    return view(new, output, status, info, data)


def _with_rows(state: SessionState, rows: int) -> SessionState:
    return dataclasses.replace(state, page_rows=rows)


def page_model(state: SessionState) -> str:
    """What tells the page one model from another: a short hash of its folder (never the
    server path itself)."""
    return hashlib.sha1(state.model.encode()).hexdigest()[:12]


def view_of(state: SessionState, ckpt: Checkpoint, kind: str) -> tuple[int, str]:
    """The (layer, head) shown for ``kind``: the state's choice, clipped to this model."""
    layer, head = state.view.get(kind, [layer_count(ckpt, kind) - 1, "mean"])
    layer = int(np.clip(int(layer), 0, layer_count(ckpt, kind) - 1))
    if head not in head_choices(ckpt):
        head = "mean"
    return layer, head


def json_size(data: Any) -> int:
    """Bytes of ``data`` (a :class:`Payload`: the JSON it sends) as the JSON the page receives."""
    if isinstance(data, Payload):
        data = data.to_page()
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
