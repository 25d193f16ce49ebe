"""Gemma 3 text folders, and Mistral / Qwen2 sliding windows, against transformers.

A tiny random ``Gemma3ForCausalLM`` (float32, eager attention; local and global layers,
window 4, head width 12 != 40 / 4, one key/value head, ``query_pre_attn_scalar`` 20) saved
with ``save_pretrained``: logits and every attention weight on prompts longer than the window,
greedy tokens of ``generate()``, the recorded window, ``DropMask("sliding")`` against
transformers with that layer made global, older config.json forms, refusals by name. Mistral
and Qwen2 with a window of 3 on a prompt of 11.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import attnviz
from attnviz.core import masks
from attnviz.core.errors import InteropError
from attnviz.core.record import DropMask
from attnviz.decode.batched import greedy_decode, until_eos
from attnviz.decode.greedy import GreedyStepper
from tests import hf_families

transformers = pytest.importorskip("transformers")

V = hf_families.V
TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
GEMMA = dict(
    vocab_size=V, hidden_size=40, intermediate_size=56, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=1, head_dim=12, query_pre_attn_scalar=20,
    sliding_window=4, layer_types=TYPES, max_position_embeddings=64, attention_dropout=0.0,
    pad_token_id=0, eos_token_id=1, bos_token_id=2,
)  # fmt: skip
NEW = 8


def build_gemma(seed: int = 0, **overrides):
    config = transformers.Gemma3TextConfig(**{**GEMMA, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # norm weights are offsets from 1: around 0
            p.copy_(0.3 * torch.randn_like(p))
    return model


def build_llama_like(family: str, **overrides):
    config_cls, model_cls, kwargs = hf_families.DECODER_ONLY[family]
    config = getattr(transformers, config_cls)(**{**kwargs, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((1.0 if "norm" in name else 0.0) + 0.3 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    model = build_gemma()
    folder = tmp_path_factory.mktemp("gemma3")
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


def prompts(b: int = 2, t: int = 11, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V - 3, (b, t), generator=torch.Generator().manual_seed(seed))


def compare(hf_model, model, ids, real=None, edits=()):
    """Max |Δ| of logits and of every attention weight over the real rows."""
    real = torch.ones_like(ids, dtype=torch.bool) if real is None else real
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=real.long(), output_attentions=True)
        with attnviz.record(model, edits) as trace:
            ours = model(ids, pad_mask=None if real.all() else ~real)
    logits = (ours - ref.logits).abs()[real].max().item()
    weights = max(
        (trace.weights("decoder_self", i) - a).abs().amax(dim=(1, 3))[real].max().item()
        for i, a in enumerate(ref.attentions)
    )
    return logits, weights, trace


def test_config_of_a_gemma3_folder(gemma):
    cfg = attnviz.load_checkpoint(gemma[1]).config
    assert cfg.sliding_window == 4 and cfg.layer_types == tuple(TYPES)
    assert (cfg.head_dim, cfg.kv_heads, cfg.query_pre_attn_scalar) == (12, 1, 20.0)
    assert (cfg.rope_theta, cfg.rope_local_theta) == (1e6, 1e4)
    assert cfg.qk_norm and cfg.sandwich_norm and cfg.norm_offset == 1.0 and cfg.tie_output
    assert cfg.activation == "gelu_tanh" and cfg.max_len == 64


def test_logits_and_every_attention_weight_match_transformers(gemma):
    hf_model, folder = gemma
    model = attnviz.load_checkpoint(folder).model
    ids = prompts()
    logits, weights, _ = compare(hf_model, model, ids)
    assert logits <= 1e-5 and weights <= 1e-6, (logits, weights)
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, 7:] = False  # a right-padded row
    logits, weights, _ = compare(hf_model, model, ids, real)
    assert logits <= 1e-5 and weights <= 1e-6, (logits, weights)
    with torch.no_grad():  # the fused kernel path agrees
        assert (model(ids) - hf_model(input_ids=ids).logits).abs().max() <= 1e-5


def test_greedy_tokens_match_generate(gemma):
    hf_model, folder = gemma
    ckpt = attnviz.load_checkpoint(folder)
    model, cfg = ckpt.model, ckpt.config
    ids = prompts(t=6)
    with torch.no_grad():
        theirs = hf_model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
            do_sample=False, num_beams=1, pad_token_id=cfg.pad_id,
        )[:, ids.shape[1]:]  # fmt: skip
    for fused in (True, False):
        ours = greedy_decode(
            model, ids, None, cfg.eos_id, max_len=NEW, rules=ckpt.rules, fused=fused
        )
        for mine, ref in zip(ours.tolist(), theirs.tolist(), strict=True):
            assert until_eos(mine, cfg.eos_id, cfg.pad_id) == until_eos(ref, cfg.eos_id, cfg.pad_id)
    stepper = GreedyStepper(model, ids[0], None, cfg.eos_id, max_len=NEW, rules=ckpt.rules)
    assert stepper.run() == until_eos(theirs[0].tolist(), cfg.eos_id, cfg.pad_id)


def test_cached_steps_equal_recomputation(gemma):
    model = attnviz.load_checkpoint(gemma[1]).model
    ids = prompts(t=12)
    with torch.no_grad():
        full = model(ids)
        cache = model.init_cache(None, batch=2)
        model.decode(ids[:, :3], None, cache=cache)
        for i in range(3, 12):
            step = model.decode(ids[:, i : i + 1], None, cache=cache)[:, 0]
            assert (step - full[:, i]).abs().max() <= 1e-5


def test_trace_tells_sliding_cells_from_causal_ones(gemma):
    model = attnviz.load_checkpoint(gemma[1]).model
    _, _, trace = compare(gemma[0], model, prompts(1))
    causal, window = masks.causal_mask(11), masks.sliding_window_mask(11, 4)
    for layer, kind in enumerate(TYPES):
        win = trace.window("decoder_self", layer)[0, 0]
        expected = window if kind == "sliding_attention" else torch.zeros_like(window)
        assert torch.equal(win, expected)
        assert torch.equal(trace.mask("decoder_self", layer)[0, 0], causal | expected)


def test_drop_sliding_equals_transformers_with_that_layer_global(tmp_path):
    """With one rotary base for both kinds of layer, a global layer is a local one without its
    window: transformers with layer 2 made global is the model with DropMask("sliding", 2)."""
    rope = {t: {"rope_type": "default", "rope_theta": 10000.0} for t in set(TYPES)}
    hf_model = build_gemma(rope_parameters=rope)
    hf_model.save_pretrained(tmp_path, safe_serialization=True)
    model = attnviz.load_checkpoint(tmp_path).model
    types = list(TYPES)
    types[2] = "full_attention"
    other = build_gemma(rope_parameters=rope, layer_types=types)
    other.load_state_dict(hf_model.state_dict())
    ids = prompts()
    logits, weights, trace = compare(other, model, ids, edits=[DropMask("sliding", layers=[2])])
    assert logits <= 1e-5 and weights <= 1e-6, (logits, weights)
    assert not trace.window("decoder_self", 2).any() and trace.window("decoder_self", 3).any()
    assert compare(hf_model, model, ids)[0] <= 1e-5  # without the edit: the original


@pytest.mark.parametrize("form", ["pattern", "legacy_rope"])
def test_older_config_forms(gemma, tmp_path, form):
    """``sliding_window_pattern`` instead of ``layer_types``; ``rope_theta`` and
    ``rope_local_base_freq`` instead of ``rope_parameters`` per layer type."""
    shutil.copytree(gemma[1], tmp_path / "f", dirs_exist_ok=True)
    path = tmp_path / "f" / "config.json"
    config = json.loads(path.read_text())
    if form == "pattern":
        del config["layer_types"]
        config["sliding_window_pattern"] = 2
        expected = ("sliding_attention", "full_attention") * 2
    else:
        del config["rope_parameters"]
        config.update(rope_theta=1e6, rope_local_base_freq=1e4)
        expected = tuple(TYPES)
    path.write_text(json.dumps(config))
    cfg = attnviz.load_checkpoint(tmp_path / "f").config
    assert cfg.layer_types == expected and (cfg.rope_theta, cfg.rope_local_theta) == (1e6, 1e4)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"attn_logit_softcapping": 50.0}, "soft-capping"),
        ({"final_logit_softcapping": 30.0}, "soft-capping"),
        ({"use_bidirectional_attention": True}, "bidirectional"),
        ({"model_type": "gemma3"}, "'gemma3' is not supported"),
    ],
)
def test_unsupported_features_are_refused_by_name(gemma, tmp_path, change, words):
    shutil.copytree(gemma[1], tmp_path / "f", dirs_exist_ok=True)
    path = tmp_path / "f" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(InteropError, match=words):
        attnviz.load_checkpoint(tmp_path / "f")


@pytest.mark.parametrize(
    "family, overrides, local",
    [
        ("mistral", dict(sliding_window=3), (0, 1, 2)),
        ("qwen2", dict(use_sliding_window=True, sliding_window=3, max_window_layers=1), (1, 2)),
    ],
)
def test_mistral_and_qwen2_windows_match_transformers(tmp_path, family, overrides, local):
    hf_model = build_llama_like(family, **overrides)
    hf_model.save_pretrained(tmp_path, safe_serialization=True)
    ckpt = attnviz.load_checkpoint(tmp_path)
    model = ckpt.model
    assert model.config.max_len == 64 and model.config.sliding_window == 3
    ids = prompts()
    logits, weights, trace = compare(hf_model, model, ids)
    assert logits <= 1e-4 and weights <= 2e-5, (logits, weights)
    assert [trace.is_sliding("decoder_self", i) for i in range(3)] == [i in local for i in range(3)]
    with torch.no_grad():
        theirs = hf_model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
            do_sample=False, num_beams=1, pad_token_id=model.config.pad_id,
        )[:, ids.shape[1]:]  # fmt: skip
    cfg = model.config
    ours = greedy_decode(model, ids, None, cfg.eos_id, max_len=NEW, rules=ckpt.rules)
    for mine, ref in zip(ours.tolist(), theirs.tolist(), strict=True):
        assert until_eos(mine, cfg.eos_id, cfg.pad_id) == until_eos(ref, cfg.eos_id, cfg.pad_id)
