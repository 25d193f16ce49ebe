"""What every Hugging Face family shares: reading a folder (config, safetensors, generation
settings; never a pickle), typed reading of config.json values, the tensors taken one by one
and the token tables (the families' other weights go through :mod:`.mapping`)."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...checkpoint import read_tensors
from ...core.errors import CheckpointError, InteropError

INDEX = "model.safetensors.index.json"
WEIGHTS = "model.safetensors"
# transformers' activation names -> ours
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_fast",
    "silu": "silu",
    "swish": "silu",
}
CONVERT = (
    'python -c "from transformers import AutoModelForSeq2SeqLM as M; '
    "M.from_pretrained('{0}').save_pretrained('{0}', safe_serialization=True)\""
)


# -- the folder --------------------------------------------------------------------------------
def read_json(path: Path) -> dict:
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


def read_hf_weights(folder: str | Path) -> dict[str, Tensor]:
    """All tensors of ``model.safetensors`` or of the shards its index lists; never a pickle."""
    folder = Path(folder).expanduser()
    if (folder / WEIGHTS).is_file():
        return read_tensors(folder / WEIGHTS)[0]
    if (folder / INDEX).is_file():
        weight_map = read_json(folder / INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{folder / INDEX} has no 'weight_map'")
        tensors: dict[str, Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not isinstance(shard, str) or Path(shard).name != shard:
                raise CheckpointError(f"{folder / INDEX} names a shard outside the folder")
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
            f"Convert it where you trust it: {CONVERT.format(folder)}"
        )
    raise CheckpointError(f"{folder}: no {WEIGHTS} (or {INDEX}) next to config.json")


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
        return {k: v for k, v in read_json(path).items() if v is not None}
    return {k: hf[k] for k in keys if hf.get(k) is not None}


# -- config.json values -----------------------------------------------------------------------
def first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def int_of(hf: dict, key: str, where: Path) -> int:
    value = hf.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InteropError(f"{where}/config.json: {key} must be an integer, got {value!r}")
    return value


def opt_int(hf: dict, key: str, default: int, where: Path) -> int:
    """An optional whole-number setting of config.json (``default`` when absent or null)."""
    if hf.get(key) is None:
        return default
    return int_of(hf, key, where)


def opt_float(hf: dict, key: str, default: float, where: Path) -> float:
    value = hf.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InteropError(f"{where}/config.json: {key} must be a positive number, got {value!r}")
    return float(value)


def activation(name: Any, where: Path) -> str:
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise InteropError(
            f"{where}: activation {name!r} is not supported (supported: {sorted(ACTIVATIONS)})"
        )
    return ACTIVATIONS[name]


# -- weights ----------------------------------------------------------------------------------
class Source:
    """The folder's tensors, taken one by one so that leftovers can be named.

    ``owned``: the tensors were read for this load alone, so a taken tensor leaves the dict
    (a meta-device stand-in of its shape stays, for :meth:`has` and the leftovers): one the
    rules copy (q/k/v joined, a transposed Conv1D) is freed as soon as its copy is made, and
    the weights exist about once at the peak instead of the copied ones twice.
    """

    def __init__(self, tensors: dict[str, Tensor], where: Path, owned: bool = False):
        self.tensors, self.where, self.used = tensors, where, set()
        self.owned, self._given = owned, {}

    def has(self, key: str) -> bool:
        return key in self.tensors

    def take(self, key: str) -> Tensor:
        if key not in self.tensors:
            raise InteropError(f"{self.where}: the weights lack {key}")
        self.used.add(key)
        if not self.owned:
            return self.tensors[key]
        given = self._given.get(key)
        if given is not None:  # taken before (a table two sides name): the same tensor
            t = given()
            if t is None:
                raise InteropError(f"{self.where}: {key} is read twice and was copied")
            return t
        t = self.tensors[key]
        self.tensors[key] = torch.empty(t.shape, dtype=t.dtype, device="meta")
        self._given[key] = weakref.ref(t)
        return t

    def first(self, *keys: str) -> tuple[str, Tensor] | None:
        for key in keys:
            if key in self.tensors:
                return key, self.take(key)
        return None

    def leftovers(self, ignore: tuple[str, ...] = ()) -> list[str]:
        return sorted(
            k for k in self.tensors if k not in self.used and not any(s in k for s in ignore)
        )


#: An encoder-decoder folder's token tables, after its family's prefix (``"model."``, ``""``):
#: one table both sides share (``save_pretrained`` writes it where they do), else one a side.
TOKEN_TABLES = {
    "shared": "shared.weight",
    "src": "encoder.embed_tokens.weight",
    "tgt": "decoder.embed_tokens.weight",
}


def table_keys(side: str, prefixes: tuple[str, ...] = ("model.", "")) -> tuple[str, ...]:
    """Where one side's token table (``"src"``, ``"tgt"`` or ``"shared"``) may be, over the
    prefixes families use, its own table's names before the shared one's."""
    names = dict.fromkeys((TOKEN_TABLES[side], TOKEN_TABLES["shared"]))
    return tuple(p + n for n in names for p in prefixes)


def embeddings(
    src: Source, prefix: str, lm_keys: tuple[str, ...], audio: bool = False
) -> dict[str, Any]:
    """Source/target tables and the output matrix, and which of them are one tensor; an audio
    model has no source table (``"src"`` None)."""
    shared = prefix + TOKEN_TABLES["shared"]
    dec = src.first(*table_keys("tgt", (prefix,)))
    enc = dec if audio else src.first(*table_keys("src", (prefix,)))
    if enc is None or dec is None:
        raise InteropError(f"{src.where}: no token embeddings ({shared} or embed_tokens)")
    if src.has(shared):
        src.take(shared)
    lm = src.first(*lm_keys)
    same = enc[1].shape == dec[1].shape and torch.equal(enc[1], dec[1])
    tied = lm is None or (lm[1].shape == dec[1].shape and torch.equal(lm[1], dec[1]))
    return {
        "src": None if audio else enc[1],
        "tgt": dec[1],
        "lm": None if tied else lm[1],
        "share_embeddings": same and not audio,
        "tie_output": tied,
    }


def one_table(src: Source, embed_keys: tuple[str, ...], lm_keys: tuple[str, ...]) -> dict:
    """A one-stack model's token table and output matrix (``tie_output`` where there is no
    output matrix of its own), in the shape :func:`embeddings` returns."""
    table = src.first(*embed_keys)
    if table is None:
        raise InteropError(f"{src.where}: no token embeddings ({' or '.join(embed_keys)})")
    lm = src.first(*lm_keys)
    tied = lm is None or (lm[1].shape == table[1].shape and torch.equal(lm[1], table[1]))
    return {
        "src": table[1],
        "tgt": table[1],
        "lm": None if tied else lm[1],
        "share_embeddings": False,
        "tie_output": tied,
    }
