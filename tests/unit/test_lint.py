"""The code stays ruff-clean (ruff is part of the test extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed")
    out = subprocess.run(
        [ruff, "check", "attnviz", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_page_script_defines_each_function_once():
    """Two ``AV.name = function`` in ``assets/viz.js`` silently replace one another (the
    step view's CSV export and the static views' once shared a name)."""
    import collections
    import re

    text = (ROOT / "assets" / "viz.js").read_text()
    for pattern in (r"^\s*AV\.(\w+) = function", r"^  function (\w+)\s*\("):  # AV, own scope
        names = re.findall(pattern, text, re.M)
        twice = [n for n, c in collections.Counter(names).items() if c > 1]
        assert names and not twice, f"defined twice in viz.js: {twice}"


def test_the_suite_sees_a_tracked_file_it_changed(tmp_path):
    """The session-finish check in conftest.py fails a run that changed a tracked file; here
    its look-up on a scratch repository: a committed file rewritten shows, an untracked one not."""
    from helpers import tracked_changes

    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    run = lambda *a: subprocess.run([git, *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "shot.png").write_bytes(b"old")
    run("add", "shot.png")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    assert tracked_changes(tmp_path) == {}
    (tmp_path / "scratch.json").write_text("{}")
    assert tracked_changes(tmp_path) == {}
    (tmp_path / "shot.png").write_bytes(b"new")
    assert list(tracked_changes(tmp_path)) == ["shot.png"]


def _test_files() -> list[Path]:
    return sorted((ROOT / "tests").rglob("*.py"))


def test_every_pytest_raises_says_which_message_it_expects():
    """``pytest.raises(E)`` alone passes on any ``E``, the wrong one included: ``match=``."""
    import ast

    bare = []
    for path in _test_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "raises"
                and getattr(node.func.value, "id", "") == "pytest"
                and not any(k.arg == "match" for k in node.keywords)
            ):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, f"pytest.raises without match=: {bare}"


def test_no_section_heading_in_the_tests_is_empty():
    """A ``# -- heading ---`` comment followed by another heading or by the end of the file
    heads nothing."""
    import re

    banner = re.compile(r"^\s*# ?(-{2,}|={2,}).*|^\s*# .*-{4,}\s*$")
    empty = []
    for path in _test_files():
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        for i, line in enumerate(lines):
            if banner.match(line) and (i + 1 == len(lines) or banner.match(lines[i + 1])):
                empty.append(f"{path.relative_to(ROOT)}: {line.strip()[:60]}")
    assert not empty, f"section headings with nothing under them: {empty}"
