"""A target text becomes ids in one place: the mask lab, alignment, a reference's score and
teacher-forced batches see exactly ``tok(text_target=...)`` (one ``</s>``, never two, where a
Hugging Face target tokenizer adds it itself)."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.analysis import masking
from attnviz.data import make_batch, with_eos
from attnviz.decode.scoring import target_ids

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from tests import hf_families  # noqa: E402  (after the skips)

TEXTS = hf_families.TARGET_CORPUS[:2]


@pytest.mark.parametrize("family", hf_families.TOKENIZED)
def test_every_consumer_sees_the_tokenizers_target_ids(tmp_path, family):
    tok, folder = hf_families.tokenized_folder(tmp_path, family)
    ckpt = attnviz.load_checkpoint(folder)
    cfg = ckpt.config
    for text in TEXTS:
        expected = tok(text_target=text).input_ids
        assert expected[-1] == cfg.eos_id and expected.count(cfg.eos_id) == 1
        assert target_ids(ckpt, text) == expected  # Reference scoring
        assert ckpt.score(text, text).ids == expected
        batch = make_batch([[5, 6]], [ckpt.tgt_tokenizer.encode(text).ids], cfg)  # alignment
        assert batch.tgt_out[0].tolist() == expected
        assert batch.tgt_in[0].tolist() == [cfg.bos_id, *expected[:-1]]
    lab = masking.causal_experiment(ckpt, TEXTS, targets=TEXTS)  # the mask lab
    assert lab.target_ids == [tok(text_target=t).input_ids for t in TEXTS]


def test_with_eos_appends_only_where_missing():
    assert with_eos([4, 5], 2) == [4, 5, 2]
    assert with_eos([4, 2], 2) == [4, 2]
    assert with_eos([], 2) == [2]
    cfg = attnviz.ModelConfig(src_vocab_size=9, tgt_vocab_size=9)
    rows = make_batch([[3], [3]], [[4, 5], [4, cfg.eos_id]], cfg).tgt_out
    assert rows.tolist() == [[4, 5, cfg.eos_id], [4, cfg.eos_id, cfg.pad_id]]
    assert torch.equal(rows, make_batch([[3], [3]], [[4, 5, 2], [4]], cfg).tgt_out)
