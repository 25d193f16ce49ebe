"""`attnviz evaluate DIR --data ...`: exact match by source length, and BLEU/chrF that are
sacrebleu's own numbers on the same outputs."""

from __future__ import annotations

import json

import pytest
import sacrebleu
import torch

import attnviz
from attnviz.cli import main
from attnviz.core.errors import InputError
from attnviz.data.tokenizer import train_tokenizer
from attnviz.train.evaluate import corpus_scores, evaluate_pairs, same_text

_PAIRS = [
    ("a b c", "c b a"),
    ("b b", "b b"),
    ("c a", "a c"),
    ("a", "a"),
    ("c c c c", "c c c c"),
    ("b a c a", "a c a b"),
]


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    """A small random model over a word vocabulary (its outputs are arbitrary, which is what
    scoring has to handle)."""
    tok = train_tokenizer("word", [t for p in _PAIRS for t in p])
    torch.manual_seed(0)
    cfg = attnviz.ModelConfig(len(tok), len(tok), d_model=16, n_heads=2, d_ff=32, max_len=16)
    folder = tmp_path_factory.mktemp("ckpt")
    attnviz.save_checkpoint(folder, attnviz.Transformer(cfg).eval(), tok, tok, {"task": None})
    return folder


def test_bleu_and_chrf_equal_sacrebleu_on_the_same_predictions(ckpt_dir):
    report = evaluate_pairs(ckpt_dir, _PAIRS)
    refs = [t for _, t in _PAIRS]
    assert report.predictions == attnviz.load_checkpoint(ckpt_dir).predict_batch(
        [s for s, _ in _PAIRS]
    )
    assert report.bleu == pytest.approx(sacrebleu.corpus_bleu(report.predictions, [refs]).score)
    assert report.chrf == pytest.approx(sacrebleu.corpus_chrf(report.predictions, [refs]).score)
    hyps = ["the cat sat on the mat", "a dog", "ünïcode ✓ text"]
    refs = ["the cat sat on a mat", "the dog", "ünïcode ✓ text"]
    got = corpus_scores(hyps, refs)
    assert got["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=0)
    assert got["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=0)


def test_exact_match_by_source_length(ckpt_dir):
    report = evaluate_pairs(ckpt_dir, _PAIRS)
    assert sorted(report.by_length) == [1, 2, 3, 4]
    assert sum(n for _, n in report.by_length.values()) == len(_PAIRS) == report.n
    right = [same_text(p, t) for p, (_, t) in zip(report.predictions, _PAIRS, strict=True)]
    assert report.exact == sum(right) == sum(r for r, _ in report.by_length.values())
    assert same_text("a  b ", "a b") and not same_text("ab", "a b")


def test_cli_evaluate_writes_json_and_predictions(ckpt_dir, tmp_path, capsys):
    data = tmp_path / "test.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in _PAIRS), encoding="utf-8")
    js, preds = tmp_path / "scores.json", tmp_path / "preds.txt"
    argv = ["evaluate", str(ckpt_dir), "--data", str(data), "--json", str(js),
            "--predictions", str(preds)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "exact match:" in printed and "BLEU" in printed and "nrefs:1" in printed
    doc = json.loads(js.read_text())
    lines = preds.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(_PAIRS) + 1
    refs = [t for _, t in _PAIRS]
    assert doc["bleu"] == pytest.approx(sacrebleu.corpus_bleu(lines[:-1], [refs]).score)
    assert doc["chrf"] == pytest.approx(sacrebleu.corpus_chrf(lines[:-1], [refs]).score)
    assert doc["n"] == len(_PAIRS) and set(doc["by_source_length"]) == {"1", "2", "3", "4"}


def test_evaluate_refuses_what_it_cannot_score(ckpt_dir, tmp_path, capsys):
    with pytest.raises(InputError, match="pair 2: the input has 17 tokens"):
        evaluate_pairs(ckpt_dir, [("a", "a"), ("a " * 17, "a")])
    with pytest.raises(InputError, match="no pairs"):
        evaluate_pairs(ckpt_dir, [])
    bad = tmp_path / "bad.tsv"
    bad.write_text("a b\tb a\nno tab here\n", encoding="utf-8")
    assert main(["evaluate", str(ckpt_dir), "--data", str(bad)]) == 2
    assert "bad.tsv:2" in capsys.readouterr().err
    assert main(["evaluate", str(ckpt_dir), "--json", str(tmp_path / "x.json")]) == 2
