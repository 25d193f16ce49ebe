"""A CTranslate2 model folder (``model.bin``, ``config.json``, vocabularies) as an
:class:`attnviz.Checkpoint`, dispatched on the spec name ``model.bin`` carries.

Specs are a registry (:data:`SPECS`, one loader per spec name, added with
:func:`register_spec`); this module registers ``TransformerSpec`` (text encoder-decoders).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...checkpoint import Checkpoint
from ...core.config import ModelConfig
from ...core.errors import AttnvizError, CheckpointError, InteropError, shorten
from ...core.weights import build_model
from ...decode.greedy import LogitRules
from ..hf.common import read_json
from .binary import VERSIONS, ModelBin, read_model_bin
from .spm import SpmModels, SpmTokenizer, find_models
from .transformer import convert_transformer
from .vocabulary import VocabTokenizer, folder_tokenizer, read_vocabulary

WEIGHTS = "model.bin"
CONFIG = "config.json"
#: CTranslate2's LayerNorm epsilon where config.json gives none (``layer_norm_epsilon: null``)
DEFAULT_LAYER_NORM_EPS = 1e-5
#: ``translate_batch``'s default ``max_decoding_length``
DEFAULT_MAX_DECODING_LENGTH = 256
#: the logit of the token added for a zero-embedding start / padding: its softmax probability
#: is exactly 0 in float32, so probabilities and beam scores are CTranslate2's (which has no
#: such token), and it is finite (float16 too), so the weights pass the NaN/inf check
ABSENT_LOGIT = -1.0e4
#: pad tokens CTranslate2 vocabularies use (OpenNMT's ``<blank>``, fairseq's and Marian's ``<pad>``)
PAD_TOKENS = ("<blank>", "<pad>")

#: spec name -> ``load(folder, ModelBin, config.json, device) -> Checkpoint``
SPECS: dict[str, Callable[[Path, ModelBin, dict, Any], Checkpoint]] = {}


def register_spec(name: str, load: Callable[[Path, ModelBin, dict, Any], Checkpoint]) -> None:
    """Let :func:`load_ct2_checkpoint` open folders whose ``model.bin`` names spec ``name``."""
    SPECS[name] = load


def _model_folder(path: Path) -> Path:
    """The CTranslate2 folder meant by ``path``: itself, the folder of a ``model.bin`` given,
    or the ``model/`` inside an Argos Translate package."""
    if path.is_file():
        return path.parent if path.name == WEIGHTS else path
    if not (path / WEIGHTS).is_file() and (path / "model" / WEIGHTS).is_file():
        return path / "model"
    return path


def is_ct2_folder(path: str | Path) -> bool:
    """True for a folder (or its ``model.bin``) with ``model.bin`` and a ``config.json`` that
    is not a Hugging Face or attnviz one (those name a ``model_type`` or a ``config``)."""
    folder = _model_folder(Path(path).expanduser())
    if not (folder / WEIGHTS).is_file() or not (folder / CONFIG).is_file():
        return False
    try:
        data = json.loads((folder / CONFIG).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return True  # load_ct2_checkpoint says what is wrong with it
    return isinstance(data, dict) and "model_type" not in data and "config" not in data


def read_spec_name(path: Path) -> str:
    """The spec name at the start of ``model.bin`` (read before the weights)."""
    with open(path, "rb") as f:
        head = f.read(4 + 2 + 65536)
    if len(head) < 6:
        raise CheckpointError(f"{shorten(path, 300)} is too short to be a model.bin")
    (version,) = struct.unpack_from("<I", head)
    if version not in VERSIONS:
        read_model_bin(path)  # raises the one-line message about the version
    (length,) = struct.unpack_from("<H", head, 4)
    name = head[6 : 6 + length].rstrip(b"\0")
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{shorten(path, 300)}: the spec name is not UTF-8") from None


def load_ct2_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """A CTranslate2 folder as an :class:`attnviz.Checkpoint` (what ``load_checkpoint`` does
    with one).

    Raises:
        InteropError: a spec, option or variable attnviz does not implement; vocabularies
            that do not fit the weights.
        CheckpointError: a missing, cut-short or lying ``model.bin``, unreadable JSON.
    """
    folder = _model_folder(Path(path).expanduser())
    config = read_json(folder / CONFIG)
    spec = read_spec_name(folder / WEIGHTS)
    if spec not in SPECS:
        raise InteropError(
            f"{folder}: model.bin holds a {shorten(spec)}, which attnviz does not open "
            f"(it opens {', '.join(SPECS)})"
        )
    return SPECS[spec](folder, read_model_bin(folder / WEIGHTS), config, device)


# -- TransformerSpec ---------------------------------------------------------------------------
def _vocabularies(folder: Path, src_rows: int, tgt_rows: int) -> tuple[list[str], list[str]]:
    """The source and target vocabularies, each file's size bounded by its embedding rows."""
    shared = read_vocabulary(folder, "shared_vocabulary", max(src_rows, tgt_rows))
    if shared is not None:
        return shared, shared
    src, tgt = (
        read_vocabulary(folder, "source_vocabulary", src_rows),
        read_vocabulary(folder, "target_vocabulary", tgt_rows),
    )
    if src is None and read_vocabulary(folder, "source_1_vocabulary", src_rows) is not None:
        raise InteropError(
            f"{folder}: several source vocabularies (source factors) are not implemented"
        )
    if src is None or tgt is None:
        raise CheckpointError(
            f"{folder}: no shared_vocabulary (or source_ and target_vocabulary) .json or .txt"
        )
    return src, tgt


def _option(config: dict, key: str, default: Any) -> Any:
    value = config.get(key, default)
    return default if value is None else value


def _special_id(vocab: list[str], token: Any, key: str, folder: Path) -> int:
    if not isinstance(token, str) or token not in vocab:
        raise InteropError(
            f"{folder}: config.json's {key} {shorten(repr(token))} is not in the vocabulary"
        )
    return vocab.index(token)


def _grow(t: Tensor | None) -> Tensor | None:
    """One more row of zeros (the start / pad token CTranslate2 does not store)."""
    if t is None:
        return None
    return torch.cat([t, t.new_zeros(1, *t.shape[1:])])


def _weight_dtypes(model_bin: ModelBin) -> list[str]:
    """How the file stores its weights (``["float32", "int8"]``: int8 matrices, float32
    biases and norms), flags and counts left out."""
    variables, stored = model_bin.variables, model_bin.stored_dtypes
    return sorted({stored[k] for k, v in variables.items() if k in stored and v.dim() > 0
                   and v.is_floating_point()})  # fmt: skip


def load_transformer_spec(folder: Path, model_bin: ModelBin, config: dict, device) -> Checkpoint:
    """A ``TransformerSpec`` folder -> Checkpoint (see :mod:`.transformer` for the weights).

    Special ids come from ``config.json``'s tokens looked up in the vocabulary. Where the
    decoder starts from a zero embedding (Marian) or the vocabulary has no pad token, one
    row of zeros is added at the end of the embeddings and the output matrix as that token;
    it is never produced (its logit is :data:`ABSENT_LOGIT` and it is banned, as CTranslate2
    cannot produce it).

    Text is read with the folder's ``tokenizer.json`` where its ids are the vocabulary's, else
    with the SentencePiece model the folder is shipped with (:mod:`.spm`), else as tokens
    separated by spaces.
    """
    if config.get("multi_query_attention"):
        raise InteropError(f"{folder}: multi_query_attention is not implemented in attnviz")
    eps = _option(config, "layer_norm_epsilon", DEFAULT_LAYER_NORM_EPS)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise InteropError(
            f"{folder}: layer_norm_epsilon must be a number, got {shorten(repr(eps))}"
        )
    fields, ours = convert_transformer(model_bin.variables, folder, float(eps))
    vocab = fields.pop("vocab")
    src_vocab, tgt_vocab = _vocabularies(folder, vocab["src"].shape[0], vocab["tgt"].shape[0])
    for side, tokens, rows in (
        ("source", src_vocab, vocab["src"].shape[0]),
        ("target", tgt_vocab, vocab["tgt"].shape[0]),
        ("target", tgt_vocab, vocab["lm"].shape[0]),
    ):
        if len(tokens) != rows:
            raise InteropError(
                f"{folder}: the {side} vocabulary has {len(tokens)} tokens but the weights have "
                f"{rows} rows"
            )
    eos = _special_id(tgt_vocab, _option(config, "eos_token", "</s>"), "eos_token", folder)
    unk = _special_id(tgt_vocab, _option(config, "unk_token", "<unk>"), "unk_token", folder)
    src_unk = _special_id(src_vocab, _option(config, "unk_token", "<unk>"), "unk_token", folder)
    if src_unk != unk:
        raise InteropError(f"{folder}: the unknown token has other ids in the two vocabularies")
    pads = [t for t in PAD_TOKENS if t in src_vocab and t in tgt_vocab
            and src_vocab.index(t) == tgt_vocab.index(t)]  # fmt: skip
    grow = vocab["start_from_zero"] or not pads
    extra = len(tgt_vocab) if grow else None
    pad = tgt_vocab.index(pads[0]) if pads else extra
    if vocab["start_from_zero"]:
        bos = extra
    else:
        start = config.get("decoder_start_token", "<s>")
        if start is None:
            raise InteropError(
                f"{folder}: config.json has no decoder_start_token (each input would need a "
                "target prefix); attnviz needs one start token"
            )
        bos = _special_id(tgt_vocab, start, "decoder_start_token", folder)
    if len(src_vocab) != len(tgt_vocab) and grow:
        raise InteropError(
            f"{folder}: vocabularies of different sizes ({len(src_vocab)}, {len(tgt_vocab)}) "
            "without a shared pad token are not implemented"
        )
    share = vocab["src"] is vocab["tgt"] or (
        src_vocab == tgt_vocab and torch.equal(vocab["src"], vocab["tgt"])
    )
    tie = vocab["lm"] is vocab["tgt"] or torch.equal(vocab["lm"], vocab["tgt"])
    grown = _grow if grow else (lambda t: t)
    ours["src_embed.weight"] = grown(vocab["src"])
    if not share:
        ours["tgt_embed.weight"] = grown(vocab["tgt"])
    if not tie:
        ours["generator.weight"] = grown(vocab["lm"])
    bias = vocab["lm_bias"]
    if grow:  # the added token's logit: far below any other, so it takes no probability
        bias = vocab["lm"].new_zeros(vocab["lm"].shape[0]) if bias is None else bias
        bias = torch.cat([bias, bias.new_full((1,), ABSENT_LOGIT)])
    if bias is not None:
        ours["generator.bias"] = bias
    ours = {k: v.float() for k, v in ours.items()}  # float16 / bfloat16 files
    names = (src_vocab, tgt_vocab)
    if grow:
        label = "<pad>" if "<pad>" not in tgt_vocab else "<start>"
        names = (src_vocab + [label], tgt_vocab + [label])
    try:
        cfg = ModelConfig(
            src_vocab_size=len(names[0]),
            tgt_vocab_size=len(names[1]),
            share_embeddings=bool(share),
            tie_output=bool(tie),
            output_bias=bias is not None,
            pad_id=pad,
            bos_id=bos,
            eos_id=eos,
            unk_id=unk,
            **fields,
        )
    except AttnvizError as exc:
        raise InteropError(
            f"{folder}: the model does not fit attnviz's Transformer: {exc}"
        ) from None
    model = build_model(cfg, ours, folder).to(device)
    specials = cfg.special_ids
    add_bos, add_eos = bool(config.get("add_source_bos")), bool(config.get("add_source_eos"))
    prefix = (
        (_special_id(src_vocab, _option(config, "bos_token", "<s>"), "bos_token", folder),)
        if add_bos
        else ()
    )
    suffix = (src_vocab.index(_option(config, "eos_token", "</s>")),) if add_eos else ()
    hidden = (len(tgt_vocab),) if grow else ()
    tokenizer, why = None, None
    if src_vocab == tgt_vocab and not (add_bos or add_eos):
        tokenizer, why = folder_tokenizer(folder, tgt_vocab, specials, int(grow))
    spm = find_models(folder, config) if tokenizer is None else SpmModels()
    if tokenizer is not None:
        src_tok, tgt_tok = tokenizer, tokenizer.for_target()
    elif spm.source is not None:
        src_tok = SpmTokenizer(names[0], specials, spm.source, spm.paths[0], prefix, suffix,
                               hidden=hidden)  # fmt: skip
        tgt_tok = SpmTokenizer(names[1], specials, spm.target, spm.paths[-1], side="target",
                               hidden=hidden)  # fmt: skip
    else:
        why = why or spm.why
        why = why or f"{folder} has only a token vocabulary: type tokens separated by spaces"
        src_tok = VocabTokenizer(names[0], specials, prefix, suffix, why, hidden=hidden)
        tgt_tok = VocabTokenizer(names[1], specials, why=why, side="target", hidden=hidden)
    meta = {
        "format": "ctranslate2",
        "spec": model_bin.spec,
        "spec_revision": model_bin.revision,
        "ct2_config": config,
        "stored_dtypes": _weight_dtypes(model_bin),
        "tokenizer_missing": why,
        "sentencepiece": [str(p) for p in spm.paths],
    }
    rules = LogitRules(banned=(len(tgt_vocab),)) if grow else None
    return Checkpoint(
        model, src_tok, tgt_tok, cfg, meta, folder, rules=rules,
        max_new_tokens=DEFAULT_MAX_DECODING_LENGTH,
    )  # fmt: skip


register_spec("TransformerSpec", load_transformer_spec)
