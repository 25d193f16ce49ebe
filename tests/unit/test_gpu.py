"""CUDA paths: the same invariants on a GPU. Skipped where CUDA is not available."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model, random_batch

import attnviz

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_fast_path_equals_recording_path_on_cuda():
    model = make_model().cuda()
    src, tgt, sp, tp = (t.cuda() for t in random_batch(model))
    fast = model(src, tgt, sp, tp)
    with attnviz.record(model) as trace:
        slow = model(src, tgt, sp, tp)
    assert torch.allclose(fast, slow, atol=1e-4)
    assert trace.weights("cross", 0).is_cuda
    assert trace.numpy("cross", 0).dtype.name == "float32"  # display arrays land on the CPU


def test_cached_decoding_matches_cpu():
    model = make_model()
    bos = model.config.bos_id
    src = torch.randint(3, 23, (1, 9), generator=torch.Generator().manual_seed(3))
    cpu = attnviz.GreedyStepper(model, src, bos, None, max_len=40).run()
    gpu = attnviz.GreedyStepper(model.cuda(), src.cuda(), bos, None, max_len=40).run()
    assert cpu == gpu


def test_decoders_move_a_cpu_mask_to_the_model():
    model = make_model().cuda()
    cfg = model.config
    src = torch.randint(3, 23, (2, 7))
    src[1, 5:] = cfg.pad_id
    out = attnviz.greedy_decode(
        model, src, cfg.bos_id, None, max_len=5, src_pad_mask=src == cfg.pad_id
    )
    assert out.is_cuda and out.shape == (2, 5)


def test_fused_greedy_on_cuda_equals_the_module_path_and_the_cpu():
    model = make_model()
    cfg = model.config
    src = torch.randint(3, 23, (3, 8), generator=torch.Generator().manual_seed(5))
    src[1, 5:] = cfg.pad_id
    cpu = attnviz.greedy_decode(model, src, cfg.bos_id, cfg.eos_id, max_len=40)
    model = model.cuda()
    fused = attnviz.greedy_decode(model, src.cuda(), cfg.bos_id, cfg.eos_id, max_len=40)
    modules = attnviz.greedy_decode(
        model, src.cuda(), cfg.bos_id, cfg.eos_id, max_len=40, fused=False
    )
    assert fused.is_cuda and torch.equal(fused, modules)
    assert torch.equal(fused.cpu(), cpu)
    with torch.autocast("cuda", dtype=torch.bfloat16):  # the cache takes the step's dtype
        half = attnviz.greedy_decode(model, src.cuda(), cfg.bos_id, None, max_len=40)
    assert half.shape == (3, 40)
