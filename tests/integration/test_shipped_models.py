"""The models shipped in models/: accuracy on fresh test inputs, attention structure, metadata."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz
from attnviz.data.tasks import get_task
from attnviz.train.evaluate import exact_match_by_length

STRING_TASKS = ["reverse", "copy", "sort"]


@pytest.fixture(scope="module")
def reverse(models_dir):
    return attnviz.load_checkpoint(models_dir / "reverse")


def test_reverse_predicts_helloworld(reverse):
    assert reverse.predict("helloworld") == "dlrowolleh"


@pytest.mark.parametrize("name", [*STRING_TASKS, "translate"])
def test_shipped_checkpoint_is_small_documented_and_made_by_attnviz_train(name, models_dir):
    folder = models_dir / name
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.task == name
    assert ckpt.meta["command"].startswith(f"attnviz train --task {name} ")
    assert ckpt.config.n_encoder_layers >= 2 and ckpt.config.n_decoder_layers >= 2
    assert ckpt.config.n_heads >= 2
    assert (folder / "model.safetensors").stat().st_size < 10 * 2**20
    assert (folder / "snapshots.safetensors").is_file()
    readme = (models_dir / "README.md").read_text()
    assert f"`models/{name}`" in readme and ckpt.meta["command"] in readme


@pytest.mark.slow
@pytest.mark.parametrize("name", STRING_TASKS)
def test_string_models_reach_99_percent_exact_match_at_every_length(name, models_dir):
    # 100 fresh test-split inputs per length 1-20 (fewer where the split holds fewer, as
    # for length 1); `attnviz evaluate models/NAME` runs the same with 200 per length.
    results = exact_match_by_length(models_dir / name, per_length=100)
    assert set(results) == set(range(1, 21))
    rates = {length: right / n for length, (right, n) in results.items()}
    assert min(rates.values()) >= 0.99, rates


@pytest.mark.slow
def test_translate_reaches_95_percent_exact_match_on_its_test_split(models_dir):
    ckpt = attnviz.load_checkpoint(models_dir / "translate")
    examples = get_task("translate").examples("test", 1000, seed=0)
    preds = ckpt.predict_batch([e.src for e in examples])
    rate = np.mean([p == e.tgt for p, e in zip(preds, examples, strict=True)])
    assert rate >= 0.95, rate


def test_reverse_cross_attention_is_anti_diagonal(reverse):
    """For most output positions the mean cross-attention (some layer) peaks at the mirror."""
    tok = reverse.src_tokenizer
    bos, eos = reverse.config.bos_id, reverse.config.eos_id
    best = 0.0
    words = ["helloworld", "attentionisallyouneed", "abcdefghijklmnopqrst", "zyxwv", "transformer"]
    for layer in range(reverse.config.n_decoder_layers):
        hits = total = 0
        for text in words:
            text = text[:20]
            stepper = attnviz.GreedyStepper(
                reverse.model, torch.tensor(tok.encode(text).ids), bos, eos
            )
            stepper.run()
            weights = stepper.trace().weights("cross", layer)[0].mean(0)  # [Tt, Ts], mean of heads
            n = len(text)
            for i in range(n):  # output position i should look at input position n - 1 - i
                hits += int(weights[i].argmax()) == n - 1 - i
                total += 1
        best = max(best, hits / total)
    assert best >= 0.8, best


def test_translate_cross_attention_aligns_words_across_the_reordering(models_dir):
    """Each output word's mean cross-attention (some layer) peaks on the source word it
    translates, though the verb moves to the end and adjectives after their nouns."""
    from attnviz.analysis import inspect_text

    ckpt = attnviz.load_checkpoint(models_dir / "translate")
    task = get_task("translate")
    source_of = {}
    for src_word, tgt_words in task.lexicon.items():
        for w in tgt_words:
            source_of.setdefault(w, set()).add(src_word)
    best = 0.0
    examples = task.examples("test", 40, seed=5)
    results = [inspect_text(ckpt, e.src) for e in examples]
    for layer in range(ckpt.config.n_decoder_layers):
        hits = total = 0
        for ins in results:
            w = ins.trace.numpy("cross", layer)[0].mean(0)  # [Tt, Ts]
            for i, tok in enumerate(ins.out_tokens[:-1]):  # EOS aligns to nothing
                hits += ins.src_tokens[int(w[i].argmax())] in source_of[tok]
                total += 1
        best = max(best, hits / total)
    assert best >= 0.9, best
