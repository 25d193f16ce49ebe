"""The command line: help, one-line errors, and stepping through a shipped model."""

from __future__ import annotations

import subprocess
import sys

from attnviz.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_help_lists_commands():
    out = run("--help")
    assert out.returncode == 0
    for command in ("app", "train", "evaluate"):
        assert command in out.stdout


def test_app_steps_through_the_shipped_reverse_model():
    out = run("app", "--text", "helloworld")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "output: dlrowolleh" in out.stdout
    assert "step  0: d" in out.stdout and "looks most at input position" in out.stdout


def test_unknown_characters_are_reported_not_dropped(capsys):
    assert main(["app", "--text", "ab!c"]) == 0
    assert "read as <unk>: !" in capsys.readouterr().out


def test_bad_input_is_one_line_on_stderr(capsys):
    assert main(["app", "--text", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnviz: error: the input is empty: type something to run the model on"
    assert main(["app", "--model", "/nonexistent"]) == 2
    assert capsys.readouterr().err.startswith("attnviz: error: no checkpoint at /nonexistent")


def test_evaluate_prints_exact_match_per_length(capsys):
    assert main(["evaluate", "models/reverse", "--per-length", "3"]) == 0
    out = capsys.readouterr().out
    assert "length  20:" in out and "exact match on test:" in out
