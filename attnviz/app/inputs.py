"""One input object per session: what the person gave, by kind — a text (a source or a prompt),
a sentence or a pair for an encoder-only model, a clip for a speech model — each knowing its
label, how it is refused when empty, how it becomes the start state, and which panels apply
(:func:`note`, :func:`refuse`: one sentence for each place a model's kind hides).

:func:`input_of` answers which one a checkpoint reads (asked of its config: ``reads_audio``,
``encoder_only``), and :func:`start` is the one place a fresh state is built: a new input, a
refused one cleared, a decode restarted on a rewritten file. No gradio.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from ..analysis.masked_lm import special_token
from ..checkpoint import Checkpoint
from ..core.errors import InputError
from . import speech
from .state import SessionState

# -- which panels apply, by the model's kind ------------------------------------------------
#: One sentence for each place a decoder-only model hides, by place.
NOTES = {
    "step": (
        "A decoder-only model has no encoder and no cross-attention: its prompt and its "
        "output are one sequence in the self-attention above."
    ),
    "whatif": (
        "What-if redirects a head's cross-attention to one source token; a decoder-only "
        "model has no cross-attention, so there is nothing here to redirect."
    ),
    "align": (
        "Alignment scores cross-attention heads against gold links between source and "
        "output words (AER); a decoder-only model has no cross-attention, its prompt and "
        "output being one sequence, so there is nothing to align."
    ),
    "mask": (
        "A decoder-only model's prompt and output are one sequence, so there are no source "
        "tokens to block: switch the causal mask off to let each position read the token it "
        "should predict."
    ),
}

#: Labs that do not run a decoder-only model: why, in one sentence.
NOT_YET = {
    "faith": (
        "Faithfulness removes source tokens the cross-attention points at; a decoder-only "
        "model has no cross-attention."
    ),
}


#: One sentence for each place an encoder-only model hides or refuses, by place; every other
#: place (a lab) says :data:`ENCODER_NOT_YET`.
ENCODER_NOTES = {
    "step": (
        "An encoder-only model reads the whole sentence at once and generates nothing: above "
        "is its self-attention over the sentence, and the bars are its fillers at each mask "
        "token."
    ),
    "decode": (
        "Step, Back, Reset and beam search do not apply: an encoder-only model reads the whole "
        "sentence at once and generates nothing. Press Read (or Enter) to see its attention "
        "and fillers."
    ),
    "reference": (
        "There is no output to score a reference against: an encoder-only model reads the "
        "whole sentence at once and generates nothing."
    ),
    "whatif": (
        "What-if redirects a head's cross-attention to one source token; an encoder-only "
        "model has no cross-attention (it reads the whole sentence at once and generates "
        "nothing)."
    ),
    "align": (
        "Alignment scores cross-attention heads against gold links between source and output "
        "words; an encoder-only model has no cross-attention and generates nothing to align."
    ),
    "mask": (
        "The mask lab switches a decoder's causal mask off and blocks source tokens; an "
        "encoder-only model has no causal mask and no decoder, and this lab does not run one "
        "yet."
    ),
    "contrast": (
        "“Why this token and not that one” compares two candidates for the next token; an "
        "encoder-only model produces no next token (the attribution above explains the "
        "filler at the first mask)."
    ),
    "faith": (
        "Faithfulness removes source tokens the cross-attention points at; an encoder-only "
        "model has no cross-attention."
    ),
    "beam": (
        "Beam search decodes an output; an encoder-only model reads the whole sentence at "
        "once and generates nothing."
    ),
}
ENCODER_NOT_YET = "Not yet for encoder-only models: this lab runs models that decode."
#: The labs an encoder-only model runs, on its one pass over the sentence (the output read being
#: its top filler at each mask token, or its prediction of each token of a sentence without one).
ENCODER_LABS = ("ablation", "attribution", "health", "export", "compare", "lens", "patch")

#: One sentence for each place a speech model hides, by place (the labs that take no clip say
#: :data:`attnviz.app.speech.NOT_FOR_AUDIO` where they run).
AUDIO_NOTES = {
    "patch": (
        "Patching needs a corrupted input of as many tokens as the clean one; the input of a "
        "speech model is a clip, so this part does not apply (attribution, the lens and the "
        "information flow above and below do: the leaves of the flow are the encoder frames, "
        "by time)."
    ),
}


def input_label(ckpt: Checkpoint | None) -> str:
    """The input box's label: a decoder-only model continues a prompt, an encoder-only one
    reads a sentence or a pair (with its tokenizer's separator and mask tokens)."""
    if ckpt is not None and ckpt.config.encoder_only:
        sep, mask = (_special(ckpt, w) for w in ("sep", "mask"))
        return f"Sentence (or a pair: first {sep} second; {mask} to fill)"
    return "Prompt" if ckpt is not None and ckpt.config.decoder_only else "Input"


def _special(ckpt: Checkpoint, which: str) -> str:
    token = special_token(ckpt, which)
    return token[0] if token else f"[{which.upper()}]"


def note(ckpt: Checkpoint | None, place: str) -> str:
    """The sentence shown where ``place`` (a place of :data:`NOTES` or a lab of
    :data:`NOT_YET`; for an encoder-only model, of :data:`ENCODER_NOTES`, a lab of
    :data:`ENCODER_LABS` running and any other place saying :data:`ENCODER_NOT_YET`; for a
    speech model, of :data:`AUDIO_NOTES`) is hidden for this model, or ``""`` where it is
    shown."""
    if ckpt is not None and ckpt.config.encoder_only:
        return "" if place in ENCODER_LABS else ENCODER_NOTES.get(place, ENCODER_NOT_YET)
    if ckpt is not None and ckpt.is_audio:
        return AUDIO_NOTES.get(place, "")
    if ckpt is None or not ckpt.config.decoder_only:
        return ""
    return NOTES.get(place) or NOT_YET.get(place, "")


def refuse(ckpt: Checkpoint, place: str) -> None:
    """Raise :class:`InputError` with the one sentence of a place (a lab, what-if, AER) that
    does not apply to this model; nothing where it applies."""
    why = note(ckpt, place)
    if why:
        raise InputError(why)


# -- the input kinds ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Source:
    """An input encoded: its text as the state keeps it, the encoder's ids and their labels.

    Attributes:
        text: the input (a clip: the path the page gave).
        ids, pieces, unknown: the source ids ``[Ts]``, their display labels (a clip's frames:
            their times) and the pieces the tokenizer did not know.
        limit: how many tokens may be decoded (0: nothing is decoded, a sentence is read).
        audio: a clip's private copy (16 kHz samples, ``.npy``); ``""`` for a text.
    """

    text: str
    ids: list[int]
    pieces: list[str]
    unknown: list[str] = dataclasses.field(default_factory=list)
    limit: int = 0
    audio: str = ""


@dataclasses.dataclass(frozen=True)
class InputKind:
    """One kind of input.

    Attributes:
        name: ``"text"``, ``"sentence"`` or ``"clip"``.
        empty: what an empty input is refused with.
        encode: ``(ckpt, given) -> Source``; raises :class:`InputError` on a bad input.
    """

    name: str
    empty: str
    encode: Callable[[Checkpoint, object], Source]

    def label(self, ckpt: Checkpoint) -> str:
        """The input box's label for ``ckpt`` (a clip: the audio component's)."""
        return "Input clip (≤ 30 s)" if self.name == "clip" else input_label(ckpt)

    @property
    def decodes(self) -> bool:
        """Whether an output is decoded from it (a sentence is read once: nothing to decode)."""
        return self is not SENTENCE

    def refuse_decoding(self) -> None:
        """Raise :class:`InputError` with the one sentence saying why Step, Back, Reset and
        beam search do not apply to this input; nothing where they do."""
        if not self.decodes:
            raise InputError(ENCODER_NOTES["decode"])

    def applies(self, ckpt: Checkpoint, place: str) -> bool:
        """Whether the panel at ``place`` (a lab, ``"whatif"``, ``"align"``, ...) applies to
        this input on ``ckpt`` (a clip: not the mask lab, whose tokens are 1500 frames)."""
        if self.name == "clip" and place == "mask":
            return False
        return not note(ckpt, place)


def _text(ckpt: Checkpoint, given) -> Source:
    enc = ckpt.encode_source(str(given))  # InputError: empty or too long
    return Source(str(given), list(enc.ids), list(enc.pieces), list(enc.unknown),
                  limit=ckpt.limit(len(enc.ids)))  # fmt: skip


def _sentence(ckpt: Checkpoint, given) -> Source:
    enc = ckpt.encode_source(str(given))
    return Source(str(given), list(enc.ids), list(enc.pieces), list(enc.unknown))


def _clip(ckpt: Checkpoint, given) -> Source:
    kept, _ = speech.store_clip(given)  # a path the page gave, or samples
    frames = speech.ENCODER_FRAMES
    return Source(str(given), list(range(frames)), [speech.time_label(i) for i in range(frames)],
                  limit=ckpt.limit(frames), audio=kept)  # fmt: skip


TEXT = InputKind("text", "the input is empty: type something (or pick an example) first", _text)
SENTENCE = InputKind(
    "sentence", "the input is empty: type a sentence (with [MASK] to fill) first", _sentence
)
CLIP = InputKind("clip", speech.NO_CLIP, _clip)


def input_of(ckpt: Checkpoint) -> InputKind:
    """The kind of input ``ckpt`` reads (asked of its config)."""
    cfg = ckpt.config
    return CLIP if cfg.reads_audio else SENTENCE if cfg.encoder_only else TEXT


def given(ckpt: Checkpoint, text: str | None, clip: str | None) -> str | None:
    """The input an action was given: a speech model's is the clip (the page's audio
    component: ``""`` when it holds none), never the text box; other models' the text."""
    return clip if input_of(ckpt) is CLIP else text


def start(state: SessionState, ckpt: Checkpoint, given_input, version: int) -> SessionState:
    """The state that starts on ``given_input`` (nothing decoded yet); ``version``: the
    checkpoint file's. Refused in one line when it is empty or does not encode."""
    kind = input_of(ckpt)
    if kind is not CLIP and not str(given_input or "").strip():
        raise InputError(kind.empty)
    source = kind.encode(ckpt, given_input)
    dec = ckpt.decoding  # where an output ends: the checkpoint's one Decoding value
    return fresh(state, source, version, dec.eos_id, tuple(dec.end_ids))


def fresh(
    state: SessionState, source: Source, version: int, eos_id: int, end_ids: tuple[int, ...] = ()
) -> SessionState:
    """``state`` on ``source``: a new decode (its ``epoch``), nothing decoded, nothing forced,
    nothing on the page yet — the one place a fresh state is built."""
    return dataclasses.replace(
        state, sid=state.sid or uuid.uuid4().hex, text=source.text, audio=source.audio,
        src_ids=source.ids, src_pieces=source.pieces, unknown=source.unknown, tokens=[], step=0,
        max_steps=source.limit, version=version, epoch=state.epoch + 1, page_rows=-1,
        eos_id=eos_id, end_ids=end_ids, forced=[],
    )  # fmt: skip


def cleared(state: SessionState, text: str | None) -> SessionState:
    """A refused new input: nothing of the previous input stays on screen."""
    if text is None or text == state.text:
        return state
    empty = Source(text or "", [], [], limit=state.max_steps)
    kept = fresh(state, empty, state.version, state.eos_id, state.end_ids)
    return dataclasses.replace(kept, sid=state.sid)
