"""Recording: pinned hook names, per-call isolation, clean exit, and edits in the real pass."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from helpers import make_model, random_batch

import attnviz
from attnviz.core.model import ACTIVE_RECORDER

PINNED_MODULES = [
    "encoder.layers.0.self_attn",
    "encoder.layers.1.self_attn",
    "decoder.layers.0.self_attn",
    "decoder.layers.0.cross_attn",
    "decoder.layers.1.self_attn",
    "decoder.layers.1.cross_attn",
]
FIELDS = ["scores", "mask", "weights", "values", "head_output"]


def test_hook_names_and_recorded_keys_are_pinned(model):
    """Renames must be deliberate: these names are what traces, exports and the app use."""
    assert list(model.attention_modules()) == PINNED_MODULES
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model) as trace:
        model(src, tgt, sp, tp)
    assert trace.keys() == [
        ("encoder_self", 0),
        ("encoder_self", 1),
        ("decoder_self", 0),
        ("decoder_self", 1),
        ("cross", 0),
        ("cross", 1),
    ]
    expected = [f"{m}.{f}" for m in (PINNED_MODULES[i] for i in (0, 1, 2, 4, 3, 5)) for f in FIELDS]
    assert trace.names() == expected
    arrays = trace.to_numpy()
    assert list(arrays) == expected
    assert arrays["decoder.layers.1.cross_attn.weights"].dtype == np.float32
    assert arrays["decoder.layers.1.cross_attn.mask"].dtype == np.bool_
    assert trace.numpy("cross", 1).shape == (3, 4, 6, 7)


def test_parameter_names_are_pinned():
    model = make_model(n_encoder_layers=1, n_decoder_layers=1, final_norm=True)
    names = list(model.state_dict())
    assert names[:2] == ["src_embed.weight", "tgt_embed.weight"]
    assert "decoder.layers.0.cross_attn.in_proj_weight" in names
    assert "encoder.layers.0.ff.linear1.weight" in names
    assert names[-4:] == [
        "decoder.norm.weight",
        "decoder.norm.bias",
        "generator.weight",
        "generator.bias",
    ]
    assert "pe" not in names  # derived from the config, not stored
    assert (
        len(names) == 2 + 12 + 2 + 18 + 2 + 2
    )  # embeds, enc layer, enc norm, dec layer, dec norm, out


def test_capture_subset_and_detach(model):
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model, capture=["weights"]) as trace:
        model(src, tgt, sp, tp)
    assert trace.names()[0] == "encoder.layers.0.self_attn.weights"
    with pytest.raises(attnviz.TraceLookupError, match="'scores' was not captured"):
        trace.scores("cross", 0)
    with pytest.raises(attnviz.TraceLookupError, match="holds no 'cross' layer 5"):
        trace.weights("cross", 5)
    model.train()
    with attnviz.record(model, detach=False) as trace:
        model(src, tgt, sp, tp)
    assert trace.weights("cross", 0).requires_grad


def test_recorder_is_gone_after_an_exception(model):
    src, tgt, sp, tp = random_batch(model)
    clean = model(src, tgt, sp, tp)
    with (
        pytest.raises(RuntimeError, match="boom"),
        attnviz.record(model, [attnviz.ZeroHeads("cross", 0, [0, 1, 2, 3])]),
    ):
        model(src, tgt, sp, tp)
        raise RuntimeError("boom")
    assert ACTIVE_RECORDER.get() is None
    assert torch.equal(model(src, tgt, sp, tp), clean)
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_other_models_are_not_recorded(model):
    other = make_model(seed=5)
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model) as trace:
        other(src, tgt, sp, tp)
    assert len(trace) == 0


def test_two_threads_record_separately(model):
    """Each thread sees only its own forward passes and its own edits."""
    inputs = [random_batch(model, b=b, seed=b) for b in (1, 2)]
    edits = [[], [attnviz.DropMask("causal")]]
    expected = []
    for (src, tgt, sp, tp), e in zip(inputs, edits, strict=True):
        with attnviz.record(model, e) as t:
            model(src, tgt, sp, tp)
        expected.append(t)
    barrier = threading.Barrier(2)
    got, errors = [None, None], []

    def work(i: int) -> None:
        try:
            src, tgt, sp, tp = inputs[i]
            with attnviz.record(model, edits[i]) as t:
                for _ in range(20):
                    barrier.wait(timeout=10)
                    model(src, tgt, sp, tp)
            got[i] = t
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for i in range(2):
        assert got[i].n_calls("cross", 0) == 20
        for key in expected[i].keys():
            assert torch.allclose(got[i].weights(*key), expected[i].weights(*key), atol=1e-6)


def test_zero_heads_ablates_inside_the_forward(model):
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model) as base:
        clean = model(src, tgt, sp, tp)
    with attnviz.record(model, [attnviz.ZeroHeads("cross", 1, [1, 3])]) as trace:
        edited = model(src, tgt, sp, tp)
    z = trace.head_output("cross", 1)
    assert torch.all(z[:, [1, 3]] == 0)
    assert torch.allclose(z[:, [0, 2]], base.head_output("cross", 1)[:, [0, 2]], atol=1e-6)
    # nothing before the edited module changes; the logits do
    assert torch.allclose(trace.weights("cross", 0), base.weights("cross", 0), atol=1e-6)
    assert not torch.allclose(clean, edited, atol=1e-4)
    # edit without capture runs the same edited model
    with attnviz.record(model, [attnviz.ZeroHeads("cross", 1, [1, 3])], capture=None) as empty:
        assert torch.allclose(model(src, tgt, sp, tp), edited, atol=1e-6)
    assert len(empty) == 0


def test_replace_weights_is_what_meets_the_values(model):
    src, tgt, sp, tp = random_batch(model)
    uniform = torch.full((6, 7), 1 / 7)
    with attnviz.record(model, [attnviz.ReplaceWeights("cross", 0, uniform, head=2)]) as trace:
        model(src, tgt, sp, tp)
    w = trace.weights("cross", 0)
    assert torch.allclose(w[:, 2], uniform.expand(3, 6, 7))
    assert torch.allclose(trace.head_output("cross", 0), w @ trace.values("cross", 0), atol=1e-6)
    # a callable edit sees the computed weights of all heads
    with attnviz.record(
        model, [attnviz.ReplaceWeights("encoder_self", 1, lambda w: w.flip(-1))]
    ) as t2:
        model(src, tgt, sp, tp)
    with attnviz.record(model) as base:
        model(src, tgt, sp, tp)
    assert torch.allclose(
        t2.weights("encoder_self", 1), base.weights("encoder_self", 1).flip(-1), atol=1e-6
    )
    with (
        pytest.raises(attnviz.EditError, match=r"do not fit cross layer 0"),
        attnviz.record(model, [attnviz.ReplaceWeights("cross", 0, torch.ones(5, 5), head=0)]),
    ):
        model(src, tgt, sp, tp)


def test_drop_causal_mask_only_where_asked(model):
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model, [attnviz.DropMask("causal", layers=[1])]) as trace:
        dropped = model(src, tgt, sp, tp)
    rows, cols = torch.triu_indices(6, 6, offset=1)
    upper0 = trace.weights("decoder_self", 0)[..., rows, cols]  # [B, H, cells above diagonal]
    upper1 = trace.weights("decoder_self", 1)[..., rows, cols]
    assert torch.all(upper0 == 0)
    assert torch.all(upper1[0] > 0)  # row 0 has no padding: the future is now visible
    assert torch.all(trace.weights("decoder_self", 1)[1, :, :, 4:] == 0)  # padding still masked
    assert not trace.mask("decoder_self", 1)[0].any()
    assert not torch.allclose(dropped, model(src, tgt, sp, tp), atol=1e-4)


def test_scores_are_raw_before_masking(model):
    """Layer 0 sees the same inputs with or without masks, so its raw scores must agree."""
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model) as masked:
        model(src, tgt, sp, tp)
    with attnviz.record(model, [attnviz.DropMask("both")]) as unmasked:
        model(src, tgt, sp, tp)
    for kind in ("encoder_self", "decoder_self"):
        assert masked.mask(kind, 0).any() and not unmasked.mask(kind, 0).any()
        assert torch.allclose(masked.scores(kind, 0), unmasked.scores(kind, 0), atol=1e-6)
    # and they are q·kᵀ/√Dh of the recorded projections
    m = model.encoder.layers[0].self_attn
    x = model._embed(model.src_embed, src)
    q = m._split(torch.nn.functional.linear(x, m.in_proj_weight[:24], m.in_proj_bias[:24]))
    k, _ = m.project_kv(x)
    assert torch.allclose(
        masked.scores("encoder_self", 0), q @ k.transpose(-2, -1) / 6**0.5, atol=1e-5
    )


def test_nested_record_blocks_compose(model):
    """An outer block keeps editing and recording while decoding helpers open their own."""
    src = torch.randint(3, 23, (1, 8), generator=torch.Generator().manual_seed(9))
    ablate = [attnviz.ZeroHeads("cross", layer, [0, 1, 2, 3]) for layer in (0, 1)]
    edited = attnviz.greedy_decode(model, src, 1, None, max_len=10, edits=ablate)
    assert not torch.equal(edited, attnviz.greedy_decode(model, src, 1, None, max_len=10))
    with attnviz.record(model, ablate) as outer:
        stepped = attnviz.GreedyStepper(model, src, 1, None, max_len=10).run()
        beamed = attnviz.beam_search(model, src, 1, 2, beam_size=1, max_len=10)[0].tokens
    assert stepped == edited[0].tolist()
    assert beamed == edited[0].tolist()[: len(beamed)]
    assert outer.n_calls("cross", 0) == 10 + len(beamed)  # the outer trace saw every step
    assert torch.all(outer.head_output("cross", 1) == 0)
    assert attnviz.GreedyStepper(model, src, 1, None, max_len=10, edits=ablate).run() == stepped


def test_recorded_values_survive_cache_rewrites(model):
    src = torch.randint(3, 23, (1, 6), generator=torch.Generator().manual_seed(2))
    with attnviz.record(model, capture=["values"]) as trace:
        stepper = attnviz.GreedyStepper(model, src, 1, None, max_len=8)
        stepper.run()
    before = trace.values("decoder_self", 0, call=3).clone()
    with attnviz.record(model, capture=["values"]):
        stepper.back(2)
        stepper.step(token=5)
        stepper.step(token=6)
    assert torch.equal(trace.values("decoder_self", 0, call=3), before)


def test_drop_padding_mask(model):
    src, tgt, sp, tp = random_batch(model)
    with attnviz.record(model, [attnviz.DropMask("padding", kinds=["encoder_self"])]) as trace:
        model(src, tgt, sp, tp)
    assert torch.all(trace.weights("encoder_self", 0)[1, :, :, 4:] > 0)
    assert torch.all(trace.weights("cross", 0)[1, :, :, 4:] == 0)


@pytest.mark.parametrize(
    "edit, message",
    [
        (attnviz.ZeroHeads("cross", 0, [4]), r"heads 0..3, got \[4\]"),
        (attnviz.ZeroHeads("crosss", 0, [0]), "kind must be one of"),
        (attnviz.ZeroHeads("decoder_self", 2, [0]), "layers 0..1, got 2"),
        (attnviz.DropMask("causal", kinds=["cross"]), "cross has no causal mask"),
        (attnviz.DropMask("future"), "which must be"),
        (attnviz.DropMask("causal", layers=[7]), "decoder_self has layers 0..1, got 7"),
        (attnviz.DropMask("padding", layers=2), "encoder_self has layers 0..1, got 2"),
        ("zero head 1", "unknown edit"),
    ],
)
def test_bad_edits_are_refused_before_running(model, edit, message):
    with pytest.raises(attnviz.EditError, match=message), attnviz.record(model, [edit]):
        pass


def test_single_values_are_accepted_where_lists_are():
    assert attnviz.ZeroHeads("cross", 0, 2).heads == (2,)
    assert attnviz.DropMask("padding", kinds="cross", layers=1) == attnviz.DropMask(
        "padding", kinds=["cross"], layers=[1]
    )
    with pytest.raises(attnviz.EditError, match="heads must be an int or a list"):
        attnviz.ZeroHeads("cross", 0, "all")


def test_compact_storage_dtype_keeps_the_forward_and_halves_the_trace(model):
    src, tgt, sp, tp = random_batch(model)
    with torch.no_grad(), attnviz.record(model) as full:
        out_full = model(src, tgt, sp, tp)
    with torch.no_grad(), attnviz.record(model, dtype=torch.float16) as half:
        out_half = model(src, tgt, sp, tp)
    torch.testing.assert_close(out_half, out_full, rtol=0, atol=0)  # the model ran as before
    for key in full.keys():
        assert half.weights(*key).dtype == torch.float16 and half.mask(*key).dtype == torch.bool
        torch.testing.assert_close(
            half.weights(*key).float(), full.weights(*key), atol=1e-3, rtol=0
        )
        assert half.values(*key).element_size() * 2 == full.values(*key).element_size()
    with (
        pytest.raises(attnviz.EditError, match="floating torch.dtype"),
        attnviz.record(model, dtype=torch.int8),
    ):
        pass
