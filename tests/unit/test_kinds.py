"""Decoder-only and encoder-only models, and the parts they bring (rotary positions,
grouped-query attention, token types), each against an independent computation."""

from __future__ import annotations

import math

import pytest
import torch

import attnviz
from attnviz.core.errors import ConfigError, InputError
from attnviz.core.positions import apply_rotary, rotary_angles, rotary_frequencies
from attnviz.decode.batched import greedy_decode
from attnviz.decode.beam import beam_search
from attnviz.decode.greedy import GreedyStepper

V = 31


def decoder_only(**over) -> attnviz.Transformer:
    fields = dict(
        d_model=32, n_heads=4, n_kv_heads=2, d_ff=48, dropout=0.0, arch="decoder-only",
        positions="rotary", norm="rms", norm_first=True, final_norm=True, gated_ff=True,
        activation="silu", bias=False, qkv_bias=True, output_bias=False,
        scale_embeddings=False, max_len=40, n_encoder_layers=0,
    )  # fmt: skip
    fields.update(over)
    torch.manual_seed(0)
    return attnviz.Transformer(attnviz.ModelConfig(V, V, **fields)).eval()


def encoder_only(**over) -> attnviz.Transformer:
    fields = dict(
        d_model=32, n_heads=4, d_ff=48, dropout=0.0, arch="encoder-only", positions="learned",
        embed_norm=True, type_vocab_size=2, head_transform=True, tie_output=True,
        activation="gelu", scale_embeddings=False, n_decoder_layers=0,
    )  # fmt: skip
    fields.update(over)
    torch.manual_seed(0)
    return attnviz.Transformer(attnviz.ModelConfig(V, V, **fields)).eval()


def prompts(b: int = 2, t: int = 7) -> torch.Tensor:
    return torch.randint(4, V, (b, t), generator=torch.Generator().manual_seed(1))


# -- config ------------------------------------------------------------------------------------
def test_an_old_config_without_the_new_fields_loads_as_an_encoder_decoder():
    old = attnviz.ModelConfig(20, 20).to_dict()
    for key in ("arch", "n_kv_heads", "qkv_bias", "rotary_dim", "rope_theta", "rope_scaling",
                "rope_factor", "type_vocab_size", "head_transform"):  # fmt: skip
        old.pop(key)
    cfg = attnviz.ModelConfig.from_dict(old)
    assert cfg.arch == "encoder-decoder" and cfg.kv_heads == cfg.n_heads
    model = attnviz.Transformer(cfg)
    assert model.encoder is not None and model.decoder.layers[0].cross_attn is not None


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(arch="decoder"), "arch must be one of"),
        (dict(arch="decoder-only", n_decoder_layers=0), "n_decoder_layers"),
        (dict(arch="encoder-only", tgt_vocab_size=21), "one vocabulary"),
        (dict(n_kv_heads=3), "n_kv_heads=3 must divide n_heads=4"),
        (dict(arch="decoder-only", positions="rotary", rotary_dim=5), "rotary_dim=5"),
        (dict(positions="rotary"), "rotary positions"),
        (dict(rope_scaling="yarn"), "rope_scaling must be one of"),
        (dict(rope_theta=0), "rope_theta must be a positive number"),
        (dict(arch="decoder-only", type_vocab_size=2), "needs an encoder"),
        (dict(qkv_bias="yes"), "qkv_bias"),
    ],
)
def test_bad_kind_fields_are_refused_in_one_line(fields, words):
    base = dict(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=4)
    with pytest.raises(ConfigError, match=words):
        attnviz.ModelConfig(**{**base, **fields})


@pytest.mark.parametrize("make", [decoder_only, encoder_only])
def test_sizes_count_what_each_kind_builds(make):
    model = make()
    built = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    sizes = model.config.sizes()
    assert built == sizes["parameters"] + sizes["buffers"]


# -- rotary positions ----------------------------------------------------------------------------
def rotate_by_complex(x: torch.Tensor, start: int, rot: int, theta: float, freqs=None):
    """Independent rotary: pair (i, i + R/2) as one complex number turned by pos * freq_i."""
    out = x.clone().double()
    half = rot // 2
    for t in range(x.shape[-2]):
        for i in range(half):
            f = freqs[i] if freqs is not None else theta ** (-2 * i / rot)
            turn = complex(math.cos((start + t) * f), math.sin((start + t) * f))
            z = complex(float(x[..., t, i].flatten()[0]), float(x[..., t, i + half].flatten()[0]))
            w = z * turn
            out[..., t, i], out[..., t, i + half] = w.real, w.imag
    return out


@pytest.mark.parametrize("rotary_dim", [None, 6])
def test_rotary_turns_each_pair_by_position_times_frequency(rotary_dim):
    cfg = attnviz.ModelConfig(
        V, V, d_model=16, n_heads=2, arch="decoder-only", positions="rotary",
        rotary_dim=rotary_dim, rope_theta=500.0,
    )  # fmt: skip
    rot = cfg.rotary_width
    assert rot == (rotary_dim or 8)
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    cos, sin = rotary_angles(rotary_frequencies(cfg).double(), 3, 5, torch.float64)
    ours = apply_rotary(x, cos, sin)
    ref = rotate_by_complex(x, 3, rot, 500.0)
    assert torch.allclose(ours, ref, atol=1e-6)
    assert torch.equal(ours[..., rot:], x[..., rot:])  # partial rotary leaves the rest


def test_llama3_scaling_follows_its_three_bands():
    cfg = attnviz.ModelConfig(
        V, V, d_model=64, n_heads=1, arch="decoder-only", positions="rotary",
        rope_theta=10000.0, rope_scaling="llama3", rope_factor=8.0, rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0, rope_original_max_len=64,
    )  # fmt: skip
    ours = rotary_frequencies(cfg).double()
    for i, got in enumerate(ours.tolist()):
        f = 10000.0 ** (-2 * i / 64)
        wavelen = 2 * math.pi / f
        if wavelen < 64 / 4:
            want = f
        elif wavelen > 64 / 1:
            want = f / 8
        else:
            smooth = (64 / wavelen - 1) / (4 - 1)
            want = (1 - smooth) * f / 8 + smooth * f
        assert got == pytest.approx(want, rel=1e-5), i
    assert ours[0] == pytest.approx(1.0) and ours[-1] < 10000.0 ** (-62 / 64)  # both ends hit


# -- grouped-query attention ---------------------------------------------------------------------
def test_grouped_query_attention_matches_a_loop_over_query_heads():
    model = decoder_only(positions="learned", n_decoder_layers=1)
    attn = model.decoder.layers[0].self_attn
    x = torch.randn(2, 6, 32)
    with torch.no_grad(), attnviz.record(model) as trace:
        out = attn(x)
    h, hkv, dh = 4, 2, 8
    w = attn.in_proj_weight
    bq, bk, bv = attn.in_proj_bias.split([h * dh, hkv * dh, hkv * dh])
    wq, wk, wv = w.split([h * dh, hkv * dh, hkv * dh])
    heads, weights = [], []
    for head in range(h):
        kv = head // (h // hkv)
        q = x @ wq[head * dh : (head + 1) * dh].T + bq[head * dh : (head + 1) * dh]
        k = x @ wk[kv * dh : (kv + 1) * dh].T + bk[kv * dh : (kv + 1) * dh]
        v = x @ wv[kv * dh : (kv + 1) * dh].T + bv[kv * dh : (kv + 1) * dh]
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
        weights.append(p)
        heads.append(p @ v)
    ref = torch.cat(heads, dim=-1) @ attn.out_proj.weight.T
    assert torch.allclose(out, ref, atol=1e-5)
    recorded = trace.weights("decoder_self", 0)
    assert recorded.shape == (2, 4, 6, 6)  # one matrix per query head
    assert torch.allclose(recorded, torch.stack(weights, dim=1), atol=1e-6)


# -- decoder-only ----------------------------------------------------------------------------------
def test_decoder_only_records_its_self_attention_only_and_both_paths_agree():
    model = decoder_only()
    ids = prompts()
    with torch.no_grad():
        fast = model(ids)
        with attnviz.record(model) as trace:
            slow = model(ids)
    assert torch.allclose(fast, slow, atol=1e-5)
    assert {k for k, _ in trace.keys()} == {"decoder_self"}
    with torch.no_grad():
        assert torch.allclose(fast, model.decode(ids, None), atol=1e-6)
    w = trace.weights("decoder_self", 1)
    assert bool((w.triu(1) == 0).all())  # causal
    with pytest.raises(InputError, match="no encoder"):
        model.encode(ids)
    with pytest.raises(InputError, match="one id tensor"):
        model(ids, ids)


def test_decoder_only_greedy_paths_and_stepper_give_the_same_continuation():
    model = decoder_only()
    ids = prompts()
    fused = greedy_decode(model, ids, None, None, max_len=6)
    modules = greedy_decode(model, ids, None, None, max_len=6, fused=False)
    uncached = greedy_decode(model, ids, None, None, max_len=6, cache=False)
    assert torch.equal(fused, modules) and torch.equal(fused, uncached)
    # the continuation is what the full model's argmax gives after prompt + continuation
    seq = torch.cat([ids, fused], dim=1)
    with torch.no_grad():
        assert torch.equal(model(seq)[:, ids.shape[1] - 1 : -1].argmax(-1), fused)
    stepper = GreedyStepper(model, ids[0], None, None, max_len=6)
    assert stepper.run() == fused[0].tolist()
    logits = torch.stack([s.logits for s in stepper.steps])
    with torch.no_grad():
        full = model(seq[:1])[0, ids.shape[1] - 1 : -1]
    assert torch.allclose(logits, full, atol=1e-5)
    # the trace holds the prompt's rows and the steps' rows, as one full pass records them
    trace = stepper.trace()
    with torch.no_grad(), attnviz.record(model) as ref:
        model(seq[:1, :-1])
    for layer in range(2):
        assert torch.allclose(
            trace.weights("decoder_self", layer), ref.weights("decoder_self", layer), atol=1e-5
        )
    stepper.back(2)
    assert stepper.run() == fused[0].tolist()


def test_decoder_only_beam_search_of_one_is_greedy_and_its_attention_is_recorded():
    model = decoder_only()
    ids = prompts(1)
    greedy = greedy_decode(model, ids, None, None, max_len=6)[0].tolist()
    assert beam_search(model, ids, None, None, beam_size=1, max_len=6)[0].tokens == greedy
    fused = beam_search(model, ids, None, None, beam_size=3, max_len=6)[0]
    kept = beam_search(model, ids, None, None, beam_size=3, max_len=6, return_attention=True)[0]
    assert fused.tokens == kept.tokens and fused.score == pytest.approx(kept.score, abs=1e-5)
    t = ids.shape[1] - 1 + len(kept.tokens)
    assert kept.trace.weights("decoder_self", 0).shape == (1, 4, t, t)


def test_decoder_only_refuses_padded_prompts():
    model = decoder_only()
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, :2] = True
    with pytest.raises(InputError, match="unpadded prompts"):
        greedy_decode(model, prompts(), None, None, max_len=3, src_pad_mask=pad)


# -- encoder-only ----------------------------------------------------------------------------------
def test_encoder_only_records_encoder_self_and_its_head_is_the_one_used():
    model = encoder_only()
    ids = prompts()
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    with torch.no_grad(), attnviz.record(model) as trace:
        logits = model(ids, token_type_ids=types)
        plain = model(ids)
    assert {k for k, _ in trace.keys()} == {"encoder_self"}
    with torch.no_grad():
        states = model.encode(ids, token_type_ids=types)
        ref = model.head.norm(torch.nn.functional.gelu(model.head.dense(states)))
        ref = ref @ model.src_embed.weight.T + model.generator.bias
    assert torch.allclose(logits, ref, atol=1e-5)
    assert not torch.allclose(logits, plain)  # token types change the input
    with torch.no_grad():  # type 0 everywhere is the default
        assert torch.allclose(plain, model(ids, token_type_ids=torch.zeros_like(ids)), atol=1e-6)
    with pytest.raises(InputError, match="token_type_ids"):
        model(ids, token_type_ids=torch.full_like(ids, 2))
    with pytest.raises(InputError, match="no decoder"):
        model.decode(ids, None)


def test_token_types_are_added_to_word_and_position_embeddings_before_the_norm():
    model = encoder_only()
    ids, types = prompts(), torch.randint(0, 2, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        x = (
            model.src_embed.weight[ids]
            + model.encoder.pos_embed.weight[:7]
            + model.type_embed.weight[types]
        )
        x = model.encoder.embed_norm(x)
        for layer in model.encoder.layers:
            x = layer(x, None)
        assert torch.allclose(model.encode(ids, token_type_ids=types), x, atol=1e-6)


@pytest.mark.parametrize("make", [decoder_only, encoder_only])
def test_one_stack_checkpoints_round_trip(tmp_path, make):
    from attnviz.data.tokenizer import Tokenizer

    model = make()
    tok = Tokenizer("word", [f"w{i}" for i in range(V - 4)])
    folder = attnviz.save_checkpoint(tmp_path / "ck", model, tok, tok, {"task": None})
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.config == model.config
    ids = prompts()
    with torch.no_grad():
        torch.testing.assert_close(ckpt.model(ids), model(ids), rtol=0, atol=0)
    if model.config.tie_output:
        assert ckpt.model.generator.weight is ckpt.model.src_embed.weight


def test_an_encoder_only_model_is_not_decoded():
    model = encoder_only()
    with pytest.raises(InputError, match="no decoder"):
        greedy_decode(model, prompts(), 1, 2, max_len=3)
    with pytest.raises(InputError, match="no decoder"):
        GreedyStepper(model, prompts(1)[0], 1, 2, max_len=3)
