"""Pooling, Dense and Normalize of a sentence-transformers folder, and the per-token parts the
similarity decomposition splits: every mode held to sentence-transformers' own Pooling on
padded random states; the parts summing to the embedding through linear Dense and Normalize."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnviz.analysis.similarity import token_parts
from attnviz.interop.hf.sentence import POOLING_MODES, Dense, Embedder, Normalize, Pooling

IDENTITY = "torch.nn.modules.linear.Identity"
TANH = "torch.nn.modules.activation.Tanh"


def states(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)  # [B, T, D]
    real = torch.ones(3, 7, dtype=torch.bool)
    real[1, 4:] = False
    real[2, 1:] = False
    return h, real


MODES = [(m,) for m in POOLING_MODES] + [("cls", "max", "mean"), tuple(POOLING_MODES)]


@pytest.mark.parametrize("modes", MODES)
def test_pooling_equals_sentence_transformers_pooling(modes):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.modules import Pooling as TheirPooling

    h, real = states()
    theirs = TheirPooling(5, pooling_mode=modes if len(modes) > 1 else modes[0])
    ref = theirs({"token_embeddings": h, "attention_mask": real.long()})["sentence_embedding"]
    ours = Pooling(modes, 5)(h, real)
    assert ours.shape == ref.shape == (3, 5 * len(modes))
    assert torch.allclose(ours, ref, atol=1e-12)


@pytest.mark.parametrize(
    "modes, after",
    list(
        itertools.product(
            [("mean",), ("max",), ("cls", "weightedmean"), ("lasttoken", "mean_sqrt_len_tokens")],
            ["none", "normalize", "dense", "dense+normalize", "normalize+dense"],
        )
    ),
)
def test_token_parts_sum_to_the_embedding_through_linear_modules(modes, after):
    h, real = states(1)
    width = 5 * len(modes)
    g = torch.Generator().manual_seed(2)
    dense = Dense(torch.randn(4, width, generator=g), torch.randn(4, generator=g), IDENTITY)
    mods = {
        "none": (),
        "normalize": (Normalize(),),
        "dense": (dense,),
        "dense+normalize": (dense, Normalize()),
        "normalize+dense": (Normalize(), dense),
    }
    emb = Embedder(None, Pooling(modes, 5), mods[after], 16)  # fmt: skip
    for b in range(3):
        hb, rb = h[b : b + 1], real[b : b + 1]
        parts, covers = token_parts(emb, hb, rb)
        want = emb.finish(emb.pooling(hb, rb))[0]
        assert covers.startswith("exact")
        assert torch.allclose(parts.sum(0), want, atol=1e-10)
        assert (parts[~rb[0]] == 0).all()  # padding contributes nothing


def test_a_dense_with_an_activation_stops_the_decomposition_and_says_so():
    h, real = states()
    dense = Dense(torch.randn(4, 5), None, TANH)
    emb = Embedder(None, Pooling(("mean",), 5), (dense, Normalize()), 16)
    parts, covers = token_parts(emb, h[:1], real[:1])
    assert "before the Dense with Tanh" in covers
    assert torch.allclose(parts.sum(0), emb.pooling(h[:1], real[:1])[0])
    assert emb.dim == 4 and "Dense 5->4 Tanh" in emb.describe()
