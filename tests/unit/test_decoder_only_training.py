"""Decoder-only training pieces: the prompt layout, LM batches and their loss mask, the
attention-only model (fused step == module path), and the induction scores' definitions."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.core.errors import InputError
from attnviz.data.batch import Prompt, make_lm_batch
from attnviz.decode.batched import greedy_decode
from attnviz.train.induction import head_scores, measure, repeated_tokens
from attnviz.train.snapshots import Snapshots

V = 20


def lm(**over) -> attnviz.Transformer:
    fields = dict(d_model=32, n_heads=4, dropout=0.0, arch="decoder-only", max_len=48,
                  n_encoder_layers=0, positions="learned", norm_first=True, final_norm=True)  # fmt: skip
    fields.update(over)
    torch.manual_seed(0)
    return attnviz.Transformer(attnviz.ModelConfig(V, V, **fields)).eval()


def test_a_prefix_lm_learns_the_target_and_its_end_only():
    cfg = lm().config
    prompt = Prompt(bos_id=1, sep_id=19, loss="target")
    batch = make_lm_batch([prompt.ids([5, 6, 7]), prompt.ids([8])], [[7, 6, 5], [8]], cfg)
    # rows: <bos> 5 6 7 <sep> 7 6 5 <eos>  and  <bos> 8 <sep> 8 <eos>
    assert batch.src[0].tolist() == [1, 5, 6, 7, 19, 7, 6, 5]
    assert batch.tgt_out[0].tolist() == [5, 6, 7, 19, 7, 6, 5, 2]
    assert (
        batch.src[1].tolist()[:4] == [1, 8, 19, 8] and batch.src_pad[1].tolist()[4:] == [True] * 4
    )
    # learned: from the separator on (it predicts the target's first token)
    assert batch.real[0].tolist() == [False] * 4 + [True] * 4
    assert batch.real[1].tolist() == [False, False, True, True] + [False] * 4
    assert batch.lm and torch.equal(batch.forward(lm()), lm()(batch.src))


def test_a_continuation_learns_every_token_after_bos():
    cfg = lm().config
    batch = make_lm_batch([Prompt(1, None).ids([5, 6])], [[5, 6]], cfg, "all")
    assert batch.src[0].tolist() == [1, 5, 6, 5, 6] and batch.tgt_out[0].tolist() == [5, 6, 5, 6, 2]
    assert bool(batch.real.all())


def test_a_too_long_pair_and_a_bad_stored_prompt_are_refused():
    cfg = lm(max_len=6).config
    with pytest.raises(InputError, match="max_len=6"):
        make_lm_batch([Prompt(1, 19).ids([5, 6, 7, 8])], [[5]], cfg)
    assert Prompt.from_dict(Prompt(1, 19).to_dict(), V) == Prompt(1, 19)
    for bad, match in (
        ({"bos_id": 1}, "needs exactly bos_id, sep_id, loss"),
        ({"bos_id": 1, "sep_id": 99, "loss": "target"}, "sep_id must be an id below 20, got 99"),
        ({"bos_id": True, "sep_id": None, "loss": "all"}, "bos_id must be an id below 20, got T"),
        ({"bos_id": 1, "sep_id": None, "loss": "everything"}, "loss must be 'target', 'all' or"),
        ([1, 2], "needs exactly bos_id, sep_id, loss"),
    ):
        with pytest.raises(InputError, match=match):
            Prompt.from_dict(bad, V)


def test_an_attention_only_model_has_no_feed_forward_and_its_fused_step_is_the_module_path():
    model = lm(attn_only=True)
    assert all(layer.ff is None and layer.norm3 is None for layer in model.decoder.layers)
    assert not any("ff." in name for name in model.state_dict())
    ids = torch.randint(4, V, (2, 6), generator=torch.Generator().manual_seed(0))
    fused = greedy_decode(model, ids, None, None, max_len=8)
    assert torch.equal(fused, greedy_decode(model, ids, None, None, max_len=8, fused=False))
    assert torch.equal(fused, greedy_decode(model, ids, None, None, max_len=8, cache=False))
    post = lm(attn_only=True, norm_first=False)
    assert torch.equal(
        greedy_decode(post, ids, None, None, max_len=5),
        greedy_decode(post, ids, None, None, max_len=5, cache=False),
    )


def test_scores_of_ideal_heads_are_one_and_of_uniform_heads_small():
    length = 5
    t = 1 + 2 * length
    prev = torch.zeros(t, t)
    prev[0, 0] = 1
    prev[torch.arange(1, t), torch.arange(0, t - 1)] = 1  # each position to the one before
    ind = torch.zeros(t, t)
    for q in range(t):  # the token after the earlier occurrence, else the start
        ind[q, q - length + 1 if q > length else 0] = 1
    uniform = torch.tril(torch.ones(t, t))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    w = torch.stack([prev, ind, uniform])[None]  # [1, 3, T, T]
    p, i = head_scores(w, length)
    assert p.tolist()[0] == pytest.approx(1.0) and i.tolist()[1] == pytest.approx(1.0)
    assert i[0] == 0 and p[1] < 0.2
    # a uniform causal head: 1 / (q + 1) at each second-run query q
    expected = sum(1 / (q + 1) for q in range(length + 1, t)) / length
    assert i[2].item() == pytest.approx(expected)
    with pytest.raises(InputError, match="two runs"):
        head_scores(w, length + 1)


def test_repeated_tokens_repeat_distinct_draws_after_the_start():
    ids = repeated_tokens(list(range(4, 20)), 1, n=3, length=6, seed=2)
    assert ids.shape == (3, 13) and bool((ids[:, 0] == 1).all())
    assert torch.equal(ids[:, 1:7], ids[:, 7:])
    assert all(len(set(row[1:7].tolist())) == 6 for row in ids)
    with pytest.raises(InputError, match="distinct"):
        repeated_tokens(list(range(4, 8)), 1, n=1, length=6)


def test_measure_reads_the_heads_the_model_used():
    model = lm(attn_only=True)
    ids = repeated_tokens(list(range(4, V)), 1, n=4, length=6)
    s = measure(model, ids, 6)
    assert s.prev_token.shape == (2, 4) and s.induction.shape == (2, 4)
    with torch.no_grad(), attnviz.record(model) as trace:
        model(ids)
    assert torch.allclose(s.induction[1], head_scores(trace.weights("decoder_self", 1), 6)[1])
    assert s.loss_first > 0 and s.loss_second > 0
    layer, head, value = s.best("induction")
    assert value == pytest.approx(float(s.induction.max()))
    with pytest.raises(InputError, match="decoder-only"):
        measure(attnviz.Transformer(attnviz.ModelConfig(V, V)), ids, 6)


def test_snapshot_scores_round_trip_and_a_malformed_table_is_refused(tmp_path):
    model = lm(attn_only=True)
    ids = repeated_tokens(list(range(4, V)), 1, n=2, length=4)
    snaps = Snapshots(["a"] * 8, ["a"] * 8)
    for step in (0, 10):
        with torch.no_grad(), attnviz.record(model, capture=("weights",)) as trace:
            model(ids[:1, :-1])
        snaps.add(step, trace, "x", 1.0, measure(model, ids, 4).to_dict())
    snaps.save(tmp_path / "snapshots.safetensors")
    back = Snapshots.load(tmp_path)
    assert back.scores == snaps.scores and len(back.scores) == 2
    from attnviz.checkpoint import read_tensors, write_tensors

    tensors, meta = read_tensors(tmp_path / "snapshots.safetensors")
    meta["scores"][1]["induction"] = "import os"
    write_tensors(tmp_path / "bad.safetensors", tensors, meta)
    with pytest.raises(attnviz.CheckpointError, match="scores"):
        Snapshots.load(tmp_path / "bad.safetensors")
