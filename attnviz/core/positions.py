"""Positions: the fixed sinusoid tables and T5's relative position bias.

Shape legend as in :mod:`attnviz.core.model`. Which one a model uses is ``ModelConfig.positions``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .config import ModelConfig


def sinusoidal_positions(max_len: int, d_model: int) -> Tensor:
    """Sinusoidal position table of the paper: sin on even dims, cos on odd dims.

    Returns:
        ``[max_len, D]`` float32.
    """
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # [max_len, 1]
    div = torch.exp(-torch.arange(0, d_model, 2, dtype=torch.float32) * math.log(10000.0) / d_model)
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div[: d_model // 2])
    return table


def split_sinusoidal_positions(max_len: int, d_model: int) -> Tensor:
    """Sinusoids with all sines first, then all cosines (Marian, Pegasus).

    Computed in float64 and rounded once: a float32 table drifts by 3e-5 at position 511.

    Returns:
        ``[max_len, D]`` float32.
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # [max_len, 1]
    freq = 10000.0 ** (-2 * torch.arange((d_model + 1) // 2, dtype=torch.float64) / d_model)
    angles = position * freq  # [max_len, ceil(D / 2)]
    return torch.cat([torch.sin(angles), torch.cos(angles[:, : d_model // 2])], dim=1).float()


def half_sinusoids(positions: Tensor, d_model: int) -> Tensor:
    """Sinusoids with all sines first, then all cosines, at rates
    ``exp(-log(10000) * i / (D / 2 - 1))``, float32 as fairseq, Whisper and CTranslate2
    compute them (one formula; the three differ only in the positions they give).

    Args:
        positions: ``[T]`` the position (row) of each table row.
    Returns:
        ``[T, D]`` float32; an odd D's last column is zero.
    """
    half = d_model // 2
    rates = torch.exp(
        torch.arange(half, dtype=torch.float32) * -(math.log(10000) / max(half - 1, 1))
    )
    angles = positions.float()[:, None] * rates[None, :]  # [T, D / 2]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # [T, 2 * half]
    return torch.cat([table, torch.zeros(len(positions), d_model % 2)], dim=1)


def fairseq_positions(rows: int, d_model: int, pad_id: int) -> Tensor:
    """fairseq's sinusoids (FSMT), float32 as fairseq computes them; row ``pad_id`` is zero.

    Returns:
        ``[rows, D]`` float32; position p of a sequence reads row ``pad_id + 1 + p``.
    """
    table = half_sinusoids(torch.arange(rows), d_model)
    table[pad_id] = 0
    return table


def whisper_positions(length: int, d_model: int) -> Tensor:
    """Whisper's encoder sinusoids (:func:`half_sinusoids` of positions ``0 .. length - 1``).

    Returns:
        ``[length, D]`` float32.
    """
    return half_sinusoids(torch.arange(length), d_model)


def relative_position_buckets(
    tq: int, tk: int, start: int, bidirectional: bool, n_buckets: int, max_distance: int, device
) -> Tensor:
    """T5's bucket of every (query, key) distance: exact near, logarithmic far.

    Queries sit at positions ``start .. start + tq - 1`` (``start`` = cached length).

    Returns:
        ``[Tq, Tk]`` long.
    """
    q_pos = torch.arange(tq, dtype=torch.long, device=device)[:, None] + start
    rel = torch.arange(tk, dtype=torch.long, device=device)[None, :] - q_pos  # key - query
    buckets = torch.zeros_like(rel)
    if bidirectional:
        n_buckets //= 2
        buckets += (rel > 0).long() * n_buckets
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    exact = n_buckets // 2
    far = (
        exact
        + (
            torch.log(rel.float() / exact) / math.log(max_distance / exact) * (n_buckets - exact)
        ).long()
    )
    far = torch.clamp(far, max=n_buckets - 1)
    return buckets + torch.where(rel < exact, rel, far)


class RelativePositionBias(nn.Module):
    """T5's learned bias per head and distance bucket, added to self-attention scores."""

    def __init__(self, cfg: ModelConfig, bidirectional: bool):
        super().__init__()
        self.bidirectional = bidirectional
        self.n_buckets, self.max_distance = cfg.relative_buckets, cfg.relative_max_distance
        self.embedding = nn.Embedding(cfg.relative_buckets, cfg.n_heads)

    def forward(self, tq: int, tk: int, start: int = 0) -> Tensor:
        """Bias of ``tq`` queries (from position ``start``) over ``tk`` keys: ``[1, H, Tq, Tk]``."""
        buckets = relative_position_buckets(
            tq, tk, start, self.bidirectional, self.n_buckets, self.max_distance,
            self.embedding.weight.device,
        )  # fmt: skip
        return self.embedding(buckets).permute(2, 0, 1).unsqueeze(0)  # [1, H, Tq, Tk]


def fixed_table(cfg: ModelConfig, kind: str, length: int) -> Tensor | None:
    """The computed table of position kind ``kind`` covering ``length`` positions (None for
    learned or relative positions)."""
    if kind == "sinusoidal":
        return sinusoidal_positions(length, cfg.d_model)
    if kind == "sinusoidal_split":
        return split_sinusoidal_positions(length, cfg.d_model)
    if kind == "fairseq":
        return fairseq_positions(length + cfg.position_offset, cfg.d_model, cfg.pad_id)
    if kind == "whisper":
        return whisper_positions(length, cfg.d_model)
    return None


def position_table(cfg: ModelConfig) -> Tensor | None:
    """The fixed position table of the decoder (and of the encoder, unless it has its own:
    :func:`encoder_position_table`); None for learned or relative positions."""
    return fixed_table(cfg, *cfg.stack_positions(decoder=True))


def encoder_position_table(cfg: ModelConfig) -> Tensor | None:
    """The encoder's own fixed table where its positions differ from the decoder's (Whisper),
    else None (the encoder reads :func:`position_table`, or learned/relative positions)."""
    enc = cfg.stack_positions(decoder=False)
    if enc == cfg.stack_positions(decoder=True):
        return None
    return fixed_table(cfg, *enc)


# -- rotary position embeddings (Llama, GPT-NeoX) ----------------------------------------------
def rotary_frequencies(cfg: ModelConfig, device=None, local: bool = False) -> Tensor:
    """Inverse frequencies of the rotated dims, ``[R / 2]`` float32 (R = ``cfg.rotary_width``).

    ``theta ** (-2i / R)``, then the config's scaling: Llama 3 divides the low frequencies
    (wavelength above ``original / low_freq_factor``) by ``rope_factor``, keeps the high ones
    (wavelength below ``original / high_freq_factor``) and blends in between; ``"linear"``
    divides every frequency by ``rope_factor`` (the same as dividing the positions).
    ``local``: the sliding layers' base ``rope_local_theta``, unscaled, where it is set.
    """
    dim = cfg.rotary_width
    exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    if local and cfg.rope_local_theta is not None:
        return 1.0 / (cfg.rope_local_theta**exponent)  # [R / 2]
    inv_freq = 1.0 / (cfg.rope_theta**exponent)  # [R / 2]
    if cfg.rope_scaling == "linear":
        return inv_freq / cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        factor, old = cfg.rope_factor, cfg.rope_original_max_len
        low, high = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)  # 0 at the low edge, 1 at the high
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        middle = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv_freq = torch.where(middle, blended, scaled)
    return inv_freq


def rotary_angles(inv_freq: Tensor, start: int, length: int, dtype: torch.dtype) -> tuple:
    """``(cos, sin)`` of positions ``start .. start + length - 1``, each ``[Tq, R]`` (the
    frequencies twice: the rotated dims pair ``i`` with ``i + R / 2``), in float32, cast to
    ``dtype``."""
    pos = torch.arange(start, start + length, device=inv_freq.device, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]  # [Tq, R / 2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [Tq, R]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the first R dims of every head of ``x [B, H, T, Dh]`` by position (R =
    ``cos.shape[-1]``; the rest pass through, as partial rotary does). Pairs are
    ``(i, i + R / 2)``: the "rotate half" layout of GPT-NeoX and Llama."""
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    first, second = rot[..., : r // 2], rot[..., r // 2 :]
    rotated = torch.cat([-second, first], dim=-1)  # [B, H, T, R]
    out = rot * cos + rotated * sin
    return out if rest.shape[-1] == 0 else torch.cat([out, rest], dim=-1)
