"""Attribution on a model whose source and target share one embedding table (most imported
models): the private copy is untied, so the numbers equal those of an untied twin."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_model

import attnviz
from attnviz import analysis
from attnviz.data.tokenizer import Tokenizer


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


def test_why_this_token_and_not_that_one(reverse_ckpt):
    """Contrastive IG explains log p(chosen) - log p(versus): its value equals a direct forward
    pass, and swapping the two tokens negates every score (IG is linear in the function)."""
    text, step = "helloworld", 2
    tokens = reverse_ckpt.predict_details(text).tokens
    chosen = tokens[step]
    versus = reverse_ckpt.tgt_tokenizer.encode("q").ids[0]
    a = analysis.attribute(reverse_ckpt, text, step, n_steps=8, versus=versus)
    src = torch.tensor([reverse_ckpt.encode_source(text).ids])
    tgt = torch.tensor([[reverse_ckpt.config.bos_id, *tokens[:step]]])
    with torch.no_grad():
        logp = reverse_ckpt.model(src, tgt)[0, -1].float().log_softmax(-1)
    assert a.contrast == pytest.approx(float(logp[chosen] - logp[versus]), abs=1e-4)
    assert a.versus == "q" and a.versus_prob == pytest.approx(float(logp[versus].exp()), abs=1e-6)
    assert a.prob == pytest.approx(float(logp[chosen].exp()), abs=1e-6)
    swapped = [*tokens[:step], versus]
    b = analysis.attribute(reverse_ckpt, text, step, tokens=swapped, n_steps=8, versus=chosen)
    assert np.allclose(a.ig_src, -b.ig_src, atol=1e-4)
    assert np.allclose(a.gxi_src, -b.gxi_src, atol=1e-4)
    with pytest.raises(attnviz.InputError, match="other than the explained"):
        analysis.attribute(reverse_ckpt, text, step, versus=chosen)
