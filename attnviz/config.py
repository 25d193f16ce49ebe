"""ModelConfig: every hyper-parameter of a Transformer, saved inside every checkpoint."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
#: Positional encodings: the paper's interleaved sinusoids; sin-half/cos-half sinusoids (Marian,
#: Pegasus); fairseq's sinusoids (FSMT); a learned table per stack (BART, mBART); none, with a
#: relative position bias added to the self-attention scores instead (T5).
POSITIONS = ("sinusoidal", "sinusoidal_split", "fairseq", "learned", "relative")
NORMS = ("layer", "rms")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and behaviour of an encoder-decoder Transformer.

    Args:
        src_vocab_size: number of source token ids.
        tgt_vocab_size: number of target token ids.
        d_model: width D of the residual stream.
        n_heads: attention heads H; must divide ``d_model`` unless ``d_head`` is given.
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
        layer_norm_eps: epsilon of every LayerNorm (or RMSNorm).
        d_head: head width Dh when it is not ``d_model / n_heads`` (T5: 6 heads x 64 with
            D = 512); None = ``d_model // n_heads``.
        gated_ff: gated feed-forward ``linear2(act(linear1(x)) * gate(x))`` (T5 v1.1).
        positions: one of :data:`POSITIONS`.
        position_offset: row of the position table for position 0 (BART/mBART tables start
            at row 2; fairseq's at ``pad_id + 1``).
        scale_embeddings: multiply token embeddings by sqrt(D) (off for T5, most BARTs).
        embed_norm: a LayerNorm on the embeddings (plus positions) of each stack (BART).
        norm: ``"layer"`` (LayerNorm) or ``"rms"`` (T5's RMSNorm: no mean, no bias).
        bias: biases in the attention and feed-forward linears (T5 has none).
        scale_attention: divide scores by sqrt(Dh); False = scale 1 (T5).
        output_bias: a bias on the output projection (``final_logits_bias`` of BART/Marian).
        scale_decoder_output: multiply the decoder output by D^-0.5 before the output
            projection (T5 v1.0 with its tied lm_head).
        relative_buckets / relative_max_distance: T5's relative position buckets.
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
    d_head: int | None = None
    gated_ff: bool = False
    positions: str = "sinusoidal"
    position_offset: int = 0
    scale_embeddings: bool = True
    embed_norm: bool = False
    norm: str = "layer"
    bias: bool = True
    scale_attention: bool = True
    output_bias: bool = True
    scale_decoder_output: bool = False
    relative_buckets: int = 32
    relative_max_distance: int = 128

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
        if self.d_head is not None:
            positive("d_head")
        elif self.d_model % self.n_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model} "
                f"(try n_heads in {[h for h in range(1, 17) if self.d_model % h == 0]})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.positions not in POSITIONS:
            raise ConfigError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if not isinstance(self.position_offset, int) or self.position_offset < 0:
            raise ConfigError(f"position_offset must be >= 0, got {self.position_offset!r}")
        if self.positions == "relative":
            positive("relative_buckets")
            positive("relative_max_distance")
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
        if self.eos_id == self.pad_id:  # the start id may equal the end id (BART, FSMT)
            raise ConfigError(f"eos_id={self.eos_id} must differ from pad_id")

    @property
    def special_ids(self) -> dict[str, int]:
        """``{"pad": pad_id, "bos": bos_id, "eos": eos_id, "unk": unk_id}``."""
        return {"pad": self.pad_id, "bos": self.bos_id, "eos": self.eos_id, "unk": self.unk_id}

    @property
    def head_dim(self) -> int:
        """Width Dh of one attention head."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

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
