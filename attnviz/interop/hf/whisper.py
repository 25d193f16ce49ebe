"""Whisper (``WhisperForConditionalGeneration``): log-mel features through two convolutions into
a pre-norm encoder with fixed sinusoids; a pre-norm decoder with learned positions and its
output tied to the token table. Every difference from a text model is a config field
(``source="audio"``, ``encoder_positions="whisper"``, ``max_source_len``).

The generation rules are Whisper's own (:class:`~attnviz.decode.rules.WhisperRules`): the prompt
``<|startoftranscript|> <|notimestamps|>``, ``suppress_tokens`` everywhere and
``begin_suppress_tokens`` at the first text token, as transformers' Whisper ``generate``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ...core.config import ModelConfig
from ...core.errors import InteropError
from ...core.model import Transformer
from ...core.positions import whisper_positions
from ...decode.rules import WhisperRules
from .bart_like import stack_layers
from .common import activation, int_of
from .generation import check_generation, max_new_tokens, token_ids
from .mapping import Linear, One, Rule
from .registry import Family, register

#: how far a folder's encoder table may be from Whisper's formula (float16 rounds by 5e-4)
TABLE_TOLERANCE = 2e-3
_ENCODER_TABLE = "encoder_pe"


def config(hf: dict, where: Path, tensors: dict[str, Tensor], ids: dict[str, int]) -> dict:
    heads = int_of(hf, "encoder_attention_heads", where)
    d_ff = int_of(hf, "encoder_ffn_dim", where)
    for key, value in (("decoder_attention_heads", heads), ("decoder_ffn_dim", d_ff)):
        if hf.get(key, value) != value:
            raise InteropError(
                f"{where}: {key}={str(hf[key])[:40]} differs from the encoder's {value}; "
                "attnviz models use one head count and one feed-forward width"
            )
    return dict(
        source="audio",
        n_mels=int_of(hf, "num_mel_bins", where),
        d_model=int_of(hf, "d_model", where),
        n_heads=heads,
        n_encoder_layers=int_of(hf, "encoder_layers", where),
        n_decoder_layers=int_of(hf, "decoder_layers", where),
        d_ff=d_ff,
        activation=activation(hf.get("activation_function", "gelu"), where),
        norm_first=True,
        final_norm=True,
        positions="learned",
        encoder_positions="whisper",
        max_len=int_of(hf, "max_target_positions", where),
        max_source_len=int_of(hf, "max_source_positions", where),
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        output_bias=False,
    )


def table(cfg: ModelConfig, names: set[str] | None = None) -> list[Rule]:
    """Front-end, layers (BART's layout, key projections without a bias), norms and positions;
    the encoder's fixed table travels as ``"encoder_pe"`` (see :func:`check_encoder_table`)."""
    return [
        Linear("frontend.conv1", "model.encoder.conv1"),
        Linear("frontend.conv2", "model.encoder.conv2"),
        *stack_layers(cfg, zero_key=True),
        Linear("encoder.norm", "model.encoder.layer_norm"),
        Linear("decoder.norm", "model.decoder.layer_norm"),
        One("decoder.pos_embed.weight", "model.decoder.embed_positions.weight"),
        One(_ENCODER_TABLE, "model.encoder.embed_positions.weight"),
    ]


def check_encoder_table(table: Tensor, cfg: ModelConfig, where: Path) -> Tensor:
    """The folder's encoder position table, checked against Whisper's formula; the model uses
    the folder's numbers (a float16 file's table is float16-rounded, and the engine uses it).

    Raises:
        InteropError: a table of another shape, or far from the formula (not Whisper's).
    """
    length = cfg.stack_positions(decoder=False)[1]
    want = whisper_positions(length, cfg.d_model)
    if tuple(table.shape) != tuple(want.shape):
        raise InteropError(
            f"{where}: the encoder position table is {list(table.shape)}, the config says "
            f"{list(want.shape)}"
        )
    gap = float((table.float() - want).abs().max())
    if not gap <= TABLE_TOLERANCE:
        raise InteropError(
            f"{where}: the encoder position table differs from Whisper's sinusoids by {gap:.3g}; "
            "attnviz computes that table and cannot hold another"
        )
    return table.float()


def set_encoder_table(model: Transformer, table: Tensor) -> None:
    """Put a checked encoder table (:func:`check_encoder_table`) into the model's buffer."""
    with torch.no_grad():
        model.encoder_pe.copy_(table.to(model.encoder_pe.dtype))


def take_encoder_table(ours: dict[str, Tensor]) -> Tensor | None:
    """Remove and return the encoder table a family's ``weights`` put in ``ours`` (or None)."""
    return ours.pop(_ENCODER_TABLE, None)


def generation(gen: dict, cfg: ModelConfig, hf: dict, where: Path):
    """A Whisper folder's generation settings -> (:class:`WhisperRules`, most new tokens,
    settings not followed)."""
    check_generation(gen, cfg.tgt_vocab_size, where)
    vocab = cfg.tgt_vocab_size
    no_ts = gen.get("no_timestamps_token_id")
    prompt: tuple[int, ...] = ()
    forced = gen.get("forced_decoder_ids") or hf.get("forced_decoder_ids") or []
    if isinstance(forced, list) and forced:  # [[position, id], ...] after the start id
        prompt = token_ids([p[1] for p in forced if isinstance(p, list) and len(p) == 2
                            and p[1] is not None], "forced_decoder_ids", vocab, where)  # fmt: skip
    ignored = []
    if gen.get("is_multilingual") and not forced:
        ignored.append("language detection (the prompt names no language)")
    if no_ts is not None:
        no_ts = token_ids(no_ts, "no_timestamps_token_id", vocab, where)[0]
        if no_ts not in prompt:
            prompt = (*prompt, no_ts)
    rules = WhisperRules(
        prompt=prompt,
        banned=tuple(gen.get("suppress_tokens") or ()),
        begin_banned=tuple(gen.get("begin_suppress_tokens") or ()),
        timestamps=False,
        eos_id=cfg.eos_id,
        no_timestamps_id=no_ts if no_ts is not None else vocab,
    )
    return rules, max_new_tokens(gen, hf, where), ignored


WHISPER = register(
    Family(
        model_type="whisper",
        pad_id=50256,
        eos_id=50256,
        unk_id=50256,
        start_is_pad=False,
        config=config,
        table=table,
        lm_keys=("proj_out.weight",),
        audio=True,
        exported=False,  # the audio front-end and Whisper's generation config are not written
        generation=generation,
    )
)
