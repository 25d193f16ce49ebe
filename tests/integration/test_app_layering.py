"""The app's layering, checked in fresh interpreters: the modules import in one direction and the session layer never imports gradio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attnviz.app import session

# -- models and uploads --------------------------------------------------------------------------


def test_session_layer_does_not_import_gradio():
    code = (
        "import sys, attnviz.app.session, attnviz.app.panels.labs, attnviz.app.panels, "
        "attnviz.app.panels.health, attnviz.app.panels.playback, attnviz.app.panels.export, "
        "attnviz.app.panels.alignment, "
        "attnviz.app.server, attnviz.bench.app, attnviz.bench.suite; "
        "assert 'gradio' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# -- what the page is sent ----------------------------------------------------------------------


def _name(path: Path, app: Path) -> str:
    """``views`` for app/views.py, ``panels.health`` for app/panels/health.py."""
    rel = path.relative_to(app).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__") or "__init__"


def _app_imports(path: Path, app: Path) -> set[str]:
    """The attnviz.app modules ``path`` imports, at the top or inside a function (by
    :func:`_name`; ``from . import x`` inside a package names ``package.x``)."""
    import ast

    here = _name(path, app).split(".")
    package = here if path.stem == "__init__" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = package[: len(package) - node.level + 1] if node.level > 1 else package
            base = [b for b in base if b != "__init__"]
            if node.module:
                found.add(".".join([*base, node.module]))
            else:
                found |= {".".join([*base, a.name]) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnviz.app."):
            found.add(node.module.removeprefix("attnviz.app."))
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("attnviz.app.") for a in node.names
                      if a.name.startswith("attnviz.app.")}  # fmt: skip
    return found - {_name(path, app)}


def test_app_modules_import_in_one_direction():
    app = Path(session.__file__).parent
    files = [p for p in app.rglob("*.py") if "__pycache__" not in p.parts]
    names = {_name(p, app) for p in files}

    def known(mod: str) -> str | None:  # "panels.health.health" (a name from it) -> the module
        while mod and mod not in names:
            mod = mod.rpartition(".")[0]
        return mod or None

    graph = {_name(p, app): {m for d in _app_imports(p, app) if (m := known(d))} - {_name(p, app)}
             for p in files}  # fmt: skip
    assert "session" not in graph["state"] and "views" not in graph["state"]
    # the decoders ask the state and leaves only (the LRU map: what imports at most the state)
    assert (
        all(d == "state" or graph[d] <= {"state"} for d in graph["decoders"])
        and "session" not in graph["views"]
    )
    assert graph["lru"] == set()  # the LRU map is a leaf: every room of the app may import it
    # the panel registry is light: the stamps (and so the session layer) may ask it
    assert graph["panels.registry"] <= {"state"} and graph["panels"] <= {"panels.registry"}

    def reach(mod: str, seen: frozenset = frozenset()) -> None:
        for dep in graph[mod]:
            assert dep not in seen | {mod}, f"import cycle: {' -> '.join([*seen, mod, dep])}"
            reach(dep, seen | {mod})

    for mod in graph:
        reach(mod)
    code = (
        "import sys, importlib\n"
        "for m in ('state', 'decoders', 'views', 'session', 'server'):\n"
        "    for k in [k for k in sys.modules if k.startswith('attnviz')]: del sys.modules[k]\n"
        "    importlib.import_module('attnviz.app.' + m)\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
