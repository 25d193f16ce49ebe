"""CTranslate2 text folders as they are shipped with their SentencePiece models, held to
``ctranslate2.Translator`` on the same pieces.

An Argos Translate package (``sentencepiece.model`` beside ``model/``) and an OpenNMT folder
(``source.spm`` / ``target.spm``, or the names its config gives): text is encoded to pieces by
the model, looked up in the vocabulary, and the output pieces are decoded by the model, as
those programs do. Before, such a folder read raw text through its vocabulary ("My old bird
watches the garden." was six ``<unk>``, translated anyway) and joined output pieces with
spaces ("▁neben ▁neben"). Without a SentencePiece model, text that is mostly unknown is
refused in one line saying what to add.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import attnviz
from attnviz.core.errors import InputError

ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")
from tests.ct2_specs import spec_folder  # noqa: E402

pytestmark = pytest.mark.integration
MAX_LEN = 16
ENGLISH = [
    "My old bird watches the garden.",
    "The cat sat on the mat.",
    "A dog ran in the park.",
    "We read a book in the garden.",
    "The old man watches the birds.",
    "Birds sing in the morning.",
]
GERMAN = [
    "Mein alter Vogel beobachtet den Garten.",
    "Die Katze sass auf der Matte.",
    "Ein Hund lief im Park.",
    "Wir lesen ein Buch im Garten.",
    "Der alte Mann beobachtet die Voegel.",
    "Voegel singen am Morgen.",
]
TEXTS = [*ENGLISH[:4], "the garden watches a bird", "old cats read"]
SPECIALS = ["<unk>", "<blank>", "<s>", "</s>"]  # ids 0-3, as OpenNMT's vocabularies have them


def _train(sentences: list[str], path: Path, size: int) -> Path:
    """A tiny unigram SentencePiece model at ``path``."""
    prefix = path.with_suffix("")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 4), model_prefix=str(prefix), vocab_size=size,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    prefix.with_suffix(".model").rename(path)
    return path


def _vocabulary(model: Path) -> list[str]:
    """The CTranslate2 vocabulary built from a SentencePiece model (OpenNMT's order: the
    specials first, then the model's pieces)."""
    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    return SPECIALS + [p for p in pieces if p not in SPECIALS]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """{"argos": the package folder, "opennmt": the folder, "models": (source, target)}."""
    root = tmp_path_factory.mktemp("ct2_spm")
    english = _train(ENGLISH, root / "en.model", 60)
    german = _train(GERMAN, root / "de.model", 70)
    both = _train(ENGLISH + GERMAN, root / "both.model", 90)
    argos = root / "argos"
    shared = _vocabulary(both)
    spec_folder(argos / "model", src_vocab=shared, tgt_vocab=shared, seed=2)
    shutil.copy(both, argos / "sentencepiece.model")
    onmt = spec_folder(
        root / "onmt", src_vocab=_vocabulary(english), tgt_vocab=_vocabulary(german), seed=3
    )
    shutil.copy(english, onmt / "source.spm")
    shutil.copy(german, onmt / "target.spm")
    return {"argos": argos, "opennmt": onmt, "models": {"argos": (both, both),
            "opennmt": (english, german)}}  # fmt: skip


def _held_to_ctranslate2(folder: Path, models: tuple[Path, Path]) -> set[str]:
    """Ids and outputs (greedy and beam 4) equal the Translator's on the model's pieces."""
    ckpt = attnviz.load_checkpoint(folder)
    model_dir = folder / "model" if (folder / "model").is_dir() else folder
    translator = ctranslate2.Translator(str(model_dir))
    source, target = (spm.SentencePieceProcessor(model_file=str(m)) for m in models)
    name = next(n for n in ("shared_vocabulary.json", "source_vocabulary.json")
                if (model_dir / n).is_file())  # fmt: skip
    vocab = json.loads((model_dir / name).read_text())
    outputs = set()
    for text in TEXTS:
        pieces = source.encode(text, out_type=str)
        enc = ckpt.encode_source(text)
        assert enc.ids == [vocab.index(p) if p in vocab else 0 for p in pieces]
        assert enc.unknown == [] and enc.ids.count(ckpt.config.unk_id) == 0
        for beam in (1, 4):
            out = translator.translate_batch(
                [pieces], beam_size=beam, max_decoding_length=MAX_LEN, return_end_token=False
            )[0].hypotheses[0]
            ours = ckpt.predict(text, max_len=MAX_LEN, num_beams=beam)
            assert ours == target.decode(out), (text, beam, out)
            assert "▁" not in ours  # pieces decoded, not joined
            outputs.add(ours)
    return outputs


def test_an_argos_package_reads_and_writes_text(layouts):
    outputs = _held_to_ctranslate2(layouts["argos"] / "model", layouts["models"]["argos"])
    assert len(outputs) > 2
    ckpt = attnviz.load_checkpoint(layouts["argos"] / "model")
    assert ckpt.src_tokenizer.kind == "ct2-sentencepiece" and ckpt.meta["tokenizer_missing"] is None
    assert ckpt.meta["sentencepiece"] == [str(layouts["argos"] / "sentencepiece.model")]
    # the package folder itself opens its model/
    package = attnviz.load_checkpoint(layouts["argos"])
    assert package.predict(TEXTS[0], max_len=MAX_LEN) == ckpt.predict(TEXTS[0], max_len=MAX_LEN)


def test_an_opennmt_folder_reads_with_source_and_target_spm(layouts):
    outputs = _held_to_ctranslate2(layouts["opennmt"], layouts["models"]["opennmt"])
    assert len(outputs) > 2
    ckpt = attnviz.load_checkpoint(layouts["opennmt"])
    assert " " in ckpt.tgt_tokenizer.decode(ckpt.tgt_tokenizer.encode(GERMAN[1]).ids)
    assert ckpt.tgt_tokenizer.decode(ckpt.tgt_tokenizer.encode(GERMAN[1]).ids) == GERMAN[1]


def test_subword_models_named_in_the_config(layouts, tmp_path):
    folder = Path(shutil.copytree(layouts["opennmt"], tmp_path / "named"))
    (folder / "source.spm").rename(folder / "en.model")
    (folder / "target.spm").rename(folder.parent / "de.model")  # the parent folder counts too
    config = json.loads((folder / "config.json").read_text())
    config |= {"src_subword_model": "/elsewhere/en.model", "tgt_subword_model": "de.model"}
    (folder / "config.json").write_text(json.dumps(config))
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.meta["sentencepiece"] == [str(folder / "en.model"), str(folder.parent / "de.model")]
    _held_to_ctranslate2(folder, (folder / "en.model", folder.parent / "de.model"))


def test_text_without_a_subword_model_is_refused_when_mostly_unknown(layouts, tmp_path):
    folder = Path(shutil.copytree(layouts["argos"] / "model", tmp_path / "bare"))
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ct2-vocabulary"
    with pytest.raises(InputError, match="put the sentencepiece.model") as err:
        ckpt.predict("My old bird watches the garden.")
    assert "\n" not in str(err.value) and "6 of 6 tokens" in str(err.value)
    pieces = spm.SentencePieceProcessor(
        model_file=str(layouts["argos"] / "sentencepiece.model")
    ).encode(ENGLISH[0], out_type=str)
    assert ckpt.predict(" ".join(pieces), max_len=MAX_LEN)  # typed pieces still work


def test_a_sentencepiece_model_that_is_not_the_models_is_refused_on_use(layouts, tmp_path):
    folder = Path(shutil.copytree(layouts["opennmt"], tmp_path / "wrong"))
    russian = ["Мой старый попугай смотрит на сад.", "Кошка сидит на ковре."]
    _train(russian, tmp_path / "ru.model", 40)
    shutil.copy(tmp_path / "ru.model", folder / "source.spm")  # not the English vocabulary's
    ckpt = attnviz.load_checkpoint(folder)
    with pytest.raises(InputError, match="is it the sentencepiece model this model was trained"):
        ckpt.predict(russian[0])


def test_a_damaged_sentencepiece_model_falls_back_to_tokens(layouts, tmp_path):
    folder = Path(shutil.copytree(layouts["opennmt"], tmp_path / "damaged"))
    (folder / "source.spm").write_bytes(b"\x00not a model" * 10)
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ct2-vocabulary"
    assert "source.spm did not load" in ckpt.meta["tokenizer_missing"]
