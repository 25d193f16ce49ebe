"""The app's panel registry (attnviz.app.panels) and its one input object (attnviz.app.inputs):
every registered panel is on the page and followed by loops over the registry; a panel that is
one module of app/panels is laid out, wired and followed from its registration line alone."""

from __future__ import annotations

import dataclasses

import pytest

import attnviz
from attnviz.app import inputs, session
from attnviz.app.pagetext import STALE
from attnviz.app.panels import BY_NAME, PANELS
from attnviz.app.state import panel_stamps
from attnviz.core.errors import InputError


@pytest.fixture(scope="module")
def page():
    """A Page built in a Blocks (not launched)."""
    import gradio as gr

    from attnviz.app import ui

    with gr.Blocks():
        return ui.Page(session.new_state(None, "cpu"))


def _follow(page, state, stamps_shown, active):
    given = {page.state: state, page.stamps: stamps_shown, page.active: active,
             page.wi_open: False, page.wi_heads: [], page.part("labs").blocked: [], page.theme: "light",
             page.reference: ""}  # fmt: skip
    return page.follow(*(given.get(c) for c in page.follow_inputs()))


def test_every_registered_panel_has_one_face_and_one_stamp(page):
    names = [p.name for p in PANELS]
    assert len(names) == len(set(names)) == len(BY_NAME)
    assert set(page.faces) == set(names)  # the page checks it too, as it is built
    assert set(panel_stamps(session.new_state())) == set(names)
    outs = {id(c) for c in page.lab_outputs()}
    assert all(id(c) in outs for f in page.faces.values() for c in f.outputs)
    controls = {id(c) for c in page.control_outputs()}
    assert all(id(c) in controls for f in page.faces.values() for c in f.control_outputs)
    for panel in PANELS:  # a panel that follows in view has a rerun; every other a clear
        face = page.faces[panel.name]
        assert face.rerun if (panel.in_view or panel.renew or panel.rerun_when) else True
        assert face.clear or panel.renew, panel.name


def test_follow_loops_over_the_registry(page, models_dir):
    s = session.start(session.new_state(str(models_dir / "reverse")), "helloworld").state
    s = session.step(s).state
    shown = {k: panel_stamps(s)[k] for k in ("attr", "export", "beam", "ablate")}
    nxt = session.step(s).state  # the step moved: attr and export are stale, the input is not
    out = _follow(page, nxt, shown, "step")
    assert (
        out[page.part("labs").attr_msg] == STALE and out[page.part("export").exp_msg] == STALE
    )  # export: app/panels
    assert out[page.stamps] == {k: shown[k] for k in ("beam", "ablate")}
    new = session.start(nxt, "abc").state
    assert _follow(page, new, shown, "step")[page.part("labs").ablate_msg] == STALE


def test_a_panel_module_is_laid_out_from_its_registration():
    from attnviz.app import ui
    from attnviz.app.panels import export

    assert BY_NAME["export"].page == "export" and export in ui.panel_pages()
    for name in ("layout", "wire", "faces"):
        assert callable(getattr(export, name))


def test_one_input_object_per_kind(models_dir):
    rev = attnviz.load_checkpoint(models_dir / "reverse")
    bert = attnviz.load_checkpoint(models_dir / "reverse-bert")
    assert inputs.input_of(rev) is inputs.TEXT and inputs.input_of(bert) is inputs.SENTENCE
    assert inputs.TEXT.decodes and not inputs.SENTENCE.decodes
    with pytest.raises(InputError, match="generates nothing"):
        inputs.SENTENCE.refuse_decoding()
    assert not inputs.CLIP.applies(rev, "mask") and inputs.TEXT.applies(rev, "mask")
    assert inputs.given(rev, "text", "clip.wav") == "text"


def test_one_fresh_state_builder(models_dir):
    rev = attnviz.load_checkpoint(models_dir / "reverse")
    old = dataclasses.replace(session.new_state(), tokens=[3, 4], step=2, forced=[1], epoch=4)
    s = inputs.start(old, rev, "helloworld", version=7)
    assert (s.epoch, s.step, s.tokens, s.forced, s.page_rows, s.version) == (5, 0, [], [], -1, 7)
    assert s.sid and s.max_steps == rev.limit(len(s.src_ids)) and s.eos_id == rev.decoding.eos_id
    with pytest.raises(InputError, match="empty"):
        inputs.start(old, rev, "  ", version=7)
    gone = inputs.cleared(s, "other")
    assert gone.src_ids == [] and gone.text == "other" and gone.epoch == 6 and gone.sid == s.sid
    assert inputs.cleared(s, "helloworld") is s  # the same input: nothing to clear
