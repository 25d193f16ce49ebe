"""Health and export on a decoder-only model's one sequence, through the app."""

from __future__ import annotations

import pytest

from attnviz.app import (
    panels,
    session,
)

PROMPT = "qXb3LmZ7tRw2Kp9"


@pytest.fixture(scope="module")
def induction(models_dir):
    return str(models_dir / "induction")


@pytest.fixture(scope="module")
def stepped(induction):
    s = session.start(session.new_state(induction), PROMPT).state
    for _ in range(3):
        s = session.step(s).state
    return s


def test_health_and_export_run_on_the_one_sequence(stepped, tmp_path):
    view = panels.health(stepped)
    assert "Health check passed" in view.message
    assert {t.name for t in view.figures[0].data} == {"decoder_self"}  # head roles: one kind
    for what in ("json", "npz", "html"):
        out = panels.export(stepped, what)
        assert out.path and out.path.endswith(f".{what}"), out.message
    import json
    from pathlib import Path

    doc = json.loads(Path(panels.export(stepped, "json").path).read_text())
    assert {k.split(".")[0] for k in doc["attention"]} == {"decoder_self"}
