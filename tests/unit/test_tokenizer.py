"""Tokenizers: fixed specials, round trips, unknown pieces reported, safe (de)serialisation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.core.errors import InputError
from attnviz.data.subword import SubwordTokenizer
from attnviz.data.tokenizer import (
    DEFAULT_IDS,
    SPECIALS,
    SUBWORD_KINDS,
    TOKENIZER_KINDS,
    WORD_START,
    Tokenizer,
    train_tokenizer,
)


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
    with pytest.raises(InputError, match="specials must name exactly"):
        Tokenizer.from_dict({"kind": "char", "tokens": ["<pad>", "a"], "specials": "pad"})


# -- subword tokenizers (BPE, Unigram) ------------------------------------------------------
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Grüße aus Köln: 3 Äpfel, 12 Birnen!",
    "Ça va ? Très bien, merci.",
    "numbers 0123456789 and (brackets) [too]",
    "she said: \"it's 5 o'clock\" - then left; done?",
    "naïve café résumé façade",
] * 20
ORDINARY = st.text(
    alphabet=st.sampled_from(sorted(set("".join(SENTENCES)))), min_size=0, max_size=60
)
_TRAINED: dict = {}


def _trained(kind: str, byte_fallback: bool):
    key = (kind, byte_fallback)
    if key not in _TRAINED:
        vocab = 400 if byte_fallback else 150
        _TRAINED[key] = train_tokenizer(
            kind, SENTENCES, vocab_size=vocab, byte_fallback=byte_fallback
        )
    return _TRAINED[key]


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
@settings(max_examples=150, deadline=None)
@given(text=ORDINARY)
def test_subword_round_trip_on_ordinary_text(kind, text):
    """Spaces (leading, repeated, trailing), punctuation, accents, digits come back exactly."""
    tok = _trained(kind, False)
    enc = tok.encode(text)
    assert not enc.unknown
    assert tok.decode(enc.ids) == text
    assert tok.decode([tok.bos_id, *enc.ids, tok.eos_id, *enc.ids]) == text


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
@settings(max_examples=150, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_subword_with_byte_fallback_round_trips_any_unicode(kind, text):
    tok = _trained(kind, True)
    enc = tok.encode(text)
    assert tok.unk_id not in enc.ids and not enc.unknown
    assert tok.decode(enc.ids) == text
    assert not set(enc.ids) & {tok.pad_id, tok.bos_id, tok.eos_id}


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
def test_subword_pieces_mark_word_starts_and_unseen_text_is_reported(kind):
    tok = _trained(kind, False)
    enc = tok.encode("the fox")
    assert enc.pieces[0].startswith(WORD_START) and "".join(enc.pieces) == "▁the▁fox"
    assert [tok.label(i) for i in enc.ids] == enc.pieces
    odd = tok.encode("fox 漢字")
    assert odd.unknown and set(odd.unknown) <= {"漢", "字", "漢字"}
    assert tok.unk_id in odd.ids
    assert tok.decode(odd.ids) == "fox <unk>" or tok.decode(odd.ids) == "fox <unk><unk>"


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
def test_text_spelling_a_special_token_never_becomes_one(kind):
    tok = train_tokenizer(kind, [*SENTENCES, "x <pad> <bos> <eos> <unk> y"], vocab_size=200)
    for text in ("<eos>", "a<pad>b", "<bos> <unk>"):
        ids = tok.encode(text).ids
        assert not set(ids) & {tok.pad_id, tok.bos_id, tok.eos_id}, (text, ids)
        flat, _ = tok.encode_flat([text])
        assert flat.tolist() == ids


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
def test_subword_specials_keep_the_ids_the_config_names(kind):
    tok = _trained(kind, False)
    assert tok.tokens[:4] == list(SPECIALS) and tok.specials == DEFAULT_IDS
    t5 = train_tokenizer(
        kind, SENTENCES, vocab_size=120, specials={"pad": 0, "bos": 0, "eos": 1, "unk": 2}
    )
    assert t5.tokens[:3] == ["<pad>", "<eos>", "<unk>"] and t5.unk_id == 2
    assert t5.decode([0, *t5.encode("the dog").ids, 1, 5]) == "the dog"
    with pytest.raises(InputError, match="special tokens first"):
        train_tokenizer(kind, SENTENCES, specials={"pad": 1, "bos": 2, "eos": 3, "unk": 5})


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
@pytest.mark.parametrize("byte_fallback", [False, True])
def test_subword_vocab_size_is_respected_and_saves_as_json(kind, byte_fallback):
    tok = _trained(kind, byte_fallback)
    assert len(tok) <= (400 if byte_fallback else 150)
    assert tok.byte_fallback is byte_fallback
    assert ("<0xE2>" in tok.tokens) is byte_fallback
    saved = json.loads(json.dumps(tok.to_dict()))  # plain JSON, nothing pickled
    again = Tokenizer.from_dict(saved)
    assert isinstance(again, SubwordTokenizer) and again == tok
    text = "Grüße, 12 Äpfel!"
    assert again.encode(text) == tok.encode(text)


def test_shared_vocabulary_is_one_tokenizer_over_both_sides():
    src, tgt = ["the dog sees a cat"] * 10, ["der Hund sieht eine Katze"] * 10
    tok = train_tokenizer("bpe", src + tgt, vocab_size=80)
    for text in (src[0], tgt[0]):
        assert not tok.encode(text).unknown and tok.decode(tok.encode(text).ids) == text


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"kind": "bpe", "hf": {"model": {"type": "Unigram"}}}, "holds a Unigram model"),
        (
            {"kind": "unigram", "hf": {"model": {"type": "Unigram", "vocab": 3}}},
            "field vocab is not attnviz's own",
        ),
        ({"kind": "bpe", "hf": "json text"}, "tokenizers JSON"),
    ],
)
def test_bad_saved_subword_tokenizers_are_refused_clearly(bad, match):
    with pytest.raises(InputError, match=match):
        Tokenizer.from_dict(bad)


def test_a_saved_token_list_must_match_the_model():
    data = _trained("bpe", False).to_dict()
    data["tokens"] = data["tokens"][:-1]
    with pytest.raises(InputError, match="differs"):
        Tokenizer.from_dict(data)


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_encode_flat_equals_encode(kind):
    tok = train_tokenizer(kind, SENTENCES, vocab_size=None if kind in ("char", "word") else 150)
    texts = [*SENTENCES[:6], "", "unseen Wörter ☃"]
    ids, lengths = tok.encode_flat(texts)
    rows = [tok.encode(t).ids for t in texts]
    assert ids.dtype == np.int32 and lengths.tolist() == [len(r) for r in rows]
    assert ids.tolist() == [i for r in rows for i in r]


def test_char_and_word_training_keep_the_most_frequent_pieces():
    tok = train_tokenizer("word", ["a a a b b c", "a b d"], vocab_size=6)
    assert tok.tokens[4:] == ["a", "b"] and tok.encode("c").unknown == ["c"]
    assert train_tokenizer("char", ["abc"]).tokens[4:] == ["a", "b", "c"]
    assert train_tokenizer("word", ["x <eos> y"]).encode("<eos>").ids == [DEFAULT_IDS["unk"]]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="sentencepiece", texts=["a"]), "kind must be one of"),
        (dict(kind="word", texts=["a"], byte_fallback=True), "byte fallback needs"),
        (dict(kind="word", texts=[]), "no text"),
        (dict(kind="bpe", texts=[]), "no text"),
        (dict(kind="unigram", texts=["", ""]), "no text"),
        (dict(kind="bpe", texts=["a"], vocab_size=100, byte_fallback=True), "too small"),
        (dict(kind="char", texts=["a"], vocab_size=4), "no room"),
        (dict(kind="bpe", texts=["a"], vocab_size=0), "positive integer"),
    ],
)
def test_bad_training_requests_are_refused(kwargs, match):
    with pytest.raises(InputError, match=match):
        train_tokenizer(**kwargs)


def test_a_checkpoint_with_subword_tokenizers_saves_and_loads_back(tmp_path):
    import attnviz

    src = train_tokenizer("bpe", SENTENCES, vocab_size=150)
    tgt = train_tokenizer("unigram", SENTENCES, vocab_size=400, byte_fallback=True)
    cfg = attnviz.ModelConfig(len(src), len(tgt), d_model=16, n_heads=2, n_encoder_layers=1,
                              n_decoder_layers=1, d_ff=32, max_len=64)  # fmt: skip
    attnviz.save_checkpoint(tmp_path / "m", attnviz.Transformer(cfg), src, tgt, {"task": None})
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    assert meta["src_tokenizer"]["kind"] == "bpe" and meta["tgt_tokenizer"]["hf"]["model"]
    assert not list((tmp_path / "m").glob("*.p*kl*"))
    ckpt = attnviz.load_checkpoint(tmp_path / "m")
    assert ckpt.src_tokenizer == src and ckpt.tgt_tokenizer == tgt
    pred = ckpt.predict_details("the lazy dog")
    assert pred.source.pieces[0] == "▁the" and pred.text == ckpt.predict("the lazy dog")


@pytest.mark.parametrize("name", ["reverse", "copy", "sort", "translate"])
def test_shipped_checkpoints_keep_their_char_and_word_tokenizers(name):
    import attnviz

    ckpt = attnviz.load_checkpoint(f"models/{name}")
    assert type(ckpt.src_tokenizer) is Tokenizer and ckpt.src_tokenizer.kind in ("char", "word")
    data = ckpt.src_tokenizer.to_dict()
    assert set(data) == {"kind", "tokens", "specials"}


@pytest.mark.parametrize("kind", SUBWORD_KINDS)
@pytest.mark.parametrize("byte_fallback", [False, True])
@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=25), max_size=8)
)
def test_corpus_encoding_by_distinct_words_equals_encoding_each_text(kind, byte_fallback, texts):
    """encode_flat encodes each space-separated word once; the ids must not change."""
    tok = _trained(kind, byte_fallback)
    texts = [*texts, *(t.replace("a", " ") for t in texts), "  ", " x  y "]
    ids, lengths = tok.encode_flat(texts)
    rows = [tok.encode(t).ids for t in texts]
    assert lengths.tolist() == [len(r) for r in rows]
    assert ids.tolist() == [i for r in rows for i in r]
