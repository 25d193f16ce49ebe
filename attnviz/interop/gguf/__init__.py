"""GGUF files (llama.cpp / Ollama): a checked reader and dequantization.

- :mod:`.reader`: :func:`read_gguf` (header, metadata and tensor table, every size checked
  against the file before anything is read), :func:`load_tensor` (one tensor, dequantized),
  :func:`is_gguf`.
- :mod:`.quants`: GGML tensor types as data and their decoding to float32.

May import :mod:`attnviz.core`, numpy, torch and the optional ``gguf`` package (its numpy
dequantizers, on byte slices already checked) only.
"""

from .quants import GGML_TYPES, READABLE, GGMLType, dequantize
from .reader import GGUFError, GGUFFile, TensorInfo, is_gguf, load_tensor, read_gguf

__all__ = [
    "GGML_TYPES",
    "GGMLType",
    "GGUFError",
    "GGUFFile",
    "READABLE",
    "TensorInfo",
    "dequantize",
    "is_gguf",
    "load_tensor",
    "read_gguf",
]
