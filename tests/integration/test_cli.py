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
    for command in ("app", "step", "train", "evaluate", "inspect", "check"):
        assert command in out.stdout


def test_step_decodes_the_shipped_reverse_model_in_the_terminal():
    out = run("step", "--text", "helloworld")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "output: dlrowolleh" in out.stdout
    assert "step  0: d" in out.stdout and "looks most at input position" in out.stdout


def test_unknown_characters_are_reported_not_dropped(capsys):
    assert main(["step", "--text", "ab!c"]) == 0
    assert "read as <unk>: !" in capsys.readouterr().out


def test_bad_input_is_one_line_on_stderr(capsys):
    assert main(["step", "--text", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnviz: error: the input is empty: type something to run the model on"
    assert main(["step", "--model", "/nonexistent"]) == 2
    assert capsys.readouterr().err.startswith("attnviz: error: no checkpoint at /nonexistent")


def test_evaluate_prints_exact_match_per_length(capsys):
    assert main(["evaluate", "models/reverse", "--per-length", "3"]) == 0
    out = capsys.readouterr().out
    assert "length  20:" in out and "exact match on test:" in out


def test_app_has_its_own_options_and_refuses_a_bad_model(capsys):
    out = run("app", "--help")
    assert out.returncode == 0 and "--host" in out.stdout and "--no-browser" in out.stdout
    assert main(["app", "--model", "/nonexistent", "--no-browser"]) == 2
    assert "no checkpoint at /nonexistent" in capsys.readouterr().err


def test_debug_shows_the_traceback_and_unknown_options_fail_cleanly():
    quiet = run("step", "--model", "/nonexistent")
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    loud = run("--debug", "step", "--model", "/nonexistent")
    assert loud.returncode != 0 and "Traceback" in loud.stderr and "CheckpointError" in loud.stderr
    unknown = run("train", "--task", "reverse", "--no-such-option")
    assert unknown.returncode == 2 and "unrecognized arguments" in unknown.stderr
    assert "Traceback" not in unknown.stderr
