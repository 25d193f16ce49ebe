"""Open CTranslate2 model folders (``model.bin`` + ``config.json`` + vocabularies) in
attnviz's own :class:`~attnviz.Transformer`.

- :mod:`.binary`: :func:`read_model_bin`, the ``model.bin`` reader (names, shapes and dtypes
  checked before anything is allocated; quantized weights dequantized).
- :mod:`.folder`: :func:`load_ct2_checkpoint`, dispatching on the spec name in ``model.bin``
  through :data:`SPECS` (:func:`register_spec` adds one); registered with
  :func:`attnviz.load_checkpoint`.
- :mod:`.transformer`: ``TransformerSpec`` (text encoder-decoders) -> our config and weights.
- :mod:`.vocabulary`: the folder's vocabularies, and the tokens-in, tokens-out tokenizer.
- :mod:`.whisper`: ``WhisperSpec`` (faster-whisper folders) -> an audio-source Transformer
  with Whisper's generation rules and CTranslate2's beam search.
"""

from ...checkpoint import register_folder_format
from .binary import ModelBin, read_model_bin
from .folder import SPECS, is_ct2_folder, load_ct2_checkpoint, register_spec
from .vocabulary import VocabTokenizer, read_vocabulary
from .whisper import load_whisper_spec, max_text_tokens, whisper_rules

register_folder_format(is_ct2_folder, load_ct2_checkpoint)

__all__ = [
    "SPECS",
    "ModelBin",
    "VocabTokenizer",
    "is_ct2_folder",
    "load_whisper_spec",
    "max_text_tokens",
    "load_ct2_checkpoint",
    "read_model_bin",
    "read_vocabulary",
    "register_spec",
    "whisper_rules",
]
