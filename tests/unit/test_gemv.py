"""Column-major copies of the weights a cached step multiplies: the same values, made by their
holder, read only while they match the weights (version, storage), never under autograd or for
dtypes whose kernels favour rows; the fused step's logits and recordings unchanged."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model
from torch import nn

import attnviz
from attnviz.core import gemv
from attnviz.core.step import FusedStep


def test_a_copy_holds_the_same_values_laid_out_by_column():
    model = make_model()
    copies = gemv.Copies(model)
    w = model.generator.weight
    with torch.no_grad():
        c = copies.lay(w)
        assert c.shape == w.shape and c.stride() == (1, w.shape[0])
        assert torch.equal(c, w) and c.data_ptr() != w.data_ptr()
        x = torch.randn(3, w.shape[1])
        torch.testing.assert_close(torch.nn.functional.linear(x, c), x @ w.T)


def test_the_copies_are_the_step_matrices_output_first_within_the_budget():
    model = make_model(n_decoder_layers=2)
    mats = gemv.step_matrices(model)
    assert mats[0] is model.generator.weight
    cross = [layer.cross_attn.in_proj_weight for layer in model.decoder.layers]
    assert not any(m is c for m in mats for c in cross)  # a step multiplies its query third
    assert gemv.Copies(model).numel == sum(m.numel() for m in mats)
    first = model.generator.weight.numel()
    assert gemv.Copies(model, budget=first).numel == first
    a, b, c = (nn.Parameter(torch.randn(n, 4)) for n in (10, 20, 5))
    with torch.no_grad():
        assert [id(w) for w in gemv.plan([a, b, c, a], budget=10**6)] == [id(a), id(b), id(c)]
        assert [id(w) for w in gemv.plan([b, a, c], budget=100)] == [id(b), id(c)]
    assert gemv.plan([a, b, c]) == []  # under autograd a copy would cut the gradient


def test_a_weight_changed_in_place_is_read_as_it_is_not_from_its_copy():
    model = make_model()
    copies = gemv.Copies(model)
    w = model.generator.weight
    with torch.no_grad():
        assert copies.lay(w) is not w
        w.mul_(2)  # an optimizer step, load_state_dict: the version moves
        assert copies.lay(w) is w
    model2 = make_model()
    copies2 = gemv.Copies(model2)
    model2.generator.weight.data = torch.randn_like(model2.generator.weight)  # new storage
    with torch.no_grad():
        assert copies2.lay(model2.generator.weight) is model2.generator.weight
        assert copies2.lay(nn.Parameter(torch.randn(3, 3))) is not None  # not held: itself


def test_nothing_is_copied_for_half_precision_or_used_under_autograd():
    half = make_model().to(torch.float16)
    assert gemv.Copies(half).numel == 0  # their kernels favour rows (measured: 46x slower)
    model = make_model()
    copies = gemv.Copies(model)
    w = model.generator.weight
    assert copies.lay(w) is w  # grad enabled here
    with torch.no_grad():
        assert copies.lay(w) is not w


@pytest.mark.parametrize("overrides", [dict(), dict(gated_ff=True, activation="silu")])
def test_the_fused_step_multiplies_the_copies_and_gives_the_module_paths_logits(overrides):
    model = make_model(n_decoder_layers=3, **overrides)
    src = torch.randint(3, 23, (2, 6), generator=torch.Generator().manual_seed(2))
    copies = gemv.Copies(model)
    with torch.no_grad():
        memory = model.encode(src)
        fast_cache, slow_cache = model.init_cache(memory), model.init_cache(memory)
        step = FusedStep(model, fast_cache, copies)
        gen = step.generator[0]
        assert gen.stride() == (1, gen.shape[0]) and torch.equal(gen, model.generator.weight)
        tokens = torch.full((2,), model.config.bos_id)
        for _ in range(10):
            fast = step(tokens)
            slow = model.decode(tokens[:, None], None, cache=slow_cache)[:, -1]
            torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
            tokens = slow.argmax(-1)
        assert FusedStep(model, fast_cache).generator[0] is model.generator.weight  # no copies


def test_a_stepper_with_copies_records_and_chooses_as_one_without():
    model = make_model()
    src = torch.randint(3, 23, (1, 8), generator=torch.Generator().manual_seed(4))
    bos = model.config.bos_id
    plain = attnviz.GreedyStepper(model, src, bos, None, max_len=12)
    fast = attnviz.GreedyStepper(model, src, bos, None, max_len=12, copies=gemv.Copies(model))
    assert plain.run() == fast.run()
    for a, b in zip(plain.steps, fast.steps, strict=True):
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
        for key in a.attention:
            torch.testing.assert_close(a.attention[key], b.attention[key], atol=1e-6, rtol=0)


def test_the_app_keeps_one_set_of_copies_per_loaded_model(reverse_ckpt):
    from attnviz.app import decoders

    first = decoders.copies_of(reverse_ckpt)
    assert first is not None and first.numel > 0
    assert decoders.copies_of(reverse_ckpt) is first
