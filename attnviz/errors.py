"""Errors a user can cause. Each carries a one-line message a person can act on."""


class AttnvizError(Exception):
    """Base class of every error attnviz raises on bad input (text, file, option, tensor)."""


class ConfigError(AttnvizError, ValueError):
    """A model configuration that cannot describe a working Transformer."""


class MaskError(AttnvizError, ValueError):
    """A mask with the wrong shape, dtype or values."""


class InputError(AttnvizError, ValueError):
    """Token ids the model cannot take (wrong shape, too long, out of the vocabulary)."""


class InteropError(AttnvizError, ValueError):
    """A foreign state dict that cannot be mapped onto an attnviz Transformer."""


class EditError(AttnvizError, ValueError):
    """An attention edit (ablation, replacement, mask drop) that does not fit the model."""


class TraceLookupError(AttnvizError, LookupError):
    """A trace was asked for attention it did not capture."""


class CheckpointError(AttnvizError, ValueError):
    """A checkpoint folder or file that cannot be loaded (missing, truncated, wrong format)."""
