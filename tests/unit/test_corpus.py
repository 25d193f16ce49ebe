"""Corpora from files: every format read, every bad corpus refused with file:line, the dev
slice stable, the encoded corpus compact and equal to encoding pair by pair."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnviz.core.errors import AttnvizError
from attnviz.data import (
    CorpusError,
    EncodedCorpus,
    encode_corpus,
    filter_length,
    read_corpus,
    read_pairs,
    split_dev,
    split_indices,
)
from attnviz.data.tokenizer import Tokenizer, train_tokenizer

PAIRS = [("hello world", "hallo welt"), ("ça va ?", "es geht"), ("3 cats", "3 Katzen")]


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _jsonl(rows: list) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


# -- the three formats ----------------------------------------------------------------------
def test_tsv_is_read_stripped_with_crlf_and_a_byte_order_mark(tmp_path):
    body = "".join(f"  {s}\t{t} \r\n" for s, t in PAIRS)
    path = _write(tmp_path / "c.tsv", b"\xef\xbb\xbf" + body.encode())
    assert read_pairs(path) == PAIRS


def test_aligned_files_pair_line_i_with_line_i(tmp_path):
    src = _write(tmp_path / "train.en", "".join(s + "\n" for s, _ in PAIRS))
    tgt = _write(tmp_path / "train.de", "".join(t + "\n" for _, t in PAIRS))
    assert read_pairs(src, tgt) == PAIRS
    assert read_pairs(str(tgt), str(src)) == [(t, s) for s, t in PAIRS]


def test_jsonl_translation_lines_with_and_without_langs(tmp_path):
    rows = [{"translation": {"en": s, "de": t}} for s, t in PAIRS]
    path = _write(tmp_path / "c.jsonl", _jsonl(rows))
    assert read_pairs(path) == PAIRS  # two keys: the first line's order is source, target
    assert read_pairs(path, langs=("de", "en")) == [(t, s) for s, t in PAIRS]
    three = [{"translation": {"en": s, "de": t, "fr": "x"}} for s, t in PAIRS]
    path3 = _write(tmp_path / "three.jsonl", _jsonl(three))
    assert read_pairs(path3, langs=["en", "fr"]) == [(s, "x") for s, _ in PAIRS]


def test_empty_sides_are_skipped_and_counted(tmp_path):
    path = _write(tmp_path / "c.tsv", "a\tb\n\tonly target\nonly source\t\n\n  \t \nc\td\n")
    corpus = read_corpus(path)
    assert corpus.pairs == [("a", "b"), ("c", "d")]
    assert corpus.n_empty == 4
    assert "4 with an empty side skipped" in corpus.summary()


# -- bad corpora: one clear message each ----------------------------------------------------
def _refused(match: str, *args, **kwargs) -> str:
    with pytest.raises(CorpusError, match=match) as info:
        read_pairs(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("src_lines, tgt_lines", [(5, 3), (3, 5)])
def test_aligned_files_of_different_lengths_name_both_counts(tmp_path, src_lines, tgt_lines):
    src = _write(tmp_path / "a.txt", "".join(f"s{i}\n" for i in range(src_lines)))
    tgt = _write(tmp_path / "b.txt", "".join(f"t{i}\n" for i in range(tgt_lines)))
    msg = _refused("same number of lines", src, tgt)
    assert f"{src} has {src_lines} lines" in msg and f"{tgt} has {tgt_lines}" in msg


@pytest.mark.parametrize("line, tabs", [("no tab here", 0), ("a\tb\tc", 2)])
def test_a_tsv_line_without_exactly_one_tab_is_named(tmp_path, line, tabs):
    path = _write(tmp_path / "c.tsv", f"a\tb\nc\td\n{line}\n")
    _refused(rf"c\.tsv:3: expected source<TAB>target \(one tab\), found {tabs} tabs", path)


@pytest.mark.parametrize(
    "line, match",
    [
        ('["en", "de"]', r":2: expected a JSON object, found list"),
        ("{not json", r":2: not JSON"),
        ('{"en": "a", "de": "b"}', r':2: expected \{"translation"'),
        ('{"translation": {"en": "a"}}', r":2: no 'de' text"),
        ('{"translation": {"en": "a", "de": 3}}', r":2: the texts .* must be strings"),
        (
            '{"translation": {"en": "a\\ud800b", "de": "c"}}',
            r":2: the 'en' text holds a lone surrogate \(U\+D800 at character 2\)",
        ),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path, line, match):
    path = _write(tmp_path / "c.jsonl", '{"translation": {"en": "x", "de": "y"}}\n' + line + "\n")
    _refused(r"c\.jsonl" + match, path)


def test_jsonl_with_more_than_two_languages_needs_langs(tmp_path):
    path = _write(
        tmp_path / "c.jsonl", _jsonl([{"translation": {"en": "a", "de": "b", "fr": "c"}}])
    )
    _refused(r"c\.jsonl:1: 3 languages .*--langs SRC TGT", path)
    _refused(r":1: no 'it' text", path, langs=("en", "it"))


@pytest.mark.parametrize("name", ["c.tsv", "c.jsonl", "a.txt"])
def test_bytes_that_are_not_utf8_are_named_by_file_and_line(tmp_path, name):
    good = '{"translation": {"en": "x", "de": "y"}}\n' if name.endswith("jsonl") else "x\ty\n"
    path = _write(tmp_path / name, (good * 2).encode() + b"caf\xe9\tcafe\n")
    args = (path, _write(tmp_path / "b.txt", "1\n2\n3\n")) if name == "a.txt" else (path,)
    _refused(rf"{name}:3: not UTF-8 \(byte 0xe9 at column 4\)", *args)


def test_an_empty_corpus_and_one_of_only_empty_pairs_are_refused(tmp_path):
    _refused("it is empty", _write(tmp_path / "e.tsv", ""))
    _refused("all 3 pairs have an empty side", _write(tmp_path / "x.tsv", "\ta\nb\t\n\n"))
    a, b = _write(tmp_path / "a.txt", ""), _write(tmp_path / "b.txt", "")
    _refused("it is empty", a, b)


def test_missing_files_unknown_formats_and_bad_langs_are_refused(tmp_path):
    _refused("cannot read", tmp_path / "none.tsv")
    _refused("give a .tsv", _write(tmp_path / "c.csv", "a,b\n"))
    tsv = _write(tmp_path / "c.tsv", "a\tb\n")
    _refused("langs only applies", tsv, langs=("en", "de"))
    _refused("two different languages", tsv, langs=("en", "en"))


def test_corpus_errors_are_user_errors():
    assert issubclass(CorpusError, AttnvizError)


# -- held-out dev slice ---------------------------------------------------------------------
def _corpus(n: int) -> list[tuple[str, str]]:
    return [(f"source sentence {i}", f"target {i}") for i in range(n)]


@pytest.mark.parametrize("n, want", [(300, 100), (50_000, 500), (250_000, 2000), (120, 60)])
def test_dev_size_is_one_percent_clamped(n, want):
    train, dev, desc = split_dev(_corpus(n))
    assert len(dev) == want and len(train) == n - want
    assert f"{want:,} of {n:,} pairs held out by a hash of the source" in desc


def test_dev_slice_does_not_depend_on_line_order_or_the_python_hash_seed():
    pairs = _corpus(5000)
    _, dev, _ = split_dev(pairs)
    shuffled = list(pairs)
    np.random.default_rng(0).shuffle(shuffled)
    _, dev2, _ = split_dev(shuffled)
    assert sorted(dev) == sorted(dev2)
    # a golden value: Python's hash() changes from process to process, blake2b does not
    _, dev_idx, _ = split_indices([s for s, _ in pairs])
    assert dev_idx[:5].tolist() == [22, 164, 245, 354, 440]


def test_copies_of_a_source_land_on_the_same_side():
    pairs = [(f"s{i % 150}", f"t{i}") for i in range(3000)]  # 20 copies of each source
    train, dev, _ = split_dev(pairs)
    assert not {s for s, _ in train} & {s for s, _ in dev}
    assert len(dev) >= 100


def test_too_small_a_corpus_to_split_is_refused():
    with pytest.raises(CorpusError, match="too few"):
        split_indices(["only one"])


# -- encoded corpus -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["char", "word", "bpe", "unigram"])
def test_encoded_corpus_equals_encoding_pair_by_pair(kind):
    pairs = [(f"the {i} dogs see", f"die {i % 7} Hunde sehen") for i in range(200)]
    src = train_tokenizer(kind, [s for s, _ in pairs], vocab_size=60 if kind != "word" else None)
    tgt = train_tokenizer(kind, [t for _, t in pairs], vocab_size=60 if kind != "word" else None)
    enc = encode_corpus(pairs, src, tgt)
    assert len(enc) == len(pairs) and enc.src.dtype == np.uint16
    for i in (0, 17, 199, -1):
        s, t = pairs[i]
        assert enc.pair(i) == (src.encode(s).ids, tgt.encode(t).ids)
    assert enc.src_lengths.tolist() == [len(src.encode(s).ids) for s, _ in pairs]
    rows_s, rows_t = enc.rows([3, 1])
    assert rows_s == [enc.pair(3)[0], enc.pair(1)[0]] and rows_t[1] == enc.pair(1)[1]


def test_filter_drops_long_pairs_and_counts_them():
    tok = Tokenizer("word", [f"w{i}" for i in range(20)])
    pairs = [(" ".join(f"w{j}" for j in range(n)), " ".join(["w0"] * m)) for n, m in
             [(1, 1), (5, 2), (2, 6), (3, 3), (4, 4)]]  # fmt: skip
    enc = encode_corpus(pairs, tok, tok)
    kept, dropped = enc.filter(4)
    assert dropped == 2 and len(kept) == 3
    assert [kept.pair(i) for i in range(3)] == [enc.pair(i) for i in (0, 3, 4)]
    same, none = filter_length(enc, 6)
    assert none == 0 and len(same) == 5
    listed, n = filter_length([enc.pair(i) for i in range(5)], 4)
    assert n == 2 and listed == [enc.pair(i) for i in (0, 3, 4)]
    with pytest.raises(CorpusError, match="at least 1"):
        enc.filter(0)


def test_subset_keeps_the_order_asked_for_and_refuses_bad_indices():
    tok = Tokenizer("char", list("abcdef"))
    enc = encode_corpus([("ab", "c"), ("", "def"), ("fed", "a")], tok, tok)
    sub = enc.subset([2, 0])
    assert isinstance(sub, EncodedCorpus) and len(sub) == 2
    assert sub.pair(0) == enc.pair(2) and sub.pair(1) == enc.pair(0)
    assert len(enc.subset([])) == 0
    with pytest.raises(IndexError, match="outside a corpus of 3 pairs"):
        enc.subset([3])
    with pytest.raises(IndexError, match="pair 3 of 3"):
        enc.pair(3)
