"""Bad input to the debugging tools (force, step, what-if, attribution, score): one line that
names the valid range, an :class:`~attnviz.InputError`, and nothing changed by the refusal."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.analysis import what_if
from attnviz.core.errors import InputError, index_in

TEXT = "hello"  # models/reverse: 6 output steps (5 letters and EOS), 30 target ids, 2 layers


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 200, text
    return text


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (4, r"layer must be in 0\.\.3, got 4"),
        (-1, r"layer must be in 0\.\.3, got -1"),
        (1.5, r"layer must be an integer in 0\.\.3, got 1\.5"),
        ("1", r"layer must be an integer in 0\.\.3, got '1'"),
        (True, r"layer must be an integer in 0\.\.3, got True"),
        (None, r"layer must be an integer in 0\.\.3, got None"),
    ],
)
def test_index_in_names_the_range(value, match):
    with pytest.raises(InputError, match=match):
        index_in(value, "layer", 4)
    assert index_in(np.int64(2), "layer", 4) == 2 and index_in(torch.tensor(3), "layer", 4) == 3


@pytest.mark.parametrize(
    ("token", "match"),
    [
        (30, r"token 30 is outside the vocabulary 0\.\.29"),
        (-1, r"token -1 is outside the vocabulary 0\.\.29"),
        (np.int64(99), r"token 99 is outside the vocabulary 0\.\.29"),
        (1.5, r"token must be an integer id in 0\.\.\d+, got 1\.5"),
        ("a", r"token must be an integer id in 0\.\.\d+, got 'a'"),
        (True, r"token must be an integer id in 0\.\.\d+, got True"),
    ],
)
def test_stepper_refuses_a_token_outside_the_vocabulary_and_keeps_its_state(
    reverse_ckpt, token, match
):
    stepper = reverse_ckpt.stepper(TEXT)
    first = stepper.step()
    with pytest.raises(InputError, match=match) as exc:
        stepper.step(token=token)
    one_line(exc)
    assert stepper.tokens == [first.token] and stepper.position == 1
    assert stepper.step().step == 1  # still usable, from where it was


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step": 6}, r"step must be in 0\.\.5 \(this decode has 6 steps\), got 6"),
        ({"step": -1}, r"step must be in 0\.\.5 \(this decode has 6 steps\), got -1"),
        ({"step": 1.5}, r"step must be an integer in 0\.\.5 .*got 1\.5"),
        ({"step": 0, "layer": 2}, r"layer must be in 0\.\.1, got 2"),
        ({"step": 0, "layer": "0"}, r"layer must be an integer in 0\.\.1, got '0'"),
        ({"step": 0, "heads": [4]}, r"heads must be in 0\.\.3, got 4"),
        ({"step": 0, "heads": [True]}, r"heads must be an integer in 0\.\.3, got True"),
        ({"step": 0, "heads": ["a"]}, r"heads must be an integer in 0\.\.3, got 'a'"),
        ({"step": 0, "heads": []}, r"heads must be a list of heads in 0\.\.3 \(None: every"),
        ({"step": 0, "heads": 2}, r"heads must be a list of heads in 0\.\.3 .*got 2"),
        ({"step": 0, "attend_to": 5}, r"attend_to must be a key position in 0\.\.4, got 5"),
        ({"step": 0, "attend_to": 0.5}, r"attend_to must be a key position in 0\.\.4, got 0\.5"),
        (
            {"step": 1, "kind": "decoder_self", "attend_to": 2},
            r"attend_to must be a key position in 0\.\.1, got 2",
        ),  # fmt: skip
    ],
)
def test_what_if_refuses_a_step_layer_head_or_position_out_of_range(reverse_ckpt, kwargs, match):
    before = reverse_ckpt.predict(TEXT)
    with pytest.raises(InputError, match=match) as exc:
        what_if(reverse_ckpt, TEXT, **kwargs)
    one_line(exc)
    assert reverse_ckpt.predict(TEXT) == before  # the shared model was not left edited


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"step": 6}, r"step must be in 0\.\.5 \(the output has 6 tokens\), got 6"),
        ({"step": 0.5}, r"step must be an integer in 0\.\.5"),
        ({"step": 0, "versus": 30}, r"versus must be a token id in 0\.\.29 other than the "),
        ({"step": 0, "versus": -2}, r"versus must be a token id in 0\.\.29 .*got -2"),
        ({"step": 0, "versus": 1.5}, r"versus must be a token id in 0\.\.29 .*got 1\.5"),
        ({"step": 0, "versus": True}, r"versus must be a token id in 0\.\.29 .*got True"),
        ({"step": 0, "tokens": [99, 2]}, r"tokens must be ids in 0\.\.29, got 99"),
    ],
)
def test_attribute_refuses_a_step_or_token_out_of_range(reverse_ckpt, kwargs, match):
    pytest.importorskip("captum")
    from attnviz.analysis.attribution import attribute

    with pytest.raises(InputError, match=match) as exc:
        attribute(reverse_ckpt, TEXT, n_steps=2, **kwargs)
    one_line(exc)


def test_attribute_refuses_versus_equal_to_the_explained_token(reverse_ckpt):
    pytest.importorskip("captum")
    from attnviz.analysis.attribution import attribute

    chosen = reverse_ckpt.predict_details(TEXT).tokens[0]
    with pytest.raises(InputError, match=rf"other than the explained {chosen}, got {chosen}"):
        attribute(reverse_ckpt, TEXT, 0, n_steps=2, versus=chosen)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("", "the reference is empty: type the output you expect"),
        (" \t", "the reference is empty"),
        ([], r"the reference is empty: give target ids \(the end id is added\)"),
        ([3, 30], r"target id 30 is outside the vocabulary 0\.\.29"),
        ([-1], r"target id -1 is outside the vocabulary 0\.\.29"),
        (["x"], r"target id must be an integer id in 0\.\.29, got 'x'"),
        ([1.5], r"target id must be an integer id in 0\.\.29, got 1\.5"),
        (7, "the reference must be text or a list of target ids, got 7"),
        (None, "the reference must be text or a list of target ids, got None"),
    ],
)
def test_score_refuses_an_empty_or_unknown_reference(reverse_ckpt, target, match):
    with pytest.raises(InputError, match=match) as exc:
        reverse_ckpt.score(TEXT, target)
    one_line(exc)


def test_app_force_names_the_steps_it_can_force_and_keeps_the_state(models_dir):
    from attnviz.app import session

    started = session.start(session.new_state(str(models_dir / "reverse")), TEXT).state
    state = session.step(started).state  # one token decoded: force at step 1 or 2
    for token, at, expected in [
        (30, None, "token 30 is outside the vocabulary 0..29"),
        ("a", None, "must be an integer id in 0..29"),
        (3, 5, "can force a token at step 1..2, got 5"),
        (3, "x", "not a step: 'x'; can force a token at step 1..2"),
    ]:
        view = session.force(state, token, at)
        assert expected in view.message.replace("&#x27;", "'"), view.message
        assert view.state.tokens == state.tokens and view.state.step == state.step
