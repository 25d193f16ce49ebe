"""Attribution on a model whose source and target share one embedding table (most imported
models): the private copy is untied, so the numbers equal those of an untied twin."""

from __future__ import annotations

import numpy as np
import torch
from helpers import make_model

import attnviz
from attnviz import analysis
from attnviz.tokenizer import Tokenizer


def test_shared_embeddings_attribute_like_an_untied_twin(tmp_path):
    tied = make_model(src_vocab_size=19, tgt_vocab_size=19, share_embeddings=True, seed=3)
    cfg = tied.config
    twin = attnviz.Transformer(
        attnviz.ModelConfig.from_dict({**cfg.to_dict(), "share_embeddings": False})
    ).eval()
    state = tied.state_dict()
    state["tgt_embed.weight"] = state["src_embed.weight"].clone()
    twin.load_state_dict(state)
    tok = Tokenizer("word", [f"w{i}" for i in range(15)])
    text = "w3 w7 w1 w9"
    results = []
    for name, model in (("tied", tied), ("twin", twin)):
        attnviz.save_checkpoint(tmp_path / name, model, tok, tok, {})
        ckpt = attnviz.load_checkpoint(tmp_path / name)
        assert (ckpt.model.src_embed is ckpt.model.tgt_embed) == (name == "tied")
        results.append(analysis.attribute(ckpt, text, step=1, n_steps=8))
        assert ckpt.model.src_embed.weight.grad is None  # the shared model is never touched
    a, b = results
    assert a.token == b.token
    np.testing.assert_allclose(a.ig_src, b.ig_src, atol=1e-5)
    np.testing.assert_allclose(a.ig_tgt, b.ig_tgt, atol=1e-5)
    assert torch.isfinite(torch.tensor(a.delta))
