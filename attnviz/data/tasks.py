"""Built-in tasks: deterministic generators of (source, target) text pairs.

Every task draws source texts from a seeded :class:`random.Random` and computes the target
from the source. Which split a source belongs to is decided by a hash of the source text
alone (90 % train, 5 % validation, 5 % test), so the splits never overlap, whatever the seed
or the number of examples drawn; a generator simply skips texts of other splits.

Adding a task is one small subclass of :class:`Task` plus :func:`register`.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..core.errors import InputError
from . import lexicon as lex
from .tokenizer import Tokenizer

SPLITS = ("train", "validation", "test")
_SPLIT_BUCKETS = {"train": range(0, 90), "validation": range(90, 95), "test": range(95, 100)}


@dataclass(frozen=True)
class Example:
    src: str
    tgt: str


@dataclass
class Task:
    """A text-to-text task.

    Subclasses set the class attributes and implement :meth:`sample` and :meth:`target`.

    Attributes:
        name: registry key (``attnviz train --task NAME``).
        kind: tokenizer level, ``"char"`` or ``"word"``.
        description: one line for ``--help`` and the app.
        probe: a fixed input whose attention is snapshotted during training.
        lengths: the source lengths (in tokens) the task draws from.
        model: defaults for :class:`attnviz.ModelConfig` (sizes, dropout).
        training: defaults for training (steps, batch size, learning rate, ...).
        separator: a decoder-only model reads the pair as ``<bos> source <sep> target
            <eos>`` (a prefix LM); without it as ``<bos> source target <eos>`` (the target
            continues the source).
        lm_loss: what a decoder-only model learns to predict: ``"target"`` (the target and
            its end; the source is given) or ``"all"`` (every token after ``<bos>``).
        induction: training snapshots also measure induction and previous-token scores and
            the loss on each half of repeated random tokens (:mod:`attnviz.train.induction`).
    """

    name: str = ""
    kind: str = "char"
    description: str = ""
    probe: str = ""
    lengths: range = range(1, 21)
    model: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)
    separator: bool = True
    lm_loss: str = "target"
    induction: bool = False

    # -- what a task defines ---------------------------------------------------------------
    def sample(self, rng: random.Random, length: int) -> str:
        """One source text with ``length`` tokens."""
        raise NotImplementedError

    def target(self, src: str) -> str:
        """The correct output for ``src``."""
        raise NotImplementedError

    def links(self, src: str) -> list[tuple[int, int]]:
        """Gold word alignment of ``src`` with :meth:`target`: ``(source word, target word)``
        pairs, 0-based (a character task's words are its characters)."""
        raise NotImplementedError

    def source_symbols(self) -> list[str]:
        raise NotImplementedError

    def target_symbols(self) -> list[str]:
        return self.source_symbols()

    # -- shared machinery ------------------------------------------------------------------
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """Source and target tokenizers covering every symbol the task can produce."""
        return Tokenizer(self.kind, self.source_symbols()), Tokenizer(
            self.kind, self.target_symbols()
        )

    def split_of(self, src: str) -> str:
        """The split a source text belongs to (a pure function of the text)."""
        digest = hashlib.blake2b(f"{self.name}\x00{src}".encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest, "little") % 100
        return next(s for s, r in _SPLIT_BUCKETS.items() if bucket in r)

    def stream(self, split: str, seed: int | str, length: int | None = None) -> Iterator[Example]:
        """An endless stream of examples of ``split`` (repeats possible), fixed by ``seed``.

        Lengths are uniform over :attr:`lengths` unless ``length`` is given.
        """
        if split not in SPLITS:
            raise InputError(f"split must be one of {SPLITS}, got {split!r}")
        rng = random.Random(f"{self.name}/{split}/{seed}")
        lengths = list(self.lengths)
        while True:
            src = self.sample(rng, length if length is not None else rng.choice(lengths))
            if self.split_of(src) == split:
                yield Example(src, self.target(src))

    def examples(
        self, split: str, n: int, seed: int = 0, length: int | None = None
    ) -> list[Example]:
        """Up to ``n`` distinct examples of ``split``, fixed by ``seed``.

        Fewer come back when the split holds fewer distinct texts (e.g. length-1 strings).
        """
        seen: dict[str, Example] = {}
        stream = self.stream(split, seed, length)
        for _ in range(50 * n):
            ex = next(stream)
            seen.setdefault(ex.src, ex)
            if len(seen) == n:
                break
        return list(seen.values())

    def length_of(self, src: str) -> int:
        """Length of a source text in tokens."""
        return len(src) if self.kind == "char" else len(src.split())


# -- character tasks on a-z strings ---------------------------------------------------------
_LETTERS = list(string.ascii_lowercase)
_CHAR_MODEL = dict(d_model=128, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=256)
_CHAR_TRAINING = dict(steps=3000, batch_size=128, lr=1e-3, warmup=300)


@dataclass
class _LetterTask(Task):
    kind: str = "char"
    probe: str = "helloworld"
    model: dict = field(default_factory=lambda: dict(_CHAR_MODEL, dropout=0.0))
    training: dict = field(default_factory=lambda: dict(_CHAR_TRAINING))

    def sample(self, rng: random.Random, length: int) -> str:
        return "".join(rng.choices(_LETTERS, k=length))

    def source_symbols(self) -> list[str]:
        return list(_LETTERS)


@dataclass
class Reverse(_LetterTask):
    name: str = "reverse"
    description: str = "a-z strings of length 1-20 -> the same string reversed"

    def target(self, src: str) -> str:
        return src[::-1]

    def links(self, src: str) -> list[tuple[int, int]]:
        return [(len(src) - 1 - j, j) for j in range(len(src))]


@dataclass
class Copy(_LetterTask):
    name: str = "copy"
    description: str = "a-z strings of length 1-20 -> the same string"

    def target(self, src: str) -> str:
        return src

    def links(self, src: str) -> list[tuple[int, int]]:
        return [(j, j) for j in range(len(src))]


@dataclass
class Sort(_LetterTask):
    name: str = "sort"
    description: str = "a-z strings of length 1-20 -> their letters sorted a-z"
    probe: str = "transformer"

    def target(self, src: str) -> str:
        return "".join(sorted(src))

    def links(self, src: str) -> list[tuple[int, int]]:
        """Each output letter to the source position it came from (equal letters in order)."""
        order = sorted(range(len(src)), key=lambda i: src[i])  # a stable sort
        return [(i, j) for j, i in enumerate(order)]


#: Symbols of the ``repeat`` task: 62 distinct one-character tokens.
_REPEAT_SYMBOLS = list(string.ascii_lowercase + string.ascii_uppercase + string.digits)


@dataclass
class Repeat(Task):
    """Random tokens, then the same tokens again: the sequences on which induction heads form.

    A source is drawn without repeats (each token once), so in ``<bos> r r`` the earlier
    occurrence of every token of the second half is unique. A decoder-only model learns the
    whole sequence (``lm_loss="all"``): the first half cannot be predicted (about ln 62 =
    4.13 nats a token), the second half can, by looking back at what followed the same token
    before. Trained with ``--arch decoder-only --attn-only`` (the task's defaults).
    """

    name: str = "repeat"
    kind: str = "char"
    description: str = "random tokens (a-z A-Z 0-9, each once) -> the same tokens again"
    probe: str = "qXb3LmZ7tRw2Kp9"
    lengths: range = range(6, 26)
    separator: bool = False
    lm_loss: str = "all"
    induction: bool = True
    model: dict = field(
        default_factory=lambda: dict(
            arch="decoder-only", attn_only=True, d_model=64, n_heads=4, n_decoder_layers=2,
            n_encoder_layers=0, dropout=0.0, positions="rotary", norm_first=True,
            final_norm=True,
        )
    )  # fmt: skip
    # the phase change comes a few hundred steps in: a snapshot every 25 steps catches it
    training: dict = field(
        default_factory=lambda: dict(
            steps=1000, batch_size=64, lr=3e-3, warmup=100, snapshot_every=25
        )
    )

    def sample(self, rng: random.Random, length: int) -> str:
        return "".join(rng.sample(_REPEAT_SYMBOLS, k=min(length, len(_REPEAT_SYMBOLS))))

    def target(self, src: str) -> str:
        return src

    def links(self, src: str) -> list[tuple[int, int]]:
        return [(j, j) for j in range(len(src))]

    def source_symbols(self) -> list[str]:
        return list(_REPEAT_SYMBOLS)


# -- toy translation ------------------------------------------------------------------------
# Source: an English-like subject-verb-object language.
#   S   -> NP V NP [ADV] [PP]
#   NP  -> DET [ADJ] N
#   PP  -> P NP
# Target: a subject-object-verb language with adjectives after the noun and postpositions.
#   S'  -> NP' NP' [PP'] [ADV'] V'          (the verb moves to the end, past the object,
#   NP' -> [DET'] N' [ADJ']                  the prepositional phrase and the adverb)
#   PP' -> NP' P'
# Word mapping is one-to-one except: "the" is dropped (no target word); "every" and the verbs
# in lex.TWO_WORD_VERBS become two target words. So cross-attention is non-monotonic (verb,
# adjectives, postpositions), and some target words align to nothing or share a source word.
@dataclass
class Translate(Task):
    name: str = "translate"
    kind: str = "word"
    description: str = (
        "toy translation: subject-verb-object English-like sentences -> subject-object-verb, "
        "adjective after noun, postpositions; 'the' dropped, some words become two"
    )
    probe: str = "the big dog sees a small cat quickly with my friend"
    lengths: range = range(5, 13)
    model: dict = field(
        default_factory=lambda: dict(
            d_model=128, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=512, dropout=0.1
        )
    )
    training: dict = field(
        default_factory=lambda: dict(steps=3000, batch_size=64, lr=1e-3, warmup=300)
    )

    def __post_init__(self) -> None:
        self.lexicon = lex.lexicon()

    def _np(self, rng: random.Random, adj: bool) -> list[str]:
        return [
            rng.choice(lex.DETS),
            *([rng.choice(lex.ADJS)] if adj else []),
            rng.choice(lex.NOUNS),
        ]

    def sample(self, rng: random.Random, length: int) -> str:
        """A sentence of ``length`` words (5-12): fills the optional slots to reach it."""
        if length not in self.lengths:
            raise InputError(
                f"translate sentences have {self.lengths.start}-{self.lengths.stop - 1} words"
            )
        # optional slots and their sizes: subject adj 1, object adj 1, adverb 1, PP 2 (+1 adj)
        while True:
            subj_adj, obj_adj, adv = (rng.random() < 0.5 for _ in range(3))
            pp = rng.choice((0, 2, 3))  # 0: none, 2: P DET N, 3: P DET ADJ N -> 3 or 4 words
            n = 5 + subj_adj + obj_adj + adv + (pp + 1 if pp else 0)
            if n == length:
                break
        words = [*self._np(rng, subj_adj), rng.choice(lex.VERBS), *self._np(rng, obj_adj)]
        if adv:
            words.append(rng.choice(lex.ADVS))
        if pp:
            words += [rng.choice(lex.PREPS), *self._np(rng, pp == 3)]
        return " ".join(words)

    def _parse_np(self, words: list[str], i: int) -> tuple[list[tuple[str, int]], int]:
        """One noun phrase from word ``i``: its target words with their source word index."""
        det, i = i, i + 1
        adj = []
        if words[i] in lex.ADJS:
            adj, i = [i], i + 1
        noun = i
        out = [(w, det) for w in self.lexicon[words[det]]]
        out += [(w, noun) for w in self.lexicon[words[noun]]]
        out += [(self.lexicon[words[a]][0], a) for a in adj]
        return out, i + 1

    def _translate(self, src: str) -> list[tuple[str, int]]:
        """Target words, each with the index of the source word it translates."""
        words = src.split()
        subj, i = self._parse_np(words, 0)
        verb, i = [(w, i) for w in self.lexicon[words[i]]], i + 1
        obj, i = self._parse_np(words, i)
        adv: list[tuple[str, int]] = []
        if i < len(words) and words[i] in lex.ADVS:
            adv, i = [(w, i) for w in self.lexicon[words[i]]], i + 1
        pp: list[tuple[str, int]] = []
        if i < len(words):
            prep = [(w, i) for w in self.lexicon[words[i]]]
            np_, i = self._parse_np(words, i + 1)
            pp = [*np_, *prep]
        return [*subj, *obj, *pp, *adv, *verb]

    def target(self, src: str) -> str:
        return " ".join(w for w, _ in self._translate(src))

    def links(self, src: str) -> list[tuple[int, int]]:
        """Each target word to the source word it translates ("the" has none; a two-word
        translation links both words to its source word)."""
        return [(i, j) for j, (_, i) in enumerate(self._translate(src))]

    def source_symbols(self) -> list[str]:
        return list(self.lexicon)

    def target_symbols(self) -> list[str]:
        return list(dict.fromkeys(w for ws in self.lexicon.values() for w in ws))


# -- registry -------------------------------------------------------------------------------
TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a task to the registry (``attnviz train --task NAME`` then finds it)."""
    if not task.name:
        raise InputError("a task needs a name")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task called ``name``; the error lists the known tasks."""
    try:
        return TASKS[name]
    except KeyError:
        raise InputError(
            f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}"
        ) from None


for _task in (Reverse(), Copy(), Sort(), Translate(), Repeat()):
    register(_task)
