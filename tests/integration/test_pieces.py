"""The default subword vocabulary is chosen from the corpus: a corpus of number words (English
words -> German compounds, "twenty one" -> "einundzwanzig") is cut into pieces it shows often
enough to learn, the statistics are printed and kept, and a vocabulary too large is warned
about."""

from __future__ import annotations

import random

import pytest

import attnviz
from attnviz.cli import main
from attnviz.data.pieces import (
    LEARNABLE_SHARE,
    MIN_PIECE_COUNT,
    VOCAB_CAP,
    choose_subword,
    piece_stats,
)
from attnviz.train.evaluate import evaluate_pairs
from attnviz.train.feeds import train_tokenizers
from attnviz.train.loop import TrainOptions, train

EN_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]  # fmt: skip
EN_TENS = ["-", "-", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DE_ONES = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn", "siebzehn", "achtzehn", "neunzehn"]  # fmt: skip
DE_TENS = [
    "-",
    "-",
    "zwanzig",
    "dreißig",
    "vierzig",
    "fünfzig",
    "sechzig",
    "siebzig",
    "achtzig",
    "neunzig",
]


def english(n: int) -> str:
    """0 <= n < 10**6 in English words: 21 -> "twenty one", 101 -> "one hundred one"."""
    if n < 20:
        return EN_ONES[n]
    if n < 100:
        return EN_TENS[n // 10] + ("" if n % 10 == 0 else " " + EN_ONES[n % 10])
    if n < 1000:
        rest = "" if n % 100 == 0 else " " + english(n % 100)
        return f"{EN_ONES[n // 100]} hundred{rest}"
    rest = "" if n % 1000 == 0 else " " + english(n % 1000)
    return f"{english(n // 1000)} thousand{rest}"


def german(n: int, last: bool = True) -> str:
    """0 <= n < 10**6 as one German compound, units before tens: 21 -> "einundzwanzig",
    1001 -> "eintausendeins" (a final 1 is "eins", inside a compound "ein")."""
    if n == 1:
        return "eins" if last else "ein"
    if n < 20:
        return DE_ONES[n]
    if n < 100:
        units = n % 10
        unit = "ein" if units == 1 else DE_ONES[units]
        return DE_TENS[n // 10] if units == 0 else f"{unit}und{DE_TENS[n // 10]}"
    if n < 1000:
        head = ("ein" if n // 100 == 1 else DE_ONES[n // 100]) + "hundert"
        return head + ("" if n % 100 == 0 else german(n % 100, last))
    head = german(n // 1000, last=False) + "tausend"
    return head + ("" if n % 1000 == 0 else german(n % 1000, last))


def number_pairs(n: int, seed: int = 0, held_out: int = 0) -> tuple[list, list]:
    """``n`` distinct numbers below a million as (English, German) pairs, and ``held_out``
    more numbers that are not among them."""
    numbers = random.Random(seed).sample(range(1_000_000), n + held_out)
    pairs = [(english(k), german(k)) for k in numbers]
    return pairs[:n], pairs[n:]


def test_the_number_words_follow_german_compound_rules():
    assert german(21) == "einundzwanzig" and english(21) == "twenty one"
    assert german(1001) == "eintausendeins" and german(1000) == "eintausend"
    assert german(171_031) == "einhunderteinundsiebzigtausendeinunddreißig"
    assert english(171_031) == "one hundred seventy one thousand thirty one"
    assert german(999_999) == "neunhundertneunundneunzigtausendneunhundertneunundneunzig"
    assert german(16) == "sechzehn" and german(70) == "siebzig" and german(0) == "null"


def test_the_default_vocabulary_is_the_largest_whose_pieces_the_corpus_can_teach():
    pairs, _ = number_pairs(6000)
    targets = [t for _, t in pairs]
    chosen = choose_subword("bpe", targets, byte_fallback=False)
    stats = piece_stats(chosen, targets)
    # 6,000 targets are too few for 95 % of the pieces to be seen 100 times at any size: the
    # choice is the size that comes nearest, a few hundred pieces at most
    assert len(chosen) <= 300 and stats.learnable_share > 0.9
    assert stats.rare_share == 0 and 3 < stats.pieces_per_text < 10
    assert not stats.warnings("target")
    bigger = attnviz.data.tokenizer.train_tokenizer("bpe", targets, vocab_size=2 * len(chosen))
    assert piece_stats(bigger, targets).learnable_share < stats.learnable_share
    # the old fixed default cuts each target into ~2 pieces mostly seen a few times: warned about
    fixed = attnviz.data.tokenizer.train_tokenizer("bpe", targets, vocab_size=VOCAB_CAP)
    bad = piece_stats(fixed, targets, dev=["zweiundzwanzig", "dreißig"])
    assert bad.rare_share > 0.5 and bad.pieces_per_text < 2.5 and bad.dev_unknown == 0
    assert any("--vocab-size" in w for w in bad.warnings("target"))


def test_a_corpus_big_enough_for_the_cap_keeps_it_and_sides_are_chosen_apart():
    # 40 distinct words, each seen hundreds of times: every piece is learnable at any size
    words = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}x" for i in range(40)]
    rng = random.Random(0)
    texts = [" ".join(rng.choices(words, k=8)) for _ in range(3000)]
    src, tgt = train_tokenizers("bpe", texts, [t.upper() for t in texts])
    for tok, side in ((src, texts), (tgt, [t.upper() for t in texts])):
        stats = piece_stats(tok, side)
        assert stats.learnable_share == 1.0
        assert len(tok) < VOCAB_CAP  # all the corpus fills at the cap (no smaller one tried)
    assert src.split("wbax") == ["▁wbax"]
    given = train_tokenizers("bpe", texts, texts, vocab_size=50)[0]
    assert len(given) == 50  # --vocab-size is taken as given


def test_unigram_and_byte_fallback_choose_too():
    pairs, _ = number_pairs(3000, seed=1)
    targets = [t for _, t in pairs]
    for kind, fallback in (("unigram", False), ("bpe", True)):
        tok = choose_subword(kind, targets, byte_fallback=fallback)
        stats = piece_stats(tok, targets)
        assert len(tok) < VOCAB_CAP and stats.rare_share < 0.05, (kind, stats)
        assert tok.decode(tok.encode("dreiundzwanzig").ids) == "dreiundzwanzig"


def test_a_corpus_run_prints_and_keeps_the_piece_statistics(tmp_path, capsys):
    pairs, dev = number_pairs(2000, held_out=40)
    opts = TrainOptions(out=str(tmp_path / "run"), steps=2, eval_every=2, d_model=32,
                        n_heads=2, d_ff=64, batch_size=8, eval_size=8)  # fmt: skip
    train(opts, progress=False, pairs=pairs, dev_pairs=dev)
    printed = capsys.readouterr().out
    assert "sizes chosen from the corpus" in printed
    assert "target pieces: " in printed and "a sentence" in printed and "unknown on dev" in printed
    assert "warning" not in printed
    kept = attnviz.load_checkpoint(tmp_path / "run").meta["corpus"]["pieces"]
    assert kept["target"]["learnable_share"] > 0.8 and kept["target"]["rare_share"] == 0
    assert kept["target"]["size"] == len(attnviz.load_checkpoint(tmp_path / "run").tgt_tokenizer)
    assert kept["target"]["dev_unknown"] == 0.0
    # a vocabulary too large for the corpus, given by hand, is warned about
    opts.out, opts.vocab_size = str(tmp_path / "big"), 4000
    train(opts, progress=False, pairs=pairs, dev_pairs=dev)
    printed = capsys.readouterr().out
    assert "--vocab-size 4000" in printed
    assert "seen fewer than 10 times, too few to learn" in printed
    assert MIN_PIECE_COUNT == 100


@pytest.mark.slow
def test_number_words_train_to_held_out_exact_match_with_no_options(tmp_path, capsys):
    """``attnviz train --data train.tsv --out run`` alone on 30 k pairs of number words; the
    run is cut at 600 steps here (the default is 3,000) to keep the test to a few minutes."""
    pairs, test = number_pairs(30_000, held_out=300)
    data = tmp_path / "train.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(out), "--steps", "600",
                 "--quiet"]) == 0  # fmt: skip
    assert "sizes chosen from the corpus" in capsys.readouterr().out
    ckpt = attnviz.load_checkpoint(out)
    target = ckpt.meta["corpus"]["pieces"]["target"]
    assert target["learnable_share"] >= LEARNABLE_SHARE and target["size"] < 1000, target
    scores = evaluate_pairs(ckpt, test)
    assert scores.exact_match >= 0.95, scores
