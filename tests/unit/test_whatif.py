"""analysis.what_if against a decode written here with ReplaceWeights on a full forward pass."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.analysis import what_if


def independent(ckpt, text, step, kind, layer, heads, attend_to):
    """The what-if without any stepper: a full teacher-forced pass over the prefix with the
    last query row replaced, then greedy decoding (cache-free) from the new prefix."""
    cfg = ckpt.config
    before = ckpt.stepper(text).run()
    src = torch.tensor([ckpt.encode_source(text).ids])

    def one_hot(w):  # [B, H, Tq, Tk]: only the last query row (the edited step)
        out = w.clone()
        out[:, heads, -1, :] = 0
        out[:, heads, -1, attend_to] = 1
        return out

    tgt = torch.tensor([[cfg.bos_id, *before[:step]]])
    with (
        torch.no_grad(),
        attnviz.record(ckpt.model, [attnviz.ReplaceWeights(kind, layer, one_hot)]),
    ):
        chosen = int(ckpt.model(src, tgt)[0, -1].argmax())
    prefix = [*before[:step], chosen]
    while prefix[-1] != cfg.eos_id and len(prefix) < ckpt.stepper(text).max_len:
        with torch.no_grad():
            logits = ckpt.model(src, torch.tensor([[cfg.bos_id, *prefix]]))[0, -1]
        prefix.append(int(logits.argmax()))
    return before, prefix


@pytest.mark.parametrize(
    "step,kind,layer,heads,attend_to",
    [(0, "cross", 1, None, 0), (3, "cross", 0, [0, 2], 1), (2, "decoder_self", 1, [1], 0)],
)
def test_what_if_equals_an_independent_replace_weights_decode(
    reverse_ckpt, step, kind, layer, heads, attend_to
):
    w = what_if(reverse_ckpt, "helloworld", step, kind, layer, heads, attend_to)
    all_heads = list(range(reverse_ckpt.config.n_heads)) if heads is None else heads
    before, after = independent(reverse_ckpt, "helloworld", step, kind, layer, all_heads, attend_to)
    assert w.before.tokens == before
    assert w.after.tokens == after
    assert w.after.tokens[:step] == w.before.tokens[:step]
    assert w.edited_attention[all_heads, attend_to].tolist() == [1.0] * len(all_heads)
    assert len(w.after.probs) == len(w.after.tokens)


def test_forcing_the_first_step_onto_the_first_letter_changes_the_output(reverse_ckpt):
    w = what_if(reverse_ckpt, "helloworld", 0, "cross", 1, None, attend_to=0)
    assert w.before.text == "dlrowolleh"
    assert w.after.tokens != w.before.tokens and 0 in w.changed
    assert w.after.text[0] == "h"


def test_what_if_refuses_out_of_range_in_one_line(reverse_ckpt):
    with pytest.raises(attnviz.InputError, match=r"step must be in 0\.\.10"):
        what_if(reverse_ckpt, "helloworld", 11)
    with pytest.raises(attnviz.InputError, match=r"attend_to must be a key position in 0\.\.9"):
        what_if(reverse_ckpt, "helloworld", 0, attend_to=10)
    with pytest.raises(attnviz.InputError, match=r"heads must be in 0\.\.3"):
        what_if(reverse_ckpt, "helloworld", 0, heads=[7])
    with pytest.raises(attnviz.InputError, match="layer must be"):
        what_if(reverse_ckpt, "helloworld", 0, layer=5)
    with pytest.raises(attnviz.InputError, match="overrides 'cross' or 'decoder_self'"):
        what_if(reverse_ckpt, "helloworld", 0, kind="encoder_self")


def independent_fed(ckpt, text, fed, step, kind, layer, heads, attend_to):
    """The what-if on a fed prefix, without any stepper: ``fed[:step]`` fed by hand, greedy on
    from it (before); the last query row replaced at ``step``, greedy on (after)."""
    cfg = ckpt.config
    src = torch.tensor([ckpt.encode_source(text).ids])
    max_len = ckpt.stepper(text).max_len

    def greedy_from(prefix):
        prefix = list(prefix)
        while prefix[-1] != cfg.eos_id and len(prefix) < max_len:
            with torch.no_grad():
                logits = ckpt.model(src, torch.tensor([[cfg.bos_id, *prefix]]))[0, -1]
            prefix.append(int(logits.argmax()))
        return prefix

    def one_hot(w):  # [B, H, Tq, Tk]: only the last query row (the edited step)
        out = w.clone()
        out[:, heads, -1, :] = 0
        out[:, heads, -1, attend_to] = 1
        return out

    tgt = torch.tensor([[cfg.bos_id, *fed[:step]]])
    with torch.no_grad():
        plain = int(ckpt.model(src, tgt)[0, -1].argmax())
        with attnviz.record(ckpt.model, [attnviz.ReplaceWeights(kind, layer, one_hot)]):
            edited = int(ckpt.model(src, tgt)[0, -1].argmax())
    return greedy_from([*fed[:step], plain]), greedy_from([*fed[:step], edited])


def _forced_prefix(ckpt, text, at):
    """The greedy decode with the runner-up fed at position ``at`` instead of the argmax, then
    greedy on (as the step view holds it after a force and Steps)."""
    st = ckpt.stepper(text)
    for _ in range(at):
        st.step()
    runner_up = int(torch.argsort(st.step().probs, descending=True)[1])
    st.back(at)
    st.step(token=runner_up)
    return st.run()


@pytest.mark.parametrize(
    "at,step,kind,layer,heads,attend_to",
    [(1, 3, "cross", 1, None, 0), (0, 2, "cross", 0, [0, 2], 5), (2, 4, "decoder_self", 1, [1], 2)],
)
def test_what_if_on_a_forced_prefix_equals_a_decode_fed_by_hand(
    reverse_ckpt, at, step, kind, layer, heads, attend_to
):
    fed = _forced_prefix(reverse_ckpt, "helloworld", at)
    greedy = reverse_ckpt.stepper("helloworld").run()
    assert fed[at] != greedy[at]
    w = what_if(reverse_ckpt, "helloworld", step, kind, layer, heads, attend_to, tokens=fed)
    all_heads = list(range(reverse_ckpt.config.n_heads)) if heads is None else heads
    before, after = independent_fed(
        reverse_ckpt, "helloworld", fed, step, kind, layer, all_heads, attend_to
    )
    assert w.before.tokens == before and w.after.tokens == after
    assert w.before.tokens[:step] == w.after.tokens[:step] == fed[:step]
    assert w.before.tokens[at] != greedy[at]  # the forced token is in both sides
    assert w.edited_attention[all_heads, attend_to].tolist() == [1.0] * len(all_heads)
    assert len(w.before.probs) == len(before) and len(w.after.probs) == len(after)


def test_what_if_with_the_greedy_prefix_as_tokens_is_the_default(reverse_ckpt):
    greedy = reverse_ckpt.stepper("helloworld").run()
    a = what_if(reverse_ckpt, "helloworld", 3, "cross", 0, [1], 4)
    b = what_if(reverse_ckpt, "helloworld", 3, "cross", 0, [1], 4, tokens=greedy[:3])
    assert (a.before.tokens, a.after.tokens) == (b.before.tokens, b.after.tokens)
    assert a.after.probs == pytest.approx(b.after.probs)


def test_what_if_refuses_a_bad_prefix_in_one_line(reverse_ckpt):
    eos = reverse_ckpt.config.eos_id
    with pytest.raises(attnviz.InputError, match=r"step must be in 0\.\.2 \(tokens holds 2 ids\)"):
        what_if(reverse_ckpt, "helloworld", 3, tokens=[5, 6])
    with pytest.raises(attnviz.InputError, match=r"tokens\[1\] = 99 is outside the vocabulary"):
        what_if(reverse_ckpt, "helloworld", 2, tokens=[5, 99])
    with pytest.raises(attnviz.InputError, match=r"tokens\[0\] is not a token id"):
        what_if(reverse_ckpt, "helloworld", 1, tokens=["a"])
    with pytest.raises(attnviz.InputError, match=r"tokens\[1\] is the end token.*0\.\.1"):
        what_if(reverse_ckpt, "helloworld", 3, tokens=[5, eos, 6])
    with pytest.raises(attnviz.InputError, match="a list of target ids"):
        what_if(reverse_ckpt, "helloworld", 1, tokens="abc")
