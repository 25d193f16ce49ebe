"""The mask lab on a decoder-only model: the prompt and the reference are one sequence, the
causal mask switched off lets every position read the tokens after it (what it should
predict), and the weights shown are the ones the model used in that run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import mask_lab
from attnviz.checkpoint import save_checkpoint
from attnviz.core.errors import InputError
from attnviz.core.record import DropMask
from attnviz.data.batch import Prompt
from attnviz.data.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    tok = Tokenizer("char", [*"abcdefghijklmnopqrstuvwxyz", "<sep>"])
    cfg = attnviz.ModelConfig(len(tok), len(tok), d_model=32, n_heads=2, d_ff=64, dropout=0.0,
                              arch="decoder-only", n_encoder_layers=0, max_len=64)  # fmt: skip
    torch.manual_seed(0)
    model = attnviz.Transformer(cfg).eval()
    prompt = Prompt(tok.bos_id, tok.tokens.index("<sep>"))
    out = tmp_path_factory.mktemp("gpt") / "reverse-gpt"
    save_checkpoint(out, model, tok, tok, {"task": "reverse", "prompt": prompt.to_dict()})
    return attnviz.load_checkpoint(out)


def test_the_sequence_is_the_prompt_then_the_reference(gpt):
    lab = mask_lab(gpt, "abc")
    keys, queries = lab.labels("decoder_self")
    assert keys == queries
    assert keys[:8] == ["<bos>", "a", "b", "c", "<sep>", "c", "b", "a"]
    assert lab.experiment.targets[0] == "cba" and lab.experiment.reference == "task"
    w, blocked = lab.view("before", "decoder_self", 0)
    upper = np.triu_indices(8, 1)
    assert w.shape[1:] == blocked.shape and bool(blocked[:8, :8][upper].all())
    assert np.allclose(np.triu(w[:, :8, :8], 1), 0)


def test_causal_off_lets_each_position_read_the_answer_and_shows_the_weights_used(gpt):
    lab = mask_lab(gpt, "abc", causal_off=True)
    w, blocked = lab.view("after", "decoder_self", 1)
    assert not blocked[:8, :8].any()
    assert float(np.triu(w[:, :8, :8], 1).sum()) > 0.5  # weight on later positions
    # the weights shown are the ones of a pass of the model with its causal mask dropped
    ids = torch.tensor([gpt.encode_source("abc").ids + gpt.tgt_tokenizer.encode("cba").ids])
    with torch.no_grad(), attnviz.record(gpt.model, [DropMask("causal")]) as trace:
        gpt.model(ids)
    ref = trace.numpy("decoder_self", 1)[0]
    assert np.allclose(w[:, :8, :8], ref, atol=1e-6)
    assert lab.experiment.after.probs.shape[:2] == lab.experiment.before.probs.shape[:2]


def test_blocking_prompt_tokens_is_refused_in_one_line(gpt):
    with pytest.raises(InputError, match="decoder-only model's mask lab"):
        mask_lab(gpt, "abc", block=[1])


def test_reference_scoring_reads_the_prompt_then_scores_the_continuation(gpt):
    scored = gpt.score("abc", "cba")
    assert scored.tokens == ["c", "b", "a", "<eos>"]
    ids = gpt.encode_source("abc").ids + scored.ids  # <bos> a b c <sep> c b a <eos>
    with torch.no_grad():
        probs = gpt.model(torch.tensor([ids[:-1]]))[0].softmax(-1)  # [T, V]
    start = len(gpt.encode_source("abc").ids) - 1
    want = [float(probs[start + i, t]) for i, t in enumerate(scored.ids)]
    assert scored.probs == pytest.approx(want, abs=1e-6)
    assert {k for k, _ in scored.trace.keys()} == {"decoder_self"}
