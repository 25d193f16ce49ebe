"""Hugging Face folders opened in attnviz's own Transformer, checked against transformers.

Each family is a tiny random model built with transformers in the test (nothing is
downloaded), saved with ``save_pretrained``, loaded with :func:`attnviz.load_checkpoint` and
compared with the original: logits, every attention weight, greedy tokens under the folder's
generation config, the KV-cached stepper, and (slow) text through a tokenizer trained here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import attnviz
from attnviz.core.errors import CheckpointError, InputError, InteropError
from attnviz.decode.batched import greedy_decode, until_eos
from attnviz.decode.beam import beam_search
from attnviz.decode.greedy import GreedyStepper, LogitRules
from tests import hf_families

try:
    import transformers  # noqa: F401

    HAVE_HF = True
except ImportError:
    HAVE_HF = False

needs_hf = pytest.mark.skipif(
    not HAVE_HF, reason="transformers is not installed (pip install 'attnviz[hf]')"
)

FAMILIES = list(hf_families.FAMILIES)  # every registered model_type (see below)
# generation settings each family's folder gets (what real folders of that family carry)
GENERATION = {
    "marian": dict(bad_words_ids=[[60]], forced_eos_token_id=0, max_new_tokens=12),
    "bart": dict(forced_bos_token_id=0, forced_eos_token_id=2, max_new_tokens=12),
    "mbart": dict(forced_bos_token_id=7, max_new_tokens=12, suppress_tokens=[9, 11]),
    "pegasus": dict(max_new_tokens=12, min_length=4),
    "fsmt": dict(max_new_tokens=12),
    "t5": dict(max_length=14),
    "t5-v1.1": dict(max_new_tokens=12, begin_suppress_tokens=[5]),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> (transformers model, saved folder), built once per module."""
    from tests.hf_families import build, save

    out = {}
    for family in FAMILIES:
        model = build(family)
        folder = tmp_path_factory.mktemp(family.replace(".", "_"))
        out[family] = (model, save(model, folder, **GENERATION[family]))
    return out


def batch(cfg: attnviz.ModelConfig, seed: int = 0):
    """A padded source batch and decoder inputs (the start id first), with masks."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (3, 9), generator=g)
    src[1, 6:] = cfg.pad_id
    src[2, 8:] = cfg.pad_id
    tgt = torch.randint(3, 40, (3, 7), generator=g)
    tgt[:, 0] = cfg.bos_id
    tgt[1, 5:] = cfg.pad_id
    src_real = torch.ones_like(src, dtype=torch.bool)
    src_real[1, 6:] = False
    src_real[2, 8:] = False
    tgt_real = torch.ones_like(tgt, dtype=torch.bool)
    tgt_real[1, 5:] = False
    return src, tgt, src_real, tgt_real


def reference(hf_model, src, tgt, src_real, tgt_real):
    with torch.no_grad():
        return hf_model(
            input_ids=src,
            attention_mask=src_real.long(),
            decoder_input_ids=tgt,
            decoder_attention_mask=tgt_real.long(),
            output_attentions=True,
            use_cache=False,  # FSMT builds its causal mask only without a cache
        )


def test_every_registered_family_is_tested():
    """The parity tests below run over FAMILIES: it covers every registry entry."""
    from attnviz.interop.hf import REGISTRY, SUPPORTED_MODEL_TYPES

    one_stack = {**hf_families.DECODER_ONLY, **hf_families.ENCODER_ONLY}
    tested = {hf_families.model_type(f) for f in [*FAMILIES, *one_stack]}
    audio = {name for name, family in REGISTRY.items() if family.audio}  # test_whisper.py
    assert tested | audio == set(
        REGISTRY
    )  # one-stack families: test_hf_decoder_only, _encoder_only
    assert set(SUPPORTED_MODEL_TYPES) == set(REGISTRY)
    for family in FAMILIES:
        assert set(GENERATION) >= {family}


# -- parity with transformers --------------------------------------------------------------------
@needs_hf
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(folders, family):
    hf_model, folder = folders[family]
    ckpt = attnviz.load_checkpoint(folder / "model.safetensors")  # the file works too
    assert isinstance(ckpt.model, attnviz.Transformer)
    src, tgt, src_real, tgt_real = batch(ckpt.config)
    ref = reference(hf_model, src, tgt, src_real, tgt_real).logits
    with torch.no_grad():
        ours = ckpt.model(src, tgt, ~src_real, ~tgt_real)
    diff = (ours - ref).abs()[tgt_real].max().item()
    assert diff <= 1e-4, f"{family}: max |Δlogits| = {diff:.2e}"


@needs_hf
@pytest.mark.parametrize("family", FAMILIES)
def test_every_attention_weight_matches_transformers(folders, family):
    """Encoder, decoder and cross weights of every layer, on the rows of real tokens."""
    hf_model, folder = folders[family]
    model = attnviz.load_checkpoint(folder).model
    src, tgt, src_real, tgt_real = batch(model.config)
    out = reference(hf_model, src, tgt, src_real, tgt_real)
    with torch.no_grad(), attnviz.record(model) as trace:
        model(src, tgt, ~src_real, ~tgt_real)
    theirs = {
        "encoder_self": out.encoder_attentions,
        "decoder_self": out.decoder_attentions,
        "cross": out.cross_attentions,
    }
    for kind, layers in theirs.items():
        assert len(layers) == len(trace.layers(kind))
        rows = src_real if kind == "encoder_self" else tgt_real  # [B, Tq]
        for layer, ref in enumerate(layers):
            ours = trace.weights(kind, layer)
            diff = (ours - ref).abs().amax(dim=(1, 3))[rows].max().item()  # over real rows
            assert diff <= 1e-5, f"{family} {kind} layer {layer}: {diff:.2e}"


@needs_hf
@pytest.mark.parametrize("family", ["t5", "t5-v1.1"])
def test_t5_families_are_bit_exact(folders, family):
    """Plain T5 (ReLU) and T5 v1.1 / Flan-T5 (gated ``gelu_new``) compute transformers' own
    formulas, so the logits and every attention weight are equal to the last bit (the tanh GELU
    as ``F.gelu(approximate="tanh")`` left v1.1 3.6e-5 off in the logits)."""
    hf_model, folder = folders[family]
    model = attnviz.load_checkpoint(folder).model
    src, tgt, src_real, tgt_real = batch(model.config)
    out = reference(hf_model, src, tgt, src_real, tgt_real)
    with torch.no_grad(), attnviz.record(model) as trace:
        logits = model(src, tgt, ~src_real, ~tgt_real)
    assert (logits - out.logits).abs()[tgt_real].max().item() == 0.0
    for kind, layers in (("encoder_self", out.encoder_attentions), ("cross", out.cross_attentions),
                         ("decoder_self", out.decoder_attentions)):  # fmt: skip
        rows = src_real if kind == "encoder_self" else tgt_real
        for layer, ref in enumerate(layers):
            diff = (trace.weights(kind, layer) - ref).abs().amax(dim=(1, 3))[rows].max().item()
            assert diff == 0.0, f"{family} {kind} layer {layer}: {diff:.2e}"


@needs_hf
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_path_equals_recording_path(folders, family):
    model = attnviz.load_checkpoint(folders[family][1]).model
    src, tgt, src_real, tgt_real = batch(model.config)
    with torch.no_grad():
        fast = model(src, tgt, ~src_real, ~tgt_real)
        with attnviz.record(model) as trace:
            slow = model(src, tgt, ~src_real, ~tgt_real)
    # scores reach ~80 in these random models (T5 does not scale them): float32 rounding
    assert torch.allclose(fast, slow, atol=1e-4, rtol=1e-4)
    for kind, layer in trace.keys():
        w = trace.weights(kind, layer)
        mask = trace.mask(kind, layer).expand_as(w)
        assert bool((w[mask] == 0).all())
        live = ~mask.all(dim=-1)  # rows with any key allowed sum to 1
        assert torch.allclose(w.sum(-1)[live], torch.ones(()), atol=1e-5)


@needs_hf
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_matches_generate(folders, family):
    """The folder's generation config (forced/banned/suppressed tokens, lengths) is followed."""
    hf_model, folder = folders[family]
    ckpt = attnviz.load_checkpoint(folder)
    cfg = ckpt.config
    src, _, src_real, _ = batch(cfg)
    # transformers 5 sizes T5's decoder cache by the encoder's depth, which fails with
    # unequal depths; without a cache its greedy tokens are the same
    use_cache = not family.startswith("t5")
    with torch.no_grad():
        theirs = hf_model.generate(
            input_ids=src,
            attention_mask=src_real.long(),
            num_beams=1,
            do_sample=False,
            use_cache=use_cache,
        )
    ours = greedy_decode(
        ckpt.model,
        src,
        cfg.bos_id,
        cfg.eos_id,
        src_pad_mask=~src_real,
        max_len=ckpt.max_new_tokens,
        rules=ckpt.rules,
    )
    assert int(theirs[0, 0]) == cfg.bos_id
    for mine, ref in zip(ours.tolist(), theirs[:, 1:].tolist(), strict=True):
        assert until_eos(mine, cfg.eos_id, cfg.pad_id) == until_eos(ref, cfg.eos_id, cfg.pad_id)


@needs_hf
@pytest.mark.parametrize("family", ["marian", "bart", "mbart"])
def test_beam_of_one_follows_the_rules_as_greedy_does(folders, family):
    ckpt = attnviz.load_checkpoint(folders[family][1])
    cfg = ckpt.config
    src = batch(cfg)[0][:1]
    greedy = greedy_decode(
        ckpt.model, src, cfg.bos_id, cfg.eos_id, max_len=ckpt.max_new_tokens, rules=ckpt.rules
    )[0].tolist()
    beam = beam_search(
        ckpt.model, src, cfg.bos_id, cfg.eos_id, beam_size=1, max_len=ckpt.max_new_tokens,
        rules=ckpt.rules,
    )[0]  # fmt: skip
    assert beam.tokens == until_eos(greedy, cfg.eos_id, cfg.pad_id)
    wide = beam_search(
        ckpt.model, src, cfg.bos_id, cfg.eos_id, beam_size=3, max_len=ckpt.max_new_tokens,
        rules=ckpt.rules,
    )[0]  # fmt: skip
    if ckpt.rules.forced_bos_id is not None:
        assert wide.tokens[0] == ckpt.rules.forced_bos_id
    banned = set(ckpt.rules.banned)
    assert not banned & set(wide.tokens)


@needs_hf
@pytest.mark.parametrize("family", FAMILIES)
def test_stepper_equals_recomputation_and_teacher_forcing(folders, family):
    ckpt = attnviz.load_checkpoint(folders[family][1])
    model, cfg = ckpt.model, ckpt.config
    src = batch(cfg)[0][:1]
    stepper = GreedyStepper(
        model, src[0], cfg.bos_id, cfg.eos_id, max_len=ckpt.max_new_tokens, rules=ckpt.rules
    )
    tokens = stepper.run()
    again = greedy_decode(
        model, src, cfg.bos_id, cfg.eos_id, max_len=ckpt.max_new_tokens, rules=ckpt.rules,
        cache=False,
    )[0].tolist()  # fmt: skip
    assert tokens == again[: len(tokens)]
    tgt = torch.tensor([[cfg.bos_id, *tokens[:-1]]])
    with torch.no_grad(), attnviz.record(model) as forced:
        model(src, tgt)
    steps = stepper.trace()
    for kind, layer in forced.keys():
        ours, ref = steps.weights(kind, layer), forced.weights(kind, layer)
        assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-4)


@needs_hf
def test_t5_scores_include_the_position_bias(folders):
    """Recorded scores are q·kᵀ + bias (what the softmax saw); the bias is recorded too."""
    model = attnviz.load_checkpoint(folders["t5"][1]).model
    src, tgt, src_real, tgt_real = batch(model.config)
    with torch.no_grad(), attnviz.record(model) as trace:
        model(src, tgt, ~src_real, ~tgt_real)
    ts, tt = src.shape[1], tgt.shape[1]
    enc_bias = model.encoder.position_bias(ts, ts)
    dec_bias = model.decoder.position_bias(tt, tt)
    for layer in trace.layers("encoder_self"):
        bias = trace.position_bias("encoder_self", layer)
        assert torch.equal(bias, enc_bias)  # one bias per stack, shared by its layers
        q_k = trace.scores("encoder_self", layer) - bias
        assert not torch.allclose(q_k, trace.scores("encoder_self", layer))
    for layer in trace.layers("decoder_self"):
        assert torch.equal(trace.position_bias("decoder_self", layer), dec_bias)
    with pytest.raises(attnviz.TraceLookupError, match="position_bias|position bias"):
        trace.position_bias("cross", 0)  # cross-attention has no position bias
    names = trace.names()
    assert "encoder.layers.1.self_attn.position_bias" in names
    assert "decoder.layers.0.self_attn.position_bias" in names
    assert not any(n.endswith("cross_attn.position_bias") for n in names)
    # the decoder's bias is causal-bucketed: a key after the query shares bucket 0's value
    assert torch.equal(dec_bias[0, :, 0, 1], dec_bias[0, :, 0, 0])


@needs_hf
def test_t5_folders_written_by_transformers_4(folders, tmp_path):
    """4.x folders: v1.1 says tie_word_embeddings false and carries its own lm_head (no
    output scaling); v1.0 says nothing and scales the decoder output by D^-0.5."""
    import shutil

    from safetensors.torch import load_file, save_file

    hf_model, folder = folders["t5-v1.1"]
    old = tmp_path / "flan"
    shutil.copytree(folder, old)
    config = json.loads((old / "config.json").read_text())
    del config["scale_decoder_outputs"]
    config["tie_word_embeddings"] = False
    (old / "config.json").write_text(json.dumps(config))
    tensors = load_file(old / "model.safetensors")
    lm_head = torch.randn(
        tensors["shared.weight"].shape, generator=torch.Generator().manual_seed(3)
    )
    save_file({**tensors, "lm_head.weight": lm_head}, old / "model.safetensors")
    model = attnviz.load_checkpoint(old).model
    assert not model.config.tie_output and not model.config.scale_decoder_output
    src, tgt, src_real, tgt_real = batch(model.config)
    with torch.no_grad():
        out = hf_model(
            input_ids=src, attention_mask=src_real.long(), decoder_input_ids=tgt,
            decoder_attention_mask=tgt_real.long(), output_hidden_states=True,
        )  # fmt: skip
        expected = out.decoder_hidden_states[-1] @ lm_head.T  # the folder's own lm_head
        ours = model(src, tgt, ~src_real, ~tgt_real)
    assert torch.allclose(ours[tgt_real], expected[tgt_real], atol=1e-4, rtol=1e-4)

    v10 = tmp_path / "t5"
    shutil.copytree(folders["t5"][1], v10)
    config = json.loads((v10 / "config.json").read_text())
    del config["scale_decoder_outputs"], config["tie_word_embeddings"]
    (v10 / "config.json").write_text(json.dumps(config))
    model = attnviz.load_checkpoint(v10).model
    assert model.config.tie_output and model.config.scale_decoder_output


# -- folders: shards, refusals ----------------------------------------------------------------------
@needs_hf
def test_sharded_folder_loads(tmp_path):
    from tests.hf_families import build

    hf_model = build("marian")
    hf_model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    model = attnviz.load_checkpoint(tmp_path).model
    src, tgt, src_real, tgt_real = batch(model.config)
    ref = reference(hf_model, src, tgt, src_real, tgt_real).logits
    with torch.no_grad():
        assert torch.allclose(
            model(src, tgt, ~src_real, ~tgt_real)[tgt_real], ref[tgt_real], atol=1e-4
        )


def _fake_folder(tmp_path: Path, model_type: str, **extra) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **extra}))
    return tmp_path


def test_unsupported_model_type_is_named(tmp_path):
    with pytest.raises(InteropError, match=r"model_type 'gpt_neox' is not supported.*marian.*t5"):
        attnviz.load_checkpoint(_fake_folder(tmp_path, "gpt_neox"))


def test_custom_code_is_refused(tmp_path):
    folder = _fake_folder(tmp_path, "t5", auto_map={"AutoModel": "x.Model"})
    with pytest.raises(InteropError, match="custom code"):
        attnviz.load_checkpoint(folder)


def test_pickle_weights_are_refused_with_a_recipe(tmp_path):
    folder = _fake_folder(tmp_path, "marian")
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not opened")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*safetensors.*save_pretrained"):
        attnviz.load_checkpoint(folder)


def test_missing_weights_are_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"no model\.safetensors"):
        attnviz.load_checkpoint(_fake_folder(tmp_path, "bart"))


@needs_hf
def test_weights_that_do_not_fit_are_named(folders, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "bart"
    shutil.copytree(folders["bart"][1], folder)
    tensors = load_file(folder / "model.safetensors")
    save_file(
        {**tensors, "model.encoder.extra.weight": torch.zeros(2)}, folder / "model.safetensors"
    )
    with pytest.raises(InteropError, match="does not know: model.encoder.extra.weight"):
        attnviz.load_checkpoint(folder)
    del tensors["model.decoder.layers.1.fc2.bias"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"missing tensors: decoder\.layers\.1\.ff\.linear2"):
        attnviz.load_checkpoint(folder)
    tensors["model.decoder.layers.1.fc2.bias"] = torch.zeros(7)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="shapes that do not match"):
        attnviz.load_checkpoint(folder)


@needs_hf
def test_folder_without_tokenizer_loads_ids_in_ids_out(folders):
    ckpt = attnviz.load_checkpoint(folders["marian"][1])
    assert ckpt.src_tokenizer.kind == "ids" and ckpt.tgt_tokenizer.kind == "ids"
    assert "no tokenizer files" in ckpt.meta["tokenizer_missing"]
    with pytest.raises(InputError, match="no tokenizer files.*type token ids"):
        ckpt.predict("hello")
    assert ckpt.encode_source("5, 7 9 0").pieces == ["#5", "#7", "#9", "#0"]
    tokens = ckpt.predict_details("5 7 9 0").tokens
    assert ckpt.predict("5 7 9 0") == " ".join(map(str, tokens[:-1] if tokens[-1] == 0 else tokens))
    cfg = ckpt.config
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id) == (60, 60, 0)  # Marian: start = pad = V - 1


@needs_hf
def test_tokenizer_without_transformers_names_the_extra(folders, tmp_path, monkeypatch):
    import shutil
    import sys

    folder = tmp_path / "marian"
    shutil.copytree(folders["marian"][1], folder)
    (folder / "tokenizer_config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ids"
    assert "attnviz[hf]" in ckpt.meta["tokenizer_missing"]
    with pytest.raises(InputError, match=r"attnviz\[hf\]"):
        ckpt.encode_source("hello")


@needs_hf
def test_special_ids_come_from_the_folder(folders):
    ids = {f: attnviz.load_checkpoint(folders[f][1]).config.special_ids for f in ("bart", "t5")}
    assert ids["bart"]["bos"] == ids["bart"]["eos"] == 2 and ids["bart"]["pad"] == 1
    assert ids["t5"]["bos"] == ids["t5"]["pad"] == 0 and ids["t5"]["eos"] == 1


# -- text through a tokenizer trained here ----------------------------------------------------------
TEXTS = ["the cat sat on the mat", "a bird sang", "we walked to the park today"]


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("family", ["marian", "t5", "bart"])
def test_predict_text_equals_transformers(tmp_path, family):
    from tests import hf_families

    tok = getattr(hf_families, f"{family}_tokenizer")(tmp_path / "tok")
    sizes = {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id}
    if family == "marian":
        sizes |= {"decoder_start_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}
    if family == "t5":  # the model's vocabulary is larger than the tokenizer's, as T5's is
        sizes = {"vocab_size": len(tok) + 12}
    hf_model = hf_families.build(family, **sizes)
    folder = tmp_path / "model"
    hf_model.generation_config.max_new_tokens = 10
    if family == "marian":
        hf_model.generation_config.bad_words_ids = [[tok.pad_token_id]]
    if family == "bart":
        hf_model.generation_config.forced_bos_token_id = 0
    hf_model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)

    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer is not None, ckpt.meta["tokenizer_missing"]
    for text in TEXTS:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = hf_model.generate(
                **enc, num_beams=1, do_sample=False, use_cache=family != "t5"
            )  # (see test_greedy_matches_generate)
        expected = tok.decode(out[0], skip_special_tokens=True)
        assert ckpt.encode_source(text).ids == enc.input_ids[0].tolist()
        assert ckpt.predict(text) == expected
        assert ckpt.tgt_tokenizer.decode(ckpt.stepper(text).run()) == expected
    assert ckpt.predict_batch(TEXTS) == [ckpt.predict(t) for t in TEXTS]
    with pytest.raises(InputError, match="empty"):
        ckpt.predict("")
    assert len(ckpt.tgt_tokenizer.tokens) == ckpt.config.tgt_vocab_size  # a label for every id
    pieces = ckpt.encode_source("the cat").pieces
    assert pieces[-1] == tok.eos_token and any(p.startswith("▁") for p in pieces)
    if family != "bart":  # byte-level BPE has no unknown pieces
        assert ckpt.encode_source("the cat xq").unknown


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("family", ["marian", "t5"])
def test_check_and_inspect_find_no_false_leak(tmp_path, family, capsys):
    """Their decoder starts from the pad id: a start token is never taken for padding."""
    from attnviz.cli import main
    from tests import hf_families

    tok = getattr(hf_families, f"{family}_tokenizer")(tmp_path / "tok")
    sizes = {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id}
    if family == "marian":
        sizes |= {"decoder_start_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}
    hf_model = hf_families.build(family, **sizes)
    hf_model.generation_config.max_new_tokens = 8
    hf_model.save_pretrained(tmp_path / "model", safe_serialization=True)
    tok.save_pretrained(tmp_path / "model")
    folder = str(tmp_path / "model")
    texts = ["--text", "the cat sat on the mat", "--text", "a bird"]
    assert main(["check", folder, *texts, "--ablation-sample", "0"]) == 0
    assert "verdict: PASS" in capsys.readouterr().out
    html = tmp_path / "out.html"
    assert main(["inspect", folder, "--text", "the cat sat", "--html", str(html)]) == 0
    assert html.stat().st_size > 0


# -- logit rules (no transformers needed) -------------------------------------------------------------
def test_logit_rules_force_ban_and_hold_back():
    logits = torch.arange(6, dtype=torch.float).repeat(2, 1)  # argmax 5
    rules = LogitRules(forced_bos_id=1, forced_eos_id=2, banned=(5,), begin_banned=(4,))
    assert rules.apply(logits, 0, 10).argmax(-1).tolist() == [1, 1]  # forced first token
    assert rules.apply(logits, 3, 10).argmax(-1).tolist() == [4, 4]  # 5 banned
    assert rules.apply(logits, 9, 10).argmax(-1).tolist() == [2, 2]  # forced at the limit
    held = LogitRules(min_new_tokens=2, eos_id=5)
    assert held.apply(logits, 1, 10).argmax(-1).tolist() == [4, 4]
    assert held.apply(logits, 2, 10).argmax(-1).tolist() == [5, 5]
    assert torch.equal(logits, torch.arange(6, dtype=torch.float).repeat(2, 1))  # not modified


def test_stepper_can_force_a_banned_token():
    torch.manual_seed(0)
    cfg = attnviz.ModelConfig(src_vocab_size=11, tgt_vocab_size=11, d_model=8, n_heads=2, d_ff=8)
    model = attnviz.Transformer(cfg).eval()
    stepper = GreedyStepper(model, torch.tensor([4, 5, 6]), 1, 2, rules=LogitRules(banned=(7,)))
    assert stepper.step(token=7).token == 7
    assert all(stepper.step().token != 7 for _ in range(3))


# -- the new model features on built-in configs ------------------------------------------------------
T5_LIKE = dict(
    d_model=20, n_heads=3, d_head=4, norm="rms", bias=False, scale_attention=False,
    positions="relative", relative_buckets=6, relative_max_distance=10, gated_ff=True,
    activation="gelu_tanh", norm_first=True, final_norm=True, scale_embeddings=False,
    output_bias=False, scale_decoder_output=True, share_embeddings=True, tie_output=True,
)  # fmt: skip
FEATURES = [
    T5_LIKE,
    dict(positions="learned", position_offset=2, embed_norm=True, activation="silu"),
    dict(positions="sinusoidal_split", scale_embeddings=False),
    dict(positions="fairseq", position_offset=1, pad_id=0),
]


@pytest.mark.parametrize("overrides", FEATURES, ids=["t5", "bart", "marian", "fsmt"])
def test_feature_models_fused_equals_recording_and_cache(overrides):
    torch.manual_seed(0)
    base = dict(src_vocab_size=23, tgt_vocab_size=23, n_encoder_layers=2, n_decoder_layers=2)
    cfg = attnviz.ModelConfig(**{"d_model": 24, "n_heads": 4, "d_ff": 40, "dropout": 0.0,
                                 "max_len": 64, **base, **overrides})  # fmt: skip
    model = attnviz.Transformer(cfg).eval()
    src = torch.randint(4, 23, (2, 7))
    src[1, 4:] = cfg.pad_id
    pad = torch.zeros_like(src, dtype=torch.bool)
    pad[1, 4:] = True
    tgt = torch.randint(4, 23, (2, 5))
    with torch.no_grad():
        fast = model(src, tgt, pad)
        with attnviz.record(model):
            slow = model(src, tgt, pad)
        assert torch.allclose(fast, slow, atol=1e-5, rtol=1e-5)
        everything_padded = model(src, tgt, torch.ones_like(pad))  # dead rows: zeros, not NaN
        assert torch.isfinite(everything_padded).all()
    cached = greedy_decode(model, src, cfg.bos_id, None, max_len=6, src_pad_mask=pad)
    again = greedy_decode(model, src, cfg.bos_id, None, max_len=6, src_pad_mask=pad, cache=False)
    assert torch.equal(cached, again)


def test_split_sinusoids_are_computed_in_float64():
    from attnviz.core.positions import split_sinusoidal_positions

    table = split_sinusoidal_positions(512, 6)
    pos, i = 511, 1  # the second frequency, sine half and cosine half
    angle = pos / 10000 ** (2 * i / 6)
    assert table[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-7)
    assert table[pos, 3 + i].item() == pytest.approx(math.cos(angle), abs=1e-7)


def test_relative_buckets_follow_t5():
    from attnviz.core.positions import relative_position_buckets

    enc = relative_position_buckets(1, 5, 2, True, 8, 20, "cpu")[0].tolist()
    assert enc == [2, 1, 0, 5, 6]  # before the query: 2, 1; itself 0; after: 4 + 1, 4 + 2
    dec = relative_position_buckets(1, 3, 2, False, 8, 20, "cpu")[0].tolist()
    assert dec == [2, 1, 0]
