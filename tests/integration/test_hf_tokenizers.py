"""A folder's tokenizer on each side reads text as transformers does.

The source side is ``tok(text)``; the target side is ``tok(text_target=text)`` (Marian's
``target.spm``, not the source model). transformers is the oracle; tokenizers are trained
here from a few sentences (nothing is downloaded).
"""

from __future__ import annotations

import pytest

import attnviz

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from tests import hf_families  # noqa: E402  (after the skips)

TOKENIZED = hf_families.TOKENIZED
TEXTS = hf_families.CORPUS[:3] + hf_families.TARGET_CORPUS[:3] + ["die Katze sass im Park"]


@pytest.mark.parametrize("family", TOKENIZED)
def test_each_side_tokenizes_as_transformers(tmp_path, family):
    tok, folder = hf_families.tokenized_folder(tmp_path, family)
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.tgt_tokenizer.side == "target" and ckpt.src_tokenizer.side == "source"
    for text in TEXTS:
        assert ckpt.src_tokenizer.encode(text).ids == tok(text).input_ids
        target = tok(text_target=text).input_ids
        enc = ckpt.tgt_tokenizer.encode(text)
        assert enc.ids == target, text
        assert enc.pieces == [ckpt.tgt_tokenizer.token(i) for i in target]
        plain = tok(text_target=text, add_special_tokens=False).input_ids
        assert len(ckpt.tgt_tokenizer.split(text)) == len(plain)  # without <s>, </s>
    if family == "marian":  # the two sides differ here: target.spm is its own model
        german = hf_families.TARGET_CORPUS[0]
        assert len(ckpt.tgt_tokenizer.encode(german).ids) < len(
            ckpt.src_tokenizer.encode(german).ids
        )
