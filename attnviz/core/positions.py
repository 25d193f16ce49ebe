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


def fairseq_positions(rows: int, d_model: int, pad_id: int) -> Tensor:
    """fairseq's sinusoids (FSMT), float32 as fairseq computes them; row ``pad_id`` is zero.

    Returns:
        ``[rows, D]`` float32; position p of a sequence reads row ``pad_id + 1 + p``.
    """
    half = d_model // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(rows, dtype=torch.float32).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # [rows, 2 * half]
    if d_model % 2:
        table = torch.cat([table, torch.zeros(rows, 1)], dim=1)
    table[pad_id] = 0
    return table


def whisper_positions(length: int, d_model: int) -> Tensor:
    """Whisper's encoder sinusoids, float32 as Whisper computes them: all sines, then all
    cosines, at rates ``exp(-log(10000) * i / (D / 2 - 1))``.

    Returns:
        ``[length, D]`` float32.
    """
    half = d_model // 2
    increment = math.log(10000) / max(half - 1, 1)
    rates = torch.exp(-increment * torch.arange(half))  # [D / 2]
    angles = torch.arange(length)[:, None] * rates[None, :]  # [length, D / 2]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if d_model % 2:
        table = torch.cat([table, torch.zeros(length, 1)], dim=1)
    return table


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
