"""Tokenizers: fixed specials, round trips, unknown pieces reported, safe (de)serialisation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnviz.errors import InputError
from attnviz.tokenizer import DEFAULT_IDS, SPECIALS, Tokenizer


def test_specials_come_first_and_ids_follow_symbol_order():
    tok = Tokenizer("char", list("abc"))
    assert tok.tokens[:4] == list(SPECIALS)
    assert DEFAULT_IDS == {"pad": 0, "bos": 1, "eos": 2, "unk": 3} == tok.specials
    assert tok.encode("cab").ids == [6, 4, 5]
    assert len(tok) == 7


@given(st.text(alphabet="abcdefxyz ", max_size=30))
def test_char_round_trip_with_unknowns_reported(text):
    tok = Tokenizer("char", list("abcdef "))
    enc = tok.encode(text)
    assert enc.pieces == list(text)
    assert len(enc.ids) == len(text)
    assert enc.unknown == list(dict.fromkeys(c for c in text if c in "xyz"))
    shown = tok.decode(enc.ids)
    assert shown == "".join("<unk>" if c in "xyz" else c for c in text)


def test_word_level_splits_on_whitespace_and_reports_unknown_words():
    tok = Tokenizer.from_texts("word", ["the dog sees", "a cat"])
    enc = tok.encode("  the zebra sees  the yak ")
    assert enc.pieces == ["the", "zebra", "sees", "the", "yak"]
    assert enc.unknown == ["zebra", "yak"]
    assert enc.ids[1] == tok.unk_id and enc.ids[4] == tok.unk_id
    assert (
        tok.decode([tok.bos_id, *tok.encode("a cat").ids, tok.eos_id, *tok.encode("dog").ids])
        == "a cat"
    )
    assert (
        tok.decode([*tok.encode("a cat").ids, tok.eos_id, tok.pad_id], stop_at_eos=False)
        == "a cat <eos>"
    )


def test_dict_round_trip_and_equality():
    tok = Tokenizer("word", ["x", "y"])
    again = Tokenizer.from_dict(tok.to_dict())
    assert again == tok and again.kind == "word"


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"kind": "char", "tokens": ["a", "b"]}, "first tokens"),
        ({"kind": "char"}, "saved as"),
        ("not a dict", "saved as"),
        ({"kind": "sentencepiece", "tokens": list(SPECIALS)}, "kind"),
        ({"kind": "bpe", "tokens": list(SPECIALS)}, "tokenizers JSON"),
        ({"kind": "char", "tokens": [*SPECIALS, "ab"]}, "invalid char"),
        ({"kind": "char", "tokens": [*SPECIALS, "a", "a"]}, "unique"),
        ({"kind": "word", "tokens": [*SPECIALS, 3]}, "strings"),
    ],
)
def test_bad_saved_tokenizers_are_refused_clearly(bad, match):
    with pytest.raises(InputError, match=match):
        Tokenizer.from_dict(bad)


def test_special_names_cannot_be_symbols():
    with pytest.raises(InputError, match="clash"):
        Tokenizer("word", ["<eos>"])


def test_decode_refuses_ids_outside_the_vocabulary():
    with pytest.raises(InputError, match="outside"):
        Tokenizer("char", ["a"]).decode([99])


def test_special_ids_anywhere_and_a_start_id_equal_to_the_pad_id():
    """The tutorial's layout (UNK 0, PAD 1, BOS 2, EOS 3) and T5's (pad = start = 0, eos 1)."""
    tutorial = Tokenizer("char", list("ab"), {"pad": 1, "bos": 2, "eos": 3, "unk": 0})
    assert tutorial.tokens == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b"]
    assert tutorial.encode("abz").ids == [4, 5, 0] and tutorial.decode([2, 4, 3, 5]) == "a"
    t5 = Tokenizer("word", ["x", "y"], {"pad": 0, "bos": 0, "eos": 1, "unk": 2})
    assert t5.tokens == ["<pad>", "<eos>", "<unk>", "x", "y"]
    assert t5.decode([0, 3, 4, 1, 0]) == "x y"  # the start id is skipped like padding
    assert t5.encode("<pad> x").ids == [2, 3]  # text never turns into a special id
    assert (
        Tokenizer.from_dict(t5.to_dict()) == t5
        and Tokenizer.from_dict(tutorial.to_dict()) == tutorial
    )
    with pytest.raises(InputError, match="end id"):
        Tokenizer("char", ["a"], {"pad": 0, "bos": 1, "eos": 0, "unk": 2})
    with pytest.raises(InputError, match="exactly"):
        Tokenizer("char", ["a"], {"pad": 0, "bos": 1})
    with pytest.raises(InputError):
        Tokenizer.from_dict({"kind": "char", "tokens": ["<pad>", "a"], "specials": "pad"})
