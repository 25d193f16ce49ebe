"""Whether a model fits this machine: the memory this process may use (physical memory, an
address-space limit, a cgroup limit) and what building and loading a config's model needs,
checked before anything is allocated (a crafted config asking for terabytes is refused in one
line)."""

from __future__ import annotations

import os
from typing import Protocol

from .errors import ConfigError


class Sized(Protocol):
    """What the size check reads of a config: :meth:`attnviz.core.config.ModelConfig.sizes`
    (numbers by part, with ``"parameters"`` and ``"buffers"`` totals)."""

    def sizes(self) -> dict[str, int]: ...


#: Bytes of one number (float32).
BYTES_PER_NUMBER = 4
#: Part of the memory this process may use that one model may need at its peak.
MEMORY_FRACTION = 0.75
#: Models needing less than this are never checked against the machine (no system calls).
_ALWAYS_FITS = 256 << 20


def available_memory() -> int:
    """Bytes this process may still use: physical memory, or less where an address-space limit
    (``ulimit -v``) or a cgroup memory limit says so."""
    found = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:  # address space in use now, in pages
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            found.append(max(soft - used, 0))
    except (ImportError, OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            found.append(int(limit))
    except OSError:
        pass
    return min(found)


def memory_needed(config: Sized) -> int:
    """Peak bytes of building and loading the model of ``config``, from its arithmetic.

    Parameters count twice (a load holds the file's tensors and the model's together); a fixed
    position table counts six times (it is computed through float64 temporaries).
    """
    sizes = config.sizes()
    return BYTES_PER_NUMBER * (2 * sizes["parameters"] + 6 * sizes["buffers"])


def check_size(config: Sized) -> None:
    """Refuse a config whose model cannot fit in this machine's memory, before building it.

    Raises:
        ConfigError: one line naming the size, the limit, the largest part and what to do.
    """
    needed = memory_needed(config)
    if needed <= _ALWAYS_FITS:
        return
    budget = int(available_memory() * MEMORY_FRACTION)
    if needed <= budget:
        return
    sizes = config.sizes()
    parts = {k: v for k, v in sizes.items() if k not in ("parameters", "buffers")}
    largest = max(parts, key=parts.get)
    table = f", {sizes['buffers']:,} in the position table" if sizes["buffers"] else ""
    raise ConfigError(
        f"this model is too big for this machine: {sizes['parameters']:,} parameters{table} "
        f"need about {_gb(needed)} to build and load, {needed / max(budget, 1):.1f}x the "
        f"{_gb(budget)} this process can use; most of it is {largest} "
        f"({parts[largest]:,} numbers): make {_knobs(largest)} smaller"
    )


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**28 else f"{n / 2**20:.0f} MB"


def _knobs(part: str) -> str:
    return {
        "embeddings": "src_vocab_size / tgt_vocab_size or d_model",
        "encoder layers": "n_encoder_layers, d_model or d_ff",
        "decoder layers": "n_decoder_layers, d_model or d_ff",
        "position tables": "max_len (max_position_embeddings) or d_model",
        "audio front-end": "n_mels or d_model",
        "output projection": "tgt_vocab_size or d_model",
    }[part]
