"""sentence-transformers folders: ``modules.json`` read as data, the embedding computed in
attnviz's own model.

A folder's ``modules.json`` lists its modules in order. attnviz runs four kinds, refused by
name otherwise: the **Transformer** (a BERT, RoBERTa or DistilBERT folder at the module's
path, opened through :mod:`attnviz.interop.hf`), one **Pooling** (``cls``, ``max``, ``mean``,
``mean_sqrt_len_tokens``, ``weightedmean``, ``lasttoken``; several are concatenated in
sentence-transformers' order), then any **Dense** (a linear map and an activation from a fixed
list; weights from ``model.safetensors`` in its folder, never a pickle, never a class named
by the file) and **Normalize** (unit length). Texts are cut as sentence-transformers cuts them:
to ``max_seq_length`` tokens of ``sentence_bert_config.json`` (the model's positions where it
names none), specials kept, the end of a longer text dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...checkpoint import Checkpoint, read_tensors
from ...core.errors import InputError, InteropError, shorten
from ...core.record import record
from ...data.tokenizer import Encoding, check_text
from .common import read_json

MODULES = "modules.json"
#: pooling modes in the order sentence-transformers concatenates them
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
#: the older config's booleans -> modes
LEGACY_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
#: Dense activations run, by the names sentence-transformers writes (never imported)
ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": torch.tanh,
    "torch.nn.modules.linear.Identity": None,
    "torch.nn.modules.activation.ReLU": torch.relu,
    "torch.nn.modules.activation.GELU": F.gelu,
    "torch.nn.modules.activation.Sigmoid": torch.sigmoid,
    "torch.nn.modules.activation.SiLU": F.silu,
}
KINDS = ("Transformer", "Pooling", "Dense", "Normalize")


def is_sentence_folder(path: str | Path) -> bool:
    """True for a folder with a ``modules.json`` (a sentence-transformers model)."""
    return (Path(path).expanduser() / MODULES).is_file()


@dataclass(frozen=True)
class Pooling:
    """Token states ``[B, T, D]`` -> one vector ``[B, len(modes) * D]`` per text."""

    modes: tuple[str, ...]
    dim: int

    def __call__(self, h: Tensor, real: Tensor) -> Tensor:
        """``h`` ``[B, T, D]`` states, ``real`` ``[B, T]`` bool (False at padding)."""
        return torch.cat([v.sum(1) for v in self.parts(h, real)], -1)

    def parts(self, h: Tensor, real: Tensor) -> list[Tensor]:
        """Each mode's per-token share ``[B, T, D]``: summed over ``T`` it is that mode's
        vector (max: each dimension's value at the token that holds the maximum)."""
        m = real.to(h.dtype)[..., None]  # [B, T, 1]
        n = m.sum(1, keepdim=True).clamp(min=1e-9)  # [B, 1, 1]
        t = h.shape[1]
        first = real.int().argmax(1)  # [B]
        last = t - 1 - real.int().flip(1).argmax(1)  # [B]
        out = []
        for mode in self.modes:
            if mode in ("cls", "lasttoken"):
                at = first if mode == "cls" else last
                out.append(h * F.one_hot(at, t).to(h.dtype)[..., None])
            elif mode == "max":
                masked = h.masked_fill(~real[..., None], float("-inf"))
                top = F.one_hot(masked.argmax(1), t).transpose(1, 2).to(h.dtype)  # [B, T, D]
                out.append(h * top)
            elif mode in ("mean", "mean_sqrt_len_tokens"):
                out.append(h * m / (n if mode == "mean" else n.sqrt()))
            else:  # weightedmean: position weights 1, 2, ... from the first real token
                w = torch.arange(1, t + 1, device=h.device, dtype=h.dtype)[None, :, None]
                w = (w - first[:, None, None].to(h.dtype)) * m
                out.append(h * w / w.sum(1, keepdim=True).clamp(min=1e-9))
        return out


@dataclass(frozen=True)
class Dense:
    """``activation(x @ weight.T + bias)``: ``[B, in] -> [B, out]``."""

    weight: Tensor  # [out, in]
    bias: Tensor | None  # [out]
    activation: str

    @property
    def linear(self) -> bool:
        return ACTIVATIONS[self.activation] is None

    def __call__(self, x: Tensor) -> Tensor:
        y = F.linear(x, self.weight.to(x), None if self.bias is None else self.bias.to(x))
        act = ACTIVATIONS[self.activation]
        return y if act is None else act(y)


@dataclass(frozen=True)
class Normalize:
    """Unit length: ``[B, E] -> [B, E]``."""

    def __call__(self, x: Tensor) -> Tensor:
        return F.normalize(x, p=2, dim=-1)


@dataclass(frozen=True)
class Embedder:
    """What a sentence-transformers folder does after its Transformer.

    Attributes:
        pooling: the one :class:`Pooling`; ``after``: its Dense / Normalize modules in order.
        max_seq_length: most tokens read of a text (specials included); longer texts are cut.
        lower: texts are lower-cased first (``do_lower_case``).
        prompt: the folder's default prompt, put before every text as ``encode`` puts it.
    """

    folder: Path
    pooling: Pooling
    after: tuple[Dense | Normalize, ...]
    max_seq_length: int
    lower: bool = False
    prompt: str = ""

    @property
    def dim(self) -> int:
        """Width of an embedding."""
        dims = [m.weight.shape[0] for m in self.after if isinstance(m, Dense)]
        return dims[-1] if dims else len(self.pooling.modes) * self.pooling.dim

    def describe(self) -> str:
        """One line: pooling, Dense and Normalize modules, the token limit."""
        parts = [f"pooling {'+'.join(self.pooling.modes)}"]
        if self.prompt:
            parts.insert(0, f"prompt {shorten(repr(self.prompt), 40)}")
        for m in self.after:
            if isinstance(m, Dense):
                act = m.activation.rsplit(".", 1)[-1]
                parts.append(f"Dense {m.weight.shape[1]}->{m.weight.shape[0]} {act}")
            else:
                parts.append("Normalize")
        return f"{', '.join(parts)}; texts cut to {self.max_seq_length} tokens"

    # -- reading ---------------------------------------------------------------------------
    def read(self, ckpt: Checkpoint, text: str) -> Encoding:
        """``text`` as the folder's Transformer reads it: its tokens with the specials, cut to
        :attr:`max_seq_length` as sentence-transformers cuts it (the text's end goes, the
        specials stay).

        Raises:
            InputError: not a string, an empty text, or one too long to read.
        """
        check_text(text, self.max_seq_length * 64)
        tok = ckpt.src_tokenizer
        if not text.strip() or not tok.split(text):
            raise InputError("a text to embed is empty: give each sentence some words")
        text = self.prompt + text
        if self.lower:
            text = text.lower()
        enc = tok.encode(text)
        if len(enc.ids) <= self.max_seq_length:
            return enc
        body = tok.encode_plain(text)
        start = next((i for i in range(len(enc.ids)) if enc.ids[i : i + len(body)] == body), None)
        if start is None:  # the specials are not around the text: cut the end
            ids = enc.ids[: self.max_seq_length]
        else:
            head, tail = enc.ids[:start], enc.ids[start + len(body) :]
            keep = max(self.max_seq_length - len(head) - len(tail), 0)
            ids = head + body[:keep] + tail
        return Encoding(ids, [tok.token(i) for i in ids], enc.unknown)

    def batch(self, ckpt: Checkpoint, encs: list[Encoding]) -> tuple[Tensor, Tensor]:
        """Ids ``[B, T]`` padded on the right with the model's pad id, and ``real`` ``[B, T]``
        (True at a text's tokens)."""
        t = max(len(e.ids) for e in encs)
        pad = ckpt.config.pad_id
        ids = torch.tensor([e.ids + [pad] * (t - len(e.ids)) for e in encs], device=ckpt.device)
        lengths = torch.tensor([len(e.ids) for e in encs], device=ckpt.device)
        real = torch.arange(t, device=ckpt.device)[None] < lengths[:, None]
        return ids, real

    # -- the pipeline ----------------------------------------------------------------------
    def finish(self, pooled: Tensor) -> Tensor:
        """Pooled ``[B, P]`` through the Dense and Normalize modules -> ``[B, E]``."""
        for m in self.after:
            pooled = m(pooled)
        return pooled

    def forward(self, model, ids: Tensor, real: Tensor) -> Tensor:
        """Ids ``[B, T]`` -> embeddings ``[B, E]`` through ``model`` (the checkpoint's, or a
        private copy), recorded when a recorder is active."""
        h = model.encode(ids, ~real)  # [B, T, D]
        return self.finish(self.pooling(h, real))

    def embed(
        self, ckpt: Checkpoint, texts: list[str], batch_size: int = 32, record_: bool = False
    ) -> Tensor | tuple[Tensor, list]:
        """:meth:`attnviz.Checkpoint.embed`: texts -> ``[N, E]`` float32 on the CPU."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            raise InputError("give at least one text to embed")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        encs = [self.read(ckpt, t) for t in texts]
        out: list[Tensor | None] = [None] * len(encs)
        traces: list = []
        with torch.inference_mode():
            if record_:  # one text a pass: each trace is that text's attention alone
                for i, e in enumerate(encs):
                    ids, real = self.batch(ckpt, [e])
                    with record(ckpt.model) as trace:
                        out[i] = self.forward(ckpt.model, ids, real)[0]
                    traces.append(trace)
            else:  # longest first, as sentence-transformers batches: little padding
                order = sorted(range(len(encs)), key=lambda i: -len(encs[i].ids))
                for s in range(0, len(order), batch_size):
                    rows = order[s : s + batch_size]
                    ids, real = self.batch(ckpt, [encs[i] for i in rows])
                    for i, v in zip(rows, self.forward(ckpt.model, ids, real), strict=True):
                        out[i] = v
        emb = torch.stack(out).float().cpu()  # [N, E]
        return (emb, traces) if record_ else emb


# -- reading a folder -----------------------------------------------------------------------
def _refuse(folder: Path, what: str) -> InteropError:
    return InteropError(f"{folder / MODULES}: {what}")


def _kind(entry: Any, i: int, folder: Path) -> tuple[str, Path]:
    """One ``modules.json`` entry -> (its kind, its folder inside ``folder``)."""
    if not isinstance(entry, dict):
        raise _refuse(folder, f"entry {i} is not an object")
    name = entry.get("type")
    kind = name.rsplit(".", 1)[-1] if isinstance(name, str) else None
    if not (isinstance(name, str) and name.startswith("sentence_transformers.") and kind in KINDS):
        raise _refuse(
            folder,
            f"module {i} is {shorten(repr(name), 80)}, which attnviz does not run "
            f"(it runs {', '.join(KINDS)})",
        )
    path = entry.get("path", "")
    if not isinstance(path, str):
        raise _refuse(folder, f"module {i}'s path must be a string, got {shorten(repr(path))}")
    inside = (folder / path).resolve()
    if Path(path).is_absolute() or not inside.is_relative_to(folder.resolve()):
        raise _refuse(folder, f"module {i} ({kind}) has a path outside the folder: {path!r}")
    return kind, inside


def _entries(folder: Path) -> list:
    """``modules.json``: a non-empty list, or one line saying what it is instead."""
    try:
        entries = json.loads((folder / MODULES).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refuse(folder, f"not readable JSON ({shorten(str(exc), 120)})") from None
    if not isinstance(entries, list) or not entries:
        raise _refuse(folder, "must be a non-empty list of modules")
    return entries


def _config(where: Path, name: str, required: bool) -> dict:
    path = where / name
    if not path.is_file():
        if required:
            raise InteropError(f"{where}: no {name}")
        return {}
    return read_json(path)


def read_pooling(where: Path) -> Pooling:
    """``config.json`` of a Pooling module (the older booleans or ``pooling_mode``)."""
    cfg = _config(where, "config.json", True)
    dim = cfg.get("embedding_dimension", cfg.get("word_embedding_dimension"))
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InteropError(f"{where}/config.json: word_embedding_dimension must be a positive "
                           f"integer, got {shorten(repr(dim))}")  # fmt: skip
    if cfg.get("include_prompt", True) is not True:
        raise InteropError(f"{where}/config.json: include_prompt false is not supported")
    if "pooling_mode" in cfg:
        given = cfg["pooling_mode"]
        modes = (given,) if isinstance(given, str) else given
        if not isinstance(modes, list | tuple) or not modes:
            raise InteropError(f"{where}/config.json: pooling_mode must be a mode or a list "
                               f"of modes, got {shorten(repr(given))}")  # fmt: skip
    else:
        for key in cfg:
            if key.startswith("pooling_mode_") and key not in LEGACY_KEYS:
                raise InteropError(f"{where}/config.json: {shorten(key)} is not a pooling mode "
                                   f"attnviz knows ({', '.join(POOLING_MODES)})")  # fmt: skip
        modes = tuple(mode for key, mode in LEGACY_KEYS.items() if cfg.get(key) is True)
        modes = modes or ("mean",)  # sentence-transformers' default
    for mode in modes:
        if mode not in POOLING_MODES:
            raise InteropError(f"{where}/config.json: pooling mode {shorten(repr(mode))} is not "
                               f"one of {', '.join(POOLING_MODES)}")  # fmt: skip
    return Pooling(tuple(modes), dim)


def read_dense(where: Path, width: int) -> Dense:
    """A Dense module's ``config.json`` and ``model.safetensors`` (``linear.weight``, bias)."""
    cfg = _config(where, "config.json", True)
    sizes = [cfg.get("in_features"), cfg.get("out_features")]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise InteropError(f"{where}/config.json: in_features and out_features must be "
                           f"positive integers, got {shorten(repr(sizes))}")  # fmt: skip
    if sizes[0] != width:
        raise InteropError(
            f"{where}/config.json: in_features={sizes[0]} but the module before gives {width}"
        )
    act = cfg.get("activation_function", "torch.nn.modules.activation.Tanh")
    if act not in ACTIVATIONS:
        raise InteropError(f"{where}/config.json: activation_function {shorten(repr(act))} is "
                           f"not one attnviz runs ({', '.join(ACTIVATIONS)})")  # fmt: skip
    for key in ("use_residual",):
        if cfg.get(key):
            raise InteropError(f"{where}/config.json: {key} is not supported")
    for key in ("module_input_name", "module_output_name"):
        if cfg.get(key, "sentence_embedding") != "sentence_embedding":
            raise InteropError(f"{where}/config.json: {key} other than sentence_embedding is "
                               "not supported")  # fmt: skip
    bias = cfg.get("bias", True)
    if not isinstance(bias, bool):
        raise InteropError(f"{where}/config.json: bias must be true or false")
    if not (where / "model.safetensors").is_file():
        pickles = [p.name for p in where.glob("*.bin")]
        what = f"only {pickles[0]} (a pickle; attnviz reads safetensors)" if pickles else "none"
        raise InteropError(f"{where}: no model.safetensors for the Dense weights ({what})")
    tensors = read_tensors(where / "model.safetensors")[0]
    want = {"linear.weight": (sizes[1], sizes[0])} | ({"linear.bias": (sizes[1],)} if bias else {})
    for key, shape in want.items():
        got = tensors.get(key)
        if got is None or tuple(got.shape) != shape:
            seen = "missing" if got is None else list(got.shape)
            raise InteropError(
                f"{where}/model.safetensors: {key} must be {list(shape)}, got {seen}"
            )
    extra = sorted(set(tensors) - set(want))
    if extra:
        raise InteropError(f"{where}/model.safetensors: tensors attnviz does not know: "
                           f"{', '.join(shorten(k) for k in extra[:4])}")  # fmt: skip
    return Dense(
        tensors["linear.weight"].float(), tensors["linear.bias"].float() if bias else None, act
    )


def read_modules(folder: Path, d_model: int, max_len: int) -> tuple[Path, Embedder]:
    """``modules.json`` -> (the Transformer's folder, the :class:`Embedder` after it).

    Raises:
        InteropError: a module attnviz does not run, a path outside the folder, modules out of
            order, or a module's config or weights that do not fit.
    """
    entries = _entries(folder)
    kinds = [_kind(e, i, folder) for i, e in enumerate(entries)]
    order = [k for k, _ in kinds]
    if order[:2] != ["Transformer", "Pooling"] or {"Transformer", "Pooling"} & set(order[2:]):
        raise _refuse(folder, f"modules are {' -> '.join(order)}; attnviz runs Transformer -> "
                              "Pooling -> Dense / Normalize")  # fmt: skip
    where = kinds[0][1]
    pooling = read_pooling(kinds[1][1])
    if pooling.dim != d_model:
        raise InteropError(f"{kinds[1][1]}/config.json: word_embedding_dimension={pooling.dim} "
                           f"but the Transformer's states have {d_model}")  # fmt: skip
    after: list[Dense | Normalize] = []
    width = len(pooling.modes) * pooling.dim
    for kind, path in kinds[2:]:
        if kind == "Dense":
            after.append(read_dense(path, width))
            width = after[-1].weight.shape[0]
        else:
            after.append(Normalize())
    st = _config(where, "sentence_bert_config.json", False)
    limit = st.get("max_seq_length")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InteropError(f"{where}/sentence_bert_config.json: max_seq_length must be a "
                           f"positive integer, got {shorten(repr(limit))}")  # fmt: skip
    limit = max_len if limit is None else min(limit, max_len)
    lower = st.get("do_lower_case", False) is True
    return where, Embedder(folder, pooling, tuple(after), limit, lower, default_prompt(folder))


def default_prompt(folder: Path) -> str:
    """The prompt ``encode`` puts before every text: ``default_prompt_name`` of
    ``config_sentence_transformers.json`` looked up in its ``prompts`` ("" where none)."""
    cfg = _config(folder, "config_sentence_transformers.json", False)
    name, prompts = cfg.get("default_prompt_name"), cfg.get("prompts") or {}
    if name is None:
        return ""
    if not isinstance(prompts, dict) or not isinstance(prompts.get(name), str):
        raise InteropError(f"{folder}/config_sentence_transformers.json: default_prompt_name "
                           f"{shorten(repr(name))} names no prompt in prompts")  # fmt: skip
    return prompts[name]


def load_sentence_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """A sentence-transformers folder as a :class:`~attnviz.Checkpoint` whose
    :meth:`~attnviz.Checkpoint.embed` gives the folder's sentence embeddings."""
    from .load import load_hf_checkpoint

    folder = Path(path).expanduser()
    probe = read_modules_path(folder)
    ckpt = load_hf_checkpoint(probe, device)
    cfg = ckpt.config
    if cfg.has_decoder:
        raise _refuse(folder, f"the Transformer is a {cfg.arch} model; attnviz embeds with "
                              "encoder-only ones (BERT, RoBERTa, DistilBERT)")  # fmt: skip
    if ckpt.meta.get("tokenizer_missing"):
        raise InteropError(f"{probe}: no tokenizer ({ckpt.meta['tokenizer_missing']})")
    _, embedder = read_modules(folder, cfg.d_model, cfg.max_len)
    ckpt.embedder = embedder
    ckpt.meta["sentence_transformers"] = embedder.describe()
    return ckpt


def read_modules_path(folder: Path) -> Path:
    """The Transformer module's folder (checked before anything is loaded)."""
    entries = _entries(folder)
    kind, where = _kind(entries[0], 0, folder)
    if kind != "Transformer":
        raise _refuse(folder, f"the first module is {kind}; attnviz runs Transformer -> Pooling "
                              "-> Dense / Normalize")  # fmt: skip
    return where
