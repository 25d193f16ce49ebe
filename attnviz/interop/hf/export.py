"""Back to the ecosystem: a checkpoint whose architecture is a Hugging Face family -> a folder
that transformers loads with the Auto class of its kind (:data:`AUTO_CLASSES`:
``AutoModelForSeq2SeqLM``, ``AutoModelForCausalLM``, ``AutoModelForMaskedLM``) and
``AutoTokenizer``.

Which checkpoints go back: a Hugging Face folder attnviz opened, and a checkpoint fine-tuned
from one (``attnviz train --init FOLDER``), which keeps the folder's ``config.json`` (in its
metadata), its generation config and its tokenizer files. The weights go through the family's
table (``Family.table``, the one its import reads, :mod:`.mapping`) and are checked by
importing them again before anything is written: the folder holds exactly the model attnviz
ran.
Written with safetensors, never a pickle; the folder appears whole or not at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import torch
from torch import Tensor

from ...checkpoint import Checkpoint, load_checkpoint
from ...core.errors import InputError, InteropError
from ...core.tempdirs import STALE_AFTER_S, clean_stale, make_temp_dir
from ...core.weights import unique_state_dict
from ...data.tokenizer import config_ids
from .common import WEIGHTS
from .load import convert
from .mapping import to_theirs, token_tables
from .registry import REGISTRY, Family

GENERATION = "generation_config.json"
#: ModelConfig.arch -> the transformers class that loads an exported folder of that kind
AUTO_CLASSES = {
    "encoder-decoder": "AutoModelForSeq2SeqLM",
    "decoder-only": "AutoModelForCausalLM",
    "encoder-only": "AutoModelForMaskedLM",
}
#: The kind of the folder an export is written in before it is renamed into place.
STAGING = "export"
#: files of a checkpoint folder that are not its tokenizer's (weights, attnviz's own files)
_NOT_TOKENIZER = ("config.json", GENERATION, "dev_pairs.json")
_WEIGHT_SUFFIXES = (
    ".safetensors", ".bin", ".h5", ".msgpack", ".ckpt", ".pt", ".pth", ".pkl", ".ot", ".onnx",
    ".gguf", ".tflite",
)  # fmt: skip


def export_hf(ckpt_or_folder: Checkpoint | str | Path, out: str | Path) -> Path:
    """Write ``ckpt_or_folder`` as a Hugging Face folder at ``out``.

    The Auto class of the model's kind (:data:`AUTO_CLASSES`; ``AutoModelForSeq2SeqLM``,
    ``AutoModelForCausalLM`` or ``AutoModelForMaskedLM``) loads the same weights with
    ``from_pretrained(out)`` (the same logits; ``generate()`` gives
    :meth:`Checkpoint.predict`'s text, greedy and beam), and
    ``AutoTokenizer.from_pretrained(out)`` the same tokenizer, where the checkpoint has one.

    Args:
        ckpt_or_folder: a loaded :class:`Checkpoint` or a folder ``load_checkpoint`` opens.
        out: a folder that does not exist yet (or is empty).
    Returns:
        ``out`` as a :class:`Path`.
    Raises:
        InteropError: the checkpoint's architecture is not a family transformers loads
            (attnviz's own models, ``nn.Transformer`` imports); nothing is written.
        InputError: ``out`` exists and is not empty; nothing is overwritten.
    """
    ckpt = ckpt_or_folder
    if not isinstance(ckpt, Checkpoint):
        ckpt = load_checkpoint(ckpt_or_folder)
    out = Path(out).expanduser()
    hf, _ = _family(ckpt)
    if out.is_symlink():  # replacing a link would write through it or drop it: neither is asked
        raise InputError(
            f"{out} is a symbolic link; give export-hf the path of a new folder (the link's "
            "target, or a name that does not exist yet)"
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} exists and is not empty; give export-hf a new folder")
    tensors = hf_tensors(ckpt)
    config = dict(hf)
    dtype = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
    for key in ("dtype", "torch_dtype"):  # the weights' own precision, not the original's
        if key in config or key == "dtype":
            config[key] = dtype
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(STAGING, out.parent, max_age=STALE_AFTER_S)  # left by a killed export
    tmp = make_temp_dir(STAGING, out.parent, stem=f".{out.name}.")
    try:
        from safetensors.torch import save_file

        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        gen = ckpt.path / GENERATION if ckpt.path is not None else None
        if gen is not None and gen.is_file():
            shutil.copyfile(gen, tmp / GENERATION)
        elif ckpt.config.encoder_only:
            pass  # nothing is generated: save_pretrained writes no generation config either
        elif ckpt.meta.get("generation_config"):
            (tmp / GENERATION).write_text(json.dumps(ckpt.meta["generation_config"], indent=2))
        for f in tokenizer_files(ckpt):
            shutil.copyfile(f, tmp / f.name)
        for f in tmp.iterdir():  # as save_pretrained leaves them: readable by all
            f.chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _family(ckpt: Checkpoint) -> tuple[dict, Family]:
    """The Hugging Face config and family of ``ckpt``, or one line saying why it has none."""
    hf = ckpt.meta.get("hf_config")
    supported = ", ".join(t for t, f in REGISTRY.items() if f.exported)
    if ckpt.meta.get("format") != "huggingface" or not isinstance(hf, dict):
        raise InteropError(
            f"{ckpt.path} is not a Hugging Face architecture (attnviz's own model or an "
            f"nn.Transformer import): transformers has no class for it. export-hf writes "
            f"{supported} folders and checkpoints fine-tuned from one (attnviz train --init)"
        )
    family = REGISTRY.get(str(hf.get("model_type")))
    if family is None or not family.exported:
        raise InteropError(
            f"{ckpt.path}: model_type {str(hf.get('model_type'))[:40]!r} is not exported; "
            f"export-hf writes {supported}"
        )
    return hf, family


def hf_tensors(ckpt: Checkpoint) -> dict[str, Tensor]:
    """The checkpoint's weights under its family's names, checked by importing them again.

    Returns:
        name -> contiguous CPU tensor (tied tables once, as ``save_pretrained`` writes them).
    Raises:
        InteropError: the architecture is not a family's, or the weights do not map back onto
            the same model (the round trip through the importer differs).
    """
    hf, family = _family(ckpt)
    cfg = ckpt.config
    ours = {k: v.detach().cpu() for k, v in ckpt.model.state_dict().items()}
    # a folder that says its output matrix is its own gets one, even where it equals the table
    own_lm = hf.get("tie_word_embeddings", True) is False
    tensors = to_theirs(family.table(cfg, None), ours) | token_tables(
        ours, cfg, family.embed_prefix, family.embed_keys, family.lm_keys[0], write_lm=own_lm
    )
    tensors = {k: v.contiguous().clone() for k, v in tensors.items()}
    # the import of what is about to be written must give back this very model
    ids = config_ids(cfg.special_ids)
    where = ckpt.path if ckpt.path is not None else Path(".")
    again_cfg, again = convert(hf, tensors, where, ids)
    expected = unique_state_dict(ckpt.model)
    same_cfg = dataclasses.replace(again_cfg, dropout=cfg.dropout) == cfg
    differ = [k for k in expected if k not in again or not torch.equal(again[k], ours[k])]
    if not same_cfg or differ or set(again) != set(expected):
        what = "the config" if not same_cfg else ", ".join(differ[:4]) or "the tensor names"
        raise InteropError(
            f"{where}: the {hf['model_type']} weights do not map back onto this model "
            f"({what} differ); this checkpoint cannot be exported"
        )
    return tensors


def tokenizer_files(ckpt: Checkpoint) -> list[Path]:
    """The tokenizer files in the checkpoint's folder (a Hugging Face folder's, or those a
    fine-tuned checkpoint kept): everything but weights, configs and attnviz's own files."""
    if ckpt.path is None or not Path(ckpt.path).is_dir():
        return []
    return [
        f
        for f in sorted(Path(ckpt.path).iterdir())
        if f.is_file()
        and not f.name.startswith(".")
        and f.name not in _NOT_TOKENIZER
        and not f.name.endswith(_WEIGHT_SUFFIXES)
        and not f.name.endswith(".index.json")
    ]
