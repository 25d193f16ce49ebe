"""Column-major copies of the weights a cached step multiplies: the same values, made once per
weight and version, never under autograd, within a budget; the fused step's logits unchanged."""

from __future__ import annotations

import torch
from helpers import make_model
from torch import nn

from attnviz.core import gemv
from attnviz.core.step import FusedStep


def test_a_copy_holds_the_same_values_laid_out_by_column():
    w = nn.Parameter(torch.randn(7, 5))
    with torch.no_grad():
        c = gemv.streamed(w)
        assert c.shape == w.shape and c.stride() == (1, 7)
        assert torch.equal(c, w)
        assert c.data_ptr() != w.data_ptr()
        x = torch.randn(3, 5)
        torch.testing.assert_close(torch.nn.functional.linear(x, c), x @ w.T)


def test_a_copy_is_made_once_and_again_after_the_weight_changes():
    w = nn.Parameter(torch.randn(6, 4))
    with torch.no_grad():
        first = gemv.streamed(w)
        assert gemv.streamed(w) is first
        w.mul_(2)  # an optimizer step, load_state_dict: the version moves
        second = gemv.streamed(w)
        assert second is not first and torch.equal(second, w)
        w.data = torch.randn(6, 4)  # new storage
        assert torch.equal(gemv.streamed(w), w)


def test_a_copy_goes_with_its_weight():
    before = gemv.held()
    w = nn.Parameter(torch.randn(50, 40))
    with torch.no_grad():
        gemv.streamed(w)
    assert gemv.held() == before + 2000
    del w
    assert gemv.held() == before


def test_the_plan_keeps_the_order_and_the_budget_and_never_copies_under_autograd():
    a, b, c = (nn.Parameter(torch.randn(n, 4)) for n in (10, 20, 5))
    with torch.no_grad():
        assert gemv.plan([a, b, c, a], budget=10**6) == {id(a), id(b), id(c)}
        assert gemv.plan([b, a, c], budget=100) == {id(b), id(c)}  # a does not fit after b
        assert gemv.plan([a, a], budget=40) == {id(a)}  # tied: counted once
    assert gemv.plan([a, b, c]) == set()  # grad enabled: a copy would cut the gradient


def test_the_fused_step_multiplies_the_copies_and_gives_the_module_paths_logits():
    model = make_model(n_decoder_layers=3, gated_ff=True, activation="silu")
    src = torch.randint(3, 23, (2, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        memory = model.encode(src)
        fast_cache, slow_cache = model.init_cache(memory), model.init_cache(memory)
        step = FusedStep(model, fast_cache)
        gen = step.generator[0]
        assert gen.stride() == (1, gen.shape[0])  # the copy, not the parameter
        assert torch.equal(gen, model.generator.weight)
        tokens = torch.full((2,), model.config.bos_id)
        for _ in range(10):
            fast = step(tokens)
            slow = model.decode(tokens[:, None], None, cache=slow_cache)[:, -1]
            torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
            tokens = slow.argmax(-1)
    with torch.enable_grad():  # under autograd the parameters themselves are multiplied
        step = FusedStep(model, model.init_cache(memory))
        assert step.generator[0] is model.generator.weight
