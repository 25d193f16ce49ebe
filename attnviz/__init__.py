"""attnviz: look inside encoder-decoder Transformers.

The attention shown is the attention the model used: weights are recorded inside the real
forward pass (:func:`record`), never recomputed beside it.
"""

from . import interop, masks
from .config import ModelConfig
from .decoding import BeamResult, GreedyStepper, StepResult, beam_search, greedy_decode
from .errors import (
    AttnvizError,
    ConfigError,
    EditError,
    InputError,
    InteropError,
    MaskError,
    TraceLookupError,
)
from .model import KINDS, DecoderCache, MultiHeadAttention, Transformer
from .record import AttentionRecord, DropMask, ReplaceWeights, Trace, ZeroHeads, record, to_numpy

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AttentionRecord",
    "AttnvizError",
    "BeamResult",
    "ConfigError",
    "DecoderCache",
    "DropMask",
    "EditError",
    "GreedyStepper",
    "InputError",
    "InteropError",
    "MaskError",
    "ModelConfig",
    "MultiHeadAttention",
    "ReplaceWeights",
    "StepResult",
    "Trace",
    "TraceLookupError",
    "Transformer",
    "ZeroHeads",
    "__version__",
    "beam_search",
    "greedy_decode",
    "interop",
    "masks",
    "record",
    "to_numpy",
]
