"""Mask filling on encoder-only models: the fillers are transformers' masked-LM output at each
mask token, a pair gets its token types, and what cannot be filled is refused in one line."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.analysis import fill_mask
from attnviz.core.errors import InputError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny random BERT with a WordPiece tokenizer trained in the test (tests/helpers.py)."""
    from helpers import tiny_bert

    folder = tmp_path_factory.mktemp("bert")
    model, fast = tiny_bert(folder)
    return model, fast, attnviz.load_checkpoint(folder)


def test_fillers_are_the_masked_lm_output_at_each_mask(bert):
    model, tok, ckpt = bert
    text = "the [MASK] sat on the [MASK]"
    f = fill_mask(ckpt, text, k=3)
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        probs = model(**enc).logits[0].softmax(-1)
    positions = [i for i, t in enumerate(enc["input_ids"][0].tolist()) if t == tok.mask_token_id]
    assert [pos for pos, _ in f.fillers] == positions and f.pieces[0] == "[CLS]"
    for pos, top in f.fillers:
        p, ids = probs[pos].topk(3)
        assert [t for t, _ in top] == tok.convert_ids_to_tokens(ids.tolist())
        assert [q for _, q in top] == pytest.approx(p.tolist(), abs=1e-5)
    assert f.trace.weights("encoder_self", 1).shape == (1, 4, len(f.ids), len(f.ids))


def test_a_pair_gets_token_types_as_the_tokenizer_gives_them(bert):
    model, tok, ckpt = bert
    f = fill_mask(ckpt, "the cat sat [SEP] a [MASK] ran", k=2)
    pair = tok("the cat sat", "a [MASK] ran")
    assert f.ids == pair["input_ids"] and f.types == pair["token_type_ids"]
    with torch.no_grad():
        probs = model(**tok("the cat sat", "a [MASK] ran", return_tensors="pt")).logits[0]
    pos, top = f.fillers[0]
    assert top[0][1] == pytest.approx(float(probs[pos].softmax(-1).max()), abs=1e-5)


def test_what_cannot_be_filled_is_refused_in_one_line(bert, models_dir):
    _, _, ckpt = bert
    with pytest.raises(InputError, match=r"write \[MASK\] where"):
        fill_mask(ckpt, "no mask here")
    with pytest.raises(InputError, match="encoder-only"):
        fill_mask(attnviz.load_checkpoint(models_dir / "reverse"), "abc")
    with pytest.raises(InputError, match="k must be"):
        fill_mask(ckpt, "the [MASK]", k=0)


def test_the_cli_prints_the_fillers(bert, capsys):
    from attnviz.cli.commands import main

    _, _, ckpt = bert
    assert main(["fill-mask", str(ckpt.path), "--text", "the [MASK] sat", "--k", "2"]) == 0
    assert capsys.readouterr().out.startswith("position 2 ([MASK]): ")
