"""The one-stack models shipped in models/: induction heads that formed in training
(models/induction), a GPT-style prefix LM that reverses strings (models/reverse-gpt) and a
BERT-style masked LM that fills the reversed string in one pass (models/reverse-bert)."""

from __future__ import annotations

import numpy as np
import pytest

import attnviz
from attnviz.analysis import induction_scores, mask_lab
from attnviz.train.evaluate import exact_match_by_length
from attnviz.train.snapshots import Snapshots


@pytest.fixture(scope="module")
def induction(models_dir):
    return attnviz.load_checkpoint(models_dir / "induction")


@pytest.fixture(scope="module")
def reverse_gpt(models_dir):
    return attnviz.load_checkpoint(models_dir / "reverse-gpt")


@pytest.mark.parametrize("name", ["induction", "reverse-gpt", "reverse-bert"])
def test_shipped_one_stack_models_are_small_documented_and_made_by_attnviz_train(name, models_dir):
    folder = models_dir / name
    ckpt = attnviz.load_checkpoint(folder)
    if name == "reverse-bert":
        assert ckpt.config.arch == "encoder-only" and ckpt.model.decoder is None
    else:
        assert ckpt.config.arch == "decoder-only" and ckpt.model.encoder is None
    assert ckpt.meta["command"].startswith("attnviz train --task ")
    assert (folder / "model.safetensors").stat().st_size < 10 * 2**20
    assert (folder / "snapshots.safetensors").is_file()
    readme = (models_dir / "README.md").read_text()
    assert f"`models/{name}`" in readme and ckpt.meta["command"] in readme


def test_induction_has_an_induction_head_in_layer_1_and_a_previous_token_head_in_layer_0(
    induction,
):
    assert induction.config.attn_only and induction.config.n_decoder_layers == 2
    s = induction_scores(induction, n=100, length=20, seed=1)  # runs never seen in training
    assert float(s.induction[1].max()) >= 0.8, s.induction
    assert float(s.prev_token[0].max()) >= 0.8, s.prev_token
    # the repeat is predicted from the context; the first run cannot be (ln 62 = 4.13)
    assert s.loss_second < 0.5 < 3.5 < s.loss_first


def test_induction_score_rises_at_the_steps_the_loss_on_the_repeat_falls(induction):
    snaps = Snapshots.load(induction.path)
    steps = np.array(snaps.steps)
    ind = np.array([max(s["induction"][1]) for s in snaps.scores])
    loss = np.array([s["loss_second"] for s in snaps.scores])
    assert ind[0] < 0.3 and ind[-1] >= 0.8 and loss[0] > 3.5 and loss[-1] < 0.5
    # the phase change: where the score passes halfway is where the loss passes halfway
    rise = steps[np.argmax(ind >= (ind[0] + ind[-1]) / 2)]
    fall = steps[np.argmax(loss <= (loss[0] + loss[-1]) / 2)]
    assert abs(int(rise) - int(fall)) <= 2 * (steps[1] - steps[0]), (rise, fall)


def test_reverse_gpt_reverses_through_its_prompt(reverse_gpt):
    assert reverse_gpt.predict("helloworld") == "dlrowolleh"
    enc = reverse_gpt.encode_source("abc")
    assert enc.pieces == ["<bos>", "a", "b", "c", "<sep>"]


@pytest.mark.slow
def test_reverse_gpt_reaches_99_percent_exact_match_on_held_out_inputs(models_dir):
    results = exact_match_by_length(models_dir / "reverse-gpt", per_length=50)
    right = sum(r for r, _ in results.values())
    total = sum(n for _, n in results.values())
    assert right / total >= 0.99, results


def test_reverse_gpt_with_its_causal_mask_off_reads_the_answer_it_should_predict(reverse_gpt):
    lab = mask_lab(reverse_gpt, "helloworld", causal_off=True)
    keys, _ = lab.labels("decoder_self")
    sep = keys.index("<sep>")
    n = sep + 11  # <bos> 10 letters <sep> 10 letters: the sequence read
    future = 0.0
    for layer in range(reverse_gpt.config.n_decoder_layers):
        w, blocked = lab.view("after", "decoder_self", layer)
        assert not blocked[:n, :n].any()
        future = max(future, float(np.triu(w[:, sep:n, :n], 1 + sep).sum(-1).max()))
        before, _ = lab.view("before", "decoder_self", layer)
        assert np.allclose(np.triu(before[:, :n, :n], 1), 0)
    assert future > 0.1  # some target row puts real weight on tokens after it


def test_reverse_bert_fills_the_reversed_string_in_one_pass_at_every_length(models_dir):
    """Test split (never trained on), the whole answer masked: exact match >= 0.99 per length."""
    results = exact_match_by_length(models_dir / "reverse-bert", per_length=50)
    for length, (right, n) in results.items():
        assert right / n >= 0.99, (length, right, n)


def test_reverse_bert_reads_each_answer_letter_from_its_mirror(models_dir):
    """Each mask's row of the last layer puts its weight on the source letter it is filled
    with: the anti-diagonal of reversal, read in one bidirectional pass."""
    from attnviz.analysis import fill_mask
    from attnviz.analysis.masked_lm import answer_query

    ckpt = attnviz.load_checkpoint(models_dir / "reverse-bert")
    word = "transformer"
    filled = fill_mask(ckpt, answer_query(ckpt, word, word[::-1]), k=1)
    assert "".join(top[0][0] for _, top in filled.fillers) == word[::-1]
    n = len(word)
    last = filled.trace.weights("encoder_self", ckpt.config.n_encoder_layers - 1)[0]  # [H, T, T]
    rows = last[:, [n + 2 + j for j in range(n)], :]  # the masks' rows
    mirror = rows[:, range(n), [n - j for j in range(n)]]  # [H, n]: weight on the mirror
    assert float(mirror.mean(1).max()) > 0.9, mirror.mean(1)
