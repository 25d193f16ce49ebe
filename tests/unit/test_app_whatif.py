"""The step view's what-if panel and the Attribution tab's "why this token and not that one",
through the session functions (and the named endpoints, with gradio_client)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from helpers import reverse_fixture, stepped_state  # noqa: F401 (fixture: ckpt)

from attnviz.analysis import attribute, what_if
from attnviz.app import session
from attnviz.app import state as app_stamps
from attnviz.app.panels import labs
from attnviz.app.panels import whatif as whatif_view

TEXT = "helloworld"


def _stepped(models_dir, n: int) -> session.SessionState:
    return stepped_state(models_dir / "reverse", TEXT, n)


def _recorded_cross(ckpt, n: int, layer: int) -> torch.Tensor:
    """``[H, Ts]``: the cross-attention row of step ``n`` (1-based) of a stepper run here."""
    st = ckpt.stepper(TEXT)
    for _ in range(n - 1):
        st.step()
    return st.step().attention["cross", layer]


# -- what-if ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer,heads,pos", [("L1", [], 0), ("L0", ["H0", "H2"], 7), (1, [3], 4)])
def test_whatif_panel_equals_what_if_called_directly(models_dir, ckpt, layer, heads, pos):
    s = _stepped(models_dir, 3)
    view = whatif_view.run(s, layer, heads, str(pos))
    layer_i = int(str(layer).lstrip("L"))
    hs = [int(str(h).lstrip("H")) for h in heads] or None
    direct = what_if(ckpt, TEXT, 2, kind="cross", layer=layer_i, heads=hs, attend_to=pos)
    got = view.result
    assert (got.step, got.layer, got.heads, got.attend_to) == (2, layer_i, direct.heads, pos)
    assert got.before.tokens == direct.before.tokens and got.after.tokens == direct.after.tokens
    assert got.after.probs == pytest.approx(direct.after.probs)
    assert got.changed == direct.changed
    # the page: the compare line, every changed position marked with the non-colour marker
    assert "av-wi-compare" in view.html and direct.after.text in view.html
    marked = {
        int(i) for i in re.findall(r'class="av-wi-tok changed[^"]*" data-pos="(\d+)"', view.html)
    }
    assert marked == set(direct.changed)
    assert view.html.count(whatif_view.CHANGED_MARK) >= 2 * len(direct.changed)
    assert f'data-src-pos="{pos}"' in view.strip and "av-wi-chosen" in view.strip
    assert view.message and not view.message.startswith("⚠")


def test_a_whatif_that_changes_the_output_marks_it(models_dir, ckpt):
    s = _stepped(models_dir, 1)
    view = whatif_view.run(s, "L1", [], 0)  # step 1, every head onto "h": the output starts with h
    assert view.result.after.text.startswith("h") and 0 in view.result.changed
    titles = re.findall(r'data-pos="0" title="([^"]*)"', view.html)
    # each side's probability on hover, of both sides
    assert len(titles) == 2 and all("original" in t and "what-if" in t for t in titles)
    p = view.result.after.probs[0]
    assert f"p = {p:.3f}" in titles[1]


def test_the_strip_is_shaded_by_the_recorded_row(models_dir, ckpt):
    s = _stepped(models_dir, 4)
    view = whatif_view.strip(s, "L0", ["H1", "H3"])
    want = _recorded_cross(ckpt, 4, 0)[[1, 3]].mean(0).numpy()  # [Ts]
    np.testing.assert_allclose(view.row, want, rtol=1e-6, atol=1e-7)
    positions = [int(i) for i in re.findall(r'data-src-pos="(\d+)"', view.strip)]
    assert positions == list(range(len(TEXT)))
    tips = re.findall(r"attention (\d\.\d{3})", view.strip)
    assert [float(t) for t in tips] == pytest.approx(want, abs=5e-4)
    assert "heads 1, 3 (mean)" in view.strip
    one = whatif_view.strip(s, "L0", ["H2"])  # one head is that head, not a mean
    assert "· head 2: click" in one.strip and "(mean)" not in one.strip


@pytest.mark.parametrize(
    "args,words",
    [
        (("L7", [], 0), "layer must be one of [0, 1]"),
        (("L1", ["H4"], 0), "head must be in 0..3"),
        (("L1", ["top"], 0), "not a head"),
        (("L1", [], 10), "source position must be in 0..9"),
        (("L1", [], "-1"), "source position must be in 0..9"),
        (("L1", [], "x"), "not a source position"),
    ],
)
def test_whatif_bad_input_is_one_line_and_keeps_the_state(models_dir, args, words):
    s = _stepped(models_dir, 2)
    before = session.SessionState(**vars(s))
    view = whatif_view.run(s, *args)
    assert view.message.startswith("⚠") and words in view.message.replace("&#x27;", "'")
    assert "\n" not in view.message and "<br>" not in view.message
    assert view.result is None and view.html == ""
    assert s == before  # a what-if never changes the decode


def test_whatif_needs_a_step(models_dir):
    s = session.start(session.new_state(str(models_dir / "reverse")), TEXT).state
    assert "take at least one Step" in whatif_view.run(s, "L1", [], 0).message


def test_whatif_after_a_forced_step_starts_from_the_sessions_prefix(models_dir, ckpt):
    s = _stepped(models_dir, 1)
    alt = int(np.argsort(-_recorded_cross_probs(ckpt, 2))[1])
    s = session.force(session.step(s).state, alt).state  # step 2 forced
    s = session.step(session.step(s).state).state  # step 4 shown
    assert s.forced == [1] and s.step == 4
    before = session.SessionState(**vars(s))
    view = whatif_view.run(s, "L0", ["H1"], "2")
    assert not view.message.startswith("⚠") and view.result is not None
    direct = what_if(ckpt, TEXT, 3, "cross", 0, [1], 2, tokens=s.tokens[:3])
    assert view.result.before.tokens == direct.before.tokens
    assert view.result.after.tokens == direct.after.tokens
    # the original is what the step view decodes on from its prefix (the forced token kept)
    st = ckpt.stepper(TEXT)
    st.sync(s.tokens[:3])
    assert view.result.before.tokens == st.run() and view.result.before.tokens[1] == alt
    assert view.result.after.tokens[:3] == s.tokens[:3]
    # the forced position is marked in both rows, with its non-colour marker, and said so
    forced_cells = re.findall(r'class="av-wi-tok[^"]* forced" data-pos="(\d+)"', view.html)
    assert forced_cells == ["1", "1"]
    assert view.html.count(whatif_view.FORCED_MARK) >= 3 and "step 2 forced" in view.html
    assert s == before  # the session's decode is untouched
    # forcing the step shown: both sides show the model's own choice there, and say so
    here = session.force(_stepped(models_dir, 2), alt).state
    shown = whatif_view.run(here, "L1", [], 0)
    assert shown.result is not None and "step 2 was forced" in shown.message
    assert 'forced" data-pos' not in shown.html


def _recorded_cross_probs(ckpt, n: int) -> np.ndarray:
    st = ckpt.stepper(TEXT)
    for _ in range(n - 1):
        st.step()
    return st.step().probs.numpy()


def test_whatif_follows_the_step_only_while_open():
    s = session.SessionState(model="m", epoch=1, step=3)
    stamps = {"whatif": app_stamps.panel_stamps(s)["whatif"]}
    nxt = session.SessionState(model="m", epoch=1, step=4)
    assert app_stamps.stale_panels(stamps, nxt) == {"whatif"}
    shown = app_stamps.follow(stamps, nxt, "step", frozenset({"whatif"}))
    assert (
        shown.rerun == {"whatif"}
        and shown.stamps["whatif"] == app_stamps.panel_stamps(nxt)["whatif"]
    )
    closed = app_stamps.follow(stamps, nxt, "step")
    assert closed.clear == {"whatif"} and "whatif" not in closed.stamps
    elsewhere = app_stamps.follow(stamps, nxt, "mask", frozenset({"whatif"}))
    assert elsewhere.clear == {"whatif"}
    new_input = session.SessionState(model="m", epoch=2, step=3)
    assert app_stamps.stale_panels(stamps, new_input) == {"whatif"}


# -- why this token and not that one --------------------------------------------------------------
def test_contrast_equals_attribute_with_versus(models_dir, ckpt):
    s = _stepped(models_dir, 3)
    alt = int(labs.alternatives(s)[1])
    view = labs.contrast(s, str(alt), "L1", "H2", n_steps=16)
    direct = attribute(ckpt, TEXT, 2, tokens=s.tokens[:3], n_steps=16, versus=alt)
    np.testing.assert_allclose(view.attribution.ig_src, direct.ig_src, rtol=1e-5, atol=1e-6)
    assert view.attribution.contrast == pytest.approx(direct.contrast)
    fig = view.figures[0]
    np.testing.assert_allclose(fig.data[0].y, direct.ig_src, rtol=1e-5, atol=1e-6)
    # the attention rows: step 4's cross-attention (layer 1, head 2) after each token, by hand
    for token, trace in zip((s.tokens[2], alt), fig.data[1:], strict=True):
        st = ckpt.stepper(TEXT)
        st.sync([*s.tokens[:2], token])
        want = st.step().attention["cross", 1][2].numpy()
        # the app's steppers multiply weight copies (float sums in another order)
        np.testing.assert_allclose(trace.y, want, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(view.next_rows[token], want, rtol=1e-5, atol=1e-7)
    assert "next" in view.message and "step 4" in view.message


def test_the_default_alternative(models_dir, ckpt):
    s = _stepped(models_dir, 3)
    probs = _recorded_cross_probs(ckpt, 3)
    order = np.argsort(-probs, kind="stable")
    choices, default = labs.alternatives(s)
    assert default == str(order[1])  # not forced: the runner-up
    assert str(order[0]) not in [v for _, v in choices]  # the chosen token is no alternative
    forced = session.force(s, int(order[3])).state
    assert labs.alternatives(forced)[1] == str(order[0])  # forced: the model's own argmax
    view = labs.contrast(forced, None, "L1", "mean", n_steps=8)
    assert view.versus == int(order[0])


def test_contrast_after_an_end_token_has_no_next_row(models_dir, ckpt):
    s = session.run(_stepped(models_dir, 0)).state  # the last step chose <eos>
    view = labs.contrast(s, None, "L1", "mean", n_steps=8)
    assert view.next_rows[s.tokens[-1]] is None and "decoding ends there" in view.message
    assert len(view.figures[0].data) == 2  # the attribution and the alternative's row


@pytest.mark.parametrize(
    "versus,layer,head,words",
    [
        ("999", "L1", "mean", "outside the vocabulary 0..29"),
        ("abc", "L1", "mean", "must be an integer id"),
        (None, "L9", "mean", "layer must be one of [0, 1]"),
        (None, "L1", "H8", "head must be in H0..H3"),
    ],
)
def test_contrast_bad_input_is_one_line(models_dir, versus, layer, head, words):
    s = _stepped(models_dir, 2)
    view = labs.contrast(s, versus, layer, head, n_steps=4)
    assert view.message.startswith("⚠") and words in view.message and "\n" not in view.message
    assert view.attribution is None
    chosen = labs.contrast(s, str(s.tokens[1]), "L1", "mean", n_steps=4)
    assert "is the one chosen at step 2" in chosen.message
