"""The command line: help, one-line errors, and the demo end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnviz.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_help_lists_commands():
    out = run("--help")
    assert out.returncode == 0 and "demo" in out.stdout and "app" in out.stdout


def test_bad_text_is_one_line_on_stderr(capsys):
    assert main(["demo", "--text", "Hello!", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnviz: error: the demo model reads only a-z; got '!H'"


@pytest.mark.slow
def test_demo_trains_and_reverses():
    out = run("demo", "--text", "abcdef", "--steps", "600")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "output: fedcba" in out.stdout
    assert "step  0: f" in out.stdout
