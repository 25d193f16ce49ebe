"""attnviz: look inside encoder-decoder Transformers.

The attention shown is the attention the model used: weights are recorded inside the real
forward pass (:func:`record`), never recomputed beside it.
"""

from . import audio, interop, masks, tasks
from .beam import BeamNode, BeamResult, BeamTree, beam_search
from .checkpoint import Checkpoint, Prediction, load_checkpoint, save_checkpoint
from .config import ModelConfig
from .decoding import GreedyStepper, StepResult, greedy_decode
from .devices import as_numpy, resolve_device
from .errors import (
    AttnvizError,
    CheckpointError,
    ConfigError,
    EditError,
    InputError,
    InteropError,
    MaskError,
    TraceLookupError,
)
from .interop import export_hf
from .model import KINDS, DecoderCache, MultiHeadAttention, Transformer, eager_attention
from .record import (
    AttentionRecord,
    DropMask,
    Edit,
    Hook,
    ReplaceWeights,
    Trace,
    ZeroHeads,
    record,
)
from .scoring import Scored
from .show import View, show
from .tokenizer import Encoding, Tokenizer

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "AttentionRecord",
    "AttnvizError",
    "BeamNode",
    "BeamResult",
    "BeamTree",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "DecoderCache",
    "DropMask",
    "Edit",
    "EditError",
    "Encoding",
    "GreedyStepper",
    "Hook",
    "InputError",
    "InteropError",
    "MaskError",
    "ModelConfig",
    "MultiHeadAttention",
    "Prediction",
    "ReplaceWeights",
    "Scored",
    "StepResult",
    "Tokenizer",
    "Trace",
    "TraceLookupError",
    "Transformer",
    "ZeroHeads",
    "__version__",
    "beam_search",
    "eager_attention",
    "export_hf",
    "greedy_decode",
    "audio",
    "interop",
    "load_checkpoint",
    "masks",
    "record",
    "save_checkpoint",
    "tasks",
    "as_numpy",
    "resolve_device",
    "show",
    "View",
]
