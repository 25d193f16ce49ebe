"""Decoding: cached steps == recomputing the prefix, stepping back, batched greedy, beam."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import letters, make_model, unletters

import attnviz


def recompute(model, src, prefix):
    """Full teacher-forced pass over ``prefix``: last-row logits and every attention row."""
    with attnviz.record(model) as trace:
        logits = model(src, torch.tensor([prefix]))[0, -1]
    return logits, trace


@pytest.mark.parametrize(
    "overrides", [dict(), dict(norm_first=True, final_norm=True, n_decoder_layers=3)]
)
def test_cached_steps_equal_recomputing_the_prefix(overrides):
    model = make_model(**overrides)
    bos = model.config.bos_id
    src = torch.randint(3, 23, (1, 9), generator=torch.Generator().manual_seed(3))
    stepper = attnviz.GreedyStepper(model, src, bos, None, max_len=120)
    prefix = [bos]
    for t in range(120):
        res = stepper.step()
        logits, trace = recompute(model, src, prefix)
        assert res.token == int(logits.argmax())
        assert torch.allclose(res.logits, logits, atol=1e-5), f"step {t}"
        for layer in range(model.config.n_decoder_layers):
            full_self = trace.weights("decoder_self", layer)[0, :, t]  # [H, t + 1]
            assert torch.allclose(res.attention["decoder_self", layer], full_self, atol=1e-5)
            full_cross = trace.weights("cross", layer)[0, :, t]
            assert torch.allclose(res.attention["cross", layer], full_cross, atol=1e-5)
        prefix.append(res.token)
    assert stepper.done and len(stepper.tokens) == 120
    # the rebuilt matrices are the teacher-forced ones
    rebuilt = stepper.trace()
    _, trace = recompute(model, src, prefix[:-1])
    for key in trace.keys():
        assert torch.allclose(rebuilt.weights(*key), trace.weights(*key), atol=1e-5), key
    assert torch.equal(rebuilt.mask("decoder_self", 0), trace.mask("decoder_self", 0))
    allowed = ~trace.mask("decoder_self", 0).expand_as(trace.scores("decoder_self", 0))
    assert torch.allclose(
        rebuilt.scores("decoder_self", 0)[allowed],
        trace.scores("decoder_self", 0)[allowed],
        atol=1e-4,
    )
    assert torch.isnan(rebuilt.scores("decoder_self", 0)[~allowed]).all()  # never computed


def test_back_and_reset_do_not_rerun_the_encoder(monkeypatch):
    model = make_model()
    src = torch.randint(3, 23, (9,), generator=torch.Generator().manual_seed(4))
    calls = []
    original = model.encode
    monkeypatch.setattr(model, "encode", lambda *a, **k: calls.append(1) or original(*a, **k))
    kv_calls = []
    for layer in model.decoder.layers:
        orig_kv = layer.cross_attn.project_kv
        monkeypatch.setattr(
            layer.cross_attn, "project_kv", lambda m, f=orig_kv: kv_calls.append(1) or f(m)
        )
    stepper = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=20)
    first = [stepper.step() for _ in range(12)]
    stepper.back(5)
    assert stepper.position == 5 and stepper.tokens == [r.token for r in first[:5]]
    again = [stepper.step() for _ in range(7)]
    for a, b in zip(first[5:], again, strict=True):
        assert a.token == b.token and torch.allclose(a.logits, b.logits, atol=1e-6)
    stepper.reset()
    assert stepper.tokens == [] and stepper.step().token == first[0].token
    assert stepper.trace(upto=1).weights("cross", 0).shape == (1, 4, 1, 9)
    assert len(calls) == 1
    assert len(kv_calls) == model.config.n_decoder_layers  # cross K/V once per layer, ever
    with pytest.raises(attnviz.InputError, match="position must be in 0..1"):
        stepper.back(3)


def test_stepper_forced_tokens_and_finish(reverse_model):
    bos, eos = reverse_model.config.bos_id, reverse_model.config.eos_id
    ids = torch.tensor(letters("abcde"))
    stepper = attnviz.GreedyStepper(reverse_model, ids, bos, eos)
    assert unletters(stepper.run()) == "edcba" and stepper.tokens[-1] == eos
    with pytest.raises(attnviz.InputError, match="finished"):
        stepper.step()
    stepper.reset()
    forced = stepper.step(token=letters("z")[0])
    assert forced.token == letters("z")[0] and forced.prob < 0.5
    assert 0.99 < float(forced.probs.sum()) < 1.01
    # a bad forced token is refused before the model runs: the stepper stays usable
    stepper.reset()
    with pytest.raises(attnviz.InputError, match="outside the vocabulary 0..29"):
        stepper.step(token=99)
    with pytest.raises(attnviz.InputError, match="integer id"):
        stepper.step(token="e")
    assert stepper.step(token=torch.tensor(letters("e")[0])).token == letters("e")[0]
    stepper.reset()
    assert unletters(stepper.run()) == "edcba"
    with pytest.raises(attnviz.InputError, match="one sequence"):
        attnviz.GreedyStepper(reverse_model, torch.ones(2, 3, dtype=torch.long) * 5, bos, eos)


def test_batched_greedy_stops_each_row_at_its_eos(reverse_model):
    cfg = reverse_model.config
    pad, bos, eos = cfg.pad_id, cfg.bos_id, cfg.eos_id
    words = ["a", "hello", "xyzzyab", "qq"]
    width = max(map(len, words))
    src = torch.tensor([letters(w) + [pad] * (width - len(w)) for w in words])
    out = attnviz.greedy_decode(reverse_model, src, bos, eos)
    assert out.shape == (4, width + 1)
    for row, w in zip(out.tolist(), words, strict=True):
        n = len(w)
        assert unletters(row[:n]) == w[::-1]
        assert row[n] == eos and all(t == pad for t in row[n + 1 :])
    # the batch gives the same tokens as one-at-a-time stepping
    for row, w in zip(out.tolist(), words, strict=True):
        alone = attnviz.GreedyStepper(reverse_model, torch.tensor(letters(w)), bos, eos).run()
        assert row[: len(alone)] == alone


def test_beam_one_is_greedy():
    model = make_model()
    bos = model.config.bos_id
    src = torch.randint(3, 23, (3, 8), generator=torch.Generator().manual_seed(5))
    src[2, 6:] = model.config.pad_id
    free = attnviz.greedy_decode(model, src, bos, None, max_len=30)
    eos = int(free[0, 4])  # a token the model does produce: rows end at different steps
    greedy = attnviz.greedy_decode(model, src, bos, eos, max_len=30)
    assert eos in greedy[0].tolist()
    beams = attnviz.beam_search(model, src, bos, eos, beam_size=1, max_len=30)
    for row, beam in zip(greedy.tolist(), beams, strict=True):
        end = row.index(eos) + 1 if eos in row else len(row)
        assert beam.tokens == row[:end]
    assert beams[0].tokens[-1] == eos  # the EOS bookkeeping was exercised


def test_beam_score_and_attention_are_the_models(reverse_model):
    bos, eos = reverse_model.config.bos_id, reverse_model.config.eos_id
    src = torch.tensor(letters("reverse"))
    best = attnviz.beam_search(reverse_model, src, bos, eos, beam_size=4, return_attention=True)[0]
    assert unletters(best.tokens) == "esrever" and best.tokens[-1] == eos
    tgt_in = torch.tensor([[bos] + best.tokens[:-1]])
    with torch.no_grad(), attnviz.record(reverse_model) as trace:
        logits = reverse_model(src[None], tgt_in)
    logp = torch.log_softmax(logits[0], -1).gather(1, torch.tensor(best.tokens)[:, None]).sum()
    assert best.score == pytest.approx(float(logp), abs=1e-4)
    assert best.normalized_score == pytest.approx(best.score / len(best.tokens))
    for key in trace.keys():
        assert torch.allclose(best.trace.weights(*key), trace.weights(*key), atol=1e-5), key


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_best(length_penalty):
    """A beam wider than every hypothesis set is exact search: compare with enumeration."""
    model = make_model(seed=2, tgt_vocab_size=5)
    src = torch.randint(3, 23, (1, 6), generator=torch.Generator().manual_seed(6))
    bos, eos, n = model.config.bos_id, model.config.eos_id, 3

    @torch.no_grad()
    def score(seq):
        logits = model(src, torch.tensor([[bos] + seq[:-1]]))[0]
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(seq)[:, None]).sum())

    candidates = [
        list(seq)
        for length in range(1, n + 1)
        for seq in itertools.product(range(5), repeat=length)
        if eos not in seq[:-1] and (seq[-1] == eos or length == n)
    ]
    best = max(candidates, key=lambda s: score(s) / len(s) ** length_penalty)
    found = attnviz.beam_search(
        model, src, bos, eos, beam_size=200, max_len=n, length_penalty=length_penalty
    )[0]
    assert found.tokens == best
    assert found.score == pytest.approx(score(best), abs=1e-4)


def test_decoding_runs_in_eval_mode_and_restores_training_mode():
    model = make_model(dropout=0.5)
    bos = model.config.bos_id
    src = torch.randint(3, 23, (4, 9), generator=torch.Generator().manual_seed(8))
    expected = attnviz.greedy_decode(model.eval(), src, bos, None, max_len=15)
    model.train()
    for _ in range(3):  # dropout would make these differ
        assert torch.equal(attnviz.greedy_decode(model, src, bos, None, max_len=15), expected)
    assert model.training


def test_stepper_under_bf16_autocast():
    model = make_model()
    src = torch.randint(3, 23, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        stepper = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=12)
        results = [stepper.step() for _ in range(12)]
    assert all(torch.isfinite(r.logits).all() for r in results)
    rows = results[-1].attention["decoder_self", 1]  # [H, 12]
    assert torch.allclose(rows.float().sum(-1), torch.ones(4), atol=1e-2)


def test_decode_checks_batches_and_devices(model):
    memory = model.encode(torch.randint(3, 23, (2, 5)))
    with pytest.raises(attnviz.InputError, match="tgt has batch 3 but memory has batch 2"):
        model.decode(torch.randint(3, 19, (3, 4)), memory)


HUGE_LIMIT_SCRIPT = r"""
import resource, torch, attnviz
from attnviz.decode.beam import beam_search
from attnviz.decode.batched import greedy_decode
cfg = attnviz.ModelConfig(23, 19, d_model=24, n_heads=4, d_ff=40, dropout=0.0,
                          positions="relative", max_len=10**12)  # T5: no position table
torch.manual_seed(0)
model = attnviz.Transformer(cfg).eval()
src = torch.randint(3, 23, (1, 9), generator=torch.Generator().manual_seed(3))
first = greedy_decode(model, src, 1, None, max_len=3)[0].tolist()
eos = first[1]  # an end id this decode reaches at its second token
gb = 2**30
resource.setrlimit(resource.RLIMIT_AS, (4 * gb, 4 * gb))
huge = 10**9  # a generation config's max_new_tokens
out = greedy_decode(model, src, 1, eos, max_len=huge)[0].tolist()
stepper = attnviz.GreedyStepper(model, src, 1, eos, max_len=huge)
beam = beam_search(model, src, 1, eos, beam_size=2, max_len=huge)[0].tokens
print("OK", out, stepper.run(), stepper.max_len, len(beam) <= huge)
"""


def test_a_huge_length_limit_allocates_only_what_the_decode_reaches(tmp_path):
    """A T5 folder with n_positions 1e12 and max_new_tokens 1e9 decodes a short output in a
    few GB of address space: caches grow with the decode, not with its nominal limit."""
    import subprocess
    import sys

    script = tmp_path / "huge.py"
    script.write_text(HUGE_LIMIT_SCRIPT)
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("OK") and "1000000000 True" in line, line
