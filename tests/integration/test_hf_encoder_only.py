"""Encoder-only Hugging Face folders with a masked-LM head (BERT, RoBERTa, DistilBERT) in
attnviz's own model, checked against transformers: logits of the head and every attention
weight, on a padded batch with token types where the family has them."""

from __future__ import annotations

import json

import pytest
import torch

import attnviz
from attnviz.core.errors import InteropError
from tests import hf_families

pytest.importorskip("transformers")

FAMILIES = list(hf_families.ENCODER_ONLY)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = {}
    for family in FAMILIES:
        model = hf_families.build_one_stack(family)
        folder = tmp_path_factory.mktemp(family)
        model.save_pretrained(folder, safe_serialization=True)
        out[family] = (model, folder)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_masked_lm_logits_and_every_attention_weight_match_transformers(folders, family):
    hf_model, folder = folders[family]
    model = attnviz.load_checkpoint(folder).model
    cfg = model.config
    assert cfg.arch == "encoder-only" and model.decoder is None
    ids = torch.randint(3, 58, (2, 9), generator=torch.Generator().manual_seed(0))
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, 6:] = False
    ids[~real] = cfg.pad_id
    types = {}
    if cfg.type_vocab_size > 1:
        segment = torch.zeros_like(ids)
        segment[:, 5:] = 1
        types = dict(token_type_ids=segment)
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=real.long(), output_attentions=True, **types)
        with attnviz.record(model) as trace:
            ours = model(ids, pad_mask=~real, **types)
    diff = (ours - ref.logits).abs()[real].max().item()
    assert diff <= 1e-4, f"{family}: max |Δlogits| = {diff:.2e}"
    assert {k for k, _ in trace.keys()} == {"encoder_self"}
    for layer, theirs in enumerate(ref.attentions):
        w = trace.weights("encoder_self", layer)
        diff = (w - theirs).abs().amax(dim=(1, 3))[real].max().item()
        assert diff <= 2e-5, f"{family} layer {layer}: {diff:.2e}"
        assert bool((w[:, :, :, 6:][1] == 0).all())  # padded keys get no weight


@pytest.mark.parametrize(
    "change, words",
    [
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
        ({"is_decoder": True}, "is_decoder"),
    ],
)
def test_unsupported_bert_variants_are_refused_by_name(folders, tmp_path, change, words):
    import shutil

    shutil.copytree(folders["bert"][1], tmp_path / "f", dirs_exist_ok=True)
    config = json.loads((tmp_path / "f" / "config.json").read_text())
    (tmp_path / "f" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(InteropError, match=words):
        attnviz.load_checkpoint(tmp_path / "f")


def test_an_encoder_only_folder_is_not_refused_for_an_end_id_it_never_uses(tmp_path):
    """A BERT whose tokenizer names ``[SEP]`` as its end token and whose config names a pad id
    of 2 and no end id opens: an encoder-only model generates nothing (it was refused with
    "config.json's eos_token_id 2 is not the tokenizer's end token")."""
    from helpers import tiny_bert

    _, tok = tiny_bert(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["pad_token_id"] = 2
    config.pop("eos_token_id", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    tok_config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    tok_config["eos_token"] = "[SEP]"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tok_config))
    ckpt = attnviz.load_checkpoint(tmp_path)
    assert ckpt.src_tokenizer.tokenizer_eos_id == tok.convert_tokens_to_ids("[SEP]")
    enc = ckpt.encode_source("the cat sat")
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        ckpt.model(torch.tensor([enc.ids]))
    assert trace.weights("encoder_self", 0).shape[-1] == len(enc.ids)
