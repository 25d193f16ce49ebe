"""Random unicode through the app session: a clear message, never a crash."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnviz.app import session

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@given(text=st.text(max_size=40))
@SETTINGS
def test_random_unicode_through_the_app_session(models_dir, text):
    state = session.new_state(str(models_dir / "reverse"))
    view = session.start(state, text)
    view = session.step(view.state)
    if text.strip():  # any text runs (unknown characters as <unk>): exactly one step taken
        assert view.state.step == 1 and len(view.state.tokens) == 1, view.message
        assert view.info["step"] == 1 and isinstance(view.output, str)
    else:
        assert view.message and view.state.step == 0  # a hint, not an exception
    for fig in view.figures.values():
        data = fig.to_plotly_json()["data"]
        for trace in data:
            z = trace.get("z")
            if z is not None and not isinstance(z, dict):
                arr = np.asarray(z, dtype=float)
                assert not np.isinf(arr).any()
