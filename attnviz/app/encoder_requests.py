"""The page's requests for encoder self-attention it did not get with a Step: a long input's
other layers and heads, the model view's thumbnails, and the norms and rollout lenses of the
encoder, answered from the recorded pass the session holds (never a new one)."""

from __future__ import annotations

from ..analysis.words import word_index
from ..checkpoint import Checkpoint
from ..core.errors import AttnvizError, InputError
from ..core.record import Trace
from . import encoder_blocks, lenses, reading
from .decoders import DECODERS
from .kinds import is_encoder_only
from .state import SessionState, checkpoint_of, layer_number, warning
from .workers import remote


def _stopped(state: SessionState, *args, message: str, **kwargs) -> dict:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return {"enc": {"epoch": state.epoch, "error": message}}


@remote(_stopped)
def encoder_view(state: SessionState, want: str) -> dict:
    """``{"enc": ...}`` for the page: the encoder self-attention it asks for when it shows it
    (a long input's first Step carries only the layer and head shown then).

    Args:
        want: ``"<epoch> <layer> <head>"`` (head ``"H2"``, ``"mean"``, ``"all heads"``: see
            :func:`attnviz.app.encoder_blocks.encoder_block`) or ``"<epoch> thumbs"`` (the
            model view's downsampled thumbnails,
            :func:`attnviz.app.encoder_blocks.encoder_thumbs`), either after a lens name
            (``"<epoch> norms 1 H2"``, ``"<epoch> rollout thumbs"``: that lens,
            :mod:`attnviz.app.lenses`); ``epoch`` is the page's (``"sid:epoch"``): a request
            for an earlier decode gets nothing.
    Returns:
        ``{"enc": block}``, or ``{"enc": {"epoch", "error"}}`` for a request the page cannot
        be answered (another decode, a bad layer or head).
    """
    epoch = f"{state.sid}:{state.epoch}"
    try:
        page_epoch, _, what = str(want or "").strip().partition(" ")
        if not state.started or page_epoch != epoch:
            raise InputError("the page shows another decode: step again")
        ckpt = checkpoint_of(state)
        name, _, rest = what.partition(" ")
        if name in ("norms", "rollout"):  # a long input's encoder through another lens
            return {"enc": lenses.encoder_lens(state, ckpt, name, rest)}
        if is_encoder_only(ckpt):  # a long sentence: its one pass holds every layer
            return {"enc": _encoder_part(state, ckpt, reading.read(state, ckpt).trace, what)}
        with DECODERS.hold(state, ckpt, state.version) as stepper:
            return {"enc": _encoder_part(state, ckpt, stepper.encoder_trace, what)}
    except AttnvizError as exc:
        return {"enc": {"epoch": epoch, "error": warning(exc)}}


def _encoder_part(state: SessionState, ckpt: Checkpoint, encoder: Trace, what: str) -> dict:
    """``encoder_view``'s ``"thumbs[ words]"`` / ``"<layer> <head>"`` of a recorded encoder."""
    if what in ("thumbs", "thumbs words"):
        words = None
        if what == "thumbs words" and ckpt.src_tokenizer is not None:  # not audio
            words = word_index(state.src_pieces, ckpt.src_tokenizer.kind)
        return encoder_blocks.encoder_thumbs(state, encoder, words)
    layer, _, head = what.partition(" ")
    return encoder_blocks.encoder_block(state, encoder, layer_number(layer), head)
