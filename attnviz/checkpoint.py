"""Checkpoints: a folder with ``model.safetensors`` and ``config.json``; never pickle.

``model.safetensors`` holds the weights and, in its header, the complete metadata as JSON
(model config, both tokenizers, task, metrics history, training command, attnviz version).
``config.json`` is a readable copy of that metadata. Because the weights file carries its own
metadata and is replaced in one ``os.replace``, a run killed at any moment leaves either the
old or the new checkpoint, never a mix; where the two files disagree, the header wins (it
was written with the weights). A plain safetensors file without the header entry is read
with ``config.json`` instead, so a checkpoint can also be written by hand.

Loading validates every tensor name and shape against the config and raises
:class:`~attnviz.core.errors.CheckpointError` with one line saying what is wrong.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .core.config import ModelConfig
from .core.errors import AttnvizError, CheckpointError, InputError, one_line, shorten
from .core.files import read_tensors as read_tensors  # imported from here too
from .core.files import write_json_atomically as write_json_atomically
from .core.files import write_tensors as write_tensors
from .core.model import Transformer
from .core.version import __version__
from .core.weights import build_model, unique_state_dict
from .data.batch import Prompt
from .data.tokenizer import Encoding, Tokenizer, check_text
from .decode.batched import greedy_decode, greedy_texts
from .decode.beam import BeamResult, beam_predict, folder_num_beams
from .decode.decoding import Decoding
from .decode.fill import fill_texts
from .decode.greedy import GreedyStepper, LogitRules
from .decode.scoring import Scored, score_reference

FORMAT = "attnviz-checkpoint/1"
WEIGHTS = "model.safetensors"
METADATA = "config.json"


# -- save / load ----------------------------------------------------------------------------
def save_checkpoint(
    path: str | Path,
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    meta: dict | None = None,
) -> Path:
    """Save a checkpoint folder (created if needed). ``meta``: task, metrics, command, ...

    Returns:
        the folder.
    """

    cfg = model.config
    _check_vocab(cfg, src_tokenizer, tgt_tokenizer, CheckpointError)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        **(meta or {}),
        "format": FORMAT,
        "attnviz_version": __version__,
        "config": cfg.to_dict(),
        "src_tokenizer": src_tokenizer.to_dict(),
        "tgt_tokenizer": tgt_tokenizer.to_dict(),
    }
    write_tensors(folder / WEIGHTS, unique_state_dict(model), doc)
    write_json_atomically(folder / METADATA, doc)
    return folder


def _check_vocab(cfg: ModelConfig, src: Tokenizer, tgt: Tokenizer, error: type) -> None:
    for side, tok, size in (
        ("source", src, cfg.src_vocab_size),
        ("target", tgt, cfg.tgt_vocab_size),
    ):
        if len(tok) != size:
            raise error(f"the {side} tokenizer has {len(tok)} tokens but the model expects {size}")
        if tok.specials != cfg.special_ids:
            raise error(
                f"the {side} tokenizer's special ids {tok.specials} differ from the model "
                f"config's {cfg.special_ids}"
            )


#: Other folder formats :func:`load_checkpoint` opens: ``(is_format(path), load(path,
#: device))`` pairs, added by the modules that read them (:mod:`attnviz.interop.hf`), so this
#: module imports none of them.
FOLDER_FORMATS: list[tuple[Callable[[Path], bool], Callable[..., Checkpoint]]] = []


def register_folder_format(
    is_format: Callable[[Path], bool], load: Callable[..., Checkpoint]
) -> None:
    """Let :func:`load_checkpoint` open another kind of folder with ``load(path, device)``."""
    if (is_format, load) not in FOLDER_FORMATS:
        FOLDER_FORMATS.append((is_format, load))


def _locate(path: str | Path) -> Path:
    path = Path(path)
    if path.is_file() and path.suffix == ".safetensors":
        return path
    if path.is_dir():
        return path / WEIGHTS
    if path.is_file():
        return path  # let read_tensors name what it is (a pickle, say)
    raise CheckpointError(
        f"no checkpoint at {path}: expected a folder with {WEIGHTS} and {METADATA}"
    )


def _only_attnviz_errors(load):
    """Whatever a file says, loading it raises an attnviz error or nothing: a string where a
    number belongs (TypeError), deeply nested JSON (RecursionError), a file that does not fit
    in memory (MemoryError) become one :class:`CheckpointError` naming the file."""

    @functools.wraps(load)
    def guarded(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
        try:
            return load(path, device)
        except AttnvizError:
            raise
        except (MemoryError, RecursionError, ArithmeticError, LookupError, TypeError,
                ValueError, AttributeError) as exc:  # fmt: skip
            raise CheckpointError(
                f"{shorten(path, 300)} could not be loaded: {one_line(exc, 300)}"
            ) from exc

    return guarded


@_only_attnviz_errors
def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint folder (or its ``model.safetensors``) into an eval-mode model.

    A Hugging Face folder (``config.json`` with a ``model_type``: Marian, BART, mBART,
    Pegasus, FSMT, T5) is opened the same way, through :mod:`attnviz.interop.hf`; so are a
    CTranslate2 folder and a GGUF file (``*.gguf``: llama, qwen2, gpt2, gemma3, dequantized to
    float32), through :mod:`attnviz.interop.ctranslate2` and :mod:`attnviz.interop.gguf`.

    Raises:
        CheckpointError: missing or truncated file, a pickle, bad metadata, or tensors whose
            names or shapes do not match the config.
        InteropError: a Hugging Face folder of an unsupported ``model_type``, a GGUF file of
            an architecture attnviz does not run.
    """
    path = Path(path).expanduser()
    for is_format, load in FOLDER_FORMATS:  # Hugging Face folders (attnviz.interop.hf)
        if is_format(path):
            return load(path, device)
        if path.is_file() and path.name == WEIGHTS and is_format(path.parent):
            return load(path.parent, device)
    weights = _locate(path)
    tensors, meta = read_tensors(weights)
    if meta is None:
        meta_file = weights.with_name(METADATA)
        if not meta_file.is_file():
            raise CheckpointError(f"{meta_file} is missing and {weights} carries no metadata")
        try:
            meta = json.loads(meta_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise CheckpointError(f"{meta_file} is not valid JSON ({one_line(exc, 200)})") from None
    if not isinstance(meta, dict) or "config" not in meta:
        raise CheckpointError(f"{weights}: the metadata has no model 'config'")
    try:
        config = ModelConfig.from_dict(meta["config"])
        src_tok = Tokenizer.from_dict(meta.get("src_tokenizer"))
        tgt_tok = Tokenizer.from_dict(meta.get("tgt_tokenizer"))
        prompt = None
        if not config.has_cross and meta.get("prompt") is not None:
            prompt = Prompt.from_dict(meta["prompt"], config.tgt_vocab_size)
    except AttnvizError as exc:
        raise CheckpointError(f"{weights}: {exc}") from None
    except (TypeError, ValueError, LookupError, AttributeError, RecursionError) as exc:
        # a tokenizer entry of the wrong type (a number for a token list, say)
        raise CheckpointError(f"{weights}: unusable metadata ({one_line(exc, 200)})") from None
    _check_vocab(config, src_tok, tgt_tok, CheckpointError)
    model = build_model(config, tensors, weights, owned=True)  # shapes on the meta device first
    return Checkpoint(
        model.to(device).eval(), src_tok, tgt_tok, config, meta, weights.parent, prompt=prompt
    )


# -- using a checkpoint ---------------------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """A greedy prediction with everything the app shows beside it.

    Attributes:
        text: the decoded output.
        source: the encoded input (pieces, ids, unknown pieces).
        tokens: output ids, without BOS; EOS included when the model emitted it.
    """

    text: str
    source: Encoding | None  # None for an audio input
    tokens: list[int]


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``.model`` (eval mode), tokenizers, ``.config``, ``.meta``.

    ``rules`` and ``max_new_tokens`` come from a Hugging Face folder's generation config
    (None for attnviz checkpoints); they are made into one :class:`Decoding` value,
    ``.decoding``, which every decode of this checkpoint asks (``predict``, the stepper, beam
    search, the app's Step and Run): :meth:`limit` is its length rule. A Hugging Face folder
    without a working tokenizer reads and shows token ids (``meta["tokenizer_missing"]`` says
    why).
    """

    model: Transformer
    src_tokenizer: Tokenizer | None
    tgt_tokenizer: Tokenizer | None
    config: ModelConfig
    meta: dict
    path: Path
    rules: LogitRules | None = None
    max_new_tokens: int | None = None
    #: how a decoder-only model trained by attnviz reads a source (``<bos> source <sep>``)
    prompt: Prompt | None = None
    decoding: Decoding = field(init=False, repr=False)
    #: a sentence-transformers folder's pooling, Dense and Normalize (``embed``); None: none
    embedder: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        hf_prompt = self.config.decoder_only and self.meta.get("format") == "huggingface"
        self.decoding = Decoding.of(
            self.config, self.rules, self.max_new_tokens,
            self.meta.get("generation_config"), counts_prompt=hf_prompt,
        )  # fmt: skip

    @property
    def task(self) -> str | None:
        return self.meta.get("task")

    @property
    def is_audio(self) -> bool:
        """The model reads audio (Whisper): inputs are a path or 16 kHz samples, not text."""
        return self.config.reads_audio

    def source_tensor(self, source) -> Tensor:
        """An input as the encoder takes it: ``[1, Ts]`` ids of a text, or for an audio model
        ``[1, n_mels, 3000]`` log-mel features of a clip (a path or samples; see
        :func:`attnviz.data.audio.load_audio`). Bad input raises :class:`InputError`."""
        if self.is_audio:
            from .data.audio import log_mel

            return log_mel(source, self.config.n_mels)[None].to(self.device)
        return torch.tensor([self.encode_source(source).ids], device=self.device)

    def limit(self, prompt_len: int, asked: int | None = None) -> int:
        """Most tokens to produce after an input of ``prompt_len`` ids (or frames):
        ``asked`` when given, else this checkpoint's limit (:meth:`Decoding.limit`: a
        decoder-only folder's ``max_length`` counts the prompt, as transformers counts it),
        within the model's positions."""
        return self.decoding.limit(self.config, prompt_len, asked)

    def encode_source(self, text: str) -> Encoding:
        """Tokenize an input; empty or over-long input raises :class:`InputError`.

        Unknown characters/words become UNK and are listed in ``Encoding.unknown``.
        """
        if self.is_audio:
            raise InputError("this is a speech model: give a clip (a path or 16 kHz samples)")
        if self.src_tokenizer is None:
            why = self.meta.get("tokenizer_missing") or "this checkpoint has no tokenizer"
            raise InputError(f"cannot read text: {why}")
        check_text(text, self.config.max_len)  # before the tokenizer reads a character of it
        enc = self.src_tokenizer.encode(text)
        if not enc.ids or not self.src_tokenizer.split(text):  # a folder's tokenizer adds </s>
            raise InputError("the input is empty: type something to run the model on")
        if self.prompt is not None:  # the layout a one-stack model was trained on
            ids = (  # a masked-LM model reads the text whole: <bos> text <eos>
                [self.prompt.bos_id, *enc.ids, self.config.eos_id]
                if self.masked_lm
                else self.prompt.ids(enc.ids)
            )
            pieces = [self.src_tokenizer.token(i) for i in ids[:1]] + list(enc.pieces)
            pieces += [self.src_tokenizer.token(i) for i in ids[1 + len(enc.ids) :]]
            enc = Encoding(ids, pieces, enc.unknown)
        limit = self.config.max_len
        if len(enc.ids) > limit:
            raise InputError(
                f"the input has {len(enc.ids)} tokens; this model takes at most {limit}"
            )
        return enc

    def greedy(
        self,
        src: Tensor,
        src_pad_mask: Tensor | None = None,
        edits: Sequence = (),
        cache: bool = True,
        max_len: int | None = None,
    ) -> Tensor:
        """:func:`~attnviz.decode.batched.greedy_decode` with this checkpoint's special ids, length
        limit and generation rules: every greedy decode of an analysis goes through here, so
        it decodes what :meth:`predict` decodes.

        Args:
            src: ``[B, Ts]`` source ids (an audio model: ``[B, n_mels, 3000]`` features, a
                path or samples); ``src_pad_mask``: ``[B, Ts]`` True at padding.
            edits: attention edits of every pass (see :func:`attnviz.core.record`).
        Returns:
            ``[B, T]`` output ids without the start id.
        """
        cfg = self.config
        if self.is_audio and not isinstance(src, Tensor):
            src = self.source_tensor(src)
        return greedy_decode(
            self.model,
            src,
            cfg.bos_id,
            cfg.eos_id,
            max_len=self.limit(src.shape[-1], max_len),
            src_pad_mask=src_pad_mask,
            edits=edits,
            cache=cache,
            rules=self.rules,
        )

    def predict_details(
        self, text: str, max_len: int | None = None, num_beams: int = 1
    ) -> Prediction:
        """Greedy-decode one input (the stepper's tokens; beam search for ``num_beams > 1``);
        see :class:`Prediction`."""
        self._generates()
        enc = None if self.is_audio else self.encode_source(text)
        if num_beams > 1:
            best = self.beam(text, num_beams, max_len)
            return Prediction(self.tgt_tokenizer.decode(best.tokens), enc, best.tokens)
        src = self.source_tensor(text)
        cfg = self.config
        out = greedy_decode(
            self.model,
            src,
            cfg.bos_id,
            cfg.eos_id,
            max_len=self.limit(src.shape[-1], max_len),
            rules=self.rules,
        )[0].tolist()
        tokens = self.decoding.until_end(out)
        return Prediction(self.tgt_tokenizer.decode(tokens), enc, tokens)

    def task_outputs(self, examples: Sequence) -> list[str]:
        """The model's answer to each example (``.src``, ``.tgt``): :meth:`predict_batch`, or
        for a masked-LM model trained here the target masked (one mask per token of
        ``.tgt``) and filled in one pass (:func:`attnviz.decode.fill.fill_texts`)."""
        if self.masked_lm:
            return fill_texts(self.model, self.src_tokenizer, self.tgt_tokenizer, self.prompt,
                              examples)  # fmt: skip
        return self.predict_batch([e.src for e in examples])

    @property
    def masked_lm(self) -> bool:
        """A masked-LM model trained here (its stored layout has ``loss="mlm"``)."""
        return self.prompt is not None and self.prompt.mlm

    def _generates(self) -> None:
        if self.config.encoder_only:
            raise InputError(
                "an encoder-only model reads its input at once and generates nothing: fill its "
                "mask tokens with attnviz.analysis.fill_mask (or task_outputs for a task's inputs)"
            )

    def stepper(self, text: str, max_len: int | None = None, edits: Sequence = ()) -> GreedyStepper:
        """A :class:`~attnviz.GreedyStepper` on ``text`` with this checkpoint's special ids and
        generation rules (its ``run()`` gives :meth:`predict`'s tokens)."""
        cfg = self.config
        src = self.source_tensor(text)  # [1, Ts] ids, or [1, n_mels, 3000] features
        return GreedyStepper(
            self.model,
            src[0],
            cfg.bos_id,
            cfg.eos_id,
            max_len=self.limit(src.shape[-1], max_len),
            edits=edits,
            rules=self.rules,
        )

    def beam(self, text: str, beam_size: int = 4, max_len: int | None = None) -> BeamResult:
        """Beam search on one input as transformers' ``generate(num_beams=k)`` runs it, under
        this checkpoint's generation config, length limit and rules (see
        :func:`attnviz.decode.beam.beam_predict`); a CTranslate2 folder's as ``ctranslate2`` runs it
        (:func:`attnviz.decode.beam_ct2.ct2_beam_search`)."""
        if self.meta.get("engine") == "ctranslate2":
            from .decode.beam_ct2 import ct2_beam_search

            cfg, src = self.config, self.source_tensor(text)
            return ct2_beam_search(
                self.model, src, cfg.bos_id, cfg.eos_id, beam_size,
                max_len=self.limit(src.shape[-1], max_len), rules=self.rules,
            )  # fmt: skip
        return beam_predict(self, text, beam_size, max_len)

    def predict(self, text: str, max_len: int | None = None, num_beams: int | None = None) -> str:
        """Decode one input to text (unknown pieces run as UNK): greedy, or beam search when
        ``num_beams`` (default: the generation config's, else 1) is above 1, as transformers'
        ``generate()`` does."""
        num_beams = folder_num_beams(self) if num_beams is None else num_beams
        return self.predict_details(text, max_len, num_beams).text

    def predict_batch(
        self, texts: Sequence[str], batch_size: int = 512, num_beams: int | None = None
    ) -> list[str]:
        """Decode many inputs to texts, the same outputs as :meth:`predict`: greedy decoding
        batched, or beam search (one input at a time) when ``num_beams`` (default: the
        generation config's, else 1) is above 1."""
        self._generates()
        num_beams = folder_num_beams(self) if num_beams is None else num_beams
        if self.is_audio:  # one 30 s window at a time
            return [self.predict(clip, num_beams=num_beams) for clip in texts]
        for text in texts:
            self.encode_source(text)  # the same refusals as predict (empty, too long)
        hf_prompts = self.config.decoder_only and self.prompt is None
        if num_beams > 1 or hf_prompts:  # one at a time
            return [self.predict_details(text, num_beams=num_beams).text for text in texts]
        return greedy_texts(
            self.model,
            self.src_tokenizer,
            self.tgt_tokenizer,
            texts,
            batch_size,
            rules=self.rules,
            max_len=self.max_new_tokens,
            prompt=self.prompt,
        )

    def score(self, source: str, target: str | Sequence[int]) -> Scored:
        """Teacher-force ``target`` on ``source``: per-token probabilities, ranks, attention
        (see :func:`attnviz.decode.scoring.score`)."""
        if not isinstance(target, str):
            try:
                target = list(target)
            except TypeError:  # a number, None, a 0-d tensor
                why = f"got {shorten(repr(target))}"
                raise InputError(
                    f"the reference must be text or a list of target ids, {why}"
                ) from None
        return score_reference(self, source, target)

    def embed(self, texts: Sequence[str], batch_size: int = 32, record: bool = False):
        """Sentence embeddings of a sentence-transformers folder, as its ``encode`` gives them.

        Args:
            texts: N sentences (cut to the folder's ``max_seq_length`` tokens, as
                sentence-transformers cuts them).
            batch_size: texts a pass (padded; longest first).
            record: also return each text's :class:`~attnviz.Trace`, run alone.
        Returns:
            ``[N, E]`` float32 on the CPU; with ``record``, ``(embeddings, traces)``.
        Raises:
            InputError: not a sentence embedder, or an empty text.
        """
        if self.embedder is None:
            raise InputError(
                "this checkpoint is not a sentence embedder: open a sentence-transformers "
                "folder (one with modules.json)"
            )
        return self.embedder.embed(self, texts, batch_size, record)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
