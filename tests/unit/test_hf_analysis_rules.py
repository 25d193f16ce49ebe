"""Every greedy decode inside attnviz.analysis follows the checkpoint's generation rules.

A checkpoint's ``rules`` (a Hugging Face folder's forced first token, suppressed tokens,
minimum length, length limit) change what greedy decoding produces; ablation, faithfulness,
the mask experiments and the inspection must decode what ``predict`` decodes, not the plain
argmax loop. The shipped reversal model with rules that differ from its plain loop shows it.
"""

from __future__ import annotations

import dataclasses

import pytest

from attnviz.analysis import ablation, export, faithful, masking
from attnviz.decode.greedy import LogitRules

TEXTS = ["helloworld", "abcdef"]


@pytest.fixture(scope="module")
def ruled(reverse_ckpt):
    """The reversal model under rules: the first token forced to 'z', 'o' and 'a' never
    chosen, at least 12 tokens, at most 14; no task (references are its own outputs)."""
    tok = reverse_ckpt.tgt_tokenizer
    z, o, a = (tok.encode(c).ids[0] for c in "zoa")
    rules = LogitRules(
        forced_bos_id=z, banned=(o, a), min_new_tokens=12, eos_id=reverse_ckpt.config.eos_id
    )
    meta = {k: v for k, v in reverse_ckpt.meta.items() if k != "task"}
    ckpt = dataclasses.replace(reverse_ckpt, rules=rules, max_new_tokens=14, meta=meta)
    plain = [reverse_ckpt.predict_details(t).tokens for t in TEXTS]
    ruled_tokens = [ckpt.predict_details(t).tokens for t in TEXTS]
    assert all(p != r for p, r in zip(plain, ruled_tokens, strict=True))  # the rules bite
    assert all(r[0] == z and o not in r and len(r) >= 12 for r in ruled_tokens)
    return ckpt, ruled_tokens


def test_ablation_decodes_under_the_rules(ruled):
    ckpt, expected = ruled
    batch = ablation.greedy_batch(ckpt, TEXTS)
    rows = [r[: int(n)] for r, n in zip(batch.tgt_out.tolist(), batch.real.sum(1), strict=True)]
    assert rows == expected
    result = ablation.ablate(ckpt, TEXTS[0], [("cross", 0, 0)])
    assert result.baseline == ckpt.predict(TEXTS[0])
    assert result.ablated.startswith("z") and "o" not in result.ablated  # the edited run too


def test_mask_experiments_decode_under_the_rules_and_carry_ids(ruled):
    ckpt, expected = ruled
    exp = masking.block_source(ckpt, TEXTS[0], [0])
    assert exp.reference == "model"
    assert exp.before.outputs == [ckpt.predict(TEXTS[0])]
    assert exp.target_ids == [expected[0]]  # the decoded ids, not the text encoded again
    assert exp.after.outputs[0].startswith("z")


def test_inspection_decodes_under_the_rules(ruled):
    ckpt, expected = ruled
    assert export.inspect_text(ckpt, TEXTS[1]).out_ids == expected[1]


def test_faithfulness_measures_the_rules_output(ruled, monkeypatch):
    ckpt, expected = ruled
    seen = []
    real = faithful.rankings

    def spy(ckpt_, text, step, tokens, *args, **kwargs):
        seen.append(list(tokens))
        return real(ckpt_, text, step, tokens, *args, **kwargs)

    monkeypatch.setattr(faithful, "rankings", spy)
    faithful.faithfulness(ckpt, TEXTS, k_max=1, methods=("weights",), ig_steps=2)
    assert seen == expected
