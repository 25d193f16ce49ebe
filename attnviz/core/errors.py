"""Errors a user can cause. Each carries a one-line message a person can act on."""

import operator


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


class CorpusError(AttnvizError, ValueError):
    """A corpus file that cannot be read as parallel text (the message names file:line)."""


class CheckpointError(AttnvizError, ValueError):
    """A checkpoint folder or file that cannot be loaded (missing, truncated, wrong format)."""


#: Longest name (tensor, key, file) a message echoes; longer ones are cut and end in "…".
NAME_LIMIT = 80


def shorten(name: object, limit: int = NAME_LIMIT) -> str:
    """``name`` as text for a message: one line, at most ``limit`` characters plus "…"."""
    text = " ".join(str(name).splitlines())
    return text if len(text) <= limit else text[:limit] + "…"


def count(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` for one, ``many`` (default ``word + "s"``) otherwise:
    ``"1 given input"``, ``"16 given inputs"`` (messages never say "1 inputs")."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def one_line(exc: BaseException, limit: int = 2000) -> str:
    """The message of ``exc`` as one line of at most ``limit`` characters (plus "…").

    Errors that are not attnviz's own are named by their type (``MemoryError`` has no text).
    """
    text = " ".join(str(exc).split())
    if isinstance(exc, MemoryError):
        text = "out of memory" + (f" ({text})" if text else "")
    elif isinstance(exc, RecursionError):
        text = "input nested too deeply to read" + (f" ({text})" if text else "")
    elif not isinstance(exc, (AttnvizError, OSError)):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return shorten(text, limit)


def index_in(value: object, name: str, size: int, what: str = "", note: str = "") -> int:
    """``value`` as an int in ``0..size-1``, or :class:`InputError` naming the valid range.

    Accepts Python, numpy and 0-d tensor integers; refuses bools, floats and text, so a
    layer, head, position, step or token id a person typed is checked in one place. The
    message reads ``"{name} must be {what} in 0..{size - 1}{note}, got {value}"`` (``what``
    defaults to "an integer" where the value is not one).
    """
    valid = f"in 0..{size - 1}{note}"
    try:
        if isinstance(value, bool):
            raise TypeError
        index = operator.index(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        shown = shorten(repr(value))
        raise InputError(f"{name} must be {what or 'an integer'} {valid}, got {shown}") from None
    if not 0 <= index < size:
        raise InputError(f"{name} must be {what + ' ' if what else ''}{valid}, got {index}")
    return index
