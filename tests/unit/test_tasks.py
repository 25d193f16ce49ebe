"""Built-in tasks: deterministic, disjoint splits, correct targets, the translation grammar."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from attnviz import tasks
from attnviz.core.errors import InputError
from attnviz.data.tasks import TASKS, Task, get_task, register


@pytest.mark.parametrize("name", ["reverse", "copy", "sort", "translate", "repeat"])
def test_splits_never_overlap_and_are_deterministic(name):
    task = get_task(name)
    train = {e.src for e in task.examples("train", 3000, seed=1)}
    val = {e.src for e in task.examples("validation", 300, seed=1)}
    test = {e.src for e in task.examples("test", 300, seed=2)}
    assert not train & val and not train & test and not val & test
    assert all(task.split_of(s) == "test" for s in test)
    assert task.examples("test", 50, seed=3) == task.examples("test", 50, seed=3)
    assert task.examples("test", 50, seed=3) != task.examples("test", 50, seed=4)


@pytest.mark.parametrize("name", ["reverse", "copy", "sort", "translate", "repeat"])
def test_every_length_occurs_and_tokenizers_cover_every_target(name):
    task = get_task(name)
    src_tok, tgt_tok = task.tokenizers()
    exs = task.examples("train", 2000, seed=0)
    assert {task.length_of(e.src) for e in exs} == set(task.lengths)
    for e in exs:
        assert src_tok.unk_id not in src_tok.encode(e.src).ids
        assert tgt_tok.unk_id not in tgt_tok.encode(e.tgt).ids
    for length in task.lengths:
        fixed = task.examples("test", 5, seed=0, length=length)
        assert fixed and all(task.length_of(e.src) == length for e in fixed)


def test_string_task_targets():
    assert get_task("reverse").target("helloworld") == "dlrowolleh"
    assert get_task("copy").target("abc") == "abc"
    assert get_task("sort").target("transformer") == "aefmnorrrst"
    lengths = [len(e.src) for e in get_task("reverse").examples("train", 4000, seed=0)]
    assert min(lengths) == 1 and max(lengths) == 20


def test_small_domains_return_fewer_examples_instead_of_looping():
    task = get_task("reverse")
    one = task.examples("test", 200, seed=0, length=1)
    assert 0 < len(one) < 26 and len({e.src for e in one}) == len(one)


def test_translation_grammar_reorders_drops_and_doubles():
    task = get_task("translate")
    lex = task.lexicon
    src = "the big dog sees a small cat quickly with my friend"
    expected = [
        *lex["dog"],
        *lex["big"],  # "the" dropped, adjective after noun
        *lex["a"],
        *lex["cat"],
        *lex["small"],  # object before the verb
        *lex["my"],
        *lex["friend"],
        *lex["with"],  # postposition
        *lex["quickly"],  # adverb before the verb
        *lex["sees"],  # verb last
    ]
    assert task.target(src).split() == expected
    assert lex["the"] == [] and len(lex["every"]) == 2
    assert len(task.target("every cat visits the dog").split()) == 2 + 1 + 1 + 2
    src_tok, tgt_tok = task.tokenizers()
    assert 50 <= len(src_tok) - 4 <= 200 and 50 <= len(tgt_tok) - 4 <= 200


def test_translate_lengths_are_exact():
    task = get_task("translate")
    rng = random.Random(0)
    for length in task.lengths:
        assert len(task.sample(rng, length).split()) == length
    with pytest.raises(InputError, match="5-12"):
        task.sample(rng, 4)


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(InputError, match="known tasks: copy, repeat, reverse, sort, translate"):
        get_task("nope")
    with pytest.raises(InputError, match="split"):
        next(get_task("copy").stream("dev", 0))


def test_a_new_task_is_one_small_class():
    @dataclass
    class Double(tasks._LetterTask):
        name: str = "double-test"

        def target(self, src: str) -> str:
            return src + src

    try:
        register(Double())
        task = get_task("double-test")
        assert isinstance(task, Task)
        ex = task.examples("train", 3, seed=0)
        assert all(e.tgt == e.src * 2 for e in ex)
    finally:
        TASKS.pop("double-test", None)


def test_repeat_draws_distinct_tokens_and_repeats_them():
    task = get_task("repeat")
    for e in task.examples("train", 200, seed=0):
        assert e.tgt == e.src and len(set(e.src)) == len(e.src)
    assert task.model["arch"] == "decoder-only" and task.model["attn_only"]
    assert task.lm_loss == "all" and not task.separator and task.induction
