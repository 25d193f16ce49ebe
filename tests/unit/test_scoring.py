"""Checkpoint.score: teacher-forced probabilities, ranks and attention of a reference."""

from __future__ import annotations

import pytest
import torch

import attnviz


def test_score_of_the_greedy_output_has_rank_one_everywhere(reverse_ckpt):
    out = reverse_ckpt.predict("helloworld")
    s = reverse_ckpt.score("helloworld", out)
    assert s.ids[-1] == reverse_ckpt.config.eos_id
    assert len(s.tokens) == len(s.ids) == len(s.probs) == len(s.ranks) == len(out) + 1
    assert s.ranks == [1] * len(s.ids)
    assert s.first_divergence is None
    assert s.argmax == s.ids
    # Probabilities are those of the stepper's own greedy steps (same model, same prefix).
    stepper = reverse_ckpt.stepper("helloworld")
    step_probs = [float(r.probs[r.token]) for r in (stepper.step() for _ in s.ids)]
    assert s.probs == pytest.approx(step_probs, abs=1e-5)


def test_a_wrong_reference_diverges_where_it_first_differs(reverse_ckpt):
    s = reverse_ckpt.score("helloworld", "dlrowXlleh")
    assert s.first_divergence == 5
    assert s.ranks[5] > 1 and s.probs[5] < 0.5
    assert s.ranks[:5] == [1] * 5
    assert s.argmax[5] != s.ids[5]


def test_score_trace_is_the_teacher_forced_pass(reverse_ckpt):
    s = reverse_ckpt.score("abc", "cba")
    w = s.trace.weights("cross", layer=0)  # [1, H, Tt, Ts]
    assert w.shape[2] == 4 and w.shape[3] == 3
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)
    dec = s.trace.weights("decoder_self", layer=0)
    assert torch.all(dec.triu(1) == 0)  # causal: nothing above the diagonal


def test_score_takes_ids_and_refuses_bad_input(reverse_ckpt):
    ids = reverse_ckpt.tgt_tokenizer.encode("cba").ids
    assert reverse_ckpt.score("abc", ids).ids == [*ids, reverse_ckpt.config.eos_id]
    with pytest.raises(attnviz.InputError, match="reference is empty"):
        reverse_ckpt.score("abc", "  ")
    with pytest.raises(attnviz.InputError, match="input is empty"):
        reverse_ckpt.score("", "abc")
    with pytest.raises(attnviz.InputError, match="outside the vocabulary"):
        reverse_ckpt.score("abc", [10**6])
    with pytest.raises(attnviz.InputError, match="at most"):
        reverse_ckpt.score("abc", "a" * (reverse_ckpt.config.max_len + 5))


def test_a_decoder_only_reference_is_not_started_again(models_dir):
    """A tokenizer that starts every text with the start id (Llama, Gemma 3) scores the
    reference after the prompt without a second start token inside the sequence."""
    import copy
    from types import SimpleNamespace

    ckpt = attnviz.load_checkpoint(models_dir / "induction")
    from attnviz.decode.scoring import score_reference

    plain = score_reference(ckpt, "qXb3LmZ7", "tRw2")
    starting = copy.copy(ckpt)
    tok = ckpt.tgt_tokenizer

    class Starting:  # the tokenizer, with the start id before every text
        def encode(self, text):
            return SimpleNamespace(ids=[ckpt.config.bos_id, *tok.encode(text).ids])

        def token(self, i):
            return tok.token(i)

    starting.tgt_tokenizer = Starting()
    assert score_reference(starting, "qXb3LmZ7", "tRw2").ids == plain.ids
    assert plain.ids[0] != ckpt.config.bos_id
