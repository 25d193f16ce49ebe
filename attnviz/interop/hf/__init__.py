"""Open Hugging Face folders (encoder-decoder, decoder-only, encoder-only) in attnviz's own
:class:`~attnviz.Transformer`.

A folder written by ``save_pretrained`` (or downloaded with ``huggingface-cli``) holds
``config.json``, ``model.safetensors`` (or shards listed in ``model.safetensors.index.json``),
usually ``generation_config.json`` and tokenizer files. The model is rebuilt from
``config.json`` and the safetensors alone (no ``transformers`` import, nothing unpickled);
the tokenizer, when the folder has one, comes from ``transformers`` (the ``hf`` extra).

Families are a registry (:data:`REGISTRY`, one :class:`Family` per ``model_type``), one
file each: :mod:`.marian`, :mod:`.bart` (BART, mBART), :mod:`.pegasus`, :mod:`.fsmt`,
:mod:`.t5` (v1.0 and v1.1 / Flan-T5), :mod:`.whisper` (audio in); decoder-only :mod:`.gpt2`
and :mod:`.llama` (Llama, Mistral, Qwen2); encoder-only :mod:`.bert` (BERT, RoBERTa,
DistilBERT, masked-LM head). Adding a family is one file and one import here; its name
table (:mod:`.mapping`) is read by the import and by the export alike.

The way back: :func:`export_hf` writes a checkpoint of one of these families (a folder opened
here, or one fine-tuned from it; all but Whisper) as a folder transformers loads, in
:mod:`.export`.
"""

from ...checkpoint import register_folder_format
from . import (  # noqa: F401  (each registers its family)
    bart,
    bert,
    fsmt,
    gemma3,
    gpt2,
    llama,
    marian,
    pegasus,
    t5,
    whisper,
)
from .common import is_hf_folder, read_generation_config, read_hf_weights
from .export import export_hf
from .finetuned import is_finetuned_hf, load_finetuned_hf
from .generation import DEFAULT_MAX_LENGTH, check_generation, generation_rules, max_new_tokens
from .load import convert, load_hf_checkpoint, load_hf_model, read_hf_config, special_ids
from .registry import REGISTRY, Family, register
from .sentence import is_sentence_folder, load_sentence_checkpoint

#: the ``model_type`` values attnviz opens
SUPPORTED_MODEL_TYPES = tuple(REGISTRY)

register_folder_format(is_sentence_folder, load_sentence_checkpoint)  # before plain HF
register_folder_format(is_hf_folder, load_hf_checkpoint)
register_folder_format(is_finetuned_hf, load_finetuned_hf)  # attnviz train --init on one

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "REGISTRY",
    "SUPPORTED_MODEL_TYPES",
    "Family",
    "check_generation",
    "convert",
    "export_hf",
    "generation_rules",
    "is_hf_folder",
    "load_hf_checkpoint",
    "load_hf_model",
    "max_new_tokens",
    "read_generation_config",
    "read_hf_config",
    "read_hf_weights",
    "register",
    "special_ids",
]
