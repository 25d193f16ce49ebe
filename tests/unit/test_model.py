"""The Transformer: shapes, options, input errors, recording == fused path, learning."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model, random_batch

import attnviz

CONFIGS = [
    dict(),
    dict(norm_first=True, activation="gelu"),
    dict(final_norm=True, n_encoder_layers=3, n_decoder_layers=1),
    dict(d_model=30, n_heads=5, d_ff=17),
    dict(src_vocab_size=19, share_embeddings=True, tie_output=True),
]


@pytest.mark.parametrize("overrides", CONFIGS)
def test_fast_path_equals_recording_path(overrides):
    model = make_model(**overrides)
    src, tgt, sp, tp = random_batch(model)
    fast = model(src, tgt, sp, tp)
    with attnviz.record(model) as trace:
        slow = model(src, tgt, sp, tp)
    assert fast.shape == (3, 6, model.config.tgt_vocab_size)
    assert torch.allclose(fast, slow, atol=1e-5)
    cfg = model.config
    assert len(trace) == cfg.n_encoder_layers + 2 * cfg.n_decoder_layers


def test_recorded_weights_reproduce_every_module_output(model):
    """weights @ V, merged and projected, is exactly what each attention module returned."""
    src, tgt, sp, tp = random_batch(model)
    outputs = {}
    handles = [
        m.register_forward_hook(
            lambda mod, args, kw_out, name=name: outputs.__setitem__(name, kw_out)
        )
        for name, m in model.attention_modules().items()
    ]
    try:
        model(src, tgt, sp, tp)  # fused path, not recording
    finally:
        for h in handles:
            h.remove()
    with attnviz.record(model) as trace:
        model(src, tgt, sp, tp)
    modules = model.attention_modules()
    for name, module in modules.items():
        kind, layer = module.kind, module.layer
        w, v = trace.weights(kind, layer), trace.values(kind, layer)
        z = w @ v  # [B, H, Tq, Dh]
        assert torch.allclose(z, trace.head_output(kind, layer), atol=1e-6)
        b, h, tq, dh = z.shape
        merged = module.out_proj(z.transpose(1, 2).reshape(b, tq, h * dh))
        assert torch.allclose(merged, outputs[name], atol=1e-5), name
        # per-head contributions add up to the layer output
        w_o = module.out_proj.weight.view(h * dh, h, dh)  # [D, H, Dh]
        per_head = torch.einsum("bhqd,ehd->bhqe", z, w_o)  # [B, H, Tq, D]
        assert torch.allclose(per_head.sum(1) + module.out_proj.bias, outputs[name], atol=1e-5)


def test_masks_in_trace(model):
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model) as trace:
        model(src, tgt, sp, tp)
    # decoder self: causal + target padding; nothing above the diagonal
    w = trace.weights("decoder_self", 1)
    assert torch.all(torch.triu(w, diagonal=1) == 0)
    m = trace.mask("decoder_self", 0)
    assert m.shape == (3, 1, 6, 6) and m[0, 0].equal(attnviz.masks.causal_mask(6))
    assert m[1, 0, :, 4:].all()  # row 1 has PAD at target positions 4, 5
    # encoder self and cross: no weight on source PAD (row 1, positions 4..6)
    for kind in ("encoder_self", "cross"):
        assert torch.all(trace.weights(kind, 0)[1, :, :, 4:] == 0)
        assert trace.mask(kind, 0)[1, 0, :, 4:].all()
    # raw scores are before masking: finite where the mask blocks
    assert torch.isfinite(trace.scores("decoder_self", 0)).all()


def test_all_padding_source_gives_zeros_not_nan(model):
    pad_id = model.config.pad_id
    src = torch.full((2, 5), pad_id, dtype=torch.long)
    src[0] = torch.arange(3, 8)
    tgt = torch.randint(3, 19, (2, 3))
    pad = src == pad_id
    fast = model(src, tgt, pad)
    with attnviz.record(model) as trace:
        slow = model(src, tgt, pad)
    assert torch.isfinite(fast).all() and torch.allclose(fast, slow, atol=1e-5)
    assert torch.all(trace.weights("cross", 0)[1] == 0)
    assert torch.all(trace.head_output("cross", 0)[1] == 0)


def test_config_validation_messages():
    with pytest.raises(attnviz.ConfigError, match="must divide d_model=30"):
        attnviz.ModelConfig(10, 10, d_model=30, n_heads=4)
    with pytest.raises(attnviz.ConfigError, match="activation"):
        attnviz.ModelConfig(10, 10, activation="swish")
    with pytest.raises(attnviz.ConfigError, match="share_embeddings"):
        attnviz.ModelConfig(10, 12, share_embeddings=True)
    with pytest.raises(attnviz.ConfigError, match="unknown model config keys: bogus"):
        attnviz.ModelConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5, "bogus": 1})
    cfg = attnviz.ModelConfig(10, 12, norm_first=True)
    assert attnviz.ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_bad_ids_get_clear_errors(model):
    tgt = torch.randint(3, 19, (1, 4))
    with pytest.raises(attnviz.InputError, match=r"shape \[B, T\]"):
        model(torch.tensor([3, 4]), tgt)
    with pytest.raises(attnviz.InputError, match="empty"):
        model(torch.zeros(1, 0, dtype=torch.long), tgt)
    with pytest.raises(attnviz.InputError, match="outside the vocabulary 0..22"):
        model(torch.tensor([[3, 99]]), tgt)
    with pytest.raises(attnviz.InputError, match="integer"):
        model(torch.tensor([[3.0, 4.0]]), tgt)
    with pytest.raises(attnviz.InputError, match="max_len=200"):
        model(torch.randint(3, 20, (1, 201)), tgt)


def test_options_change_the_structure():
    tied = make_model(src_vocab_size=19, share_embeddings=True, tie_output=True)
    assert tied.src_embed is tied.tgt_embed
    assert tied.generator.weight is tied.tgt_embed.weight
    plain = make_model(src_vocab_size=19)
    assert tied.num_parameters() == plain.num_parameters() - 2 * 19 * 24
    assert make_model(final_norm=True).encoder.norm is not None
    assert make_model().encoder.norm is None
    deep = make_model(n_encoder_layers=3, n_decoder_layers=1)
    assert len(deep.encoder.layers) == 3 and len(deep.decoder.layers) == 1
    # every layer has its own weights
    layers = deep.encoder.layers
    assert (
        layers[0].self_attn.in_proj_weight.data_ptr()
        != layers[1].self_attn.in_proj_weight.data_ptr()
    )


def test_positional_encoding_matches_the_paper():
    pe = attnviz.core.model.sinusoidal_positions(50, 6)
    pos, i = 7, 1
    assert pe[pos, 2 * i].item() == pytest.approx(
        torch.sin(torch.tensor(pos / 10000 ** (2 * i / 6))).item(), abs=1e-6
    )
    assert pe[pos, 2 * i + 1].item() == pytest.approx(
        torch.cos(torch.tensor(pos / 10000 ** (2 * i / 6))).item(), abs=1e-6
    )


def test_every_parameter_gets_a_gradient():
    model = make_model(norm_first=True, final_norm=True).train()
    src, tgt, sp, tp = random_batch(model)
    model(src, tgt, sp, tp).logsumexp(-1).mean().backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert no_grad == []
