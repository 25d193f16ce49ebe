"""Parallel corpora from files: TSV, two aligned plain-text files, or JSONL ``{"translation": ...}``.

Reading checks every line and names the first bad one as ``file:line``; nothing is guessed
or silently repaired. Pairs with an empty side are skipped and counted (a corpus where every
pair is empty is refused). Whitespace at both ends of each side is stripped.

Encoded corpora (:class:`EncodedCorpus`) keep every id of a side in one flat numpy array plus
offsets, so a million pairs take tens of megabytes rather than gigabytes of Python lists.
"""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from ..core.errors import CorpusError, one_line
from .tokenizer import Tokenizer

Pair = tuple[str, str]


@dataclass
class Corpus:
    """Pairs read from files.

    Attributes:
        pairs: ``(source, target)`` texts, stripped, none empty.
        n_empty: pairs skipped because a side was empty.
        where: the file(s) read, for messages.
    """

    pairs: list[Pair]
    n_empty: int
    where: str

    def summary(self) -> str:
        """One line: how many pairs, from where, how many skipped."""
        skipped = f" ({self.n_empty} with an empty side skipped)" if self.n_empty else ""
        return f"{len(self.pairs):,} pairs from {self.where}{skipped}"


# -- reading --------------------------------------------------------------------------------
#: Longest line a corpus file may have, in bytes: a line is one sentence pair, and reading a
#: line of gigabytes (a file without line breaks, ``/dev/zero``) would need as much memory.
MAX_LINE_BYTES = 1 << 20


def _open_regular(path: Path):
    """``path`` opened for reading in binary, if it is a regular file (a FIFO would block, a
    device never end)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise CorpusError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, a pipe)"
        raise CorpusError(f"cannot read {path}: it is {what}; give a corpus file")
    try:
        return path.open("rb")
    except OSError as exc:
        raise CorpusError(f"cannot read {path}: {exc.strerror}") from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for every line of a UTF-8 file, end of line removed; a line
    longer than :data:`MAX_LINE_BYTES` is refused without being read whole."""
    with _open_regular(path) as f:
        for n, raw in enumerate(iter(partial(f.readline, MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):  # cut at the limit
                raise CorpusError(
                    f"{path}:{n}: the line is longer than {MAX_LINE_BYTES:,} bytes (1 MB); a "
                    "corpus line holds one sentence pair"
                )
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte-order mark is not text
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(
                    f"{path}:{n}: not UTF-8 (byte {raw[exc.start]:#04x} at column "
                    f"{exc.start + 1}); convert the file to UTF-8"
                ) from None
            yield n, line.rstrip("\r\n")


def _tsv(path: Path) -> Iterator[tuple[int, str, str]]:
    for n, line in _lines(path):
        if not line.strip():
            yield n, "", ""
            continue
        tabs = line.count("\t")
        if tabs != 1:
            raise CorpusError(
                f"{path}:{n}: expected source<TAB>target (one tab), found {tabs} tabs"
            )
        src, tgt = line.split("\t")
        yield n, src, tgt


def _jsonl(path: Path, langs: Sequence[str] | None) -> Iterator[tuple[int, str, str]]:
    order = tuple(langs) if langs else None
    for n, line in _lines(path):
        if not line.strip():
            yield n, "", ""
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{n}: not JSON ({exc.msg} at column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:  # a number of 4,300+ digits, deep nesting
            raise CorpusError(f"{path}:{n}: not readable JSON ({one_line(exc, 200)})") from None
        if not isinstance(doc, dict):
            raise CorpusError(f"{path}:{n}: expected a JSON object, found {type(doc).__name__}")
        tr = doc.get("translation")
        if not isinstance(tr, dict):
            raise CorpusError(
                f'{path}:{n}: expected {{"translation": {{"<src>": ..., "<tgt>": ...}}}}'
            )
        if order is None:
            if len(tr) != 2:
                raise CorpusError(
                    f"{path}:{n}: {len(tr)} languages ({', '.join(map(str, tr)) or 'none'}); "
                    "name the pair with --langs SRC TGT"
                )
            order = tuple(tr)
        missing = [lang for lang in order if lang not in tr]
        if missing:
            raise CorpusError(f"{path}:{n}: no {missing[0]!r} text (languages {list(tr)})")
        src, tgt = (tr[lang] for lang in order)
        if not isinstance(src, str) or not isinstance(tgt, str):
            raise CorpusError(f"{path}:{n}: the texts of {order} must be strings")
        for lang, text in zip(order, (src, tgt), strict=True):
            bad = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
            if bad is not None:  # a JSON \ud800 escape: no character, and no UTF-8 for it
                raise CorpusError(
                    f"{path}:{n}: the {lang!r} text holds a lone surrogate (U+{ord(text[bad]):04X}"
                    f" at character {bad + 1}), which is no character; fix or drop the line"
                )
        yield n, src, tgt


def _aligned(src_path: Path, tgt_path: Path) -> Iterator[tuple[int, str, str]]:
    a, b = _lines(src_path), _lines(tgt_path)
    n = 0
    for n, src in a:
        nxt = next(b, None)
        if nxt is None:
            rest = n + sum(1 for _ in a)
            raise CorpusError(
                f"{src_path} has {rest} lines but {tgt_path} has {n - 1}; aligned files need "
                "the same number of lines"
            )
        yield n, src, nxt[1]
    extra = sum(1 for _ in b)
    if extra:
        raise CorpusError(
            f"{src_path} has {n} lines but {tgt_path} has {n + extra}; aligned files need the "
            "same number of lines"
        )


def read_corpus(
    path: str | Path, tgt_path: str | Path | None = None, langs: Sequence[str] | None = None
) -> Corpus:
    """Read a parallel corpus, checking every line (see :func:`read_pairs`).

    Returns:
        a :class:`Corpus`: the pairs and how many were skipped for an empty side.
    Raises:
        CorpusError: a file that is missing or unreadable, not UTF-8, a TSV line without
            exactly one tab, a JSONL line that is not a ``{"translation": {...}}`` object or
            lacks a language, aligned files of different lengths, or no non-empty pair.
    """
    path = Path(path)
    if langs is not None and (len(langs) != 2 or langs[0] == langs[1]):
        raise CorpusError(f"langs must name two different languages, got {list(langs)}")
    if tgt_path is not None:
        tgt_path = Path(tgt_path)
        rows, where = _aligned(path, tgt_path), f"{path} + {tgt_path}"
    elif path.suffix.lower() == ".jsonl":
        rows, where = _jsonl(path, langs), str(path)
    elif path.suffix.lower() == ".tsv":
        rows, where = _tsv(path), str(path)
    else:
        raise CorpusError(
            f'{path}: give a .tsv (source<TAB>target), a .jsonl ({{"translation": ...}}) '
            "or two aligned plain-text files"
        )
    if langs is not None and not (tgt_path is None and path.suffix.lower() == ".jsonl"):
        raise CorpusError("langs only applies to a .jsonl corpus")
    pairs: list[Pair] = []
    empty = 0
    for _, src, tgt in rows:
        src, tgt = src.strip(), tgt.strip()
        if src and tgt:
            pairs.append((src, tgt))
        else:
            empty += 1
    if not pairs:
        what = f"all {empty} pairs have an empty side" if empty else "it is empty"
        raise CorpusError(f"no pairs to read in {where}: {what}")
    return Corpus(pairs, empty, where)


def read_pairs(
    path: str | Path, tgt_path: str | Path | None = None, langs: Sequence[str] | None = None
) -> list[Pair]:
    """A parallel corpus as ``(source, target)`` pairs.

    Args:
        path: a ``.tsv`` (``source<TAB>target`` per line), a ``.jsonl`` (Hugging Face
            ``{"translation": {"en": ..., "de": ...}}`` per line), or the source file of two
            aligned plain-text files (line *i* of one is the translation of line *i* of the
            other).
        tgt_path: the target file of two aligned files.
        langs: ``(source, target)`` language keys of a ``.jsonl``; optional when every line
            has exactly two (then the first line's order is source, target).
    Returns:
        the pairs, each side stripped; pairs with an empty side are skipped
        (:func:`read_corpus` says how many).
    Raises:
        CorpusError: see :func:`read_corpus`.
    """
    return read_corpus(path, tgt_path, langs).pairs


# -- held-out dev slice ---------------------------------------------------------------------
def _source_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def split_indices(
    sources: Sequence[str], *, fraction: float = 0.01, minimum: int = 100, maximum: int = 2000
) -> tuple[np.ndarray, np.ndarray, str]:
    """Which pairs to hold out as dev, chosen by a stable hash of the source text.

    The dev pairs are those whose source hashes lowest; every copy of a source lands on
    the same side, and the choice does not depend on the order of the lines. The size is
    ``fraction`` of the corpus, clamped to ``[minimum, maximum]`` and to half the corpus.

    Returns:
        ``(train indices, dev indices, description)``, indices ascending (int64).
    """
    n = len(sources)
    if n < 2:
        raise CorpusError(f"{n} pair is too few to hold out a dev set; give a dev corpus")
    want = min(max(round(fraction * n), minimum), maximum, n // 2)
    hashes = np.fromiter((_source_hash(s) for s in sources), dtype=np.uint64, count=n)
    order = np.argsort(hashes, kind="stable")
    cut = max(want, 1)
    # extend past ties so that equal sources never straddle the cut (stop at half the corpus)
    while cut < n // 2 and hashes[order[cut]] == hashes[order[cut - 1]]:
        cut += 1
    dev = np.sort(order[:cut])
    train = np.sort(order[cut:])
    desc = (
        f"dev: {len(dev):,} of {n:,} pairs held out by a hash of the source "
        f"({100 * len(dev) / n:.1f} %)"
    )
    return train, dev, desc


def split_dev(
    pairs: Sequence[Pair], *, fraction: float = 0.01, minimum: int = 100, maximum: int = 2000
) -> tuple[list[Pair], list[Pair], str]:
    """A deterministic held-out dev slice (see :func:`split_indices`).

    Returns:
        ``(train pairs, dev pairs, description)``, both in corpus order.
    """
    train, dev, desc = split_indices(
        [p[0] for p in pairs], fraction=fraction, minimum=minimum, maximum=maximum
    )
    return [pairs[i] for i in train], [pairs[i] for i in dev], desc


# -- encoded corpora ------------------------------------------------------------------------
def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _take(ids: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``idx`` of a flat array: new flat ids and offsets."""
    starts, ends = offsets[idx], offsets[idx + 1]
    lengths = ends - starts
    new_off = _offsets(lengths)
    if not len(idx):
        return ids[:0].copy(), new_off
    # one gather: position k of the output reads ids[starts[row] + (k - new_off[row])]
    row = np.repeat(np.arange(len(idx)), lengths)
    pos = starts[row] + (np.arange(new_off[-1]) - new_off[row])
    return ids[pos], new_off


@dataclass
class EncodedCorpus:
    """Token ids of a corpus, compactly: one flat array per side plus row offsets.

    Attributes:
        src, tgt: every id of a side, row after row (uint16 when the vocabulary fits, else
            int32); no start or end ids.
        src_offsets, tgt_offsets: ``[N + 1]`` int64; row ``i`` is ``src[src_offsets[i]:
            src_offsets[i + 1]]``.
    """

    src: np.ndarray
    src_offsets: np.ndarray
    tgt: np.ndarray
    tgt_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lengths(self) -> np.ndarray:
        """``[N]`` source lengths in tokens."""
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        """``[N]`` target lengths in tokens (without the end id)."""
        return np.diff(self.tgt_offsets)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.src, self.src_offsets, self.tgt, self.tgt_offsets))

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        """Source and target ids of pair ``i``."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} of {len(self)}")
        i %= len(self)
        s, t = self.src_offsets, self.tgt_offsets
        return self.src[s[i] : s[i + 1]].tolist(), self.tgt[t[i] : t[i + 1]].tolist()

    def rows(self, indices: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
        """Source rows and target rows of ``indices`` (for :func:`attnviz.data.batch.make_batch`)."""
        pairs = [self.pair(int(i)) for i in indices]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def subset(self, indices: Sequence[int] | np.ndarray) -> EncodedCorpus:
        """The pairs ``indices`` (in that order) as a new corpus."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"indices outside a corpus of {len(self)} pairs")
        src, so = _take(self.src, self.src_offsets, idx)
        tgt, to = _take(self.tgt, self.tgt_offsets, idx)
        return EncodedCorpus(src, so, tgt, to)

    def filter(self, max_len: int) -> tuple[EncodedCorpus, int]:
        """Drop the pairs with more than ``max_len`` source or target tokens.

        Returns:
            ``(kept corpus, number dropped)``; nothing is truncated.
        """
        if max_len < 1:
            raise CorpusError(f"the maximum length must be at least 1, got {max_len}")
        keep = (self.src_lengths <= max_len) & (self.tgt_lengths <= max_len)
        dropped = int((~keep).sum())
        return (self if not dropped else self.subset(np.flatnonzero(keep))), dropped


def _compact(ids: np.ndarray, vocab: int) -> np.ndarray:
    return ids.astype(np.uint16) if vocab <= np.iinfo(np.uint16).max + 1 else ids


def encode_corpus(pairs: Sequence[Pair], src_tok: Tokenizer, tgt_tok: Tokenizer) -> EncodedCorpus:
    """Tokenize every pair once into an :class:`EncodedCorpus`.

    Subword tokenizers encode in batches (Rust, all cores); char and word ones in Python.
    """
    srcs = [p[0] for p in pairs]
    src, src_len = src_tok.encode_flat(srcs)
    del srcs
    tgts = [p[1] for p in pairs]
    tgt, tgt_len = tgt_tok.encode_flat(tgts)
    del tgts
    return EncodedCorpus(
        _compact(src, len(src_tok)),
        _offsets(src_len),
        _compact(tgt, len(tgt_tok)),
        _offsets(tgt_len),
    )


def filter_length(
    corpus: EncodedCorpus | Sequence[tuple[Sequence[int], Sequence[int]]], max_len: int
) -> tuple[EncodedCorpus | list, int]:
    """Drop pairs longer than ``max_len`` tokens on either side; returns ``(kept, n_dropped)``.

    Takes an :class:`EncodedCorpus` (returns one) or a list of ``(source ids, target ids)``.
    Lengths count tokens without start/end ids. Nothing is truncated.
    """
    if isinstance(corpus, EncodedCorpus):
        return corpus.filter(max_len)
    if max_len < 1:
        raise CorpusError(f"the maximum length must be at least 1, got {max_len}")
    kept = [p for p in corpus if len(p[0]) <= max_len and len(p[1]) <= max_len]
    return kept, len(corpus) - len(kept)


# -- writing --------------------------------------------------------------------------------
def write_tsv(path: str | Path, pairs: Sequence[Pair]) -> Path:
    """Write pairs as ``source<TAB>target`` lines (UTF-8), replacing the file in one step.

    Raises:
        CorpusError: a text holding a tab or a line break (it would not read back).
    """
    bad = next((i for i, p in enumerate(pairs) if any(c in s for s in p for c in "\t\r\n")), None)
    if bad is not None:
        raise CorpusError(f"pair {bad} holds a tab or line break: {pairs[bad]!r}")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    tmp.replace(path)
    return path


#: The file name of each split :func:`write_task_corpus` writes, with the task split it draws.
CORPUS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def write_task_corpus(
    task, out: str | Path, sizes: dict[str, int], seed: int = 0
) -> list[tuple[Path, int]]:
    """A built-in task's splits as ``train.tsv``, ``dev.tsv`` and ``test.tsv`` in ``out``.

    Args:
        task: a :class:`attnviz.data.tasks.Task`.
        sizes: pairs per split, keys ``train``, ``dev``, ``test`` (fewer when a split holds
            fewer distinct sources).
    Returns:
        ``(path, pairs written)`` per file. Every split is drawn before anything is written.
    """
    if set(sizes) != set(CORPUS_SPLITS):
        raise CorpusError(f"give the size of each of {list(CORPUS_SPLITS)}, got {list(sizes)}")
    bad = [f"{k}={n}" for k, n in sizes.items() if n < 1]
    if bad:
        raise CorpusError(f"each split needs at least 1 pair, got {', '.join(bad)}")
    drawn = {
        name: [(e.src, e.tgt) for e in task.examples(CORPUS_SPLITS[name], sizes[name], seed=seed)]
        for name in CORPUS_SPLITS
    }
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return [(write_tsv(folder / f"{name}.tsv", pairs), len(pairs)) for name, pairs in drawn.items()]
