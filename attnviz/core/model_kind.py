"""The three kinds of model and the questions asked of a kind, answered once.

A kind (``ModelConfig.arch``) is one of :data:`ARCHS`; everything else asks
:class:`ModelKind`'s properties (``cfg.has_encoder``, ``cfg.decoder_only``, ...) rather
than comparing the string.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Model kinds -> ``(has an encoder stack, has a decoder stack)``: both stacks; one decoder
#: stack without cross-attention (GPT-2, Llama); one encoder stack with a language-model head
#: over its output (BERT).
STACKS: dict[str, tuple[bool, bool]] = {
    "encoder-decoder": (True, True),
    "decoder-only": (False, True),
    "encoder-only": (True, False),
}
ARCHS = tuple(STACKS)


class ModelKind:
    """What a kind of model has, asked of anything that holds an ``arch`` (one of
    :data:`ARCHS`): a :class:`~attnviz.core.config.ModelConfig`, a Hugging Face family."""

    arch: str

    @property
    def has_encoder(self) -> bool:
        """The model has an encoder stack (encoder-decoder, encoder-only)."""
        return STACKS[self.arch][0]

    @property
    def has_decoder(self) -> bool:
        """The model has a decoder stack (encoder-decoder, decoder-only)."""
        return STACKS[self.arch][1]

    @property
    def has_cross(self) -> bool:
        """Both stacks, joined by cross-attention (encoder-decoder)."""
        return self.has_encoder and self.has_decoder

    @property
    def decoder_only(self) -> bool:
        """One decoder stack: the prompt and the output are one sequence (GPT-2, Llama)."""
        return not self.has_encoder

    @property
    def encoder_only(self) -> bool:
        """One encoder stack read once; nothing is generated (BERT)."""
        return not self.has_decoder


@dataclass(frozen=True)
class Kind(ModelKind):
    """A kind on its own, for a bare ``arch`` string (a training option)."""

    arch: str = "encoder-decoder"

    def __post_init__(self) -> None:
        if self.arch not in STACKS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
