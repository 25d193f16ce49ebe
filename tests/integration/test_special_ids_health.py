"""The health check on vocabularies with permuted special ids matches the base model's."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz import analysis
from attnviz.data.tokenizer import Tokenizer


def _permuted(
    ckpt: attnviz.Checkpoint, perm: list[int], specials: dict, folder
) -> attnviz.Checkpoint:
    """A copy of ``ckpt`` whose new id k is old id ``perm[k]`` on both sides."""
    cfg = ckpt.config
    assert cfg.src_vocab_size == cfg.tgt_vocab_size == len(perm)
    ids = {f"{role}_id": i for role, i in specials.items()}
    new_cfg = attnviz.ModelConfig.from_dict({**cfg.to_dict(), **ids})
    model = attnviz.Transformer(new_cfg).eval()
    state = {k: v.clone() for k, v in ckpt.model.state_dict().items()}
    index = torch.tensor(perm)
    for name in ("src_embed.weight", "tgt_embed.weight", "generator.weight", "generator.bias"):
        state[name] = state[name][index]
    model.load_state_dict(state)
    toks = [
        Tokenizer.from_vocab(tok.kind, [tok.tokens[old] for old in perm], specials)
        for tok in (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    ]
    attnviz.save_checkpoint(folder, model, *toks, dict(ckpt.meta))  # task, history, ...
    return attnviz.load_checkpoint(folder)


@pytest.fixture(scope="module")
def base(models_dir):
    return attnviz.load_checkpoint(models_dir / "reverse")


@pytest.fixture(scope="module", params=["tutorial", "start_is_pad"])
def case(request, base, tmp_path_factory):
    """(name, permuted checkpoint, perm) with perm[new id] = old id."""
    letters = list(range(4, base.config.tgt_vocab_size))[::-1]
    if request.param == "tutorial":
        perm = [3, 0, 1, 2, *letters]  # UNK 0, PAD 1, BOS 2, EOS 3
        specials = {"pad": 1, "bos": 2, "eos": 3, "unk": 0}
    else:
        perm = [1, 2, 3, 0, *letters]  # start(=pad) 0, EOS 1, UNK 2; old PAD: a spare token
        specials = {"pad": 0, "bos": 0, "eos": 1, "unk": 2}
    folder = tmp_path_factory.mktemp(request.param)
    return request.param, _permuted(base, perm, specials, folder), perm


def test_health_check_matches(base, case):
    _, ckpt, _ = case
    texts = ["helloworld", "abc", "qwertyuiopasdf", "zz"]
    ra = analysis.check(base, texts, ablation_sample=4)
    rb = analysis.check(ckpt, texts, ablation_sample=4)
    assert [(f.level, f.message) for f in rb.findings] == [
        (f.level, f.message) for f in ra.findings
    ]
