"""The app on a decoder-only model (models/induction), through the session layer and the
page's controls (no browser): the step view's payload carries the prompt's own rows, the
places that read an encoder or cross-attention are hidden with one sentence each, the labs
run on the one sequence (decoder self-attention heads only; faithfulness says why not in one
sentence), and switching model kinds restores every part (tests/browser/test_app_decoder_only_browser.py draws the same in Chromium)."""

from __future__ import annotations

import base64
import dataclasses

import numpy as np
from helpers import INDUCTION_PROMPT as PROMPT
from helpers import induction_fixture, stepped_fixture  # noqa: F401 (fixtures)

import attnviz
from attnviz.app import inputs, session, stepfigures
from attnviz.app.inputs import NOT_YET, NOTES
from attnviz.app.panels import alignment, labs, reference
from attnviz.app.panels import beam as beamview
from attnviz.app.panels import compare as compare_lab
from attnviz.app.panels import playback as playback_panel
from attnviz.app.panels import whatif as whatif_view
from attnviz.app.state import describe, head_sites


def _page():
    import gradio as gr

    from attnviz.app import ui

    with gr.Blocks():
        return ui.Page(session.new_state(None, "cpu"))


def test_the_header_and_the_input_read_for_a_decoder_only_model(induction, models_dir):
    s = session.new_state(induction)
    assert "decoder-only, 2 layers, 4 heads" in describe(s) and "encoder" not in describe(s)
    rev = session.new_state(str(models_dir / "reverse"))
    assert "2 encoder + 2 decoder layers" in describe(rev)
    ckpt = attnviz.load_checkpoint(induction)
    assert inputs.input_label(ckpt) == "Prompt"
    assert inputs.input_label(attnviz.load_checkpoint(models_dir / "reverse")) == "Input"


def test_the_payload_holds_prompt_rows_then_step_rows_as_recorded(induction):
    view = session.step(session.new_state(induction), PROMPT)
    view = session.step(view.state)
    view = session.render(dataclasses.replace(view.state, page_rows=-1))  # all it holds
    p = view.payload
    ckpt = attnviz.load_checkpoint(induction)
    prompt = ckpt.encode_source(PROMPT).pieces
    assert p["arch"] == "decoder-only" and p["kind_note"] == NOTES["step"]
    assert p["layers"] == {"encoder_self": 0, "decoder_self": 2, "cross": 0}
    assert p["encoder"] == [] and p["rows"]["cross"] == []
    assert p["pre"] == len(prompt) - 1 and p["pre_labels"] == prompt[:-1]
    assert p["bos"] == prompt[-1]
    stepper = ckpt.stepper(PROMPT)
    stepper.step()
    stepper.step()
    trace = stepper.trace()
    pre, heads = p["pre"], ckpt.config.n_heads
    for layer in (0, 1):
        full = trace.numpy("decoder_self", layer)[0]  # [H, P' + 2, P' + 2]
        w = np.frombuffer(base64.b64decode(p["prompt_rows"][layer]["w"]), "<f4")
        rows = np.split(w, np.cumsum([heads * (r + 1) for r in range(pre)])[:-1])
        for r, row in enumerate(rows):  # row r: its r + 1 keys, every head
            np.testing.assert_allclose(row.reshape(heads, r + 1), full[:, r, : r + 1], atol=1e-6)
        w = np.frombuffer(base64.b64decode(p["rows"]["decoder_self"][layer]["w"]), "<f4")
        first, second = np.split(w, [heads * (pre + 1)])
        # the app's stepper multiplies weight copies (the float sums in another order)
        np.testing.assert_allclose(
            first.reshape(heads, pre + 1), full[:, pre, : pre + 1], atol=1e-6
        )
        np.testing.assert_allclose(second.reshape(heads, pre + 2), full[:, pre + 1], atol=1e-6)
    figs = stepfigures.figures_of(view.state, ckpt, trace, stepper.steps)
    assert len(figs["decoder_self"].data[0].y) == pre + 2  # prompt + output rows


def test_hidden_places_and_labs_say_why_in_one_sentence(stepped):
    for text in [*NOTES.values(), *NOT_YET.values()]:
        assert text.count(". ") == 0 and text.endswith(".")  # one sentence each
    assert whatif_view.strip(stepped).message.endswith(_esc(NOTES["whatif"]))
    assert alignment.faithfulness_view(stepped).message.endswith(_esc(NOT_YET["faith"]))
    cur = alignment.view(stepped)
    assert _esc(NOTES["align"]) in cur.message
    assert set(NOT_YET) == {"faith"}  # every other lab runs a decoder-only model
    assert playback_panel.playback(stepped, 3, "L1", "mean").figures  # playback runs it


def test_ablation_lists_and_ranks_decoder_self_heads_only(stepped):
    sites = [s for k in ("encoder_self", "decoder_self", "cross") for s in head_sites(stepped, k)]
    assert sites == [f"decoder_self L{ly} H{h}" for ly in (0, 1) for h in range(4)]
    view = labs.ablation(stepped, ["decoder_self L1 H0", "decoder_self L1 H1",
                                   "decoder_self L1 H2", "decoder_self L1 H3"])  # fmt: skip
    assert not view.message.startswith("⚠") and "**changed**" in view.message
    assert list(view.figures[0].layout.xaxis.ticktext)[:3] == list(PROMPT[:3])  # its output
    ranked = labs.rank_heads(stepped, n_inputs=2)
    assert not ranked.message.startswith("⚠")
    assert {row[0] for row in ranked.rows} == set(sites)
    assert set(ranked.figures[0].layout.yaxis.ticktext) <= set(sites)


def test_attribution_compares_with_self_attention_on_the_prompt(stepped, induction):
    view = labs.attribution(stepped, "L1", n_steps=8)
    assert not view.message.startswith("⚠") and "`ig~self L1`" in view.message
    assert "cross" not in view.message
    src, tgt = view.figures
    prompt = attnviz.load_checkpoint(induction).encode_source(PROMPT).pieces
    assert len(src.data[0].x) == len(prompt) and "prompt tokens" in src.layout.title.text
    assert [t.name for t in src.data] == [
        "Integrated Gradients", "self-attention on the prompt L1 (mean of heads)"
    ]  # fmt: skip
    assert "after the prompt" in tgt.layout.title.text
    vs = labs.contrast(stepped, None, "L1", "mean", n_steps=8)
    assert not vs.message.startswith("⚠") and "self-attention on the prompt" in vs.message
    assert all(r is None or len(r) == len(prompt) for r in vs.next_rows.values())
    assert vs.figures[0].layout.xaxis2.title.text == "prompt token"


def test_compare_draws_the_decoder_self_grid_alone(stepped):
    view = compare_lab.compare(stepped, "induction", "cross", "L0", "H0")  # cross: not here
    assert not view.message.startswith("⚠") and "No head differs" in view.message
    assert [g.layout.title.text for g in view.grids] == ["Decoder masked self-attention: A vs B"]
    assert (
        'data-kind="decoder_self"' in view.grid_html and 'data-kind="cross"' not in view.grid_html
    )
    assert view.head.layout.title.text.startswith("Decoder masked self-attention · layer 0")
    assert compare_lab.kind_of(stepped, "cross") == "decoder_self"
    other = compare_lab.compare(stepped, "reverse")
    assert other.message.startswith("⚠") and "decoder-only" in other.message


def test_mask_lab_shows_the_causal_self_attention_over_prompt_and_reference(stepped):
    for causal in (False, True):
        view = labs.mask_lab(stepped, causal, False, [], "cross", None, "mean")
        assert len(view.figures) == 2 and not view.message.startswith("⚠")
        assert "self-attention" in view.figures[0].layout.title.text
    refused = labs.mask_lab(stepped, False, False, ["1: q"])
    assert refused.message.startswith("⚠") and "blocking prompt tokens" in refused.message


def test_reference_and_beam_node_draw_the_scored_sequence(stepped, induction):
    v = reference.score(stepped, PROMPT)
    assert v.scored is not None and v.scored.first_divergence is None
    assert "causal self-attention" in v.figure.layout.title.text
    n = len(attnviz.load_checkpoint(induction).encode_source(PROMPT).ids)
    assert len(v.figure.data[0].x) == n + len(v.scored.ids) - 1  # prompt + reference keys
    b = beamview.beam_view(stepped, 3)
    node = beamview.beam_node(stepped, b.panel, 4)
    assert node.figure is not None and not node.message.startswith("⚠")
    forced = session.force(stepped, 5)
    assert not forced.message.startswith("⚠") and forced.state.forced == [2]
    back = session.back(forced.state)
    assert back.state.forced == [] and session.run(back.state).state.done


def test_switching_kinds_renews_every_hidden_part(stepped, models_dir):
    page = _page()
    on_dec = page.controls(stepped)
    rev = session.choose_model(stepped, "reverse", "helloworld").state
    on_rev = page.controls(rev)
    back = page.controls(session.choose_model(rev, "induction", PROMPT).state)
    for place, note in page.kind_notes.items():  # "decode", "reference": encoder-only's
        want = NOTES.get(place) or NOT_YET.get(place, "")
        assert on_dec[note].value == want and on_dec[note].visible is bool(want), place
        assert on_rev[note].visible is False and on_rev[note].value == "", place
        assert back[note].value == want and back[note].visible is bool(want), place
    hidden = [b for k, b in page.kind_bodies.items() if k in NOTES or k in NOT_YET]
    bodies = [page.wi_box, page.part("labs").blocked, *hidden]
    assert all(on_dec[b].visible is False and on_rev[b].visible is True for b in bodies)
    assert all(back[b].visible is False for b in bodies)
    assert on_dec[page.input_text].label == "Prompt" and on_rev[page.input_text].label == "Input"
    assert on_rev[page.reference] == "dlrowolleh" and back[page.reference] == PROMPT
    assert [c[0] for c in on_dec[page.part("labs").mask_kind].choices] == ["auto", "decoder_self"]
    assert [c[0] for c in on_dec[page.part("compare").compare_kind].choices] == ["decoder_self"]
    assert on_dec[page.part("compare").compare_kind].value == "decoder_self"
    assert (
        on_rev[page.part("compare").compare_kind].value == "cross"
        and len(on_rev[page.part("compare").compare_kind].choices) == 3
    )
    assert (
        "causal mask off" in on_dec[page.part("labs").mask_intro]
        and "source" not in on_dec[page.part("labs").mask_intro]
    )
    assert "hide source tokens" in on_rev[page.part("labs").mask_intro]
    assert "self-attention on the prompt" in on_dec[page.part("labs").attr_layer].label
    assert "cross-attention" in on_rev[page.part("labs").attr_layer].label


def test_the_beam_legend_names_the_attention_a_node_draws(stepped, models_dir):
    b = beamview.beam_view(stepped, 3)
    assert "causal self-attention" in b.html and "cross-attention" not in b.html
    rev = session.choose_model(stepped, "reverse", "helloworld").state
    assert "hypothesis's cross-attention" in beamview.beam_view(rev, 3).html


def _esc(text: str) -> str:
    import html

    return html.escape(text)
