"""The app on an encoder-only model (a tiny random BERT), without a browser: Read shows the
self-attention and fillers of fill_mask's own pass, the places that decode refuse in their
one sentence, and switching back to models/reverse restores the decoding view."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from helpers import tiny_bert

from attnviz.analysis import fill_mask
from attnviz.app import lenses, session
from attnviz.app.inputs import ENCODER_LABS, ENCODER_NOT_YET, ENCODER_NOTES, input_label, note
from attnviz.app.panels import compare as compare_lab
from attnviz.app.panels import export as export_panel
from attnviz.app.panels import health as health_panel
from attnviz.app.panels import labs
from attnviz.app.state import checkpoint_of, describe

TEXT = "the [MASK] sat on the [MASK]"


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    tiny_bert(folder)
    return str(folder)


def f32(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=np.float32)


def test_read_shows_the_weights_and_fillers_of_fill_masks_pass(bert):
    view = session.start(session.new_state(bert), TEXT)
    ckpt = checkpoint_of(view.state)
    fill = fill_mask(ckpt, TEXT, k=5)
    p = view.payload
    assert p["started"] and p["arch"] == "encoder-only" and p["pieces"] == fill.pieces
    assert p["layers"] == {"encoder_self": 2, "decoder_self": 0, "cross": 0}
    t = len(fill.ids)
    for layer, enc in enumerate(p["encoder"]):
        want = fill.trace.numpy("encoder_self", layer)[0]  # [H, T, T]
        np.testing.assert_allclose(f32(enc["w"]).reshape(want.shape), want, atol=1e-6)
        assert enc["m"] == "0" * t * t
    assert [(f["position"], [tuple(x) for x in f["top"]]) for f in p["fillers"]] == [
        (pos, [(tok, pytest.approx(q, abs=1e-5)) for tok, q in top]) for pos, top in fill.fillers
    ]
    assert "Read 8 tokens at once" in view.message and view.output == ""
    assert session.run(view.state, TEXT).payload["fillers"] == p["fillers"]  # Read again
    figs = session.figures(view.state)
    np.testing.assert_allclose(
        figs["encoder_self"].data[0].z, fill.trace.numpy("encoder_self", 1)[0].mean(0), atol=1e-6
    )


def test_no_mask_token_reads_the_sentence_with_nothing_to_fill(bert):
    view = session.run(session.new_state(bert), "the cat sat [SEP] a dog ran")
    assert view.payload["fillers"] == [] and len(view.payload["encoder"]) == 2
    assert view.payload["no_fill"] == "no [MASK] in the input: nothing to fill"
    assert "nothing to fill" in view.message and view.payload["types"][-1] == 1


def test_what_does_not_apply_says_why_in_one_sentence(bert):
    view = session.start(session.new_state(bert), TEXT)
    ckpt = checkpoint_of(view.state)
    assert input_label(ckpt) == "Sentence (or a pair: first [SEP] second; [MASK] to fill)"
    assert "encoder-only, 2 layers, 4 heads, d_model 32" in describe(view.state)
    for action in (session.step, session.back, session.reset):
        out = action(view.state)
        assert out.message.startswith("⚠ " + ENCODER_NOTES["decode"][:40])
    assert session.beam(view.state).startswith("⚠ " + ENCODER_NOTES["beam"][:40])
    assert session.force(view.state, 3).message.startswith("⚠ Step, Back")
    for place in ("whatif", "align", "mask", "reference", "step", "contrast"):
        assert note(ckpt, place) == ENCODER_NOTES[place]
    for lab in ENCODER_LABS:
        assert note(ckpt, lab) == ""
    masklab = labs.mask_lab(view.state, True, False, [])
    assert masklab.message.startswith("⚠ " + ENCODER_NOT_YET)
    assert labs.contrast(view.state).message.startswith("⚠ " + ENCODER_NOTES["contrast"][:40])


def test_every_lab_runs_on_the_sentence_read(bert, models_dir):
    state = session.start(session.new_state(bert), TEXT).state
    fill = fill_mask(checkpoint_of(state), TEXT, k=1)
    tops = [top[0][0] for _, top in fill.fillers]
    v = labs.ablation(state, ["encoder_self L0 H1", "encoder_self L1 H2"])
    assert not v.message.startswith("⚠") and "largest probability drop" in v.message
    labels = [f"{pos}:{t}" for (pos, _), t in zip(fill.fillers, tops, strict=True)]
    assert list(v.figures[0].data[0].customdata) == labels
    ranked = labs.rank_heads(state)
    assert len(ranked.rows) == 8 and ranked.rows[0][0].startswith("encoder_self L")
    # the table keeps the size the chart draws (a random model's effects are ~1e-5)
    drawn = ranked.figures[0].data[0].x[0]
    assert drawn > 0 and ranked.rows[0][2] == pytest.approx(drawn, rel=1e-3)
    assert ranked.message.count("No head matters much") == 1  # not "most important" at 1e-5
    attr = labs.attribution(state, "L1")
    assert attr.message.startswith(
        f"Explaining the top filler at the first mask token: “{tops[0]}”"
    )
    assert len(attr.figures) == 2 and len(attr.figures[0].data[0].y) == len(fill.ids)
    health = health_panel.health(state)
    assert "Health check passed" in health.message and "does not apply" in health.message
    assert health.figures[0].data
    for what in ("json", "npz", "html"):
        out = export_panel.export(state, what)
        assert out.path and out.path.endswith(f"-read.{what}"), out.message  # no steps
    lens = lenses.payload(state, "rollout")["lens"]
    assert "error" not in lens and len(lens["kinds"]["encoder_self"]) == 2
    roll = f32(lens["kinds"]["encoder_self"][1]["w"]).reshape(len(fill.ids), len(fill.ids))
    np.testing.assert_allclose(roll.sum(-1), 1.0, atol=1e-5)
    cmp = compare_lab.compare(state, bert, "encoder_self", "L1", "H0")
    assert not cmp.message.startswith("⚠") and "No head differs" in cmp.message
    assert len(cmp.grids) == 1 and 'data-kind="encoder_self"' in cmp.grid_html
    assert "A's top filler at each mask token" in cmp.tokens_html
    where = [f"position {p} ·" for p, _ in fill.fillers]  # each chip names its mask
    assert all(w in cmp.tokens_html for w in where)
    at = [p for p, _ in fill.fillers]
    apart = any(b != a + 1 for a, b in zip(at, at[1:], strict=False))
    assert ('class="av-cmp-gap"' in cmp.tokens_html) == apart
    other = compare_lab.compare(state, str(models_dir / "reverse"))
    assert (
        other.message == "⚠ A is encoder-only and B is encoder-decoder: Compare lines up "
        "two models of one kind head by head; pick a B of A&#x27;s kind"
    )


def test_a_lab_refuses_bad_input_in_one_line_and_keeps_the_state(bert):
    state = session.run(session.new_state(bert), "the cat sat [SEP] a dog ran").state
    before = (state.text, state.src_ids, state.epoch)
    attr = labs.attribution(state, "L0")
    assert (
        attr.message == "⚠ write [MASK] where a token should be filled in, e.g. “the cat "
        "sat on the [MASK] .”"
    )
    assert labs.ablation(state, []).message == "⚠ tick at least one head to switch off"
    assert not labs.ablation(state, ["encoder_self L0 H0"]).message.startswith("⚠")
    assert labs.attribution(state, "L9").message.startswith("⚠ layer must be one of [0, 1]")
    assert (state.text, state.src_ids, state.epoch) == before


def test_switching_back_to_an_encoder_decoder_restores_decoding(bert, models_dir):
    view = session.start(session.new_state(bert), TEXT)
    back = session.choose_model(view.state, str(models_dir / "reverse"), "helloworld")
    assert back.payload["arch"] == "encoder-decoder" and "fillers" not in back.payload
    assert note(checkpoint_of(back.state), "decode") == ""
    stepped = session.step(back.state)
    assert stepped.state.step == 1 and not stepped.message.startswith("⚠")
    again = session.choose_model(stepped.state, bert, TEXT)
    assert again.payload["arch"] == "encoder-only" and again.payload["fillers"]


def test_the_page_hides_what_decodes_and_reads_with_read(bert, models_dir):
    import gradio as gr

    from attnviz.app import ui

    with gr.Blocks():
        page = ui.Page(session.new_state(None, "cpu"))
    state = session.start(session.new_state(bert), TEXT).state
    on_bert = page.controls(state)
    on_rev = page.controls(session.choose_model(state, "reverse", "helloworld").state)
    for part in page.decoding_parts():
        assert on_bert[part].visible is False and on_rev[part].visible is True
    assert on_bert[page.run_btn].value == "Read ▶" and on_rev[page.run_btn].value == "Run ▶▶"
    for place, md in page.kind_notes.items():  # each hidden part says why (patching runs)
        said = note(checkpoint_of(state), place)
        assert on_bert[md].visible is bool(said) and on_bert[md].value == said
        assert bool(said) is (place != "patch") and on_rev[md].visible is False
    assert on_bert[page.input_text].label.startswith("Sentence (or a pair")
    assert on_bert[page.part("labs").attr_btn].value == "Attribute the filler at the first mask"
    assert on_rev[page.part("labs").attr_btn].value == "Attribute the newest token"
    assert on_bert[page.part("labs").attr_src].label.startswith("the sentence")
    assert on_rev[page.part("labs").attr_src].label == "source"
    assert on_rev[page.part("labs").attr_tgt].label == "previous tokens"
    assert on_rev[page.input_text].label == "Input"
    # the mask lab and the contrast are hidden whole, their sentence shown in their place
    assert (
        on_bert[page.part("labs").mask_body].visible is False
        and on_rev[page.part("labs").mask_body].visible is True
    )
    body = page.kind_bodies["contrast"]
    assert on_bert[body].visible is False and on_rev[body].visible is True
