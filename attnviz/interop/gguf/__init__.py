"""GGUF files (llama.cpp / Ollama): a checked reader and dequantization.

- :mod:`.reader`: :func:`read_gguf` (header, metadata and tensor table, every size checked
  against the file before anything is read), :func:`load_tensor` (one tensor, dequantized),
  :func:`is_gguf`.
- :mod:`.arch`: the architectures attnviz opens (llama, qwen2, gpt2, gemma3), each a data
  table: metadata keys -> ``config.json`` keys, GGUF tensor names -> transformers' names.
- :mod:`.load`: :func:`load_gguf_checkpoint` (the file through the Hugging Face families),
  registered with :func:`attnviz.load_checkpoint`.
- :mod:`.tokenizer`: the file's tokenizer from its ``tokenizer.ggml.*`` metadata.
- :mod:`.quants`: GGML tensor types as data and their decoding to float32.

May import :mod:`attnviz.core`, :mod:`attnviz.checkpoint`, :mod:`attnviz.interop.hf`,
numpy, torch and the optional ``gguf`` package (its numpy dequantizers, on byte slices
already checked) only.
"""

from ...checkpoint import register_folder_format
from .arch import ARCHS, Arch
from .load import is_gguf_file, load_gguf_checkpoint
from .quants import GGML_TYPES, READABLE, GGMLType, dequantize
from .reader import GGUFError, GGUFFile, TensorInfo, is_gguf, load_tensor, read_gguf

register_folder_format(is_gguf_file, load_gguf_checkpoint)

__all__ = [
    "ARCHS",
    "Arch",
    "GGML_TYPES",
    "GGMLType",
    "GGUFError",
    "GGUFFile",
    "READABLE",
    "TensorInfo",
    "dequantize",
    "is_gguf",
    "is_gguf_file",
    "load_gguf_checkpoint",
    "load_tensor",
    "read_gguf",
]
