"""Health and export on a decoder-only model's one sequence, through the app."""

from __future__ import annotations

from helpers import induction_fixture, stepped_fixture  # noqa: F401 (fixtures)

from attnviz.app.panels import export as export_panel
from attnviz.app.panels import health as health_panel


def test_health_and_export_run_on_the_one_sequence(stepped, tmp_path):
    view = health_panel.health(stepped)
    assert "Health check passed" in view.message
    assert {t.name for t in view.figures[0].data} == {"decoder_self"}  # head roles: one kind
    for what in ("json", "npz", "html"):
        out = export_panel.export(stepped, what)
        assert out.path and out.path.endswith(f".{what}"), out.message
    import json
    from pathlib import Path

    doc = json.loads(Path(export_panel.export(stepped, "json").path).read_text())
    assert {k.split(".")[0] for k in doc["attention"]} == {"decoder_self"}
