"""The package's layout: layers as packages, imports one way, no cycle, no private name taken
from another module. The graph is read with ``ast`` from every import statement, module-level,
function-level and typing-only alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "attnviz"

#: What each layer may import (besides itself). Reading down the list, each layer builds only on
#: the ones above it: core <- data <- decode <- checkpoint <- interop/train <- analysis <- render
#: <- app <- cli <- bench.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "data": {"core"},
    "decode": {"core", "data"},
    "checkpoint": {"core", "data", "decode"},
    "interop": {"core", "data", "decode", "checkpoint"},
    "train": {"core", "data", "decode", "checkpoint"},
    "analysis": {"core", "data", "decode", "checkpoint", "train"},
    "render": {"core", "data", "decode", "checkpoint", "train", "analysis"},
    "app": {"core", "data", "decode", "checkpoint", "interop", "train", "analysis", "render"},
    "cli": {
        "core",
        "data",
        "decode",
        "checkpoint",
        "interop",
        "train",
        "analysis",
        "render",
        "app",
        "bench",
    },  # fmt: skip
    "bench": {
        "core",
        "data",
        "decode",
        "checkpoint",
        "interop",
        "train",
        "analysis",
        "render",
        "app",
    },  # fmt: skip
}
#: The only modules at the package root; everything else lives in a layer's package.
ROOT_MODULES = {"__init__.py", "checkpoint.py"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """``(module imported, name taken from it or None, line)`` for every import in ``name``."""
    path = MODULES[name]
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:  # `from . import module`
                    found.append((full, None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None, node.lineno) for alias in node.names)
    out = []
    for target, taken, line in found:
        while target not in MODULES and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in MODULES and target != name and target.startswith("attnviz"):
            out.append((target, taken, line))
    return out


GRAPH = {name: _imports(name) for name in MODULES}


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def test_the_root_holds_only_the_facade_and_layer_packages():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ROOT_MODULES)
    assert loose == [], f"modules at the package root: {loose}"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS) - {"checkpoint"}


@pytest.mark.parametrize("package", sorted(set(LAYERS) - {"checkpoint"}))
def test_each_package_says_what_lives_there(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc and len(doc) > 60, f"attnviz/{package}/__init__.py needs a docstring"


def test_no_import_cycle():
    """Tarjan's strongly connected components over module- and function-level imports; a
    package's ``__init__`` re-exporting its own modules is the only edge into a package."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in GRAPH:
        if name not in index:
            visit(name)
    assert cycles == [], f"import cycles: {cycles}"


def test_imports_go_one_way_between_layers():
    wrong = []
    for name, imports in GRAPH.items():
        mine = _layer(name)
        if mine is None:  # attnviz/__init__.py re-exports the public API from every layer
            continue
        for target, _, line in imports:
            theirs = _layer(target)
            if theirs is not None and theirs != mine and theirs not in LAYERS[mine]:
                wrong.append(
                    f"{MODULES[name].relative_to(PACKAGE.parent)}:{line} {mine} -> {theirs}"
                )
    assert wrong == [], "imports against the layering:\n" + "\n".join(wrong)


def test_no_private_name_is_taken_from_another_module():
    taken = [
        f"{MODULES[name].relative_to(PACKAGE.parent)}:{line} {target}.{what}"
        for name, imports in GRAPH.items()
        for target, what, line in imports
        if what and what.startswith("_") and not what.startswith("__")
    ]
    assert taken == [], "private names imported across modules:\n" + "\n".join(taken)


def test_gradio_is_imported_only_by_the_app():
    outside = []
    for name, path in MODULES.items():
        if name.startswith("attnviz.app"):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                )
                if any(m and m.split(".")[0] == "gradio" for m in mods):
                    outside.append(name)
    assert outside == []


def test_every_internal_import_names_a_module_that_exists():
    """A function-level import of a module that moved fails only when that function runs;
    this finds it from the source."""
    missing = []
    for name, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnviz"):
                target = node.module
            else:
                continue
            if target not in MODULES:
                missing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {target}")
    assert missing == [], "imports of modules that do not exist:\n" + "\n".join(missing)


def test_every_name_imported_from_attnviz_exists():
    """``from .module import name`` inside a function fails only when it runs: every name taken
    from an attnviz module must be there (or be a submodule)."""
    import importlib
    import importlib.util

    missing = []
    for name, imports in GRAPH.items():
        for target, what, line in imports:
            if what is None or what == "*":
                continue
            module = importlib.import_module(target)
            if not hasattr(module, what) and importlib.util.find_spec(f"{target}.{what}") is None:
                missing.append(
                    f"{MODULES[name].relative_to(PACKAGE.parent)}:{line} {target}.{what}"
                )
    assert missing == [], "names imported that do not exist:\n" + "\n".join(missing)
