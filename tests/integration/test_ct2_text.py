"""CTranslate2 ``TransformerSpec`` folders in attnviz, held to ctranslate2 itself.

A tiny random Marian folder converted by ``ctranslate2.converters.TransformersConverter``
(float32, int8, float16), and OpenNMT-py style specs written with ctranslate2's own spec
classes (pre-norm, GELU, separate vocabularies with ``<blank>``, with and without a position
table): greedy and beam-4 outputs equal ``Translator.translate_batch``; log-probs equal
``score_batch``; logits equal the transformers original. Folders attnviz cannot follow are
refused in one line.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.core.errors import AttnvizError, InteropError

ctranslate2 = pytest.importorskip("ctranslate2")
from ctranslate2.specs import common_spec  # noqa: E402

from tests.ct2_specs import SRC_VOCAB, TGT_VOCAB  # noqa: E402
from tests.ct2_specs import spec_folder as _spec_folder  # noqa: E402

MAX_LEN = 20  # decoding length for both engines (CTranslate2's default is 256)


def _translate(translator, tokens: list[str], beam: int) -> str:
    """CTranslate2's best hypothesis with every option that matters set explicitly."""
    out = translator.translate_batch(
        [tokens],
        beam_size=beam,
        max_decoding_length=MAX_LEN,
        length_penalty=1.0,
        patience=1.0,
        num_hypotheses=1,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        disable_unk=False,
        min_decoding_length=0,
        return_end_token=False,
    )
    return " ".join(out[0].hypotheses[0])


# -- a Marian folder converted by ctranslate2 ----------------------------------------------
@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """{"hf": model, "tok": tokenizer, "texts": token strings, "float32"/"int8"/"float16":
    converted folders}. The pad row of the embeddings is zero, as in opus-mt, since
    CTranslate2 starts Marian's decoder from a zero embedding."""
    pytest.importorskip("transformers")
    from tests import hf_families

    root = tmp_path_factory.mktemp("ct2_marian")
    tok = hf_families.marian_tokenizer(root / "tok")
    model = hf_families.build(
        "marian",
        seed=5,
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        decoder_start_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    with torch.no_grad():
        model.model.shared.weight[tok.pad_token_id] = 0
    model.save_pretrained(root / "hf", safe_serialization=True)
    tok.save_pretrained(root / "hf")
    out = {"hf": model, "tok": tok}
    for quantization in ("float32", "int8", "float16"):
        converter = ctranslate2.converters.TransformersConverter(str(root / "hf"))
        out[quantization] = Path(
            converter.convert(str(root / quantization), quantization=quantization)
        )
    sentences = hf_families.CORPUS[:8] + hf_families.TARGET_CORPUS[:2] + ["home", "the cat ran"]
    out["texts"] = [tok.convert_ids_to_tokens(tok(s).input_ids) for s in sentences]
    return out


@pytest.mark.integration
def test_marian_folder_opens_as_our_transformer(marian):
    ckpt = attnviz.load_checkpoint(marian["float32"])
    cfg, tok = ckpt.config, marian["tok"]
    assert ckpt.meta["format"] == "ctranslate2" and ckpt.meta["spec"] == "TransformerSpec"
    assert cfg.positions == "sinusoidal_split" and not cfg.norm_first
    assert cfg.share_embeddings and cfg.tie_output and cfg.activation == "silu"
    # CTranslate2 drops Marian's <pad> and starts from a zero embedding: one row is added back
    assert cfg.tgt_vocab_size == len(tok) and cfg.bos_id == cfg.pad_id == tok.pad_token_id
    assert (cfg.eos_id, cfg.unk_id) == (tok.eos_token_id, tok.unk_token_id)
    assert ckpt.src_tokenizer.token(cfg.pad_id) == "<pad>"


@pytest.mark.integration
def test_marian_logits_equal_transformers(marian):
    """Teacher-forced logits of the converted folder vs the transformers original."""
    ckpt, hf, tok = attnviz.load_checkpoint(marian["float32"]), marian["hf"], marian["tok"]
    pad = tok.pad_token_id
    worst = 0.0
    for tokens in marian["texts"]:
        ids = tok.convert_tokens_to_ids(tokens)
        src, tgt = torch.tensor([ids]), torch.tensor([[pad, *ids[:-1]]])
        with torch.no_grad():
            theirs = hf(input_ids=src, decoder_input_ids=tgt).logits
            ours = ckpt.model(src, tgt)
        worst = max(worst, (theirs[..., :pad] - ours[..., :pad]).abs().max().item())
        assert (ours[..., pad] < -1000).all()  # the added start token is never a candidate
    assert worst <= 1e-4, worst


@pytest.mark.integration
@pytest.mark.parametrize("beam", [1, 4])
def test_marian_outputs_equal_ctranslate2(marian, beam):
    ckpt = attnviz.load_checkpoint(marian["float32"])
    translator = ctranslate2.Translator(str(marian["float32"]))
    texts = marian["texts"]
    theirs = [_translate(translator, tokens, beam) for tokens in texts]
    ours = [ckpt.predict(" ".join(tokens), max_len=MAX_LEN, num_beams=beam) for tokens in texts]
    assert ours == theirs
    assert len(set(theirs)) > 3  # the inputs give different outputs
    if beam == 1:  # batched greedy decoding gives the same
        joined = [" ".join(t) for t in texts]
        assert attnviz.load_checkpoint(marian["float32"]).predict_batch(joined) == [
            _long(ckpt, translator, t) for t in texts
        ]


def _long(ckpt, translator, tokens):
    """CTranslate2's greedy output at its default length limit (256), within the positions
    the model has (attnviz's default for a CTranslate2 folder)."""
    limit = min(256, ckpt.config.max_len - 1)
    out = translator.translate_batch([tokens], beam_size=1, max_decoding_length=limit)
    return " ".join(out[0].hypotheses[0])


@pytest.mark.integration
def test_marian_log_probs_equal_score_batch(marian):
    ckpt = attnviz.load_checkpoint(marian["float32"])
    translator = ctranslate2.Translator(str(marian["float32"]))
    texts = marian["texts"]
    worst = 0.0
    for source, target in zip(texts, texts[1:] + texts[:1], strict=True):
        theirs = translator.score_batch([source], [target[:-1]])[0].log_probs  # </s> added
        scored = ckpt.score(" ".join(source), " ".join(target[:-1]))
        ours = np.log(scored.probs)
        assert len(ours) == len(theirs)
        worst = max(worst, float(np.abs(ours - np.array(theirs)).max()))
    assert worst <= 1e-4, worst


@pytest.mark.integration
@pytest.mark.parametrize("quantization", ["int8", "float16"])
def test_quantized_marian_loads_dequantized(marian, quantization):
    """int8 weights come back as ``q / scale`` in float32, float16 as float32: the outputs are
    CTranslate2's when it computes in float32 from the same file."""
    ckpt = attnviz.load_checkpoint(marian[quantization])
    stored = {"int8": ["float32", "int8"], "float16": ["float16"]}[quantization]
    assert ckpt.meta["stored_dtypes"] == stored
    assert attnviz.load_checkpoint(marian["float32"]).meta["stored_dtypes"] == ["float32"]
    assert all(p.dtype == torch.float32 for p in ckpt.model.parameters())
    reference = attnviz.load_checkpoint(marian["float32"])
    assert ckpt.config == reference.config
    full_weights = reference.model.state_dict()
    for name, ours in ckpt.model.state_dict().items():
        full = full_weights[name]
        step = full.abs().amax(dim=-1, keepdim=True) / 127 if full.dim() == 2 else 1e-3
        assert ((ours - full).abs() <= step + 1e-6).all(), name
    translator = ctranslate2.Translator(str(marian[quantization]), compute_type="float32")
    for beam in (1, 4):
        for tokens in marian["texts"]:
            theirs = _translate(translator, tokens, beam)
            assert ckpt.predict(" ".join(tokens), max_len=MAX_LEN, num_beams=beam) == theirs


@pytest.mark.integration
def test_token_input_unknown_tokens_and_ids(marian):
    ckpt = attnviz.load_checkpoint(marian["float32"])
    enc = ckpt.encode_source("▁the nonsense-token #3 </s>")
    assert enc.ids == [ckpt.src_tokenizer.tokens.index("▁the"), ckpt.config.unk_id, 3, 0]
    assert enc.unknown == ["nonsense-token"]
    with pytest.raises(AttnvizError, match="empty"):
        ckpt.predict("   ")


# -- OpenNMT-py style specs written by ctranslate2's own spec classes --------------------------
POST_NORM = dict(pre_norm=False, layernorm_embedding=True, activation=common_spec.Activation.RELU)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("positions", "seed", "options"),
    # (random post-norm models mostly repeat one token: seed 1 does not)
    [(64, 0, {}), (None, 0, {}), (48, 1, POST_NORM), (64, 0, {"ffn_glu": True})],
    ids=["table", "computed", "post-norm-embedding-norm", "glu"],
)
def test_opennmt_style_spec_equals_ctranslate2(tmp_path, positions, seed, options):
    folder = _spec_folder(tmp_path / "onmt", positions, seed, **options)
    ckpt = attnviz.load_checkpoint(folder)
    cfg = ckpt.config
    assert cfg.gated_ff == bool(options.get("ffn_glu"))
    if options is POST_NORM:
        assert not cfg.norm_first and not cfg.final_norm and cfg.embed_norm
        assert cfg.activation == "relu"
    else:
        assert cfg.norm_first and cfg.final_norm and cfg.activation == "gelu"
    assert not cfg.share_embeddings and not cfg.tie_output and cfg.positions == "learned"
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id) == (1, 2, 3, 0)
    translator = ctranslate2.Translator(str(folder))
    rng = np.random.default_rng(1)
    worst, outputs = 0.0, set()
    for n in range(8):
        tokens = [SRC_VOCAB[i] for i in rng.integers(4, len(SRC_VOCAB), size=3 + n)]
        for beam in (1, 4):
            theirs = _translate(translator, tokens, beam)
            assert ckpt.predict(" ".join(tokens), max_len=MAX_LEN, num_beams=beam) == theirs
            outputs.add(theirs)
        target = [TGT_VOCAB[i] for i in rng.integers(4, len(TGT_VOCAB), size=4)]
        theirs = translator.score_batch([tokens], [target])[0].log_probs
        ours = np.log(ckpt.score(" ".join(tokens), " ".join(target)).probs)
        worst = max(worst, float(np.abs(ours - np.array(theirs)).max()))
    assert worst <= 1e-4, worst
    assert len(outputs) > 2  # the outputs depend on the input


# -- refusals ----------------------------------------------------------------------------------
def _refused(folder: Path, match: str) -> str:
    with pytest.raises(AttnvizError, match=match) as err:
        attnviz.load_checkpoint(folder)
    message = str(err.value)
    assert "\n" not in message and str(folder) in message
    return message


def test_unknown_spec_name_is_refused_before_the_weights(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    data = bytearray((folder / "model.bin").read_bytes())
    (length,) = struct.unpack_from("<H", data, 4)
    data[6 : 6 + length - 1] = b"FooSpec".ljust(length - 1, b"X")  # same length, other name
    (folder / "model.bin").write_bytes(bytes(data[: len(data) // 2]))  # weights never read
    _refused(folder, "holds a FooSpecX*, which attnviz does not open .it opens TransformerSpec")


def test_a_vocabulary_shorter_than_the_weights_is_refused(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    (folder / "target_vocabulary.json").write_text(json.dumps(TGT_VOCAB[:-3]))
    _refused(folder, "target vocabulary has 28 tokens but the weights have 31 rows")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (dict(with_relative_position=True), "does not implement: .*relative_position"),
        (dict(rms_norm=True), "is an RMS norm, not implemented"),
    ],
)
def test_spec_options_attnviz_does_not_implement_are_refused(tmp_path, options, match):
    _refused(_spec_folder(tmp_path / "m", **options), match)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"multi_query_attention": True}, "multi_query_attention is not implemented"),
        ({"decoder_start_token": None}, "no decoder_start_token"),
        ({"eos_token": "<end>"}, "eos_token '<end>' is not in the vocabulary"),
        ({"layer_norm_epsilon": "tiny"}, "layer_norm_epsilon must be a number"),
    ],
)
def test_config_options_attnviz_does_not_follow_are_refused(tmp_path, change, match):
    folder = _spec_folder(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | change))
    _refused(folder, match)


def test_a_lying_model_bin_in_a_folder_is_one_line(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    data = (folder / "model.bin").read_bytes()
    (folder / "model.bin").write_bytes(data[: len(data) // 2])
    _refused(folder, "model.bin is not a readable model.bin")


def test_missing_vocabulary_is_refused(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    (folder / "source_vocabulary.json").unlink()
    _refused(folder, "no shared_vocabulary")
    shutil.rmtree(folder)
    assert not attnviz.interop.ctranslate2.is_ct2_folder(folder)


def test_errors_are_interop_errors_for_what_attnviz_does_not_implement(tmp_path):
    folder = _spec_folder(tmp_path / "m", with_relative_position=True)
    with pytest.raises(InteropError, match="does not implement: .*relative_position_keys"):
        attnviz.load_checkpoint(folder)


# -- a folder with a tokenizer.json ------------------------------------------------------------
def _word_level_tokenizer(vocabulary: list[str], path: Path) -> None:
    """A ``tokenizers`` tokenizer whose ids are the vocabulary's: ``▁``-prefixed words, ``</s>``
    appended (as Marian's tokenizer does)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocabulary)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    end = vocabulary.index("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", end)]
    )
    tok.save(str(path))


@pytest.mark.integration
def test_a_tokenizer_json_in_the_folder_reads_and_writes_text(marian, tmp_path):
    from transformers import PreTrainedTokenizerFast

    folder = Path(shutil.copytree(marian["float32"], tmp_path / "with-tokenizer"))
    vocabulary = json.loads((folder / "shared_vocabulary.json").read_text())
    _word_level_tokenizer(vocabulary, folder / "tokenizer.json")
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.meta["tokenizer_missing"] is None and ckpt.src_tokenizer.kind == "hf"
    theirs = PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), eos_token="</s>"
    )
    translator = ctranslate2.Translator(str(folder))
    for text in ["the cat sat on the mat", "a dog ran in the park", "we read a book"]:
        tokens = theirs.convert_ids_to_tokens(theirs(text).input_ids)
        assert ckpt.encode_source(text).ids == theirs(text).input_ids
        out = translator.translate_batch([tokens], beam_size=1, max_decoding_length=MAX_LEN)
        ids = theirs.convert_tokens_to_ids(out[0].hypotheses[0])
        assert ckpt.predict(text, max_len=MAX_LEN) == theirs.decode(ids, skip_special_tokens=True)
    # a tokenizer.json whose ids are not the vocabulary's is not used
    _word_level_tokenizer(vocabulary[::-1], folder / "tokenizer.json")
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ct2-vocabulary"
    assert "does not match the vocabulary" in ckpt.meta["tokenizer_missing"]


@pytest.mark.integration
def test_the_app_steps_a_ct2_folder_on_tokens(tmp_path):
    from attnviz.app import session

    folder = _spec_folder(tmp_path / "m")
    ckpt = attnviz.load_checkpoint(folder)
    view = session.step(session.new_state(str(folder)), "s1 s2 s3 s4")
    assert "⚠" not in view.message, view.message
    assert view.state.src_pieces == ["s1", "s2", "s3", "s4"]
    view = session.run(view.state)
    assert view.state.tokens == ckpt.stepper("s1 s2 s3 s4").run()
    refused = session.step(session.new_state(str(folder)), "hello")
    assert "hello" in refused.message  # named as not in the vocabulary, not a crash


def test_model_bin_path_opens_its_folder(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    assert attnviz.load_checkpoint(folder / "model.bin").config.src_vocab_size == len(SRC_VOCAB)


@pytest.mark.integration
@pytest.mark.parametrize("length_penalty", [0.0, 2.0])
def test_beam_search_follows_ctranslate2_length_penalty(tmp_path, length_penalty):
    from attnviz.decode.beam import beam_predict

    folder = _spec_folder(tmp_path / "onmt")
    ckpt, translator = attnviz.load_checkpoint(folder), ctranslate2.Translator(str(folder))
    rng = np.random.default_rng(3)
    for n in range(8):
        tokens = [SRC_VOCAB[i] for i in rng.integers(4, len(SRC_VOCAB), size=2 + n)]
        out = translator.translate_batch(
            [tokens], beam_size=5, max_decoding_length=MAX_LEN, length_penalty=length_penalty
        )
        best = beam_predict(ckpt, " ".join(tokens), 5, MAX_LEN, length_penalty=length_penalty)
        assert ckpt.tgt_tokenizer.decode(best.tokens) == " ".join(out[0].hypotheses[0])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"a": 1}', "must be a list of token strings"),
        ("[1, 2, 3]", "must be a list of token strings"),
        ("[" * 100000 + "]" * 100000, "more than a vocabulary of 24 tokens takes"),
        ("[" * 5000 + "]" * 5000, "is not readable"),
        ("not json", "is not readable"),
    ],
    ids=["object", "numbers", "deeply-nested-large", "deeply-nested", "not-json"],
)
def test_hostile_vocabulary_files_are_one_line(tmp_path, text, match):
    folder = _spec_folder(tmp_path / "m")
    (folder / "source_vocabulary.json").write_text(text)
    _refused(folder, match)


def test_a_config_json_that_is_not_json_is_one_line(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    (folder / "config.json").write_text("{oops")
    _refused(folder, "config.json is not readable JSON")


def test_txt_vocabularies_read_as_json_ones(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    for side, tokens in (("source", SRC_VOCAB), ("target", TGT_VOCAB)):
        (folder / f"{side}_vocabulary.json").unlink()
        (folder / f"{side}_vocabulary.txt").write_text("\n".join(tokens) + "\n")
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.tokens == SRC_VOCAB and ckpt.tgt_tokenizer.tokens == TGT_VOCAB


def test_a_token_listed_twice_reads_as_its_first_id(tmp_path):
    folder = _spec_folder(tmp_path / "m")
    twice = SRC_VOCAB[:5] + ["s0"] + SRC_VOCAB[6:]  # "s1" (id 5) replaced by a second "s0"
    (folder / "source_vocabulary.json").write_text(json.dumps(twice))
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.encode_source("s0 s2").ids == [4, 6]
    assert ckpt.src_tokenizer.token(5) == "s0"
