"""Masked-LM batches and the marker tokens text may hold: the whole target masked for
validation, BERT's 15 % (80/10/10) elsewhere as a pure function of the seed, the loss only
on the chosen tokens, and ``<sep>``/``<mask>`` read whole from text."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.core.config import ModelConfig
from attnviz.core.errors import InputError
from attnviz.core.model import Transformer
from attnviz.data.batch import Prompt
from attnviz.data.mlm import answer_batch, make_mlm_batch, pair_row
from attnviz.data.tokenizer import Tokenizer
from attnviz.decode.fill import fill_answers

TOK = Tokenizer("char", [*"abcdefgh", "<sep>", "<mask>"])
SEP, MASK = TOK.sep_token[1], TOK.mask_token[1]
PROMPT = Prompt(TOK.bos_id, SEP, "mlm", MASK)
CFG = ModelConfig(src_vocab_size=len(TOK), tgt_vocab_size=len(TOK), arch="encoder-only",
                  d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, max_len=40)  # fmt: skip
SRC = [TOK.encode(t).ids for t in ("abc", "hgfedcba", "d")]
TGT = [TOK.encode(t).ids for t in ("cba", "abcdefgh", "d")]


def test_the_answer_batch_masks_every_target_token_and_learns_only_them():
    b = answer_batch(SRC, TGT, CFG, PROMPT)
    for i, (s, t) in enumerate(zip(SRC, TGT, strict=True)):
        row = pair_row(PROMPT, s, t, CFG.eos_id)
        n = len(row)
        start = len(s) + 2
        assert b.src[i, :n].tolist() == [*row[:start], *[MASK] * len(t), CFG.eos_id]
        assert b.tgt_out[i, :n].tolist() == row
        assert b.real[i].nonzero().flatten().tolist() == list(range(start, start + len(t)))
        assert b.src_pad[i, :n].sum() == 0 and b.src_pad[i, n:].all()
    assert b.mlm and not b.lm


def test_training_masks_are_a_pure_function_of_the_seed_and_never_hit_specials():
    a = make_mlm_batch(SRC * 20, TGT * 20, CFG, PROMPT, np.random.default_rng([0, 0, 5]))
    b = make_mlm_batch(SRC * 20, TGT * 20, CFG, PROMPT, np.random.default_rng([0, 0, 5]))
    c = make_mlm_batch(SRC * 20, TGT * 20, CFG, PROMPT, np.random.default_rng([0, 0, 6]))
    assert torch.equal(a.src, b.src) and torch.equal(a.tgt_pad, b.tgt_pad)
    assert not torch.equal(a.src, c.src)
    real = a.real
    assert real.any(1).all()  # every row learns something
    specials = (a.tgt_out == CFG.bos_id) | (a.tgt_out == SEP) | (a.tgt_out == CFG.eos_id)
    assert not (real & specials).any()
    unchanged = (a.src == a.tgt_out) | a.src_pad
    assert unchanged[~real].all()  # only chosen tokens change
    chosen = a.src[real]
    masked = float((chosen == MASK).float().mean())
    assert 0.6 < masked < 1.0  # the whole-target rows and 80 % of the others


def test_a_layout_without_a_mask_id_and_bad_stored_layouts_are_refused():
    with pytest.raises(InputError, match="mask id"):
        answer_batch(SRC, TGT, CFG, Prompt(TOK.bos_id, SEP, "mlm"))
    assert Prompt.from_dict(PROMPT.to_dict(), len(TOK)) == PROMPT
    for bad, match in (
        ({"bos_id": 1, "sep_id": SEP, "loss": "mlm"}, "and mask_id for mlm"),
        ({"bos_id": 1, "sep_id": SEP, "loss": "mlm", "mask_id": 99}, "mask_id must be an id below"),
        ({"bos_id": 1, "sep_id": SEP, "loss": "target", "mask_id": MASK}, "and mask_id for mlm"),
    ):
        with pytest.raises(InputError, match=match):
            Prompt.from_dict(bad, len(TOK))


def test_markers_are_read_whole_from_text_only_where_the_vocabulary_has_them():
    enc = TOK.encode("ab<sep><mask>c")
    assert enc.pieces == ["a", "b", "<sep>", "<mask>", "c"] and not enc.unknown
    assert enc.ids[2:4] == [SEP, MASK]
    plain = Tokenizer("char", list("b<>mask"))
    assert plain.encode("a<mask>").pieces == list("a<mask>") and plain.mask_token is None
    assert TOK.encode("<pad>").unknown  # a role's token is never read from text


def test_filled_answers_are_the_argmax_of_the_pass_at_each_mask():
    torch.manual_seed(0)
    model = Transformer(CFG).eval()
    lengths = [len(t) for t in TGT]
    filled = fill_answers(model, PROMPT, SRC, lengths)
    assert [len(f) for f in filled] == lengths
    for s, n, f in zip(SRC, lengths, filled, strict=True):
        ids = torch.tensor([[TOK.bos_id, *s, SEP, *[MASK] * n, CFG.eos_id]])
        with torch.no_grad():
            logits = model(ids)[0]
        assert logits[len(s) + 2 : len(s) + 2 + n].argmax(-1).tolist() == f


def test_fillers_at_masks_apart_are_two_answers_and_adjacent_ones_one_word():
    from types import SimpleNamespace

    from attnviz.analysis.masked_lm import fillers_text

    pieces = {1: "ca", 2: "##ts", 3: "##l", 4: "##s"}
    tok = SimpleNamespace(decode=lambda ids: "".join(pieces[i] for i in ids).replace("##", ""))
    ckpt = SimpleNamespace(tgt_tokenizer=tok)
    assert fillers_text(ckpt, [1, 2], [4, 5]) == "cats"  # one word over two masks
    assert fillers_text(ckpt, [3, 4], [2, 7]) == "l … s"  # two masks apart: not "ls"
    assert fillers_text(ckpt, [1, 2, 3], [0, 1, 9]) == "cats … l"
    with pytest.raises(InputError, match="2 fillers for 1 positions"):
        fillers_text(ckpt, [1, 2], [0])
