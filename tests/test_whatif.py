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
