"""An attnviz checkpoint fine-tuned from a Hugging Face folder (``attnviz train --init``).

The folder holds attnviz's ``model.safetensors`` + ``config.json`` (whose tokenizer entries
say ``"kind": "hf"``), the original folder's tokenizer files and ``generation_config.json``,
and, in the metadata, the original ``hf_config`` and ``generation_config``. It opens with the
same tokenizer and generation rules as the folder it came from.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...checkpoint import FORMAT, METADATA, WEIGHTS, Checkpoint, read_tensors
from ...core.config import ModelConfig
from ...core.errors import CheckpointError
from ...core.weights import build_model
from ...data.tokenizer import config_ids
from ..hf_tokenizer import IdTokenizer, load_hf_tokenizer
from .generation import generation_rules


def is_finetuned_hf(path: str | Path) -> bool:
    """True for an attnviz checkpoint folder whose tokenizers are a Hugging Face folder's."""
    meta = Path(path).expanduser() / METADATA
    if not meta.is_file():
        return False
    try:
        doc = json.loads(meta.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return False
    tok = doc.get("src_tokenizer")
    return isinstance(tok, dict) and tok.get("kind") == "hf"


def load_finetuned_hf(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Open such a folder: the model, the tokenizer from the copied files, the rules that
    ``predict`` follows (as for the original folder); ``meta["format"]`` reads
    ``"huggingface"`` so beam settings come from its generation config too.

    Raises:
        CheckpointError: missing weights or metadata without the Hugging Face config.
    """
    folder = Path(path).expanduser()
    tensors, meta = read_tensors(folder / WEIGHTS)
    meta = meta or json.loads((folder / METADATA).read_text())
    hf, gen = meta.get("hf_config"), meta.get("generation_config")
    if not isinstance(hf, dict) or not isinstance(gen, dict):
        raise CheckpointError(f"{folder / METADATA}: no hf_config / generation_config to read")
    config = ModelConfig.from_dict(meta["config"])
    model = build_model(config, tensors, folder / WEIGHTS).to(device).eval()
    ids = config_ids(config.special_ids)
    sizes = (config.src_vocab_size, config.tgt_vocab_size)
    tokenizer, why = load_hf_tokenizer(folder, ids, config.tgt_vocab_size, max(sizes))
    if tokenizer is None:
        src_tok = IdTokenizer(config.special_ids, config.src_vocab_size, why)
        tgt_tok = IdTokenizer(config.special_ids, config.tgt_vocab_size, why, side="target")
    else:
        src_tok, tgt_tok = tokenizer, tokenizer.for_target()
    rules, max_new, ignored = generation_rules(gen, config, hf, folder)
    meta = {
        **meta,
        "format": "huggingface",
        "model_type": hf.get("model_type"),
        "generation_ignored": ignored,
        "tokenizer_missing": why,
    }
    return Checkpoint(model, src_tok, tgt_tok, config, meta, folder, rules, max_new)
