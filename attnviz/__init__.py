"""attnviz: look inside encoder-decoder Transformers.

The attention shown is the attention the model used: weights are recorded inside the real
forward pass (:func:`record`), never recomputed beside it.
"""

from . import interop
from .checkpoint import Checkpoint, Prediction, load_checkpoint, save_checkpoint
from .core import masks
from .core.config import ModelConfig
from .core.devices import as_numpy, resolve_device
from .core.errors import (
    AttnvizError,
    CheckpointError,
    ConfigError,
    CorpusError,
    EditError,
    InputError,
    InteropError,
    MaskError,
    TraceLookupError,
)
from .core.model import KINDS, DecoderCache, MultiHeadAttention, Transformer, eager_attention
from .core.record import (
    AttentionRecord,
    DropMask,
    Edit,
    Hook,
    ReplaceWeights,
    Trace,
    ZeroHeads,
    record,
)
from .core.version import __version__
from .data import (
    audio,  # attnviz.audio.load_audio, log_mel
    tasks,
)
from .data.tokenizer import Encoding, Tokenizer
from .decode.batched import greedy_decode
from .decode.beam import BeamNode, BeamResult, BeamTree, beam_search
from .decode.greedy import GreedyStepper, StepResult
from .decode.scoring import Scored
from .interop import export_hf
from .render.show import View, show

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
    "CorpusError",
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
