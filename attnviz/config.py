"""ModelConfig: every hyper-parameter of a Transformer, saved inside every checkpoint."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

ACTIVATIONS = ("relu", "gelu")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and behaviour of an encoder-decoder Transformer.

    Args:
        src_vocab_size: number of source token ids.
        tgt_vocab_size: number of target token ids.
        d_model: width D of the residual stream.
        n_heads: attention heads H; must divide ``d_model`` (head width Dh = D / H).
        n_encoder_layers / n_decoder_layers: depth of each stack (may differ).
        d_ff: hidden width of the position-wise feed-forward block.
        dropout: dropout on embeddings, attention weights, sublayer outputs and the FFN.
        activation: ``"relu"`` or ``"gelu"`` (exact erf form, as ``torch.nn``).
        norm_first: pre-norm residual blocks (``x + f(norm(x))``) instead of post-norm
            (``norm(x + f(x))``, the paper's and ``nn.Transformer``'s default).
        final_norm: a LayerNorm after each stack, as ``nn.Transformer`` has.
        share_embeddings: one embedding table for source and target (needs equal vocabularies).
        tie_output: the output projection reuses the target embedding matrix.
        max_len: longest sequence the positional encoding covers.
        pad_id: token id of padding (both vocabularies); padding masks are built from it.
        bos_id: the decoder start id: the first decoder input of every sequence. It may equal
            ``pad_id`` (T5, Marian); a start token is never treated as padding.
        eos_id: the end-of-sequence id; decoding stops when it is produced.
        unk_id: the id unknown characters or words map to.
        layer_norm_eps: epsilon of every LayerNorm.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    d_ff: int = 512
    dropout: float = 0.1
    activation: str = "relu"
    norm_first: bool = False
    final_norm: bool = False
    share_embeddings: bool = False
    tie_output: bool = False
    max_len: int = 256
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")

        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            positive(name)
        for name in ("n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model} "
                f"(try n_heads in {[h for h in range(1, 17) if self.d_model % h == 0]})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
            if not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ConfigError(f"{name}={value} is outside the vocabularies")
        if self.eos_id in (self.pad_id, self.bos_id):
            raise ConfigError(f"eos_id={self.eos_id} must differ from pad_id and bos_id")

    @property
    def special_ids(self) -> dict[str, int]:
        """``{"pad": pad_id, "bos": bos_id, "eos": eos_id, "unk": unk_id}``."""
        return {"pad": self.pad_id, "bos": self.bos_id, "eos": self.eos_id, "unk": self.unk_id}

    @property
    def head_dim(self) -> int:
        """Width Dh of one attention head."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Rebuild from :meth:`to_dict` output; unknown keys are an error, not ignored."""
        if not isinstance(data, dict):
            raise ConfigError(f"model config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model config keys: {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required field is missing
            raise ConfigError(f"incomplete model config: {exc}") from None
