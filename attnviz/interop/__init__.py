"""Imports into :class:`attnviz.Transformer` from other implementations.

- :func:`from_torch_state_dict`: models built on ``torch.nn.Transformer`` (the PyTorch
  translation tutorial's state dict), in :mod:`attnviz.interop.nn_transformer`.
- :func:`load_hf_model` / :func:`load_hf_checkpoint`: Hugging Face encoder-decoder folders
  (Marian, BART, mBART, Pegasus, FSMT, T5), weights from safetensors and ``config.json``
  alone, in :mod:`attnviz.interop.hf`.
- :func:`export_hf`: the way back, a checkpoint of one of those families -> a folder
  transformers loads.
- :func:`load_ct2_checkpoint`: CTranslate2 folders (``model.bin``), in
  :mod:`attnviz.interop.ctranslate2`.
- :func:`load_gguf_checkpoint`: GGUF files (llama.cpp / Ollama: llama, qwen2, gpt2, gemma3),
  in :mod:`attnviz.interop.gguf`.
"""

from .ctranslate2 import load_ct2_checkpoint, read_model_bin
from .gguf import load_gguf_checkpoint, read_gguf
from .hf import SUPPORTED_MODEL_TYPES, export_hf, is_hf_folder, load_hf_checkpoint, load_hf_model
from .nn_transformer import from_torch_state_dict

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "export_hf",
    "from_torch_state_dict",
    "is_hf_folder",
    "load_ct2_checkpoint",
    "load_gguf_checkpoint",
    "load_hf_checkpoint",
    "load_hf_model",
    "read_gguf",
    "read_model_bin",
]
