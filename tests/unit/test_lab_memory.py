"""The labs that keep [B, T, V] scores (Mask lab, head ablation, what-if) estimate their memory
in one home (analysis.labsize) and refuse in one line, before their runs, what this process
cannot hold: here on a model whose 262,144-token vocabulary (Gemma 3's) makes each position's
scores 1 MB (#39)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import MODELS

import attnviz
from attnviz.analysis import ablation, labsize, masking, whatif

VOCAB = 262_144


@pytest.fixture(scope="module")
def wide():
    """The reverse checkpoint's tokenizers on a tiny random model with Gemma 3's vocabulary."""
    small = attnviz.load_checkpoint(MODELS / "reverse")
    cfg = dataclasses.replace(small.config, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                              d_model=8, n_heads=2, d_ff=16, n_encoder_layers=1,
                              n_decoder_layers=1)  # fmt: skip
    torch.manual_seed(0)
    model = attnviz.Transformer(cfg).eval()
    return dataclasses.replace(small, model=model, config=cfg)


@pytest.fixture
def small_machine(monkeypatch):
    """A process that may give a lab 128 MB (labsize reads its budget once per check)."""
    monkeypatch.setattr(labsize, "lab_budget", lambda: 128 << 20)
    monkeypatch.setattr(labsize, "ALWAYS_ALLOWED", 0)


def test_the_estimate_is_the_vocabulary_times_the_positions():
    cfg = attnviz.ModelConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, arch="decoder-only",
                              n_encoder_layers=0, n_decoder_layers=18, n_heads=4, d_model=640,
                              d_head=256, max_len=2048)  # fmt: skip
    scores = labsize.lab_memory(cfg, 1, 700, 700, runs=1, recorded=False)
    assert scores == 3 * 700 * VOCAB * 4  # logits, their float copy, the softmax: 2.2 GB
    assert masking.experiment_memory(cfg, 2, 745, 745) == labsize.lab_memory(cfg, 2, 745, 745)
    steps = labsize.lab_memory(cfg, 1, 700, 956, vocab_copies=2, scored=256, recorded=False)
    assert steps == 2 * 2 * 256 * VOCAB * 4  # two steppers' probs and logits, per step


def test_head_ablation_is_refused_before_its_scored_runs(wide, small_machine, monkeypatch):
    ran = []
    monkeypatch.setattr(ablation, "token_probs", lambda *a, **k: ran.append(1))
    long = "abcdefghij" * 4  # 63 positions decoded x 262,144 x 3 copies: 189 MB
    with pytest.raises(attnviz.InputError, match=r"head ablation on \d+ tokens would hold about"):
        ablation.ablate(wide, long, [("cross", 0, 0)])
    with pytest.raises(attnviz.InputError, match="try a shorter input"):
        ablation.head_effects(wide, [long])
    assert ran == []  # no [B, T, V] run started


def test_a_short_input_still_runs(wide, small_machine):
    batch = ablation.greedy_batch(wide, ["abc"])  # 22 positions x 3 MB: fits
    ablation.check_size(wide, batch)  # no refusal
    assert ablation.token_probs(wide, batch).shape == tuple(batch.tgt_out.shape)


def test_what_if_is_refused_before_either_stepper(wide, small_machine, monkeypatch):
    def no_stepper(*a, **k):
        raise AssertionError("a stepper was built")

    monkeypatch.setattr(type(wide), "stepper", no_stepper)
    with pytest.raises(attnviz.InputError, match=r"what-if on \d+ tokens would hold about \d+ MB"):
        whatif.what_if(wide, "abcdefghij" * 4, step=0)


def test_the_mask_lab_asks_the_same_home(wide, small_machine):
    with pytest.raises(attnviz.InputError, match=r"mask experiment on \d+ tokens"):
        masking.mask_lab(wide, "abcdefghij" * 4, causal_off=True)
