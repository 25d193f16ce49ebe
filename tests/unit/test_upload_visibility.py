"""An uploaded model's name is its session's own: other sessions' menus never list it, and
their look-ups of the name do not reach it (#39)."""

from __future__ import annotations

from helpers import MODELS, zipped

from attnviz.app import session, store, uploads
from attnviz.app.panels import compare


def test_an_upload_is_in_its_own_sessions_menu_only(tmp_path):
    a = session.upload_model(
        session.new_state(), [zipped(MODELS / "reverse", tmp_path / "mine.zip")]
    ).state
    b = session.new_state()  # another tab, on a shipped model
    try:
        name = store.model_name(a.model)
        assert name in store.menu(a.model)  # the uploader's menu (its model is the upload)
        assert name in store.menu(owner=a.sid)  # ... and after it picks a shipped model
        assert name not in store.menu()  # the page as first drawn
        assert name not in store.menu(b.model)  # a session on a shipped model
        assert name not in store.menu(b.model, owner="0" * 32)  # another session's id
        assert store.resolve_model(name, owner=a.sid) == a.model
        assert store.resolve_model(name, owner="0" * 32) == name  # not found: no folder
        assert set(store.shipped_models()) <= set(store.menu(b.model))
    finally:
        uploads.end_session(a.sid)
    assert name not in store.menu(owner=a.sid)  # deleted with its session


def test_another_session_cannot_choose_an_upload_and_its_owner_keeps_it(tmp_path):
    a = session.upload_model(
        session.new_state(), [zipped(MODELS / "reverse", tmp_path / "theirs.zip")]
    ).state
    b = session.start(session.new_state(store.shipped_models()["copy"]), "abc").state
    try:
        name, folder = store.model_name(a.model), a.model
        assert name not in compare.model_choices(b)  # the Compare tab's menu
        for asked in (name, folder):  # by its menu name, or by the folder behind it
            view = session.choose_model(b, asked)
            assert view.state.model == b.model and view.state.text == "abc"
            assert "not in this session" in view.message or "no checkpoint" in view.message
            assert str(store.private_dir("uploads")) not in view.message
            assert compare.compare(b, asked).message.startswith("⚠")
        # the owner switches to a shipped model and back by the upload's name
        shipped = session.choose_model(a, "copy").state
        assert shipped.model == store.shipped_models()["copy"]
        assert name in store.menu(shipped.model, owner=shipped.sid)
        back = session.choose_model(shipped, name).state
        assert back.model == folder and not back.model.startswith(name)
        assert name in compare.model_choices(back)
    finally:
        uploads.end_session(a.sid)


def test_model_b_uploaded_is_its_sessions_own(tmp_path):
    started = session.start(session.new_state(), "abc").state
    fresh = session.new_state()
    name, why = compare.upload_b([zipped(MODELS / "copy", tmp_path / "b.zip")], owner=started.sid)
    try:
        assert name and not why
        assert name in compare.model_choices(started)
        assert name not in compare.model_choices(session.start(fresh, "abc").state)
        assert compare.upload_b([str(tmp_path / "b.zip")], owner="")[1].startswith("⚠ type")
    finally:
        uploads.end_session(started.sid)


def test_a_name_neither_in_the_menu_nor_a_folder_is_refused_without_a_path():
    b = session.start(session.new_state(store.shipped_models()["copy"]), "abc").state
    view = session.choose_model(b, "no-such-model")
    assert view.state.model == b.model and view.state.text == "abc"
    assert "not in this session" in view.message  # (the page's text, HTML-escaped)
    assert "/" not in view.message
