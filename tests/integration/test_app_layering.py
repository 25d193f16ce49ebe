"""The app's layering, checked in fresh interpreters: the modules import in one direction and the session layer never imports gradio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attnviz.app import session

# -- step-through decoding -------------------------------------------------------------------------


# -- mask lab, ablation, attribution ----------------------------------------------------------------


# -- model-level panels -------------------------------------------------------------------------


# -- models and uploads --------------------------------------------------------------------------


def test_session_layer_does_not_import_gradio():
    code = (
        "import sys, attnviz.app.session, attnviz.app.labs, attnviz.app.panels, "
        "attnviz.app.server, attnviz.bench.app, attnviz.bench.suite; "
        "assert 'gradio' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# -- what the page is sent ----------------------------------------------------------------------


def _app_imports(path: Path) -> set[str]:
    """The attnviz.app modules ``path`` imports, at the top or inside a function."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnviz.app."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("attnviz.app.")}
    return found - {path.stem}


def test_app_modules_import_in_one_direction():
    app = Path(session.__file__).parent
    graph = {p.stem: _app_imports(p) & {q.stem for q in app.glob("*.py")} for p in app.glob("*.py")}
    assert "session" not in graph["state"] and "views" not in graph["state"]
    assert graph["decoders"] <= {"state"} and "session" not in graph["views"]

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


# -- the Attribution tab's alternatives menu and the Reference box follow the step view ---------
