"""A Hugging Face folder -> attnviz's Transformer and Checkpoint, through the family
registry (:data:`~attnviz.interop.hf.registry.REGISTRY`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...checkpoint import Checkpoint
from ...core.config import ModelConfig
from ...core.errors import AttnvizError, InteropError, one_line
from ...core.model import Transformer
from ...core.weights import build_model
from ..hf_tokenizer import IdTokenizer, load_hf_tokenizer
from .common import (
    Source,
    embeddings,
    first,
    one_table,
    read_generation_config,
    read_hf_weights,
    read_json,
    table_keys,
)
from .generation import check_generation, generation_rules
from .mapping import to_ours
from .registry import REGISTRY, Family
from .whisper import check_encoder_table, set_encoder_table, take_encoder_table


def read_hf_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of a supported family, or one line saying why not."""
    folder = Path(folder).expanduser()
    hf = read_json(folder / "config.json")
    model_type = hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in REGISTRY:
        raise InteropError(
            f"{folder}: model_type {str(model_type)[:40]!r} is not supported; attnviz opens "
            f"{', '.join(REGISTRY)}"
        )
    if "auto_map" in hf:
        raise InteropError(
            f"{folder}: config.json asks for custom code (auto_map); attnviz never runs code "
            "from a model folder"
        )
    return hf


def special_ids(hf: dict, gen: dict, unk_id: int | None = None) -> dict[str, int]:
    """Pad, decoder-start, end and unknown ids of a folder (generation config first)."""
    family = REGISTRY[hf["model_type"]]
    pad = gen.get("pad_token_id", hf.get("pad_token_id", family.pad_id))
    ends = gen.get("eos_token_id", hf.get("eos_token_id", family.eos_id))
    eos = first(ends)
    if family.decoder_only and isinstance(ends, list) and len(set(ends)) > 1:
        # several end ids (Llama 3): generate() stops at any of them; eos_id is the first
        more = tuple(dict.fromkeys(i for i in ends[1:] if i != eos))
        return {**one_stack_ids(family, hf, gen, pad, eos, unk_id), "end_ids": more}
    if not family.has_cross:
        return one_stack_ids(family, hf, gen, pad, eos, unk_id)
    start = gen.get("decoder_start_token_id", hf.get("decoder_start_token_id"))
    if start is None:
        start = pad if family.start_is_pad else eos
    unk = family.unk_id if unk_id is None else unk_id
    return {"pad_id": pad, "bos_id": first(start), "eos_id": eos, "unk_id": unk}


def one_stack_ids(family: Family, hf: dict, gen: dict, pad, eos, unk_id) -> dict[str, int]:
    """Special ids of a decoder-only or encoder-only folder. A decoder-only model starts from
    its prompt (``bos_id`` is the folder's, for tokenizers) and pads with its end id where the
    folder names no pad; an encoder-only model decodes nothing: ids it lacks are its pad id."""
    bos = first(gen.get("bos_token_id", hf.get("bos_token_id")))
    if family.decoder_only:
        pad = eos if pad is None else pad
    else:
        eos = pad if eos is None else eos
    bos = eos if bos is None else bos
    unk = family.unk_id if unk_id is None else unk_id
    vocab = hf.get("vocab_size")
    if (
        isinstance(vocab, int)
        and not isinstance(unk, bool)
        and isinstance(unk, int)
        and unk >= vocab
    ):
        unk = pad  # the family's usual unknown id is past this (small) vocabulary
    return {"pad_id": pad, "bos_id": bos, "eos_id": eos, "unk_id": unk}


_COMPUTED_POSITIONS = ("sinusoidal_split", "fairseq")


def convert(
    hf: dict, tensors: dict[str, Tensor], where: Path, ids: dict[str, int], owned: bool = False
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """A folder's config and tensors -> our :class:`ModelConfig` and state dict (tied
    tensors once, as :func:`attnviz.core.weights.unique_state_dict` names them).

    ``owned``: ``tensors`` were read for this load alone; each taken tensor leaves the dict
    (see :class:`~attnviz.interop.hf.common.Source`), so the caller's dict keeps stand-ins."""
    family: Family = REGISTRY[hf["model_type"]]
    src = Source(tensors, where, owned)
    if family.has_cross:
        emb = embeddings(src, family.embed_prefix, family.lm_keys, audio=family.audio)
    else:
        emb = one_table(src, family.embed_keys, family.lm_keys)
    fields = family.config(hf, where, tensors, ids)
    # position tables computed rather than loaded (sinusoids) may be in the file: not weights
    ignore = ("embed_positions",) if fields.get("positions") in _COMPUTED_POSITIONS else ()
    try:
        cfg = ModelConfig(
            src_vocab_size=(emb["tgt"] if family.audio else emb["src"]).shape[0],
            tgt_vocab_size=emb["tgt"].shape[0],
            dropout=0.0,
            share_embeddings=emb["share_embeddings"],
            tie_output=emb["tie_output"],
            arch=family.arch,
            **ids,
            **fields,
        )
    except AttnvizError as exc:
        raise InteropError(
            f"{where}: config.json does not give a model attnviz can build: {exc}"
        ) from None
    try:
        ours = to_ours(family.table(cfg, set(tensors)), src)
    except RuntimeError as exc:  # tensors torch cannot join or reshape: one line, not a trace
        raise InteropError(
            f"{where}: the weights do not fit a {hf['model_type']} model ({one_line(exc, 200)})"
        ) from None
    if cfg.has_encoder and not family.audio:
        ours["src_embed.weight"] = emb["src"]
    if cfg.has_decoder and not (cfg.share_embeddings and cfg.has_encoder and not family.audio):
        ours["tgt_embed.weight"] = emb["tgt"]
    if not cfg.tie_output:
        ours["generator.weight"] = emb["lm"]
    left = src.leftovers(ignore)
    if left:
        more = f" and {len(left) - 4} more" if len(left) > 4 else ""
        raise InteropError(f"{where}: tensors attnviz does not know: {', '.join(left[:4])}{more}")
    return cfg, ours


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
    tensors = read_hf_weights(folder) if tensors is None else tensors
    cfg, ours = convert(hf, tensors, folder, ids, owned=True)  # read for this load alone
    table = take_encoder_table(ours)  # a fixed table the folder holds (Whisper's encoder)
    if table is not None:
        table = check_encoder_table(table, cfg, folder)
    model = build_model(cfg, ours, folder, owned=True)  # shapes on the meta device first
    if table is not None:
        set_encoder_table(model, table)
    return model.to(device)


def _vocab_rows(hf: dict, tensors: dict[str, Tensor], where: Path) -> tuple[int, int]:
    """Source and target vocabulary sizes, read from the embedding tables' shapes; a
    config.json whose vocab_size says otherwise is refused before anything is sized by it."""
    family = REGISTRY[hf["model_type"]]
    one_stack = not family.has_cross
    if family.audio or one_stack:  # one token table (audio: the source side is features)
        keys = family.embed_keys if one_stack else table_keys("tgt")[:2]
        for key in keys:
            t = tensors.get(key)
            if t is not None and t.dim() == 2:
                said = hf.get("vocab_size")
                if said is not None and said != t.shape[0]:
                    raise InteropError(
                        f"{where}: config.json says vocab_size={str(said)[:40]} but the weights "
                        f"have {t.shape[0]} embedding rows"
                    )
                return int(t.shape[0]), int(t.shape[0])
        raise InteropError(f"{where}: no token embeddings ({' or '.join(keys)})")
    rows = {}
    for side in ("src", "tgt"):
        for key in table_keys(side):
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
    folder = Path(path).expanduser()
    hf = read_hf_config(folder)
    tensors = read_hf_weights(folder)  # first: a pickle or no weights is the first thing to say
    gen = read_generation_config(folder, hf)

    def tokenizer(ids: dict[str, int], tgt_rows: int, limit: int):
        return load_hf_tokenizer(folder, ids, tgt_rows, limit)

    return checkpoint_from_parts(hf, tensors, gen, folder, tokenizer, device=device)


#: ``(special ids, target vocabulary rows, ids the model takes) -> (tokenizer or None, why)``
TokenizerSource = Callable[[dict[str, int], int, int], tuple[Any, str | None]]


def checkpoint_from_parts(
    hf: dict,
    tensors: dict[str, Tensor],
    gen: dict,
    where: Path,
    tokenizer: TokenizerSource,
    meta: dict | None = None,
    device: str | torch.device = "cpu",
):
    """A :class:`attnviz.Checkpoint` from what a Hugging Face folder holds, however it was
    read: ``config.json`` as a dict (``model_type`` one of :data:`REGISTRY`), the tensors by
    transformers' names, the generation settings, and a tokenizer source called once the
    special ids and vocabulary rows are known. ``meta`` is merged over the folder's meta
    (``format``, ``model_type``, ``hf_config``, ...); ``where`` names the source in errors.
    ``tensors`` is emptied as the model takes them (one copy of the weights at a time)."""
    ids = special_ids(hf, gen)
    for role, value in ids.items():
        if role == "end_ids":  # a config's further end ids: checked with the config
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise InteropError(f"{where}: no usable {role} in config.json ({value!r})")
    src_rows, tgt_rows = _vocab_rows(hf, tensors, where)  # from the weights, never sized
    check_generation(gen, tgt_rows, where)  # from config.json's vocab_size alone
    tok, why = tokenizer(ids, tgt_rows, max(src_rows, tgt_rows))
    family = REGISTRY[hf["model_type"]]
    if tok is not None:
        if family.has_decoder:  # an encoder-only model generates nothing: no end
            _check_tokenizer_specials(tok, ids, where)
        ids["unk_id"] = tok.unk_id
    model = _build(where, hf, ids, device, tensors)
    tensors.clear()
    make_rules = family.generation or generation_rules
    rules, max_new, ignored = make_rules(gen, model.config, hf, where)
    if tok is None:  # ids in, ids out: every id shows as #<id>
        specials = model.config.special_ids
        src_tok = IdTokenizer(specials, src_rows, why)
        tgt_tok = IdTokenizer(specials, tgt_rows, why, side="target")
    else:
        src_tok, tgt_tok = tok, tok.for_target()
    meta = {
        "format": "huggingface",
        "model_type": hf["model_type"],
        "hf_config": hf,
        "generation_config": gen,
        "generation_ignored": ignored,
        "tokenizer_missing": why,
        **(meta or {}),
    }
    return Checkpoint(
        model,
        src_tok,
        tgt_tok,
        model.config,
        meta,
        where,
        rules=rules,
        max_new_tokens=max_new,
    )
