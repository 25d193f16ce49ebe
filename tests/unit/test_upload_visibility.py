"""An uploaded model's name is its session's own: other sessions' menus never list it, and
their look-ups of the name do not reach it (#39)."""

from __future__ import annotations

from helpers import MODELS, zipped

from attnviz.app import session, store, uploads


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
