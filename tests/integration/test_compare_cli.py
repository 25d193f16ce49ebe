"""attnviz compare on the command line."""

from __future__ import annotations

import json

from attnviz.cli import main


def test_compare_a_checkpoint_with_itself(models_dir, tmp_path, capsys):
    out_json, out_html = tmp_path / "c.json", tmp_path / "c.html"
    rev = str(models_dir / "reverse")
    code = main(
        [
            "compare",
            rev,
            rev,
            "--text",
            "abc",
            "--text",
            "helloworld",
            "--json",
            str(out_json),
            "--html",
            str(out_html),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "agree on 2 of 2 (100 %)" in text
    data = json.loads(out_json.read_text())
    assert all(x == 0 for rows in data["divergence"]["cross"] for x in rows)
    page = out_html.read_text()
    assert "<h2>cross</h2>" in page and "helloworld" in page


def test_compare_two_tasks_finds_changed_heads(models_dir, capsys):
    code = main(
        ["compare", str(models_dir / "reverse"), str(models_dir / "copy"), "--text", "helloworld"]
    )
    text = capsys.readouterr()
    if code == 2:  # the shipped models may use different vocabularies: one line says so
        assert "differ" in text.err and text.err.count("\n") == 1
        return
    assert code == 0
    assert "agree on 0 of 1" in text.out
    assert "most changed" in text.out


def test_compare_without_text_uses_the_task_test_inputs(models_dir, capsys):
    rev = str(models_dir / "reverse")
    assert main(["compare", rev, rev]) == 0
    assert "on 20 input(s)" in capsys.readouterr().out
