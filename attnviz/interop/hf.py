"""Open Hugging Face encoder-decoder folders in attnviz's own :class:`~attnviz.Transformer`.

A folder written by ``save_pretrained`` (or downloaded with ``huggingface-cli``) holds
``config.json``, ``model.safetensors`` (or shards listed in ``model.safetensors.index.json``),
usually ``generation_config.json`` and tokenizer files. The model is rebuilt from
``config.json`` and the safetensors alone (no ``transformers`` import, nothing unpickled);
the tokenizer, when the folder has one, comes from ``transformers`` (the ``hf`` extra).

Families (``model_type``): ``marian``, ``bart``, ``mbart``, ``pegasus``, ``fsmt``, ``t5``
(v1.0 and v1.1 / Flan-T5). Their differences are :class:`~attnviz.ModelConfig` fields:
positions, norms, biases, embedding scale, attention scale, gated feed-forward, logits bias.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..config import ModelConfig
from ..decoding import LogitRules
from ..errors import AttnvizError, CheckpointError, InteropError
from ..model import Transformer

SUPPORTED_MODEL_TYPES = ("marian", "bart", "mbart", "pegasus", "fsmt", "t5")
_BART_LIKE = ("marian", "bart", "mbart", "pegasus", "fsmt")
_INDEX = "model.safetensors.index.json"
_WEIGHTS = "model.safetensors"
# transformers' activation names -> ours
_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}
# The decoder start id when a folder names none: the pad id (Marian, Pegasus, T5), or the
# end id (BART, mBART, FSMT start decoding from </s>).
_START_IS_PAD = ("marian", "pegasus", "t5")
# Each family's pad, end and unknown ids, where config.json leaves them out (transformers'
# defaults); a tokenizer in the folder overrides the unknown id.
_PAD = {"bart": 1, "mbart": 1, "pegasus": 0, "fsmt": 1, "t5": 0}
_EOS = {"marian": 0, "bart": 2, "mbart": 2, "pegasus": 1, "fsmt": 2, "t5": 1}
_UNK = {"marian": 1, "bart": 3, "mbart": 3, "pegasus": 2, "fsmt": 3, "t5": 2}
_CONVERT = (
    'python -c "from transformers import AutoModelForSeq2SeqLM as M; '
    "M.from_pretrained('{0}').save_pretrained('{0}', safe_serialization=True)\""
)


# -- the folder --------------------------------------------------------------------------------
def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def is_hf_folder(path: str | Path) -> bool:
    """True for a folder whose ``config.json`` names a transformers ``model_type``."""
    folder = Path(path).expanduser()
    config = folder / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and "model_type" in data and "config" not in data


def read_hf_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of a supported family, or one line saying why not."""
    folder = Path(folder).expanduser()
    hf = _read_json(folder / "config.json")
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise InteropError(
            f"{folder}: model_type {model_type!r} is not supported; attnviz opens "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if "auto_map" in hf:
        raise InteropError(
            f"{folder}: config.json asks for custom code (auto_map); attnviz never runs code "
            "from a model folder"
        )
    return hf


def read_hf_weights(folder: str | Path) -> dict[str, Tensor]:
    """All tensors of ``model.safetensors`` or of the shards its index lists; never a pickle."""
    from ..checkpoint import read_tensors

    folder = Path(folder).expanduser()
    if (folder / _WEIGHTS).is_file():
        return read_tensors(folder / _WEIGHTS)[0]
    if (folder / _INDEX).is_file():
        weight_map = _read_json(folder / _INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{folder / _INDEX} has no 'weight_map'")
        tensors: dict[str, Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not isinstance(shard, str) or Path(shard).name != shard:
                raise CheckpointError(f"{folder / _INDEX} names a shard outside the folder")
            tensors.update(read_tensors(folder / shard)[0])
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise CheckpointError(f"{folder}: shards lack {', '.join(missing[:4])}")
        return tensors
    pickles = sorted(p.name for p in folder.glob("*.bin")) + sorted(
        p.name for p in folder.glob("*.pt*")
    )
    if pickles:
        raise CheckpointError(
            f"{folder} holds only {pickles[0]} (a pickle); attnviz reads safetensors only. "
            f"Convert it where you trust it: {_CONVERT.format(folder)}"
        )
    raise CheckpointError(f"{folder}: no {_WEIGHTS} (or {_INDEX}) next to config.json")


def read_generation_config(folder: str | Path, hf: dict) -> dict[str, Any]:
    """Generation settings: ``generation_config.json``, or, only where a folder has none, those
    older folders keep in ``config.json`` (transformers reads one or the other, never both:
    FSMT's config.json says ``max_length: 200`` beside a generation config without it)."""
    keys = (
        "bad_words_ids", "forced_bos_token_id", "forced_eos_token_id", "max_length",
        "max_new_tokens", "min_length", "min_new_tokens", "suppress_tokens",
        "begin_suppress_tokens", "decoder_start_token_id", "eos_token_id", "pad_token_id",
        "no_repeat_ngram_size", "repetition_penalty", "num_beams",
    )  # fmt: skip
    path = Path(folder).expanduser() / "generation_config.json"
    if path.is_file():
        return {k: v for k, v in _read_json(path).items() if v is not None}
    return {k: hf[k] for k in keys if hf.get(k) is not None}


# -- config -----------------------------------------------------------------------------------
def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _int(hf: dict, key: str, where: Path) -> int:
    value = hf.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InteropError(f"{where}/config.json: {key} must be an integer, got {value!r}")
    return value


def _opt_int(hf: dict, key: str, default: int, where: Path) -> int:
    """An optional whole-number setting of config.json (``default`` when absent or null)."""
    if hf.get(key) is None:
        return default
    return _int(hf, key, where)


def _opt_float(hf: dict, key: str, default: float, where: Path) -> float:
    value = hf.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InteropError(f"{where}/config.json: {key} must be a positive number, got {value!r}")
    return float(value)


def _activation(name: Any, where: Path) -> str:
    if not isinstance(name, str) or name not in _ACTIVATIONS:
        raise InteropError(
            f"{where}: activation {name!r} is not supported (supported: {sorted(_ACTIVATIONS)})"
        )
    return _ACTIVATIONS[name]


def special_ids(hf: dict, gen: dict, unk_id: int | None = None) -> dict[str, int]:
    """Pad, decoder-start, end and unknown ids of a folder (generation config first)."""
    family = hf["model_type"]
    pad = gen.get("pad_token_id", hf.get("pad_token_id", _PAD.get(family)))
    eos = _first(gen.get("eos_token_id", hf.get("eos_token_id", _EOS[family])))
    start = gen.get("decoder_start_token_id", hf.get("decoder_start_token_id"))
    if start is None:
        start = pad if family in _START_IS_PAD else eos
    unk = _UNK[family] if unk_id is None else unk_id
    return {"pad_id": pad, "bos_id": _first(start), "eos_id": eos, "unk_id": unk}


def _bart_like_config(hf: dict, where: Path, logits_bias: bool) -> dict[str, Any]:
    family = hf["model_type"]
    heads = _int(hf, "encoder_attention_heads", where)
    d_ff = _int(hf, "encoder_ffn_dim", where)
    for key, value in (("decoder_attention_heads", heads), ("decoder_ffn_dim", d_ff)):
        if hf.get(key, value) != value:
            raise InteropError(
                f"{where}: {key}={hf[key]} differs from the encoder's {value}; attnviz models "
                "use one head count and one feed-forward width"
            )
    pre_norm = family in ("mbart", "pegasus")
    positions = {"marian": "sinusoidal_split", "pegasus": "sinusoidal_split", "fsmt": "fairseq"}
    return dict(
        d_model=_int(hf, "d_model", where),
        n_heads=heads,
        n_encoder_layers=_int(hf, "encoder_layers", where),
        n_decoder_layers=_int(hf, "decoder_layers", where),
        d_ff=d_ff,
        activation=_activation(hf.get("activation_function", "gelu"), where),
        norm_first=pre_norm,
        final_norm=pre_norm,
        embed_norm=family in ("bart", "mbart"),
        positions=positions.get(family, "learned"),
        position_offset=2 if family in ("bart", "mbart") else 0,
        scale_embeddings=bool(hf.get("scale_embedding", family == "fsmt")),
        max_len=_int(hf, "max_position_embeddings", where),
        output_bias=logits_bias,
    )


def _t5_config(hf: dict, where: Path) -> dict[str, Any]:
    proj = str(hf.get("feed_forward_proj", "relu"))
    gated = proj.startswith("gated-")
    act = hf.get("dense_act_fn") or proj.split("-")[-1]
    if gated and act == "gelu" and "dense_act_fn" not in hf:
        act = "gelu_new"  # transformers reads "gated-gelu" as the tanh approximation
    n_layers = _int(hf, "num_layers", where)
    if "scale_decoder_outputs" in hf:  # transformers >= 5 writes it
        scale_out = bool(hf["scale_decoder_outputs"])
    else:  # 4.x: T5 v1.1 folders say tie_word_embeddings: false and carry their own lm_head
        scale_out = hf.get("tie_word_embeddings", True) is not False
    return dict(
        d_model=_int(hf, "d_model", where),
        n_heads=_int(hf, "num_heads", where),
        d_head=_int(hf, "d_kv", where),
        n_encoder_layers=n_layers,
        n_decoder_layers=_opt_int(hf, "num_decoder_layers", n_layers, where) or n_layers,
        d_ff=_int(hf, "d_ff", where),
        activation=_activation(act, where),
        gated_ff=gated,
        norm_first=True,
        final_norm=True,
        norm="rms",
        layer_norm_eps=_opt_float(hf, "layer_norm_epsilon", 1e-6, where),
        bias=False,
        scale_attention=False,
        positions="relative",
        relative_buckets=_opt_int(hf, "relative_attention_num_buckets", 32, where),
        relative_max_distance=_opt_int(hf, "relative_attention_max_distance", 128, where),
        scale_embeddings=False,
        output_bias=False,
        scale_decoder_output=scale_out,
        max_len=max(_opt_int(hf, "n_positions", 0, where), 1024),  # relative: no hard limit
    )


# -- weights ----------------------------------------------------------------------------------
class _Source:
    """The folder's tensors, taken one by one so that leftovers can be named."""

    def __init__(self, tensors: dict[str, Tensor], where: Path):
        self.tensors, self.where, self.used = tensors, where, set()

    def has(self, key: str) -> bool:
        return key in self.tensors

    def take(self, key: str) -> Tensor:
        if key not in self.tensors:
            raise InteropError(f"{self.where}: the weights lack {key}")
        self.used.add(key)
        return self.tensors[key]

    def first(self, *keys: str) -> tuple[str, Tensor] | None:
        for key in keys:
            if key in self.tensors:
                return key, self.take(key)
        return None

    def leftovers(self, ignore: tuple[str, ...] = ()) -> list[str]:
        return sorted(
            k for k in self.tensors if k not in self.used and not any(s in k for s in ignore)
        )


def _embeddings(src: _Source, prefix: str, lm_keys: tuple[str, ...]) -> dict[str, Any]:
    """Source/target tables and the output matrix, and which of them are one tensor."""
    shared = f"{prefix}shared.weight"
    enc = src.first(f"{prefix}encoder.embed_tokens.weight", shared)
    dec = src.first(f"{prefix}decoder.embed_tokens.weight", shared)
    if enc is None or dec is None:
        raise InteropError(f"{src.where}: no token embeddings ({shared} or embed_tokens)")
    if src.has(shared):
        src.take(shared)
    lm = src.first(*lm_keys)
    same = enc[1].shape == dec[1].shape and torch.equal(enc[1], dec[1])
    tied = lm is None or (lm[1].shape == dec[1].shape and torch.equal(lm[1], dec[1]))
    return {
        "src": enc[1],
        "tgt": dec[1],
        "lm": None if tied else lm[1],
        "share_embeddings": same,
        "tie_output": tied,
    }


def _attention(src: _Source, hf_prefix: str, ours: str, names: tuple[str, ...]) -> dict:
    """q/k/v/out linears -> ``in_proj_weight`` (``[3 * H * Dh, D]``), ``out_proj``."""
    q, k, v, o = (f"{hf_prefix}{n}" for n in names)
    out = {
        f"{ours}in_proj_weight": torch.cat(
            [src.take(f"{q}.weight"), src.take(f"{k}.weight"), src.take(f"{v}.weight")]
        ),
        f"{ours}out_proj.weight": src.take(f"{o}.weight"),
    }
    if src.has(f"{q}.bias"):
        out[f"{ours}in_proj_bias"] = torch.cat(
            [src.take(f"{q}.bias"), src.take(f"{k}.bias"), src.take(f"{v}.bias")]
        )
        out[f"{ours}out_proj.bias"] = src.take(f"{o}.bias")
    return out


def _linear(src: _Source, hf_name: str, ours: str) -> dict:
    out = {f"{ours}.weight": src.take(f"{hf_name}.weight")}
    if src.has(f"{hf_name}.bias"):
        out[f"{ours}.bias"] = src.take(f"{hf_name}.bias")
    return out


def _bart_like_weights(src: _Source, cfg: ModelConfig) -> dict[str, Tensor]:
    qkvo = ("q_proj", "k_proj", "v_proj", "out_proj")
    ours: dict[str, Tensor] = {}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        hf_stack = f"model.{stack}."
        for i in range(n):
            p, o = f"{hf_stack}layers.{i}.", f"{stack}.layers.{i}."
            ours |= _attention(src, f"{p}self_attn.", f"{o}self_attn.", qkvo)
            ours |= _linear(src, f"{p}self_attn_layer_norm", f"{o}norm1")
            if stack == "decoder":
                ours |= _attention(src, f"{p}encoder_attn.", f"{o}cross_attn.", qkvo)
                ours |= _linear(src, f"{p}encoder_attn_layer_norm", f"{o}norm2")
            ours |= _linear(src, f"{p}fc1", f"{o}ff.linear1")
            ours |= _linear(src, f"{p}fc2", f"{o}ff.linear2")
            last = "norm3" if stack == "decoder" else "norm2"
            ours |= _linear(src, f"{p}final_layer_norm", f"{o}{last}")
        if cfg.embed_norm:
            ours |= _linear(src, f"{hf_stack}layernorm_embedding", f"{stack}.embed_norm")
        if cfg.final_norm:
            ours |= _linear(src, f"{hf_stack}layer_norm", f"{stack}.norm")
        if cfg.positions == "learned":
            ours[f"{stack}.pos_embed.weight"] = src.take(f"{hf_stack}embed_positions.weight")
    if cfg.output_bias:
        ours["generator.bias"] = src.take("final_logits_bias").reshape(-1)
    return ours


def _t5_weights(src: _Source, cfg: ModelConfig) -> dict[str, Tensor]:
    qkvo = ("q", "k", "v", "o")
    ours: dict[str, Tensor] = {}
    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            p, o = f"{stack}.block.{i}.layer.", f"{stack}.layers.{i}."
            ours |= _attention(src, f"{p}0.SelfAttention.", f"{o}self_attn.", qkvo)
            ours |= _linear(src, f"{p}0.layer_norm", f"{o}norm1")
            ff = 1
            if stack == "decoder":
                ours |= _attention(src, f"{p}1.EncDecAttention.", f"{o}cross_attn.", qkvo)
                ours |= _linear(src, f"{p}1.layer_norm", f"{o}norm2")
                ff = 2
            dense = f"{p}{ff}.DenseReluDense."
            if cfg.gated_ff:
                ours |= _linear(src, f"{dense}wi_0", f"{o}ff.linear1")
                ours |= _linear(src, f"{dense}wi_1", f"{o}ff.gate")
            else:
                ours |= _linear(src, f"{dense}wi", f"{o}ff.linear1")
            ours |= _linear(src, f"{dense}wo", f"{o}ff.linear2")
            ours |= _linear(src, f"{p}{ff}.layer_norm", f"{o}norm{ff + 1}")
        ours |= _linear(src, f"{stack}.final_layer_norm", f"{stack}.norm")
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ours[f"{stack}.position_bias.embedding.weight"] = src.take(bias)
    return ours


def convert(
    hf: dict, tensors: dict[str, Tensor], where: Path, ids: dict[str, int]
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """A folder's config and tensors -> our :class:`ModelConfig` and state dict (tied
    tensors once, as :func:`attnviz.checkpoint.unique_state_dict` names them)."""
    family = hf["model_type"]
    src = _Source(tensors, where)
    if family == "t5":
        emb = _embeddings(src, "", ("lm_head.weight",))
        fields = _t5_config(hf, where)
        ignore: tuple[str, ...] = ()
    else:
        lm_keys = ("lm_head.weight", "model.decoder.output_projection.weight")
        emb = _embeddings(src, "model.", lm_keys)
        fields = _bart_like_config(hf, where, "final_logits_bias" in tensors)
        ignore = ("embed_positions",) if fields["positions"] != "learned" else ()
    if family == "fsmt":
        fields["position_offset"] = ids["pad_id"] + 1
    try:
        cfg = ModelConfig(
            src_vocab_size=emb["src"].shape[0],
            tgt_vocab_size=emb["tgt"].shape[0],
            dropout=0.0,
            share_embeddings=emb["share_embeddings"],
            tie_output=emb["tie_output"],
            **ids,
            **fields,
        )
    except AttnvizError as exc:
        raise InteropError(
            f"{where}: config.json does not give a model attnviz can build: {exc}"
        ) from None
    ours = (_t5_weights if family == "t5" else _bart_like_weights)(src, cfg)
    ours["src_embed.weight"] = emb["src"]
    if not cfg.share_embeddings:
        ours["tgt_embed.weight"] = emb["tgt"]
    if not cfg.tie_output:
        ours["generator.weight"] = emb["lm"]
    left = src.leftovers(ignore)
    if left:
        more = f" and {len(left) - 4} more" if len(left) > 4 else ""
        raise InteropError(f"{where}: tensors attnviz does not know: {', '.join(left[:4])}{more}")
    return cfg, ours


#: transformers' ``GenerationConfig`` default ``max_length`` (it counts the decoder start).
DEFAULT_MAX_LENGTH = 20


def _gen_int(gen: dict, key: str, where: Path | None = None) -> int | None:
    """An integer generation setting, None when unset; anything else is refused in one line."""
    value = gen.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        place = f"{where}: " if where is not None else ""
        raise InteropError(
            f"{place}generation setting {key} must be a whole number >= 0, got {value!r}"
        )
    return value


def max_new_tokens(gen: dict, hf: dict | None = None, where: Path | None = None) -> int:
    """The most tokens ``generate()`` produces after the decoder start under ``gen``.

    ``max_new_tokens`` wins; else ``max_length``, which counts the start token. A folder that
    names neither gets transformers' default: ``max_length=20`` counted on top of the start
    token (20 new tokens), cut at ``max_position_embeddings`` where config.json has one.
    """
    new = _gen_int(gen, "max_new_tokens", where)
    if new is not None:
        return max(1, new)
    length = _gen_int(gen, "max_length", where)
    if length is not None:
        return max(1, length - 1)
    total = DEFAULT_MAX_LENGTH + 1  # the start token plus 20 new ones
    positions = (hf or {}).get("max_position_embeddings")
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0:
        total = min(total, positions)
    return max(1, total - 1)


def _token_ids(value: Any, key: str, vocab: int, where: Path | None) -> tuple[int, ...]:
    """A list of token ids (or one id) of the generation config, each inside the vocabulary."""
    items = value if isinstance(value, list) else [value]
    for i in items:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < vocab:
            place = f"{where}: " if where is not None else ""
            raise InteropError(
                f"{place}generation setting {key} must hold token ids in 0..{vocab - 1}, "
                f"got {str(value)[:80]}"
            )
    return tuple(items)


def check_generation(gen: dict, vocab: int, where: Path | None = None) -> None:
    """Every setting the rules read has the type transformers gives it; one line if not."""
    for key in ("max_length", "max_new_tokens", "min_length", "min_new_tokens"):
        _gen_int(gen, key, where)
    for key in ("suppress_tokens", "begin_suppress_tokens", "forced_bos_token_id",
                "forced_eos_token_id"):  # fmt: skip
        if gen.get(key) is not None:
            _token_ids(gen[key], key, vocab, where)
    bad = gen.get("bad_words_ids")
    if bad is not None:
        if not isinstance(bad, list) or not all(isinstance(w, list) and w for w in bad):
            raise InteropError(
                f"{where}: generation setting bad_words_ids must be a list of id lists, "
                f"got {str(bad)[:80]}"
            )
        for w in bad:
            _token_ids(w, "bad_words_ids", vocab, where)


def generation_rules(
    gen: dict, cfg: ModelConfig, hf: dict | None = None, where: Path | None = None
) -> tuple[LogitRules, int, list[str]]:
    """:class:`LogitRules`, the most new tokens (:func:`max_new_tokens`), and the settings
    greedy decoding ignores.

    Raises:
        InteropError: a setting of the wrong type, or a token id outside the vocabulary.
    """
    check_generation(gen, cfg.tgt_vocab_size, where)
    bad = gen.get("bad_words_ids") or []
    single = tuple(w[0] for w in bad if isinstance(w, list) and len(w) == 1)
    ignored = [f"bad_words_ids {w}" for w in bad if not (isinstance(w, list) and len(w) == 1)]
    for key in ("no_repeat_ngram_size", "repetition_penalty"):
        if gen.get(key) not in (None, 0, 1, 1.0):
            ignored.append(f"{key}={gen[key]}")
    forced_eos = gen.get("forced_eos_token_id")
    if isinstance(forced_eos, list):  # several: the argmax of equal scores is the lowest id
        forced_eos = min(forced_eos) if forced_eos else None
    # min_new_tokens takes precedence; min_length counts the start token
    min_new = _gen_int(gen, "min_new_tokens", where)
    if min_new is None:
        min_new = max((_gen_int(gen, "min_length", where) or 0) - 1, 0)
    rules = LogitRules(
        forced_bos_id=gen.get("forced_bos_token_id"),
        forced_eos_id=forced_eos,
        banned=single + tuple(gen.get("suppress_tokens") or ()),
        begin_banned=tuple(gen.get("begin_suppress_tokens") or ()),
        min_new_tokens=min_new,
        eos_id=cfg.eos_id,
    )
    return rules, max_new_tokens(gen, hf, where), ignored


# -- loading ----------------------------------------------------------------------------------
def load_hf_model(
    path: str | Path, device: str | torch.device = "cpu", unk_id: int | None = None
) -> Transformer:
    """The model of a Hugging Face folder as an eval-mode :class:`~attnviz.Transformer`.

    Raises:
        InteropError: unsupported ``model_type``, or weights that do not fit the config.
        CheckpointError: no safetensors (a ``.bin`` pickle is refused), unreadable files.
    """
    folder = Path(path).expanduser()
    hf = read_hf_config(folder)
    gen = read_generation_config(folder, hf)
    return _build(folder, hf, special_ids(hf, gen, unk_id), device)


def _build(
    folder: Path, hf: dict, ids: dict, device, tensors: dict[str, Tensor] | None = None
) -> Transformer:
    from ..checkpoint import _check_weights, _load_weights, unique_state_dict

    tensors = read_hf_weights(folder) if tensors is None else tensors
    cfg, ours = convert(hf, tensors, folder, ids)
    with torch.device("meta"):  # names and shapes before anything is allocated
        skeleton = Transformer(cfg)
    _check_weights(unique_state_dict(skeleton), ours, folder)
    model = Transformer(cfg)
    _load_weights(model, ours, folder)
    return model.to(device).eval()


def _vocab_rows(hf: dict, tensors: dict[str, Tensor], where: Path) -> tuple[int, int]:
    """Source and target vocabulary sizes, read from the embedding tables' shapes; a
    config.json whose vocab_size says otherwise is refused before anything is sized by it."""
    rows = {}
    for side, keys in (
        ("src", ("model.encoder.embed_tokens.weight", "encoder.embed_tokens.weight")),
        ("tgt", ("model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight")),
    ):
        for key in (*keys, "model.shared.weight", "shared.weight"):
            t = tensors.get(key)
            if t is not None and t.dim() == 2:
                rows[side] = int(t.shape[0])
                break
        else:
            raise InteropError(f"{where}: no token embeddings (shared.weight or embed_tokens)")
    for side, key in (("src", "src_vocab_size"), ("tgt", "tgt_vocab_size"), ("tgt", "vocab_size")):
        said = hf.get(key)
        if key == "vocab_size" and "tgt_vocab_size" in hf:
            continue  # FSMT names each side's
        if said is not None and said != rows[side]:
            raise InteropError(
                f"{where}: config.json says {key}={str(said)[:40]} but the weights have "
                f"{rows[side]} embedding rows"
            )
    return rows["src"], rows["tgt"]


def _check_tokenizer_specials(tokenizer, ids: dict[str, int], where: Path) -> None:
    """The tokenizer's end id must be the model's (as attnviz checkpoints are checked)."""
    tok_eos = tokenizer.tokenizer_eos_id
    if tok_eos is None or tok_eos == ids["eos_id"]:
        return
    what = ""
    if ids["eos_id"] == tokenizer.unk_id:
        what = " (the tokenizer's unknown token)"
    raise InteropError(
        f"{where}: config.json's eos_token_id {ids['eos_id']}{what} is not the tokenizer's end "
        f"token {tok_eos}; fix eos_token_id in config.json / generation_config.json"
    )


def load_hf_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """A Hugging Face folder as an :class:`attnviz.Checkpoint` (what ``load_checkpoint`` does
    with such a folder): the model, the folder's tokenizer (or None, with the reason in
    ``meta["tokenizer_missing"]``) and the generation rules ``predict`` follows."""
    from ..checkpoint import Checkpoint
    from .hf_tokenizer import IdTokenizer, load_hf_tokenizer

    folder = Path(path).expanduser()
    hf = read_hf_config(folder)
    tensors = read_hf_weights(folder)  # first: a pickle or no weights is the first thing to say
    gen = read_generation_config(folder, hf)
    ids = special_ids(hf, gen)
    for role, value in ids.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise InteropError(f"{folder}: no usable {role} in config.json ({value!r})")
    src_rows, tgt_rows = _vocab_rows(hf, tensors, folder)  # from the weights, never sized
    check_generation(gen, tgt_rows, folder)  # from config.json's vocab_size alone
    tokenizer, why = load_hf_tokenizer(folder, ids, tgt_rows, max(src_rows, tgt_rows))
    if tokenizer is not None:
        _check_tokenizer_specials(tokenizer, ids, folder)
        ids["unk_id"] = tokenizer.unk_id
    model = _build(folder, hf, ids, device, tensors)
    rules, max_new, ignored = generation_rules(gen, model.config, hf, folder)
    if tokenizer is None:  # ids in, ids out: every id shows as #<id>
        specials = model.config.special_ids
        src_tok = IdTokenizer(specials, src_rows, why)
        tgt_tok = IdTokenizer(specials, tgt_rows, why)
        tgt_tok.side = "target"
    else:
        src_tok, tgt_tok = tokenizer, tokenizer.for_target()
    meta = {
        "format": "huggingface",
        "model_type": hf["model_type"],
        "hf_config": hf,
        "generation_config": gen,
        "generation_ignored": ignored,
        "tokenizer_missing": why,
    }
    return Checkpoint(
        model,
        src_tok,
        tgt_tok,
        model.config,
        meta,
        folder,
        rules=rules,
        max_new_tokens=max_new,
    )
