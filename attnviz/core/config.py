"""ModelConfig: every hyper-parameter of a Transformer, saved inside every checkpoint."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, shorten
from .memory import check_size
from .model_kind import ARCHS, ModelKind
from .sizes import model_sizes

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "silu")
#: Positional encodings: the paper's interleaved sinusoids; sin-half/cos-half sinusoids (Marian,
#: Pegasus); fairseq's sinusoids (FSMT); a learned table per stack (BART, mBART); none, with a
#: relative position bias added to the self-attention scores instead (T5).
#: Whisper's encoder sinusoids: sin-half/cos-half at rates exp(-log(10000) * i / (D / 2 - 1)).
#: rotary: no table, queries and keys rotated by position in every self-attention (Llama).
POSITIONS = (
    "sinusoidal", "sinusoidal_split", "fairseq", "learned", "relative", "whisper", "rotary",
)  # fmt: skip
#: What the encoder reads: token ids, or log-mel features through a convolutional front-end.
SOURCES = ("text", "audio")
NORMS = ("layer", "rms")
#: Rotary frequency scalings: none, Llama 3's per-frequency rescaling, plain interpolation.
ROPE_SCALINGS = ("none", "llama3", "linear")
#: Most layers a stack may have (the deepest published encoder-decoders have a few hundred).
MAX_LAYERS = 1024
BOOL_FIELDS = (
    "norm_first", "final_norm", "share_embeddings", "tie_output", "gated_ff", "scale_embeddings",
    "embed_norm", "bias", "scale_attention", "output_bias", "scale_decoder_output",
    "head_transform", "attn_only", "qk_norm", "sandwich_norm", "embed_scale_in_dtype", "lm_head",
)  # fmt: skip
#: What each decoder layer's self-attention sees: every earlier key, or a sliding window.
LAYER_TYPES = ("full_attention", "sliding_attention")


def _show(value: Any) -> str:
    """A value from a config file as a message shows it: ``repr``, cut to a sane length."""
    return shorten(repr(value))


def is_real(value: Any) -> bool:
    """A finite int or float (not a bool, not a string): a number read from a file or an option."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_int(value: Any) -> bool:
    """An int (not a bool, not a float, not a string)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ModelConfig(ModelKind):
    """Shape and behaviour of a Transformer: encoder-decoder, decoder-only or encoder-only.

    Args:
        src_vocab_size: number of source token ids.
        tgt_vocab_size: number of target token ids.
        d_model: width D of the residual stream.
        n_heads: attention heads H; must divide ``d_model`` unless ``d_head`` is given.
        n_encoder_layers / n_decoder_layers: depth of each stack (may differ).
        d_ff: hidden width of the position-wise feed-forward block.
        dropout: dropout on embeddings, attention weights, sublayer outputs and the FFN.
        activation: one of :data:`ACTIVATIONS`: ``"relu"``, ``"gelu"`` (exact erf form, as
            ``torch.nn``), ``"gelu_tanh"`` (``F.gelu(approximate="tanh")``), ``"gelu_new"`` and
            ``"gelu_fast"`` (the tanh GELU as transformers writes it out), ``"silu"``.
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
        end_ids: further ids that end a sequence as ``eos_id`` does (a generation config that
            lists several end ids, as Llama 3's does): every decoder given the model's
            ``eos_id`` stops at any of them (:func:`attnviz.decode.greedy.end_ids`).
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
        source: ``"text"`` (the encoder embeds source ids) or ``"audio"`` (Whisper: the encoder
            reads log-mel features ``[B, n_mels, 2 * max_source_len]`` through two Conv1d of
            kernel 3, the second of stride 2, each followed by GELU; there is no source
            embedding table and ``src_vocab_size`` is not used).
        n_mels: mel bins of the audio features (``source="audio"`` only).
        encoder_positions: the encoder's own position kind when it differs from the decoder's
            (Whisper: fixed ``"whisper"`` sinusoids in the encoder, a learned table in the
            decoder); None = ``positions`` for both stacks.
        max_source_len: positions the encoder covers when they differ from ``max_len``
            (Whisper: 1500 audio frames, 448 text positions); None = ``max_len``.

        The kind of model and the parts decoder-only and encoder-only families bring:

        arch: one of :data:`ARCHS`. ``"decoder-only"`` has one decoder stack without
            cross-attention (records ``"decoder_self"`` only; ``n_encoder_layers`` unused);
            ``"encoder-only"`` one encoder stack whose output goes through the output
            projection (records ``"encoder_self"`` only; ``n_decoder_layers`` unused). Both
            use one vocabulary (``src_vocab_size == tgt_vocab_size``).
        n_kv_heads: key/value heads of grouped-query attention (each serves
            ``n_heads / n_kv_heads`` query heads); None = ``n_heads``. Self-attention only.
        qkv_bias: biases on the query/key/value projections alone (Qwen2); None = ``bias``.
        rotary_dim: leading dims of each head that ``positions="rotary"`` rotates (partial
            rotary, GPT-NeoX); None = all of Dh. Even.
        rope_theta: base of the rotary frequencies.
        rope_scaling: one of :data:`ROPE_SCALINGS`; ``"llama3"`` rescales low frequencies by
            ``rope_factor`` with a smooth band between ``rope_low_freq_factor`` and
            ``rope_high_freq_factor`` of ``rope_original_max_len``; ``"linear"`` divides
            every position by ``rope_factor``.
        type_vocab_size: rows of a token-type (segment) embedding added to the encoder's
            input (BERT); 0 = none.
        head_transform: a dense layer, the activation and a norm between the last encoder
            layer and the output projection (BERT's masked-LM head).
        lm_head: the model has an output projection it was trained with; False = a base
            encoder (BertModel, a sentence embedder): ``model(ids)`` is refused, ``encode``
            gives its states.
        attn_only: layers without feed-forward blocks (attention and residual stream only,
            as in the two-layer models where induction heads were described); ``d_ff``,
            ``activation`` and ``gated_ff`` are unused.

        Sliding windows and Gemma 3's parts (decoder-only models; defaults change nothing):

        sliding_window: the window W of local layers: a query at position ``i`` may not
            attend to keys ``j`` with ``i - j >= W`` (W keys, itself included), a mask of its
            own beside the causal one (:func:`attnviz.core.masks.sliding_window_mask`).
            None = no window.
        layer_types: per decoder layer, ``"sliding_attention"`` or ``"full_attention"``
            (:data:`LAYER_TYPES`); None = every layer local when ``sliding_window`` is set.
        rope_local_theta: rotary base of the sliding layers, unscaled (Gemma 3: 10,000 beside
            ``rope_theta`` 1,000,000 and its scaling on the full layers); None = one base.
        qk_norm: an RMSNorm over Dh on each head's queries and keys, before rotary.
        sandwich_norm: a norm on each sublayer's output too, before the residual add
            (Gemma: ``x + norm(attn(norm(x)))``); needs ``norm_first``.
        norm_offset: RMSNorms scale by ``norm_offset + weight``, in float32 before casting
            back (Gemma's ``1 + weight``: 1.0); 0 = T5's ``weight * norm(x)``.
        query_pre_attn_scalar: scores are scaled by ``query_pre_attn_scalar ** -0.5`` instead
            of ``Dh ** -0.5`` (Gemma 3); None = Dh.
        embed_scale_in_dtype: the sqrt(D) embedding scale is rounded to the table's dtype
            before it multiplies (Gemma: 55.4256 becomes 55.5 in bfloat16).
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
    end_ids: tuple[int, ...] = ()
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
    source: str = "text"
    n_mels: int = 80
    encoder_positions: str | None = None
    max_source_len: int | None = None
    # -- model kinds, and the parts decoder-only / encoder-only families bring -------------
    arch: str = "encoder-decoder"
    n_kv_heads: int | None = None
    qkv_bias: bool | None = None
    rotary_dim: int | None = None
    rope_theta: float = 10000.0
    rope_scaling: str = "none"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_len: int = 8192
    type_vocab_size: int = 0
    head_transform: bool = False
    attn_only: bool = False
    lm_head: bool = True
    # -- sliding windows and Gemma 3 -------------------------------------------------------
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    rope_local_theta: float | None = None
    qk_norm: bool = False
    sandwich_norm: bool = False
    norm_offset: float = 0.0
    query_pre_attn_scalar: float | None = None
    embed_scale_in_dtype: bool = False

    def __post_init__(self) -> None:
        self._check_types()
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model} "
                f"(try n_heads in {[h for h in range(1, 17) if self.d_model % h == 0]})"
            )
        if self.reads_audio and self.share_embeddings:
            raise ConfigError(
                "share_embeddings needs a text source; an audio model has no source table"
            )
        self._check_kind()
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            value = getattr(self, name)
            if value >= min(self.src_vocab_size, self.tgt_vocab_size):
                raise ConfigError(f"{name}={value} is outside the vocabularies")
        if any(i >= self.tgt_vocab_size for i in self.end_ids):
            raise ConfigError(f"end_ids {list(self.end_ids)} reach outside the vocabulary")
        # the start id may equal the end id (BART, FSMT); an audio model's pad id pads only
        # targets, and Whisper pads them with its end id; a decoder-only model may pad with its
        # end id (GPT-2 has no pad token): its prompts are never padded by id; an encoder-only
        # model decodes nothing
        if self.eos_id == self.pad_id and self.has_cross and not self.reads_audio:
            raise ConfigError(f"eos_id={self.eos_id} must differ from pad_id")
        check_size(self)

    def _check_types(self) -> None:
        """Every field of the right type and in its range (JSON can hold anything)."""

        def integer(name: str, low: int, high: int | None = None) -> None:
            value = getattr(self, name)
            if not is_int(value):
                raise ConfigError(f"{name} must be an integer, got {_show(value)}")
            if value < low:
                what = "a positive integer" if low == 1 else f"at least {low}"
                raise ConfigError(f"{name} must be {what}, got {value}")
            if high is not None and value > high:
                raise ConfigError(f"{name} must be at most {high}, got {value}")

        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            integer(name, 1)
        for name in ("n_encoder_layers", "n_decoder_layers"):  # a kind's absent stack: 0
            integer(name, 0, MAX_LAYERS)
        for name in ("relative_buckets", "relative_max_distance"):
            integer(name, 1)
        for name in ("position_offset", "pad_id", "bos_id", "eos_id", "unk_id"):
            integer(name, 0)
        ends = self.end_ids
        if isinstance(ends, list):  # from JSON: kept as a tuple (the config is hashable)
            object.__setattr__(self, "end_ids", ends := tuple(ends))
        if (
            not isinstance(ends, tuple)
            or len(ends) > 64
            or not all(is_int(i) and i >= 0 for i in ends)
        ):
            raise ConfigError(f"end_ids must be a list of at most 64 ids, got {_show(ends)}")
        if self.d_head is not None:
            integer("d_head", 1)
        integer("n_mels", 1)
        if self.max_source_len is not None:
            integer("max_source_len", 1)
        for name in ("n_kv_heads", "rotary_dim"):
            if getattr(self, name) is not None:
                integer(name, 1)
        integer("type_vocab_size", 0)
        integer("rope_original_max_len", 1)
        if self.qkv_bias is not None and not isinstance(self.qkv_bias, bool):
            raise ConfigError(f"qkv_bias must be true, false or null, got {_show(self.qkv_bias)}")
        for name in BOOL_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be true or false, got {_show(value)}")
        for name, allowed in (
            ("activation", ACTIVATIONS),
            ("positions", POSITIONS),
            ("norm", NORMS),
            ("source", SOURCES),
            ("arch", ARCHS),
            ("rope_scaling", ROPE_SCALINGS),
        ):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ConfigError(f"{name} must be one of {allowed}, got {_show(value)}")
        enc = self.encoder_positions
        if enc is not None and (not isinstance(enc, str) or enc not in POSITIONS):
            raise ConfigError(
                f"encoder_positions must be null or one of {POSITIONS}, got {_show(enc)}"
            )
        dropout, eps = self.dropout, self.layer_norm_eps
        if not is_real(dropout) or not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must be a number in [0, 1), got {_show(dropout)}")
        if not is_real(eps) or not 0.0 < eps < 1.0:
            raise ConfigError(f"layer_norm_eps must be a number in (0, 1), got {_show(eps)}")
        for name in ("rope_theta", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor"):
            value = getattr(self, name)
            if not is_real(value) or not value > 0:
                raise ConfigError(f"{name} must be a positive number, got {_show(value)}")
        if (
            self.rope_scaling == "llama3"
            and not self.rope_high_freq_factor > self.rope_low_freq_factor
        ):
            raise ConfigError(
                "rope_high_freq_factor must be above rope_low_freq_factor for llama3 scaling, "
                f"got {self.rope_high_freq_factor} and {self.rope_low_freq_factor}"
            )

    def _check_kind(self) -> None:
        """The kind's fields agree: stacks it has, one vocabulary, heads, rotary sizes."""
        if not self.has_cross and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"a {self.arch} model has one vocabulary: src_vocab_size={self.src_vocab_size} "
                f"and tgt_vocab_size={self.tgt_vocab_size} must be equal"
            )
        stacks = (("n_encoder_layers", self.has_encoder), ("n_decoder_layers", self.has_decoder))
        for name, used in stacks:
            if used and getattr(self, name) < 1:
                raise ConfigError(
                    f"{name} must be a positive integer for this {self.arch} model, "
                    f"got {getattr(self, name)}"
                )
        if self.n_heads % self.kv_heads:
            raise ConfigError(
                f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                "(each key/value head serves the same number of query heads)"
            )
        if self.rotary_dim is not None and (self.rotary_dim % 2 or self.rotary_dim > self.head_dim):
            raise ConfigError(
                f"rotary_dim={self.rotary_dim} must be even and at most the head width "
                f"{self.head_dim}"
            )
        if self.positions == "rotary" and self.has_encoder and self.has_decoder:
            raise ConfigError(
                "rotary positions are for decoder-only and encoder-only models here; an "
                "encoder-decoder uses sinusoidal, learned or relative positions"
            )
        if self.type_vocab_size and not self.has_encoder:
            raise ConfigError("type_vocab_size (token types) needs an encoder stack")
        self._check_local()

    def _check_local(self) -> None:
        """Sliding windows and Gemma 3's parts: types, ranges, and a decoder-only model."""
        window, types = self.sliding_window, self.layer_types
        if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                                   or window < 1):  # fmt: skip
            raise ConfigError(f"sliding_window must be a positive integer, got {_show(window)}")
        if isinstance(types, list):  # from JSON: kept as a tuple (the config is hashable)
            object.__setattr__(self, "layer_types", types := tuple(types))
        if types is not None and (
            not isinstance(types, tuple) or len(types) != self.n_decoder_layers
            or not all(isinstance(t, str) and t in LAYER_TYPES for t in types)
        ):  # fmt: skip
            raise ConfigError(
                f"layer_types must list one of {LAYER_TYPES} per decoder layer "
                f"({self.n_decoder_layers}), got {_show(types)}"
            )
        if types is not None and "sliding_attention" in types and window is None:
            raise ConfigError("layer_types names sliding layers but sliding_window is not set")
        for name in ("rope_local_theta", "query_pre_attn_scalar"):
            value = getattr(self, name)
            if value is not None and (not is_real(value) or not value > 0):
                raise ConfigError(f"{name} must be a positive number or null, got {_show(value)}")
        if not is_real(self.norm_offset) or abs(self.norm_offset) > 16:
            raise ConfigError(f"norm_offset must be a number, got {_show(self.norm_offset)}")
        used = [name for name, on in (
            ("sliding_window", window is not None), ("layer_types", types is not None),
            ("rope_local_theta", self.rope_local_theta is not None), ("qk_norm", self.qk_norm),
            ("sandwich_norm", self.sandwich_norm),
        ) if on]  # fmt: skip
        if used and not self.decoder_only:
            raise ConfigError(f"{', '.join(used)}: for decoder-only models only here")
        if self.sandwich_norm and not self.norm_first:
            raise ConfigError("sandwich_norm needs norm_first (a norm before each sublayer)")
        if self.sandwich_norm and self.attn_only:
            raise ConfigError("sandwich_norm needs the feed-forward blocks (attn_only is set)")

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of decoder layer ``layer``, None where it sees every key."""
        if self.sliding_window is None:
            return None
        if self.layer_types is not None and self.layer_types[layer] != "sliding_attention":
            return None
        return self.sliding_window

    @property
    def reads_audio(self) -> bool:
        """The encoder reads log-mel features, not token ids (Whisper)."""
        return self.source == "audio"

    @property
    def kv_heads(self) -> int:
        """Key/value heads of self-attention (``n_kv_heads``, else ``n_heads``)."""
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def rotary_width(self) -> int:
        """Dims of each head that rotary positions rotate (0 without rotary positions)."""
        if self.positions != "rotary":
            return 0
        return self.rotary_dim if self.rotary_dim is not None else self.head_dim - self.head_dim % 2

    @property
    def has_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    def sizes(self) -> dict[str, int]:
        """How many numbers each part of the model holds, from the config alone
        (:func:`attnviz.core.sizes.model_sizes`: ``{"embeddings", ..., "parameters",
        "buffers"}``)."""
        return model_sizes(self)

    def stack_positions(self, decoder: bool) -> tuple[str, int]:
        """``(position kind, positions covered)`` of the decoder or the encoder stack."""
        if decoder:
            return self.positions, self.max_len
        kind = self.positions if self.encoder_positions is None else self.encoder_positions
        return kind, self.max_len if self.max_source_len is None else self.max_source_len

    def fixed_tables(self) -> list[tuple[str, int]]:
        """The computed position tables the model holds as buffers, ``[(kind, length)]``: the
        decoder's (shared with the encoder when both are the same), then the encoder's own."""
        fixed = ("sinusoidal", "sinusoidal_split", "fairseq", "whisper")
        dec, enc = self.stack_positions(True), self.stack_positions(False)
        tables = [dec] if dec[0] in fixed else []
        if enc != dec and enc[0] in fixed:
            tables.append(enc)
        return tables

    @property
    def special_ids(self) -> dict[str, int]:
        """``{"pad": pad_id, "bos": bos_id, "eos": eos_id, "unk": unk_id}``."""
        return {"pad": self.pad_id, "bos": self.bos_id, "eos": self.eos_id, "unk": self.unk_id}

    @property
    def head_dim(self) -> int:
        """Width Dh of one attention head."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field (``end_ids`` a list, as JSON reads it back)."""
        types = None if self.layer_types is None else list(self.layer_types)
        return {**dataclasses.asdict(self), "end_ids": list(self.end_ids), "layer_types": types}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Rebuild from :meth:`to_dict` output; unknown keys are an error, not ignored."""
        if not isinstance(data, dict):
            raise ConfigError(f"model config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
            shown = ", ".join(shorten(k) for k in unknown[:4])
            raise ConfigError(f"unknown model config keys: {shown}{more}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required field is missing
            raise ConfigError(f"incomplete model config: {exc}") from None
