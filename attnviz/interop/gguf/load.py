"""A GGUF file -> an :class:`attnviz.Checkpoint`, through the Hugging Face families.

The file's ``<arch>.*`` metadata becomes a ``config.json`` dict and its tensors, dequantized
to float32 one at a time, get transformers' names (the tables of :mod:`.arch`); the Hugging
Face loader (:func:`~attnviz.interop.hf.load.checkpoint_from_parts`) builds the model from
them as it builds a folder's. The tokenizer comes from the file's ``tokenizer.ggml.*``
metadata (:mod:`.tokenizer`). What each tensor was stored as stays in ``meta``:
``gguf_types`` (type -> tensor count), ``gguf_description`` (``"Q4_K_M: 109 F32, ..."``).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ...core.errors import InteropError, shorten
from ...core.memory import check_size
from ..hf.load import checkpoint_from_parts
from .arch import ARCHS, FIXES, Arch
from .reader import GGUFError, GGUFFile, is_gguf, load_tensor, read_gguf
from .tokenizer import gguf_tokenizer

#: config.json keys read from ``tokenizer.ggml.*``
TOKEN_IDS = (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
             ("padding_token_id", "pad_token_id"))  # fmt: skip


def is_gguf_file(path: Path) -> bool:
    """True for a file named ``*.gguf`` (read as GGUF, whose reader says what is wrong with
    it) or one that starts with GGUF's magic bytes."""
    path = Path(path)
    return path.is_file() and (path.suffix.lower() == ".gguf" or is_gguf(path))


def architecture(f: GGUFFile) -> Arch:
    """The :class:`Arch` the file names, or one line listing those attnviz opens."""
    name = f.metadata.get("general.architecture")
    if not isinstance(name, str) or name not in ARCHS:
        raise InteropError(
            f"{shorten(f.path.name)}: GGUF architecture {shorten(repr(name), 40)} is not "
            f"supported; attnviz opens GGUF {', '.join(ARCHS)}"
        )
    return ARCHS[name]


def _number(f: GGUFFile, key: str, kind: type) -> int | float:
    """A metadata value that must be a positive whole number (``int``) or a positive
    finite number (``float``), or one line naming the key."""
    value = f.metadata[key]
    whole = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if kind is int:
        if not whole or int(value) < 1:
            raise GGUFError(
                f"{shorten(f.path.name)}: metadata {key} is {shorten(repr(value), 40)}, not a "
                "positive whole number; the file is damaged or not llama.cpp's"
            )
        return int(value)
    number = whole or (isinstance(value, (float, np.floating)) and not isinstance(value, bool))
    if not number or not math.isfinite(float(value)) or float(value) <= 0:
        raise GGUFError(
            f"{shorten(f.path.name)}: metadata {key} is {shorten(repr(value), 40)}, not a "
            "positive number; the file is damaged or not llama.cpp's"
        )
    return float(value)


def gguf_config(f: GGUFFile, arch: Arch) -> dict:
    """The ``config.json`` a Hugging Face folder of the file's family would hold."""
    label = shorten(f.path.name)
    hf: dict = {"model_type": arch.model_type, **arch.defaults}
    for key in arch.keys:
        full = f"{arch.name}.{key.gguf}"
        if f.metadata.get(full) is None:
            if key.required:
                raise GGUFError(f"{label}: metadata {full} is missing; the file is not a "
                                f"complete {arch.name} model")  # fmt: skip
            continue
        hf[key.hf] = _number(f, full, key.kind)
    for gguf, ours in TOKEN_IDS:
        full = f"tokenizer.ggml.{gguf}"
        if f.metadata.get(full) is not None:
            value = f.metadata[full]
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise GGUFError(f"{label}: metadata {full} is {shorten(repr(value), 40)}, "
                                "not a token id")  # fmt: skip
            hf[ours] = int(value)
    embd = f.tensors.get("token_embd.weight")
    if embd is not None and len(embd.shape) == 2:
        hf.setdefault("vocab_size", embd.shape[0])
    hf["tie_word_embeddings"] = "output.weight" not in f.tensors
    scaling = f.metadata.get(f"{arch.name}.rope.scaling.type")
    if scaling not in (None, "none"):
        if scaling != "linear":
            raise InteropError(f"{label}: rotary scaling {shorten(repr(scaling), 40)} is not "
                               "supported (attnviz reads linear)")  # fmt: skip
        factor = _number(f, f"{arch.name}.rope.scaling.factor", float)
        hf["rope_scaling"] = {"rope_type": "linear", "factor": factor}
    if "rope_freqs.weight" in f.tensors and "rope_freqs.weight" in arch.settings:
        hf["rope_scaling"] = llama3_scaling(f, hf)
    return hf


def llama3_divisors(theta: float, dh: int, params: dict) -> Tensor:
    """What llama.cpp's converter stores as ``rope_freqs.weight`` for Llama 3 scaling: per
    rotary frequency, the number it is divided by, ``[Dh / 2]``."""
    inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh)  # [Dh / 2]
    factor, old = params["factor"], params["original_max_position_embeddings"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old / wavelen - low) / (high - low)
    blend = 1 / ((1 - smooth) / factor + smooth)
    out = torch.where(wavelen < old / high, torch.ones_like(blend), blend)
    return torch.where(wavelen > old / low, torch.full_like(blend, factor), out)


def llama3_scaling(f: GGUFFile, hf: dict) -> dict:
    """Llama 3 rotary scaling from ``rope_freqs.weight`` (llama.cpp keeps it there, not in
    the metadata): the factor is its largest divisor, the other settings Llama 3's; a table
    they do not give is refused in one line."""
    label = shorten(f.path.name)
    dh = hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    info = f.tensors["rope_freqs.weight"]
    if list(info.shape) != [dh // 2]:
        raise GGUFError(f"{label}: rope_freqs.weight is {list(info.shape)}, not [{dh // 2}] "
                        "(half the head size); the file is inconsistent")  # fmt: skip
    divisors = load_tensor(f, "rope_freqs.weight")
    params = {"rope_type": "llama3", "factor": float(divisors.max()), "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    want = llama3_divisors(hf.get("rope_theta", 10000.0), dh, params)
    if not torch.allclose(divisors, want, rtol=1e-4, atol=1e-6):
        raise InteropError(f"{label}: rope_freqs.weight holds rotary factors other than Llama "
                           "3's scaling; attnviz does not compute those")  # fmt: skip
    return params


def _layer_count(hf: dict, arch: Arch) -> int:
    return hf[next(k.hf for k in arch.keys if k.gguf == "block_count")]


def tensor_names(f: GGUFFile, arch: Arch, hf: dict) -> dict[str, tuple[str, str | None]]:
    """GGUF name -> (transformers' name, fix) of every tensor the file holds; a file missing
    one the model needs, or holding one attnviz does not know, is refused in one line."""
    label = shorten(f.path.name)
    expected = dict(arch.top)
    required = [name for name in arch.top if name != "output.weight"]
    n_layers = _layer_count(hf, arch)
    if n_layers * len(arch.required) > len(f.tensors):  # bounded before names are made
        raise GGUFError(f"{label}: metadata {arch.name}.block_count is {n_layers:,} but the file "
                        f"holds {len(f.tensors):,} tensors; the file is inconsistent")  # fmt: skip
    for n in range(n_layers):
        for suffix, (name, fix) in arch.layer.items():
            expected[f"blk.{n}.{suffix}"] = (name.format(n=n), fix)
        required += [f"blk.{n}.{suffix}" for suffix in arch.required]
    unknown = [name for name in f.tensors if name not in expected and name not in arch.settings]
    if unknown:
        more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        raise GGUFError(f"{label}: tensors a {arch.name} model of {n_layers} "
                        f"blocks does not have: {', '.join(unknown[:4])}{more}")  # fmt: skip
    missing = [name for name in required if name not in f.tensors]
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise GGUFError(f"{label}: the {arch.name} model its metadata describes needs tensors "
                        f"the file lacks: {', '.join(missing[:4])}{more}")  # fmt: skip
    return {name: expected[name] for name in f.tensors if name not in arch.settings}


def sizes(hf: dict, f: GGUFFile) -> dict[str, int]:
    """The sizes of :data:`~attnviz.interop.gguf.arch.SIZES` the metadata gives."""
    d = hf.get("hidden_size", hf.get("n_embd"))
    heads = hf.get("num_attention_heads", hf.get("n_head"))
    dh = hf.get("head_dim", d // heads)
    embd = f.tensors.get("token_embd.weight")
    return {
        "D": d,
        "F": hf.get("intermediate_size", hf.get("n_inner", 4 * d)),
        "Q": heads * dh,
        "K": hf.get("num_key_value_heads", heads) * dh,
        "Dh": dh,
        "V": hf.get("vocab_size", embd.shape[0] if embd is not None else 0),
        "T": hf.get("n_positions", 0),
        "3D": 3 * d,
    }


def check_shapes(f: GGUFFile, arch: Arch, hf: dict) -> None:
    """Every tensor's shape against the metadata's sizes, before anything is read."""
    size = sizes(hf, f)
    for name, info in f.tensors.items():
        if name in arch.settings:  # checked where it is read
            continue
        dims = arch.shapes[name.split(".", 2)[2] if name.startswith("blk.") else name]
        want = [size[d] for d in dims]
        if list(info.shape) != want:
            said = ", ".join(f"{d}={size[d]}" for d in dict.fromkeys(dims))
            raise GGUFError(
                f"{shorten(f.path.name)}: {name} is {list(info.shape)} but the metadata "
                f"({said}) makes it {want}; the file is inconsistent"
            )


class _Counted:
    """The sizes :func:`check_size` reads, counted from the file's tensor table."""

    def __init__(self, f: GGUFFile):
        numbers = {name: math.prod(t.shape) for name, t in f.tensors.items()}
        self._sizes = {
            "embeddings": numbers.get("token_embd.weight", 0),
            "output projection": numbers.get("output.weight", 0),
            "decoder layers": sum(v for k, v in numbers.items() if k.startswith("blk.")),
        }
        self._sizes["parameters"] = sum(numbers.values())
        self._sizes["buffers"] = 0

    def sizes(self) -> dict[str, int]:
        return dict(self._sizes)


def gguf_tensors(f: GGUFFile, arch: Arch, hf: dict) -> dict[str, Tensor]:
    """Every tensor of the file, dequantized to float32 one at a time, by transformers' name
    (Q/K unpermuted, Gemma norms back to ``w``, GPT-2 matrices as ``Conv1D``'s ``[in, out]``).
    """
    names = tensor_names(f, arch, hf)
    check_shapes(f, arch, hf)
    check_size(_Counted(f))  # before anything is dequantized
    out: dict[str, Tensor] = {}
    for name, (theirs, fix) in names.items():
        t = load_tensor(f, name, torch.float32)
        out[theirs] = t if fix is None else FIXES[fix](t, hf)
    return out


def load_gguf_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """A GGUF file (llama.cpp / Ollama) as an :class:`attnviz.Checkpoint`: the model in
    float32, the file's tokenizer (or ids in, ids out where it has none, with the reason in
    ``meta["tokenizer_missing"]``).

    Raises:
        InteropError: an architecture attnviz does not run (naming those it does).
        GGUFError: a damaged file, metadata of the wrong type, missing or misshapen tensors.
    """
    path = Path(path).expanduser()
    f = read_gguf(path)
    arch = architecture(f)
    hf = gguf_config(f, arch)
    tensors = gguf_tensors(f, arch, hf)
    gen = {k: hf[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in hf}

    def tokenizer(ids: dict[str, int], tgt_rows: int, limit: int):
        # (Read after the weights, not beside them: the tokenizers library holds the GIL
        # while it reads its JSON, so a thread of its own gained nothing, measured.)
        if f.metadata.get("tokenizer.ggml.model") is None:
            return None, f"{shorten(path.name)} has no tokenizer metadata; ids in, ids out"
        return gguf_tokenizer(f.metadata, tgt_rows, str(path)), None

    meta = {
        "format": "gguf",
        "architecture": arch.name,
        "gguf_version": f.version,
        "gguf_types": f.type_counts(),
        "gguf_description": f.describe_types(),
        "gguf_file_type": f.file_type(),
        "model_name": f.metadata.get("general.name"),
    }
    try:
        ckpt = checkpoint_from_parts(hf, tensors, gen, path, tokenizer, meta, device)
    except InteropError as exc:  # the family's checks speak of the config.json made here
        raise InteropError(str(exc).replace("config.json", "the GGUF metadata")) from None
    _return_freed_memory()
    return ckpt


def _return_freed_memory() -> None:
    """Give the float32 copies freed after loading back to the system: glibc keeps freed heap
    memory otherwise (Gemma 3 270M: resident 1.93 GB -> 1.47 GB). A no-op elsewhere."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
