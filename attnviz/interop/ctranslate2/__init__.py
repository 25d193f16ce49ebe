"""Open CTranslate2 model folders (``model.bin`` + ``config.json`` + vocabularies) in
attnviz's own :class:`~attnviz.Transformer`.

- :mod:`.binary`: :func:`read_model_bin`, the ``model.bin`` reader (names, shapes and dtypes
  checked before anything is allocated; quantized weights dequantized).
"""

from .binary import ModelBin, read_model_bin

__all__ = ["ModelBin", "read_model_bin"]
