"""CTranslate2's ``WhisperSpec`` (faster-whisper folders) -> our Transformer with an audio
source, and Whisper's generation rules as ``ctranslate2.models.Whisper.generate`` applies
them: the folder's ``suppress_ids`` everywhere (``suppress_tokens=[-1]``), its
``suppress_ids_begin`` at the first text token (``suppress_blank=True``), the timestamp rules
when the prompt has no ``<|notimestamps|>``, and at most ``min(448 / 2, 448 - prompt)`` text
tokens.

A float16 file is computed in float32, as CTranslate2 computes it on a CPU. The text side
uses the folder's ``tokenizer.json`` (through transformers' Whisper tokenizer), or shows ids.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...checkpoint import Checkpoint
from ...core.config import ModelConfig
from ...core.errors import AttnvizError, InteropError, shorten
from ...core.weights import build_model
from ...decode.rules import WhisperRules
from ..hf.common import Source
from ..hf.whisper import check_encoder_table, set_encoder_table
from ..hf_tokenizer import HFTokenizer, IdTokenizer
from .binary import ModelBin
from .folder import register_spec
from .tokenizer_file import load_fast_tokenizer
from .variables import (
    ACTIVATIONS,
    DECODER_LAYER_VARIABLES,
    ENCODER_LAYER_VARIABLES,
    count_layers,
    linear,
    norm,
    put,
    scalar,
)
from .vocabulary import read_vocabulary

#: flags that must hold these values (None: any value; they only say what CTranslate2 returns)
_FLAGS = {
    "decoder/alibi": 0,
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/start_from_zero_embedding": 0,
    "decoder/alignment_layer": None,
    "decoder/alignment_heads": None,
}
#: ``Whisper.generate``'s default ``max_length`` (the prompt counts against it)
MAX_LENGTH = 448
#: seconds between two timestamp tokens
TIMESTAMP_SECONDS = 0.02
START, END, NO_TIMESTAMPS = "<|startoftranscript|>", "<|endoftext|>", "<|notimestamps|>"


def _attention(src: Source, scope: str, ours: str, parts: tuple[str, ...]) -> dict[str, Tensor]:
    """CTranslate2's fused projections (q/k/v in one, or q then k/v) -> ``in_proj``."""
    weights = [src.take(f"{scope}/{p}/weight") for p in parts]
    biases = [src.take(f"{scope}/{p}/bias") for p in parts]
    out_scope = f"{scope}/linear_{len(parts)}"
    return {
        f"{ours}in_proj_weight": torch.cat(weights),
        f"{ours}in_proj_bias": torch.cat(biases),
        f"{ours}out_proj.weight": src.take(f"{out_scope}/weight"),
        f"{ours}out_proj.bias": src.take(f"{out_scope}/bias"),
    }


def convert_whisper(
    model_bin: ModelBin, folder: Path
) -> tuple[dict[str, Any], dict[str, Tensor], Tensor, bool]:
    """``WhisperSpec`` variables -> (config fields, our state dict, the encoder's position
    table, whether the output matrix is the token table)."""
    tensors = {k: v for k, v in model_bin.variables.items() if k not in model_bin.aliases}
    src = Source(tensors, folder)
    heads = {s: scalar(src, f"{s}/num_heads") for s in ("encoder", "decoder")}
    if heads["encoder"] != heads["decoder"] or heads["encoder"] is None:
        raise InteropError(f"{folder}: the stacks' head counts differ or are missing ({heads})")
    act = scalar(src, "decoder/activation")
    if act not in ACTIVATIONS:
        raise InteropError(f"{folder}: activation id {act} is not one attnviz implements")
    for name, want in _FLAGS.items():
        value = scalar(src, name)
        if want is not None and value is not None and value != want:
            raise InteropError(f"{folder}: {name}={value:g} is not implemented (expected {want})")
    table = src.take("decoder/embeddings/weight")
    conv1 = src.take("encoder/conv1/weight")  # [D, n_mels, 3]
    d_ff = src.take("encoder/layer_0/ffn/linear_0/weight").shape[0]
    enc_table = src.take("encoder/position_encodings/encodings")
    dec_table = src.take("decoder/position_encodings/encodings")
    fields = dict(
        source="audio",
        n_mels=int(conv1.shape[1]),
        d_model=int(table.shape[1]),
        n_heads=int(heads["encoder"]),
        n_encoder_layers=count_layers(tensors, "encoder", folder, ENCODER_LAYER_VARIABLES),
        n_decoder_layers=count_layers(tensors, "decoder", folder, DECODER_LAYER_VARIABLES),
        d_ff=int(d_ff),
        activation=ACTIVATIONS[int(act)],
        norm_first=True,
        final_norm=True,
        positions="learned",
        encoder_positions="whisper",
        max_len=int(dec_table.shape[0]),
        max_source_len=int(enc_table.shape[0]),
        scale_embeddings=False,
        output_bias=False,
        dropout=0.0,
    )
    ours: dict[str, Tensor] = {"tgt_embed.weight": table, "decoder.pos_embed.weight": dec_table}
    ours["frontend.conv1.weight"] = conv1
    ours["frontend.conv1.bias"] = src.take("encoder/conv1/bias")
    put(ours, "frontend.conv2", *linear(src, "encoder/conv2"))
    for stack, n in (
        ("encoder", fields["n_encoder_layers"]),
        ("decoder", fields["n_decoder_layers"]),
    ):
        for i in range(n):
            p, o = f"{stack}/layer_{i}/", f"{stack}.layers.{i}."
            ours |= _attention(src, f"{p}self_attention", f"{o}self_attn.", ("linear_0",))
            ours |= norm(src, f"{p}self_attention/layer_norm", f"{o}norm1")
            if stack == "decoder":
                ours |= _attention(
                    src, f"{p}attention", f"{o}cross_attn.", ("linear_0", "linear_1")
                )
                ours |= norm(src, f"{p}attention/layer_norm", f"{o}norm2")
            put(ours, f"{o}ff.linear1", *linear(src, f"{p}ffn/linear_0"))
            put(ours, f"{o}ff.linear2", *linear(src, f"{p}ffn/linear_1"))
            ours |= norm(
                src, f"{p}ffn/layer_norm", f"{o}{'norm3' if stack == 'decoder' else 'norm2'}"
            )
        ours |= norm(src, f"{stack}/layer_norm", f"{stack}.norm")
    projection = model_bin.variables.get("decoder/projection/weight")
    tied = model_bin.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight" or (
        projection is not None and torch.equal(projection, table)
    )
    if not tied:
        if projection is None:
            raise InteropError(f"{folder}: the weights lack decoder/projection/weight")
        src.take("decoder/projection/weight")
        ours["generator.weight"] = projection
    left = src.leftovers()
    if left:
        more = f" and {len(left) - 4} more" if len(left) > 4 else ""
        raise InteropError(
            f"{folder}: variables attnviz does not know: {', '.join(left[:4])}{more}"
        )
    return fields, {k: v.float() for k, v in ours.items()}, enc_table.float(), tied


def _ids(config: dict, key: str, vocab: int, folder: Path) -> tuple[int, ...]:
    value = config.get(key) or []
    if (
        not isinstance(value, list)
        or len(value) > vocab
        or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in value)
    ):
        raise InteropError(
            f"{folder}: config.json's {key} must be at most {vocab} token ids in 0..{vocab - 1}"
        )
    return tuple(value)


def _check_suppressed(banned: tuple[int, ...], begin: tuple[int, ...], end: int, folder: Path):
    """Refuse ``suppress_ids`` that leave no text token or no end token to produce (nothing
    could be transcribed; the decode would run to its limit on banned tokens), and
    ``suppress_ids_begin`` that leave nothing for the first step."""
    banned_set = set(banned)
    if end in banned_set:
        raise InteropError(
            f"{folder}: config.json's suppress_ids suppress <|endoftext|>: a transcript could "
            "never end"
        )
    if banned_set.issuperset(range(end)):
        raise InteropError(
            f"{folder}: config.json's suppress_ids suppress every text token: nothing could be "
            "transcribed"
        )
    if (banned_set | set(begin)).issuperset(range(end + 1)):
        raise InteropError(
            f"{folder}: config.json's suppress_ids and suppress_ids_begin suppress every token "
            "at the first step: nothing could be transcribed"
        )


def _alignment_heads(config: dict, layers: int, heads: int, folder: Path) -> list[list[int]]:
    """``config.json``'s ``alignment_heads`` checked: distinct ``[layer, head]`` pairs of ints
    inside the decoder, at most ``layers * heads`` of them (word timestamps read them)."""
    value = config.get("alignment_heads")
    if value is None:
        return []
    where = f"{folder}: config.json's alignment_heads"
    if not isinstance(value, list):
        raise InteropError(f"{where} must be a list of [layer, head] pairs")
    if len(value) > layers * heads:
        raise InteropError(
            f"{where} lists {len(value):,} heads; the decoder has {layers * heads} "
            f"({layers} layers of {heads})"
        )
    seen: set[tuple[int, int]] = set()
    for pair in value:
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
        )
        if not ok:
            raise InteropError(f"{where} must be [layer, head] pairs, got {shorten(repr(pair))}")
        layer, head = pair
        if not (0 <= layer < layers and 0 <= head < heads):
            raise InteropError(
                f"{where} names layer {layer} head {head}; the decoder has {layers} layers of "
                f"{heads} heads"
            )
        if (layer, head) in seen:
            raise InteropError(f"{where} lists layer {layer} head {head} twice")
        seen.add((layer, head))
    return [list(p) for p in value]


def whisper_rules(ckpt: Checkpoint, timestamps: bool = False) -> WhisperRules:
    """The checkpoint's Whisper rules with timestamps on (the prompt loses
    ``<|notimestamps|>``, the timestamp rules apply) or off."""
    rules = ckpt.rules
    if not isinstance(rules, WhisperRules):
        raise InteropError("timestamps are for Whisper checkpoints")
    prompt = tuple(i for i in rules.prompt if i != rules.no_timestamps_id)
    if not timestamps:
        prompt = (*prompt, rules.no_timestamps_id)
    return dataclasses.replace(rules, prompt=prompt, timestamps=timestamps)


def max_text_tokens(rules: WhisperRules, max_length: int = MAX_LENGTH) -> int:
    """Most tokens after the start id that ``Whisper.generate(max_length=...)`` produces with
    these rules: the prompt, then ``min(max_length / 2, max_length - prompt)`` text tokens."""
    n = len(rules.prompt)
    return n + min(max_length // 2, max_length - n)


def _tokenizer(folder: Path, specials: dict[str, int], vocab: int):
    """The folder's ``tokenizer.json`` as a Whisper tokenizer, or ``(None, why)``."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None, f"{folder} has no tokenizer.json; ids in, ids out"
    tok, why = load_fast_tokenizer(path, "WhisperTokenizerFast")
    if tok is None:
        return None, f"{why}; ids in, ids out"
    return HFTokenizer(tok, specials, folder, vocab, side="target"), None


def load_whisper_spec(folder: Path, model_bin: ModelBin, config: dict, device) -> Checkpoint:
    """A ``WhisperSpec`` folder -> Checkpoint whose ``rules`` are ``generate``'s defaults for
    the prompt ``<|startoftranscript|> <|notimestamps|>`` (English-only models; a multilingual
    one gets ``<|en|> <|transcribe|>`` first) and whose ``beam`` is CTranslate2's."""
    fields, ours, enc_table, tied = convert_whisper(model_bin, folder)
    rows = ours["tgt_embed.weight"].shape[0]
    vocab = read_vocabulary(folder, "vocabulary", rows)
    if vocab is None or len(vocab) != rows:
        got = "no vocabulary.txt" if vocab is None else f"{len(vocab)} tokens"
        raise InteropError(f"{folder}: {got} for {rows} embedding rows")
    index = {t: i for i, t in enumerate(vocab)}
    for token in (START, END, NO_TIMESTAMPS):
        if token not in index:
            raise InteropError(f"{folder}: the vocabulary has no {token}")
    end = index[END]
    try:
        cfg = ModelConfig(
            src_vocab_size=rows, tgt_vocab_size=rows, tie_output=tied, pad_id=end,
            bos_id=index[START], eos_id=end, unk_id=end, **fields,
        )  # fmt: skip
    except AttnvizError as exc:
        raise InteropError(
            f"{folder}: the model does not fit attnviz's Transformer: {exc}"
        ) from None
    _alignment_heads(config, cfg.n_decoder_layers, cfg.n_heads, folder)
    banned = _ids(config, "suppress_ids", rows, folder)
    begin_banned = _ids(config, "suppress_ids_begin", rows, folder)
    _check_suppressed(banned, begin_banned, end, folder)
    table = check_encoder_table(enc_table, cfg, folder)
    model = build_model(cfg, ours, folder)
    set_encoder_table(model, table)
    prompt: tuple[int, ...] = ()
    if config.get("lang_ids") and rows >= 51865:  # multilingual: CTranslate2 asks for a prompt
        prompt = tuple(index[t] for t in ("<|en|>", "<|transcribe|>") if t in index)
    rules = WhisperRules(
        prompt=(*prompt, index[NO_TIMESTAMPS]),
        banned=banned,
        begin_banned=begin_banned,
        timestamps=False,
        eos_id=end,
        no_timestamps_id=index[NO_TIMESTAMPS],
    )
    tokenizer, why = _tokenizer(folder, cfg.special_ids, rows)
    if tokenizer is None:
        tokenizer = IdTokenizer(cfg.special_ids, rows, why, side="target")
    begin = index[NO_TIMESTAMPS] + 1  # timestamp ids: 20 ms apart, rarely in tokenizer.json
    for i in range(begin, min(rows, len(tokenizer.tokens))):
        tokenizer.tokens[i] = f"<|{(i - begin) * TIMESTAMP_SECONDS:.2f}|>"
    meta = {
        "format": "ctranslate2",
        "engine": "ctranslate2",
        "spec": model_bin.spec,
        "spec_revision": model_bin.revision,
        "ct2_config": config,
        "quantization": sorted(set(model_bin.stored_dtypes.values()) - {"int16", "int32"}),
        "tokenizer_missing": why,
        "source_kind": "audio",
    }
    return Checkpoint(
        model.to(device), None, tokenizer, cfg, meta, folder, rules=rules,
        max_new_tokens=max_text_tokens(rules),
    )  # fmt: skip


register_spec("WhisperSpec", load_whisper_spec)
