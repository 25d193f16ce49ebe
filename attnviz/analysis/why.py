"""Why this token: the logit lens of one prediction, and what every "why" analysis shares.

- :func:`logit_lens`: each layer's residual stream at the predicting position, read through
  the model's own final norm and unembedding (a masked-LM model: through its MLM head): the
  top tokens with their probabilities, and the rank and probability of the token produced.
  :func:`lens_grid` does it for every layer x position.
- :func:`prepare`: an input as every "why" analysis runs it (:mod:`.dla`, :mod:`.patching`,
  :mod:`.flow` too), and :class:`Exportable`, their results' ``to_dict``/``save``.

The streams are those the real forward pass computed (``record(..., streams=True)``); nothing
is recomputed beside it. Shape legend: B batch, T positions, D width, H heads, Dh head width,
V vocabulary, L layers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ..checkpoint import Checkpoint, load_checkpoint
from ..core.errors import InputError
from ..core.record import record
from ..core.specials import not_text_ids
from .export import dumps

# -- inputs --------------------------------------------------------------------------------


@dataclass
class Prepared:
    """One input as the analyses run it: the stream read (``"decoder"``, or ``"encoder"`` for
    a masked-LM model), its ids and tokens, and the position whose prediction is explained.

    ``run(ids)`` runs the real model on ids of this stream (``[N, T]``) -> logits
    ``[N, T, V]``; ``last(ids)`` the same pass with only the explained position's logits
    ``[N, V]`` projected (a 262k-token vocabulary makes the other positions' the largest
    cost of a patched run). The source of an encoder-decoder model (``source``) stays fixed
    and is encoded in every run (an edit may reach the encoder).
    """

    stack: str
    ids: list[int]
    tokens: list[str]
    position: int
    run: Callable[[Tensor], Tensor]
    last: Callable[[Tensor], Tensor]
    source: list[int] | None = None  # an encoder-decoder model's source ids (text)

    def tensor(self, device) -> Tensor:
        return torch.tensor([self.ids], device=device)


def checkpoint_of(ckpt: Checkpoint | str) -> Checkpoint:
    return ckpt if isinstance(ckpt, Checkpoint) else load_checkpoint(ckpt)


def label(ckpt: Checkpoint, i: int, stack: str = "decoder") -> str:
    """The token string of id ``i`` (the tokenizer of ``stack``; ``#i`` without one)."""
    tok = ckpt.src_tokenizer if stack == "encoder" else ckpt.tgt_tokenizer
    tok = tok or ckpt.src_tokenizer
    return f"#{i}" if tok is None else tok.token(int(i))


def token_id(ckpt: Checkpoint, token: int | str, what: str = "token") -> int:
    """A token given as an id or as text -> its id; text that is not exactly one token is
    refused in one line naming its pieces."""
    vocab = ckpt.config.tgt_vocab_size
    if isinstance(token, (int, np.integer)) and not isinstance(token, bool):
        if not 0 <= int(token) < vocab:
            raise InputError(f"{what} id {int(token)} is outside the vocabulary 0..{vocab - 1}")
        return int(token)
    if not isinstance(token, str) or not token:
        raise InputError(f"{what} must be a token (text) or a token id, got {token!r}")
    tok = ckpt.tgt_tokenizer or ckpt.src_tokenizer
    if tok is None:
        raise InputError(f"this checkpoint has no tokenizer: give the {what} as an id")
    enc = tok.encode(token)
    special = not_text_ids(ckpt.config)
    ids = [i for i in enc.ids if i not in special or tok.token(i) == token]
    if len(ids) != 1:
        pieces = " | ".join(tok.token(i) for i in ids) or "nothing"
        raise InputError(
            f"{what} {token!r} is {len(ids)} tokens here ({pieces}); give one token or its id"
        )
    return ids[0]


def prepare(ckpt: Checkpoint, text, step: int | None = None) -> Prepared:
    """``text`` (an audio model: a clip) as the analyses run it.

    Args:
        text: the input; or a list of token ids (decoder-only: the prompt; encoder-decoder:
            the source; encoder-only: the sentence), read as they are.
        step: which decoding step to explain: 0 (default) the first token after the prompt
            (decoder-only) or after the start id (encoder-decoder); ``k`` the token after the
            first ``k`` greedy tokens. A masked-LM model: the position read (default its
            first mask token, else its first position after the start).
    Raises:
        InputError: a model without an output head; a step past the greedy output.
    """
    cfg, model = ckpt.config, ckpt.model
    if not cfg.lm_head:
        raise InputError(
            "this model has no output head (an embedding model): there is no token to explain"
        )
    if step is not None and (not isinstance(step, int) or step < 0):
        raise InputError(f"step must be a decoding step 0, 1, 2, ..., got {step!r}")
    dev = ckpt.device
    if cfg.encoder_only:
        from .masked_lm import read_inputs, scored_positions

        if _is_ids(text):
            ids, types = list(text), [0] * len(text)
        else:
            enc, types = read_inputs(ckpt, text)
            ids = list(enc.ids)
        pos = scored_positions(ckpt, ids)[0] if step is None else step
        if step is None and pos == 0 and len(ids) > 1:
            pos = 1  # no mask token: the first real token after the start
        if not 0 <= pos < len(ids):
            raise InputError(f"step is a position 0..{len(ids) - 1} of this input, got {pos}")
        tt = torch.tensor([types], device=dev) if cfg.type_vocab_size else None

        def run_mlm(x: Tensor) -> Tensor:
            return model(x, token_type_ids=None if tt is None else tt.expand_as(x))

        def last_mlm(x: Tensor) -> Tensor:
            h = model.encode(x, None, None if tt is None else tt.expand_as(x))[:, pos]
            return model.generator(h if model.head is None else model.head(h))  # [N, V]

        toks = [label(ckpt, i, "encoder") for i in ids]
        return Prepared("encoder", ids, toks, pos, run_mlm, last_mlm)
    k = step or 0
    source = None
    if cfg.decoder_only:
        prompt = list(text) if _is_ids(text) else list(ckpt.encode_source(text).ids)
        out = _greedy(ckpt, torch.tensor([prompt], device=dev), k) if k else []
        ids = prompt + out[:k]

        def run(x: Tensor) -> Tensor:
            return model(x)

        def hidden(x: Tensor) -> Tensor:
            return model.decode(x, None, logits=False)
    else:
        src = torch.tensor([list(text)], device=dev) if _is_ids(text) else ckpt.source_tensor(text)
        source = None if ckpt.is_audio else src[0].tolist()
        out = _greedy(ckpt, src, k) if k else []
        ids = [cfg.bos_id] + out[:k]

        def run(x: Tensor) -> Tensor:  # the whole model: edits may reach the encoder
            return model(src.expand(x.shape[0], *src.shape[1:]), x)

        def hidden(x: Tensor) -> Tensor:
            return model.decode(x, model.encode(src.expand(x.shape[0], *src.shape[1:])),
                                logits=False)  # fmt: skip

    if len(out) < k:
        raise InputError(
            f"the greedy output ends after {len(out)} tokens; step must be 0..{len(out) - 1}"
        )
    if len(ids) > cfg.max_len:
        raise InputError(f"step {k} reaches past this model's {cfg.max_len} positions")
    toks = [label(ckpt, i) for i in ids]
    p = len(ids) - 1

    def last(x: Tensor) -> Tensor:
        h = hidden(x)[:, p]  # [N, D], after the final norm
        return model.generator(h * cfg.d_model**-0.5 if cfg.scale_decoder_output else h)

    return Prepared("decoder", ids, toks, p, run, last, source=source)


def _is_ids(text) -> bool:
    """A list of token ids given instead of text (read as they are, no tokenizer)."""
    return (
        isinstance(text, (list, tuple))
        and bool(text)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in text)
    )


def _greedy(ckpt: Checkpoint, src: Tensor, k: int) -> list[int]:
    return ckpt.decoding.until_end(ckpt.greedy(src, max_len=k)[0].tolist())


def stack_of(model: nn.Module, stack: str) -> nn.Module:
    return model.decoder if stack == "decoder" else model.encoder


def readout(model: nn.Module, stack: str, x: Tensor) -> Tensor:
    """What the model does to its last residual stream: ``x [..., D]`` -> logits ``[..., V]``
    (the stack's final norm, T5's output scale, a masked-LM head, the unembedding)."""
    x = stack_of(model, stack).finish(x)
    if stack == "decoder" and model.config.scale_decoder_output:
        x = x * model.config.d_model**-0.5
    if stack == "encoder" and model.head is not None:
        x = model.head(x)
    return model.generator(x)


@torch.no_grad()
def streams_of(ckpt: Checkpoint, prep: Prepared, capture=None):
    """One real forward pass keeping every layer's stream: ``(logits [1, V], trace)``, the
    logits of the explained position only (the others' are never projected)."""
    with record(ckpt.model, capture=capture, streams=True) as trace:
        logits = prep.last(prep.tensor(ckpt.device))
    return logits, trace


class Exportable:
    """``to_dict`` (JSON-ready), ``arrays`` (numpy), ``save(path)`` (.json or .npz)."""

    def to_dict(self) -> dict:  # pragma: no cover - every result defines it
        raise NotImplementedError

    def arrays(self) -> dict[str, np.ndarray]:
        return {}

    def save(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as JSON (``.json``) or :meth:`arrays` plus the labels as
        ``.npz`` (no pickled objects)."""
        path = Path(path)
        if path.suffix == ".npz":
            flat = {k: np.asarray(v) for k, v in self.arrays().items()}
            for k, v in self.to_dict().items():
                if isinstance(v, list) and v and all(isinstance(s, str) for s in v):
                    flat.setdefault(k, np.array(v, dtype=str))
            np.savez(path, **flat)
        else:
            path.write_text(dumps(self.to_dict()) + "\n")
        return path

    def json(self) -> str:
        return json.dumps(self.to_dict())


# -- the logit lens ------------------------------------------------------------------------


@dataclass
class LogitLens(Exportable):
    """Each layer's prediction at one position.

    Attributes:
        layers: row labels, ``"embed"`` then ``"0"`` .. ``"L-1"`` (the stream after each layer).
        top_ids, top_probs: ``[L + 1, k]`` the top tokens at each layer and their probabilities.
        target, target_id: the token produced (the model's argmax there).
        rank, prob: ``[L + 1]`` the target's rank (0 = top) and probability at each layer.
    """

    tokens: list[str]
    position: int
    layers: list[str]
    top_ids: np.ndarray
    top_probs: np.ndarray
    top_tokens: list[list[str]]
    target_id: int
    target: str
    rank: np.ndarray
    prob: np.ndarray

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens, "position": self.position, "layers": self.layers,
            "top_ids": self.top_ids.tolist(), "top_probs": self.top_probs.tolist(),
            "top_tokens": self.top_tokens, "target_id": self.target_id, "target": self.target,
            "rank": self.rank.tolist(), "prob": self.prob.tolist(),
        }  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        return {"top_ids": self.top_ids, "top_probs": self.top_probs, "rank": self.rank,
                "prob": self.prob, "layers": np.array(self.layers, dtype=str)}  # fmt: skip

    def text(self) -> str:
        lines = [f"logit lens at position {self.position} ({self.tokens[self.position]!r}); "
                 f"produced {self.target!r}"]  # fmt: skip
        for i, name in enumerate(self.layers):
            top = ", ".join(
                f"{t!r} {p:.3f}" for t, p in zip(self.top_tokens[i], self.top_probs[i], strict=True)
            )
            lines.append(f"{name:>6}  rank {int(self.rank[i]):>5}  p {self.prob[i]:.3f}  | {top}")
        return "\n".join(lines)


def layer_streams(trace, stack: str, n_layers: int) -> list[Tensor]:
    """The stream before the first layer and after each: ``L + 1`` tensors ``[B, T, D]``."""
    first = trace.stream(stack, 0, "resid_pre")
    return [first] + [trace.stream(stack, i, "resid_post") for i in range(n_layers)]


def n_layers(ckpt: Checkpoint, stack: str) -> int:
    return len(stack_of(ckpt.model, stack).layers)


def logit_lens(ckpt: Checkpoint | str, text, step: int | None = None, k: int = 5) -> LogitLens:
    """The logit lens at the predicting position of ``text`` (see :func:`prepare` for
    ``step``): each layer's stream through the final norm and unembedding."""
    ckpt = checkpoint_of(ckpt)
    prep = prepare(ckpt, text, step)
    logits, trace = streams_of(ckpt, prep)
    p = prep.position
    streams = layer_streams(trace, prep.stack, n_layers(ckpt, prep.stack))
    with torch.no_grad():
        x = torch.stack([s[0, p] for s in streams])  # [L + 1, D]
        probs = readout(ckpt.model, prep.stack, x).float().softmax(-1)  # [L + 1, V]
    target = int(logits[0].argmax())
    k = max(1, min(int(k), probs.shape[-1]))
    top_p, top_i = probs.topk(k, dim=-1)
    t_prob = probs[:, target]
    rank = (probs > t_prob[:, None]).sum(-1)
    top_i_np = top_i.cpu().numpy()
    return LogitLens(
        tokens=prep.tokens, position=p,
        layers=["embed"] + [str(i) for i in range(len(streams) - 1)],
        top_ids=top_i_np, top_probs=top_p.cpu().numpy().astype(np.float32),
        top_tokens=[[label(ckpt, i) for i in row] for row in top_i_np.tolist()],
        target_id=target, target=label(ckpt, target),
        rank=rank.cpu().numpy(), prob=t_prob.cpu().numpy().astype(np.float32),
    )  # fmt: skip


@dataclass
class LensGrid(Exportable):
    """The lens at every layer x position: ``top_ids``/``top_probs`` ``[L + 1, T]`` (the top
    token) and ``prob``/``rank`` ``[L + 1, T]`` of each position's next token (the input's
    own next token; at the last position, the token the model produced)."""

    tokens: list[str]
    layers: list[str]
    targets: list[int]
    top_ids: np.ndarray
    top_probs: np.ndarray
    prob: np.ndarray
    rank: np.ndarray

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "layers": self.layers, "targets": self.targets,
                "top_ids": self.top_ids.tolist(), "top_probs": self.top_probs.tolist(),
                "prob": self.prob.tolist(), "rank": self.rank.tolist()}  # fmt: skip

    def arrays(self) -> dict[str, np.ndarray]:
        return {"top_ids": self.top_ids, "top_probs": self.top_probs, "prob": self.prob,
                "rank": self.rank, "targets": np.array(self.targets)}  # fmt: skip


def progress_bar(items, desc: str, progress: bool | None):
    """``items`` with a tqdm bar when ``progress`` (None: when stderr is a terminal)."""
    import sys

    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, leave=False)


def lens_grid(
    ckpt: Checkpoint | str, text, step: int | None = None, progress: bool | None = None
) -> LensGrid:
    """:func:`logit_lens` at every layer and position at once (one pass, one readout per
    layer; a progress bar on a terminal)."""
    ckpt = checkpoint_of(ckpt)
    prep = prepare(ckpt, text, step)
    logits, trace = streams_of(ckpt, prep)
    streams = layer_streams(trace, prep.stack, n_layers(ckpt, prep.stack))
    t = prep.position + 1
    nxt = prep.ids[1:t] + [int(logits[0].argmax())]
    targets = nxt if prep.stack == "decoder" else prep.ids[:t]  # masked LM: its own token
    tgt = torch.tensor(targets, device=ckpt.device)
    rows = []
    for s in progress_bar(streams, "logit lens", progress):
        with torch.no_grad():
            probs = readout(ckpt.model, prep.stack, s[0, :t]).float().softmax(-1)  # [T, V]
        top_p, top_i = probs.max(-1)
        p_t = probs.gather(-1, tgt[:, None])  # [T, 1]
        rows.append((top_i, top_p, p_t[:, 0], (probs > p_t).sum(-1)))
    cat = [torch.stack(c).cpu().numpy() for c in zip(*rows, strict=True)]
    return LensGrid(
        prep.tokens[:t], ["embed"] + [str(i) for i in range(len(streams) - 1)], targets,
        cat[0], cat[1].astype(np.float32), cat[2].astype(np.float32), cat[3],
    )  # fmt: skip
