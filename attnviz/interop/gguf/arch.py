"""The GGUF architectures attnviz opens, one data table each.

A GGUF file names its architecture in ``general.architecture`` and keeps its sizes under
``<arch>.*`` keys and its tensors under llama.cpp's names (``token_embd.weight``,
``blk.N.attn_q.weight``, ...). Each :class:`Arch` says how one architecture becomes what a
Hugging Face folder of its family holds, so the Hugging Face loader builds the model:

- ``keys``: ``<arch>.<key>`` -> a ``config.json`` key, with its kind (whole number or number)
  and whether the file must have it (as transformers' ``GGUF_CONFIG_MAPPING`` reads them);
- ``top`` / ``layer``: GGUF tensor name -> transformers' name (``{n}``: the block), with the
  change a tensor needs on the way, named in :data:`FIXES`:

  - ``unpermute_q`` / ``unpermute_k``: llama.cpp stores a Llama model's Q and K rows
    interleaved for its rotary layout (``convert_hf_to_gguf.py``'s ``permute``); undone per
    head, as transformers' ``LlamaTensorProcessor`` undoes it;
  - ``minus_one``: llama.cpp stores Gemma's RMSNorm weights as ``1 + w``; transformers
    (and our ``norm_offset``) hold ``w``;
  - ``transpose``: GPT-2's ``Conv1D`` matrices are ``[in, out]`` in transformers' folders and
    ``[out, in]`` in GGUF.

Adding an architecture is one :class:`Arch` and one line in :data:`ARCHS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True)
class Key:
    """One metadata key: ``<arch>.<gguf>`` -> ``config.json``'s ``hf``.

    Attributes:
        kind: ``int`` (a whole number, not a bool) or ``float`` (any number).
        required: a file without it is refused.
    """

    gguf: str
    hf: str
    kind: type = int
    required: bool = False


#: what transformers' GGUF path reads for every architecture here
COMMON_KEYS = (
    Key("block_count", "num_hidden_layers", required=True),
    Key("embedding_length", "hidden_size", required=True),
    Key("feed_forward_length", "intermediate_size", required=True),
    Key("attention.head_count", "num_attention_heads", required=True),
    Key("attention.head_count_kv", "num_key_value_heads"),
    Key("context_length", "max_position_embeddings"),
    Key("rope.freq_base", "rope_theta", float),
    Key("attention.layer_norm_rms_epsilon", "rms_norm_eps", float),
    Key("vocab_size", "vocab_size"),
)


@dataclass(frozen=True)
class Arch:
    """How one GGUF architecture maps onto a Hugging Face family.

    Attributes:
        name: ``general.architecture``.
        model_type: the Hugging Face family (:data:`~attnviz.interop.hf.registry.REGISTRY`).
        keys: metadata keys -> config.json keys.
        top: tensors outside the blocks, GGUF name -> ``(transformers' name, fix or None)``.
        layer: a block's tensors, GGUF suffix after ``blk.N.`` -> ``(name with {n}, fix)``.
        required: GGUF suffixes every block must hold (the rest are optional, e.g. biases).
        shapes: GGUF name (a block's without ``blk.N.``) -> its shape in sizes the metadata
            gives (:data:`SIZES`), checked before anything is read.
        settings: tensors that are settings, not weights, read into the config (Llama 3's
            rotary scaling as ``rope_freqs.weight``).
        defaults: config.json values the file does not carry (transformers' defaults for a
            GGUF file of this architecture).
    """

    name: str
    model_type: str
    keys: tuple[Key, ...]
    top: dict[str, tuple[str, str | None]]
    layer: dict[str, tuple[str, str | None]]
    required: tuple[str, ...]
    shapes: dict[str, tuple[str, ...]]
    defaults: dict = field(default_factory=dict)
    settings: tuple[str, ...] = ()


#: the sizes shapes are written in: D model width, F feed-forward width, Q query rows (heads x
#: head size), K key/value rows (key/value heads x head size), Dh head size, V vocabulary
#: (embedding rows), T learned positions, 3D GPT-2's joined q/k/v rows
SIZES = ("D", "F", "Q", "K", "Dh", "V", "T", "3D")

_LLAMA_SHAPES = {
    "token_embd.weight": ("V", "D"),
    "output_norm.weight": ("D",),
    "output.weight": ("V", "D"),
    "attn_norm.weight": ("D",),
    "attn_q.weight": ("Q", "D"),
    "attn_k.weight": ("K", "D"),
    "attn_v.weight": ("K", "D"),
    "attn_output.weight": ("D", "Q"),
    "ffn_norm.weight": ("D",),
    "ffn_gate.weight": ("F", "D"),
    "ffn_up.weight": ("F", "D"),
    "ffn_down.weight": ("D", "F"),
    "attn_q.bias": ("Q",),
    "attn_k.bias": ("K",),
    "attn_v.bias": ("K",),
}
_GEMMA3_SHAPES = {
    **_LLAMA_SHAPES,
    "attn_q_norm.weight": ("Dh",),
    "attn_k_norm.weight": ("Dh",),
    "post_attention_norm.weight": ("D",),
    "post_ffw_norm.weight": ("D",),
}
_GPT2_SHAPES = {
    "token_embd.weight": ("V", "D"),
    "position_embd.weight": ("T", "D"),
    "output_norm.weight": ("D",),
    "output_norm.bias": ("D",),
    "output.weight": ("V", "D"),
    "attn_norm.weight": ("D",),
    "attn_norm.bias": ("D",),
    "attn_qkv.weight": ("3D", "D"),
    "attn_qkv.bias": ("3D",),
    "attn_output.weight": ("D", "D"),
    "attn_output.bias": ("D",),
    "ffn_norm.weight": ("D",),
    "ffn_norm.bias": ("D",),
    "ffn_up.weight": ("F", "D"),
    "ffn_up.bias": ("F",),
    "ffn_down.weight": ("D", "F"),
    "ffn_down.bias": ("D",),
}


def _llama_layer(p: str = "model.layers.{n}.") -> dict[str, tuple[str, str | None]]:
    return {
        "attn_norm.weight": (f"{p}input_layernorm.weight", None),
        "attn_q.weight": (f"{p}self_attn.q_proj.weight", None),
        "attn_k.weight": (f"{p}self_attn.k_proj.weight", None),
        "attn_v.weight": (f"{p}self_attn.v_proj.weight", None),
        "attn_output.weight": (f"{p}self_attn.o_proj.weight", None),
        "ffn_norm.weight": (f"{p}post_attention_layernorm.weight", None),
        "ffn_gate.weight": (f"{p}mlp.gate_proj.weight", None),
        "ffn_up.weight": (f"{p}mlp.up_proj.weight", None),
        "ffn_down.weight": (f"{p}mlp.down_proj.weight", None),
    }


_LLAMA_TOP = {
    "token_embd.weight": ("model.embed_tokens.weight", None),
    "output_norm.weight": ("model.norm.weight", None),
    "output.weight": ("lm_head.weight", None),
}
_LLAMA_REQUIRED = tuple(_llama_layer())
_QKV_BIAS = {f"attn_{x}.bias": (f"model.layers.{{n}}.self_attn.{x}_proj.bias", None) for x in "qkv"}

LLAMA = Arch(
    name="llama",
    model_type="llama",
    keys=(*COMMON_KEYS, Key("rope.dimension_count", "head_dim")),
    top=_LLAMA_TOP,
    layer={
        **_llama_layer(),
        "attn_q.weight": ("model.layers.{n}.self_attn.q_proj.weight", "unpermute_q"),
        "attn_k.weight": ("model.layers.{n}.self_attn.k_proj.weight", "unpermute_k"),
    },
    required=_LLAMA_REQUIRED,
    shapes=_LLAMA_SHAPES,
    settings=("rope_freqs.weight",),
)

QWEN2 = Arch(
    name="qwen2",
    model_type="qwen2",
    keys=COMMON_KEYS,
    top=_LLAMA_TOP,
    layer={**_llama_layer(), **_QKV_BIAS},
    required=(*_LLAMA_REQUIRED, *_QKV_BIAS),
    shapes=_LLAMA_SHAPES,
)


def _gpt2_linear(gguf: str, hf: str, matrix_fix: str | None) -> dict:
    p = "transformer.h.{n}."
    return {
        f"{gguf}.weight": (f"{p}{hf}.weight", matrix_fix),
        f"{gguf}.bias": (f"{p}{hf}.bias", None),
    }


GPT2 = Arch(
    name="gpt2",
    model_type="gpt2",
    keys=(
        Key("block_count", "n_layer", required=True),
        Key("embedding_length", "n_embd", required=True),
        Key("feed_forward_length", "n_inner"),
        Key("attention.head_count", "n_head", required=True),
        Key("context_length", "n_positions", required=True),
        Key("attention.layer_norm_epsilon", "layer_norm_epsilon", float),
        Key("vocab_size", "vocab_size"),
    ),
    top={
        "token_embd.weight": ("transformer.wte.weight", None),
        "position_embd.weight": ("transformer.wpe.weight", None),
        "output_norm.weight": ("transformer.ln_f.weight", None),
        "output_norm.bias": ("transformer.ln_f.bias", None),
        "output.weight": ("lm_head.weight", None),
    },
    layer={
        **_gpt2_linear("attn_norm", "ln_1", None),
        **_gpt2_linear("attn_qkv", "attn.c_attn", "transpose"),
        **_gpt2_linear("attn_output", "attn.c_proj", "transpose"),
        **_gpt2_linear("ffn_norm", "ln_2", None),
        **_gpt2_linear("ffn_up", "mlp.c_fc", "transpose"),
        **_gpt2_linear("ffn_down", "mlp.c_proj", "transpose"),
    },
    required=tuple(
        f"{t}.{p}"
        for t in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down")
        for p in ("weight", "bias")
    ),
    shapes=_GPT2_SHAPES,
    defaults={"activation_function": "gelu_new"},
)


def _gemma3_layer() -> dict[str, tuple[str, str | None]]:
    p = "model.layers.{n}."
    layer = _llama_layer(p)
    layer.update(
        {
            "attn_norm.weight": (f"{p}input_layernorm.weight", "minus_one"),
            "attn_q_norm.weight": (f"{p}self_attn.q_norm.weight", "minus_one"),
            "attn_k_norm.weight": (f"{p}self_attn.k_norm.weight", "minus_one"),
            "post_attention_norm.weight": (f"{p}post_attention_layernorm.weight", "minus_one"),
            "ffn_norm.weight": (f"{p}pre_feedforward_layernorm.weight", "minus_one"),
            "post_ffw_norm.weight": (f"{p}post_feedforward_layernorm.weight", "minus_one"),
        }
    )
    return layer


GEMMA3 = Arch(
    name="gemma3",
    model_type="gemma3_text",
    keys=(
        *COMMON_KEYS,
        Key("attention.key_length", "head_dim"),
        Key("attention.sliding_window", "sliding_window"),
        Key("attention.sliding_window_pattern", "sliding_window_pattern"),
    ),
    top={
        "token_embd.weight": ("model.embed_tokens.weight", None),
        "output_norm.weight": ("model.norm.weight", "minus_one"),
        "output.weight": ("lm_head.weight", None),
    },
    layer=_gemma3_layer(),
    required=tuple(_gemma3_layer()),
    shapes=_GEMMA3_SHAPES,
)

#: ``general.architecture`` -> :class:`Arch`, the architectures attnviz opens.
ARCHS: dict[str, Arch] = {a.name: a for a in (LLAMA, QWEN2, GPT2, GEMMA3)}


# -- the changes a tensor needs ------------------------------------------------------------------
def unpermute(w: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's rotary permutation of Q or K rows: per head, the rows GGUF stores as
    ``(Dh / 2, 2)`` pairs go back to transformers' ``(2, Dh / 2)`` halves.

    Args:
        w: ``[n_heads * Dh, D]`` weight or ``[n_heads * Dh]`` bias, as GGUF stores it.
        n_heads: heads of this projection (query heads for Q, key/value heads for K).
    Returns:
        the same shape, rows in transformers' order.
    """
    half = w.shape[0] // n_heads // 2
    rest = w.shape[1:]
    # [H, Dh/2, 2, ...] -> [H, 2, Dh/2, ...] -> [H * Dh, ...]
    return w.reshape(n_heads, half, 2, *rest).transpose(1, 2).reshape(w.shape).contiguous()


FIXES: dict[str, Callable[[Tensor, dict], Tensor]] = {
    "unpermute_q": lambda w, hf: unpermute(w, hf["num_attention_heads"]),
    "unpermute_k": lambda w, hf: unpermute(
        w, hf.get("num_key_value_heads", hf["num_attention_heads"])
    ),
    "minus_one": lambda w, hf: w.sub_(1.0),
    "transpose": lambda w, hf: w.t().contiguous(),
}
