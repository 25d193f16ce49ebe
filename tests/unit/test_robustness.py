"""Odd input never crashes: random unicode through tokenizers, predict and the app session."""

from __future__ import annotations

import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnviz

ODD = [
    "",
    "   ",
    "hello 👋 world",
    "e\u0301te\u0301",  # combining accents
    "שלום",  # right to left
    "a" * 300,  # longer than any model takes
    "x" * 40 + " supercalifragilisticexpialidocious" * 3,
    "the dog sees a cat",  # words into a character model
    "\x00\x1b[31m",
]
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def ckpts(models_dir):
    return [attnviz.load_checkpoint(models_dir / n) for n in ("reverse", "translate")]


@given(text=st.text(max_size=60))
@SETTINGS
def test_random_unicode_through_predict_and_tokenizers(ckpts, text):
    for ckpt in ckpts:
        enc = ckpt.src_tokenizer.encode(text)
        assert len(enc.ids) == len(enc.pieces)
        tok = ckpt.src_tokenizer
        shown = [p if p not in enc.unknown else tok.token(tok.unk_id) for p in enc.pieces]
        assert tok.decode(enc.ids) == ("" if tok.kind == "char" else " ").join(shown)
        try:
            out = ckpt.predict_details(text)
        except attnviz.AttnvizError:
            continue  # empty or too long: a message, not a crash
        assert isinstance(out.text, str) and set(out.source.unknown) <= set(enc.pieces)


@pytest.mark.parametrize("text", ODD)
def test_odd_inputs_give_a_message_or_a_result(ckpts, text):
    for ckpt in ckpts:
        try:
            out = ckpt.predict_details(text)
        except attnviz.InputError as exc:
            assert "\n" not in str(exc)
            if text.strip():
                assert "at most" in str(exc)  # only length can refuse non-empty text
            continue
        assert isinstance(out.text, str)


def test_nothing_unpickles_anywhere_in_the_package():
    root = pathlib.Path(attnviz.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"torch\.load\(|pickle\.loads?\(|allow_pickle\s*=\s*True", text), path
