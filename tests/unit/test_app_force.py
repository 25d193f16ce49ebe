"""Forcing a token in the step view, without a browser: the session against a stepper
driven by hand."""

from __future__ import annotations

import re

import numpy as np
import torch

from attnviz.app import session, store
from attnviz.app.panels import reference
from attnviz.decode.greedy import GreedyStepper

TEXT = "helloworld"


def _stepper(ckpt) -> GreedyStepper:
    cfg = ckpt.config
    src = torch.tensor(ckpt.encode_source(TEXT).ids, dtype=torch.long)
    return GreedyStepper(ckpt.model, src, cfg.bos_id, cfg.eos_id, rules=ckpt.rules)


def _stepped(models_dir, n: int) -> session.SessionState:
    s = session.start(session.new_state(str(models_dir / "reverse")), TEXT).state
    for _ in range(n):
        s = session.step(s).state
    return s


def _runner_up(ckpt, state) -> int:
    """The second most likely token of the shown step (not the argmax)."""
    st = _stepper(ckpt)
    st.sync(state.tokens[: state.step - 1])
    return int(st.step().probs.argsort(descending=True)[1])


def test_force_replaces_the_shown_token_and_later_steps_are_greedy(models_dir):
    ckpt = store.get_checkpoint(str(models_dir / "reverse"), "cpu")
    s = _stepped(models_dir, 3)
    alt = _runner_up(ckpt, s)
    view = session.force(s, alt)
    assert view.state.tokens[:3] == [*s.tokens[:2], alt] and view.state.step == 3
    assert view.state.forced == [2] and view.payload["forced"] == [2]
    ref = _stepper(ckpt)  # by hand: two greedy steps, the forced one, then greedy to the end
    ref.step(), ref.step()
    forced = ref.step(token=alt)
    assert view.info["prob"] == round(float(forced.prob), 6)
    chosen = [row for row in view.payload["topk"][-1] if row[2]]
    assert [row[3] for row in chosen] == [alt]  # the chosen row carries the forced id
    s2 = session.run(view.state).state
    assert s2.tokens == ref.run() and s2.forced == [2]
    out = session.step(view.state)  # one greedy Step from the new prefix
    assert out.state.tokens == ref.tokens[:4]


def test_back_undoes_a_forced_token(models_dir):
    ckpt = store.get_checkpoint(str(models_dir / "reverse"), "cpu")
    s = _stepped(models_dir, 3)
    greedy = list(s.tokens)
    forced = session.force(s, _runner_up(ckpt, s)).state
    back = session.back(forced).state
    assert back.step == 2 and back.forced == [] and back.tokens == greedy[:2]
    again = session.step(back).state  # greedy again, not the forced token replayed
    assert again.tokens == greedy and again.forced == []


def test_scrub_and_resync_keep_the_forced_mark(models_dir):
    ckpt = store.get_checkpoint(str(models_dir / "reverse"), "cpu")
    s = _stepped(models_dir, 2)
    f = session.run(session.force(s, _runner_up(ckpt, s)).state).state
    scrubbed = session.goto(f, 1).state  # the slider keeps the history and the mark
    assert scrubbed.forced == [1] and scrubbed.tokens == f.tokens
    assert session.goto(scrubbed, len(f.tokens)).payload["forced"] == [1]
    view = session.render(session.SessionState(**{**vars(f), "page_rows": -1}))
    assert view.payload["forced"] == [1] and view.state.tokens == f.tokens
    assert session.reset(f).state.forced == []


def test_force_bad_input_is_one_line_and_keeps_the_state(models_dir):
    ckpt = store.get_checkpoint(str(models_dir / "reverse"), "cpu")
    vocab = ckpt.config.tgt_vocab_size
    s = _stepped(models_dir, 2)
    for bad in (vocab, -1, "x"):
        view = session.force(s, bad)
        assert view.state == s and "\n" not in view.message
        assert f"0..{vocab - 1}" in view.message
    done = session.run(s).state
    view = session.force(done, 5, at=done.step + 1)  # after the decode finished
    assert view.state == done and f"1..{done.step}" in view.message
    assert "complete" in view.message and "\n" not in view.message
    view = session.force(s, 5, at=9)  # beyond the next step
    assert view.state == s and "1..3" in view.message


def test_huge_ids_and_long_values_are_one_short_line_and_keep_the_state(models_dir):
    """A 5,000-digit id or step and 100,000-character values (int() refuses over 4,300
    digits; float() of them is inf): one line, the value cut, nothing echoed whole."""
    s = _stepped(models_dir, 2)
    cases = [("9" * 5000, None), ("x" * 100_000, None), (3, "9" * 5000), (3, "y" * 100_000),
             (3, 10**30)]  # fmt: skip
    for token, at in cases:
        view = session.force(s, token, at)
        assert view.state == s and view.message.startswith("⚠"), view.message[:80]
        assert "\n" not in view.message and len(view.message) < 200
    for position in ("9" * 5000, "inf", "z" * 100_000):
        view = session.goto(s, position)
        assert view.state == s and "not a step" in view.message and len(view.message) < 200


# -- the Reference box -----------------------------------------------------------------------------
def _chips(strip: str) -> list[tuple[float, int, bool]]:
    """(prob, rank, marked) of each chip of a reference strip."""
    chips = re.findall(
        r'<span class="ref-tok( diverge)?" data-prob="([^"]+)" data-rank="(\d+)"', strip
    )
    return [(float(p), int(r), bool(d)) for d, p, r in chips]


def test_reference_strip_is_the_checkpoint_score(models_dir):
    ckpt = store.get_checkpoint(str(models_dir / "reverse"), "cpu")
    s = session.run(session.new_state(str(models_dir / "reverse")), TEXT).state
    assert reference.default_reference(s) == "dlrowolleh"  # the task's answer pre-fills it
    for ref in ("dlrowolleh", "dlrowollhe"):
        view = reference.score(s, ref)
        want = ckpt.score(TEXT, ref)
        chips = _chips(view.html)
        assert [r for _, r, _ in chips] == want.ranks
        assert np.allclose([p for p, _, _ in chips], want.probs, atol=1e-6)
        marked = [i for i, (_, _, d) in enumerate(chips) if d]
        assert marked == ([] if want.first_divergence is None else [want.first_divergence])
        z = np.asarray(view.figure.data[0].z, dtype=float)  # [Tt, Ts]: last layer, head mean
        assert np.allclose(z, want.trace.numpy("cross", 1)[0].mean(0), atol=1e-6)
    # "he" swapped: at h, the 9th token; steps count from 1 as in the step view
    assert want.first_divergence == 8 and "first divergence at step 9" in view.message


def test_reference_bad_input_is_one_line(models_dir):
    s = session.run(session.new_state(str(models_dir / "reverse")), TEXT).state
    for bad, words in (("", "empty"), ("  ", "empty"), ("a" * 500, "at most")):
        view = reference.score(s, bad)
        assert view.message.startswith("⚠") and words in view.message
        assert "\n" not in view.message and view.html == "" and view.figure is None
    fresh = session.new_state(str(models_dir / "reverse"))
    assert reference.score(fresh, "abc").message.startswith("⚠")


def test_reference_follows_the_layer_and_head_the_page_shows(models_dir):
    """The page's layer/head menus tell the session (hidden #view-btn -> remember_view): the
    Reference heatmap draws that layer and head, not the default last layer's mean."""
    ckpt = store.get_checkpoint(str(models_dir / "reverse"), "cpu")
    s = session.run(session.new_state(str(models_dir / "reverse")), TEXT).state
    s = session.remember_view(s, "cross 0 H2")
    view = reference.score(s, "dlrowolleh")
    z = np.asarray(view.figure.data[0].z, dtype=float)  # [Tt, Ts]
    want = ckpt.score(TEXT, "dlrowolleh").trace.numpy("cross", 0)[0, 2]
    assert np.allclose(z, want, atol=1e-6) and "layer 0" in view.figure.layout.title.text
    for stale in (
        "",
        "cross",
        "cross x H1",
        "nope 0 H1",
        "cross 0 Hx",
        "cross 0 x2",
        "cross 0 <b>",
    ):
        assert session.remember_view(s, stale) == s  # nothing but a view the page can name
