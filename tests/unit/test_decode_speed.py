"""The fused cached decoder step: the same tokens and logits as the module path (the one that
records) and as recomputing the whole prefix; it steps aside whenever anything records or edits."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model

import attnviz
from attnviz.core.step import FusedStep, fused_step, why_not_fused
from attnviz.decode.batched import greedy_decode

#: Every option the decoder's step depends on, each in at least one config.
CONFIGS = [
    dict(),
    dict(norm_first=True, final_norm=True, activation="gelu", n_decoder_layers=3),
    dict(positions="learned", position_offset=2, embed_norm=True, scale_embeddings=False),
    dict(
        positions="relative", norm="rms", bias=False, scale_attention=False, gated_ff=True,
        activation="gelu_tanh", d_head=5, norm_first=True, final_norm=True, output_bias=False,
        tie_output=True, scale_decoder_output=True, relative_buckets=8, relative_max_distance=20,
    ),  # T5-shaped
    dict(positions="sinusoidal_split", activation="silu", d_model=30, n_heads=5, d_ff=17),
]  # fmt: skip


def padded_source(model, b: int = 3, ts: int = 8, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, model.config.src_vocab_size, (b, ts), generator=g)
    src[min(1, b - 1), ts - 3 :] = model.config.pad_id  # a padded row
    return src


@pytest.mark.parametrize("overrides", CONFIGS)
def test_fused_steps_give_the_module_paths_logits(overrides):
    model = make_model(**overrides)
    src = padded_source(model)
    pad = src == model.config.pad_id
    with torch.no_grad():
        memory = model.encode(src, pad)
        fast_cache = model.init_cache(memory, pad)
        slow_cache = model.init_cache(memory, pad)
        step = fused_step(model, fast_cache)
        assert isinstance(step, FusedStep)
        tokens = torch.full((3,), model.config.bos_id)
        for t in range(40):
            fast = step(tokens)  # [B, V]
            slow = model.decode(tokens[:, None], None, cache=slow_cache)[:, -1]
            assert torch.allclose(fast, slow, atol=1e-5), f"step {t}"
            tokens = slow.argmax(-1)
        assert fast_cache.length == slow_cache.length == 40
        k_fast, k_slow = fast_cache.self_kv[0].kv, slow_cache.self_kv[0].kv
        assert torch.allclose(k_fast[:, :, :, :40], k_slow[:, :, :, :40], atol=1e-6)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_fused_greedy_equals_module_path_and_recompute(overrides):
    model = make_model(**overrides)
    src = padded_source(model)
    eos = model.config.eos_id
    fast = greedy_decode(model, src, model.config.bos_id, eos, max_len=30)
    modules = greedy_decode(model, src, model.config.bos_id, eos, max_len=30, fused=False)
    recompute = greedy_decode(model, src, model.config.bos_id, eos, max_len=30, cache=False)
    assert torch.equal(fast, modules)
    assert torch.equal(fast, recompute)


def test_fused_greedy_equals_the_recording_steppers_tokens():
    """What the app shows (a recording stepper) and what fast decoding returns agree."""
    model = make_model()
    src = padded_source(model, b=1, ts=9)
    stepper = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=60)
    recorded = stepper.run()
    fast = greedy_decode(model, src, model.config.bos_id, None, max_len=60)
    assert fast[0].tolist() == recorded
    with torch.no_grad():  # the recorded logits are the ones the fused step computes
        pad = src == model.config.pad_id
        step = fused_step(model, model.init_cache(model.encode(src, pad), pad))
        prev = torch.tensor([model.config.bos_id])
        for res in stepper.steps:
            assert torch.allclose(step(prev)[0], res.logits, atol=1e-5)
            prev = torch.tensor([res.token])


def test_an_all_padding_source_row_gives_zero_cross_attention_not_nan():
    model = make_model()
    src = padded_source(model)
    src[2] = model.config.pad_id
    pad = src == model.config.pad_id
    fast = greedy_decode(model, src, 1, None, max_len=5, src_pad_mask=pad)
    slow = greedy_decode(model, src, 1, None, max_len=5, src_pad_mask=pad, fused=False)
    assert torch.equal(fast, slow)


def test_recording_and_edits_take_the_module_path():
    model = make_model()
    src = padded_source(model, b=1)
    assert why_not_fused(model) is None
    with attnviz.record(model) as trace:
        assert "recorder" in why_not_fused(model)
        greedy_decode(model, src, 1, None, max_len=6)
    assert trace.n_calls("cross", 1) == 6  # every step recorded: the fused step stood aside
    edit = attnviz.ZeroHeads("cross", 0, [0, 1, 2, 3])
    edited = greedy_decode(model, src, 1, None, max_len=6, edits=[edit])
    with attnviz.record(model, [edit], capture=None):
        assert why_not_fused(model) is not None
        modules = greedy_decode(model, src, 1, None, max_len=6, fused=False)
    assert torch.equal(edited, modules)
    assert not torch.equal(edited, greedy_decode(model, src, 1, None, max_len=6))
    # an encoder-only edit leaves the decoder unwatched: the fused step may run
    with attnviz.record(model, [attnviz.ZeroHeads("encoder_self", 0, 0)], capture=None):
        assert why_not_fused(model) is None
    model.train()
    assert "training" in why_not_fused(model)


def test_the_cache_grows_in_chunks_up_to_its_capacity():
    model = make_model()
    src = padded_source(model, b=1)
    with torch.no_grad():
        cache = model.init_cache(model.encode(src), capacity=150)
        step = fused_step(model, cache)
        tok = torch.tensor([1])
        rooms = []
        for _ in range(150):
            tok = step(tok).argmax(-1)
            rooms.append(cache.self_kv[0].room)
    assert rooms[0] == attnviz.core.model.KVBuffer.CHUNK
    assert sorted(set(rooms)) == [64, 128, 150]
    with pytest.raises(attnviz.InputError, match="holds 150 positions"):
        step(tok)


def test_a_start_id_outside_the_vocabulary_is_refused_on_both_paths():
    model = make_model()
    src = padded_source(model, b=1)
    for fused in (True, False):
        with pytest.raises(attnviz.InputError, match="id 19, outside the vocabulary 0..18"):
            greedy_decode(model, src, 19, None, max_len=3, fused=fused)


@pytest.mark.parametrize("overrides", [CONFIGS[0], CONFIGS[3]])
def test_beam_search_with_the_fused_step_equals_the_module_path(overrides):
    model = make_model(**overrides)
    src = padded_source(model)
    eos = model.config.eos_id
    fast = attnviz.beam_search(model, src, model.config.bos_id, eos, beam_size=3, max_len=12)
    with attnviz.record(model) as trace:  # a watching recorder: the module path
        slow = attnviz.beam_search(model, src, model.config.bos_id, eos, beam_size=3, max_len=12)
    assert trace.n_calls("cross", 0) > 0
    for a, b in zip(fast, slow, strict=True):
        assert a.tokens == b.tokens
        assert a.score == pytest.approx(b.score, abs=1e-4)
