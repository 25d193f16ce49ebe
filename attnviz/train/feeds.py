"""What training reads: a built-in task's generator, or a parallel corpus encoded once.

A :class:`Feed` gives the training loop its tokenizers, the ids of every step's batch on every
rank (a pure function of seed, rank and step, so a resumed run sees exactly the data it would
have seen), the validation examples, the probe whose attention is snapshotted, and defaults
for the model and the run.

A corpus is tokenized once into flat arrays with offsets
(:class:`~attnviz.data.corpus.EncodedCorpus`, 2-4 bytes a token), so a million pairs take tens of
MB; each epoch visits this rank's shard (pairs ``rank, rank + world, ...``) in an order drawn
from (seed, rank, epoch).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch.distributed as dist

from ..checkpoint import METADATA
from ..core.errors import CheckpointError, InputError
from ..core.model_kind import ModelKind
from ..data.batch import Prompt
from ..data.corpus import EncodedCorpus, encode_corpus
from ..data.pieces import choose_subword, piece_stats
from ..data.tasks import Example, Task, get_task
from ..data.tokenizer import Encoding, Tokenizer

#: Model sizes by name (``--preset``); ``base`` is the paper's Transformer-base.
PRESETS = {
    "tiny": dict(d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=256),
    "small": dict(d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024),
    "base": dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048),
}
#: Tokenizer options that only a corpus takes (a built-in task has its own vocabulary).
CORPUS_ONLY = ("tokenizer", "vocab_size", "shared_vocab", "byte_fallback")
DEFAULT_CORPUS_MAX_LEN = 256
#: Most texts a side a subword tokenizer learns from (see :func:`train_tokenizers`).
SUBWORD_SAMPLE = 200_000


@dataclass
class Feed:
    """The data side of a run.

    Attributes:
        name: the task's name, or ``"corpus"``.
        src_tok / tgt_tok: the tokenizers (the model's vocabularies come from them).
        probe: the fixed input (and its reference) whose attention is snapshotted.
        model / training: defaults for the model and the run, under any option given.
        task: the built-in task, or None for a corpus.
    """

    name: str
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    probe: Example
    model: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)
    task: Task | None = None
    #: :class:`PieceStats` of trained tokenizers, by side (``"source"``, ``"target"``).
    pieces: dict | None = None

    def batch(self, step: int, opts, rank: int, world: int) -> tuple[list, list]:
        """``(source id rows, target id rows)`` of one step on one rank."""
        raise NotImplementedError

    def dev(self, n: int) -> list[Example]:
        """The first ``n`` validation examples (always the same ones; the first is the probe
        for a corpus, and the first three are printed at each evaluation)."""
        raise NotImplementedError

    def default_max_len(self) -> int:
        raise NotImplementedError

    #: Model positions beyond the ``max_len`` option.
    extra_positions = 0

    def positions(self, max_len: int, decoder_only: bool) -> int:
        """The model's positions for a ``max_len`` option (a side's most tokens for a corpus).

        A decoder-only model reads a corpus pair as one sequence ``<bos> source <eos> target``
        (and learns the target's ``<eos>``): ``2 * max_len + 2`` positions."""
        if decoder_only and self.task is None:
            return 2 * max_len + 2
        return max_len + self.extra_positions


class TaskFeed(Feed):
    """A built-in task: fresh examples drawn from its generator at every step."""

    def __init__(self, task: Task):
        src, tgt = task.tokenizers()
        probe = Example(task.probe, task.target(task.probe))
        super().__init__(task.name, src, tgt, probe, task.model, task.training, task)

    def batch(self, step: int, opts, rank: int, world: int) -> tuple[list, list]:
        exs = batch_at(self.task, step, opts, rank)
        return [self.src_tok.encode(e.src).ids for e in exs], [
            self.tgt_tok.encode(e.tgt).ids for e in exs
        ]

    def dev(self, n: int) -> list[Example]:
        return self.task.examples("validation", n, seed=0)

    def default_max_len(self) -> int:
        return 2 * max(self.task.lengths) + 24


#: The token between a decoder-only model's source and target (``<bos> source <sep> target``).
SEPARATOR = "<sep>"
#: The token an encoder-only (masked-LM) model fills in.
MASK = "<mask>"


def one_stack(feed: Feed, kind: ModelKind) -> Prompt | None:
    """Fit ``feed`` to the model kind: an encoder-decoder keeps its two tokenizers (None is
    returned); a decoder-only model gets one vocabulary over both sides (with ``<sep>``
    where the task's prompt has one) and the :class:`Prompt` its pairs are read with.

    Raises:
        InputError: a kind or a data source attnviz does not train yet, in one line.
    """
    if kind.has_cross:
        return None
    if kind.encoder_only:  # a masked LM over the task's pairs
        task = feed.task
        if task is None:
            raise InputError(
                "--arch encoder-only trains a masked LM on a built-in --task (reverse, copy, "
                "sort, translate); a corpus (--data) trains encoder-decoder or decoder-only models"
            )
        symbols = list(dict.fromkeys([*task.source_symbols(), *task.target_symbols()]))
        tok = Tokenizer(task.kind, [*symbols, SEPARATOR, MASK])
        feed.src_tok = feed.tgt_tok = tok
        return Prompt(tok.bos_id, tok.sep_token[1], "mlm", tok.mask_token[1])
    task = feed.task
    if task is None:  # a corpus: one vocabulary over both sides, its end token between them
        tok = feed.src_tok
        if not isinstance(tok, Tokenizer) or tok != feed.tgt_tok:
            raise InputError(
                "--arch decoder-only on a corpus reads both sides with one vocabulary that "
                "attnviz trains (fine-tuning a Hugging Face model on a corpus is for "
                "encoder-decoder models)"
            )
        feed.tgt_tok = tok
        return Prompt(tok.bos_id, tok.eos_id, "target")
    symbols = list(dict.fromkeys([*task.source_symbols(), *task.target_symbols()]))
    if task.separator:
        symbols.append(SEPARATOR)
    tok = Tokenizer(task.kind, symbols)
    feed.src_tok = feed.tgt_tok = tok
    sep = tok.tokens.index(SEPARATOR) if task.separator else None
    return Prompt(tok.bos_id, sep, task.lm_loss)


def batch_at(task: Task, step: int, opts, rank: int) -> list[Example]:
    """The training examples of one step on one rank (a pure function of seed, rank, step)."""
    stream = task.stream("train", seed=f"{opts.seed}/{rank}/{step}")
    return [next(stream) for _ in range(opts.batch_size)]


# -- corpora --------------------------------------------------------------------------------
def train_tokenizers(
    kind: str,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    *,
    vocab_size: int | None = None,
    shared: bool = False,
    byte_fallback: bool = False,
) -> tuple[Tokenizer, Tokenizer]:
    """Source and target tokenizers trained on the training texts (one when ``shared``).

    Subword models learn from at most :data:`SUBWORD_SAMPLE` texts a side, evenly spaced
    through the corpus (as SentencePiece's ``input_sentence_size``): their merges settle long
    before a million sentences, and the whole corpus is still encoded with them. Without a
    ``vocab_size`` a subword vocabulary's size is chosen from the corpus
    (:func:`choose_subword`).
    """
    from ..data.tokenizer import SUBWORD_KINDS, train_tokenizer

    if kind in SUBWORD_KINDS and len(src_texts) > SUBWORD_SAMPLE:
        every = len(src_texts) / SUBWORD_SAMPLE
        pick = [int(i * every) for i in range(SUBWORD_SAMPLE)]
        src_texts, tgt_texts = [src_texts[i] for i in pick], [tgt_texts[i] for i in pick]

    def one(texts: Sequence[str]) -> Tokenizer:
        if kind in SUBWORD_KINDS and vocab_size is None:
            return choose_subword(kind, texts, byte_fallback)
        return train_tokenizer(kind, texts, vocab_size=vocab_size, byte_fallback=byte_fallback)

    if shared:
        tok = one([*src_texts, *tgt_texts])
        return tok, tok
    return one(src_texts), one(tgt_texts)


class CorpusFeed(Feed):
    """A parallel corpus: training pairs encoded once, a dev set kept as text.

    Args:
        train: training pairs ``(source, target)``.
        dev: validation pairs (kept in order; the first is the probe).
        src_tok / tgt_tok: the tokenizers (trained on ``train`` by :func:`train_tokenizers`,
            or a saved run's).
        max_len: pairs with more tokens on either side are dropped and counted
            (``dropped``), never truncated; the model takes ``max_len + 1`` positions (the
            decoder's start token takes one).
        log: where to report what was dropped.
    """

    def __init__(
        self,
        train: Sequence[tuple[str, str]],
        dev: Sequence[tuple[str, str]],
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        max_len: int,
        log: Callable[[str], None] = print,
    ):
        if not train:
            raise InputError("the corpus has no training pairs")
        self.corpus = encode_corpus(train, src_tok, tgt_tok)
        n = len(self.corpus)
        src_len, tgt_len = self.corpus.src_lengths, self.corpus.tgt_lengths
        keep = (src_len > 0) & (src_len <= max_len) & (tgt_len <= max_len)
        self.dropped = int(n - keep.sum())
        if self.dropped:
            self.corpus = self.corpus.subset(np.flatnonzero(keep))
            log(
                f"dropped {self.dropped:,} of {n:,} training pairs longer than --max-len "
                f"{max_len} tokens (or empty after tokenization)"
            )
        if not len(self.corpus):
            raise InputError(f"no training pair fits in --max-len {max_len} tokens")
        fits = [
            Example(s, t)
            for s, t in dev
            if 0 < len(src_tok.encode(s).ids) <= max_len and len(tgt_tok.encode(t).ids) <= max_len
        ]
        if len(fits) < len(dev):
            log(f"dropped {len(dev) - len(fits):,} of {len(dev):,} dev pairs longer than --max-len")
        if not fits:
            raise InputError("no dev pair is left to validate on")
        self._dev = fits
        self._perm: tuple | None = None
        model, training = corpus_defaults(self.corpus)
        super().__init__("corpus", src_tok, tgt_tok, fits[0], model, training)

    def __len__(self) -> int:
        return len(self.corpus)

    def batch(self, step: int, opts, rank: int, world: int) -> tuple[list, list]:
        n = len(self.corpus)
        shard = len(range(rank % n, n, world)) if rank < n else 0
        if shard == 0:  # more ranks than pairs: share the corpus instead
            rank, world, shard = 0, 1, n
        rows = []
        for pos in range(step * opts.batch_size, (step + 1) * opts.batch_size):
            epoch, k = divmod(pos, shard)
            rows.append(rank + world * int(self._order(opts.seed, rank, epoch, shard)[k]))
        return self.corpus.rows(rows)

    def _order(self, seed: int, rank: int, epoch: int, size: int) -> np.ndarray:
        key = (seed, rank, epoch, size)
        if self._perm is None or self._perm[0] != key:
            self._perm = (key, np.random.default_rng([seed, rank, epoch]).permutation(size))
        return self._perm[1]

    def dev(self, n: int) -> list[Example]:
        return self._dev[:n]

    def all_dev(self) -> list[Example]:
        return list(self._dev)

    def default_max_len(self) -> int:
        return DEFAULT_CORPUS_MAX_LEN

    #: Model positions beyond ``--max-len`` (a target of max_len tokens plus the start token).
    extra_positions = 1


def corpus_defaults(corpus: EncodedCorpus) -> tuple[dict, dict]:
    """Model and run defaults for a corpus, sized so that up to ~100 k short pairs train on
    a 2-core CPU in minutes (the ``translate`` task's model, which learns it in ~3 minutes);
    bigger corpora get the ``small`` preset and a few epochs capped at 20 k steps.

    Returns:
        ``(model defaults, training defaults)``.
    """
    n = len(corpus)
    mean = float(corpus.src_lengths.mean() + corpus.tgt_lengths.mean()) / 2
    batch = 64 if mean <= 40 else 32
    if n <= 150_000:
        model = dict(d_model=128, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=512)
        steps, lr = min(6000, max(3000, 2 * n // batch)), 1e-3
    else:
        model = dict(PRESETS["small"])
        steps, lr = min(20_000, 3 * n // batch), 5e-4
    model["dropout"] = 0.1
    return model, dict(steps=steps, batch_size=batch, lr=lr, warmup=min(400, steps // 10 + 1))


# -- building a run's feed ------------------------------------------------------------------
class TrainingTokenizer:
    """A Hugging Face tokenizer as training reads a corpus with it: ``encode_flat`` for
    :func:`~attnviz.data.corpus.encode_corpus`, and on the target side (``drop_end``) without the
    end id transformers appends (a batch appends the model's own, see
    :func:`attnviz.data.batch.make_batch`). The source keeps it: ``predict`` reads text that way.
    Everything else, ``to_dict`` and ``decode`` included, is the tokenizer's."""

    def __init__(self, tok, drop_end: bool):
        self.tok, self.drop_end = tok, drop_end

    def __getattr__(self, name: str):
        return getattr(self.tok, name)

    def __len__(self) -> int:
        return len(self.tok)

    def encode(self, text: str) -> Encoding:
        enc = self.tok.encode(text)
        if self.drop_end and enc.ids and enc.ids[-1] == self.tok.eos_id:
            return Encoding(enc.ids[:-1], enc.pieces[:-1], enc.unknown)
        return enc

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Many texts -> ``(ids [sum(lengths)] int32, lengths [len(texts)] int32)``."""
        rows = [self.encode(t).ids for t in texts]
        flat = [i for row in rows for i in row]
        return np.asarray(flat, dtype=np.int32), np.asarray([len(r) for r in rows], np.int32)


def hf_training_tokenizers(src, tgt) -> tuple[TrainingTokenizer, TrainingTokenizer]:
    """A Hugging Face checkpoint's two tokenizers as a corpus run reads them."""
    return TrainingTokenizer(src, drop_end=False), TrainingTokenizer(tgt, drop_end=True)


def _saved_tokenizers(out: Path) -> tuple[Tokenizer, Tokenizer]:
    try:
        meta = json.loads((out / METADATA).read_text())
        if meta["src_tokenizer"].get("kind") == "hf":  # a fine-tuned Hugging Face folder's
            from ..checkpoint import load_checkpoint

            ckpt = load_checkpoint(out)
            return hf_training_tokenizers(ckpt.src_tokenizer, ckpt.tgt_tokenizer)
        return Tokenizer.from_dict(meta["src_tokenizer"]), Tokenizer.from_dict(
            meta["tgt_tokenizer"]
        )
    except (OSError, KeyError, ValueError, AttributeError) as exc:
        raise CheckpointError(
            f"{out / METADATA}: cannot read the run's tokenizers ({exc})"
        ) from None


def _saved_pieces(out: Path) -> dict | None:
    """The piece statistics a saved run printed when it trained its tokenizers."""
    try:
        return json.loads((out / METADATA).read_text())["corpus"]["pieces"]
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _corpus_pairs(opts, log: Callable[[str], None]) -> tuple[list, list]:
    """Training and dev pairs: from the files, else the Python pairs; a held-out dev slice
    when no dev set is given."""
    from ..data.corpus import read_pairs, split_dev

    def read(paths: list[str]) -> list[tuple[str, str]]:
        if not 1 <= len(paths) <= 2:
            raise InputError("--data and --dev take one file (.tsv, .jsonl) or two aligned files")
        return read_pairs(paths[0], paths[1] if len(paths) > 1 else None, langs=opts.langs)

    pairs = read(opts.data) if opts.data else [tuple(p) for p in opts.pairs]
    dev = read(opts.dev) if opts.dev else opts.dev_pairs
    if dev is None:
        pairs, dev, how = split_dev(pairs)
        log(how)
    else:
        dev = [tuple(p) for p in dev]
        log(f"dev: {len(dev):,} pairs given")
    for p in (*pairs[:1], *dev[:1]):
        if len(p) != 2 or not all(isinstance(s, str) for s in p):
            raise InputError(f"a pair is (source, target) strings, got {p!r}")
    return pairs, dev


def make_feed(
    opts,
    saved: dict | None,
    out: Path | None,
    rank: int,
    world: int,
    log: Callable[[str], None],
    tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
) -> Feed:
    """The run's :class:`~attnviz.train.feeds.Feed`: the task's, or the corpus encoded with the
    saved run's tokenizers (on ``--resume``), the ``tokenizers`` given (a fine-tuned
    checkpoint's), or tokenizers trained on its training pairs."""
    saved = saved or {}
    if opts.task is not None:
        given = [f"--{n.replace('_', '-')}" for n in CORPUS_ONLY if getattr(opts, n)]
        if given or opts.dev or opts.dev_pairs or opts.langs:
            given += ["--dev"] * bool(opts.dev or opts.dev_pairs) + ["--langs"] * bool(opts.langs)
            raise InputError(f"{', '.join(given)} apply to --data, not to a built-in --task")
        return TaskFeed(get_task(opts.task))

    def pick(name: str, default):
        value = getattr(opts, name)
        return value if value is not None else saved.get(name, default)

    t0 = time.perf_counter()
    pairs, dev = _corpus_pairs(opts, log)
    log(
        f"read {len(pairs):,} training and {len(dev):,} dev pairs ({time.perf_counter() - t0:.1f}s)"
    )
    piece_report = None  # rank 0 reports the pieces of tokenizers it trains
    if saved and out is not None:
        src_tok, tgt_tok = _saved_tokenizers(out)
        piece_report = _saved_pieces(out)
    elif tokenizers is not None:
        src_tok, tgt_tok = tokenizers
    else:
        kind = pick("tokenizer", "bpe")
        docs = None
        shared = bool(pick("shared_vocab", False)) or opts.kind.decoder_only
        if rank == 0:
            t0 = time.perf_counter()
            src_tok, tgt_tok = train_tokenizers(
                kind,
                [s for s, _ in pairs],
                [t for _, t in pairs],
                vocab_size=pick("vocab_size", None),
                shared=shared,
                byte_fallback=bool(pick("byte_fallback", False)),
            )
            docs = [src_tok.to_dict(), tgt_tok.to_dict()]
            sample = f" on {SUBWORD_SAMPLE:,} of {len(pairs):,} pairs" if (
                kind in ("bpe", "unigram") and len(pairs) > SUBWORD_SAMPLE) else ""  # fmt: skip
            how = ("" if kind not in ("bpe", "unigram") else
                   f", --vocab-size {pick('vocab_size', None)}" if pick("vocab_size", None) else
                   ", sizes chosen from the corpus")  # fmt: skip
            log(
                f"trained {kind} tokenizers{sample}: {len(src_tok):,} source and {len(tgt_tok):,} target "
                f"tokens{' (shared)' if src_tok is tgt_tok else ''}{how} "
                f"({time.perf_counter() - t0:.1f}s)"
            )
            piece_report = _report_pieces(pairs, dev, src_tok, tgt_tok, log)
        if world > 1:  # one vocabulary for every rank: rank 0's
            box = [docs]
            dist.broadcast_object_list(box, 0)
            src_tok, tgt_tok = (Tokenizer.from_dict(d) for d in box[0])
            tgt_tok = src_tok if shared else tgt_tok
    t0 = time.perf_counter()
    max_len = pick("max_len", DEFAULT_CORPUS_MAX_LEN)
    feed = CorpusFeed(pairs, dev, src_tok, tgt_tok, max_len, log=log)
    feed.model["max_len"] = max_len
    feed.training.update(  # recorded with the run, so --resume knows them
        tokenizer=src_tok.kind,
        vocab_size=pick("vocab_size", None),
        shared_vocab=bool(pick("shared_vocab", False)) or opts.kind.decoder_only,
        byte_fallback=bool(pick("byte_fallback", False)),
    )
    feed.pieces = piece_report
    log(f"encoded {len(feed):,} training pairs ({time.perf_counter() - t0:.1f}s)")
    return feed


def _report_pieces(pairs, dev, src_tok, tgt_tok, log: Callable[[str], None]) -> dict:
    """Log :class:`PieceStats` of both sides and what looks bad; returns them as dicts."""
    every = -(-len(pairs) // SUBWORD_SAMPLE)  # the texts the tokenizers learnt from
    sides = {"source": (src_tok, 0), "target": (tgt_tok, 1)}
    out = {}
    for side, (tok, k) in sides.items():
        stats = piece_stats(tok, [p[k] for p in pairs[::every]], [p[k] for p in dev])
        log(f"{side} pieces: {stats.line()}")
        for warning in stats.warnings(side):
            log(warning)
        out[side] = dataclasses.asdict(stats)
    return out
