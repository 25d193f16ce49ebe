"""The fused cached decoder step: the same tokens and logits as the module path and as
recomputing the whole prefix; where a recorder watches or edits, the same recorded tensors and
the same edited decode as the modules give."""

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


def test_the_recording_stepper_equals_the_module_path():
    """What the app shows (a recording stepper, fused) and the decoder modules agree."""
    model = make_model()
    src = padded_source(model, b=1, ts=9)
    stepper = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=60)
    recorded = stepper.run()
    modules = greedy_decode(model, src, model.config.bos_id, None, max_len=60, fused=False)
    assert modules[0].tolist() == recorded
    with torch.no_grad():  # the recorded logits are the ones the module path computes
        pad = src == model.config.pad_id
        cache = model.init_cache(model.encode(src, pad), pad)
        step = lambda t: model.decode(t[:, None], None, cache=cache)[:, -1]  # noqa: E731
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


#: The decoder-only shapes the fused step must also record: rotary, grouped-query attention,
#: Qwen2's q/k/v biases without the others, and an attention-only stack (no feed-forward).
ONE_STACK = [
    dict(
        arch="decoder-only", n_encoder_layers=0, positions="rotary", n_kv_heads=2, norm="rms",
        norm_first=True, final_norm=True, bias=False, qkv_bias=True, output_bias=False,
        gated_ff=True, activation="silu", src_vocab_size=19,
    ),
    dict(arch="decoder-only", n_encoder_layers=0, attn_only=True, src_vocab_size=19),
]  # fmt: skip


def _steps(model, src, path: str, n: int, edits=(), capture=attnviz.core.record.FIELDS):
    """``n`` greedy cached steps by one path (fused or modules), all recorded: (ids, trace)."""
    decoder_only = model.config.arch == "decoder-only"
    with torch.no_grad(), attnviz.record(model, edits, capture=capture) as trace:
        if decoder_only:
            cache = model.init_cache(None, capacity=src.shape[1] + n, batch=src.shape[0])
            model.decode(src[:, :-1], None, cache=cache, logits=False)
            tokens = src[:, -1]
        else:
            pad = src == model.config.pad_id
            cache = model.init_cache(model.encode(src, pad), pad)
            tokens = torch.full((src.shape[0],), model.config.bos_id)
        step = fused_step(model, cache)
        out = []
        for _ in range(n):
            if path == "fused":
                logits = step(tokens)
            else:
                logits = model.decode(tokens[:, None], None, cache=cache)[:, -1]
            tokens = logits.argmax(-1)
            out.append(tokens)
    return torch.stack(out, 1), trace


@pytest.mark.parametrize("overrides", CONFIGS + ONE_STACK)
def test_the_fused_step_records_what_the_module_path_records(overrides):
    """Every recorded field of every call, fused vs module by module: the weights recorded are
    the ones that met the values, on either path."""
    model = make_model(**overrides)
    src = padded_source(model)
    if model.config.arch == "decoder-only":
        src = src.clamp(min=3)  # a decoder-only prompt is never padded
    fast_ids, fast = _steps(model, src, "fused", 12)
    slow_ids, slow = _steps(model, src, "modules", 12)
    assert torch.equal(fast_ids, slow_ids)
    assert fast.keys() == slow.keys()
    for kind, layer in slow.keys():
        assert fast.n_calls(kind, layer) == slow.n_calls(kind, layer)
        for call in range(slow.n_calls(kind, layer)):
            a, b = fast.get(kind, layer, call), slow.get(kind, layer, call)
            for field in attnviz.core.record.FIELDS:
                x, y = getattr(a, field), getattr(b, field)
                assert (x is None) == (y is None), (kind, layer, call, field)
                if x is None:
                    continue
                assert x.shape == y.shape, (kind, layer, call, field)
                if x.dtype == torch.bool:
                    assert torch.equal(x, y), (kind, layer, call, field)
                else:
                    torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5, equal_nan=True)


EDITS = [
    attnviz.ZeroHeads("cross", 0, [0, 2]),
    attnviz.ZeroHeads("decoder_self", 1, 1),
    attnviz.ReplaceWeights("decoder_self", 0, lambda w: torch.ones_like(w) / w.shape[-1]),
    attnviz.DropMask("padding", kinds="cross", layers=1),
]


def edit_layer(edit) -> int:
    return edit.layer if hasattr(edit, "layer") else edit.layers[0]


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: type(e).__name__)
def test_edits_act_inside_the_fused_step_as_inside_the_modules(edit):
    model = make_model()
    src = padded_source(model)
    _, plain = _steps(model, src, "fused", 10)
    fast, fast_trace = _steps(model, src, "fused", 10, [edit])
    slow, slow_trace = _steps(model, src, "modules", 10, [edit])
    assert torch.equal(fast, slow)
    key = (getattr(edit, "kind", "cross"), edit_layer(edit))  # the edited module, step 2
    assert not torch.equal(plain.weights(*key, 1), fast_trace.weights(*key, 1)) or not (
        torch.equal(plain.head_output(*key, 1), fast_trace.head_output(*key, 1))
    )
    for key in slow_trace.keys():
        for call in range(slow_trace.n_calls(*key)):
            torch.testing.assert_close(
                fast_trace.weights(*key, call), slow_trace.weights(*key, call), atol=1e-5, rtol=0
            )
    edited = greedy_decode(model, src, 1, None, max_len=10, edits=[edit])
    assert torch.equal(edited, greedy_decode(model, src, 1, None, max_len=10, edits=[edit],
                                             fused=False))  # fmt: skip


def test_a_hook_sees_the_same_tensors_on_both_paths():
    model = make_model()
    src = padded_source(model, b=1)
    seen = {"fused": [], "modules": []}
    for path, calls in seen.items():

        def look(weights, calls=calls):
            calls.append(weights.clone())
            return weights

        _steps(model, src, path, 5, [attnviz.Hook("cross", 1, "weights", look)])
    assert len(seen["fused"]) == len(seen["modules"]) == 5
    for a, b in zip(seen["fused"], seen["modules"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["decoder_self", "cross"])
def test_a_mask_hook_is_given_the_same_masks_on_both_paths(kind):
    model = make_model()
    src = padded_source(model)
    seen = {"fused": [], "modules": []}
    for path, calls in seen.items():

        def look(*masks, calls=calls):  # (key_padding_mask, attn_mask)
            calls.append(tuple(None if m is None else m.clone() for m in masks))

        _steps(model, src, path, 4, [attnviz.Hook(kind, 0, "mask", look)])
    assert len(seen["fused"]) == len(seen["modules"]) == 4
    for a, b in zip(seen["fused"], seen["modules"], strict=True):
        for x, y in zip(a, b, strict=True):
            assert (x is None) == (y is None)
            assert x is None or torch.equal(x, y)
    kpm, causal = seen["fused"][-1]  # the cached self-attention: its one causal row
    if kind == "decoder_self":
        assert kpm is None and causal.shape == (1, 4) and not causal.any()
    else:
        assert causal is None and torch.equal(kpm, src == model.config.pad_id)


def test_a_module_forward_hook_keeps_the_fused_step_out():
    """A PyTorch hook on a module the fused step does not call (a probe, a steering hook)."""
    model = make_model()
    src = padded_source(model, b=1)
    seen = []
    handle = model.decoder.layers[0].register_forward_hook(lambda m, i, o: seen.append(o))
    try:
        assert "forward hook" in why_not_fused(model)
        stepper = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=4)
        stepper.run()
        assert len(seen) == 4  # every step ran the layer module
        pre = model.generator.register_forward_pre_hook(lambda m, i: (torch.zeros_like(i[0]),))
        try:
            res = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=1).step()
            assert torch.allclose(res.logits, model.generator.bias)  # the hook's zero input
        finally:
            pre.remove()
    finally:
        handle.remove()
    assert why_not_fused(model) is None


def test_only_training_mode_keeps_the_fused_step_out():
    model = make_model()
    assert why_not_fused(model) is None
    with attnviz.record(model, [attnviz.ZeroHeads("cross", 0, 0)]):
        assert why_not_fused(model) is None  # the step attends through the recorder's hooks
    model.train()
    assert "training" in why_not_fused(model)


def test_the_stepper_takes_the_fused_step_and_records_every_call(monkeypatch):
    model = make_model()
    src = padded_source(model, b=1)
    calls = []
    real = FusedStep.__call__
    monkeypatch.setattr(FusedStep, "__call__", lambda self, t: calls.append(1) or real(self, t))
    stepper = attnviz.GreedyStepper(model, src, model.config.bos_id, None, max_len=7)
    stepper.run()
    assert len(calls) == 7
    trace = stepper.trace()
    assert trace.weights("cross", 1).shape[2] == trace.weights("decoder_self", 0).shape[2] == 7


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
        with pytest.raises(attnviz.InputError, match="id 19, outside the vocabulary 0..18"):
            attnviz.beam_search(model, src, 19, None, beam_size=2, max_len=3, fused=fused)
    with pytest.raises(attnviz.InputError, match="id 19, outside the vocabulary 0..18"):
        attnviz.GreedyStepper(model, src, 19, None, max_len=3)  # before the encoder runs


@pytest.mark.parametrize("overrides", [CONFIGS[0], CONFIGS[3]])
def test_beam_search_with_the_fused_step_equals_the_module_path(overrides):
    model = make_model(**overrides)
    src = padded_source(model)
    eos = model.config.eos_id
    fast = attnviz.beam_search(model, src, model.config.bos_id, eos, beam_size=3, max_len=12)
    with attnviz.record(model) as trace:  # recorded through the fused step's hooks
        slow = attnviz.beam_search(
            model, src, model.config.bos_id, eos, beam_size=3, max_len=12, fused=False
        )
    assert trace.n_calls("cross", 0) > 0
    for a, b in zip(fast, slow, strict=True):
        assert a.tokens == b.tokens
        assert a.score == pytest.approx(b.score, abs=1e-4)
